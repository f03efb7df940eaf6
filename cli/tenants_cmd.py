"""`factgate tenants list | show NAME | set NAME [--weight W]`: how each tenant may use the upstream."""

from __future__ import annotations

import click

from cli.db_cmd import cli_sessions
from cli.errors import InputError


def _line(info: object) -> str:
    from jobs.tenancy import TenantInfo

    assert isinstance(info, TenantInfo)
    return (
        f"{info.name:24}  weight {info.weight:g}  tokens {info.tokens}  live jobs {info.live_jobs}  "
        f"since {info.created_at:%Y-%m-%d}"
    )


@click.group()
def tenants() -> None:
    """Tenants: their weight in the fair share of the upstream (created by `tokens create`)."""


@tenants.command("list")
def tenants_list() -> None:
    """Every tenant with its settings."""
    from jobs.tenancy import list_tenants
    from models import session_scope

    with session_scope(cli_sessions()) as session:  # type: ignore[arg-type]
        rows = list_tenants(session)
    if not rows:
        click.echo("no tenants yet; `factgate tokens create NAME` creates one", err=True)
    for info in rows:
        click.echo(_line(info))


@tenants.command("show")
@click.argument("name")
def tenants_show(name: str) -> None:
    """One tenant's settings."""
    from jobs.tenancy import TenantNotFoundError, tenant_info
    from models import session_scope

    try:
        with session_scope(cli_sessions()) as session:  # type: ignore[arg-type]
            info = tenant_info(session, name)
    except TenantNotFoundError as exc:
        raise InputError(str(exc)) from None
    click.echo(f"tenant   {info.name} ({info.id})")
    click.echo(f"weight   {info.weight:g}  (share of each upstream scope against other tenants with work)")
    click.echo(f"tokens   {info.tokens} active")
    click.echo(f"jobs     {info.live_jobs} live")


@tenants.command("set")
@click.argument("name")
@click.option(
    "--weight",
    type=float,
    default=None,
    help="Relative share of the upstream against other tenants with work (default 1; 2 = twice as much).",
)
def tenants_set(name: str, weight: float | None) -> None:
    """Change NAME's settings; only the options given change."""
    from jobs.tenancy import TenantNotFoundError, set_tenant
    from models import session_scope

    if weight is None:
        raise InputError("nothing to set: give --weight")
    try:
        with session_scope(cli_sessions()) as session:  # type: ignore[arg-type]
            info = set_tenant(session, name, weight=weight)
    except TenantNotFoundError as exc:
        raise InputError(str(exc)) from None
    except ValueError as exc:
        raise InputError(str(exc)) from None
    click.echo(_line(info))
