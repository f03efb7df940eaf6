"""The JSON API under /v1 (bearer tokens, tenant-scoped), plus /openapi.json (health: web/health.py).

Views are thin: parse and check the request (web/intake.py, web/body.py), call jobs/ for every read and
state change, render the status object (web/status.py). The contract is web/openapi.py; keep both in step.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from typing import TypeVar

from flask import Blueprint, Response, jsonify, request, url_for

from checks.options import OptionsError
from checks.recipes import kind_names
from checks.usage import DayRange, RangeError, parse_day_range
from jobs.claims import claims_summary
from jobs.control import JobStateError, cancel_job, retry_failed
from jobs.intake import same_submission
from jobs.purge import delete_job
from jobs.queries import get_job, list_jobs, lookup_request, result_cursor, unsuccessful_items_page
from jobs.quotas import QuotaExceeded
from jobs.retention import Retention
from jobs.usage import tenant_usage
from models import JOB_STATUSES, Job, utcnow
from web.auth import current_tenant, require_tenant, token_still_live
from web.enqueue import enqueue_cancel, enqueue_purge
from web.errors import (
    IDEMPOTENCY_CONFLICT,
    JOB_LIVE,
    JOB_PURGED,
    QUOTA_EXCEEDED,
    UNSUPPORTED_MEDIA,
    ApiError,
    conflict,
    invalid,
    not_found,
)
from web.export_slots import ExportsBusy, export_response
from web.exports import CSV_RENDERERS, RESULT_ITERATORS, START, ndjson_lines, stream_job
from web.intake import BodyFormat, check_idempotency_key, submit_stream
from web.openapi import openapi_document
from web.session import db_session, resources, settings
from web.status import live_status_object, status_object, status_objects
from workers.api import enqueue_start

log = logging.getLogger("factgate.web")

api = Blueprint("api", __name__, url_prefix="/v1")
meta = Blueprint("meta", __name__)
api.before_request(require_tenant)

JSON_TYPES = ("application/json",)
NDJSON_TYPES = ("application/x-ndjson", "application/ndjson", "application/jsonl", "application/x-jsonlines")
NDJSON_MIMETYPE = "application/x-ndjson"
CSV_TYPES = ("text/csv",)
DEFAULT_LIST_LIMIT = 50
MAX_LIST_LIMIT = 500
JOB_NOT_FOUND = "no job with that id"

N = TypeVar("N", int, float)  # a number read from the query string


def _json(
    payload: Mapping[str, object], status: int = 200, headers: dict[str, str] | None = None
) -> Response:
    resp = jsonify(payload)
    resp.status_code = status
    for name, value in (headers or {}).items():
        resp.headers[name] = value
    return resp


def _job_or_404(job_id: str) -> Job:
    """The caller's job; another tenant's job and a malformed id are the same 404 as a missing one."""
    job = get_job(db_session(), current_tenant().id, job_id)
    if job is None:
        raise not_found(JOB_NOT_FOUND)
    return job


def _items_or_410(job: Job) -> Job:
    """A job whose items still exist; one past its retention keeps its row and summary, not its items, so
    its exports and replays are 410 rather than an empty, complete-looking stream."""
    if job.purged_at is not None:
        raise ApiError(
            410,
            JOB_PURGED,
            f"this job's items were purged on {job.purged_at.date().isoformat()} under its retention; the "
            "job object keeps its counts, usage and summary",
            job_id=str(job.id),
        )
    return job


def _reject_unknown_params(allowed: tuple[str, ...]) -> None:
    """Every query parameter must be known, given once and not empty: `status=` or a second `format=` is
    a mistake to name, not something to guess at (first one wins, empty means absent)."""
    unknown = sorted(set(request.args) - set(allowed))
    if unknown:
        raise invalid(
            f"unknown query parameter {unknown[0]!r} (allowed: {', '.join(allowed) or 'none'})",
            field=unknown[0],
        )
    _reject_repeated_or_empty_params()


def _reject_repeated_or_empty_params() -> None:
    for name in request.args:
        values = request.args.getlist(name)
        if len(values) > 1:
            raise invalid(f"query parameter {name!r} is given {len(values)} times; give it once", field=name)
        if not values[0].strip():
            raise invalid(f"query parameter {name!r} is empty; give a value or leave it out", field=name)


# --- intake --------------------------------------------------------------------------------------------


def _body_format() -> BodyFormat:
    """`json`, `ndjson` or `csv` from the Content-Type, or 415."""
    mimetype = request.mimetype
    if mimetype in NDJSON_TYPES:
        return "ndjson"
    if mimetype in CSV_TYPES:
        return "csv"
    if mimetype in JSON_TYPES:
        return "json"
    shown = mimetype or "none"
    raise ApiError(
        415,
        UNSUPPORTED_MEDIA,
        f"Content-Type {shown} is not accepted; send application/json, {NDJSON_MIMETYPE} or text/csv",
        field="Content-Type",
    )


def _idempotent_reply(job: Job, fingerprint: str) -> Response:
    """200 with the job an Idempotency-Key created, if this is the submission that created it; else 409."""
    if not same_submission(job, fingerprint):
        raise ApiError(
            409,
            IDEMPOTENCY_CONFLICT,
            f"this Idempotency-Key was already used for job {job.id} with a different submission (body, "
            "content type or query parameters); send a new key for a new job",
            field="Idempotency-Key",
            job_id=str(job.id),
        )
    return _json(status_object(db_session(), job), 200, {"Location": _location(job)})


@api.post("/jobs", endpoint="create_job")
def create_job_view() -> Response:
    """Create a job (202), return the job an Idempotency-Key already created (200), or refuse to reuse a
    key for another submission (409). Every submission's fingerprint is taken while its body is read;
    NDJSON and CSV bodies are streamed into the database (web/intake.py `submit_stream`)."""
    session = db_session()
    key = check_idempotency_key(request.headers.get("Idempotency-Key"))
    body_format = _body_format()
    # A JSON submission names kind and options in its body and takes no query parameter; a dataset
    # document (a bare array of rows, `{"test_cases": [...]}`) takes them as NDJSON does (web/intake.py).
    _reject_repeated_or_empty_params()
    try:
        submission = submit_stream(
            session,
            tenant=current_tenant(),
            settings=settings(),
            body_format=body_format,
            params=list(request.args.items(multi=True)),
            stream=request.stream,
            declared_length=request.content_length,
            idempotency_key=key,
            simulated=settings().uses_simulator,
        )
    except QuotaExceeded as exc:
        session.rollback()
        raise quota_error(exc) from None
    except BaseException:
        session.rollback()  # a streamed load stops half-way: none of it may be committed
        raise
    job = submission.job
    if not submission.created:
        return _idempotent_reply(job, submission.fingerprint)
    session.commit()
    # Only after commit: a message must never name a job a rollback could still remove.
    _enqueue_start(job)
    return _json(status_object(session, job), 202, {"Location": _location(job)})


def quota_error(exc: QuotaExceeded) -> ApiError:
    """A quota refusal as one 4xx naming the quota, its limit, the use and the reset.

    429 when waiting helps (live jobs, a spent budget: `Retry-After` says until when), 413 when the job is
    too big for the tenant's quota whatever the time."""
    headers: dict[str, str] = {}
    status = 413 if exc.quota == "max_items_per_job" else 429
    if exc.resets_at is not None:
        headers["Retry-After"] = str(max(1, math.ceil((exc.resets_at - utcnow()).total_seconds())))
    return ApiError(
        status, QUOTA_EXCEEDED, exc.message, field=exc.quota, headers=headers, extra=exc.details()
    )


