"""The `factgate` commands in embedded mode, as a user runs them: no DATABASE_URL, no REDIS_URL, no key, an
instance folder of its own. Needs no service.

Most commands run in this process through click's CliRunner (`cli`), with exactly the environment a user's
shell would give them; the installed script runs in a subprocess where a process is the point: a check that
another process cancels, Ctrl-C, `factgate serve` and `factgate simulator`.
"""

from __future__ import annotations

import json
import re
import signal
import sqlite3
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.integration.test_cli_helpers import (
    EXAMPLE_CLAIMS,
    FACTGATE,
    as_typed,
    background,
    clean_env,
    cli,
    free_port,
    ignores_sigint,
    kill_group,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SIX = [json.loads(line) for line in EXAMPLE_CLAIMS.read_text().splitlines()[:6]]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return clean_env(FACTGATE_INSTANCE_PATH=str(tmp_path / "instance"))


@pytest.fixture
def six_claims(tmp_path: Path) -> Path:
    path = tmp_path / "six.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in SIX))
    return path


def job_count(env: dict[str, str]) -> int:
    db = Path(env["FACTGATE_INSTANCE_PATH"]) / "factgate.db"
    with sqlite3.connect(db) as conn:
        (n,) = conn.execute("select count(*) from jobs").fetchone()
    return int(n)


def done_count(env: dict[str, str]) -> int:
    """Items done so far; 0 until the database and its tables exist."""
    db = Path(env["FACTGATE_INSTANCE_PATH"]) / "factgate.db"
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(db) as conn:
            (n,) = conn.execute("select count(*) from items where status = 'done'").fetchone()
    except sqlite3.OperationalError:  # tables not created yet, or the writer holds the lock
        return 0
    return int(n)


def job_id_of(stdout: str) -> str:
    line = next(line for line in stdout.splitlines() if line.startswith("job "))
    return line.split()[1]


def test_check_prints_the_table_scorecard_job_and_report(env: dict[str, str], six_claims: Path) -> None:
    run = cli("check", str(six_claims), env=env)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].split() == ["id", "kind", "label", "p_grounded", "verdict_grounded"]
    rows = {line.split()[0]: line.split() for line in lines[1:7]}
    assert set(rows) == {r["id"] for r in SIX}
    assert rows["s01"][1:] == ["stable", "true", rows["s01"][3], "supported"]
    assert rows["s05"][-1] == "contradicted"
    assert "claim text in the search query: 6 of 6" in run.stdout
    scorecard = next(line for line in lines if line.startswith("grounded   correct"))
    assert scorecard.startswith("grounded   correct 6/6  wrong 0  review 0")
    assert any(line.strip().endswith("acceptance met") for line in lines)
    assert "job " in run.stdout and "completed: 6 of 6 requests done" in run.stdout
    report = Path(next(line for line in lines if line.startswith("report: ")).removeprefix("report: "))
    assert report.is_file() and report.is_absolute()
    html = report.read_text()
    assert "<html" in html.lower() and "s01" in html and "simulator" in html
    # Every output says the simulator answered.
    assert lines[-1] == "note: results come from the bundled simulator, not Perplexity"
    assert "the bundled simulator answers" in run.stderr


