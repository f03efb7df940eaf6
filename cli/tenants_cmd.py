"""`factgate tenants list | show NAME | set NAME [...] | webhook-secret NAME`: how each tenant may use the
upstream, and where its webhooks go.

Weight (its share of every upstream scope), quotas (items per job, live jobs), daily and monthly budgets,
and an optional own upstream key — read from a file, never from the command line (which would leave it in
shell history and the process list), stored encrypted and never shown again. A default webhook URL, and
the secret webhooks are signed with (stored encrypted; printed only by `webhook-secret`, for the tenant's
receiver).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from cli.db_cmd import cli_sessions
from cli.errors import InputError
from cli.options import F

NONE_WORDS = ("none", "off", "unlimited")


def _limit(kind: type[int] | type[float]) -> Any:
    """A click converter: a number, or `none` to remove the limit."""

    class Limit(click.ParamType):  # type: ignore[type-arg]
        name = "number|none"

        def convert(self, value: Any, param: Any, ctx: Any) -> Any:
            if isinstance(value, int | float) or value is None:
                return value
            text = str(value).strip().lower()
            if text in NONE_WORDS:
                return None
            try:
                return kind(text)
            except ValueError:
                self.fail(f"{value!r} is not a number (or `none` for no limit)", param, ctx)

    return Limit()


def _limit_option(name: str, kind: type[int] | type[float], help: str) -> Callable[[F], F]:
    """An option of `tenants set` holding a limit: a number, or `none` to remove it."""
    return click.option(name, type=_limit(kind), default=None, help=help)


def _money(value: float | None) -> str:
    return "none" if value is None else f"${value:,.2f}"


def _count(value: int | None) -> str:
    return "none" if value is None else f"{value:,}"


def _line(info: Any) -> str:
    key = f"own key {info.upstream_key_fingerprint}" if info.upstream_key_fingerprint else "operator key"
    hook = "  webhook" if info.webhook_url else ""
    reuse = "" if info.reuse else "  reuse off"
    return (
        f"{info.name:24}  weight {info.weight:g}  items/job {_count(info.max_items_per_job)}  "
        f"live jobs {info.live_jobs}/{_count(info.max_active_jobs)}  day {_money(info.daily_budget_usd)}  "
        f"month {_money(info.monthly_budget_usd)}  {key}{hook}{reuse}"
    )


class _UrlOrNone(click.ParamType):  # type: ignore[type-arg]
    """A webhook URL, or `none` to remove the default."""

    name = "url|none"

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        text = str(value).strip()
        return None if text.lower() in NONE_WORDS else text


@click.group()
def tenants() -> None:
    """Tenants: weight in the fair share of the upstream, quotas, budgets, own upstream key."""


@tenants.command("list")
def tenants_list() -> None:
    """Every tenant with its settings."""
    from jobs.tenancy import list_tenants
    from models import session_scope

    with session_scope(cli_sessions()) as session:
        rows = list_tenants(session)
    if not rows:
        click.echo("no tenants yet; `factgate tokens create NAME` creates one", err=True)
    for info in rows:
        click.echo(_line(info))


@tenants.command("show")
@click.argument("name")
def tenants_show(name: str) -> None:
    """One tenant's settings, with what it has spent today and this month."""
    from jobs.quotas import day_start, month_start, spend_since
    from jobs.tenancy import TenantNotFoundError, tenant_info
    from models import session_scope, utcnow

    now = utcnow()
    try:
        with session_scope(cli_sessions()) as session:
            info = tenant_info(session, name)
            today = spend_since(session, info.id, day_start(now))
            month = spend_since(session, info.id, month_start(now))
    except TenantNotFoundError as exc:
        raise InputError(str(exc)) from None
    click.echo(f"tenant              {info.name} ({info.id})")
    click.echo(f"weight              {info.weight:g}  (share of each upstream scope against other tenants)")
    click.echo(f"max items per job   {_count(info.max_items_per_job)}")
    click.echo(f"max active jobs     {_count(info.max_active_jobs)}  ({info.live_jobs} live now)")
    click.echo(f"daily budget        {_money(info.daily_budget_usd)}  (spent today ${today:,.4f}, UTC)")
    click.echo(f"monthly budget      {_money(info.monthly_budget_usd)}  (spent this month ${month:,.4f})")
    if info.upstream_key_fingerprint:
        click.echo(
            f"upstream key        own key, fingerprint {info.upstream_key_fingerprint}, "
            f"set {info.upstream_key_set_at:%Y-%m-%d %H:%M} UTC"
        )
    else:
        click.echo("upstream key        the operator's (PERPLEXITY_API_KEY)")
    click.echo(f"webhook URL         {info.webhook_url or 'none'}  (jobs without a webhook_url option)")
    retention = (
        f"{info.retention_days} days" if info.retention_days else "the default (FACTGATE_RETENTION_DAYS)"
    )
    click.echo(f"retention           {retention} after a job ends")
    reuse = "on (identical requests of later jobs answered from stored ones)" if info.reuse else "off"
    click.echo(f"verdict reuse       {reuse}")
    if info.webhook_secret_set_at is not None:
        click.echo(
            f"webhook secret      set {info.webhook_secret_set_at:%Y-%m-%d %H:%M} UTC "
            "(`factgate tenants webhook-secret` prints it)"
        )
    else:
        click.echo(
            "webhook secret      none yet (made by the first webhook or `factgate tenants webhook-secret`)"
        )
    click.echo(f"tokens              {info.tokens} active")


