"""The HTML report file of a local job: the job page's own downloadable report, saved to disk.

The pages blueprint renders `/jobs/<id>/report.html` (one self-contained file: inline CSS, no script,
a simulator banner when the simulator answered). Locally we ask the in-process app for it as the
CLI's tenant — a page session is opened with the CLI's own token and put on the test client's cookie,
no sign-in form, and ended once the file is read — so the file is exactly what a user downloads from
the job page.
"""

from __future__ import annotations

from pathlib import Path

from cli.errors import CliError
from cli.target import Target

REPORTS_DIR = "reports"


def default_report_path(target: Target, job_id: str) -> Path:
    assert target.settings is not None
    return (target.settings.instance_path / REPORTS_DIR / f"factgate-{job_id}-report.html").resolve()


def write_local_report(target: Target, job_id: str, path: Path | None = None) -> Path:
    """Render the job's report with the app in this process and write it; returns the absolute path."""
    from jobs.sessions import end_session, live_token, open_session
    from models import session_scope
    from web.page_session import SESSION_KEY
    from web.session import EXTENSION

    if target.app is None or target.tenant_id is None or target.token is None:
        raise CliError("an HTML report file can only be written for a local job; open the job page instead")
    out = (path or default_report_path(target, job_id)).resolve()
    sessions = target.app.extensions[EXTENSION].sessions
    with session_scope(sessions) as db:
        credential = live_token(db, target.token)
        if credential is None:
            raise CliError("the CLI's local token has been revoked; run the command again for a new one")
        opened = open_session(db, credential.token, user_agent="factgate-cli report")
    try:
        with target.app.test_client() as browser:
            with browser.session_transaction() as cookie:
                cookie[SESSION_KEY] = opened.secret
            response = browser.get(f"/jobs/{job_id}/report.html")
            if response.status_code != 200:
                raise CliError(f"could not render the report of job {job_id} (HTTP {response.status_code})")
            body = response.get_data()
    finally:
        with session_scope(sessions) as db:
            end_session(db, opened.secret)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(body)
    except OSError as exc:
        raise CliError(f"cannot write the report to {out}: {exc.strerror or exc}") from None
    return out
