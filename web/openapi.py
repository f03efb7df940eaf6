"""The OpenAPI 3.1 description of the JSON API, as a Python dict served at /openapi.json.

Written by hand so that it says what the API promises (every error, every limit), not what a
generator could infer; a test checks that every route registered under /v1 appears here.
"""

from __future__ import annotations

import copy

from checks.claims import CONTRADICTED_MAX, MAX_ERRORS_KEPT, SUPPORTED_MIN
from checks.contracts import ExportEnd, schema_of
from checks.options import CLAIMS_MODES
from checks.pricing import KNOWN_MODELS
from checks.recipes import kind_names, recipe_for
from checks.usage import DEFAULT_DAYS as DEFAULT_USAGE_DAYS
from checks.usage import FIRST_DAY as FIRST_USAGE_DAY
from checks.usage import LAST_DAY as LAST_USAGE_DAY
from checks.usage import MAX_DAYS as MAX_USAGE_DAYS
from checks.webhooks import MAX_URL_CHARS as MAX_WEBHOOK_URL_CHARS
from jobs.serialize import job_schema
from models import JOB_STATUSES
from web.errors import ERROR_TYPES, RETRY_AFTER_S
from web.intake import MAX_IDEMPOTENCY_KEY_CHARS, MAX_METADATA_BYTES
from web.openapi_types import (
    Document,
    Header,
    Parameter,
    PathItem,
    Response,
    Schema,
    object_schema,
)

NDJSON = "application/x-ndjson"


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _error(description: str) -> Response:
    return {"description": description, "content": {"application/json": {"schema": _ref("Error")}}}


def _job(description: str, headers: dict[str, Header] | None = None) -> Response:
    out: Response = {
        "description": description,
        "content": {"application/json": {"schema": _ref("Job")}},
    }
    if headers:
        out["headers"] = headers
    return out


LOCATION: dict[str, Header] = {
    "Location": {"description": "URL of the job's status object", "schema": {"type": "string"}}
}
JOB_STATUS_HEADER: dict[str, Header] = {
    "X-Job-Status": {"description": "the job's status when the stream started", "schema": {"type": "string"}}
}

UNAUTHORIZED: Response = {
    "description": "Missing, unknown or revoked bearer token. Carries `WWW-Authenticate: Bearer`.",
    "headers": {"WWW-Authenticate": {"schema": {"type": "string"}}},
    "content": {"application/json": {"schema": _ref("Error")}},
}
RETRY_AFTER_HEADER: Header = {
    "description": f"seconds to wait before trying again ({RETRY_AFTER_S} while a dependency is unreachable)",
    "schema": {"type": "integer"},
}
JOB_PURGED = _error(
    "`job_purged`: the job is past its retention; its items are gone, its job object (counts, usage, "
    "summary) remains."
)
JOB_NOT_FOUND = _error("No such job for this tenant (another tenant's job and a malformed id look the same).")

JOB_ID: Parameter = {
    "name": "job_id",
    "in": "path",
    "required": True,
    "description": "The job's id (a UUID).",
    "schema": {"type": "string", "format": "uuid"},
}


def _cutoff_param(name: str, default: float, description: str) -> Parameter:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": f"{description} Default {default}. 0 ≤ contradicted_max < supported_min ≤ 1.",
        "schema": {"type": "number", "minimum": 0, "maximum": 1},
    }


SUPPORTED_MIN_PARAM = _cutoff_param(
    "supported_min", SUPPORTED_MIN, "p at or above this is `supported` (inclusive)."
)
CONTRADICTED_MAX_PARAM = _cutoff_param(
    "contradicted_max", CONTRADICTED_MAX, "p at or below this is `contradicted` (inclusive)."
)


def _submission(kind: str, options: str, row: str) -> Schema:
    """One variant of a JSON submission: its kind, that kind's options and rows."""
    return {
        "type": "object",
        "required": ["kind", "items"],
        "additionalProperties": False,
        "properties": {
            "kind": {"const": kind},
            "options": _ref(options),
            "items": {"type": "array", "minItems": 1, "items": _ref(row)},
            "metadata": _ref("Metadata"),
        },
    }


