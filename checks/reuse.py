"""Verdict reuse across a tenant's jobs: the key of one upstream Decisions request, and which requests may be
answered from the tenant's store (docs/spec.md, "Verdict reuse").

The unit of reuse is one request as sent: its canonical body (every byte of state and questions, keys
sorted), with the endpoint, the model, the grounding mode and the upstream it goes to. With packing, the
packed request is the unit, so a pack is reused whole or sent. Pure: the store itself is jobs/verdicts.py,
the lookup before a call workers/steps.py.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, Literal

REUSE_VALUES: Final = ("auto", "none")
Reuse = Literal["auto", "none"]
GROUNDED_MODE: Final = "web_grounding"


def canonical_body(body: Mapping[str, Any]) -> bytes:
    """The request body as one byte string that does not depend on key order or spacing: two bodies that ask
    the same thing give the same bytes, and any other byte of state or questions gives others."""
    return json.dumps(
        body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode()


def is_grounded(body: Mapping[str, Any]) -> bool:
    """Whether a Decisions body asks for web grounding (each answer then depends on the web of its day)."""
    return body.get("mode") == GROUNDED_MODE


def model_of(body: Mapping[str, Any]) -> str:
    value = body.get("model")
    return value if isinstance(value, str) else ""


def request_key(endpoint: str, upstream: str, body: Mapping[str, Any]) -> bytes:
    """The 32-byte SHA-256 a stored answer is found by within one tenant: endpoint, upstream (the simulator's
    answers never stand for the real API's), model and grounding mode named apart, then the canonical body."""
    head = json.dumps(
        [endpoint, upstream, model_of(body), GROUNDED_MODE if is_grounded(body) else "none"],
        separators=(",", ":"),
    ).encode()
    return hashlib.sha256(head + b"\n" + canonical_body(body)).digest()


def moving_alias(model: str) -> bool:
    """A model name that points at whatever version is current (`…-latest`): its answers may change under
    the same name, so they are never stored nor reused."""
    return not model or model.endswith("latest")


@dataclass(frozen=True)
class ReusePolicy:
    """What one request of a job may do with its tenant's store: `read` (be answered from it, by an entry
    at most `max_age` old when given) and `write` (its answer kept for later jobs)."""

    read: bool
    write: bool
    max_age: timedelta | None = None


NEVER: Final = ReusePolicy(read=False, write=False)


def reuse_option(options: Mapping[str, Any]) -> Reuse:
    return "none" if options.get("reuse") == "none" else "auto"


def max_age_option(options: Mapping[str, Any]) -> float | None:
    value = options.get("reuse_max_age_hours")
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def policy_for(options: Mapping[str, Any], body: Mapping[str, Any]) -> ReusePolicy:
    """Which way a request of a job with these options may use the store.

    Never with `reuse: "none"`, never on a moving alias. A request without grounding on a pinned model is
    read and written. A grounded one is written (a later job may accept its age) but read only when the job
    sets `reuse_max_age_hours`, and then only from entries younger than that: the web changes.
    """
    if reuse_option(options) == "none" or moving_alias(model_of(body)):
        return NEVER
    if not is_grounded(body):
        return ReusePolicy(read=True, write=True)
    hours = max_age_option(options)
    if hours is None:
        return ReusePolicy(read=False, write=True)
    return ReusePolicy(read=True, write=True, max_age=timedelta(hours=hours))


def usable(
    policy: ReusePolicy,
    *,
    answered_at: datetime,
    now: datetime,
    job_ended_at: datetime | None,
    retention_days: int,
) -> bool:
    """Whether a stored entry may answer now: young enough for the reader's `max_age`, and its job not past
    its retention (the rule the purge applies, so an entry stops counting the moment its job is due, not
    when the purge gets to it). A live job's entries are within retention."""
    if not policy.read:
        return False
    if policy.max_age is not None and now - answered_at > policy.max_age:
        return False
    return job_ended_at is None or job_ended_at + timedelta(days=retention_days) >= now


def check_reuse_options(raw: Mapping[str, Any]) -> tuple[Reuse, float | None]:
    """`reuse` and `reuse_max_age_hours` of any kind's options; ValueError("<field> <problem>")."""
    reuse = raw.get("reuse")
    if reuse is None or reuse == "":
        reuse = "auto"
    if reuse not in REUSE_VALUES:
        raise ValueError(f"reuse must be one of {', '.join(REUSE_VALUES)}, got {reuse!r}")
    hours = raw.get("reuse_max_age_hours")
    if hours is None or hours == "":
        return ("none" if reuse == "none" else "auto"), None
    if isinstance(hours, bool):
        raise ValueError(f"reuse_max_age_hours must be a number of hours above 0, got {hours!r}")
    try:
        value = float(hours)
    except (TypeError, ValueError):
        raise ValueError(f"reuse_max_age_hours must be a number of hours above 0, got {hours!r}") from None
    if not value > 0 or value == float("inf"):
        raise ValueError(f"reuse_max_age_hours must be a number of hours above 0, got {hours!r}")
    return ("none" if reuse == "none" else "auto"), value
