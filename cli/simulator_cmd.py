"""`factgate simulator`: serve the offline Perplexity API simulator (Decisions, Agent, Search)."""

from __future__ import annotations

import math
from datetime import date, datetime

import click

from simulator.config import SimConfig
from simulator.faults import FAULT_KINDS, LATENCY_MODELS, FaultInjector
from simulator.server import DEFAULT_THREADS, serve

DEFAULTS = SimConfig()


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


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", default=8700, show_default=True, type=int, help="Port (0 = any free port).")
@click.option("--threads", default=DEFAULT_THREADS, show_default=True, type=click.IntRange(1, 512))
@click.option("--decisions-rps", default=DEFAULTS.decisions_rps, show_default=True, type=click.FloatRange(0))
@click.option("--search-rps", default=DEFAULTS.search_rps, show_default=True, type=click.FloatRange(0))
@click.option("--agent-rps", default=DEFAULTS.agent_rps, show_default=True, type=click.FloatRange(0))
@click.option(
    "--latency",
    default=DEFAULTS.latency_s,
    show_default=True,
    type=click.FloatRange(0),
    help="Mean seconds added to every answer.",
)
@click.option(
    "--latency-model", default=DEFAULTS.latency, show_default=True, type=click.Choice(LATENCY_MODELS)
)
@click.option("--latency-sd", default=DEFAULTS.latency_sd, show_default=True, type=click.FloatRange(0))
@click.option(
    "--latency-per-question-ms",
    default=DEFAULTS.latency_per_question_s * 1000,
    show_default=True,
    type=click.FloatRange(0),
    help="Milliseconds a Decisions question beyond the first adds, when --latency is above 0.",
)
@click.option(
    "--tokens-per-question",
    default=DEFAULTS.tokens_per_question,
    show_default=True,
    type=click.IntRange(0),
    help="Input tokens a Decisions question beyond the first costs at least (the state counts once).",
)
@click.option(
    "--pack-drift",
    default=DEFAULTS.pack_drift,
    show_default=True,
    type=click.FloatRange(-1, 1),
    help="Test knob: move every probability of a packed Decisions request (a state with a `claims` "
    "object) by D x the question's 0-based position, within [0.001, 0.999].",
)
@click.option(
    "--fault-rate",
    default=DEFAULTS.fault_rate,
    show_default=True,
    type=click.FloatRange(0, 1),
    help="Probability that a request suffers a fault.",
)
@click.option(
    "--faults",
    default=None,
    callback=_fault_list,
    help=f"Comma-separated kinds drawn from when a fault fires: {','.join(FAULT_KINDS)}.",
)
@click.option(
    "--slow-s",
    default=DEFAULTS.slow_s,
    show_default=True,
    type=click.FloatRange(0),
    help="How long the `slow` fault stalls.",
)
@click.option(
    "--html-504-delay",
    default=DEFAULTS.html_504_delay_s,
    show_default=True,
    type=click.FloatRange(0),
    help="Seconds before the `504_html` fault's page.",
)
@click.option("--seed", default=DEFAULTS.seed, show_default=True, type=int)
@click.option(
    "--knowledge-cutoff",
    default=DEFAULTS.knowledge_cutoff.isoformat(),
    show_default=True,
    type=click.DateTime(formats=["%Y-%m-%d"]),
)
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