SCHEMAS: dict[str, Schema] = {
    "Error": {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["type", "message"],
                "properties": {
                    "type": {"type": "string", "enum": list(ERROR_TYPES)},
                    "message": {"type": "string", "description": "What is wrong, naming the field or line."},
                    "field": {
                        "type": "string",
                        "description": "The offending field: a JSON body field (`options.mode`, "
                        "`items[3].label`), a query parameter (`limit`) or a header (`Idempotency-Key`).",
                    },
                    "line": {
                        "type": "integer",
                        "description": "1-based NDJSON line (or JSON line) of the first problem.",
                    },
                    "index": {
                        "type": "integer",
                        "description": "0-based index in `items` of the first problem.",
                    },
                    "quota": {"type": "string", "description": "`quota_exceeded` only: the quota's name."},
                    "limit": {"type": "number", "description": "`quota_exceeded` only: the quota's limit."},
                    "used": {"type": "number", "description": "`quota_exceeded` only: what is used now."},
                    "resets_at": {
                        "type": ["string", "null"],
                        "format": "date-time",
                        "description": "`quota_exceeded` only: when a budget starts afresh (UTC midnight or "
                        "the first of the month); null for quotas that do not reset by time.",
                    },
                    "errors": {
                        "type": "array",
                        "description": f"Every problem with the batch (the first {MAX_ERRORS_KEPT}; the "
                        "message counts the rest).",
                        "items": _ref("RowError"),
                    },
                    "job_id": {
                        "type": "string",
                        "format": "uuid",
                        "description": "`idempotency_conflict`: the job that holds the Idempotency-Key.",
                    },
                },
            }
        },
    },
    "RowError": {
        "type": "object",
        "required": ["message"],
        "properties": {
            "line": {"type": "integer", "description": "1-based NDJSON line."},
            "index": {"type": "integer", "description": "0-based index in `items` (JSON bodies)."},
            "field": {"type": "string"},
            "message": {"type": "string"},
        },
    },
    "JobSubmission": {
        "description": "A JSON submission: the rows' shape follows `kind` (`ClaimRow` for claims, "
        "`QuestionRow` for answer and quote). The rules a schema cannot state are checked too and name the "
        "item and field: ids unique in the batch and printable (no control or formatting characters), a "
        "claim not blank and within FACTGATE_MAX_CLAIM_BYTES, at most FACTGATE_MAX_ROWS_PER_JOB rows.",
        "oneOf": [],  # one variant per recipe (openapi_document)
    },
    "Metadata": {
        "type": "object",
        "description": f"Anything you want back with the job; at most {MAX_METADATA_BYTES} bytes of JSON.",
    },
    "RequestCounts": {
        "type": "object",
        "description": "Items by status. An item is one claim in one mode, or one question, sentence, "
        "investigation, search result or compare request of an answer/quote job.",
        "properties": {
            name: {"type": "integer", "minimum": 0}
            for name in ("total", "completed", "failed", "skipped", "pending", "running")
        },
    },
    "Usage": {
        "type": "object",
        "description": "Summed from one row per upstream HTTP attempt: stored at finalization, live before.",
        "properties": {
            "http_attempts": {"type": "integer"},
            "reused": {
                "type": "integer",
                "description": "Decisions requests answered from the tenant's verdict store: not sent, not "
                "billed, not in `http_attempts`.",
            },
            "input_tokens": {"type": "integer"},
            "output_tokens": {"type": "integer"},
            "searches": {"type": "integer"},
            "throttled": {"type": "integer", "description": "Attempts answered 429."},
            "cost_usd": {"type": "number"},
            "by_endpoint": {"type": "object", "additionalProperties": {"type": "object"}},
        },
    },
    "JobList": {
        "type": "object",
        "properties": {"object": {"const": "list"}, "data": {"type": "array", "items": _ref("Job")}},
    },
    "ItemError": {
        "type": "object",
        "description": "One NDJSON line of GET /v1/jobs/{job_id}/errors.",
        "properties": {
            "custom_id": {"type": "string"},
            "mode": {"type": "string"},
            "stage": {"type": "string"},
            "position": {"type": "integer"},
            "status": {"type": "string", "enum": ["failed", "skipped"]},
            "error": {"type": ["string", "null"]},
            "attempts": {"type": "integer", "description": "Times a worker picked the item up."},
            "request_ids": {"type": "array", "items": {"type": "string"}},
        },
    },
    "UsageFigures": {
        "type": "object",
        "required": ["requests", "searches", "input_tokens", "output_tokens", "cost_usd"],
        "properties": {
            "requests": {"type": "integer", "description": "HTTP attempts upstream, failed ones included."},
            "reused": {
                "type": "integer",
                "description": "Decisions requests answered from the tenant's verdict store instead: not "
                "sent, cost 0, not in `requests`.",
            },
            "searches": {
                "type": "integer",
                "description": "Searches billed (grounded attempts, Search calls).",
            },
            "input_tokens": {"type": "integer"},
            "output_tokens": {"type": "integer"},
            "cost_usd": {"type": "number", "description": "Dollars, rounded to 6 decimals."},
        },
    },
    "UsageBreakdown": {
        "allOf": [
            _ref("UsageFigures"),
            {
                "type": "object",
                "required": ["by_endpoint", "by_model"],
                "properties": {
                    "by_endpoint": {
                        "type": "array",
                        "description": "Most expensive first.",
                        "items": {
                            "allOf": [
                                {
                                    "type": "object",
                                    "required": ["endpoint"],
                                    "properties": {
                                        "endpoint": {
                                            "type": "string",
                                            "enum": ["decisions", "agent", "search"],
                                        }
                                    },
                                },
                                _ref("UsageFigures"),
                            ]
                        },
                    },
                    "by_model": {
                        "type": "array",
                        "description": "Most expensive first; `model` is null for calls that name none.",
                        "items": {
                            "allOf": [
                                {
                                    "type": "object",
                                    "required": ["model"],
                                    "properties": {"model": {"type": ["string", "null"]}},
                                },
                                _ref("UsageFigures"),
                            ]
                        },
                    },
                },
            },
        ]
    },
    "UsageReport": {
        "type": "object",
        "required": ["object", "from", "to", "days", "timezone", "totals", "daily"],
        "properties": {
            "object": {"const": "usage"},
            "from": {"type": "string", "format": "date"},
            "to": {"type": "string", "format": "date"},
            "days": {"type": "integer", "description": "Days in the range, both ends included."},
            "timezone": {"const": "UTC"},
            "totals": _ref("UsageBreakdown"),
            "daily": {
                "type": "array",
                "description": "One entry per UTC day of the range, in order, days without calls included.",
                "items": {
                    "allOf": [
                        {
                            "type": "object",
                            "required": ["date"],
                            "properties": {"date": {"type": "string", "format": "date"}},
                        },
                        _ref("UsageBreakdown"),
                    ]
                },
            },
        },
    },
    "RequestLookup": {
        "type": "object",
        "properties": {
            "object": {"const": "request_lookup"},
            "request_id": {"type": "string"},
            "calls": {
                "type": "array",
                "items": {
                    "type": "object",
                    "description": "One upstream HTTP attempt with its job and item.",
                    "properties": {
                        "request_id": {"type": ["string", "null"]},
                        "endpoint": {"type": "string"},
                        "model": {"type": ["string", "null"]},
                        "attempt": {"type": "integer"},
                        "status_code": {"type": ["integer", "null"]},
                        "latency_ms": {"type": "number"},
                        "input_tokens": {"type": "integer"},
                        "output_tokens": {"type": "integer"},
                        "searches": {"type": "integer"},
                        "search_results": {"type": "integer"},
                        "cost_usd": {"type": "number"},
                        "error": {"type": ["string", "null"]},
                        "created_at": {"type": "string", "format": "date-time"},
                        "reused": {
                            "type": "boolean",
                            "description": "Not an attempt: a later job's request answered from the verdict "
                            "store by this request's answer, at no cost.",
                        },
                        "job": {"type": "object"},
                        "item": {"type": ["object", "null"]},
                        "items": {
                            "type": "array",
                            "items": {"type": "object"},
                            "description": "Every item the attempt answered: the item alone, or each item of "
                            "a packed request (its sentences or claims), with its own status and output.",
                        },
                    },
                },
            },
        },
    },
    "Health": {
        "type": "object",
        "description": "Liveness: the process answers. No dependency is checked (see /readyz).",
        "required": ["status", "mode", "simulated"],
        "properties": {
            "status": {"type": "string", "enum": ["ok"]},
            "mode": {"type": "string", "enum": ["embedded", "server"]},
            "simulated": {"type": "boolean"},
        },
    },
    "Readiness": {
        "type": "object",
        "description": "Readiness: each dependency this process needs, checked now with a short timeout.",
        "required": ["status", "checks"],
        "properties": {
            "status": {"type": "string", "enum": ["ready", "unavailable"]},
            "checks": {
                "type": "object",
                "description": "`database` always; `redis` in server mode.",
                "additionalProperties": {"type": "string", "enum": ["ok", "unreachable"]},
            },
        },
    },
}
# The job object is generated from its model (jobs/serialize.py:JobObject), as the result lines are from
# theirs; its nested objects with prose about limits (Metadata, RequestCounts, Usage) are the ones above.
_JOB_SCHEMA, _JOB_DEFS = job_schema()
SCHEMAS["Job"] = _JOB_SCHEMA
SCHEMAS.update(_JOB_DEFS)