def _location(job: Job) -> str:
    return url_for("api.get_job", job_id=str(job.id))


def _enqueue_start(job: Job) -> None:
    """Enqueue start_job. A broker outage does not fail the request: the job is committed as
    `queued`, and the sweeper starts queued jobs whose start message never arrived."""
    try:
        enqueue_start(resources().celery, job.id)
    except Exception:
        log.exception("could not enqueue start_job for job %s; the sweeper will start it", job.id)


# --- reading jobs --------------------------------------------------------------------------------------


def _number_param(name: str, parse: Callable[[str], N], what: str) -> N | None:
    """The query parameter `name` as `parse` reads it (None when absent or empty); else a 400 saying it must
    be `what`."""
    raw = request.args.get(name)
    if raw is None or raw == "":
        return None
    try:
        return parse(raw)
    except ValueError:
        raise invalid(f"{name} must be {what}, got {raw[:40]!r}", field=name) from None


def _int_param(name: str, default: int, low: int, high: int) -> int:
    value = _number_param(name, int, "a whole number")
    if value is None:
        return default
    if not low <= value <= high:
        raise invalid(f"{name} must be between {low} and {high}, got {value}", field=name)
    return value


def _choice_param(name: str, choices: tuple[str, ...]) -> str | None:
    raw = request.args.get(name)
    if raw is None or raw == "":
        return None
    if raw not in choices:
        raise invalid(f"{name} must be one of {', '.join(choices)}, got {raw[:40]!r}", field=name)
    return raw


