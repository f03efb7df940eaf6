"""The `claims` job kind as pure rules (docs/spec.md §2): validate the input rows, build the Decisions request
for one claim in one mode, turn a probability into a verdict, and score a run against its labels.

Nothing here does I/O; jobs/ stores what these functions return and workers/ sends the bodies.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from decimal import Decimal
from typing import Any, Final, Literal, NamedTuple, TypedDict, get_args

from pydantic import JsonValue

from checks import pricing
from checks.contracts import Contract
from checks.grounding import MAX_QUERY_BYTES, claim_in_query, is_data_url
from checks.ndjson import (
    MAX_ERRORS_KEPT,
    UNPRINTABLE_ID,
    Appender,
    RowCollector,
    RowError,
    RowErrorJson,
    RowLine,
    Unit,
    feed_ndjson,
    show_value,
)
from checks.request_bodies import DecisionsQuestion, DecisionsRequest

__all__ = [
    "ALLOWED_FIELDS",
    "CLAIM_ROOM_BYTES",
    "CONTRADICTED_MAX",
    "DEFAULT_MAX_CLAIM_BYTES",
    "DEFAULT_MAX_ROWS",
    "INSTRUCTIONS",
    "MAX_ERRORS_KEPT",
    "MAX_FALSE_CONTRADICTION_RATE",
    "MAX_ID_CHARS",
    "MAX_KIND_CHARS",
    "MAX_MISSED_FAILURES",
    "MAX_REVIEW_RATE",
    "MAX_SOURCE_CHARS",
    "MODES",
    "QUESTION_NAME",
    "SUPPORTED_MIN",
    "ClaimRow",
    "ClaimsValidationError",
    "Flip",
    "JobMode",
    "Mode",
    "Outcome",
    "RowError",
    "Scorecard",
    "Verdict",
    "acceptance_bounds",
    "claim_outside_query",
    "flips",
    "modes_for",
    "parse_ndjson_lines",
    "question",
    "request_body",
    "scorecard",
    "stream_rows",
    "validate_cutoffs",
    "validate_rows",
    "verdict",
]

# --- input rows -------------------------------------------------------------------------------------------

DEFAULT_MAX_ROWS = 100_000
DEFAULT_MAX_CLAIM_BYTES = 4_096  # the search sees at most 237 bytes of a claim; the model reads all of it
MAX_ID_CHARS = 200  # ids come back in every result line and are stored beside each item
MAX_KIND_CHARS = 64
MAX_SOURCE_CHARS = 2_048
ALLOWED_FIELDS: Final = ("id", "claim", "label", "kind", "source")
_ALLOWED = frozenset(ALLOWED_FIELDS)


class ClaimRow(NamedTuple):
    """One valid input row. `label` None means unlabelled: it is checked but not scored.
    (A NamedTuple: immutable, and cheap to build 100,000 times.)"""

    id: str
    claim: str
    label: bool | None = None
    kind: str | None = None
    source: str | None = None


class RefusalJson(TypedDict):
    """A refused batch as JSON: the problems kept, and how many more there were."""

    errors: list[RowErrorJson]
    more: int
    total: int


class ClaimsValidationError(ValueError):
    """The batch is rejected whole. `errors` holds the first MAX_ERRORS_KEPT problems in input order and
    `more` counts the ones not kept, so a caller can fix every row in one round trip."""

    def __init__(self, errors: Sequence[RowError], more: int = 0) -> None:
        self.errors: list[RowError] = list(errors)
        self.more = more
        shown = "; ".join(str(e) for e in self.errors[:5])
        rest = len(self.errors) - min(len(self.errors), 5) + more
        super().__init__(shown + (f"; and {rest} more" if rest else ""))

    @property
    def total(self) -> int:
        return len(self.errors) + self.more

    def as_dict(self) -> RefusalJson:
        return {"errors": [e.as_dict() for e in self.errors], "more": self.more, "total": self.total}


def _not_a_string(value: object) -> str:
    return "is required" if value is None else f"must be a string, got {show_value(value)}"


def _string_problem(value: str, max_chars: int) -> str | None:
    if "\x00" in value:  # Postgres text cannot hold NUL
        return "must not contain a NUL character"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid Unicode (it holds an unpaired surrogate escape)"
    if len(value) > max_chars:
        return f"is {len(value):,} characters, over the limit of {max_chars:,}"
    return None


class _Checker(RowCollector[ClaimRow]):
    """Validates claim rows one at a time. Shared by both intakes (NDJSON lines, JSON items)."""

    def __init__(
        self, *, max_rows: int, max_claim_bytes: int, unit: Unit, rows: Appender[ClaimRow] | None = None
    ) -> None:
        if max_claim_bytes < 1:
            raise ValueError("max_claim_bytes must be at least 1")
        super().__init__(
            max_rows=max_rows, unit=unit, noun="claims", refusal=ClaimsValidationError, rows=rows
        )
        self.max_claim_bytes = max_claim_bytes

    def check(self, line: int, obj: object) -> None:
        if type(obj) is dict and self._accept_plain(line, obj):
            return
        self._check_slowly(line, obj)

    def _accept_plain(self, line: int, obj: dict[str, object]) -> bool:
        """Fast path for the common row (plain printable strings, nothing odd). Its conditions are
        sufficient, not necessary: anything it does not accept goes to `_check_slowly`, which decides
        and names the problems. Keeps 100,000 rows well under a second."""
        get = obj.get
        row_id, claim, label, kind, source = get("id"), get("claim"), get("label"), get("kind"), get("source")
        if not (
            type(row_id) is str
            and type(claim) is str
            and (label is None or label is True or label is False)
            and (kind is None or (type(kind) is str and len(kind) <= MAX_KIND_CHARS and kind.isprintable()))
            and (source is None or (type(source) is str and len(source) <= MAX_SOURCE_CHARS))
            and 0 < len(row_id) <= MAX_ID_CHARS
            and row_id.isprintable()
            and not row_id.isspace()
            and row_id not in self.seen
            and claim
            and not claim.isspace()
            and "\x00" not in claim
            and _ALLOWED.issuperset(obj)
        ):
            return False
        if source is not None and not source.isprintable():
            return False
        try:
            size = len(claim.encode("utf-8"))  # also refuses unpaired surrogates
        except UnicodeEncodeError:
            return False
        if size > self.max_claim_bytes:
            return False
        # isprintable() is False for NUL and for unpaired surrogates, so id, kind and source are clean.
        self.seen[row_id] = line
        if not self.errors:
            self.rows.append(ClaimRow(row_id, claim, label, kind, source))
        return True

    def _check_slowly(self, line: int, obj: object) -> None:
        ok = self.known_fields(line, obj, ALLOWED_FIELDS)
        if not isinstance(obj, dict):
            return

        good_id: str | None = None
        good_claim: str | None = None
        row_id = obj.get("id")
        if not isinstance(row_id, str):
            self.fail(line, "id", _not_a_string(row_id))
            ok = False
        elif not row_id.strip():
            self.fail(line, "id", "must not be empty")
            ok = False
        elif problem := _string_problem(row_id, MAX_ID_CHARS):
            self.fail(line, "id", problem)
            ok = False
        elif not row_id.isprintable():
            self.fail(line, "id", UNPRINTABLE_ID)
            ok = False
        elif (first := self.seen.get(row_id)) is not None:
            self.fail(line, "id", f"duplicate id {show_value(row_id)} (first on {self.unit} {first})")
            ok = False
        else:
            self.seen[row_id] = line
            good_id = row_id

        claim = obj.get("claim")
        if not isinstance(claim, str):
            self.fail(line, "claim", _not_a_string(claim))
            ok = False
        elif not claim.strip():
            self.fail(line, "claim", "must not be empty")
            ok = False
        elif "\x00" in claim:
            self.fail(line, "claim", "must not contain a NUL character")
            ok = False
        else:
            try:
                size = len(claim.encode("utf-8"))
            except UnicodeEncodeError:
                self.fail(line, "claim", "is not valid Unicode (it holds an unpaired surrogate escape)")
                ok = False
            else:
                if size > self.max_claim_bytes:
                    self.fail(line, "claim", f"is {size:,} bytes, over the limit of {self.max_claim_bytes:,}")
                    ok = False
                else:
                    good_claim = claim

        label = obj.get("label")
        if label is not None and not isinstance(label, bool):
            self.fail(line, "label", f"must be true or false, got {show_value(label)}")
            ok = False

        optional: dict[str, str | None] = {}
        for field, limit in (("kind", MAX_KIND_CHARS), ("source", MAX_SOURCE_CHARS)):
            value = obj.get(field)
            if value is None:
                optional[field] = None
            elif not isinstance(value, str):
                self.fail(line, field, f"must be a string, got {show_value(value)}")
                ok = False
            elif problem := _string_problem(value, limit):
                self.fail(line, field, problem)
                ok = False
            else:
                optional[field] = value

        # Once anything failed the batch is lost: stop building rows, keep collecting errors.
        if ok and not self.errors and good_id is not None and good_claim is not None:
            good_label = label if isinstance(label, bool) else None
            self.rows.append(ClaimRow(good_id, good_claim, good_label, optional["kind"], optional["source"]))


def parse_ndjson_lines(
    lines: Iterable[RowLine],
    *,
    max_rows: int = DEFAULT_MAX_ROWS,
    max_claim_bytes: int = DEFAULT_MAX_CLAIM_BYTES,
) -> list[ClaimRow]:
    """Validate an NDJSON batch, all or nothing.

    Lines are numbered from 1 as given; blank lines are skipped but keep their number. A UTF-8 byte-order
    mark on line 1 is ignored. Every bad line is reported (up to MAX_ERRORS_KEPT, then counted); reading
    stops at the first row past `max_rows`, so an oversized upload is not parsed to its end.
    Raises ClaimsValidationError; returns the rows in input order.
    """
    checker = _Checker(max_rows=max_rows, max_claim_bytes=max_claim_bytes, unit="line")
    feed_ndjson(lines, checker)
    return checker.result()


def stream_rows(
    lines: Iterable[RowLine],
    rows: Appender[ClaimRow],
    *,
    max_rows: int = DEFAULT_MAX_ROWS,
    max_claim_bytes: int = DEFAULT_MAX_CLAIM_BYTES,
) -> int:
    """Validate an NDJSON batch line by line (a CSV one through `checks/csv_rows.py:csv_records`),
    handing each valid row to `rows` as it is read (until the first problem: from then on only problems
    are collected). Returns the number of rows; raises ClaimsValidationError, with the same messages as
    `parse_ndjson_lines`, naming lines from 1."""
    checker = _Checker(max_rows=max_rows, max_claim_bytes=max_claim_bytes, unit="line", rows=rows)
    feed_ndjson(lines, checker)
    checker.result()
    return checker.count


def validate_rows(
    objs: Sequence[object],
    *,
    max_rows: int = DEFAULT_MAX_ROWS,
    max_claim_bytes: int = DEFAULT_MAX_CLAIM_BYTES,
    unit: Unit = "item",
) -> list[ClaimRow]:
    """Validate already-parsed rows (a JSON array body), all or nothing. Errors name the 1-based position
    as `item N` (or `line N` with unit="line"). Raises ClaimsValidationError."""
    checker = _Checker(max_rows=max_rows, max_claim_bytes=max_claim_bytes, unit=unit)
    checker.check_items(objs)
    return checker.result()


# --- the request ----------------------------------------------------------------------------------------

QUESTION_NAME = "is_true"
# Short on purpose: every byte of question text is a byte of claim the grounding search cannot see.
# 18 bytes leave 256 - 18 - 1 = 237 bytes for the claim in the query.
INSTRUCTIONS = "Is the claim true?"

Mode = Literal["ungrounded", "grounded"]
JobMode = Literal["ungrounded", "grounded", "both"]
MODES: tuple[Mode, ...] = get_args(Mode)


def modes_for(job_mode: JobMode) -> tuple[Mode, ...]:
    """The request modes a job runs each claim in; `both` is the seed's eval (flips reported)."""
    if job_mode == "both":
        return MODES
    if job_mode in MODES:
        return (job_mode,)
    raise ValueError(f'mode must be "ungrounded", "grounded" or "both", got {job_mode!r}')


