"""The HTML pages: sign-in, jobs list, job page with live progress and report, request lookup, downloads.

Server-rendered Jinja templates (autoescaped), one static script (progress polling) and one static
stylesheet; no build step. Every page is scoped to the tenant of the page session opened by a token
sign-in (web/page_session.py): the session is checked on the server for every request, so it ends with
sign-out, a revoked token or a timeout. Another tenant's job is the same 404 page as a missing one.
Views are thin: reads and state changes go through jobs/, reports are assembled in web/pages_*.py.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from flask import (
    Blueprint,
    Flask,
    Response,
    abort,
    current_app,
    flash,
    g,
    jsonify,
    redirect,
    render_template,
    request,
    session,
    url_for,
)
from flask_wtf.csrf import CSRFError  # type: ignore[import-untyped]
from markupsafe import Markup
from sqlalchemy.orm import Session
from werkzeug.exceptions import HTTPException
from werkzeug.wrappers.response import Response as BaseResponse

from checks.recipes import kind_names
from jobs.control import JobStateError, cancel_job, retry_failed
from jobs.purge import delete_job
from jobs.queries import get_job, list_jobs, lookup_request, parse_job_id
from jobs.quotas import QuotaExceeded
from jobs.retention import Retention
from jobs.sessions import LiveSession, live_token, page_session_is_live
from jobs.webhooks import DeliveryStateError, deliveries_of, redeliver, webhook_target
from models import JOB_STATUSES, Job
from web import page_session
from web.auth import current_tenant
from web.enqueue import enqueue_cancel, enqueue_purge
from web.errors import outage_error, render
from web.export_slots import ExportsBusy, export_response
from web.exports import CSV_RENDERERS, RESULT_ITERATORS, ndjson_lines, stream_job
from web.pages_format import register_filters
from web.pages_jobs import job_view, job_views, progress_payload
from web.pages_new_job import new_job
from web.pages_reports import report_context
from web.pages_usage import usage_page
from web.security import csrf, init_security, report_csp
from web.session import EXTENSION, db_session, resources, settings
from workers.api import enqueue_start, enqueue_webhooks

log = logging.getLogger("factgate.web")

pages = Blueprint("pages", __name__)

STATIC = Path(__file__).resolve().parent / "static"
PUBLIC_ENDPOINTS = frozenset({"pages.sign_in"})
JSON_ENDPOINTS = frozenset({"pages.job_progress"})
# Requests a page makes on its own (the progress poll): checked, but not activity for the idle timeout.
BACKGROUND_ENDPOINTS = frozenset({"pages.job_progress"})
LIST_LIMIT = 200
# The sign-in form (a token and where to go next) is the one form read before a session exists: its body is
# refused (413) past this, so it cannot be used to make the server read a large body unauthenticated.
SIGN_IN_MAX_BYTES = 16 * 1024
MAX_REQUEST_ID_CHARS = 200
NDJSON_MIMETYPE = "application/x-ndjson"


def init_pages(app: Flask) -> None:
    """Register the pages, their filters and the browser safety measures on `app` (see create_app)."""
    cfg = app.extensions[EXTENSION].settings
    init_security(
        app,
        secret_key=cfg.secret_key,
        instance_path=cfg.instance_path,
        embedded=cfg.embedded,
        session_max_s=cfg.session_max_s,
        cookie_secure=cfg.cookie_secure,
        hsts_max_age_s=cfg.hsts_max_age_s,
    )
    register_filters(app)
    app.register_blueprint(pages)


# --- sign-in and the tenant of a page request ----------------------------------------------------------


def _safe_next(target: str | None) -> str:
    """Where to go after sign-in: a path on this site only (never `//host` or a scheme)."""
    if (
        target
        and target.startswith("/")
        and not target.startswith(("//", "/\\"))
        and all(ch.isprintable() and not ch.isspace() for ch in target)
    ):
        return target
    return url_for("pages.jobs")


@pages.before_request
def _guard() -> BaseResponse | None:
    """A live page session on every page but the sign-in page, then CSRF on its state-changing forms.

    The session is decided from the cookie alone, before a byte of the body is read: CSRF's token is a form
    field, and reading the form of a page POST means reading all of a multipart body of up to
    FACTGATE_MAX_BODY_BYTES, so checking it first let anyone hold a web thread by trickling a body to any
    page. A request without a live session is refused with its body unread (the server drains a little of
    it, bounded, or closes the connection). The sign-in form is the one form read without a session, and
    its body is bounded to SIGN_IN_MAX_BYTES."""
    if request.endpoint in PUBLIC_ENDPOINTS:
        request.max_content_length = SIGN_IN_MAX_BYTES
        _check_csrf()
        return None
    found = page_session.current(activity=request.endpoint not in BACKGROUND_ENDPOINTS)
    if isinstance(found, LiveSession):
        g.tenant = found.tenant
        g.page_session_id = found.id
        _check_csrf()
        return None
    message = "Sign in again."
    if found is not None:  # an ended session: forget it, and say why on the sign-in page
        session.clear()
        message = page_session.ended_notice(found)
        flash(message, "info")
    if request.endpoint in JSON_ENDPOINTS:
        resp = jsonify({"error": {"type": "authentication_error", "message": message}})
        resp.status_code = 401
        return resp
    target = request.full_path.rstrip("?") if request.method == "GET" else None
    return redirect(url_for("pages.sign_in", next=target))


def _check_csrf() -> None:
    """flask-wtf's check of a state-changing form's token (it reads the form: only after the session)."""
    if current_app.config.get("WTF_CSRF_ENABLED", True):
        csrf.protect()


@pages.after_request
def _no_store(response: Response) -> Response:
    """Tenant data is never kept by shared caches or the browser's back-forward cache."""
    response.headers.setdefault("Cache-Control", "private, no-store")
    return response


