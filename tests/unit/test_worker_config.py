"""Celery settings derived from ours: where beat keeps its state."""

from __future__ import annotations

from pathlib import Path

import pytest

from config import Settings
from workers.api import beat_schedule_path, celery_config


def test_beat_schedule_lives_in_the_instance_folder(tmp_path: Path) -> None:
    settings = Settings(redis_url="redis://127.0.0.1:1/0", instance_path=tmp_path / "inst")
    conf = celery_config(settings)
    assert conf["beat_schedule_filename"] == str((tmp_path / "inst").resolve() / "celerybeat-schedule")
    assert beat_schedule_path(settings).parent == (tmp_path / "inst").resolve()


def test_factgate_beat_creates_the_instance_folder_before_starting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`factgate beat` on a fresh deploy: the folder for the schedule file exists before beat opens it."""
    from click.testing import CliRunner

    import workers.app
    from cli.server_cmd import beat

    started: list[list[str]] = []
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1/0")
    monkeypatch.setenv("FACTGATE_INSTANCE_PATH", str(tmp_path / "fresh"))
    monkeypatch.setattr(workers.app.celery_app, "start", started.append)
    result = CliRunner().invoke(beat, [])
    assert result.exit_code == 0, result.output
    assert started and started[0][0] == "beat"
    assert (tmp_path / "fresh").is_dir()