@tenants.command("set")
@click.argument("name")
@click.option("--weight", type=float, default=None, help="Relative share of the upstream (default 1).")
@_limit_option("--max-items-per-job", int, "Items per job (rows × modes); `none` removes it.")
@_limit_option("--max-active-jobs", int, "Queued or running jobs at once; `none` removes it.")
@_limit_option("--daily-budget-usd", float, "Spend per UTC day; `none` removes it.")
@_limit_option("--monthly-budget-usd", float, "Spend per UTC month; `none` removes it.")
@click.option(
    "--upstream-key-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="A file holding the tenant's own Perplexity API key (its jobs then use it, at its own rate limit).",
)
@click.option("--clear-upstream-key", is_flag=True, help="Go back to the operator's key.")
@click.option(
    "--webhook-url",
    type=_UrlOrNone(),
    default=None,
    help="Where webhooks of jobs without a webhook_url option go (http or https); `none` removes it.",
)
@_limit_option(
    "--retention-days",
    int,
    "Days an ended job keeps its results (at most FACTGATE_RETENTION_MAX_DAYS); `none`: the default.",
)
@click.option(
    "--reuse",
    type=click.Choice(["on", "off"]),
    default=None,
    help="Whether requests identical to earlier ones of this tenant are answered from its verdict store.",
)
@click.pass_context
def tenants_set(  # noqa: PLR0917 - click passes every option positionally
    ctx: click.Context,
    name: str,
    weight: float | None,
    max_items_per_job: Any,
    max_active_jobs: Any,
    daily_budget_usd: Any,
    monthly_budget_usd: Any,
    upstream_key_file: Path | None,
    clear_upstream_key: bool,
    webhook_url: str | None,
    retention_days: Any,
    reuse: str | None,
) -> None:
    """Change NAME's settings; only the options given change. A number limits, `none` removes a limit."""
    from checks.webhooks import WebhookUrlError
    from config import Settings
    from jobs.keyring import KeyringError, keyring_for
    from jobs.tenancy import UNSET, TenantNotFoundError, set_tenant
    from models import session_scope

    given = {
        p.name
        for p in ctx.command.params
        if ctx.get_parameter_source(p.name or "") == click.core.ParameterSource.COMMANDLINE
    }
    changes: dict[str, Any] = {
        name_: value if name_ in given else UNSET
        for name_, value in (
            ("max_items_per_job", max_items_per_job),
            ("max_active_jobs", max_active_jobs),
            ("daily_budget_usd", daily_budget_usd),
            ("monthly_budget_usd", monthly_budget_usd),
            ("webhook_url", webhook_url),
            ("retention_days", retention_days),
        )
    }
    if not given - {"name"}:
        raise InputError(
            "nothing to set: give --weight, a quota, a budget, an upstream key option, --webhook-url, "
            "--retention-days or --reuse"
        )
    if upstream_key_file is not None and clear_upstream_key:
        raise InputError("give --upstream-key-file or --clear-upstream-key, not both")
    key: str | None = None
    keyring = None
    if upstream_key_file is not None:
        key = upstream_key_file.read_text(encoding="utf-8").strip()
        try:
            keyring = keyring_for(Settings.from_env())
        except KeyringError as exc:
            raise InputError(str(exc)) from None
    try:
        with session_scope(cli_sessions()) as session:
            info = set_tenant(
                session,
                name,
                weight=weight,
                upstream_key=key,
                clear_upstream_key=clear_upstream_key,
                keyring=keyring,
                max_retention_days=Settings.from_env().retention_max_days,
                reuse=None if reuse is None else reuse == "on",
                **changes,
            )
    except TenantNotFoundError as exc:
        raise InputError(str(exc)) from None
    except WebhookUrlError as exc:
        raise InputError(f"--webhook-url {exc}") from None
    except (ValueError, KeyringError) as exc:
        raise InputError(str(exc)) from None
    click.echo(_line(info))
    if key is not None:
        click.echo(
            f"upstream key stored encrypted (fingerprint {info.upstream_key_fingerprint}); "
            "it is not shown again",
            err=True,
        )