NDJSON_QUERY_PARAMS: list[Parameter] = [
    {
        "name": "kind",
        "in": "query",
        "description": "Job kind (NDJSON bodies only; JSON bodies carry it in the body).",
        "schema": {"type": "string", "enum": []},
    },
    {
        "name": "mode",
        "in": "query",
        "description": "claims option (NDJSON only)",
        "schema": {"type": "string", "enum": list(CLAIMS_MODES)},
    },
    {
        "name": "model",
        "in": "query",
        "description": "claims, answer and quote option (NDJSON only)",
        # list(): a list of JSON values, where sorted() alone would type it a list of strings
        "schema": {"type": "string", "enum": list(sorted(KNOWN_MODELS))},
    },
    {
        **SUPPORTED_MIN_PARAM,
        "description": "claims option (NDJSON only). " + SUPPORTED_MIN_PARAM["description"],
    },
    {
        **CONTRADICTED_MAX_PARAM,
        "description": "claims option (NDJSON only). " + CONTRADICTED_MAX_PARAM["description"],
    },
    {
        "name": "budget_usd",
        "in": "query",
        "description": "claims, answer and quote option (NDJSON only)",
        "schema": {"type": "number", "exclusiveMinimum": 0},
    },
    {
        "name": "priority",
        "in": "query",
        "description": "claims, answer and quote option (NDJSON only): interactive or batch (default)",
        "schema": {"type": "string", "enum": ["interactive", "batch"]},
    },
    {
        "name": "webhook_url",
        "in": "query",
        "description": "claims, answer and quote option (NDJSON only): see `ClaimsOptions.webhook_url`",
        "schema": {"type": "string", "format": "uri", "maxLength": MAX_WEBHOOK_URL_CHARS},
    },
    {
        "name": "metadata",
        "in": "query",
        "description": "A URL-encoded JSON object (NDJSON only); an empty value is refused.",
        "schema": {"type": "string", "minLength": 1},
    },
]

