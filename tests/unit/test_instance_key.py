"""The embedded mode's encryption key (jobs/keyring.py): made once, even when several threads of a fresh
instance ask at the same moment (the webhook sender threads start together)."""

from __future__ import annotations

import stat
import threading
from pathlib import Path

from jobs.keyring import _instance_key


def test_threads_asking_at_once_all_get_the_one_key(tmp_path: Path) -> None:
    instance = tmp_path / "instance"
    start = threading.Barrier(8)
    keys: list[str] = []
    errors: list[BaseException] = []

    def ask() -> None:
        start.wait()
        try:
            keys.append(_instance_key(instance))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(keys) == 8 and len(set(keys)) == 1
    key_file = next(instance.iterdir())
    assert [p.name for p in instance.iterdir()] == [key_file.name]  # no temporary file left behind
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert _instance_key(instance) == keys[0]
