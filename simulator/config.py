"""Configuration of the offline Perplexity API simulator.

One frozen dataclass shared by the wire layer (rate limits, faults, latency) and the content layer
(knowledge cutoff, determinism seed), so a running simulator is fully described by one value.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date


@dataclass(frozen=True)
class SimConfig:
    knowledge_cutoff: date = date(2026, 6, 1)  # the "model" knows only documents dated before this
    seed: int = 0  # determinism for faults / jitter
    api_keys: frozenset[str] | None = None  # None = accept any non-empty bearer token
    decisions_rps: float = 10.0  # per key, per endpoint; 0 = unlimited
    search_rps: float = 50.0
    agent_rps: float = 3.0
    latency: str = "fixed"  # fixed | normal | lognormal
    latency_s: float = 0.0  # mean latency (0 in tests)
    latency_sd: float = 0.0
    # Added per question beyond the first, only when latency_s > 0 (integrators measured ~65 ms a question)
    latency_per_question_s: float = 0.065
    # Input tokens a question beyond the first costs at least (integrators measured ~92 a question)
    tokens_per_question: int = 92
    pack_drift: float = 0.0  # test knob: a packed request's answer n (0-based) moves by pack_drift * n
    fault_rate: float = 0.0  # total probability of a fault per request
    faults: tuple[str, ...] = (
        "500",
        "502",
        "503",
        "504_html",
        "malformed_json",
        "truncated_json",
        "bad_probability",
        "slow",
        "drop",
    )  # kinds drawn from when a fault fires; the hostile ones (faults.HOSTILE_FAULTS) are opt-in
    slow_s: float = 35.0  # how long a "slow" fault stalls (above client timeout)
    html_504_delay_s: float = 0.0  # delay before a 504 HTML page (real: ~60 s)
    allow_test_headers: bool = True  # honour X-Sim-* per-request headers