EXPORTS_BUSY: Response = {
    **_error(
        "Type `quota_exceeded`, field `max_exports_per_tenant`: the tenant already has as many downloads "
        "streaming as FACTGATE_MAX_EXPORTS_PER_TENANT allows (`limit`, `used`); try again after "
        "`Retry-After` seconds."
    ),
    "headers": {"Retry-After": RETRY_AFTER_HEADER},
}

PATHS: dict[str, PathItem] = {
    "/v1/jobs": {
        "post": {
            "operationId": "createJob",
            "summary": "Submit a batch",
            "description": (
                "Validates the whole batch; any problem rejects it whole and nothing is stored. "
                "Send JSON (`JobSubmission`, at most FACTGATE_MAX_JSON_BODY_BYTES, bounded before parsing), "
                "NDJSON (`application/x-ndjson`, one row per line: `ClaimRow` for claims, `QuestionRow` "
                "for answer and quote) or CSV (`text/csv`: a header line `id,claim` plus optional `label`, "
                "`kind`, `source` columns for claims, `id,question` for answer and quote; `label` cells are "
                "`true`, `false` or empty). NDJSON and CSV carry kind/options/metadata as query "
                "parameters, are streamed into the database as they are validated, and name problems by "
                "1-based line (a CSV's header is line 1); blank lines are skipped but counted. "
                "Rows are limited by FACTGATE_MAX_ROWS_PER_JOB (default 1,000,000), streamed bodies by "
                "FACTGATE_MAX_BODY_BYTES (413, checked against Content-Length and again while reading). "
                "Unknown query parameters are rejected as unknown options. The job is committed before it "
                "is queued. A streamed body of more than FACTGATE_INTAKE_DEFER_ROWS rows (default 50,000) "
                "answers as soon as every row is validated and stored, with status `validating`: its items "
                "are built in the background and the job then moves to `queued` on its own."
            ),
            "parameters": [
                {
                    "name": "Idempotency-Key",
                    "in": "header",
                    "required": False,
                    "description": (
                        "Retry-safe submission: if this tenant already created a job with this key from "
                        "the same submission — the same format (JSON or NDJSON), the same query parameters "
                        "in any order and the same body bytes — that job is returned with 200 (the body is "
                        "hashed, not validated again). The same key with anything else is a 409 "
                        "`idempotency_conflict` naming the job that holds it, and nothing is stored. "
                        f"At most {MAX_IDEMPOTENCY_KEY_CHARS} characters, trimmed; at least one that is not "
                        "white space."
                    ),
                    "schema": {"type": "string", "maxLength": MAX_IDEMPOTENCY_KEY_CHARS, "pattern": r"\S"},
                },
                *NDJSON_QUERY_PARAMS,
            ],
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {"schema": _ref("JobSubmission")},
                    NDJSON: {
                        # One row per line (a media type object has no description of its own).
                        "schema": {
                            "oneOf": [],  # every recipe's row schema (openapi_document)
                            "description": "One row per line.",
                        },
                    },
                    "text/csv": {
                        "schema": {
                            "oneOf": [],  # every recipe's row schema (openapi_document)
                            "description": "A header line naming the row's fields, then one record per row "
                            "(`label` as true/false; an empty cell is an absent optional field).",
                        },
                    },
                },
            },
            "responses": {
                "202": _job(
                    "Created: `queued`, or `validating` for a large streamed body whose items are still "
                    "being built.",
                    LOCATION,
                ),
                "200": _job("The job this Idempotency-Key already created (nothing new stored).", LOCATION),
                "400": _error(
                    "Invalid submission: not JSON, bad NDJSON line (named by `line`), bad item (named "
                    "`items[i]`), missing field, label not boolean, duplicate id, over-long claim, too many "
                    "rows, empty batch, bad option (named `options.x` or the query parameter), bad metadata, "
                    "unknown kind. `errors` lists every row problem."
                ),
                "401": UNAUTHORIZED,
                "409": _error(
                    "`idempotency_conflict`: the Idempotency-Key was already used for another submission "
                    "(`field` is `Idempotency-Key`, `job_id` the job that holds it). Nothing is stored."
                ),
                "413": _error(
                    "Body larger than FACTGATE_MAX_BODY_BYTES (NDJSON, CSV) or FACTGATE_MAX_JSON_BODY_BYTES "
                    "(JSON), or (type `quota_exceeded`, field `max_items_per_job`) more items than the "
                    "tenant's quota allows in one job (counted while the body streams). Nothing is stored."
                ),
                "415": _error("Content-Type is none of application/json, application/x-ndjson, text/csv."),
                "429": _error(
                    "Type `quota_exceeded`: the tenant has as many live jobs as `max_active_jobs` allows, or "
                    "has spent its `daily_budget_usd` / `monthly_budget_usd`. `field` names the quota; "
                    "`limit`, `used` and `resets_at` (null for live jobs) say where it stands; `Retry-After` "
                    "gives the seconds until a budget resets. Nothing was stored."
                ),
            },
        },
        "get": {
            "operationId": "listJobs",
            "summary": "The caller's jobs, newest first",
            "parameters": [
                {
                    "name": "limit",
                    "in": "query",
                    "schema": {"type": "integer", "minimum": 1, "maximum": 500, "default": 50},
                },
                {"name": "kind", "in": "query", "schema": {"type": "string", "enum": []}},
                {"name": "status", "in": "query", "schema": {"type": "string", "enum": list(JOB_STATUSES)}},
            ],
            "responses": {
                "200": {
                    "description": "A page of jobs.",
                    "content": {"application/json": {"schema": _ref("JobList")}},
                },
                "400": _error("Bad or unknown query parameter (named in `field`)."),
                "401": UNAUTHORIZED,
            },
        },
    },
    "/v1/jobs/{job_id}": {
        "get": {
            "operationId": "getJob",
            "summary": "Job status: progress, usage and cost, timestamps, summary, links",
            "parameters": [JOB_ID],
            "responses": {"200": _job("The job."), "401": UNAUTHORIZED, "404": JOB_NOT_FOUND},
        },
        "delete": {
            "operationId": "deleteJob",
            "summary": "Delete an ended job",
            "description": "The job is gone at once: lists leave it out and its results, errors, scorecard, "
            "report and request-id lookups are 404. Its rows are then purged in the background in bounded "
            "batches. What it cost stays in `/v1/usage` and the budgets (rolled up per day, endpoint and "
            "model before the per-attempt rows go). A live job is refused: cancel it, then delete it once "
            "it has ended.",
            "parameters": [JOB_ID],
            "responses": {
                "204": {"description": "Deleted."},
                "401": UNAUTHORIZED,
                "404": JOB_NOT_FOUND,
                "409": _error("`job_live`: the job has not ended; cancel it first."),
            },
        },
    },
    "/v1/jobs/{job_id}/results": {
        "get": {
            "operationId": "getJobResults",
            "summary": "Results, streamed in input order",
            "description": (
                "Streams whatever exists: while the job runs, unfinished claims appear with status "
                "`pending`/`running` and no verdict (no 409). Read in short keyset chunks (no transaction "
                "is held while the client reads). NDJSON: one line per submitted row, the kind's result "
                "line (`ClaimResult` per claim; `AnswerResult` / `QuoteResult` per question); the last line "
                "is always `ExportEnd` (without it the transfer was cut short: resume with `?after=`). "
                "CSV (`?format=csv`, sent as an attachment): one row per claim per mode with columns "
                "custom_id, mode, status, p, verdict, label, request_id, error (answer and quote: one row "
                "per question); the last row is `#end,<number of data rows>`. Cells that a spreadsheet "
                "would run as a formula get a leading apostrophe."
            ),
            "parameters": [
                JOB_ID,
                {
                    "name": "format",
                    "in": "query",
                    "schema": {"type": "string", "enum": ["ndjson", "csv"], "default": "ndjson"},
                },
                {
                    "name": "after",
                    "in": "query",
                    "description": "NDJSON only: resume after the row with this `custom_id` (the last "
                    "line received); 400 when the job has no such row.",
                    "schema": {"type": "string", "minLength": 1},
                },
            ],
            "responses": {
                "200": {
                    "description": "The results.",
                    "headers": JOB_STATUS_HEADER,
                    "content": {
                        # every recipe's result line, then the `ExportEnd` trailer (openapi_document)
                        NDJSON: {"schema": {"oneOf": []}},
                        "text/csv": {"schema": {"type": "string"}},
                    },
                },
                "400": _error(
                    "Unknown format or query parameter; `after` with format=csv, or naming no row of the job."
                ),
                "401": UNAUTHORIZED,
                "404": JOB_NOT_FOUND,
                "410": JOB_PURGED,
                "429": EXPORTS_BUSY,
                "409": _error("The job's kind is not one this version knows (stored by another version)."),
            },
        }
    },
    "/v1/jobs/{job_id}/errors": {
        "get": {
            "operationId": "getJobErrors",
            "summary": "Failed and skipped items, with errors and upstream request ids",
            "parameters": [JOB_ID],
            "responses": {
                "200": {
                    "description": "One `ItemError` per line, then the `ExportEnd` line (only that line "
                    "when nothing failed).",
                    "headers": JOB_STATUS_HEADER,
                    "content": {NDJSON: {"schema": {"oneOf": [_ref("ItemError"), _ref("ExportEnd")]}}},
                },
                "401": UNAUTHORIZED,
                "404": JOB_NOT_FOUND,
                "410": JOB_PURGED,
                "429": EXPORTS_BUSY,
            },
        }
    },
    "/v1/jobs/{job_id}/scorecard": {
        "get": {
            "operationId": "getJobScorecard",
            "summary": "Replay the claims scorecard, optionally with other cutoffs",
            "description": "Works on partial data too; `partial` is true until the job is completed.",
            "parameters": [JOB_ID, SUPPORTED_MIN_PARAM, CONTRADICTED_MAX_PARAM],
            "responses": {
                "200": {
                    "description": "Scorecards.",
                    "content": {"application/json": {"schema": _ref("Scorecard")}},
                },
                "400": _error("A cutoff is not a number, out of range, or not ordered (named in `field`)."),
                "401": UNAUTHORIZED,
                "404": JOB_NOT_FOUND,
                "410": JOB_PURGED,
                "409": _error("Not a claims job."),
            },
        }
    },
    "/v1/jobs/{job_id}/cancel": {
        "post": {
            "operationId": "cancelJob",
            "summary": "Cancel a live job",
            "description": "Answers at once whatever the job's size or state: the job is `cancelling` and "
            "nothing more of it is sent upstream. Pending items are skipped (in this answer for a job of "
            "up to 1,000 items, else in the background 10,000 at a time; a `validating` job never gets its "
            "items); running items finish; the job then ends `cancelled`. Cancelling a job that is already "
            "`cancelling` returns it unchanged.",
            "parameters": [JOB_ID],
            "responses": {
                "200": _job("The job, now cancelling."),
                "401": UNAUTHORIZED,
                "404": JOB_NOT_FOUND,
                "409": _error("The job has ended or is finalizing."),
            },
        }
    },
    "/v1/jobs/{job_id}/retry": {
        "post": {
            "operationId": "retryJob",
            "summary": "Send an ended job's failed items again",
            "parameters": [JOB_ID],
            "responses": {
                "202": _job(
                    "Failed items are pending again and the job is queued (`retried` counts them).", LOCATION
                ),
                "200": _job("Nothing failed: nothing to retry (`retried` is 0)."),
                "401": UNAUTHORIZED,
                "404": JOB_NOT_FOUND,
                "410": JOB_PURGED,
                "409": _error("The job is still live; only an ended job can be retried."),
            },
        }
    },
    "/v1/requests/{request_id}": {
        "get": {
            "operationId": "lookupRequest",
            "summary": "Find an upstream `x-request-id` in the caller's jobs",
            "parameters": [
                {"name": "request_id", "in": "path", "required": True, "schema": {"type": "string"}}
            ],
            "responses": {
                "200": {
                    "description": "The calls.",
                    "content": {"application/json": {"schema": _ref("RequestLookup")}},
                },
                "401": UNAUTHORIZED,
                "404": _error("No call with that request id in this tenant's jobs."),
            },
        }
    },
    "/v1/usage": {
        "get": {
            "operationId": "getUsage",
            "summary": "The caller's upstream usage per UTC day, by endpoint and model, with totals",
            "description": (
                "Summed from the per-attempt records of every job of the caller's tenant (never another "
                "tenant's). Both dates are UTC days and both are included. Defaults: `to` today, `from` "
                f"{DEFAULT_USAGE_DAYS} days up to `to`. At most {MAX_USAGE_DAYS} days at once, between "
                f"{FIRST_USAGE_DAY.isoformat()} and {LAST_USAGE_DAY.isoformat()}."
            ),
            "parameters": [
                {
                    "name": "from",
                    "in": "query",
                    "description": "First day, YYYY-MM-DD (UTC).",
                    "schema": {"type": "string", "format": "date"},
                },
                {
                    "name": "to",
                    "in": "query",
                    "description": "Last day, YYYY-MM-DD (UTC); not before `from`.",
                    "schema": {"type": "string", "format": "date"},
                },
            ],
            "responses": {
                "200": {
                    "description": "Usage.",
                    "content": {"application/json": {"schema": _ref("UsageReport")}},
                },
                "400": _error(
                    "A date that is not YYYY-MM-DD, not a calendar day or out of range, `from` after `to`, a "
                    "range over "
                    f"{MAX_USAGE_DAYS} days, or an unknown parameter (named in `field`)."
                ),
                "401": UNAUTHORIZED,
            },
        }
    },
    "/healthz": {
        "get": {
            "operationId": "health",
            "summary": "Liveness: the process answers (no dependency is checked)",
            "security": [],
            "responses": {
                "200": {
                    "description": "Alive, whatever the state of the database and Redis.",
                    "content": {"application/json": {"schema": _ref("Health")}},
                },
            },
        }
    },
    "/readyz": {
        "get": {
            "operationId": "ready",
            "summary": "Readiness: the database (SELECT 1) and Redis in server mode (PING) answer",
            "security": [],
            "responses": {
                "200": {
                    "description": "Ready to serve.",
                    "content": {"application/json": {"schema": _ref("Readiness")}},
                },
                "503": {
                    "description": "A dependency is unreachable (named in `checks`); `Retry-After` says "
                    "when to ask again.",
                    "headers": {"Retry-After": RETRY_AFTER_HEADER},
                    "content": {"application/json": {"schema": _ref("Readiness")}},
                },
            },
        }
    },
    "/openapi.json": {
        "get": {
            "operationId": "openapi",
            "summary": "This document",
            "security": [],
            "responses": {"200": {"description": "OpenAPI 3.1", "content": {"application/json": {}}}},
        }
    },
}