def test_a_bad_file_names_the_line_and_field_and_stores_nothing(env: dict[str, str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(SIX[0]) + "\n" + json.dumps({"id": "x2", "label": True}) + "\n")
    run = cli("check", str(bad), env=env)
    assert run.returncode == 2
    error_lines = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert error_lines == [f'error: {bad} line 2: field "claim": is required (nothing was stored)']
    assert "Traceback" not in run.stderr and run.stdout == ""
    assert job_count(env) == 0


def test_a_bad_option_is_one_line(env: dict[str, str], six_claims: Path) -> None:
    run = cli("check", str(six_claims), "--model", "gpt-nope", env=env)
    assert run.returncode == 2
    assert run.stderr.splitlines()[-1].startswith('error: option "model": unknown model')


def test_status_results_and_cancel_read_the_local_jobs(
    env: dict[str, str], six_claims: Path, tmp_path: Path
) -> None:
    check = cli("check", str(six_claims), "--mode", "both", env=env)
    assert check.returncode == 0, check.stderr
    job_id = job_id_of(check.stdout.split("\n\n")[-1])

    status = cli("status", job_id, env=env)
    assert status.returncode == 0
    assert status.stdout.startswith(f"job {job_id} claims completed: 12 of 12 requests done")
    as_json = json.loads(cli("status", job_id, "--json", env=env).stdout)
    assert as_json["id"] == job_id and as_json["simulated"] is True

    out = tmp_path / "results.ndjson"
    results = cli("results", job_id, "-o", str(out), env=env)
    assert results.returncode == 0 and f"wrote 6 lines to {out}, then the end line" in results.stderr
    *lines, end = [json.loads(line) for line in out.read_text().splitlines()]
    assert end == {"_end": {"count": 6, "after": None, "last_id": lines[-1]["custom_id"]}}
    assert [r["custom_id"] for r in lines] == [r["id"] for r in SIX]
    assert set(lines[0]["results"]) == {"ungrounded", "grounded"}
    csv = cli("results", job_id, "--format", "csv", env=env)
    assert csv.returncode == 0 and len(csv.stdout.strip().splitlines()) >= 7  # a header, then the claims

    cancel = cli("cancel", job_id, env=env)
    assert cancel.returncode == 1
    assert (
        cancel.stderr.strip()
        == "error: job is completed; only a validating, queued or running job can be cancelled"
    )

    missing = cli("status", "00000000-0000-0000-0000-000000000000", env=env)
    assert missing.returncode == 2 and missing.stderr.startswith("error: no such job")

    # Deleting an ended local job: gone at once (its rows purged on SQLite by the next purge).
    deleted = cli("jobs", "delete", job_id, env=env)
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout.strip() == f"job {job_id} deleted; its rows are purged in the background"
    gone = cli("status", job_id, env=env)
    assert gone.returncode == 2 and gone.stderr.startswith("error: no such job")
    again = cli("jobs", "delete", job_id, env=env)
    assert again.returncode == 2 and again.stderr.startswith("error: no such job")


def test_cancel_stops_a_running_local_job(env: dict[str, str], six_claims: Path) -> None:
    # A slow check (0.5 requests/s) is cancelled from a second process through the local API.
    check = subprocess.Popen(
        [FACTGATE, "check", str(six_claims), "--mode", "both"],
        env={**env, "FACTGATE_DECISIONS_RPS": "0.5", "FACTGATE_SWEEP_INTERVAL_S": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        wait_for(lambda: job_count(env) == 1, timeout=60, what="the job to be stored")
        db = Path(env["FACTGATE_INSTANCE_PATH"]) / "factgate.db"
        with sqlite3.connect(db) as conn:
            (job_id,) = conn.execute("select id from jobs").fetchone()
        jid = str(job_id)
        if len(jid) == 32:  # SQLite stores UUIDs as 32 hex digits
            jid = f"{jid[:8]}-{jid[8:12]}-{jid[12:16]}-{jid[16:20]}-{jid[20:]}"
        cancel = cli("cancel", jid, env=env)
        assert cancel.returncode == 0, cancel.stderr
        assert cancel.stdout.startswith(f"job {jid} claims cancell")
        out, err = check.communicate(timeout=120)
    finally:
        kill_group(check)
    # The running check sees the cancel, prints the partial table and says so.
    assert check.returncode == 1, f"stdout:\n{out}\nstderr:\n{err}"
    assert "cancelled" in out and "was cancelled; the results above are partial" in err


def test_ctrl_c_leaves_the_job_resumable(env: dict[str, str]) -> None:
    # 48 requests at 1/s take 48 s at the least. The interrupt is sent once a few items are done rather than
    # after a fixed sleep: on a busy machine the job could otherwise finish before the signal (it did once,
    # and once more at 2/s, when the suite shared the machine with an install). Only the first few items run
    # at this rate; the resume runs at the fixture's. The command runs as typed at a terminal (`as_typed`): a
    # suite started in a script's background once handed it an ignored SIGINT, and the job ran to its end.
    slow = {**env, "FACTGATE_DECISIONS_RPS": "1"}
    proc = subprocess.Popen(
        as_typed([FACTGATE, "check", str(EXAMPLE_CLAIMS), "--mode", "both"]),
        env=slow,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        wait_for(lambda: done_count(env) >= 2, timeout=90, what="a few items to be done")
        assert not ignores_sigint(proc.pid), "the command was started with SIGINT ignored"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        kill_group(proc)
    assert proc.returncode == 130, f"stderr: {err}\nstdout: {out}"
    assert "interrupted: job" in err and "Resume with: factgate check" in err
    resume = err.split("Resume with: ", 1)[1].split()
    assert resume[:2] == ["factgate", "check"] and "--resume" in resume
    assert "Traceback" not in err and out == "", err
    db = Path(env["FACTGATE_INSTANCE_PATH"]) / "factgate.db"
    with sqlite3.connect(db) as conn:
        (status,) = conn.execute("select status from jobs").fetchone()
        (running,) = conn.execute("select count(*) from items where status = 'running'").fetchone()
        (done,) = conn.execute("select count(*) from items where status = 'done'").fetchone()
    assert status == "in_progress"
    assert running == 0  # requests in flight finished before the process left
    assert 0 < done < 48

    again = cli(*resume[1:], env=env)
    assert again.returncode == 0, again.stderr
    assert "completed: 48 of 48 requests done" in again.stdout
    assert any(line.strip().endswith("acceptance met") for line in again.stdout.splitlines())


def test_ask_and_quote(env: dict[str, str]) -> None:
    quote = cli("quote", "How many bones are in the adult human body?", env=env)
    assert quote.returncode == 0, quote.stderr
    assert quote.stdout.startswith('question: How many bones are in the adult human body?\nquote: "')
    assert "206" in quote.stdout.splitlines()[1]
    assert "note: results come from the bundled simulator, not Perplexity" in quote.stdout

    ask = cli("ask", "What did the James Webb Space Telescope discover about exoplanet K2-18b?", env=env)
    assert ask.returncode == 0, ask.stderr
    sentences = [line for line in ask.stdout.splitlines() if line[:3].strip().rstrip(".").isdigit()]
    assert sentences and all("[" in s for s in sentences)
    assert any(line.startswith("sentences ") for line in ask.stdout.splitlines())
    assert "report: " in ask.stdout


def test_db_upgrade_and_tokens(env: dict[str, str]) -> None:
    assert cli("db", "upgrade", env=env).stdout.strip() == "database at head"
    created = cli("tokens", "create", "acme", "--name", "ci", env=env)
    token = created.stdout.strip()
    assert created.returncode == 0 and token.startswith("fg_")
    assert "store it now" in created.stderr
    listed = cli("tokens", "list", env=env)
    (row,) = [line for line in listed.stdout.splitlines() if "acme" in line]
    token_id = row.split()[0]
    assert "active" in row and token not in listed.stdout  # only the display prefix is shown
    assert row.endswith("never used")
    assert cli("tokens", "revoke", token_id, env=env).stdout.strip() == "revoked"
    assert "revoked" in cli("tokens", "list", "--tenant", "acme", env=env).stdout
    again = cli("tokens", "revoke", token_id, env=env)
    assert again.returncode == 1 and again.stderr.strip() == f"error: no active token {token_id!r}"


def test_serve_runs_the_api_and_a_worker_in_one_process(
    env: dict[str, str], six_claims: Path, tmp_path: Path
) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "serve.log"
    env = {**env, "FACTGATE_METRICS_PUBLIC": "true"}  # /metrics is closed unless opened on purpose
    with background([FACTGATE, "serve", "--port", str(port)], env, log) as server:
        wait_for(lambda: httpx.get(f"{base}/healthz").status_code == 200, timeout=60, what="serve", log=log)
        health = httpx.get(f"{base}/healthz").json()
        assert health["mode"] == "embedded" and health["simulated"] is True
        token = cli("tokens", "create", "acme", env=env).stdout.strip()
        remote = {**env, "FACTGATE_URL": base, "FACTGATE_TOKEN": token}
        submitted = cli("submit", str(six_claims), "--mode", "grounded", env=remote)
        assert submitted.returncode == 0, submitted.stderr
        job_id = submitted.stdout.strip()
        wait_for(
            lambda: "completed" in cli("status", job_id, env=remote).stdout,
            timeout=60,
            what="the job",
            log=log,
        )
        results = cli("results", job_id, env=remote)
        assert len(results.stdout.splitlines()) == 7  # six claims and the end line
        bad = cli("status", job_id, env={**remote, "FACTGATE_TOKEN": "fg_not-a-token"})
        assert bad.returncode == 2 and "rejected the token" in bad.stderr
        # The embedded store counted the limiter's waits; /metrics shows them and the finished job.
        metrics = httpx.get(f"{base}/metrics").text
        assert 'factgate_jobs{status="completed"} 1.0' in metrics
        waits = re.search(r'factgate_limiter_wait_seconds_count\{endpoint="decisions"\} (\S+)', metrics)
        assert waits is not None and float(waits.group(1)) >= 6  # one per attempt, 429 retries included
        server.send_signal(signal.SIGTERM)
        server.wait(30)
    assert server.returncode == 0
    assert "serving " + base in log.read_text()


def test_simulator_command_serves_the_fake_api(env: dict[str, str], tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "sim.log"
    with background([FACTGATE, "simulator", "--port", str(port)], env, log):
        url = f"http://127.0.0.1:{port}/search"
        wait_for(
            lambda: httpx.post(url, json={"query": "x"}).status_code != 0, timeout=60, what="sim", log=log
        )
        answer = httpx.post(
            url,
            json={"query": "Mariana Trench depth", "max_results": 2},
            headers={"Authorization": "Bearer k"},
        )
        assert answer.status_code == 200 and len(answer.json()["results"]) <= 2
    assert "simulator" in log.read_text()
