"""The new-job page (`/jobs/new`): upload a file or paste a few rows, pick a kind and its options, submit.

A signed-in page like the others (the session and CSRF checks of web/pages.py:_guard apply; the route is
registered on that blueprint). The form is `multipart/form-data`: a file (NDJSON, JSON, or CSV whose
header names the kind's columns), a paste box used when no file is chosen, the kind, and the kind's
options. Success is a 303 to the job's page, which follows progress live and shows the report.

Rows go through the API's own intake, not a parser of the page's: NDJSON and CSV files through
`web/intake.py:submit_stream`, the streamed path of `POST /v1/jobs` (checked as they are read and, on
Postgres, copied into the job's items as they stream; CSV records are checked as the NDJSON lines they
stand for, on their own line numbers), JSON files through the JSON path. Werkzeug spools a large uploaded
file to disk and it is read from there, so a big file is never held in memory. Every call into intake is
in `submit_upload`.

Any problem re-shows the form with what the user chose (a browser never re-fills a file input) and an
error summary naming the line and field, with the API's status (400, or 413/429 for a quota); nothing
is stored. `docs/spec.md` ("Submitting from the browser") describes the page for users.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import IO

from flask import flash, redirect, render_template, request, url_for
from pydantic import JsonValue
from sqlalchemy.orm import Session
from werkzeug.datastructures import FileStorage
from werkzeug.wrappers.response import Response as BaseResponse

from checks.claims import CONTRADICTED_MAX, SUPPORTED_MIN
from checks.fairness import PRIORITIES
from checks.kinds.citations import REVIEWS, CitationsOptions
from checks.ndjson import MAX_ERRORS_KEPT
from checks.options import CLAIMS_MODES
from checks.packing import DEFAULT_AUDIT_SHARE
from checks.recipes import Recipe, recipe_for
from config import Settings
from jobs.quotas import QuotaExceeded, check_items, check_submission
from models import Job, Tenant, utcnow
from web.auth import current_tenant
from web.body import Readable, read_json_body
from web.errors import ApiError, invalid
from web.intake import KINDS, loads_strict, prepare_json, submit_stream
from web.session import db_session, resources, settings
from workers.api import enqueue_start

log = logging.getLogger("factgate.web")

EXTENSIONS = {".ndjson": "ndjson", ".jsonl": "ndjson", ".jsonlines": "ndjson", ".json": "json", ".csv": "csv"}
MIMETYPES = {
    "application/x-ndjson": "ndjson",
    "application/ndjson": "ndjson",
    "application/jsonl": "ndjson",
    "application/x-jsonlines": "ndjson",
    "application/json": "json",
    "text/csv": "csv",
}
# The form's option groups: fieldset id → {form field: the option it sets}. A group is shown for the kinds
# whose recipe (`Recipe.option_names`) takes all its options, unless another group shown for the kind sets
# them all too (citations takes the answer and quote kinds' `pack_size` and `audit_share`, and has its
# own fields for them), and only those kinds are sent its fields, since a browser without script submits
# every group. Two kinds with an option of the same name and another meaning or default (claims' and
# citations' `supported_min`, citations' `pack_size`) each have a field of their own: citations' fields
# carry the prefix `citations_`, the answer and quote kinds' `questions_`. The model keeps each kind's
# default.
CITATION_CUTOFFS = ("supported_min", "weak_min", "contradicted_min", "checkable_min")
OPTION_GROUPS: dict[str, dict[str, str]] = {
    "claims-options": {
        **{name: name for name in ("mode", "supported_min", "contradicted_max")},
        "claims_pack_size": "pack_size",
    },
    "citations-options": {
        f"citations_{name}": name
        for name in (*CITATION_CUTOFFS, "misattribution", "review", "pack_size", "audit_share")
    },
    "questions-options": {"questions_pack_size": "pack_size", "questions_audit_share": "audit_share"},
    "common-options": {"priority": "priority"},
}
# Fields outside any group's rule: every kind takes them (they sit in the common fieldset).
UNGROUPED = {
    "budget_usd": "budget_usd",
    "webhook_url": "webhook_url",
    "reuse": "reuse",
    "reuse_max_age_hours": "reuse_max_age_hours",
}
# Every option field of the form.
FORM_OPTIONS = tuple(f for fields in (*OPTION_GROUPS.values(), UNGROUPED) for f in fields)
MAX_NAME_CHARS = 200
JSON_FILE_FIELDS = ("items", "metadata")
SNIFF_BYTES = 4096


# --- the one call into intake ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Upload:
    """What the form submits: kind, options as typed (strings), the rows' stream and their format."""

    kind: str
    options: dict[str, str]
    stream: Readable
    fmt: str  # "ndjson", "json" or "csv"
    metadata: dict[str, JsonValue] = field(default_factory=dict)


