"""workers/priority.py: a server-mode worker lowers its own CPU priority at `worker_init`; embedded mode and
FACTGATE_WORKER_NICE=0 leave it. Each case runs in a child process: a nice value raised cannot be lowered
again without privilege, and this test process must keep its own."""

from __future__ import annotations

import subprocess
import sys

import pytest

from config import Settings

_CHILD = """
import os, sys
from types import SimpleNamespace
from config import Settings
from workers.priority import _lower_worker_priority
settings = Settings.from_env({k: v for k, v in (a.split("=", 1) for a in sys.argv[1:])})
before = os.nice(0)
_lower_worker_priority(sender=SimpleNamespace(app=SimpleNamespace(conf=SimpleNamespace(factgate_settings=settings))))
seen = []
import threading
t = threading.Thread(target=lambda: seen.append(os.nice(0)))
t.start(); t.join()
print(os.nice(0) - before, seen[0] - before)
"""


def _raised(*env: str) -> tuple[int, int]:
    out = subprocess.run([sys.executable, "-c", _CHILD, *env], capture_output=True, text=True, check=True)
    main, thread = out.stdout.split()
    return int(main), int(thread)


def test_a_server_mode_worker_lowers_its_priority_for_every_thread_it_starts() -> None:
    assert _raised("REDIS_URL=redis://127.0.0.1:6379/0") == (3, 3)
    assert _raised("REDIS_URL=redis://127.0.0.1:6379/0", "FACTGATE_WORKER_NICE=7") == (7, 7)


def test_embedded_mode_and_zero_leave_the_priority_alone() -> None:
    assert _raised() == (0, 0)  # no Redis: the worker runs inside the user's command
    assert _raised("REDIS_URL=redis://127.0.0.1:6379/0", "FACTGATE_WORKER_NICE=0") == (0, 0)


@pytest.mark.parametrize("value", ["-1", "20"])
def test_a_nice_out_of_range_is_refused_where_settings_are_made(value: str) -> None:
    with pytest.raises(ValueError, match="FACTGATE_WORKER_NICE must be from 0 to 19"):
        Settings.from_env({"FACTGATE_WORKER_NICE": value})
