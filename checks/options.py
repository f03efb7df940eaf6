"""Job options: parse and validate what a caller sends, naming the field of every problem.

Options come from a JSON body or from NDJSON query parameters (strings), so numbers and booleans
are accepted in string form too. Unknown options are rejected: a typo silently ignored would run a
whole batch with settings the caller did not ask for.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, cast

from pydantic import JsonValue

from checks.claims import CONTRADICTED_MAX, SUPPORTED_MIN, JobMode, Mode, modes_for
from checks.fairness import PRIORITIES, Priority
from checks.packing import MAX_PACK_SIZE
from checks.pricing import DEFAULT_MODEL, KNOWN_MODELS
from checks.reuse import Reuse, check_reuse_options
from checks.webhooks import WebhookUrlError, validate_webhook_url

CLAIMS_MODES: tuple[str, ...] = ("ungrounded", "grounded", "both")


class OptionsError(ValueError):
    """Invalid options; `field` names the option."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f'option "{field}": {message}')
        self.field = field
        self.message = message


def number_option(raw: Mapping[str, Any], name: str, default: float | None) -> float | None:
    if name not in raw or raw[name] is None or raw[name] == "":
        return default
    value = raw[name]
    if isinstance(value, bool):
        raise OptionsError(name, f"must be a number, got {value!r}")
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise OptionsError(name, f"must be a number, got {raw[name]!r}") from None
    if not isinstance(value, int | float) or not math.isfinite(value):
        raise OptionsError(name, f"must be a finite number, got {raw[name]!r}")
    return float(value)


def pack_size_option(raw: Mapping[str, Any], default: int) -> int:
    """`pack_size`: the most items (sentences, claims) one upstream request may carry, 1 to 128."""
    value = number_option(raw, "pack_size", float(default))
    assert value is not None
    if value != int(value) or not 1 <= value <= MAX_PACK_SIZE:
        raise OptionsError(
            "pack_size", f"must be a whole number from 1 to {MAX_PACK_SIZE}, got {raw['pack_size']!r}"
        )
    return int(value)


def audit_share_option(raw: Mapping[str, Any], default: float) -> float:
    """`audit_share`: the share of packed answers re-asked one sentence per request (0 turns it off)."""
    value = number_option(raw, "audit_share", default)
    assert value is not None
    if not 0.0 <= value <= 1.0:
        raise OptionsError("audit_share", f"must be between 0 and 1, got {raw['audit_share']!r}")
    return value


def webhook_url_option(raw: Mapping[str, Any]) -> str | None:
    """Where to send the job's webhook when it ends (see checks/webhooks.py), or None."""
    value = raw.get("webhook_url")
    if value is None or value == "":
        return None
    try:
        return validate_webhook_url(value)
    except WebhookUrlError as exc:
        raise OptionsError("webhook_url", str(exc)) from None


def without_unset_webhook(options: dict[str, JsonValue]) -> dict[str, JsonValue]:
    """Stored options name `webhook_url` only when one was given, and the reuse options only when they are
    not the defaults (jobs stored before them read the same)."""
    if options.get("webhook_url") is None:
        options.pop("webhook_url", None)
    if options.get("reuse") == "auto":
        options.pop("reuse", None)
    if options.get("reuse_max_age_hours") is None:
        options.pop("reuse_max_age_hours", None)
    return options


# Every kind's options: whether its requests may be answered from the tenant's verdict store
# (checks/reuse.py).
REUSE_OPTION_NAMES = frozenset({"reuse", "reuse_max_age_hours"})


def reuse_options(raw: Mapping[str, Any]) -> tuple[Reuse, float | None]:
    """`reuse` ("auto" or "none") and `reuse_max_age_hours` (hours > 0, or None); OptionsError naming the
    field."""
    try:
        return check_reuse_options(raw)
    except ValueError as exc:
        name, _, problem = str(exc).partition(" ")
        raise OptionsError(name, problem) from None


