"""Headless Chromium (Debian's package, installed by scripts/browser.sh) against the app in a thread.

Playwright drives the browser at /usr/bin/chromium; `playwright install` is never used. Without the
browser the tests skip on a laptop and FAIL under CI=true, like the other service-backed tests.

One browser is launched per test process, on first use, and closed when the session ends
(tests/e2e/conftest.py); every `chromium()` gets a fresh context of its own (no cookies, storage or cache
shared with another test) and its own page.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from werkzeug.serving import WSGIRequestHandler, make_server

from jobs.tenancy import create_token
from models import session_scope
from web.app import create_app
from workers.embedded import EmbeddedWorker

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = ROOT / "test-artifacts"
SCREENSHOTS = ROOT / "docs" / "screenshots"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1360, "height": 900}


def require_chromium() -> str:
    if CHROMIUM.exists():
        return str(CHROMIUM)
    message = f"{CHROMIUM} is missing; run scripts/browser.sh (installs Debian's chromium)"
    if os.environ.get("CI") == "true":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)
    raise AssertionError("unreachable")


_BODY = "factgate.e2e.body"


class _ClosingHandler(WSGIRequestHandler):
    """werkzeug's development server, closing the response when the browser drops the connection.

    Why: its `execute` drains the request socket in a `finally` before it calls the response's `close()`,
    so a client that hangs up meanwhile (Chromium giving up on a favicon it no longer wants) skips the
    close; the response's open file is left to the garbage collector, and its ResourceWarning fails
    whichever test it lands in (filterwarnings = error), as `test_sign_in_with_the_keyboard_alone` once
    did. The app's own responses are closed by every production server (gunicorn, waitress).
    """

    def connection_dropped(self, error: BaseException, environ: Any = None) -> None:
        body = environ.pop(_BODY, None) if environ is not None else None
        close = getattr(body, "close", None)
        if close is not None:
            close()  # a second close (the normal path ran it already) does nothing


def _keeping_body(app: Flask) -> Any:
    """The app, leaving each response in its environ for `_ClosingHandler`."""

    def wsgi(environ: dict[str, Any], start_response: Any) -> Any:
        body = app(environ, start_response)
        environ[_BODY] = body
        return body

    return wsgi


@contextmanager
def serve(app: Flask) -> Iterator[str]:
    """The app on 127.0.0.1 (a free port) in a thread; yields its base URL."""
    server = make_server("127.0.0.1", 0, _keeping_body(app), threaded=True, request_handler=_ClosingHandler)
    thread = threading.Thread(target=server.serve_forever, name="e2e-server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@dataclass
class PageWatch:
    """What a page did that it should not: dialogs opened, errors thrown, CSP violations logged."""

    dialogs: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)

    def attach(self, page: Any) -> None:
        def on_dialog(dialog: Any) -> None:
            self.dialogs.append(dialog.message)
            dialog.dismiss()

        page.on("dialog", on_dialog)
        page.on("pageerror", lambda exc: self.page_errors.append(str(exc)))
        page.on("console", lambda msg: self.console_errors.append(msg.text) if msg.type == "error" else None)

    @property
    def csp_violations(self) -> list[str]:
        return [m for m in self.console_errors if re.search(r"Content Security Policy", m, re.I)]


_shared: dict[str, Any] = {}  # "playwright" and "browser", launched on first use


def _browser() -> Any:
    """This process's browser (launched once; again if it went away)."""
    browser = _shared.get("browser")
    if browser is not None and browser.is_connected():
        return browser
    close_browser()
    from playwright.sync_api import sync_playwright

    executable = require_chromium()
    pw = sync_playwright().start()
    _shared["playwright"] = pw
    _shared["browser"] = pw.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_ARGS)
    return _shared["browser"]


def close_browser() -> None:
    """Close the shared browser and stop Playwright, if they were started."""
    browser = _shared.pop("browser", None)
    pw = _shared.pop("playwright", None)
    try:
        if browser is not None and browser.is_connected():
            browser.close()
    finally:
        if pw is not None:
            pw.stop()


@contextmanager
def chromium(*, bypass_csp: bool = False, javascript: bool = True) -> Iterator[tuple[Any, PageWatch]]:
    """A fresh browser context and page (with a PageWatch attached), in the process's shared browser;
    `javascript=False` is a browser with script turned off (progressive enhancement)."""
    context = _browser().new_context(
        viewport=VIEWPORT, bypass_csp=bypass_csp, device_scale_factor=1, java_script_enabled=javascript
    )
    try:
        page = context.new_page()
        page.set_default_timeout(30_000)
        watch = PageWatch()
        watch.attach(page)
        yield page, watch
    finally:
        context.close()


def sign_in(page: Any, base: str, token: str) -> None:
    page.goto(f"{base}/sign-in")
    page.fill("#token", token)
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r".*/jobs$"))


def save_screenshot(
    page: Any, name: str, *, full_page: bool = True, docs: bool = False, docs_height: int = 2400
) -> Path:
    """The whole page into test-artifacts/; for `docs` pictures with FACTGATE_UPDATE_SCREENSHOTS=1 also
    its first `docs_height` pixels into docs/screenshots/ (the README's, kept to a readable size)."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    if docs and os.environ.get("FACTGATE_UPDATE_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        height = int(page.evaluate("document.documentElement.scrollHeight"))
        clip = {"x": 0, "y": 0, "width": VIEWPORT["width"], "height": min(height, docs_height)}
        page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True, clip=clip)
    return path


@contextmanager
def embedded_app(instance: Path, tenant: str) -> Iterator[tuple[Flask, str]]:
    """The embedded app (SQLite, in-memory broker, the simulator) with its worker running, and a token of
    `tenant`: a real job runs to its end with no service at all."""
    app = create_app(
        {
            "database_url": None,
            "redis_url": None,
            "perplexity_api_key": None,
            "instance_path": instance,
            "sweep_interval_s": 0.5,
        }
    )
    res = app.extensions["factgate"]
    with session_scope(res.sessions) as session:
        token = create_token(session, tenant).token
    worker = EmbeddedWorker(res.settings).start()
    try:
        yield app, token
    finally:
        worker.stop(timeout=10)
        res.engine.dispose()
