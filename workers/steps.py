"""What every item handler shares: priced call rows per endpoint, the budget guard, reading Decisions
answers as plain dicts, and one way to turn an upstream failure into an outcome.

The task gives each handler a `Calls`: every upstream call goes through `Calls.run`, which keeps the call's
rows whatever happens (an answer, an error, a call stopped half-way because the limiter gave up), so each
HTTP attempt becomes an `api_calls` row of its item, and counts the money against the job's budget.
Decisions requests go through `Calls.decide`, which first looks the request up in the tenant's verdict
store (checks/reuse.py, jobs/verdicts.py): a hit is answered before the client is called, so it takes no
limiter slot and sends nothing, and is recorded as a `reused` row of cost 0; a request sent and answered is
kept there for the tenant's later jobs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sqlalchemy.orm import Session

from checks import pricing
from checks import reuse as reuse_rules
from checks.answers import AGENT_PRESET
from checks.packing import AUDIT_STAGE
from clients.errors import CallInterrupted, UpstreamError
from clients.perplexity import PerplexityClient
from clients.records import CallRecord
from clients.results import Decision
from jobs.keyring import KeyringError
from jobs.records import CallRow, ClaimedItem
from jobs.retention import Retention
from jobs.verdicts import NewVerdict, find_verdict, keep_verdict
from models import autocommit_scope, utcnow
from workers.budget import over_budget, spend
from workers.calls import call_rows
from workers.context import WorkerContext
from workers.faults import INFRA_ERRORS, is_infrastructure_fault
from workers.faults import describe as describe_fault
from workers.limiter import LimiterTimeout
from workers.outcomes import Done, Failed, Outcome, PackAnswered, PackOutcome, Skipped, Transient
from workers.reuse import ReusedFrom, decision_json, stored_decision

log = logging.getLogger("factgate.workers")

Handler = Callable[[WorkerContext, ClaimedItem, "Calls"], Outcome]
# A pack's handler gets its items (the head first) and one `Calls`, whose item is the head.
PackHandler = Callable[[WorkerContext, Sequence[ClaimedItem], "Calls"], PackOutcome]


def model_of(item: ClaimedItem) -> str:
    """The job's Decisions model (validated at intake)."""
    return str(item.options.get("model") or pricing.DEFAULT_MODEL)


def priced_rows(record: CallRecord, model: str | None = None) -> list[CallRow]:
    """`api_calls` rows for one call, priced by endpoint (docs/spec.md §1 prices).

    Agent calls are priced by their web search only (their token prices are not published); a Search
    call is one billed request per attempt; Decisions input tokens at the model's rate.
    """
    if record.endpoint == "agent":
        fast = AGENT_PRESET == "fast"
        search = pricing.AGENT_WEB_SEARCH_FAST_USD if fast else pricing.AGENT_WEB_SEARCH_USD
        return call_rows(record, search_cost_usd=search, token_cost_per_m=0.0)
    if record.endpoint == "search":
        return call_rows(record, search_cost_usd=pricing.SEARCH_API_REQUEST_USD, token_cost_per_m=0.0)
    rate = pricing.input_rate_per_million(model or pricing.DEFAULT_MODEL)
    return call_rows(record, search_cost_usd=pricing.GROUNDED_SEARCH_USD, token_cost_per_m=rate)


def budget_skip(ctx: WorkerContext, item: ClaimedItem) -> Skipped | None:
    """Skipped when the job has a budget and has spent it (checked before each try of every item)."""
    budget = item.options.get("budget_usd")
    if budget is not None and over_budget(ctx, item.job_id, float(budget)):
        return Skipped(f"budget of ${float(budget):.4f} reached")
    return None


class NotInStoreError(Exception):
    """A try that may only be answered from the verdict store (`Calls.store_only`) needs a request the store
    does not answer; nothing was sent."""


