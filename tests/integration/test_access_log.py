"""The web process's access log, as the Procfile, the Dockerfile and compose turn it on (gunicorn with
web/gunicorn_conf.py and `--access-logfile`): no query string reaches it — webhook URLs with their tokens
travel in them — unless FACTGATE_ACCESS_LOG_QUERY=true keeps them."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest

from tests.integration.test_cli_helpers import ROOT, background, clean_env, free_port, wait_for

pytestmark = pytest.mark.integration

SECRET = "whk-token-0123456789"
ASKED = f"/healthz?webhook_url=https%3A%2F%2Fhooks.example%2Fh%3Ftoken%3D{SECRET}&token={SECRET}"


def access_lines(tmp_path: Path, **env: str) -> str:
    port = free_port()
    access, log = tmp_path / "access.log", tmp_path / "gunicorn.log"
    argv = [sys.executable, "-m", "gunicorn", "--config", "python:web.gunicorn_conf",
            "--bind", f"127.0.0.1:{port}", "--workers", "1", "--threads", "2",
            "--access-logfile", str(access), "web.app:create_app()"]  # fmt: skip
    environment = clean_env(FACTGATE_INSTANCE_PATH=str(tmp_path / "instance"), **env)
    with background(argv, environment, log, cwd=ROOT):
        base = f"http://127.0.0.1:{port}"

        def up() -> bool:
            try:
                return httpx.get(f"{base}/healthz").status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(up, timeout=60, what="gunicorn", log=log)
        referer = f"{base}/jobs?webhook_url=https://hooks.example/h?token={SECRET}"
        assert httpx.get(base + ASKED, headers={"Referer": referer}).status_code == 200
        wait_for(lambda: "webhook_url" in access.read_text() or "/healthz?" in access.read_text(),
                 timeout=30, what="the access line", log=log)  # fmt: skip
    return access.read_text()


def test_the_access_log_holds_no_query_strings(tmp_path: Path) -> None:
    text = access_lines(tmp_path)
    [line] = [x for x in text.splitlines() if "/healthz?" in x]
    assert '"GET /healthz?[query] HTTP/1.1" 200' in line
    assert '"http://127.0.0.1:' in line and "/jobs?[query]" in line  # the Referer, cut too
    assert SECRET not in text and "webhook_url" not in text


def test_a_setting_keeps_query_strings_in_the_access_log(tmp_path: Path) -> None:
    text = access_lines(tmp_path, FACTGATE_ACCESS_LOG_QUERY="true")
    assert ASKED in text and SECRET in text