COMMON_RESPONSES_NOTE = (
    "Every error has one shape (`Error`). Under /v1 a wrong method answers 405 and an unknown path 404, "
    "both as JSON; a NUL character (`%00`) anywhere in the path or the query is a 400 naming where "
    "(`field`: `path` or the parameter), a request line over 8,190 bytes is a 414, headers too large a 431, "
    "and an unexpected failure a 500 — in the same JSON shape, whichever layer refuses the request. While "
    "the database "
    f"(or Redis) is unreachable, e.g. during a restart, every operation answers 503 "
    f"`service_unavailable_error` with `Retry-After: {RETRY_AFTER_S}`: try again then (a submission with an "
    "`Idempotency-Key` is safe to resend)."
)

# What any operation can answer besides its own responses: refusals that come before the view runs.
COMMON_RESPONSES: dict[str, Response] = {
    "400": _error(
        "A NUL character (`%00`) in the path or the query (`invalid_request_error`; `field` is `path` or the "
        "query parameter)."
    ),
    "414": _error("The request line (method and URL) is longer than 8,190 bytes (`uri_too_long_error`)."),
    "431": _error("The request headers are too large (`header_fields_too_large_error`)."),
    "500": _error("An unexpected failure; the server log has the details (`server_error`)."),
}
UNAVAILABLE_RESPONSE: Response = {
    **_error(
        "The database or Redis is unreachable for the moment, e.g. restarting (`service_unavailable_error`); "
        "try again after `Retry-After` seconds."
    ),
    "headers": {"Retry-After": RETRY_AFTER_HEADER},
}
# Operations that touch no dependency, so never answer that 503.
NO_DEPENDENCY_PATHS = ("/healthz", "/openapi.json")
for _path, _item in PATHS.items():
    for _operation in _item.values():
        for _code, _response in COMMON_RESPONSES.items():
            _operation["responses"].setdefault(_code, _response)
        if _path not in NO_DEPENDENCY_PATHS:
            _operation["responses"].setdefault("503", UNAVAILABLE_RESPONSE)

