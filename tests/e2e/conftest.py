"""The end-to-end tests share one browser per test process; it is closed when the session ends."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.browser import close_browser


@pytest.fixture(scope="session", autouse=True)
def _shared_browser_closed() -> Iterator[None]:
    yield
    close_browser()