def question() -> DecisionsQuestion:
    """The one question every claim request asks (a fresh dict: callers may mutate theirs)."""
    return {"type": "noul", "instructions": INSTRUCTIONS}


def request_body(claim: str, *, model: str, mode: Mode) -> DecisionsRequest:
    """The Decisions body for one claim: the claim alone as the state, so it leads the search query.
    The verdict cutoffs are never sent; they are our policy, applied to the returned probability."""
    pricing.input_rate_per_million(model)  # an unknown model fails here, naming it, not upstream
    body: DecisionsRequest = {"model": model, "state": claim, "questions": {QUESTION_NAME: question()}}
    if mode == "grounded":
        body["mode"] = "web_grounding"
    elif mode != "ungrounded":
        raise ValueError(f'mode must be "ungrounded" or "grounded", got {mode!r}')
    return body


_QUESTION = question()
# Bytes of the query left for the claim: 256 - 18 (the instructions) - 1 (the separator) = 237.
CLAIM_ROOM_BYTES = MAX_QUERY_BYTES - len(INSTRUCTIONS.encode("utf-8")) - 1


def claim_outside_query(claim: str) -> bool:
    """Whether a grounded request for this claim would search for something less than the whole claim
    (it is longer than the query's room for it, or is a data: URL). Jobs warn about these at intake."""
    # Exact shortcut for the common case: normalising never lengthens text, so a claim of at most 237
    # raw bytes that is not a data: URL always fits whole after the question. Saves ~40 µs a claim.
    if len(claim.encode("utf-8")) <= CLAIM_ROOM_BYTES and not is_data_url(claim):
        return False
    return not claim_in_query(claim, claim, _QUESTION)


