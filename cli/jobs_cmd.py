"""`factgate submit|status|results|cancel|jobs delete`: the HTTP client of the job API, for remote servers.

They talk to `--server URL` (or FACTGATE_URL) with `--token` (or FACTGATE_TOKEN). Without a server,
status/results/cancel read the local database through the in-process app (jobs made by `check`);
`submit` needs somewhere for the job to run, so locally it requires a shared queue (REDIS_URL).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from checks.recipes import kind_names
from cli.check_cmd import MODES
from cli.errors import CliError, InputError
from cli.options import output_file, server_options
from cli.target import open_target, server_from, token_from
from clients.factgate_http import JobBody

KINDS = kind_names()


_server_options = server_options(
    "factgate server (default: FACTGATE_URL; unset = local).",
    "Bearer token (default: FACTGATE_TOKEN).",
)


def status_line(job: JobBody) -> str:
    counts = job.get("request_counts") or {}
    line = (
        f"job {job.get('id')} {job.get('kind')} {job.get('status')}: {counts.get('completed', 0)} of "
        f"{counts.get('total', 0)} requests done, {counts.get('failed', 0)} failed, "
        f"{counts.get('skipped', 0)} skipped, {counts.get('pending', 0) + counts.get('running', 0)} to go; "
        f"cost ${float(job.get('cost_usd') or 0):.4f}"
    )
    if job.get("simulated"):
        line += f" ({job.get('simulated_note') or 'simulated'})"
    return line


def schedule_line(job: JobBody) -> str | None:
    """Where a live job stands with the scheduler: why it waits, or its share and ETA (None once ended)."""
    if job.get("status") == "validating":
        return "validating: every row was accepted; its requests are being created, then it is queued"
    view = job.get("schedule") or {}
    if not view:
        return None
    if view.get("state") == "held":
        reason, resumes = view.get("held_reason"), view.get("resumes_at")
        return f"held: {reason}; resumes at {resumes} or when the budget is raised"
    eta = view.get("eta_s")
    eta_text = f", about {float(eta):.0f} s left" if isinstance(eta, int | float) else ""
    return (
        f"scheduler: {float(view.get('share') or 0) * 100:.0f} % of the {view.get('endpoint') or 'upstream'} "
        f"rate limit, {float(view.get('rate_per_s') or 0):.1f} items/s{eta_text}"
    )


@click.command()
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--kind", type=click.Choice(KINDS), default="claims", show_default=True)
@click.option(
    "--mode", type=click.Choice(MODES), default=None, help="claims: request mode (default grounded)."
)
@click.option("--model", default=None, help="Decisions model.")
@click.option(
    "--option",
    "extra",
    multiple=True,
    metavar="NAME=VALUE",
    help="Any other job option, e.g. --option budget_usd=5 (repeatable).",
)
@click.option("--idempotency-key", default=None, help="Resubmitting with the same key returns the same job.")
@_server_options
def submit(
    *,
    file: Path,
    kind: str,
    mode: str | None,
    model: str | None,
    extra: tuple[str, ...],
    idempotency_key: str | None,
    server: str | None,
    token: str | None,
) -> None:
    """Submit FILE (NDJSON rows) as a job; prints the job id on stdout."""
    options: dict[str, str | None] = {"mode": mode, "model": model}
    for item in extra:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise InputError(f"--option must look like NAME=VALUE, got {item!r}")
        options[name.strip()] = value
    if kind != "claims" and mode is not None:
        raise InputError("--mode applies to claims jobs only")
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read {file}: {exc.strerror or exc}") from None
    srv = server_from(server)
    with open_target(srv, token_from(token)) as target:
        if target.local:
            assert target.settings is not None
            if target.settings.redis_url is None:
                raise InputError(
                    "submit sends a job to a server: pass --server URL or set FACTGATE_URL "
                    f"(to run {file} here, use `factgate check {file}`)"
                )
        job = target.client.submit_ndjson(
            data, kind=kind, options=options, idempotency_key=idempotency_key, input_name=str(file)
        )
    click.echo(job["id"])
    click.echo(status_line(job), err=True)


@click.command()
@click.argument("job_id", metavar="JOB")
@click.option("--json", "as_json", is_flag=True, help="Print the whole status object as JSON.")
@_server_options
def status(job_id: str, as_json: bool, server: str | None, token: str | None) -> None:
    """Show a job's status and progress."""
    with open_target(server_from(server), token_from(token)) as target:
        job = target.client.job(job_id)
        page = target.job_page(job_id)
    if as_json:
        click.echo(json.dumps(job, indent=2))
        return
    click.echo(status_line(job))
    scheduled = schedule_line(job)
    if scheduled:
        click.echo(scheduled)
    for warning in job.get("warnings") or []:
        click.echo(f"warning: {warning}")
    if job.get("error"):
        click.echo(f"error: {job['error']}")
    if page:
        click.echo(f"page: {page}")


@click.command()
@click.argument("job_id", metavar="JOB")
@output_file("-o", "--output", help="Write to this file instead of stdout.")
@click.option("--format", "fmt", type=click.Choice(("ndjson", "csv")), default="ndjson", show_default=True)
@_server_options
def results(job_id: str, output: Path | None, fmt: str, server: str | None, token: str | None) -> None:
    """Download a job's results (what exists so far, in input order) as NDJSON or CSV."""
    with open_target(server_from(server), token_from(token)) as target:
        lines = target.client.iter_result_lines(job_id, fmt)
        last = ""
        if output is None:
            for line in lines:
                sys.stdout.write(line + "\n")
                last = line or last
            sys.stdout.flush()
            _check_complete(job_id, fmt, last)
            return
        count = 0
        tmp = output.with_name(output.name + ".part")
        try:
            with tmp.open("w", encoding="utf-8", newline="") as fh:
                for line in lines:
                    fh.write(line + "\n")
                    count += 1
                    last = line or last
            _check_complete(job_id, fmt, last)  # a cut-short download never replaces the file
            tmp.replace(output)
        except OSError as exc:
            raise CliError(f"cannot write {output}: {exc.strerror or exc}") from None
        finally:
            tmp.unlink(missing_ok=True)
    # The file keeps the end line (so it can be checked again later); the count leaves it out.
    click.echo(f"wrote {count - 1:,} lines to {output}, then the end line", err=True)


def _check_complete(job_id: str, fmt: str, last: str) -> None:
    """Every download ends with a trailer (`{"_end": …}` in NDJSON, a `#end,<N>` row in CSV); without it
    the transfer was cut short and is an error, not a shorter file."""
    done = last.startswith('{"_end":') if fmt == "ndjson" else last.startswith("#end,")
    if not done:
        raise CliError(f"the results of job {job_id} ended early (no end line); download them again")


@click.command()
@click.argument("job_id", metavar="JOB")
@_server_options
def cancel(job_id: str, server: str | None, token: str | None) -> None:
    """Cancel a validating, queued or running job: pending items are skipped, running ones finish."""
    with open_target(server_from(server), token_from(token)) as target:
        job = target.client.cancel(job_id)
    click.echo(status_line(job))


@click.group()
def jobs() -> None:
    """Jobs as a whole: delete an ended one."""


@jobs.command("delete")
@click.argument("job_id", metavar="JOB")
@_server_options
def jobs_delete(job_id: str, server: str | None, token: str | None) -> None:
    """Delete an ended job: gone at once from lists and reads, its rows purged in the background; its usage
    stays in `/v1/usage`. A live job is refused: cancel it first."""
    with open_target(server_from(server), token_from(token)) as target:
        target.client.delete(job_id)
    click.echo(f"job {job_id} deleted; its rows are purged in the background")
