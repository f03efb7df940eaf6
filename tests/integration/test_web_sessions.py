"""web/session.py: a poll of a running job (its status, its page's progress) gets a database session in
autocommit on Postgres (no BEGIN before its reads, no ROLLBACK after them); every other request keeps its
transaction (a report's server-side cursor needs one)."""

# Fixtures are imported from web_fixtures, so their names reappear as parameters.
# ruff: noqa: F811

from __future__ import annotations

import pytest

from tests.integration.web_fixtures import (  # noqa: F401 - fixtures
    Caller,
    WebEnv,
    caller,
    memory_celery,
    web,
    web_settings,
)
from web.session import db_session

pytestmark = pytest.mark.integration


def _autocommit(web: WebEnv, path: str, method: str = "GET") -> bool:
    with web.app.test_request_context(path, method=method):
        session = db_session()
        try:
            return bool(session.connection().connection.driver_connection.autocommit)
        finally:
            session.close()


JOB = "/v1/jobs/00000000-0000-0000-0000-000000000000"


@pytest.mark.parametrize("path", [JOB, "/jobs/00000000-0000-0000-0000-000000000000/progress.json"])
@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_a_poll_runs_in_autocommit(web: WebEnv, path: str, method: str) -> None:
    assert _autocommit(web, path, method) is True


@pytest.mark.parametrize(
    ("path", "method"),
    [
        (JOB, "DELETE"),
        ("/v1/jobs", "POST"),
        ("/v1/jobs", "GET"),
        (JOB + "/scorecard", "GET"),
        ("/jobs", "GET"),
    ],
)
def test_any_other_request_keeps_its_transaction(web: WebEnv, path: str, method: str) -> None:
    assert _autocommit(web, path, method) is False


def test_the_pool_hands_a_transactional_connection_back_after_a_read(web: WebEnv, caller: Caller) -> None:
    # The read's connection goes back to the pool out of autocommit: the next writer's rollback holds.
    assert web.client.get(JOB, headers=caller.headers).status_code == 404
    with web.sessions() as session:
        assert session.connection().connection.driver_connection.autocommit is False
