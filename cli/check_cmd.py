"""`factgate check FILE`, `factgate ask QUESTION`, `factgate quote QUESTION`: run one job end to end.

Embedded by default (this process runs the app and a worker on a SQLite file); `--server URL` or
FACTGATE_URL sends the job to a factgate server instead. Either way the job goes through the API.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from checks.gates import Gate
from checks.kinds.claims import ClaimResult
from cli.errors import InputError
from cli.gate import gate_options
from cli.kinds import cli_kind, render_line
from cli.options import resume_options, server_options
from cli.render import claim_modes, claims_table, scorecard_lines
from cli.run import announce, fetch_job, finish, submitted_or_resumed, wait
from cli.target import Target, open_target, server_from, token_from
from clients.factgate_http import JobBody

MODES = ("ungrounded", "grounded", "both")
DEFAULT_ROWS = 200


_server_options = server_options(
    "Run on this factgate server (default: FACTGATE_URL; unset = embedded, in this process).",
    "Bearer token for --server (default: FACTGATE_TOKEN).",
)


def _read_file(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except IsADirectoryError:
        raise InputError(f"{path} is a directory, not a claims file") from None
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None


def read_input(file: Path | None, resume_id: str | None, what: str) -> bytes:
    """FILE's bytes, or none when the command waits for an earlier job (`--resume`): it needs one of the
    two (`what`: the file's contents, as the message names them)."""
    if file is None and resume_id is None:
        raise InputError(f"give {what} FILE (or --resume JOB to continue an earlier check)")
    return _read_file(file) if file is not None else b""


def _kinds(data: bytes) -> dict[str, str]:
    """Each claim's `kind` (stable/recent…) for the table; the server validates the file, not this."""
    kinds: dict[str, str] = {}
    for raw in data.splitlines():
        try:
            row = json.loads(raw)
        except ValueError:
            continue
        if isinstance(row, dict) and isinstance(row.get("id"), str) and isinstance(row.get("kind"), str):
            kinds[row["id"]] = row["kind"][:12]
    return kinds


@click.command()
@click.argument("file", required=False, type=click.Path(dir_okay=True, path_type=Path))
@click.option("--mode", type=click.Choice(MODES), default="grounded", show_default=True)
@click.option("--model", default=None, help="Decisions model (default pplx-decider-latest).")
@click.option("--supported-min", type=float, default=None, help="Verdict cutoff (default 0.8).")
@click.option("--contradicted-max", type=float, default=None, help="Verdict cutoff (default 0.2).")
@click.option("--budget-usd", type=float, default=None, help="Stop sending requests past this spend.")
@_server_options
@resume_options
@click.option("--rows", type=click.IntRange(0), default=DEFAULT_ROWS, show_default=True, help="Table rows.")
@gate_options("claims")
def check(
    *,
    file: Path | None,
    mode: str,
    model: str | None,
    supported_min: float | None,
    contradicted_max: float | None,
    budget_usd: float | None,
    server: str | None,
    token: str | None,
    resume_id: str | None,
    report_path: Path | None,
    rows: int,
    fail_under: tuple[Gate, ...] = (),
    fail_over: tuple[Gate, ...] = (),
    junit_path: Path | None = None,
) -> None:
    """Check the claims in FILE (NDJSON: id, claim, optional label/kind/source) and print the verdicts.

    Shows a progress bar, then one row per claim (probability and verdict per mode, flips), the
    scorecard of each mode with acceptance, the job id and the report. Ctrl-C leaves the job saved;
    the command prints how to resume it.
    """
    data = read_input(file, resume_id, "a claims")
    srv = server_from(server)
    options = {
        "mode": mode,
        "model": model,
        "supported_min": supported_min,
        "contradicted_max": contradicted_max,
        "budget_usd": budget_usd,
        # Someone is waiting at a terminal: this job goes first within the tenant's share of the upstream.
        "priority": "interactive",
    }
    with open_target(srv, token_from(token), run_worker=True) as target:
        announce(target)
        job = submitted_or_resumed(
            target,
            "claims",
            resume_id,
            lambda: target.client.submit_ndjson(data, kind="claims", options=options, input_name=str(file)),
            "requests",
        )
        job = wait(target, job, "check", str(file) if file else None, srv)
        finish(
            target,
            job,
            report_path=report_path,
            render=lambda: _claims_output(target, job, data, rows),
            gates=(*fail_under, *fail_over),
            junit_path=junit_path,
        )


def _claims_output(target: Target, job: JobBody, data: bytes, rows: int) -> list[str]:
    results = [ClaimResult.read(line) for line in target.client.results(str(job["id"]))]
    lines = claims_table(results, claim_modes(job), kinds=_kinds(data), limit=rows)
    summary = job.get("summary")
    if summary and summary.get("scorecards"):
        lines.append("")
        lines.extend(scorecard_lines(summary))
    return lines


def _question_command(
    kind: str,
    question: str,
    *,
    model: str | None,
    server: str | None,
    token: str | None,
    resume_id: str | None,
    report_path: Path | None,
    gates: tuple[Gate, ...] = (),
    junit_path: Path | None = None,
) -> None:
    srv = server_from(server)
    with open_target(srv, token_from(token), run_worker=True) as target:
        announce(target)
        if resume_id is not None:
            job = fetch_job(target, resume_id, kind)
        else:
            if not question.strip():
                raise InputError("the question must not be empty")
            body = {
                "kind": kind,
                "options": {"priority": "interactive", **({"model": model} if model else {})},
                "items": [{"id": "q1", "question": question}],
            }
            job = target.client.submit_json(body, input_name="the question")
        job = wait(target, job, cli_kind(kind).command, question, srv)

        def output() -> list[str]:
            lines: list[str] = []
            for line in target.client.results(str(job["id"])):
                lines.extend(render_line(kind, line))
            return lines

        finish(target, job, report_path=report_path, render=output, gates=gates, junit_path=junit_path)


def _question_options(fn: Any) -> Any:
    fn = _server_options(resume_options(fn))
    return click.option(
        "--model",
        default=None,
        help="Decisions model (default pplx-decider-v1.1-27b, the model the cutoffs were measured on).",
    )(fn)


@click.command()
@click.argument("question")
@_question_options
@gate_options("answer")
def ask(
    *,
    question: str,
    model: str | None,
    server: str | None,
    token: str | None,
    resume_id: str | None,
    report_path: Path | None,
    fail_under: tuple[Gate, ...],
    fail_over: tuple[Gate, ...],
    junit_path: Path | None,
) -> None:
    """Answer gate: ask the Agent API, score every sentence against its sources, re-check weak ones."""
    _question_command(
        "answer",
        question,
        model=model,
        server=server,
        token=token,
        resume_id=resume_id,
        report_path=report_path,
        gates=(*fail_under, *fail_over),
        junit_path=junit_path,
    )


@click.command()
@click.argument("question")
@_question_options
def quote(
    *,
    question: str,
    model: str | None,
    server: str | None,
    token: str | None,
    resume_id: str | None,
    report_path: Path | None,
) -> None:
    """Quote finder: search, rank each result's sentences, quote the one that answers (or say none does)."""
    _question_command(
        "quote",
        question,
        model=model,
        server=server,
        token=token,
        resume_id=resume_id,
        report_path=report_path,
    )