DOCUMENT: Document = {
    "openapi": "3.1.0",
    "info": {
        "title": "factgate API",
        "version": "1",
        "description": "Batch claim checking on the Perplexity Decisions API. " + COMMON_RESPONSES_NOTE,
    },
    "servers": [{"url": "/"}],
    "security": [{"bearer": []}],
    "components": {
        "securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer", "description": "A factgate API token."}
        },
        "schemas": SCHEMAS,
    },
    "paths": PATHS,
    "webhooks": {
        "jobEnded": {
            "post": {
                "operationId": "jobEnded",
                "summary": "A job completed, failed or was cancelled",
                "description": "Sent to the job's `webhook_url` option, or else to the tenant's default URL "
                "(`factgate tenants set NAME --webhook-url URL`). The body is the job object, exactly as "
                "`GET /v1/jobs/{id}` returned it when the job ended. Signed per Standard Webhooks with the "
                "tenant's secret (`factgate tenants webhook-secret NAME`): `webhook-signature` is `v1,` and "
                "the base64 HMAC-SHA256 of `{webhook-id}.{webhook-timestamp}.{body}` keyed by the base64-"
                "decoded part of the secret after `whsec_`. Any 2xx acknowledges it; anything else (a "
                "redirect too: redirects are not followed) or no answer within the timeouts is retried with "
                "exponential backoff for up to 24 hours, with the same `webhook-id`, so deduplicate on it.",
                "parameters": [
                    {"name": name, "in": "header", "required": True, "schema": {"type": "string"}}
                    for name in ("webhook-id", "webhook-timestamp", "webhook-signature")
                ],
                "requestBody": {"content": {"application/json": {"schema": _ref("Job")}}},
                "responses": {"2XX": {"description": "Received; not sent again."}},
                "security": [],
            }
        }
    },
}


