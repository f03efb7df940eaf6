"""`factgate citations FILE`: check a team's own answers against the sources they cite, end to end.

Embedded by default (this process runs the app and a worker on a SQLite file), or on a server with
`--server URL`; either way the job goes through the API, like `check`, `ask` and `quote`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import click

from checks.citation_contracts import CitationsSummary
from checks.citation_formats import INPUT_FORMATS, read_document
from checks.gates import Gate
from cli.check_cmd import _server_options, read_input
from cli.gate import gate_options
from cli.kinds import render_line
from cli.kinds.citations import metrics_line
from cli.options import resume_options
from cli.run import announce, finish, submitted_or_resumed, wait
from cli.target import Target, open_target, server_from, token_from
from clients.factgate_http import JobBody


@click.command()
@click.argument("file", required=False, type=click.Path(dir_okay=True, path_type=Path))
@click.option("--model", default=None, help="Decisions model (default pplx-decider-v1.1-27b).")
@click.option("--supported-min", type=float, default=None, help="Label cutoff (default 0.7).")
@click.option("--weak-min", type=float, default=None, help="Label cutoff (default 0.4).")
@click.option("--contradicted-min", type=float, default=None, help="Label cutoff (default 0.6).")
@click.option("--checkable-min", type=float, default=None, help="Label cutoff (default 0.5).")
@click.option(
    "--misattribution/--no-misattribution",
    default=True,
    show_default=True,
    help="Also ask whether the sources a sentence does not cite support it.",
)
@click.option(
    "--review",
    type=click.Choice(("none", "agent")),
    default="none",
    show_default=True,
    help="agent: suggest a rewrite of flagged sentences of answers with a question (Agent API).",
)
@click.option("--budget-usd", type=float, default=None, help="Stop sending requests past this spend.")
@click.option(
    "--input-format",
    type=click.Choice(INPUT_FORMATS),
    default="auto",
    show_default=True,
    help="How FILE's rows are written: factgate's, RAGAS samples or DeepEval test cases (auto: the first "
    "row tells).",
)
@_server_options
@resume_options
@gate_options("citations")
def citations(
    *,
    file: Path | None,
    model: str | None,
    supported_min: float | None,
    weak_min: float | None,
    contradicted_min: float | None,
    checkable_min: float | None,
    misattribution: bool,
    review: str,
    budget_usd: float | None,
    server: str | None,
    token: str | None,
    resume_id: str | None,
    report_path: Path | None,
    input_format: str = "auto",
    fail_under: tuple[Gate, ...] = (),
    fail_over: tuple[Gate, ...] = (),
    junit_path: Path | None = None,
) -> None:
    """Check the answers in FILE against their sources: factgate rows (id, answer, sources, optional
    question), RAGAS samples (user_input, response, retrieved_contexts) or DeepEval test cases (input,
    actual_output, retrieval_context), as NDJSON, a JSON array or a JSON object with a list of cases.

    Prints each answer's sentences with their labels, misattributed and missing citations, and the
    citation metrics of each answer and of the job. Ctrl-C leaves the job saved; the command prints how
    to resume it. --fail-under/--fail-over make it a CI gate (exit 3 on a miss).
    """
    data = read_input(file, resume_id, "an answers")
    srv = server_from(server)
    options = {
        "model": model,
        "supported_min": supported_min,
        "weak_min": weak_min,
        "contradicted_min": contradicted_min,
        "checkable_min": checkable_min,
        "misattribution": misattribution,
        "review": review,
        "budget_usd": budget_usd,
        "priority": "interactive",  # someone is waiting at a terminal
        "input_format": None if input_format == "auto" else input_format,
    }
    with open_target(srv, token_from(token), run_worker=True) as target:
        announce(target)
        job = submitted_or_resumed(
            target, "citations", resume_id, lambda: _submit(target, data, options, str(file)), "answers"
        )
        if resume_id is None:
            for warning in job.get("warnings") or []:
                click.echo(warning, err=True)  # how the rows were read (RAGAS, DeepEval)
        job = wait(target, job, "citations", str(file) if file else None, srv)
        finish(
            target,
            job,
            report_path=report_path,
            render=lambda: _output(target, job),
            gates=(*fail_under, *fail_over),
            junit_path=junit_path,
        )


def _submit(target: Target, data: bytes, options: Mapping[str, object], name: str) -> JobBody:
    """NDJSON goes as it is (streamed by the server); a JSON document's rows go as a JSON body's items,
    their problems named as the file names them (`test_cases[2].retrieval_context`)."""
    document = read_document(data)
    if document.shape == "ndjson":
        return target.client.submit_ndjson(data, kind="citations", options=options, input_name=name)
    body = {
        "kind": "citations",
        "options": {k: v for k, v in options.items() if v is not None},
        "items": document.items,
    }
    return target.client.submit_json(body, input_name=name, items_name=document.container or "items")


def _output(target: Target, job: Mapping[str, object]) -> list[str]:
    lines: list[str] = []
    for line in target.client.results(str(job["id"])):
        lines.extend(render_line("citations", line))
    summary = job.get("summary")
    if isinstance(summary, dict) and summary.get("kind") == "citations":
        s = CitationsSummary.read(summary)
        lines += ["", f"citations summary: {s.questions} answers", f"  {metrics_line(s.metrics)}"]
        labels = "  ".join(f"{k} {v}" for k, v in s.metrics.labels.items())
        if labels:
            lines.append(f"  labels: {labels}")
    return lines