@pages.route("/sign-in", methods=["GET", "POST"])
def sign_in() -> BaseResponse | tuple[str, int]:
    next_url = _safe_next(request.values.get("next"))
    if request.method == "GET":
        found = page_session.current(activity=True)
        if isinstance(found, LiveSession):
            return redirect(next_url)
        if found is not None:  # an ended session: say why, once
            session.clear()
            flash(page_session.ended_notice(found), "info")
        return render_template("sign_in.html", next_url=next_url, error=None), 200
    token = (request.form.get("token") or "").strip()
    credential = live_token(db_session(), token) if token else None
    if credential is None:
        # One message for unknown, revoked and empty tokens: no hint about which tokens exist.
        return render_template("sign_in.html", next_url=next_url, error="That token is not valid."), 401
    page_session.start(credential)
    return redirect(next_url)


@pages.post("/sign-out")
def sign_out() -> BaseResponse:
    page_session.finish()
    flash("You are signed out.", "info")
    return redirect(url_for("pages.sign_in"))


# --- jobs ------------------------------------------------------------------------------------------------


def _job_or_404(job_id: str) -> Job:
    job = get_job(db_session(), current_tenant().id, job_id)
    if job is None:
        abort(404, description="There is no job with that id in your account.")
    return job


def _items_or_410(job: Job) -> Job:
    """A job whose items exist: downloads of a job past its retention are 410, not an empty file."""
    if job.purged_at is not None:
        abort(410, description="This job's items were purged under its retention; its summary remains.")
    return job


@pages.get("/")
def index() -> BaseResponse:
    return redirect(url_for("pages.jobs"))


@pages.get("/jobs")
def jobs() -> str:
    kind = request.args.get("kind") or None
    status = request.args.get("status") or None
    kind = kind if kind in kind_names() else None
    status = status if status in JOB_STATUSES else None
    sess = db_session()
    rows = job_views(
        sess,
        list_jobs(sess, current_tenant().id, limit=LIST_LIMIT, kind=kind, status=status, with_summary=False),
    )
    return render_template(
        "jobs.html", jobs=rows, kind=kind, status=status, kinds=kind_names(), statuses=JOB_STATUSES
    )


# The new-job page lives in its own module; registered here so _guard (session, CSRF) covers it.
pages.add_url_rule("/jobs/new", view_func=new_job, methods=["GET", "POST"])


@pages.get("/jobs/<job_id>")
def job_page(job_id: str) -> tuple[str, int]:
    job = _job_or_404(job_id)
    sess = db_session()
    view = job_view(sess, job)
    # A job past its retention keeps its row and summary, not the items its report reads.
    has_items = view.ended and view.purged_at is None
    report = report_context(sess, job, request.args, interactive=True) if has_items else None
    status = 400 if report is not None and report.get("input_error") else 200
    webhooks = deliveries_of(sess, current_tenant().id, job.id)
    target = webhook_target(sess, job)
    return render_template(
        "job.html", view=view, job=job, report=report, webhooks=webhooks, webhook_target=target
    ), status


@pages.get("/jobs/<job_id>/progress.json")
def job_progress(job_id: str) -> Response:
    job = _job_or_404(job_id)
    resp = jsonify(progress_payload(db_session(), job))
    resp.headers["Cache-Control"] = "no-store"
    return resp


def _enqueue_start(job: Job) -> None:
    """As in the API: a broker outage leaves the job queued for the sweeper, it does not fail the form."""
    try:
        enqueue_start(resources().celery, job.id)
    except Exception:
        log.exception("could not enqueue start_job for job %s; the sweeper will start it", job.id)