@tenants.command("delete")
@click.argument("name")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def tenants_delete(name: str, yes: bool) -> None:
    """Remove NAME: its tokens and page sessions end now, its live jobs are cancelled and every job of it is
    purged in the background; other tenants are untouched. Its usage roll-up (billing) is kept."""
    from config import Settings
    from jobs.purge import delete_tenant
    from jobs.tenancy import TenantNotFoundError
    from models import session_scope
    from workers.api import enqueue_finish_cancel, enqueue_purge_jobs, producer_celery

    if not yes:
        click.confirm(f"Remove tenant {name!r} and purge all its jobs? This cannot be undone", abort=True)
    try:
        with session_scope(cli_sessions()) as session:
            done = delete_tenant(session, name)
    except TenantNotFoundError as exc:
        raise InputError(str(exc)) from None
    # After the commit; if the broker is unreachable, the sweeper and beat's purge find the same work.
    try:
        celery = producer_celery(Settings.from_env())
        for job_id in done.jobs_cancelled:
            enqueue_finish_cancel(celery, job_id)
        enqueue_purge_jobs(celery)
    except Exception:
        click.echo("could not reach the queue: the sweeper and the next purge will do it", err=True)
    click.echo(
        f"tenant {name} removed: {done.tokens_revoked} tokens revoked, {done.sessions_ended} sessions ended, "
        f"{len(done.jobs_cancelled)} live jobs cancelled, {done.jobs_deleted} jobs deleted; their rows are "
        "purged in the background"
    )


@tenants.command("webhook-secret")
@click.argument("name")
@click.option("--rotate", is_flag=True, help="Replace the secret with a new one (the old one stops working).")
def tenants_webhook_secret(name: str, rotate: bool) -> None:
    """Print NAME's webhook signing secret (`whsec_...`), creating it if it has none; --rotate replaces it.

    Give it to the tenant's receiver, which checks each webhook's `webhook-signature` with it
    (docs/operations.md, "Webhooks"). It is stored encrypted (FACTGATE_ENCRYPTION_KEYS) and only this
    command shows it; webhooks sent from the rotation on are signed with the new secret.
    """
    from config import Settings
    from jobs.keyring import KeyringError, keyring_for
    from jobs.tenancy import TenantNotFoundError, tenant_info
    from jobs.webhooks import rotate_webhook_secret, tenant_webhook_secret
    from models import session_scope

    try:
        keyring = keyring_for(Settings.from_env())
        with session_scope(cli_sessions()) as session:
            info = tenant_info(session, name)
            if rotate:
                secret = rotate_webhook_secret(session, info.id, keyring)
            else:
                secret = tenant_webhook_secret(session, info.id, keyring) or ""
    except TenantNotFoundError as exc:
        raise InputError(str(exc)) from None
    except KeyringError as exc:
        raise InputError(str(exc)) from None
    click.echo(secret)
    if rotate:
        click.echo("rotated: webhooks are signed with this secret from now on", err=True)


@tenants.command("rotate-keys")
def tenants_rotate_keys() -> None:
    """Re-encrypt every stored upstream key and webhook secret with the first of FACTGATE_ENCRYPTION_KEYS.

    Rotation: put the new key first, run this, then drop the old key from the list.
    """
    from config import Settings
    from jobs.keyring import KeyringError, keyring_for
    from jobs.tenancy import rotate_tenant_keys
    from models import session_scope

    try:
        keyring = keyring_for(Settings.from_env())
        with session_scope(cli_sessions()) as session:
            n = rotate_tenant_keys(session, keyring)
    except KeyringError as exc:
        raise InputError(str(exc)) from None
    click.echo(f"re-encrypted {n} stored secret(s) (upstream keys, webhook secrets) with the first key")
