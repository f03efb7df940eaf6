"""The HTML report file of a local job: the job page's own downloadable report, saved to disk.

The pages blueprint renders `/jobs/<id>/report.html` (one self-contained file: inline CSS, no script,
a simulator banner when the simulator answered). Locally we ask the in-process app for it as the
CLI's tenant — a browser session is set on the test client, no sign-in form — so the file is exactly
what a user downloads from the job page.
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
    from web.pages import SESSION_TENANT

    if target.app is None or target.tenant_id is None:
        raise CliError("an HTML report file can only be written for a local job; open the job page instead")
    out = (path or default_report_path(target, job_id)).resolve()
    with target.app.test_client() as browser:
        with browser.session_transaction() as session:
            session[SESSION_TENANT] = str(target.tenant_id)
        response = browser.get(f"/jobs/{job_id}/report.html")
        if response.status_code != 200:
            raise CliError(f"could not render the report of job {job_id} (HTTP {response.status_code})")
        body = response.get_data()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(body)
    except OSError as exc:
        raise CliError(f"cannot write the report to {out}: {exc.strerror or exc}") from None
    return out