@pages.post("/jobs/<job_id>/cancel")
def job_cancel(job_id: str) -> BaseResponse:
    sess = db_session()
    job = _job_or_404(job_id)
    if job.status == "cancelling":
        flash("The job is already being cancelled.", "info")
    elif cancel_job(sess, job):
        sess.commit()
        enqueue_cancel(job)
        flash("Cancelling: pending items are skipped, running ones finish first.", "info")
    else:
        sess.rollback()
        flash(f"The job is {job.status}; only a validating, queued or running job can be cancelled.", "error")
    return redirect(url_for("pages.job_page", job_id=str(job.id)))


@pages.get("/jobs/<job_id>/delete")
def job_delete_confirm(job_id: str) -> str:
    """The confirmation step: what a delete removes and what it keeps, and the one button that does it."""
    job = _job_or_404(job_id)
    return render_template("job_delete.html", view=job_view(db_session(), job))


@pages.post("/jobs/<job_id>/delete")
def job_delete(job_id: str) -> BaseResponse:
    """Delete an ended job (the confirmation page's form, CSRF-checked by _guard like every POST)."""
    sess = db_session()
    job = _job_or_404(job_id)
    try:
        delete_job(sess, job)
    except JobStateError as exc:
        sess.rollback()
        flash(f"{exc}.", "error")
        return redirect(url_for("pages.job_page", job_id=str(job.id)))
    sess.commit()
    enqueue_purge()
    flash(f"Job {str(job.id)[:8]} was deleted; its usage stays on the Usage page.", "info")
    return redirect(url_for("pages.jobs"))


@pages.post("/jobs/<job_id>/retry")
def job_retry(job_id: str) -> BaseResponse:
    sess = db_session()
    job = _job_or_404(job_id)
    try:
        retried = retry_failed(sess, job, Retention.of(settings()))
    except (JobStateError, QuotaExceeded) as exc:
        sess.rollback()
        flash(f"{exc}.", "error")
        return redirect(url_for("pages.job_page", job_id=str(job.id)))
    if not retried:
        sess.rollback()
        flash("Nothing to retry: the job has no failed items.", "info")
    else:
        sess.commit()
        _enqueue_start(job)
        flash(f"Retrying {retried} failed item(s).", "info")
    return redirect(url_for("pages.job_page", job_id=str(job.id)))


@pages.post("/jobs/<job_id>/webhooks/<delivery_id>/redeliver")
def webhook_redeliver(job_id: str, delivery_id: str) -> BaseResponse:
    """Send a delivered or given-up webhook again (same `webhook-id` and body), now."""
    sess = db_session()
    job = _job_or_404(job_id)
    did = parse_job_id(delivery_id)
    try:
        row = redeliver(sess, current_tenant().id, did) if did is not None else None
    except DeliveryStateError as exc:
        sess.rollback()
        flash(f"Not redelivered: {exc}.", "info")
        return redirect(url_for("pages.job_page", job_id=str(job.id)) + "#webhooks")
    if row is None or row.job_id != job.id:
        sess.rollback()
        abort(404, description="There is no such webhook for this job in your account.")
    sess.commit()
    try:
        enqueue_webhooks(resources().celery)
    except Exception:
        log.exception("could not enqueue webhook delivery; the sweeper sends it")
    flash(f"Redelivering webhook {row.webhook_id} to {row.url}.", "info")
    return redirect(url_for("pages.job_page", job_id=str(job.id)) + "#webhooks")


# --- downloads -------------------------------------------------------------------------------------------


def _session_still_live() -> Callable[[Session], bool]:
    """For a streamed download: is this request's page session still live? (Asked between chunks, after the
    request has returned, so the session's id and the settings are bound now.)"""
    session_id: uuid.UUID = g.page_session_id
    max_s = settings().session_max_s
    return lambda db: page_session_is_live(db, session_id, max_s=max_s)


def _download(job: Job, body: Iterator[str], mimetype: str, filename: str) -> Response:
    """A streamed download holding one of the tenant's export slots (ExportsBusy, a 429 page, when none is
    free: web/export_slots.py)."""
    return export_response(
        body, mimetype, job_status=job.status, disposition=f'attachment; filename="{filename}"'
    )


@pages.get("/jobs/<job_id>/results.ndjson")
def results_ndjson(job_id: str) -> Response:
    job = _items_or_410(_job_or_404(job_id))
    iterator = RESULT_ITERATORS.get(job.kind)
    if iterator is None:
        abort(404, description=f"{job.kind} is not a job kind this version knows.")
    body = stream_job(resources().sessions, job.id, iterator, ndjson_lines, allowed=_session_still_live())
    return _download(job, body, NDJSON_MIMETYPE, f"factgate-{job.id}-results.ndjson")


