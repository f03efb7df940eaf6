"""Errors gunicorn writes before the app runs come out in the API's JSON shape."""

from __future__ import annotations

import json

from web.raw_errors import install_json_errors, json_error_response, write_json_error


def test_a_raw_414_is_a_complete_json_response() -> None:
    raw = json_error_response(414, "URI Too Long")
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    assert lines[0] == "HTTP/1.1 414 URI Too Long"
    assert "Content-Type: application/json" in lines and f"Content-Length: {len(body)}" in lines
    assert json.loads(body) == {
        "error": {
            "type": "uri_too_long_error",
            "message": "the request line (method and URL) is too long; send long inputs in the body",
        }
    }


def test_other_statuses_map_to_known_types() -> None:
    for status, type_ in (
        (431, "header_fields_too_large_error"),
        (400, "invalid_request_error"),
        (500, "server_error"),
    ):
        body = json_error_response(status, "Reason").partition(b"\r\n\r\n")[2]
        assert json.loads(body)["error"]["type"] == type_


def test_installing_replaces_gunicorns_html_writer() -> None:
    from gunicorn import util

    original = util.write_error
    try:
        install_json_errors()
        assert util.write_error is write_json_error
    finally:
        util.write_error = original


def test_a_gunicorn_worker_freezes_its_start_up_objects_once_the_app_is_loaded() -> None:
    # web/gunicorn_conf.py:post_worker_init, in a child process (freezing is for the life of a process).
    import subprocess
    import sys

    child = (
        "import gc, web.gunicorn_conf as conf; before = gc.get_freeze_count(); "
        "conf.post_worker_init(None); print(before, gc.get_freeze_count())"
    )
    before, after = subprocess.run(
        [sys.executable, "-c", child], capture_output=True, text=True, check=True
    ).stdout.split()
    assert int(before) == 0 and int(after) > 10_000