def check_cutoffs(supported_min: float, contradicted_max: float) -> None:
    """0 ≤ contradicted_max < supported_min ≤ 1, or an error naming the offending option."""
    if not 0.0 <= contradicted_max <= 1.0:
        raise OptionsError("contradicted_max", f"must be between 0 and 1, got {contradicted_max}")
    if not 0.0 <= supported_min <= 1.0:
        raise OptionsError("supported_min", f"must be between 0 and 1, got {supported_min}")
    if not contradicted_max < supported_min:
        raise OptionsError(
            "contradicted_max",
            f"must be below supported_min ({contradicted_max} is not below {supported_min})",
        )


@dataclass(frozen=True)
class ClaimsOptions:
    """Options of a `claims` job. Cutoffs are applied by our code and never sent to the model."""

    model: str = DEFAULT_MODEL
    mode: JobMode = "grounded"
    supported_min: float = SUPPORTED_MIN
    contradicted_max: float = CONTRADICTED_MAX
    budget_usd: float | None = None
    priority: Priority = "batch"
    # Sent a signed message when the job completes, fails or is cancelled (else the tenant's default URL).
    webhook_url: str | None = None
    # Ungrounded claims per Decisions request (docs/spec.md §9.3); 1 sends one request a claim.
    pack_size: int = 1
    reuse: Reuse = "auto"
    reuse_max_age_hours: float | None = None

    @property
    def modes(self) -> tuple[Mode, ...]:
        """The request modes each claim is sent in."""
        return modes_for(self.mode)

    def as_dict(self) -> dict[str, JsonValue]:
        return without_unset_webhook(asdict(self))


CLAIMS_OPTION_NAMES = frozenset(
    {
        "model",
        "mode",
        "supported_min",
        "contradicted_max",
        "budget_usd",
        "priority",
        "webhook_url",
        "pack_size",
    }
    | REUSE_OPTION_NAMES
)


def known_options(raw: Mapping[str, Any] | None, names: frozenset[str]) -> Mapping[str, Any]:
    """The options object (none given: empty), refused at the first option that is not in `names`."""
    raw = raw or {}
    if not isinstance(raw, Mapping):
        raise OptionsError("options", "must be an object")
    unknown = sorted(set(raw) - names)
    if unknown:
        raise OptionsError(unknown[0], f"unknown option (allowed: {', '.join(sorted(names))})")
    return raw


def model_option(raw: Mapping[str, Any], default: str) -> str:
    """`model`: a Decisions model factgate knows the price of."""
    model = raw.get("model") or default
    if not isinstance(model, str) or model not in KNOWN_MODELS:
        raise OptionsError("model", f"unknown model {model!r} (known: {', '.join(sorted(KNOWN_MODELS))})")
    return model


def budget_option(raw: Mapping[str, Any]) -> float | None:
    """`budget_usd`: stop sending once this much has been spent (None: no budget)."""
    budget = number_option(raw, "budget_usd", None)
    if budget is not None and budget <= 0:
        raise OptionsError("budget_usd", f"must be positive, got {budget}")
    return budget


def priority_option(raw: Mapping[str, Any]) -> Priority:
    """`interactive` (someone is waiting: goes first within the tenant's share) or `batch` (the default)."""
    value = raw.get("priority") or "batch"
    if value not in PRIORITIES:
        raise OptionsError("priority", f"must be one of {', '.join(PRIORITIES)}, got {value!r}")
    return cast(Priority, value)


def parse_claims_options(raw: Mapping[str, Any] | None) -> ClaimsOptions:
    """Validate `claims` options; raises OptionsError naming the first bad option."""
    raw = known_options(raw, CLAIMS_OPTION_NAMES)
    model = model_option(raw, DEFAULT_MODEL)
    mode = raw.get("mode") or "grounded"
    if mode not in CLAIMS_MODES:
        raise OptionsError("mode", f"must be one of {', '.join(CLAIMS_MODES)}, got {mode!r}")
    supported_min = number_option(raw, "supported_min", SUPPORTED_MIN)
    contradicted_max = number_option(raw, "contradicted_max", CONTRADICTED_MAX)
    assert supported_min is not None and contradicted_max is not None
    check_cutoffs(supported_min, contradicted_max)
    budget = budget_option(raw)
    pack_size = pack_size_option(raw, 1)
    if pack_size > 1 and mode != "ungrounded":
        raise OptionsError(
            "pack_size",
            f"must be 1 with mode {mode}: a grounded request's web search is built from the question text "
            "and the start of the state, so claims packed in one request would share one search and its "
            "evidence (docs/spec.md §9.3); pack claims with mode ungrounded",
        )
    reuse, max_age = reuse_options(raw)
    return ClaimsOptions(
        model=model,
        mode=cast(JobMode, mode),
        supported_min=supported_min,
        contradicted_max=contradicted_max,
        budget_usd=budget,
        priority=priority_option(raw),
        webhook_url=webhook_url_option(raw),
        pack_size=pack_size,
        reuse=reuse,
        reuse_max_age_hours=max_age,
    )


