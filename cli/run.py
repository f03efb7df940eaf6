"""What `check`, `ask` and `quote` share: submit (or resume), wait with a progress bar, say where things are.

Ctrl-C while waiting never loses work: the job and every finished item are in the database. Locally,
the embedded worker is stopped warm (requests in flight finish and are stored) and the command prints
how to resume; against a server, the job simply keeps running there.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from pathlib import Path

import click
from rich.console import Console

from checks.gates import Gate
from cli.errors import EXIT_INTERRUPTED, CliError
from cli.gate import enforce, gate_lines, write_report
from cli.progress import wait_for_job
from cli.render import SIMULATED_NOTE
from cli.report import write_local_report
from cli.target import Target
from clients.factgate_http import JobBody

LOCAL_POLL_S = 0.25
REMOTE_POLL_S = 1.0


def stderr_console() -> Console:
    return Console(stderr=True, highlight=False)


def announce(target: Target) -> None:
    """Say where the job runs and whether the simulator answers (stderr, before anything else)."""
    where = target.describe()
    if target.local:
        assert target.settings is not None
        if target.settings.uses_simulator:
            where += ", no PERPLEXITY_API_KEY: the bundled simulator answers"
        if target.worker is not None:
            where += ", worker in this process"
        else:
            where += "; the job goes to the shared queue, so `factgate worker` processes must be running"
    click.echo(where, err=True)


def wait(target: Target, job: JobBody, command: str, argument: str | None, server: str | None) -> JobBody:
    """Wait for the job to end (progress on stderr); on Ctrl-C explain how to pick it up again: the command
    line that waits for it again, `factgate COMMAND ARGUMENT --resume JOB` (`--server URL` for a server's)."""
    job_id = str(job["id"])
    parts = [command, argument, "--resume", job_id, *(("--server", server) if server else ())]
    resume_hint = "factgate " + " ".join(shlex.quote(p) for p in parts if p)
    interval = LOCAL_POLL_S if target.local else REMOTE_POLL_S
    try:
        return wait_for_job(
            lambda: target.client.job(job_id),
            label=f"{job['kind']} job",
            console=stderr_console(),
            interval=interval,
        )
    except KeyboardInterrupt:
        if target.local and target.worker is not None:
            click.echo(
                f"\ninterrupted: job {job_id} and every finished item are saved; finishing the requests "
                f"in flight (Ctrl-C again to quit at once). Resume with: {resume_hint}",
                err=True,
            )
        else:
            click.echo(
                f"\nstopped waiting: job {job_id} keeps running on the server. "
                f"Follow it with `factgate status {job_id}` or wait again with: {resume_hint}",
                err=True,
            )
        raise click.exceptions.Exit(EXIT_INTERRUPTED) from None


def fetch_job(target: Target, job_id: str, kind: str) -> JobBody:
    """An existing job (for --resume), checked to be of the expected kind."""
    job = target.client.job(job_id)
    if job.get("kind") != kind:
        raise CliError(f"job {job_id} is a {job.get('kind')} job, not {kind}")
    return job


def submitted_or_resumed(
    target: Target, kind: str, resume_id: str | None, submit: Callable[[], JobBody], noun: str
) -> JobBody:
    """The job to wait for: the one `--resume` names, else the one `submit()` creates, its size said on
    stderr (`noun`: what its items are to the reader)."""
    if resume_id is not None:
        return fetch_job(target, resume_id, kind)
    job = submit()
    n = (job.get("request_counts") or {}).get("total", 0)
    click.echo(f"job {job['id']}: {n} {noun} queued", err=True)
    return job


def finish(
    target: Target,
    job: JobBody,
    *,
    report_path: Path | None,
    render: Callable[[], list[str]],
    gates: Sequence[Gate] = (),
    junit_path: Path | None = None,
) -> int:
    """Print the rendered results, the job line, the report location and the simulator note; write the
    JUnit XML when asked, and hold a completed job to its gates (exit 3 on a miss, cli/gate.py)."""
    for line in render():
        click.echo(line)
    job_id = str(job["id"])
    counts = job.get("request_counts") or {}
    cost = float(job.get("cost_usd") or 0.0)
    click.echo(
        f"\njob {job_id} {job.get('status')}: {counts.get('completed', 0)} of {counts.get('total', 0)} "
        f"requests done, {counts.get('failed', 0)} failed, {counts.get('skipped', 0)} skipped; "
        f"cost ${cost:.4f}"
    )
    for warning in job.get("warnings") or []:
        click.echo(f"warning: {warning}")
    if target.local:
        path = write_local_report(target, job_id, report_path)
        click.echo(f"report: {path}")
    else:
        click.echo(f"report: {target.job_page(job_id)}")
    if job.get("simulated"):
        click.echo(f"note: {job.get('simulated_note') or SIMULATED_NOTE}")
    kind = str(job.get("kind"))
    missed = gate_lines(kind, job, gates) if job.get("status") == "completed" else []
    if junit_path is not None:
        write_report(target, kind, job, junit_path, missed)
    if job.get("status") == "failed":
        raise CliError(f"job {job_id} failed: {job.get('error') or 'see the report'}")
    if job.get("status") == "cancelled":
        raise CliError(f"job {job_id} was cancelled; the results above are partial")
    enforce(missed, gates)
    return 0