# --- verdicts ------------------------------------------------------------------------------------------

SUPPORTED_MIN = 0.80
CONTRADICTED_MAX = 0.20
Verdict = Literal["supported", "contradicted", "review"]


def _is_probability(p: object) -> bool:
    return isinstance(p, int | float) and not isinstance(p, bool) and 0.0 <= p <= 1.0  # NaN fails too


def validate_cutoffs(supported_min: float, contradicted_max: float) -> None:
    """Require 0 ≤ contradicted_max < supported_min ≤ 1, so every probability has exactly one verdict."""
    for name, value in (("supported_min", supported_min), ("contradicted_max", contradicted_max)):
        if not _is_probability(value):
            raise ValueError(f"{name} must be a number from 0 to 1, got {value!r}")
    if not contradicted_max < supported_min:
        raise ValueError(
            f"contradicted_max ({contradicted_max}) must be below supported_min ({supported_min})"
        )


def verdict(
    p: float, supported_min: float = SUPPORTED_MIN, contradicted_max: float = CONTRADICTED_MAX
) -> Verdict:
    """p ≥ supported_min → supported; p ≤ contradicted_max → contradicted; between → review. Both
    cutoffs are inclusive and compared against the unrounded probability."""
    validate_cutoffs(supported_min, contradicted_max)
    if not _is_probability(p):
        raise ValueError(f"probability must be a number from 0 to 1, got {p!r}")
    if p >= supported_min:
        return "supported"
    if p <= contradicted_max:
        return "contradicted"
    return "review"


