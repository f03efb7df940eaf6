"""`factgate tenants list|show|set|rotate-keys`: an operator governs each tenant's use of the upstream.

Run in-process with click's CliRunner against an embedded SQLite instance (nothing here needs a process).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from cryptography.fernet import Fernet
from sqlalchemy import select

from cli.main import main
from config import Settings
from models import Tenant, make_engine
from models.db import make_session_factory

SECRET = "pplx-tenant-own-key-0123456789abcdef"


@pytest.fixture
def instance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("DATABASE_URL", "REDIS_URL", "PERPLEXITY_API_KEY", "FACTGATE_ENCRYPTION_KEYS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("FACTGATE_INSTANCE_PATH", str(tmp_path / "instance"))
    return tmp_path / "instance"


@pytest.fixture
def runner(instance: Path) -> CliRunner:
    runner = CliRunner()
    assert runner.invoke(main, ["tokens", "create", "acme"]).exit_code == 0
    assert runner.invoke(main, ["tokens", "create", "globex"]).exit_code == 0
    return runner


def _stored(instance: Path, name: str) -> Tenant:
    engine = make_engine(Settings(instance_path=instance).effective_database_url())
    with make_session_factory(engine)() as s:
        tenant = s.scalar(select(Tenant).where(Tenant.name == name))
        assert tenant is not None
        s.expunge(tenant)
    engine.dispose()
    return tenant


def test_weights_quotas_and_budgets_are_listed_shown_and_set(runner: CliRunner) -> None:
    listed = runner.invoke(main, ["tenants", "list"])
    assert listed.exit_code == 0
    assert [line.split()[:3] for line in listed.output.splitlines()] == [
        ["acme", "weight", "1"],
        ["globex", "weight", "1"],
    ]
    changed = runner.invoke(
        main,
        ["tenants", "set", "globex", "--weight", "2", "--max-items-per-job", "1000", "--max-active-jobs", "3",
         "--daily-budget-usd", "5", "--monthly-budget-usd", "100"],
    )  # fmt: skip
    assert changed.exit_code == 0, changed.output
    assert "weight 2" in changed.output and "items/job 1,000" in changed.output
    assert (
        "live jobs 0/3" in changed.output
        and "day $5.00" in changed.output
        and "month $100.00" in changed.output
    )
    shown = runner.invoke(main, ["tenants", "show", "globex"])
    assert shown.exit_code == 0
    assert "max items per job   1,000" in shown.output and "daily budget        $5.00" in shown.output
    # Only the options given change; `none` removes a limit.
    cleared = runner.invoke(main, ["tenants", "set", "globex", "--daily-budget-usd", "none"])
    assert cleared.exit_code == 0 and "day none" in cleared.output and "items/job 1,000" in cleared.output


def test_an_upstream_key_is_read_from_a_file_stored_encrypted_and_never_shown(
    runner: CliRunner, instance: Path, tmp_path: Path
) -> None:
    key_file = tmp_path / "key.txt"
    key_file.write_text(SECRET + "\n")
    result = runner.invoke(main, ["tenants", "set", "acme", "--upstream-key-file", str(key_file)])
    assert result.exit_code == 0, result.output
    stored = _stored(instance, "acme")
    assert stored.upstream_key_encrypted and SECRET not in stored.upstream_key_encrypted
    assert stored.upstream_key_fingerprint and stored.upstream_key_fingerprint in result.output
    for command in (["tenants", "list"], ["tenants", "show", "acme"]):
        out = runner.invoke(main, command).output
        assert SECRET not in out and stored.upstream_key_fingerprint in out
    assert SECRET not in result.output
    # Embedded mode keeps its generated key in the instance folder, readable by the owner only.
    assert (instance / "encryption.key").stat().st_mode & 0o077 == 0
    back = runner.invoke(main, ["tenants", "set", "acme", "--clear-upstream-key"])
    assert back.exit_code == 0 and "operator key" in back.output
    assert _stored(instance, "acme").upstream_key_encrypted is None


def test_keys_rotate_to_the_first_encryption_key(
    runner: CliRunner, instance: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    monkeypatch.setenv("FACTGATE_ENCRYPTION_KEYS", old)
    key_file = tmp_path / "key.txt"
    key_file.write_text(SECRET)
    assert (
        runner.invoke(main, ["tenants", "set", "acme", "--upstream-key-file", str(key_file)]).exit_code == 0
    )
    token = _stored(instance, "acme").upstream_key_encrypted
    assert token is not None and Fernet(old.encode()).decrypt(token.encode()).decode() == SECRET
    monkeypatch.setenv("FACTGATE_ENCRYPTION_KEYS", f"{new},{old}")
    rotated = runner.invoke(main, ["tenants", "rotate-keys"])
    assert rotated.exit_code == 0 and "re-encrypted 1" in rotated.output
    token = _stored(instance, "acme").upstream_key_encrypted
    assert token is not None and Fernet(new.encode()).decrypt(token.encode()).decode() == SECRET


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["tenants", "show", "nobody"], "no tenant 'nobody'"),
        (["tenants", "set", "nobody", "--weight", "2"], "no tenant 'nobody'"),
        (["tenants", "set", "acme", "--weight", "0"], "weight must be above 0"),
        (["tenants", "set", "acme", "--weight", "1000"], "at most 100"),
        (["tenants", "set", "acme", "--max-items-per-job", "0"], "max_items_per_job must be at least 1"),
        (
            ["tenants", "set", "acme", "--daily-budget-usd", "-1"],
            "daily_budget_usd must be a positive amount",
        ),
        (["tenants", "set", "acme", "--daily-budget-usd", "lots"], "not a number"),
        (["tenants", "set", "acme"], "nothing to set"),
    ],
)
def test_bad_tenant_commands_say_why(runner: CliRunner, args: list[str], message: str) -> None:
    result = runner.invoke(main, args)
    assert result.exit_code == 2 and message in result.output, result.output


def test_server_mode_without_encryption_keys_refuses_to_store_a_key(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1/0")  # server mode: no generated key
    key_file = tmp_path / "key.txt"
    key_file.write_text(SECRET)
    result = runner.invoke(main, ["tenants", "set", "acme", "--upstream-key-file", str(key_file)])
    assert (
        result.exit_code == 2 and "FACTGATE_ENCRYPTION_KEYS" in result.output and SECRET not in result.output
    )


def test_retention_days_are_set_bounded_by_the_operator_and_shown(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert "retention           the default" in runner.invoke(main, ["tenants", "show", "acme"]).output
    changed = runner.invoke(main, ["tenants", "set", "acme", "--retention-days", "7"])
    assert changed.exit_code == 0, changed.output
    assert "retention           7 days" in runner.invoke(main, ["tenants", "show", "acme"]).output
    monkeypatch.setenv("FACTGATE_RETENTION_MAX_DAYS", "5")
    monkeypatch.setenv("FACTGATE_RETENTION_DAYS", "5")
    refused = runner.invoke(main, ["tenants", "set", "acme", "--retention-days", "6"])
    assert refused.exit_code == 2 and "from 1 to 5 days" in refused.output
    assert runner.invoke(main, ["tenants", "set", "acme", "--retention-days", "none"]).exit_code == 0
    assert "retention           the default" in runner.invoke(main, ["tenants", "show", "acme"]).output


def test_a_deleted_tenant_loses_its_tokens_and_jobs_and_the_other_keeps_everything(
    runner: CliRunner, instance: Path
) -> None:
    from jobs.tenancy import authenticate, create_token
    from models import ApiToken, Job, session_scope

    engine = make_engine(Settings(instance_path=instance).effective_database_url())
    sessions = make_session_factory(engine)
    try:
        with session_scope(sessions) as s:
            acme_token = create_token(s, "acme").token
            globex_token = create_token(s, "globex").token
            for name in ("acme", "globex"):
                tenant = s.scalar(select(Tenant).where(Tenant.name == name))
                assert tenant is not None
                s.add(
                    Job(
                        tenant_id=tenant.id, kind="claims", status="completed", completed_at=tenant.created_at
                    )
                )
                s.add(Job(tenant_id=tenant.id, kind="claims", status="queued"))
        asked = runner.invoke(main, ["tenants", "delete", "acme"], input="n\n")
        assert asked.exit_code == 130  # declined: nothing removed
        done = runner.invoke(main, ["tenants", "delete", "acme", "--yes"])
        assert done.exit_code == 0, done.output
        assert (
            "tenant acme removed: 2 tokens revoked, 0 sessions ended, 1 live jobs cancelled, 1 jobs deleted"
            in (done.output)
        )
        with sessions() as s:
            assert authenticate(s, acme_token) is None
            globex = authenticate(s, globex_token)
            assert globex is not None and globex.name == "globex"
            acme = _stored(instance, "acme")
            assert acme.deleted_at is not None
            states = {
                (t == acme.id, st, d is not None)
                for t, st, d in s.execute(select(Job.tenant_id, Job.status, Job.deleted_at))
            }
            assert states == {
                (True, "completed", True),
                (True, "cancelling", False),  # deleted once it has ended (jobs/purge.py:purge_queue)
                (False, "completed", False),
                (False, "queued", False),
            }
            assert (
                s.scalar(
                    select(ApiToken.id).where(
                        ApiToken.revoked_at.is_not(None), ApiToken.tenant_id == globex.id
                    )
                )
                is None
            )
        listed = runner.invoke(main, ["tenants", "list"]).output
        assert "acme" not in listed and "globex" in listed
        reuse = runner.invoke(main, ["tokens", "create", "acme"])
        assert reuse.exit_code != 0 and "was removed" in reuse.output
        assert runner.invoke(main, ["tenants", "delete", "acme", "--yes"]).exit_code == 2
    finally:
        engine.dispose()
