"""`factgate db upgrade|downgrade|current` and `factgate tokens create|list|revoke`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from config import Settings

if TYPE_CHECKING:  # the CLI imports SQLAlchemy only in the commands that use the database
    from sqlalchemy.orm import Session, sessionmaker


@click.group()
def db() -> None:
    """Database schema (Alembic migrations)."""


@db.command("upgrade")
@click.option("--revision", default="head", show_default=True)
def db_upgrade(revision: str) -> None:
    """Migrate the configured database to REVISION."""
    import migrations

    settings = Settings.from_env()
    migrations.upgrade(settings.effective_database_url(), revision)
    click.echo(f"database at {revision}")


@db.command("downgrade")
@click.argument("revision")
def db_downgrade(revision: str) -> None:
    """Step the configured database back to REVISION (e.g. base)."""
    import migrations

    migrations.downgrade(Settings.from_env().effective_database_url(), revision)
    click.echo(f"database at {revision}")


def cli_sessions() -> sessionmaker[Session]:
    from models import make_engine, make_session_factory

    settings = Settings.from_env()
    if settings.embedded:
        import migrations

        migrations.ensure_current(settings.effective_database_url())
    return make_session_factory(make_engine(settings.effective_database_url()))


@click.group()
def tokens() -> None:
    """API tokens (bearer tokens for the HTTP API and the web pages)."""


@tokens.command("create")
@click.argument("tenant")
@click.option("--name", default=None, help="A label for the token (default: the tenant name).")
def tokens_create(tenant: str, name: str | None) -> None:
    """Create a token for TENANT (created if new). The token is printed once and never stored."""
    from jobs.tenancy import create_token
    from models import session_scope

    with session_scope(cli_sessions()) as session:
        issued = create_token(session, tenant, name)
    click.echo(issued.token)
    click.echo(
        f"tenant {issued.tenant_name}, token {issued.name} ({issued.token_id}); "
        "store it now, it is not shown again",
        err=True,
    )


@tokens.command("list")
@click.option("--tenant", default=None)
def tokens_list(tenant: str | None) -> None:
    """List tokens (display prefix only), with when each was last used (to the minute)."""
    from jobs.tenancy import list_tokens
    from models import session_scope

    with session_scope(cli_sessions()) as session:
        rows = list_tokens(session, tenant)
    for t in rows:
        state = f"revoked {t.revoked_at:%Y-%m-%d}" if t.revoked_at else "active"
        used = f"last used {t.last_used_at:%Y-%m-%d %H:%M} UTC" if t.last_used_at else "never used"
        click.echo(f"{t.token_id}  {t.prefix}…  {t.tenant_name:20}  {t.name:20}  {state:18}  {used}")


@tokens.command("revoke")
@click.argument("token_id_or_prefix")
def tokens_revoke(token_id_or_prefix: str) -> None:
    """Revoke a token by id or display prefix; the page sessions it opened end with it."""
    from jobs.sessions import end_sessions_of_revoked_tokens
    from jobs.tenancy import revoke_token
    from models import session_scope

    with session_scope(cli_sessions()) as session:
        n = revoke_token(session, token_id_or_prefix)
        ended = end_sessions_of_revoked_tokens(session) if n else 0
    if not n:
        raise click.ClickException(f"no active token {token_id_or_prefix!r}")
    click.echo("revoked")
    if ended:
        click.echo(f"ended {ended} page session(s) it had opened", err=True)