def _contracts(schemas: dict[str, Schema]) -> tuple[list[Schema], list[Schema]]:
    """Add every recipe's row and options schema, and its result line and summary schema (generated from its
    pydantic contracts), to `schemas`; return the references to the result lines and to the summaries."""
    lines: list[Schema] = []
    summaries: list[Schema] = []
    for kind in kind_names():
        recipe = recipe_for(kind)
        schemas[recipe.row_schema_name] = dict(recipe.row_schema)
        schemas[recipe.options_schema_name] = dict(recipe.options_schema)
        for model, refs in ((recipe.result_line, lines), (recipe.summary, summaries)):
            schema, defs = schema_of(model)
            schemas.update(defs)
            schemas[model.__name__] = schema
            refs.append(_ref(model.__name__))
    return lines, summaries


def _kind_enums(node: object, kinds: list[str]) -> None:
    """Fill every `kind` enum (the Job property, the query parameters) with the registered kinds."""
    if isinstance(node, dict):
        for key, value in node.items():
            if (key == "kind" and isinstance(value, dict) and value.get("enum") == []) or (
                key == "schema" and node.get("name") == "kind" and value.get("enum") == []
            ):
                value["enum"] = kinds
            else:
                _kind_enums(value, kinds)
    elif isinstance(node, list):
        for value in node:
            _kind_enums(value, kinds)