@api.get("/jobs", endpoint="list_jobs")
def list_jobs_view() -> Response:
    """The caller's jobs, newest first."""
    _reject_unknown_params(("limit", "kind", "status"))
    limit = _int_param("limit", DEFAULT_LIST_LIMIT, 1, MAX_LIST_LIMIT)
    kind = _choice_param("kind", kind_names())
    status = _choice_param("status", JOB_STATUSES)
    session = db_session()
    jobs = list_jobs(session, current_tenant().id, limit=limit, kind=kind, status=status)
    return _json({"object": "list", "data": status_objects(session, jobs)})


@api.get("/jobs/<job_id>", endpoint="get_job")
def get_job_view(job_id: str) -> Response:
    job = _job_or_404(job_id)
    return _json(live_status_object(db_session(), resources().sessions, job))


def _export(job: Job, body: Iterator[str], mimetype: str, disposition: str | None = None) -> Response:
    """A streamed export of `job` holding one of the tenant's export slots (web/export_slots.py); 429 when
    none is free."""
    try:
        return export_response(body, mimetype, job_status=job.status, disposition=disposition)
    except ExportsBusy as exc:
        raise ApiError(
            429,
            QUOTA_EXCEEDED,
            str(exc),
            field="max_exports_per_tenant",
            headers={"Retry-After": str(exc.retry_after_s)},
            extra={
                "quota": "max_exports_per_tenant",
                "limit": exc.limit,
                "used": exc.limit,
                "resets_at": None,
            },
        ) from None


@api.get("/jobs/<job_id>/results")
def job_results(job_id: str) -> Response:
    """Results streamed as NDJSON (default) or CSV; whatever exists so far, in input order, read in short
    keyset chunks and ended by a trailer (web/exports.py). `?after=<custom_id>` resumes an NDJSON stream
    after that row."""
    _reject_unknown_params(("format", "after"))
    fmt = _choice_param("format", ("ndjson", "csv")) or "ndjson"
    after = request.args.get("after")
    job = _items_or_410(_job_or_404(job_id))
    iterator = RESULT_ITERATORS.get(job.kind)  # every registered kind has one (tests/unit/test_recipes.py)
    if iterator is None:  # a row written by a version with a kind this one lacks
        raise conflict(f"{job.kind} is not a job kind this version knows")
    sessions = resources().sessions
    if fmt == "csv":
        if after is not None:
            raise invalid("after resumes the NDJSON stream only; leave it out with format=csv", field="after")
        body = stream_job(sessions, job.id, iterator, CSV_RENDERERS[job.kind], allowed=token_still_live())
        return _export(job, body, "text/csv", f'attachment; filename="factgate-{job.id}-results.csv"')
    start = START
    if after is not None:
        cursor = result_cursor(db_session(), job, after)
        if cursor is None:
            raise invalid(f"after: this job has no row with the id {after[:50]!r}", field="after")
        start = cursor
    body = stream_job(
        sessions, job.id, iterator, ndjson_lines, start=start, after=after, allowed=token_still_live()
    )
    return _export(job, body, NDJSON_MIMETYPE, f'inline; filename="factgate-{job.id}-results.ndjson"')


@api.get("/jobs/<job_id>/errors")
def job_errors(job_id: str) -> Response:
    """Failed and skipped items as NDJSON, with their errors and upstream request ids (trailer last)."""
    _reject_unknown_params(())
    job = _items_or_410(_job_or_404(job_id))
    lines = stream_job(
        resources().sessions, job.id, unsuccessful_items_page, ndjson_lines, allowed=token_still_live()
    )
    return _export(job, lines, NDJSON_MIMETYPE)


def _cutoff_param(name: str) -> float | None:
    value = _number_param(name, float, "a number")
    if value is not None and not math.isfinite(value):
        raise invalid(f"{name} must be a finite number, got {request.args[name][:40]!r}", field=name)
    return value


