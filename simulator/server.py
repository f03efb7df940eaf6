"""Serving the simulator over HTTP on waitress (threaded, pure Python, no extra dependency).

`serve` blocks (the `factgate simulator` command); `run_in_thread` starts a stoppable server on a free
loopback port for tests and benchmarks. Handler threads sleep through simulated latency, so the thread
count bounds concurrency under latency: with `latency_s` L, expect at most `threads / L` answers per
second (32 threads at 0.3 s: ~100/s, far above the 10/s Decisions limit).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from flask import Flask
from waitress import wasyncore
from waitress.server import create_server

from simulator.app import create_app, simulator_state
from simulator.config import SimConfig
from simulator.envelopes import SimEngine
from simulator.wire import MAX_BODY_BYTES

DEFAULT_THREADS = 32
SERVER_TUNING: dict[str, Any] = {
    "connection_limit": 1000,  # load drills open many keep-alive connections (default 100)
    "channel_timeout": 30,  # idle keep-alive connections are dropped after this (default 120)
    "backlog": 2048,
    "cleanup_interval": 10,
    # Bodies above 32 MiB get the API's own JSON 413 (with x-request-id); only absurd ones hit waitress's.
    "max_request_body_size": 2 * MAX_BODY_BYTES,
    "ident": "factgate-simulator",
    "asyncore_use_poll": True,
}
LOOP_POLL_S = 0.5


def _make_server(app: Flask, host: str, port: int, threads: int) -> Any:
    # Under a load drill more connections than threads is normal; waitress would warn on every queued task.
    logging.getLogger("waitress.queue").setLevel(logging.ERROR)
    return create_server(app, host=host, port=port, threads=threads, **SERVER_TUNING)


def serve(
    config: SimConfig | None = None,
    host: str = "127.0.0.1",
    port: int = 8700,
    threads: int = DEFAULT_THREADS,
    *,
    engine: SimEngine | None = None,
    ready: Callable[[str], None] | None = None,
) -> None:
    """Serve until interrupted (Ctrl-C). `ready` gets the base URL once the port is bound (port 0 = free)."""
    app = create_app(config, engine)
    server = _make_server(app, host, port, threads)
    if ready is not None:
        ready(f"http://{host}:{server.effective_port}")
    try:
        server.run()
    finally:
        simulator_state(app).stopping.set()
        server.task_dispatcher.shutdown(timeout=2)
        server.close()


@dataclass
class RunningSimulator:
    """A simulator serving from a background thread; `stop()` (or leaving the `with`) shuts it down."""

    base_url: str
    port: int
    app: Flask
    _server: Any = field(repr=False)
    _thread: threading.Thread = field(repr=False)
    _stop: threading.Event = field(repr=False)

    def stop(self, timeout: float = 10.0) -> None:
        """Release sleeping handlers, stop the loop, close every connection and join the workers."""
        if self._stop.is_set():
            return
        simulator_state(self.app).stopping.set()
        self._stop.set()
        with contextlib.suppress(OSError):
            self._server.pull_trigger()
        self._thread.join(timeout)

    def __enter__(self) -> RunningSimulator:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def run_in_thread(
    config: SimConfig | None = None,
    port: int = 0,
    *,
    host: str = "127.0.0.1",
    threads: int = DEFAULT_THREADS,
    engine: SimEngine | None = None,
    app: Flask | None = None,
) -> RunningSimulator:
    """Start serving on `host:port` (0 = a free port) in a daemon thread and return at once."""
    app = app if app is not None else create_app(config, engine)
    server = _make_server(app, host, port, threads)
    stop = threading.Event()
    thread = threading.Thread(target=_loop, args=(server, stop), name="simulator-server", daemon=True)
    thread.start()
    bound = int(server.effective_port)
    return RunningSimulator(
        base_url=f"http://{host}:{bound}", port=bound, app=app, _server=server, _thread=thread, _stop=stop
    )


def _loop(server: Any, stop: threading.Event) -> None:
    """waitress's own `run()` loops until its socket map is empty; this one also ends on `stop`.

    Everything is closed from this thread, the one that owns the sockets, so no channel is closed under
    a running poll.
    """
    socket_map = server._map
    try:
        while not stop.is_set():
            wasyncore.loop(timeout=LOOP_POLL_S, map=socket_map, use_poll=True, count=1)
    finally:
        server.task_dispatcher.shutdown(timeout=5)
        for channel in list(socket_map.values()):
            if channel is server or channel is server.trigger:
                continue
            with contextlib.suppress(OSError):
                channel.close()
        with contextlib.suppress(OSError):
            server.close()