# --- scorecard -----------------------------------------------------------------------------------------

# Acceptance bounds (docs/spec.md §2), all inclusive: no false claim marked supported, at most 5 % of the
# labelled claims true-but-contradicted, at most 25 % of them sent to review. Rates as Decimal so 1 of 20
# is exactly 5 %.
MAX_MISSED_FAILURES = 0
MAX_FALSE_CONTRADICTION_RATE = 0.05
MAX_REVIEW_RATE = 0.25
_FALSE_CONTRADICTION_RATE = Decimal("0.05")
_REVIEW_RATE = Decimal("0.25")


@dataclass(frozen=True, slots=True)
class Outcome:
    """One claim in one mode, as the run left it. `p` None means the request failed (say why in
    `error`); its tokens, latency and attempts still count, because failed grounded attempts are billed.

    `attempts` is every POST of every try; `latency_s` is the upstream's own time (the POSTs, what the
    reference recipe measured) and `queue_wait_s` the time spent waiting for a rate-limiter slot — our
    queue, which grows with load and says nothing about the API."""

    id: str
    label: bool | None
    p: float | None
    input_tokens: int = 0
    latency_s: float = 0.0
    attempts: int = 0
    search_results: int = 0
    error: str | None = None
    queue_wait_s: float = 0.0


