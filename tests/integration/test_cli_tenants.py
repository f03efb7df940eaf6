"""`factgate tenants list|show|set`: an operator sets a tenant's weight in the fair share of the upstream.

Run in-process with click's CliRunner against an embedded SQLite instance (nothing here needs a process).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import main


@pytest.fixture
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    for name in ("DATABASE_URL", "REDIS_URL", "PERPLEXITY_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("FACTGATE_INSTANCE_PATH", str(tmp_path / "instance"))
    return CliRunner()


def test_weights_are_listed_shown_and_set(runner: CliRunner) -> None:
    assert runner.invoke(main, ["tokens", "create", "acme"]).exit_code == 0
    assert runner.invoke(main, ["tokens", "create", "globex"]).exit_code == 0
    listed = runner.invoke(main, ["tenants", "list"])
    assert listed.exit_code == 0
    assert [line.split()[:3] for line in listed.output.splitlines()] == [
        ["acme", "weight", "1"],
        ["globex", "weight", "1"],
    ]
    changed = runner.invoke(main, ["tenants", "set", "globex", "--weight", "2"])
    assert changed.exit_code == 0, changed.output
    assert changed.output.split()[:3] == ["globex", "weight", "2"]
    shown = runner.invoke(main, ["tenants", "show", "globex"])
    assert shown.exit_code == 0 and "weight   2" in shown.output and "tokens   1 active" in shown.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["tenants", "show", "nobody"], "no tenant 'nobody'"),
        (["tenants", "set", "nobody", "--weight", "2"], "no tenant 'nobody'"),
        (["tenants", "set", "acme", "--weight", "0"], "weight must be above 0"),
        (["tenants", "set", "acme", "--weight", "1000"], "at most 100"),
        (["tenants", "set", "acme"], "nothing to set"),
    ],
)
def test_bad_tenant_commands_say_why(runner: CliRunner, args: list[str], message: str) -> None:
    assert runner.invoke(main, ["tokens", "create", "acme"]).exit_code == 0
    result = runner.invoke(main, args)
    assert result.exit_code == 2 and message in result.output
