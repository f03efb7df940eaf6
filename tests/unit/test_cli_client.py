"""The CLI's API client and error handling: every failure is one `error:` line and a meaningful exit code.

The client runs against `httpx.MockTransport` servers that answer the way the API does; the commands run
through click's CliRunner (no worker, no database: these are the paths that fail before either).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import click
import httpx
import pytest
from click.testing import CliRunner

from cli.client import ApiClient
from cli.errors import EXIT_INPUT, EXIT_RUNTIME, CliError, FactgateGroup, InputError
from cli.main import main

Handler = Callable[[httpx.Request], httpx.Response]


def client(handler: Handler) -> ApiClient:
    return ApiClient("http://fg.test", "tok-123", transport=httpx.MockTransport(handler))


def api_error(status: int, message: str, **extra: object) -> httpx.Response:
    return httpx.Response(status, json={"error": {"type": "x", "message": message, **extra}})


def test_submission_goes_as_ndjson_with_options_in_the_query_and_the_token() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(202, json={"id": "j1", "kind": "claims", "status": "queued"})

    job = client(handler).submit_ndjson(
        b'{"id":"a","claim":"x"}\n',
        kind="claims",
        options={"mode": "both", "model": None},
        idempotency_key="k1",
    )
    assert job["id"] == "j1"
    (req,) = seen
    assert req.method == "POST" and req.url.path == "/v1/jobs"
    assert dict(req.url.params) == {"kind": "claims", "mode": "both"}  # None options are not sent
    assert req.headers["Content-Type"] == "application/x-ndjson"
    assert req.headers["Authorization"] == "Bearer tok-123"
    assert req.headers["Idempotency-Key"] == "k1"
    assert req.content == b'{"id":"a","claim":"x"}\n'


def test_a_bad_file_names_the_file_the_line_and_the_field() -> None:
    first = 'line 3: field "claim": is required'
    errors = [
        {"line": 3, "field": "claim", "message": first},
        {"line": 9, "message": "line 9: is not valid JSON"},
    ]

    def handler(_request: httpx.Request) -> httpx.Response:
        return api_error(400, f"2 problems in the batch, nothing was stored; first: {first}", errors=errors)

    with pytest.raises(InputError) as err:
        client(handler).submit_ndjson(b"x", kind="claims", options={}, input_name="bad.jsonl")
    assert err.value.exit_code == EXIT_INPUT
    assert (
        err.value.message
        == 'bad.jsonl line 3: field "claim": is required (2 problems in all; nothing was stored)'
    )


def test_a_bad_option_is_an_input_error_with_the_server_message() -> None:
    with pytest.raises(InputError, match='option "mode": must be one of'):
        client(lambda _r: api_error(400, 'option "mode": must be one of ungrounded, grounded, both')).job("j")


def test_a_rejected_token_says_how_to_get_one() -> None:
    with pytest.raises(InputError) as err:
        client(lambda _r: api_error(401, "invalid or revoked token")).job("j1")
    assert "rejected the token (invalid or revoked token)" in err.value.message
    assert "factgate tokens create" in err.value.message


def test_an_unknown_job_is_an_input_error() -> None:
    with pytest.raises(InputError, match="no such job"):
        client(lambda _r: api_error(404, "no job with that id")).job("nope")


def test_a_conflict_and_a_server_error_are_runtime_errors() -> None:
    with pytest.raises(CliError) as conflict:
        client(
            lambda _r: api_error(
                409, "job is completed; only a validating, queued or running job can be cancelled"
            )
        ).cancel("j")
    assert (
        conflict.value.exit_code == EXIT_RUNTIME
        and "only a validating, queued or running job" in conflict.value.message
    )
    with pytest.raises(CliError) as boom:
        client(lambda _r: httpx.Response(502, text="<html>bad gateway</html>")).job("j")
    assert boom.value.exit_code == EXIT_RUNTIME and "HTTP 502" in boom.value.message


def test_an_unreachable_server_is_one_line() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    with pytest.raises(CliError) as err:
        client(refuse).job("j")
    assert err.value.message == "cannot reach factgate at http://fg.test: [Errno 111] Connection refused"


def test_results_are_parsed_lines() -> None:
    body = b'{"custom_id":"a","results":{}}\n\n{"custom_id":"b","results":{}}\n{"_end":{"count":2}}\n'

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/jobs/j1/results" and request.url.params["format"] == "ndjson"
        return httpx.Response(200, content=body)

    assert [r["custom_id"] for r in client(handler).results("j1")] == ["a", "b"]


def test_results_cut_short_are_an_error() -> None:
    """A stream without its end line was truncated: never a shorter result."""
    body = b'{"custom_id":"a","results":{}}\n'
    with pytest.raises(CliError, match="ended early"):
        client(lambda _r: httpx.Response(200, content=body)).results("j1")


def test_errors_never_show_the_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERPLEXITY_API_KEY", "pplx-secret-key-1234567890")
    err = CliError("upstream said: bad key pplx-secret-key-1234567890\nsecond line")
    assert "pplx-secret" not in err.message and "\n" not in err.message
    assert err.message == "upstream said: bad key [redacted] second line"


# --- the command line: one line, exit code -------------------------------------------------------------


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args), env=env)
    return result.exit_code, result.stdout, result.stderr


def test_usage_errors_are_one_line_with_exit_2() -> None:
    code, out, err = run("check", "examples/claims.jsonl", "--mode", "sideways")
    assert code == EXIT_INPUT and out == ""
    assert err.count("\n") == 1 and err.startswith("error: Invalid value for '--mode'")
    assert "(see `main check --help`)" in err or "--help" in err


def test_a_missing_file_is_one_line_with_exit_2(tmp_path: Path) -> None:
    code, _out, err = run("check", str(tmp_path / "missing.jsonl"), env={"FACTGATE_URL": ""})
    assert code == EXIT_INPUT
    assert err.strip() == f"error: cannot read {tmp_path / 'missing.jsonl'}: No such file or directory"


def test_check_needs_a_file_or_resume() -> None:
    code, _out, err = run("check")
    assert code == EXIT_INPUT and "give a claims FILE" in err


def test_a_server_url_must_be_http(tmp_path: Path) -> None:
    f = tmp_path / "c.jsonl"
    f.write_text('{"id":"a","claim":"x"}\n')
    code, _out, err = run("check", str(f), "--server", "ftp://x", "--token", "t")
    assert code == EXIT_INPUT and "must be an http:// or https:// URL" in err


def test_a_server_without_a_token_is_an_input_error(tmp_path: Path) -> None:
    code, _out, err = run("status", "some-job", "--server", "http://127.0.0.1:9", env={"FACTGATE_TOKEN": ""})
    assert code == EXIT_INPUT
    assert err.strip().startswith("error: talking to http://127.0.0.1:9 needs a token")


def test_an_unreachable_server_exits_1_without_a_traceback() -> None:
    # Port 9 (discard) is closed on loopback: the connection is refused at once.
    code, _out, err = run("status", "j1", "--server", "http://127.0.0.1:9", "--token", "t")
    assert code == EXIT_RUNTIME
    assert err.count("\n") == 1 and err.startswith("error: cannot reach factgate at http://127.0.0.1:9")
    assert "Traceback" not in err


def test_worker_and_beat_need_redis(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("worker", "beat"):
        code, _out, err = run(name, env={"REDIS_URL": "", "DATABASE_URL": ""})
        assert code == EXIT_INPUT
        assert f"factgate {name} needs REDIS_URL" in err


def test_submit_without_a_server_in_embedded_mode_points_at_check(tmp_path: Path) -> None:
    f = tmp_path / "c.jsonl"
    f.write_text('{"id":"a","claim":"x"}\n')
    env = {
        "FACTGATE_URL": "",
        "REDIS_URL": "",
        "DATABASE_URL": "",
        "FACTGATE_INSTANCE_PATH": str(tmp_path / "i"),
    }
    code, _out, err = run("submit", str(f), env=env)
    assert code == EXIT_INPUT and "use `factgate check" in err


def test_submit_rejects_a_malformed_option(tmp_path: Path) -> None:
    f = tmp_path / "c.jsonl"
    f.write_text("{}\n")
    code, _out, err = run(
        "submit", str(f), "--option", "budget_usd", "--server", "http://x.test", "--token", "t"
    )
    assert code == EXIT_INPUT and "--option must look like NAME=VALUE" in err


def _group_with(fn: Callable[[], None]) -> click.Group:
    @click.group(cls=FactgateGroup)
    def grp() -> None:
        pass

    grp.command("boom")(fn)
    return grp


def test_an_unexpected_exception_is_one_line_and_exit_1() -> None:
    def boom() -> None:
        raise ZeroDivisionError("division by zero")

    result = CliRunner().invoke(_group_with(boom), ["boom"])
    assert result.exit_code == EXIT_RUNTIME
    assert result.stderr == (
        "error: unexpected ZeroDivisionError: division by zero (set FACTGATE_DEBUG=1 to see the traceback)\n"
    )


def test_ctrl_c_exits_130() -> None:
    def interrupted() -> None:
        raise KeyboardInterrupt

    result = CliRunner().invoke(_group_with(interrupted), ["boom"])
    assert result.exit_code == 130 and result.stderr.strip() == "interrupted"


def test_help_and_version_still_exit_0() -> None:
    assert run("--help")[0] == 0
    code, out, _err = run("--version")
    assert code == 0 and "factgate" in out
    code, out, _err = run("check", "--help")
    assert code == 0 and "--mode" in out and "--server" in out and "--resume" in out


def test_every_command_of_the_issue_is_there() -> None:
    _code, out, _err = run("--help")
    commands = {line.split()[0] for line in out.split("Commands:", 1)[1].splitlines() if line.strip()}
    assert {"check", "ask", "quote", "submit", "status", "results", "cancel", "serve", "worker", "beat",
            "simulator", "db", "tokens"} <= commands  # fmt: skip


def test_the_example_files_are_valid_batches() -> None:
    from checks import claims as claim_rules
    from checks import questions as question_rules

    examples = Path(__file__).resolve().parents[2] / "examples"
    claims = claim_rules.parse_ndjson_lines(
        (examples / "claims.jsonl").read_bytes().splitlines(), max_rows=100, max_claim_bytes=4096
    )
    assert len(claims) == 24
    for name, count in (("answer-questions.jsonl", 5), ("quote-questions.jsonl", 10)):
        rows = question_rules.parse_question_lines((examples / name).read_bytes().splitlines())
        assert len(rows) == count


def test_a_503_is_asked_again_after_its_retry_after_then_the_answer_is_used() -> None:
    """A Postgres restart answers 503 with Retry-After for a few seconds: a poll rides through it."""
    answers = [
        httpx.Response(503, headers={"Retry-After": "3"}, json={"error": {"message": "db down"}}),
        httpx.Response(503, headers={"Retry-After": "99"}, json={"error": {"message": "db down"}}),
        httpx.Response(200, json={"id": "j1", "status": "in_progress"}),
    ]
    seen: list[str] = []
    slept: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        return answers.pop(0)

    api = ApiClient("http://fg.test", "t", transport=httpx.MockTransport(handler), sleep=slept.append)
    assert api.job("j1")["status"] == "in_progress"
    assert seen == ["/v1/jobs/j1"] * 3
    assert slept == [3.0, 10.0]  # as told, and never longer than the cap


def test_a_503_that_outlasts_the_budget_is_one_error_line() -> None:
    def handler(_request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, headers={"Retry-After": "0"}, json={"error": {"message": "db down"}})

    api = ApiClient(
        "http://fg.test",
        "t",
        transport=httpx.MockTransport(handler),
        unavailable_budget_s=0.0,
        sleep=lambda s: None,
    )
    with pytest.raises(CliError, match="HTTP 503: db down"):
        api.job("j1")


def test_a_submission_is_sent_again_on_503_only_with_an_idempotency_key() -> None:
    calls: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.headers.get("Idempotency-Key"))
        if len(calls) % 2 == 1:
            return httpx.Response(503, headers={"Retry-After": "0"}, json={"error": {"message": "db down"}})
        return httpx.Response(202, json={"id": "j1", "status": "queued"})

    api = ApiClient("http://fg.test", "t", transport=httpx.MockTransport(handler), sleep=lambda s: None)
    assert api.submit_ndjson(b'{"claim":"x"}\n', kind="claims", options={}, idempotency_key="k")["id"] == "j1"
    assert calls == ["k", "k"]
    calls.clear()
    with pytest.raises(CliError, match="503"):  # without a key a repeat could store the job twice
        api.submit_ndjson(b'{"claim":"x"}\n', kind="claims", options={})
    assert calls == [None]


def test_the_results_stream_is_opened_again_after_a_503() -> None:
    answers = [
        httpx.Response(503, headers={"Retry-After": "1"}, json={"error": {"message": "db down"}}),
        httpx.Response(200, content=b'{"id":"a"}\n{"_end":{"rows":1}}\n'),
    ]

    def handler(_request: httpx.Request) -> httpx.Response:
        return answers.pop(0)

    api = ApiClient("http://fg.test", "t", transport=httpx.MockTransport(handler), sleep=lambda s: None)
    assert api.results("j1") == [{"id": "a"}]
