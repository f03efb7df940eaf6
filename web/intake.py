"""Turning a POST /v1/jobs request into a validated job: kind, options, rows, metadata — or one 400.

Three body formats carry the same submission:
- JSON: `{"kind", "options", "items": [...], "metadata"}`; row problems are named `items[i]` (0-based).
  Bounded before parsing (`FACTGATE_MAX_JSON_BODY_BYTES`): a parsed document takes ~9× its bytes.
- NDJSON (`application/x-ndjson`): one row per line; kind, options and metadata come from query
  parameters; row problems are named by 1-based line.
- CSV (`text/csv`): a header line, then one row per record (checks/csv_rows.py); like NDJSON otherwise.

`submit_stream` is the one entry point for every body format (the API and the upload page use it).
Each job kind's recipe (checks/kinds/) is its intake (`RecipeIntake`, in `KINDS`). NDJSON and CSV bodies
of a kind with a streamed loader (`jobs.kinds.JobKind.load`) are streamed: the job row is inserted first,
in the request's transaction, and each row goes into a Postgres COPY as soon as it is validated
(jobs/bulk_load.py), so a 1,000,000-row body is never held whole, as bytes or as rows. Up to
`FACTGATE_INTAKE_DEFER_ROWS` rows the items are built before the answer; above it the job answers 202 as
`validating` and the `start_job` task builds them. A bad row anywhere rolls everything back: nothing is
stored. The cheap checks (kind, options, metadata) run before the first
line is read, so a typo in a query parameter fails at once instead of after an 80 MB upload.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import JsonValue
from sqlalchemy.orm import Session

from checks import claims as claim_rules
from checks.csv_rows import CsvError, csv_records
from checks.ndjson import RowLine
from checks.options import OptionsError
from checks.recipes import RowLimits, kind_names, recipe_for
from config import Settings
from jobs.bulk_load import build_items
from jobs.intake import UnitSpec, create_job, find_idempotent, finish_streamed_job, insert_job
from jobs.kinds import job_kind
from jobs.quotas import check_items, check_submission, item_quota
from models import Job, Tenant, utcnow
from web.body import Readable, drain, iter_body_lines, read_json_body
from web.errors import Problem, invalid, too_large
from web.fingerprint import SubmissionFingerprint

MAX_METADATA_BYTES = 16 * 1024
MAX_IDEMPOTENCY_KEY_CHARS = 200  # the column's width
JSON_BODY_FIELDS = ("kind", "options", "items", "metadata")
# Query parameters of an NDJSON submission that are not job options.
NDJSON_META_PARAMS = ("kind", "metadata")
_FIRST_ON_ITEM = re.compile(r"first on item (\d+)")


@dataclass(frozen=True)
class PreparedJob:
    """A submission that passed every check: ready for `jobs.intake.create_job`."""

    kind: str
    options: dict[str, JsonValue]
    units: list[UnitSpec]
    warnings: list[str]
    metadata: dict[str, JsonValue]

    def create(
        self,
        session: Session,
        tenant_id: uuid.UUID,
        *,
        simulated: bool,
        idempotency_key: str | None = None,
        submission_sha256: str | None = None,
    ) -> tuple[Job, bool]:
        """Store it: `jobs.intake.create_job` (the caller has checked the tenant's quotas)."""
        return create_job(
            session,
            tenant_id=tenant_id,
            kind=self.kind,
            options=self.options,
            units=self.units,
            idempotency_key=idempotency_key,
            metadata=self.metadata,
            warnings=self.warnings,
            simulated=simulated,
            submission_sha256=submission_sha256,
        )


@dataclass(frozen=True)
class LoadedRows:
    """What a streamed load staged: the rows, the items they make and the intake warnings."""

    rows: int
    items: int
    warnings: list[str]


@dataclass(frozen=True)
class PreparedRows:
    """What a kind makes of valid rows: the options as stored, the items to create, intake warnings."""

    options: dict[str, JsonValue]
    units: list[UnitSpec]
    warnings: list[str]


# --- errors --------------------------------------------------------------------------------------------


def options_error(exc: OptionsError, *, prefix: str = "options.") -> Exception:
    """400 naming the option (`options.mode` in a JSON body, `mode` as a query parameter)."""
    return invalid(f'option "{exc.field}": {exc.message}', field=f"{prefix}{exc.field}")


def _row_error_entry(err: claim_rules.RowError) -> Problem:
    """One problem in the API's shape: NDJSON rows by 1-based `line`, JSON items by 0-based `index`."""
    entry: Problem = {}
    if err.unit == "item" and err.line is not None:
        index = err.line - 1
        entry["index"] = index
        where = f"items[{index}]"
        entry["field"] = f"{where}.{err.field}" if err.field else where
        # checks/ counts items from 1 ("first on item 1"); the API names them as JSON indexes.
        message = _FIRST_ON_ITEM.sub(lambda m: f"first at items[{int(m.group(1)) - 1}]", err.message)
        entry["message"] = f"{entry['field']}: {message}"
        return entry
    if err.line is not None:
        entry["line"] = err.line
    if err.field is not None:
        entry["field"] = err.field if err.unit == "line" else f"items.{err.field}"
    entry["message"] = str(err)
    return entry


def rows_error(exc: claim_rules.ClaimsValidationError, *, json_items: bool) -> Exception:
    """400 listing every kept problem; the top level repeats the first one's position."""
    entries = [_row_error_entry(e) for e in exc.errors]
    first: Problem = entries[0] if entries else {"message": str(exc)}
    total = exc.total
    noun = "problem" if total == 1 else "problems"
    message = f"{total} {noun} in the batch, nothing was stored; first: {first['message']}"
    if exc.more:
        message += f" ({exc.more} more not listed)"
    field = first.get("field") or ("items" if json_items else None)
    return invalid(message, field=field, line=first.get("line"), index=first.get("index"), errors=entries)


# --- every kind, from its recipe ------------------------------------------------------------------------


class RecipeIntake:
    """A kind's intake: its recipe (checks/kinds/) validates options and rows, its jobs/ part makes the
    items. Every problem is an `ApiError` (via `invalid`); row errors keep the recipe's line / item and field
    messages (see `rows_error`)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def parse_options(self, raw: Mapping[str, Any]) -> Any:
        """Validated options (the recipe's object); called before the body is read."""
        return recipe_for(self.kind).parse_options(raw)

    def _units(self, options: Any, rows: Sequence[Any]) -> PreparedRows:
        units, warnings = job_kind(self.kind).units(rows, options)
        return PreparedRows(options=options.as_dict(), units=units, warnings=warnings)

    def _prepared(self, options: Any, read: Callable[[], Sequence[Any]], *, json_items: bool) -> PreparedRows:
        """The items of the rows `read()` returns; its row errors as one 400 (`rows_error`)."""
        try:
            rows = read()
        except claim_rules.ClaimsValidationError as exc:
            raise rows_error(exc, json_items=json_items) from None
        return self._units(options, rows)

    def from_lines(self, options: Any, lines: Iterable[RowLine], settings: Settings) -> PreparedRows:
        recipe, limits = recipe_for(self.kind), _limits(settings, options)
        return self._prepared(options, lambda: recipe.rows_from_lines(lines, limits), json_items=False)

    @property
    def streams(self) -> bool:
        """Whether NDJSON and CSV bodies of this kind are loaded as they stream (its jobs/ part's loader)."""
        return job_kind(self.kind).load is not None

    def load(
        self,
        session: Session,
        job: Job,
        *,
        options: Any,
        lines: Iterable[RowLine],
        settings: Settings,
        quota: Callable[[int], None],
    ) -> LoadedRows:
        """Validate the NDJSON lines (a CSV body's records arrive as such lines) and COPY each valid row
        into the staging table under `job`'s id as it is read (Postgres; jobs/bulk_load.py builds the items).
        `quota(items)` is called with the running item count and raises when it is over the quota."""
        loader = job_kind(self.kind).load
        if loader is None:
            raise TypeError(f"kind {self.kind!r} has no streamed loader (check `streams` first)")
        try:
            staged = loader(session, job, options, lines, limits=_limits(settings, options), quota=quota)
        except claim_rules.ClaimsValidationError as exc:
            raise rows_error(exc, json_items=False) from None
        return LoadedRows(rows=staged.rows, items=staged.items, warnings=staged.warnings)

    def from_items(self, options: Any, items: Sequence[object], settings: Settings) -> PreparedRows:
        recipe, limits = recipe_for(self.kind), _limits(settings, options)
        return self._prepared(options, lambda: recipe.rows_from_items(items, limits), json_items=True)


def _limits(settings: Settings, options: object) -> RowLimits:
    # A kind reading more than one row format names it in its options (citations: `input_format`).
    input_format = getattr(options, "input_format", "auto")
    return RowLimits(
        max_rows=settings.max_rows_per_job,
        max_claim_bytes=settings.max_claim_bytes,
        input_format=input_format if isinstance(input_format, str) else "auto",
    )


class _Intakes(Mapping[str, RecipeIntake]):
    """Every registered kind's intake, by name, in the recipes' order."""

    def __getitem__(self, kind: str) -> RecipeIntake:
        if kind not in kind_names():
            raise KeyError(kind)
        return RecipeIntake(kind)

    def __iter__(self) -> Iterator[str]:
        return iter(kind_names())

    def __len__(self) -> int:
        return len(kind_names())


KINDS: Mapping[str, RecipeIntake] = _Intakes()


def intake_for(kind: object, *, field: str = "kind") -> tuple[str, RecipeIntake]:
    """The intake of a kind, or 400: missing or unknown."""
    if kind is None or kind == "":
        raise invalid(f"kind is required (one of: {', '.join(KINDS)})", field=field)
    if not isinstance(kind, str):
        raise invalid(f"kind must be a string, got {type(kind).__name__}", field=field)
    if kind in KINDS:
        return kind, KINDS[kind]
    raise invalid(f"unknown kind {kind[:50]!r} (supported: {', '.join(KINDS)})", field=field)


# --- metadata ------------------------------------------------------------------------------------------


def _text_problem(text: str) -> str | None:
    if "\x00" in text:
        return "must not contain a NUL character"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "must be valid Unicode (it holds an unpaired surrogate)"
    return None


def check_metadata(value: object, *, field: str = "metadata") -> dict[str, JsonValue]:
    """An object of at most 16 KB of JSON whose strings Postgres can store; else 400."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise invalid(f"metadata must be a JSON object, got {type(value).__name__}", field=field)
    # Walk without recursion: the body parser already bounds depth, but this must never blow the stack.
    stack: list[object] = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for k, v in node.items():
                if (problem := _text_problem(str(k))) is not None:
                    raise invalid(f"metadata keys {problem}", field=field)
                stack.append(v)
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, str):
            if (problem := _text_problem(node)) is not None:
                raise invalid(f"metadata strings {problem}", field=field)
        elif isinstance(node, float) and not math.isfinite(node):
            raise invalid("metadata numbers must be finite", field=field)
    size = len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    if size > MAX_METADATA_BYTES:
        raise invalid(
            f"metadata is {size:,} bytes of JSON, over the limit of {MAX_METADATA_BYTES:,}", field=field
        )
    return value


def check_idempotency_key(raw: str | None) -> str | None:
    """The Idempotency-Key header, trimmed; 400 when it cannot be stored."""
    if raw is None:
        return None
    key = raw.strip()
    if not key:
        raise invalid("Idempotency-Key must not be empty", field="Idempotency-Key")
    if len(key) > MAX_IDEMPOTENCY_KEY_CHARS:
        raise invalid(
            f"Idempotency-Key is {len(key)} characters, over the limit of {MAX_IDEMPOTENCY_KEY_CHARS}",
            field="Idempotency-Key",
        )
    if (problem := _text_problem(key)) is not None:
        raise invalid(f"Idempotency-Key {problem}", field="Idempotency-Key")
    return key


# --- the two formats -----------------------------------------------------------------------------------


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def loads_strict(raw: str | bytes) -> Any:
    """json.loads without NaN/Infinity (Postgres JSONB cannot store them)."""
    return json.loads(raw, parse_constant=_reject_constant)


def prepare_json(body: object, settings: Settings) -> PreparedJob:
    """A JSON submission: `{"kind", "options", "items", "metadata"}`."""
    if not isinstance(body, dict):
        raise invalid(f"request body must be a JSON object, got {type(body).__name__}")
    unknown = sorted(set(body) - set(JSON_BODY_FIELDS))
    if unknown:
        raise invalid(
            f"unknown field {unknown[0]!r} (allowed: {', '.join(JSON_BODY_FIELDS)})", field=str(unknown[0])
        )
    kind, intake = intake_for(body.get("kind"))
    raw_options = body.get("options")
    if raw_options is None:
        raw_options = {}
    if not isinstance(raw_options, dict):
        raise invalid(f"options must be a JSON object, got {type(raw_options).__name__}", field="options")
    try:
        options = intake.parse_options(raw_options)
    except OptionsError as exc:
        raise options_error(exc) from None
    metadata = check_metadata(body.get("metadata"))
    items = body.get("items")
    if items is None:
        raise invalid("items is required: a JSON array of rows", field="items")
    if not isinstance(items, list):
        raise invalid(f"items must be a JSON array, got {type(items).__name__}", field="items")
    prepared = intake.from_items(options, items, settings)
    return PreparedJob(kind, prepared.options, prepared.units, prepared.warnings, metadata)


def ndjson_submission(args: Mapping[str, str]) -> tuple[str, RecipeIntake, Any, dict[str, JsonValue]]:
    """Kind, intake, options and metadata of an NDJSON submission, from its query parameters."""
    kind, intake = intake_for(args.get("kind"))
    raw_options = {k: v for k, v in args.items() if k not in NDJSON_META_PARAMS}
    try:
        options = intake.parse_options(raw_options)
    except OptionsError as exc:
        raise options_error(exc, prefix="") from None
    metadata: dict[str, JsonValue] = {}
    raw_meta = args.get("metadata")
    if raw_meta:
        try:
            parsed = loads_strict(raw_meta)
        except (ValueError, RecursionError):
            raise invalid("metadata must be a JSON object (URL-encoded)", field="metadata") from None
        metadata = check_metadata(parsed)
    return kind, intake, options, metadata


def prepare_ndjson(args: Mapping[str, str], lines: Iterator[RowLine], settings: Settings) -> PreparedJob:
    """An NDJSON submission: rows from `lines`, everything else from the query string."""
    kind, intake, options, metadata = ndjson_submission(args)
    prepared = intake.from_lines(options, lines, settings)
    return PreparedJob(kind, prepared.options, prepared.units, prepared.warnings, metadata)


# --- one entry point for every body format ------------------------------------------------------------

BodyFormat = Literal["json", "ndjson", "csv"]
JSON_TOO_LARGE_HINT = "; send large batches as NDJSON (application/x-ndjson) or CSV, which are streamed"


@dataclass(frozen=True)
class Submission:
    """What `submit_stream` did. `created` False: the Idempotency-Key's job, returned as it was (the
    caller compares `fingerprint` with it: `jobs.intake.same_submission`). When `created` is True the
    job and its items (or, for a streamed body of more than `FACTGATE_INTAKE_DEFER_ROWS` rows, the job
    `validating` and its staged rows) are flushed but not committed: the caller commits, then enqueues
    `start_job`, which builds a validating job's items."""

    job: Job
    created: bool
    fingerprint: str


def submit_stream(
    session: Session,
    *,
    tenant: Tenant,
    settings: Settings,
    body_format: BodyFormat,
    params: Sequence[tuple[str, str]],
    stream: Readable,
    declared_length: int | None = None,
    idempotency_key: str | None = None,
    simulated: bool = False,
) -> Submission:
    """Create a job from a submission whose body is read from `stream` (a file-like byte stream).

    `params` are the submission's query parameters (kind, options and metadata for NDJSON and CSV; none
    for JSON), each name at most once. Raises `ApiError` (400 naming the line and field, 413 over a body
    limit) or `jobs.quotas.QuotaExceeded`; nothing is stored then (the caller rolls back). The body is
    hashed as it is read for the submission fingerprint; on Postgres NDJSON and CSV bodies are loaded
    with COPY as they stream, elsewhere (SQLite) they are collected first.
    """
    limit = settings.max_body_bytes
    fingerprint = SubmissionFingerprint(body_format, params)
    body = fingerprint.reader(stream)
    if declared_length is not None and declared_length > limit:
        raise too_large(limit)
    existing = find_idempotent(session, tenant.id, idempotency_key)
    if existing is not None:
        # A retry: hashed as it streams past, never validated or held whole.
        drain(body, limit, 0)
        return Submission(existing, False, fingerprint.hexdigest())
    check_submission(session, tenant, utcnow())  # before reading a large body
    args = dict(params)
    if (
        body_format == "json"
        or session.get_bind().dialect.name != "postgresql"
        or not _streamed_kind(args.get("kind"))
    ):
        prepared = _prepare_whole(body_format, args, body, declared_length, settings)
        check_items(tenant, len(prepared.units))
        drain(body, limit, body.bytes_read)  # whatever validation did not need still counts
        job, created = prepared.create(
            session,
            tenant.id,
            simulated=simulated,
            idempotency_key=idempotency_key,
            submission_sha256=fingerprint.hexdigest(),
        )
        return Submission(job, created, fingerprint.hexdigest())
    kind, intake, options, metadata = ndjson_submission(args)
    job, created = insert_job(
        session,
        tenant_id=tenant.id,
        kind=kind,
        options=options.as_dict(),
        idempotency_key=idempotency_key,
        metadata=metadata,
        simulated=simulated,
    )
    if not created:  # lost a race with a concurrent request carrying the same key
        drain(body, limit, 0)
        return Submission(job, False, fingerprint.hexdigest())
    lines = _row_lines(body_format, kind, body, limit)
    try:
        loaded = intake.load(
            session,
            job,
            options=options,
            lines=lines,
            settings=settings,
            quota=item_quota(tenant),
        )
    except CsvError as exc:
        raise csv_error(exc) from None
    drain(body, limit, body.bytes_read)
    # A small job's items are built now, in this transaction, as they always were; a large one is committed
    # `validating` with its rows staged, and `start_job` builds its items after the 202 (jobs/bulk_load.py).
    deferred = loaded.rows > settings.intake_defer_rows
    if not deferred:
        build_items(session, job)
    finish_streamed_job(
        session,
        job,
        total_items=loaded.items,
        warnings=loaded.warnings,
        submission_sha256=fingerprint.hexdigest(),
        validating=deferred,
    )
    return Submission(job, True, fingerprint.hexdigest())


def _streamed_kind(kind: str | None) -> bool:
    """A known kind whose rows its jobs/ part loads as they stream (an unknown one is refused, 400, on the
    in-memory path like any other)."""
    return kind is not None and kind in KINDS and KINDS[kind].streams


def _row_lines(body_format: BodyFormat, kind: str, body: Readable, limit: int) -> Iterator[RowLine]:
    """The body's rows as NDJSON lines, read lazily: a CSV body's records become the object each NDJSON
    line would hold, on the line number it starts on (checks/csv_rows.py), so one checker serves both
    without turning every CSV record into JSON text to parse again."""
    lines = (line for _n, line in iter_body_lines(body, limit))
    return csv_records(lines, kind) if body_format == "csv" else lines


def csv_error(exc: CsvError) -> Exception:
    """400 for what only a CSV body can get wrong (header, field count, quoting), naming line and column."""
    return invalid(str(exc), field=exc.field, line=exc.line)


def _prepare_whole(
    body_format: BodyFormat,
    args: Mapping[str, str],
    body: Readable,
    declared_length: int | None,
    settings: Settings,
) -> PreparedJob:
    """The submission validated with its rows in memory: JSON always, NDJSON and CSV off Postgres."""
    limit = settings.max_body_bytes
    if body_format in {"ndjson", "csv"}:
        kind, intake, options, metadata = ndjson_submission(args)
        try:
            prepared = intake.from_lines(options, _row_lines(body_format, kind, body, limit), settings)
        except CsvError as exc:
            raise csv_error(exc) from None
        return PreparedJob(kind, prepared.options, prepared.units, prepared.warnings, metadata)
    # A JSON document is parsed whole (its rows are counted only after), so its size is bounded before
    # parsing, far below the streamed formats': a parsed document takes ~9× its bytes of memory.
    json_limit = min(limit, settings.max_json_body_bytes)
    if declared_length is not None and declared_length > json_limit:
        refusal = too_large(json_limit)
        refusal.message += JSON_TOO_LARGE_HINT
        raise refusal
    document = read_json_body(json_limit, loads=loads_strict, stream=body, hint=JSON_TOO_LARGE_HINT)
    rows = _dataset_rows(document)
    if rows is not None:
        return _prepare_dataset(rows, args, settings)
    if args:
        unknown = sorted(args)[0]
        raise invalid(f"unknown query parameter {unknown!r} (allowed: none)", field=unknown)
    return prepare_json(document, settings)


# Keys under which a dataset file keeps its rows (DeepEval's exports: `test_cases`, `goldens`; `samples`):
# a document of one of these, or a bare array, is the rows themselves, as an NDJSON body's lines are.
DATASET_KEYS = ("test_cases", "goldens", "samples")


def _dataset_rows(document: object) -> list[object] | None:
    """The rows of a JSON document that is a dataset as its tool wrote it, not a factgate submission: a
    JSON array, or an object with none of our fields holding one list under a DATASET_KEYS name."""
    if isinstance(document, list):
        return document
    if isinstance(document, dict) and not set(document) & set(JSON_BODY_FIELDS):
        lists = [k for k in DATASET_KEYS if isinstance(document.get(k), list)]
        if len(lists) == 1:
            found = document[lists[0]]
            return list(found)
    return None


def _prepare_dataset(rows: list[object], args: Mapping[str, str], settings: Settings) -> PreparedJob:
    """A dataset document: kind, options and metadata from the query parameters (as for NDJSON), its rows
    validated as a JSON submission's `items` (errors name `items[i].field`)."""
    kind, intake, options, metadata = ndjson_submission(args)
    prepared = intake.from_items(options, rows, settings)
    return PreparedJob(kind, prepared.options, prepared.units, prepared.warnings, metadata)