class Scorecard(Contract):
    """Every figure of docs/spec.md §2 for one mode. See `scorecard` for what each count covers.

    A contract rather than a dataclass so that the summary's contract (`checks/kinds/claims.py:
    ScorecardFigures`) is these figures plus their bounds, not a second list of them."""

    mode: Mode
    model: str
    supported_min: float
    contradicted_max: float
    n: int
    errors: int
    supported: int
    contradicted: int
    review: int
    labelled: int
    labelled_errors: int
    correct: int | None
    wrong: int | None
    labelled_review: int | None
    missed_failures: int | None
    false_contradictions: int | None
    brier: float | None
    flips: int | None
    mean_input_tokens: float
    mean_latency_s: float
    mean_queue_wait_s: float
    grounded_attempts: int
    mean_search_results: float
    cost_per_1000_usd: float
    missed_failures_ok: bool | None
    false_contradictions_ok: bool | None
    review_ok: bool | None
    acceptance: bool | None

    def as_dict(self) -> dict[str, JsonValue]:
        """JSON-safe: only str, int, float (always finite), bool and None."""
        out: dict[str, JsonValue] = self.model_dump()
        out["bounds"] = {
            "max_missed_failures": MAX_MISSED_FAILURES,
            "max_false_contradiction_rate": MAX_FALSE_CONTRADICTION_RATE,
            "max_review_rate": MAX_REVIEW_RATE,
        }
        return out


def _check_outcome(o: Outcome) -> None:
    if not isinstance(o.id, str):
        raise ValueError(f"outcome id must be a string, got {o.id!r}")
    if o.label is not None and not isinstance(o.label, bool):
        raise ValueError(f"outcome {o.id!r}: label must be true, false or None, got {o.label!r}")
    if o.p is not None and not _is_probability(o.p):
        raise ValueError(f"outcome {o.id!r}: probability must be a number from 0 to 1, got {o.p!r}")
    if o.p is not None and o.error is not None:
        raise ValueError(f"outcome {o.id!r}: has both a probability and an error")
    for name in ("input_tokens", "attempts", "search_results"):
        value = getattr(o, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"outcome {o.id!r}: {name} must be a whole number of 0 or more, got {value!r}")
    for name in ("latency_s", "queue_wait_s"):
        value = getattr(o, name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"outcome {o.id!r}: {name} must be a number, got {value!r}")
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"outcome {o.id!r}: {name} must be finite and 0 or more, got {value!r}")


Bounds = tuple[bool | None, bool | None, bool | None, bool | None]


def acceptance_bounds(
    *,
    labelled: int,
    labelled_errors: int,
    missed_failures: int,
    false_contradictions: int,
    labelled_review: int,
) -> Bounds:
    """(missed_failures_ok, false_contradictions_ok, review_ok, acceptance) from a mode's labelled counts; all
    None without a labelled claim. Shared by `scorecard` and the report's replay of stored probabilities
    (jobs/claims_report.py), which counts in SQL and must judge exactly the same way."""
    if labelled <= 0:
        return None, None, None, None
    missed_ok = missed_failures <= MAX_MISSED_FAILURES
    false_ok = false_contradictions <= _FALSE_CONTRADICTION_RATE * labelled
    review_ok = labelled_review <= _REVIEW_RATE * labelled
    return missed_ok, false_ok, review_ok, missed_ok and false_ok and review_ok and labelled_errors == 0