def submit_upload(upload: Upload, tenant: Tenant, cfg: Settings) -> Job:
    """Validate, store and start the job, exactly as `POST /v1/jobs` does; raise ApiError (a bad file or
    option) or QuotaExceeded, having stored nothing.

    This is the page's only call into intake. NDJSON and CSV files go through the API's own streaming
    entry point (`web/intake.py:submit_stream`: rows checked as they are read and, on Postgres, copied
    into the job's items as they stream), with the form's kind, options and metadata as its parameters.
    A JSON file is one document: it is read whole within the JSON body limit and checked by the API's JSON
    intake (`prepare_json`), after the form's kind and options are put around its rows.
    """
    session = db_session()
    try:
        if upload.fmt == "json":
            job = _submit_json(session, upload, tenant, cfg)
        else:
            params = [("kind", upload.kind), *upload.options.items()]
            if upload.metadata:
                params.append(("metadata", json.dumps(upload.metadata, ensure_ascii=False)))
            job = submit_stream(
                session,
                tenant=tenant,
                settings=cfg,
                body_format="csv" if upload.fmt == "csv" else "ndjson",
                params=params,
                stream=upload.stream,
                simulated=cfg.uses_simulator,
            ).job
    except BaseException:
        session.rollback()  # a load stopped half-way: none of it may be committed
        raise
    session.commit()
    # Only after commit, as in the API: a broker outage leaves the job queued for the sweeper.
    try:
        enqueue_start(resources().celery, job.id)
    except Exception:
        log.exception("could not enqueue start_job for job %s; the sweeper will start it", job.id)
    return job


def _submit_json(session: Session, upload: Upload, tenant: Tenant, cfg: Settings) -> Job:
    """A JSON file (an array of rows, or an object with `items`) through the API's JSON intake."""
    check_submission(session, tenant, utcnow())
    try:
        document = read_json_body(
            min(cfg.max_body_bytes, cfg.max_json_body_bytes),
            loads=loads_strict,
            stream=upload.stream,
            hint="; upload large batches as NDJSON or CSV, which are read line by line",
        )
    except ApiError as exc:
        # The reader's own messages speak of the request body; here the body is the file.
        exc.message = exc.message.replace("request body", "the JSON file", 1)
        raise
    prepared = prepare_json(_json_body(upload, document), cfg)
    check_items(tenant, len(prepared.units))
    job, _created = prepared.create(session, tenant.id, simulated=cfg.uses_simulator)
    return job


def _json_body(upload: Upload, document: object) -> dict[str, JsonValue]:
    """The API's JSON body for a JSON file: an array of rows, or an object with `items` (an API body
    without kind and options, which the form sets)."""
    body: dict[str, JsonValue] = {"kind": upload.kind, "options": {**upload.options}}
    if upload.metadata:
        body["metadata"] = upload.metadata
    if isinstance(document, list):
        return {**body, "items": document}
    if isinstance(document, dict):
        for key in document:
            if key not in JSON_FILE_FIELDS:
                raise invalid(
                    f"the JSON file has a field {str(key)[:40]!r}: it holds the rows (an array, or an "
                    'object with "items"); choose the kind and options in the form',
                    field=str(key),
                )
        return {**body, **document}
    raise invalid(f"the JSON file must hold an array of rows, not a {type(document).__name__}")


