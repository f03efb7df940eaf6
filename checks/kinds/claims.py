"""The `claims` recipe: one row per claim, one Decisions request per claim and mode, a scorecard per mode.

One stage (`claim`): intake creates every item and the job is done when they are settled, so it needs no
stage machine. The rules themselves are in checks/claims.py; this module says how they make a kind and
what its result lines and summary look like.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal

from pydantic import Field

from checks import claims as rules
from checks.contracts import Contract, Cutoffs, ItemStatusName, ReusedFrom, StoredContract
from checks.kinds._schemas import CLAIM_ROW, CLAIMS_OPTIONS
from checks.ndjson import RowLine
from checks.options import CLAIMS_OPTION_NAMES, parse_claims_options
from checks.recipes import Recipe, RowLimits, StageSpec, register

CSV_COLUMNS = ("custom_id", "mode", "status", "p", "verdict", "label", "request_id", "error", "reused_from")


class ClaimModeResult(Contract):
    """A claim in one mode."""

    status: ItemStatusName
    p: float | None = None
    verdict: rules.Verdict | None = None
    request_id: str | None = None
    request_ids: list[str] = Field(default_factory=list)
    attempts: int = 0
    input_tokens: int | None = None
    usage: dict[str, Any] = Field(default_factory=dict)
    in_query: bool | None = None
    sources: list[dict[str, Any]] = Field(default_factory=list)
    error: str | None = None
    # Answered from the tenant's verdict store: the original request's id and time (absent otherwise).
    reused_from: ReusedFrom | None = Field(default=None, exclude_if=lambda v: v is None)


class ClaimResult(Contract):
    """One NDJSON line of GET /v1/jobs/{job_id}/results for a claims job: a claim with every mode."""

    custom_id: str
    claim: str | None = None
    label: bool | None = None
    results: dict[str, ClaimModeResult] = Field(description="Per mode (`ungrounded`, `grounded`).")


class Bounds(Contract):
    max_missed_failures: int
    max_false_contradiction_rate: float
    max_review_rate: float


class ScorecardFigures(rules.Scorecard):
    """Every figure of docs/spec.md §2 for one mode (checks/claims.py:Scorecard)."""

    bounds: Bounds


class FlipEntry(Contract):
    id: str
    ungrounded_p: float
    grounded_p: float
    ungrounded: rules.Verdict
    grounded: rules.Verdict


class ClaimsSummary(StoredContract):
    """The summary of a claims job (with `job_id`, `status` and `partial`: the scorecard endpoint's body)."""

    kind: Literal["claims"] = "claims"
    cutoffs: Cutoffs
    modes: list[rules.Mode]
    scorecards: dict[str, ScorecardFigures]
    flips: list[FlipEntry]
    outside_query: int
    request_counts: dict[str, int] | None = None
    # Stored at finalize: per mode, per bin, [count, true count, sum of p] (the report page's diagram).
    calibration: dict[str, dict[str, list[float]]] | None = None
    # Set when the report replays other cutoffs: every flip at them (`flips` lists the first ones).
    flips_total: int | None = None


def _from_lines(lines: Iterable[RowLine], limits: RowLimits) -> Sequence[rules.ClaimRow]:
    return rules.parse_ndjson_lines(lines, max_rows=limits.max_rows, max_claim_bytes=limits.max_claim_bytes)


def _from_items(items: Sequence[object], limits: RowLimits) -> Sequence[rules.ClaimRow]:
    return rules.validate_rows(items, max_rows=limits.max_rows, max_claim_bytes=limits.max_claim_bytes)


RECIPE = register(
    Recipe(
        name="claims",
        title="Claims",
        order=1,
        stages=(StageSpec("claim", "decisions"),),
        parse_options=parse_claims_options,
        rows_from_lines=_from_lines,
        rows_from_items=_from_items,
        result_line=ClaimResult,
        summary=ClaimsSummary,
        csv_columns=CSV_COLUMNS,
        row_required=("id", "claim"),
        row_fields=rules.ALLOWED_FIELDS,
        option_names=CLAIMS_OPTION_NAMES,
        description="check each claim",
        row_schema=CLAIM_ROW,
        options_schema=CLAIMS_OPTIONS,
        schema_names=("ClaimRow", "ClaimsOptions"),
    )
)