def openapi_document() -> Document:
    """A copy of the document (callers may annotate theirs), completed from the registered recipes: the
    kind enums, and the result line, summary and scorecard schemas generated from their contracts."""
    doc = copy.deepcopy(DOCUMENT)
    schemas = doc["components"]["schemas"]
    lines, summaries = _contracts(schemas)
    _kind_enums(doc, list(kind_names()))
    results = doc["paths"]["/v1/jobs/{job_id}/results"]["get"]["responses"]["200"]["content"][NDJSON]
    schema, defs = schema_of(ExportEnd)
    schemas.update(defs)
    schemas["ExportEnd"] = schema
    results["schema"] = {"oneOf": [*lines, _ref("ExportEnd")]}
    kinds = [recipe_for(k) for k in kind_names()]
    schemas["JobSubmission"]["oneOf"] = [
        _submission(r.name, r.options_schema_name, r.row_schema_name) for r in kinds
    ]
    rows = list(dict.fromkeys(r.row_schema_name for r in kinds))
    for media in (NDJSON, "text/csv"):
        create = doc["paths"]["/v1/jobs"]["post"]["requestBody"]["content"][media]["schema"]
        create["oneOf"] = [_ref(name) for name in rows]
    object_schema(schemas["Job"]["properties"])["summary"] = {
        "anyOf": [{"type": "null"}, *summaries],
        "description": "Report totals, written when the job ends: the kind's summary.",
    }
    schemas["Scorecard"] = {
        "description": "Claims scorecards replayed from stored probabilities (no upstream request).",
        "allOf": [
            _ref("ClaimsSummary"),
            {
                "type": "object",
                "required": ["job_id", "status", "partial"],
                "properties": {
                    "job_id": {"type": "string", "format": "uuid"},
                    "status": {"type": "string", "enum": list(JOB_STATUSES)},
                    "partial": {"type": "boolean", "description": "True until the job is completed."},
                },
            },
        ],
    }
    return doc