# --- answer and quote jobs -----------------------------------------------------------------------------

QUESTIONS_OPTION_NAMES = (
    frozenset({"model", "budget_usd", "priority", "webhook_url", "pack_size", "audit_share"})
    | REUSE_OPTION_NAMES
)

# The Decisions model the answer-gate label cutoffs (0.5/0.6/0.7/0.4), the quote cutoffs (0.3/0.6) and their
# recorded outcomes (docs/spec.md §7.2, §7.3) were measured on. It is the default of `answer` and `quote`
# jobs so that, unless a caller asks for another model, the cutoffs are applied to the model they were
# measured on. `claims` jobs keep DEFAULT_MODEL: their cutoffs and outcomes were recorded on it.
CUTOFFS_MODEL = "pplx-decider-v1.1-27b"


def cutoffs_model_note(model: str) -> str | None:
    """What an answer or quote report must say when its job did not use CUTOFFS_MODEL; None when it did.

    A cutoff is a statement about one model's probabilities: on another model the same cutoff may sort
    sentences or candidates differently, so every report of such a job says so rather than imply the
    recorded behaviour carries over.
    """
    if model == CUTOFFS_MODEL:
        return None
    return (
        f"The cutoffs were measured on {CUTOFFS_MODEL}; this job used {model}, on which they have not been "
        "measured."
    )


@dataclass(frozen=True)
class QuestionsOptions:
    """Options of an `answer` or `quote` job: the Decisions model and an optional budget.

    The cutoffs of both checks (label cutoffs, COMPARE_MIN / QUOTE_MIN) are fixed by docs/spec.md §3-§4 and
    are not options: the recorded reference outcomes were measured with them, on CUTOFFS_MODEL, which is
    therefore the default model here.
    """

    model: str = CUTOFFS_MODEL
    budget_usd: float | None = None
    priority: Priority = "batch"
    webhook_url: str | None = None
    # Sentences (answer) or search results (quote) per Decisions request (docs/spec.md §9); 1, the
    # default, is the shape the recorded outcomes of docs/spec.md §7 were measured with.
    pack_size: int = 1
    # The share of a packed answer job's answers re-asked one sentence per request (docs/spec.md §9.6);
    # None (not given): the default, DEFAULT_AUDIT_SHARE. Stored only when given; quote jobs do not audit.
    audit_share: float | None = None
    reuse: Reuse = "auto"
    reuse_max_age_hours: float | None = None

    def as_dict(self) -> dict[str, JsonValue]:
        options = without_unset_webhook(asdict(self))
        if options.get("audit_share") is None:
            options.pop("audit_share", None)
        return options


def parse_questions_options(raw: Mapping[str, Any] | None) -> QuestionsOptions:
    """Validate `answer`/`quote` options; raises OptionsError naming the first bad option."""
    raw = known_options(raw, QUESTIONS_OPTION_NAMES)
    model = model_option(raw, CUTOFFS_MODEL)
    budget = budget_option(raw)
    reuse, max_age = reuse_options(raw)
    return QuestionsOptions(
        model=model,
        budget_usd=budget,
        priority=priority_option(raw),
        webhook_url=webhook_url_option(raw),
        pack_size=pack_size_option(raw, 1),
        audit_share=(audit_share_option(raw, 0.0) if raw.get("audit_share") not in (None, "") else None),
        reuse=reuse,
        reuse_max_age_hours=max_age,
    )