@api.get("/jobs/<job_id>/scorecard")
def job_scorecard(job_id: str) -> Response:
    """The scorecard replayed from stored probabilities, optionally with other cutoffs."""
    _reject_unknown_params(("supported_min", "contradicted_max"))
    supported_min = _cutoff_param("supported_min")
    contradicted_max = _cutoff_param("contradicted_max")
    job = _items_or_410(_job_or_404(job_id))
    if job.kind != "claims":
        raise conflict(f"a scorecard exists for claims jobs only; this job is {job.kind}")
    try:
        summary = claims_summary(
            db_session(), job, supported_min=supported_min, contradicted_max=contradicted_max
        ).dump()
    except OptionsError as exc:
        raise invalid(f"{exc.field}: {exc.message}", field=exc.field) from None
    summary["job_id"] = str(job.id)
    summary["status"] = job.status
    # Replay works on partial data too; `partial` says some items may still change.
    summary["partial"] = job.status != "completed"
    return _json(summary)


# --- changing jobs -------------------------------------------------------------------------------------


@api.post("/jobs/<job_id>/cancel", endpoint="cancel_job")
def cancel_job_view(job_id: str) -> Response:
    """Stop a live job: it is `cancelling` at once (one small UPDATE, whatever its size); its pending items
    are skipped in the background in batches, running ones finish, then it is cancelled."""
    session = db_session()
    job = _job_or_404(job_id)
    if job.status == "cancelling":
        return _json(status_object(session, job))  # already on its way: cancelling twice is harmless
    if not cancel_job(session, job):
        session.rollback()
        session.refresh(job)
        raise conflict(f"job is {job.status}; only a validating, queued or running job can be cancelled")
    session.commit()
    enqueue_cancel(job)
    return _json(status_object(session, job))


@api.delete("/jobs/<job_id>", endpoint="delete_job")
def delete_job_view(job_id: str) -> Response:
    """Delete an ended job (204): gone from every read at once, its rows purged in the background in batches
    (its usage rolled up first, so /v1/usage is unchanged). A live job is a 409 `job_live`: cancel it."""
    session = db_session()
    job = _job_or_404(job_id)
    try:
        delete_job(session, job)
    except JobStateError as exc:
        session.rollback()
        raise ApiError(409, JOB_LIVE, str(exc), job_id=str(job.id)) from None
    session.commit()
    enqueue_purge()
    return Response(status=204)


@api.post("/jobs/<job_id>/retry")
def retry_job(job_id: str) -> Response:
    """Send an ended job's failed items again (202); 200 with `retried: 0` when none failed."""
    session = db_session()
    job = _items_or_410(_job_or_404(job_id))
    try:
        retried = retry_failed(session, job, Retention.of(settings()))
    except JobStateError as exc:
        session.rollback()
        raise conflict(str(exc)) from None
    except QuotaExceeded as exc:
        session.rollback()
        raise quota_error(exc) from None
    if not retried:
        session.rollback()
        body = status_object(session, job)
        body.update(retried=0, message="nothing to retry: the job has no failed items")
        return _json(body)
    session.commit()
    _enqueue_start(job)
    body = status_object(session, job)
    body["retried"] = retried
    return _json(body, 202, {"Location": _location(job)})


# --- support -------------------------------------------------------------------------------------------


@api.get("/requests/<request_id>", endpoint="lookup_request")
def lookup_request_view(request_id: str) -> Response:
    """Every upstream call of the caller's jobs with this `x-request-id`, with its item and job."""
    found = lookup_request(db_session(), current_tenant().id, request_id)
    if not found:
        raise not_found("no request with that id in your jobs")
    return _json(
        {
            "object": "request_lookup",
            "request_id": request_id,
            "calls": [
                {
                    **r.call,
                    "job": {"id": str(r.job_id), "kind": r.job_kind, "status": r.job_status},
                    "item": r.item,
                    "items": r.items,
                }
                for r in found
            ],
        }
    )


# --- usage ---------------------------------------------------------------------------------------------


def usage_range() -> DayRange:
    """The `from`/`to` query parameters (UTC days), or a 400 naming the one that is wrong."""
    try:
        return parse_day_range(
            request.args.get("from"), request.args.get("to"), today=datetime.now(UTC).date()
        )
    except RangeError as exc:
        raise invalid(exc.message, field=exc.field) from None


@api.get("/usage", endpoint="usage")
def usage_view() -> Response:
    """The caller's upstream usage per UTC day, by endpoint and model, with totals (from `api_calls`)."""
    _reject_unknown_params(("from", "to"))
    days = usage_range()
    return _json(tenant_usage(db_session(), current_tenant().id, days).as_dict())


# --- unauthenticated -----------------------------------------------------------------------------------


@meta.get("/openapi.json")
def openapi() -> Response:
    return _json(openapi_document())