def scorecard(
    outcomes: Sequence[Outcome],
    *,
    mode: Mode,
    model: str,
    supported_min: float = SUPPORTED_MIN,
    contradicted_max: float = CONTRADICTED_MAX,
    baseline: Mapping[str, float | None] | None = None,
) -> Scorecard:
    """Score one mode of a run.

    How each claim counts (the seed scores only fully labelled, fully answered runs; we generalise):
    - `n` is every outcome. `errors` counts those without a probability (failed or skipped); they are
      never dropped: they have no verdict, but their tokens, latency and attempts are in the means and
      the cost, which are therefore per claim submitted (`attempts` bills searches even on failure).
    - `supported`/`contradicted`/`review` are the verdicts of every answered claim, labelled or not.
    - The label figures cover labelled claims: `labelled` (answered or not), `correct`, `wrong`,
      `labelled_review`, `missed_failures` (false claims marked supported), `false_contradictions`
      (true claims marked contradicted) and `brier` (mean squared error of p against the label, answered
      labelled claims only). With every claim labelled and answered, correct + wrong + review = n as in
      the seed. With no labelled claim they are None, as are the bounds and `acceptance`.
    - The rate bounds divide by `labelled`, inclusive. `acceptance` needs all three bounds and no failed
      labelled claim: an unanswered claim might have been any verdict.
    - `flips` counts claims whose verdict differs from `baseline` (the other mode's probabilities by id);
      ids missing from either side or without a probability are not compared. None without a baseline.
    """
    validate_cutoffs(supported_min, contradicted_max)
    if mode not in MODES:
        raise ValueError(f'mode must be "ungrounded" or "grounded", got {mode!r}')
    pricing.input_rate_per_million(model)
    n = len(outcomes)
    if n == 0:
        raise ValueError("a scorecard needs at least one outcome")

    errors = supported = contradicted = review = 0
    labelled = labelled_errors = correct = wrong = labelled_review = missed = false_contra = 0
    squared: list[float] = []
    tokens = attempts = results = 0
    latencies: list[float] = []
    waits: list[float] = []
    seen: set[str] = set()
    verdicts: dict[str, Verdict] = {}
    for o in outcomes:
        _check_outcome(o)
        if o.id in seen:
            raise ValueError(f"outcome id {o.id!r} appears twice")
        seen.add(o.id)
        tokens += o.input_tokens
        attempts += o.attempts
        results += o.search_results
        latencies.append(float(o.latency_s))
        waits.append(float(o.queue_wait_s))
        if o.label is not None:
            labelled += 1
        if o.p is None:
            errors += 1
            if o.label is not None:
                labelled_errors += 1
            continue
        v = verdict(o.p, supported_min, contradicted_max)
        if baseline is not None:
            verdicts[o.id] = v
        if v == "supported":
            supported += 1
        elif v == "contradicted":
            contradicted += 1
        else:
            review += 1
        if o.label is None:
            continue
        squared.append((o.p - (1.0 if o.label else 0.0)) ** 2)
        if v == "review":
            labelled_review += 1
        elif (v == "supported") == o.label:
            correct += 1
        else:
            wrong += 1
            if o.label:
                false_contra += 1
            else:
                missed += 1

    flip_count: int | None = None
    if baseline is not None:
        flip_count = 0
        for claim_id, own in verdicts.items():
            other = baseline.get(claim_id)
            if other is not None and verdict(other, supported_min, contradicted_max) != own:
                flip_count += 1

    has_labels = labelled > 0
    missed_ok, false_ok, review_ok, acceptance = acceptance_bounds(
        labelled=labelled,
        labelled_errors=labelled_errors,
        missed_failures=missed,
        false_contradictions=false_contra,
        labelled_review=labelled_review,
    )
    grounded_attempts = attempts if mode == "grounded" else 0
    mean_tokens = tokens / n
    return Scorecard(
        mode=mode,
        model=model,
        supported_min=float(supported_min),
        contradicted_max=float(contradicted_max),
        n=n,
        errors=errors,
        supported=supported,
        contradicted=contradicted,
        review=review,
        labelled=labelled,
        labelled_errors=labelled_errors,
        correct=correct if has_labels else None,
        wrong=wrong if has_labels else None,
        labelled_review=labelled_review if has_labels else None,
        missed_failures=missed if has_labels else None,
        false_contradictions=false_contra if has_labels else None,
        brier=math.fsum(squared) / len(squared) if squared else None,
        flips=flip_count,
        mean_input_tokens=mean_tokens,
        mean_latency_s=math.fsum(latencies) / n,
        mean_queue_wait_s=math.fsum(waits) / n,
        grounded_attempts=grounded_attempts,
        mean_search_results=results / n,
        cost_per_1000_usd=pricing.cost_per_1000_claims(mean_tokens, grounded_attempts, n, model),
        missed_failures_ok=missed_ok,
        false_contradictions_ok=false_ok,
        review_ok=review_ok,
        acceptance=acceptance,
    )


@dataclass(frozen=True, slots=True)
class Flip:
    """A claim whose verdict changed between the two modes."""

    id: str
    ungrounded_p: float
    grounded_p: float
    ungrounded: Verdict
    grounded: Verdict

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def flips(
    ungrounded: Mapping[str, float | None],
    grounded: Mapping[str, float | None],
    *,
    supported_min: float = SUPPORTED_MIN,
    contradicted_max: float = CONTRADICTED_MAX,
) -> list[Flip]:
    """Claims whose verdict differs between modes, in the order of `ungrounded`. Only ids answered in
    both modes are compared: a claim that failed in one mode has no verdict there to flip from."""
    validate_cutoffs(supported_min, contradicted_max)
    out: list[Flip] = []
    for claim_id, p_u in ungrounded.items():
        p_g = grounded.get(claim_id)
        if p_u is None or p_g is None:
            continue
        v_u = verdict(p_u, supported_min, contradicted_max)
        v_g = verdict(p_g, supported_min, contradicted_max)
        if v_u != v_g:
            out.append(Flip(claim_id, p_u, p_g, v_u, v_g))
    return out
