"""Helpers for the CLI, demo and honcho tests (no tests here): `factgate` in this process or in subprocesses.

`cli()` runs one command in this process with click's CliRunner and answers like `factgate()`, which runs
the installed script in a subprocess: the subprocess costs an interpreter start and every import (about a
second each) and stays for what needs a real process — a signal (Ctrl-C, SIGTERM), a server the test talks
to (`serve`, `simulator`, `worker`, `beat`), `make demo`, honcho.

Every long-running child starts in its own session (process group) and is stopped with killpg, so a
test never leaves a worker, server or simulator behind, even when it fails half-way.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
FACTGATE = str(Path(sys.executable).with_name("factgate"))
EXAMPLE_CLAIMS = ROOT / "examples" / "claims.jsonl"
# A command typed at a terminal has SIGINT at its default, however the suite was started. A suite started in
# the background of a script (bash: an asynchronous command ignores SIGINT) hands SIG_IGN down to every child,
# and Python leaves an inherited SIG_IGN alone, so Ctrl-C would do nothing: `as_typed` puts the default back,
# then execs the command.
_DEFAULT_SIGINT = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execv(sys.argv[1], sys.argv[1:])"
)


def as_typed(argv: list[str]) -> list[str]:
    """`argv` run as a terminal runs it: with SIGINT at its default (see above)."""
    return [sys.executable, "-c", _DEFAULT_SIGINT, *argv]


def ignores_sigint(pid: int) -> bool:
    """True when the process ignores SIGINT (Linux: its `SigIgn` mask in /proc)."""
    status = Path(f"/proc/{pid}/status")
    for line in status.read_text().splitlines() if status.exists() else []:
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGINT - 1)))
    return False


# What a fresh machine has: none of factgate's service settings and no key.
SERVICE_VARS = (
    "DATABASE_URL",
    "REDIS_URL",
    "PERPLEXITY_API_KEY",
    "PERPLEXITY_API_BASE",
    "FACTGATE_URL",
    "FACTGATE_TOKEN",
    "FACTGATE_INSTANCE_PATH",
    "FACTGATE_LOG_LEVEL",
    "FACTGATE_LOG_FORMAT",
)


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SERVICE_VARS}
    env.update(extra)
    return env


def factgate(
    *args: str, env: Mapping[str, str], cwd: Path | None = None, timeout: float = 180.0
) -> subprocess.CompletedProcess[str]:
    """Run one factgate command to completion (its own process group, killed on timeout)."""
    proc = subprocess.Popen(
        [FACTGATE, *args],
        env=dict(env),
        cwd=cwd or ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        out, err = proc.communicate()
        raise AssertionError(f"factgate {' '.join(args)} timed out\nstdout:\n{out}\nstderr:\n{err}") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def cli(*args: str, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """Run one factgate command in this process (click's CliRunner) with exactly `env` as its environment.

    Answers like `factgate()`: the exit code, stdout and stderr apart. What a process's exit would clean up
    is cleaned up here: the database engines the command connected are disposed (their pooled connections
    closed), and the root logger, which the command configures for its own stderr, is put back.
    """
    from click.testing import CliRunner
    from sqlalchemy import Engine, event

    from cli.main import main

    changes: dict[str, str | None] = {k: None for k in os.environ if k not in env}
    changes.update({k: v for k, v in env.items() if os.environ.get(k) != v})
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    engines: list[Engine] = []

    def connected(conn: Any) -> None:
        if conn.engine not in engines:
            engines.append(conn.engine)

    event.listen(Engine, "engine_connect", connected)
    try:
        result = CliRunner().invoke(main, list(args), env=changes, catch_exceptions=False)
    finally:
        event.remove(Engine, "engine_connect", connected)
        for engine in engines:
            engine.dispose()
        for handler in list(root.handlers):
            if handler not in handlers:
                root.removeHandler(handler)
                handler.close()
        for handler in handlers:
            if handler not in root.handlers:
                root.addHandler(handler)
        root.setLevel(level)
    return subprocess.CompletedProcess(["factgate", *args], result.exit_code, result.stdout, result.stderr)


def kill_group(proc: subprocess.Popen[str] | subprocess.Popen[bytes], grace_s: float = 10.0) -> None:
    """SIGTERM the child's process group, then SIGKILL whatever is left; reap the child."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(grace_s)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(10)


@contextmanager
def background(
    argv: list[str], env: Mapping[str, str], log: Path, cwd: Path | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """A long-running child with output to `log`; its whole process group is stopped on exit."""
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            argv, env=dict(env), cwd=cwd or ROOT, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        yield proc
    finally:
        kill_group(proc)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_for(predicate: object, *, timeout: float, what: str, log: Path | None = None) -> None:
    """Poll `predicate()` until it is true; fail with the log's tail if it never is."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():  # type: ignore[operator]
                return
        except Exception:  # not up yet
            pass
        time.sleep(0.25)
    tail = log.read_text(errors="replace")[-4000:] if log is not None and log.exists() else ""
    raise AssertionError(f"timed out waiting for {what}\n{tail}")


def descendants(pid: int) -> set[int]:
    """Every live process below `pid` (Linux /proc), whatever session or group it moved to."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        after = text[text.rindex(")") + 2 :].split()
        children.setdefault(int(after[1]), []).append(int(text.split(" ", 1)[0]))
    found: set[int] = set()
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting to be reaped)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text[text.rindex(")") + 2 :].split()[0] != "Z"


def kill_all(pids: set[int]) -> None:
    """SIGKILL each process and its group: the last resort after a failed test."""
    for pid in pids:
        if not alive(pid):
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(os.getpgid(pid), signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