# --- the form ----------------------------------------------------------------------------------------------


@dataclass
class FormState:
    """The user's choices, re-shown as given when the form comes back with an error."""

    kind: str = "claims"
    options: dict[str, str] = field(default_factory=dict)
    name: str = ""
    paste: str = ""
    filename: str = ""

    def value(self, option: str) -> str:
        return self.options.get(option, "")


@dataclass(frozen=True)
class FormError:
    """The error summary: each problem (the first `MAX_DETAILS`), a note of how many more, and the id of
    the control they are about (for the summary's links and the field's own message)."""

    problems: list[str]
    target: str | None
    more: str = ""

    @property
    def message(self) -> str:
        """What the control itself says: the first problem."""
        return self.problems[0]


MAX_DETAILS = 10
_CITATIONS = CitationsOptions()
DEFAULTS = {
    "mode": "grounded",
    "supported_min": f"{SUPPORTED_MIN:g}",
    "contradicted_max": f"{CONTRADICTED_MAX:g}",
    "citations_supported_min": f"{_CITATIONS.supported_min:g}",
    "citations_weak_min": f"{_CITATIONS.weak_min:g}",
    "citations_contradicted_min": f"{_CITATIONS.contradicted_min:g}",
    "citations_checkable_min": f"{_CITATIONS.checkable_min:g}",
    "citations_misattribution": "true" if _CITATIONS.misattribution else "false",
    "citations_review": _CITATIONS.review,
    "citations_pack_size": str(_CITATIONS.pack_size),
    "citations_audit_share": f"{_CITATIONS.audit_share:g}",
    "claims_pack_size": "1",
    "questions_pack_size": "1",
    "questions_audit_share": f"{DEFAULT_AUDIT_SHARE:g}",
    "priority": "batch",
}


def _read_form(form: Mapping[str, str]) -> FormState:
    kind = (form.get("kind") or "").strip()
    options = {name: (form.get(name) or "").strip() for name in FORM_OPTIONS}
    return FormState(
        kind=kind,
        options={k: v for k, v in options.items() if v},
        name=(form.get("name") or "").strip()[:MAX_NAME_CHARS],
        paste=form.get("paste") or "",
    )


def _sniff(head: bytes) -> str:
    """NDJSON when the rows start with `{`, JSON with `[`, else CSV (its header line)."""
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text.startswith(b"{"):
        return "ndjson"
    if text.startswith(b"["):
        return "json"
    return "csv"


def _file_format(upload: FileStorage) -> str:
    """From the file's extension, else its declared type, else its first bytes."""
    name = (upload.filename or "").lower()
    for ext, fmt in EXTENSIONS.items():
        if name.endswith(ext):
            return fmt
    declared = MIMETYPES.get(upload.mimetype or "")
    if declared is not None:
        return declared
    stream = upload.stream
    head = stream.read(SNIFF_BYTES)
    stream.seek(0)
    return _sniff(head)


def _upload(state: FormState) -> tuple[Upload, str]:
    """The submission and the id of the control its rows came from (`file` or `paste`)."""
    chosen = request.files.get("file")
    fields = _sent_fields(state.kind)
    options = {fields[k]: v for k, v in state.options.items() if k in fields}
    metadata: dict[str, JsonValue] = {"name": state.name} if state.name else {}
    if chosen is not None and chosen.filename:
        state.filename = chosen.filename[:MAX_NAME_CHARS]
        stream: IO[bytes] = chosen.stream
        return Upload(state.kind, options, stream, _file_format(chosen), metadata), "file"
    if state.paste.strip():
        raw = state.paste.encode("utf-8", "surrogatepass")
        return Upload(state.kind, options, io.BytesIO(raw), _sniff(raw[:SNIFF_BYTES]), metadata), "paste"
    raise invalid("choose a file, or paste a few rows into the box", field="file")


