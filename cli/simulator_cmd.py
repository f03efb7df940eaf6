"""`factgate simulator`: serve the offline Perplexity API simulator (Decisions, Agent, Search)."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import date, datetime
from typing import Any

import click

from simulator.config import SimConfig
from simulator.faults import FAULT_KINDS, LATENCY_MODELS, FaultInjector
from simulator.server import DEFAULT_THREADS, serve

DEFAULTS = SimConfig()
Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def _fault_list(_ctx: click.Context, _param: click.Parameter, value: str | None) -> tuple[str, ...]:
    if value is None:
        return DEFAULTS.faults
    kinds = tuple(kind.strip() for kind in value.split(",") if kind.strip())
    unknown = [kind for kind in kinds if kind not in FAULT_KINDS]
    if unknown:
        raise click.BadParameter(
            f"unknown fault kind(s) {', '.join(unknown)}; known: {', '.join(FAULT_KINDS)}"
        )
    return kinds


def _setting(name: str, default: object, type_: object, help: str | None = None) -> Decorator:
    """A simulator setting: an option with its default shown in --help (`type_` as click takes it: a
    ParamType or a Python type)."""
    return click.option(name, default=default, show_default=True, type=type_, help=help)


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", default=8700, show_default=True, type=int, help="Port (0 = any free port).")
@_setting("--threads", DEFAULT_THREADS, click.IntRange(1, 512))
@_setting("--decisions-rps", DEFAULTS.decisions_rps, click.FloatRange(0))
@_setting("--search-rps", DEFAULTS.search_rps, click.FloatRange(0))
@_setting("--agent-rps", DEFAULTS.agent_rps, click.FloatRange(0))
@_setting("--latency", DEFAULTS.latency_s, click.FloatRange(0), help="Mean seconds added to every answer.")
@_setting("--latency-model", DEFAULTS.latency, click.Choice(LATENCY_MODELS))
@_setting("--latency-sd", DEFAULTS.latency_sd, click.FloatRange(0))
@_setting(
    "--latency-per-question-ms",
    DEFAULTS.latency_per_question_s * 1000,
    click.FloatRange(0),
    help="Milliseconds a Decisions question beyond the first adds, when --latency is above 0.",
)
@_setting(
    "--tokens-per-question",
    DEFAULTS.tokens_per_question,
    click.IntRange(0),
    help="Input tokens a Decisions question beyond the first costs at least (the state counts once).",
)
@_setting(
    "--pack-drift",
    DEFAULTS.pack_drift,
    click.FloatRange(-1, 1),
    help="Test knob: move every probability of a packed Decisions request (a state with a `claims` "
    "object) by D x the question's 0-based position, within [0.001, 0.999].",
)
@_setting(
    "--fault-rate",
    DEFAULTS.fault_rate,
    click.FloatRange(0, 1),
    help="Probability that a request suffers a fault.",
)
@click.option(
    "--faults",
    default=None,
    callback=_fault_list,
    help=f"Comma-separated kinds drawn from when a fault fires: {','.join(FAULT_KINDS)}.",
)
@_setting("--slow-s", DEFAULTS.slow_s, click.FloatRange(0), help="How long the `slow` fault stalls.")
@_setting(
    "--html-504-delay",
    DEFAULTS.html_504_delay_s,
    click.FloatRange(0),
    help="Seconds before the `504_html` fault's page.",
)
@_setting("--seed", DEFAULTS.seed, int)
@_setting("--knowledge-cutoff", DEFAULTS.knowledge_cutoff.isoformat(), click.DateTime(formats=["%Y-%m-%d"]))
@click.option(
    "--api-key",
    "api_keys",
    multiple=True,
    help="Accept only this bearer key (repeatable); default: any non-empty key.",
)
@click.option("--no-test-headers", is_flag=True, help="Ignore the X-Sim-* per-request test headers.")
@click.option(
    "--engine",
    "engine_name",
    default="corpus",
    show_default=True,
    type=click.Choice(["corpus", "fake"]),
    help="corpus: answers judged from the bundled corpus; fake: the same fixed, well-formed answer to "
    "every request (no corpus loaded), for load drills that measure the caller, not the stand-in.",
)
def simulator(  # noqa: PLR0917 - click passes every option as a parameter
    host: str,
    port: int,
    threads: int,
    decisions_rps: float,
    search_rps: float,
    agent_rps: float,
    latency: float,
    latency_model: str,
    latency_sd: float,
    latency_per_question_ms: float,
    tokens_per_question: int,
    pack_drift: float,
    fault_rate: float,
    faults: tuple[str, ...],
    slow_s: float,
    html_504_delay: float,
    seed: int,
    knowledge_cutoff: datetime,
    api_keys: tuple[str, ...],
    no_test_headers: bool,
    engine_name: str,
) -> None:
    """Run the offline Perplexity API simulator (for tests, the demo and load drills).

    Serves POST /v1/decisions, /v1/agent, /v1/responses and /search, and GET /stats. Unless
    --no-test-headers, a request may carry X-Sim-Fault: KIND|none, X-Sim-Latency: SECONDS and
    X-Sim-Retry-After: VALUE to force its fault, delay or 429 Retry-After.
    """
    if not math.isfinite(pack_drift):  # FloatRange lets "nan" through
        raise click.BadParameter("must be a finite number", param_hint="--pack-drift")
    config = SimConfig(
        knowledge_cutoff=date(knowledge_cutoff.year, knowledge_cutoff.month, knowledge_cutoff.day),
        seed=seed,
        api_keys=frozenset(api_keys) if api_keys else None,
        decisions_rps=decisions_rps,
        search_rps=search_rps,
        agent_rps=agent_rps,
        latency=latency_model,
        latency_s=latency,
        latency_sd=latency_sd,
        latency_per_question_s=latency_per_question_ms / 1000,
        tokens_per_question=tokens_per_question,
        pack_drift=pack_drift,
        fault_rate=fault_rate,
        faults=faults,
        slow_s=slow_s,
        html_504_delay_s=html_504_delay,
        allow_test_headers=not no_test_headers,
    )
    try:
        FaultInjector(config)
    except ValueError as error:
        raise click.UsageError(str(error)) from error

    def announce(url: str) -> None:
        click.echo(
            f"factgate simulator: an offline stand-in for the Perplexity APIs, not a fact checker "
            f"(answers come from a small bundled corpus) - serving {url}"
        )

    engine = None
    if engine_name == "fake":
        from simulator.fake_engine import FakeEngine  # only load drills need it

        engine = FakeEngine()
    # Blocks until Ctrl-C (waitress handles the interrupt and shuts its workers down).
    serve(config, host=host, port=port, threads=threads, engine=engine, ready=announce)