@pages.get("/jobs/<job_id>/results.csv")
def results_csv(job_id: str) -> Response:
    job = _items_or_410(_job_or_404(job_id))
    iterator = RESULT_ITERATORS.get(job.kind)
    render = CSV_RENDERERS.get(job.kind)
    if iterator is None or render is None:
        abort(404, description=f"{job.kind} is not a job kind this version knows.")
    body = stream_job(resources().sessions, job.id, iterator, render, allowed=_session_still_live())
    return _download(job, body, "text/csv", f"factgate-{job.id}-results.csv")


def report_stylesheet() -> str:
    """The report's CSS, read at render time so the downloaded file matches the deployed styles."""
    css = (STATIC / "app.css").read_text(encoding="utf-8")
    if "</" in css:  # it is inlined into a <style> element
        raise RuntimeError("app.css must not contain '</'")
    return css


@pages.get("/jobs/<job_id>/report.html")
def report_file(job_id: str) -> Response:
    """The report as one self-contained HTML file: inline CSS, no script, the same escaping and links.

    Streamed with its own session (a claims report holds every claim), like the results exports.
    """
    job = _items_or_410(_job_or_404(job_id))
    css = report_stylesheet()
    jid = job.id
    sessions = resources().sessions
    template = current_app.jinja_env.get_template("report_file.html")
    csp = report_csp(css)
    retention = Retention.of(settings())

    def generate() -> Iterator[str]:
        # No app context here: the report templates use no url_for, request or session.
        with sessions() as stream_session:
            stream_job_row = stream_session.get(Job, jid)
            if stream_job_row is None:
                return
            view = job_view(stream_session, stream_job_row, retention=retention)
            report = report_context(stream_session, stream_job_row, {}, interactive=False)
            yield from template.generate(
                view=view,
                job=stream_job_row,
                report=report,
                css=Markup(css),  # noqa: S704 - our stylesheet, checked for '</'
                csp=csp,
            )

    resp = _download(job, generate(), "text/html", f"factgate-{job.id}-report.html")
    resp.headers["Content-Security-Policy"] = csp
    return resp


# --- usage -----------------------------------------------------------------------------------------------


@pages.get("/usage")
def usage() -> tuple[str, int]:
    page, status = usage_page(db_session(), current_tenant().id, request.args, today=datetime.now(UTC).date())
    return render_template("usage.html", page=page), status


# --- support ---------------------------------------------------------------------------------------------


@pages.get("/requests")
def requests_lookup() -> tuple[str, int]:
    request_id = (request.args.get("id") or "").strip()[:MAX_REQUEST_ID_CHARS]
    found = lookup_request(db_session(), current_tenant().id, request_id) if request_id else []
    status = 404 if request_id and not found else 200
    return render_template("requests.html", request_id=request_id, found=found), status


# --- errors ----------------------------------------------------------------------------------------------

ERROR_TITLES = {
    400: "Bad request",
    401: "Not signed in",
    403: "Forbidden",
    404: "Not found",
    405: "Not allowed",
}


@pages.errorhandler(CSRFError)
def _csrf_error(exc: CSRFError) -> tuple[str, int]:
    message = "The form had expired or did not come from this site. Reload the page and try again."
    return render_template("error.html", code=400, title="Form not accepted", message=message), 400


@pages.errorhandler(ExportsBusy)
def _exports_busy(exc: ExportsBusy) -> tuple[str, int, dict[str, str]]:
    page = render_template("error.html", code=429, title="Too many downloads at once", message=f"{exc}.")
    return page, 429, {"Retry-After": str(exc.retry_after_s)}


@pages.errorhandler(HTTPException)
def _http_error(exc: HTTPException) -> BaseResponse | tuple[str, int]:
    code = exc.code or 500
    if code < 400:
        return exc.get_response()
    title = ERROR_TITLES.get(code, exc.name)
    message = exc.description if code == 404 and exc.description else title
    return render_template("error.html", code=code, title=title, message=message), code


@pages.errorhandler(Exception)
def _unexpected(exc: Exception) -> BaseResponse | tuple[str, int, dict[str, str]] | tuple[str, int]:
    outage = outage_error(exc)
    if outage is not None:
        # The database is restarting (or Redis is away): a page that says so and when to reload, with the
        # same Retry-After as the API; the progress poll gets the API's JSON and simply polls again later.
        if request.endpoint in JSON_ENDPOINTS:
            return render(outage)
        message = (
            "factgate cannot reach its database or queue for the moment, usually because it is being "
            "restarted. Reload this page in a few seconds; if you had sent a form, look at your jobs before "
            "sending it again."
        )
        page = render_template("error.html", code=503, title="Temporarily unavailable", message=message)
        return page, 503, outage.headers
    log.exception("unhandled error on %s %s", request.method, request.path)
    message = "Something went wrong on our side; the server log has the details."
    return render_template("error.html", code=500, title="Server error", message=message), 500