def _target(exc: ApiError, source: str, kind: str) -> str:
    """The control an error is about: the kind's field for an option, the kind, or else the rows' file or
    paste box."""
    name = (exc.field or "").removeprefix("options.")
    if name == "kind":
        return name
    for form_field, option in _sent_fields(kind).items():
        if option == name:
            return form_field
    if name == "metadata":
        return "name"
    return source


def _form_error(exc: ApiError, source: str, kind: str) -> FormError:
    """Every problem the intake listed (row errors: one per line and field), else its one message."""
    problems = [str(e["message"]) for e in (exc.errors or []) if e.get("message")] or [exc.message]
    more = ""
    if len(problems) > MAX_DETAILS:
        extra = len(problems) - MAX_DETAILS
        # Intake keeps the first MAX_ERRORS_KEPT problems and counts the rest in its message.
        more = f"and {'at least ' if len(problems) >= MAX_ERRORS_KEPT else ''}{extra:,} more"
    return FormError(problems[:MAX_DETAILS], _target(exc, source, kind), more)


def _sent_fields(kind: str) -> dict[str, str]:
    """The form fields a kind is sent (form field → option): the ungrouped ones its recipe takes and every
    field of the groups shown for it. A group not shown for the kind is never sent, even where its option
    names are the kind's too: claims' `supported_min` is another kind's cutoff, with another default."""
    if kind not in KINDS:
        return {}
    taken = recipe_for(kind).option_names
    fields = {f: option for f, option in UNGROUPED.items() if option in taken}
    for group in _groups_for(taken):
        fields.update(OPTION_GROUPS[group])
    return fields


def _groups_for(taken: frozenset[str]) -> list[str]:
    """The option groups shown for a kind that takes the options `taken`: those whose options it takes all
    of, less any whose options another of them sets too (a kind gets one field per option)."""
    options = {group: set(fields.values()) for group, fields in OPTION_GROUPS.items()}
    shown = [group for group, names in options.items() if names <= taken]
    return [g for g in shown if not any(options[g] < options[other] for other in shown)]


def _option_groups(recipes: list[Recipe]) -> dict[str, str]:
    """Each option group's `data-kinds`: the kinds (space-separated) it is shown for."""
    shown = {r.name: _groups_for(r.option_names) for r in recipes}
    return {group: " ".join(r.name for r in recipes if group in shown[r.name]) for group in OPTION_GROUPS}


def _render(state: FormState, error: FormError | None, status: int) -> tuple[str, int]:
    return render_template(
        "new_job.html",
        state=state,
        error=error,
        kinds=[recipe_for(k) for k in KINDS],
        groups=_option_groups([recipe_for(k) for k in KINDS]),
        modes=CLAIMS_MODES,
        reviews=REVIEWS,
        priorities=PRIORITIES,
        defaults=DEFAULTS,
    ), status


def new_job() -> BaseResponse | tuple[str, int]:
    """GET: the empty form. POST: submit, then 303 to the job's page; or the form again with the error."""
    if request.method == "GET":
        return _render(FormState(kind=request.args.get("kind") or "claims"), None, 200)
    state = _read_form(request.form)
    source = "file"
    try:
        upload, source = _upload(state)
        job = submit_upload(upload, current_tenant(), settings())
    except ApiError as exc:
        db_session().rollback()
        return _render(state, _form_error(exc, source, state.kind), exc.status)
    except QuotaExceeded as exc:
        db_session().rollback()
        status = 413 if exc.quota == "max_items_per_job" else 429
        return _render(state, FormError([exc.message], None), status)
    noun = "item" if job.total_items == 1 else "items"
    flash(f"Job submitted: {job.total_items:,} {noun}. This page follows its progress.", "info")
    return redirect(url_for("pages.job_page", job_id=str(job.id)), code=303)