class StepError(Exception):
    """One upstream call of a handler failed; `retryable` says whether trying the item later may help."""

    def __init__(self, message: str, *, retryable: bool, request_ids: list[str] | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.request_ids = list(request_ids or [])


@dataclass
class Calls:
    """The rows of every call an item made so far, and the money counted against the job's budget.

    `client` is the one the item's tenant uses: its own key's (`own_key` is that key's fingerprint), or the
    operator's.
    """

    ctx: WorkerContext
    item: ClaimedItem
    client: PerplexityClient
    own_key: str | None = None
    rows: list[CallRow] = field(default_factory=list)
    # Decisions requests of this try answered from the tenant's verdict store, in order.
    reused: list[ReusedFrom] = field(default_factory=list)
    # Answer from the store or not at all (NotInStoreError): a new item settled as it is created
    # (workers/store_answers.py) must never reach the upstream outside the dispatcher's order.
    store_only: bool = False
    # Where the store is read: the caller's transaction when it holds one (a thread must not wait for a
    # second pooled connection while it holds one), else a connection of its own.
    store: Session | None = None

    def add(self, record: CallRecord, model: str | None = None) -> None:
        rows = priced_rows(record, model)
        self.rows += rows
        if self.item.options.get("budget_usd") is None:
            return  # only a budget reads the counter: without one, counting is a Redis round trip for nothing
        try:
            spend(self.ctx, self.item.job_id, sum(r.cost_usd for r in rows))
        except INFRA_ERRORS:
            # The answer is paid for and kept; the counter is rebuilt from `api_calls` when it expires.
            log.warning(
                "could not count spend of job %s; the budget counter will be rebuilt", self.item.job_id
            )

    def run(self, call: Callable[[], Any], model: str | None = None) -> Any:
        """Make one upstream call; record its rows; raise StepError when it does not answer.

        An infrastructure fault (e.g. the limiter's Redis unreachable) propagates as itself, after the rows
        of any attempts already sent are kept: the task gives the try back.
        """
        if self.store_only:
            raise NotInStoreError
        try:
            result = call()
        except CallInterrupted as exc:
            self.add(exc.record, model)
            if isinstance(exc.cause, LimiterTimeout):
                raise StepError(
                    f"rate limiter: waited {exc.cause.waited:.1f} s for a slot; retrying later",
                    retryable=True,
                ) from None
            raise exc.cause from None
        except LimiterTimeout as exc:
            # Upstream is paused for longer than one wait (a long Retry-After): try the item later.
            raise StepError(
                f"rate limiter: waited {exc.waited:.1f} s for a slot; retrying later", retryable=True
            ) from None
        except UpstreamError as exc:
            self.add(exc.record, model)
            message = str(exc)
            if exc.status == 401 and self.own_key is not None:
                message += (
                    f"; the upstream refused this tenant's own API key (fingerprint {self.own_key}): set a "
                    "working one with `factgate tenants set NAME --upstream-key-file PATH`, or go back to "
                    "the operator's key with `--clear-upstream-key`, then retry the job"
                )
            raise StepError(message, retryable=exc.retryable, request_ids=exc.record.request_ids) from None
        self.add(result.record, model)
        return result

    def decide(
        self, body: Mapping[str, Any], model: str | None = None, *, reuse: bool = True, partial: bool = False
    ) -> Decision:
        """One Decisions request, answered from the tenant's verdict store when the job's policy allows and an
        entry may answer it (checks/reuse.py), else sent through `run` and, once answered, kept there.

        `reuse=False` bypasses the store both ways: for requests that must reach the upstream whatever was
        answered before (an audit of what the upstream says now). Raises StepError as `run` does.
        """
        # The packing audit asks what the upstream says now: never from the store, never kept in it.
        reuse = reuse and self.item.stage != AUDIT_STAGE
        policy = reuse_rules.policy_for(self.item.options, body) if reuse else reuse_rules.NEVER
        key = reuse_rules.request_key("decisions", self.client.base_url, body) if policy.write else b""
        if policy.read:
            retention = Retention.of(self.ctx.settings)
            if self.store is not None:
                stored = find_verdict(
                    self.store, self.item.tenant_id, key, policy=policy, retention=retention
                )
            else:
                with autocommit_scope(self.ctx.engine) as conn:
                    stored = find_verdict(conn, self.item.tenant_id, key, policy=policy, retention=retention)
            if stored is not None:
                answer = stored_decision(stored, grounded=reuse_rules.is_grounded(body))
                self.rows.append(
                    CallRow(
                        endpoint="decisions",
                        attempt=1,
                        status_code=None,
                        request_id=stored.request_id,
                        latency_ms=0.0,
                        model=stored.model,
                        reused=True,
                    )
                )
                self.reused.append(ReusedFrom(stored.request_id, stored.answered_at))
                return answer
        if self.store_only:
            raise NotInStoreError
        decision: Decision = self.run(lambda: self.client.decide(body, partial=partial), model)
        if policy.write and (not partial or len(decision.answers) == len(_questions(body))):
            self._keep(key, body, decision)
        return decision

    def _keep(self, key: bytes, body: Mapping[str, Any], decision: Decision) -> None:
        """Store an answered request for the tenant's later jobs; a failure here loses only that."""
        record = decision.record
        try:
            with autocommit_scope(self.ctx.engine) as conn:
                keep_verdict(
                    conn,
                    NewVerdict(
                        tenant_id=self.item.tenant_id,
                        job_id=self.item.job_id,
                        key=key,
                        endpoint="decisions",
                        model=reuse_rules.model_of(body),
                        grounded=reuse_rules.is_grounded(body),
                        request_id=record.request_id,
                        answered_at=utcnow(),
                        answer=decision_json(decision),
                        input_tokens=decision.input_tokens,
                        output_tokens=decision.output_tokens,
                    ),
                )
        except INFRA_ERRORS:
            log.warning("item %s: its answer could not be kept for reuse", self.item.id, exc_info=True)

    def marked(self, outcome: Outcome) -> Outcome:
        """A result that says which of its requests were answered from the store (`reused_from`: the one
        entry, or a list when the item made several such requests)."""
        said = self._reused_from()
        if said is None or not isinstance(outcome, Done):
            return outcome
        return Done({**outcome.output, "reused_from": said}, outcome.calls)

    def marked_pack(self, outcome: PackOutcome) -> PackOutcome:
        """`marked` for a pack: each member answered says where its answer came from."""
        said = self._reused_from()
        if said is None or not isinstance(outcome, PackAnswered):
            return outcome
        members = [
            Done({**m.output, "reused_from": said}, m.calls) if isinstance(m, Done) else m
            for m in outcome.members
        ]
        return PackAnswered(members, outcome.calls)

    def _reused_from(self) -> dict[str, Any] | list[dict[str, Any]] | None:
        found = [r.as_dict() for r in self.reused]
        return None if not found else found[0] if len(found) == 1 else found

    def failed(self, error: StepError, output: dict[str, Any] | None = None) -> Outcome:
        """The outcome of a handler stopped by `error`: retry later, or fail keeping `output`."""
        if error.retryable:
            return Transient(str(error), list(self.rows))
        kept = dict(output or {})
        kept.setdefault("request_id", error.request_ids[-1] if error.request_ids else None)
        kept.setdefault("request_ids", error.request_ids)
        kept.setdefault("error", str(error))
        return Failed(str(error), list(self.rows), kept)


def answers_as_dicts(decision: Decision) -> dict[str, dict[str, Any]]:
    """The validated answers in the API's own JSON shape (what checks/ reads and the run record keeps)."""
    out: dict[str, dict[str, Any]] = {}
    for name, answer in decision.answers.items():
        entry: dict[str, Any] = {"type": answer.type}
        if answer.noul is not None:
            entry["noul"] = answer.noul
        if answer.choice is not None:
            entry["choice"] = answer.choice
        if answer.score is not None:
            entry["score"] = answer.score
        if answer.probabilities:
            entry["probabilities"] = dict(answer.probabilities)
        if answer.confidence is not None:
            entry["confidence"] = answer.confidence
        if answer.legend:
            entry["legend"] = dict(answer.legend)
        out[name] = entry
    return out


def call_facts(record: CallRecord) -> dict[str, Any]:
    """What an item's output keeps of one call: request ids, attempts, latency, and which upstream fields
    had to be cleaned to be storable (`sanitized`, see clients/sanitize.py; usually empty)."""
    return {
        "request_id": record.request_id,
        "request_ids": record.request_ids,
        "attempts": record.attempt_count,
        "latency_s": round(record.latency_s, 4),
        "sanitized": list(record.sanitized),
    }


INFRA_RETRY_S = 5.0  # an outage of Redis or the database is usually seconds long
R = TypeVar("R", Outcome, PackOutcome)


def behind_prologue(
    ctx: WorkerContext, head: ClaimedItem, body: Callable[[Calls], R], what: str
) -> R | Failed | Transient | Skipped:
    """Run `body` (an item's or a pack's handler) behind the one prologue every try shares: the tenant's
    client, the budget check, the `Calls` that records every attempt. Never raises: an infrastructure fault
    gives the try back (the item is not at fault; the detail, which names internal hosts, goes to the log),
    anything else fails it with a fixed line."""
    calls = Calls(ctx, head, ctx.client)
    try:
        try:
            calls.client, calls.own_key = ctx.client_for(head.tenant_id)
        except KeyringError as exc:
            return Failed(f"the tenant's own upstream key cannot be used: {exc}")
        skipped = budget_skip(ctx, head)
        if skipped is not None:
            return skipped
        return body(calls)
    except Exception as exc:
        if is_infrastructure_fault(exc):
            log.warning(
                "%s of job %s: infrastructure fault, try given back", what, head.job_id, exc_info=True
            )
            return Transient(describe_fault(exc), list(calls.rows), retry_in_s=INFRA_RETRY_S)
        log.exception("%s of job %s crashed", what, head.job_id)
        return Failed(
            f"internal error ({type(exc).__name__}); the details are in the worker log", list(calls.rows)
        )


def ask_packed(
    calls: Calls, body: dict[str, object], model: str
) -> tuple[Decision, dict[str, float]] | Failed | Transient:
    """Send a packed request (docs/spec.md §9), its answers read leniently: a question left out is left
    out of the probabilities (its item is asked again alone). The decision and each noul answer by name,
    or the outcome of a request that did not answer."""
    try:
        decision: Decision = calls.decide(body, model, partial=True)
    except StepError as exc:
        outcome = calls.failed(exc)
        assert isinstance(outcome, Failed | Transient)
        return outcome
    return decision, {name: a.noul for name, a in decision.answers.items() if a.noul is not None}


def _questions(body: Mapping[str, Any]) -> Mapping[str, Any]:
    found = body.get("questions")
    return found if isinstance(found, Mapping) else {}
