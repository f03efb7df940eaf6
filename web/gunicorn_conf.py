"""gunicorn settings of the web process: `gunicorn -c python:web.gunicorn_conf 'web.app:create_app()'`.

gunicorn answers some requests itself, before the app sees them — a request line over `limit_request_line`
(414), headers over the header limits (431), a malformed request (400) — and it writes those as small HTML
pages. The API promises one JSON error shape for every status it can send, so the master process swaps
gunicorn's error writer for ours (web/raw_errors.py) before the workers fork. Flags given on the command line
(bind, workers, threads) still win over these defaults.

The access log (when `--access-logfile` turns it on, as the Procfile, the Dockerfile and compose do) holds
no query strings unless FACTGATE_ACCESS_LOG_QUERY=true: webhook URLs with their tokens travel in them
(web/access_log.py).

Each worker, once it has loaded the app, moves what start-up allocated out of the garbage collector's reach
(`gc.freeze()`): a full collection walks every tracked object and stops every thread of the worker
meanwhile, and over the ~143,000 objects the app leaves it took ~100 ms here — a status poll that met one
waited that long (the tail of bench/ceiling.py's poll). The workers of `factgate worker` do the same
(workers/bootsteps.py). Those objects live as long as the process anyway.
"""

from __future__ import annotations

import gc
from typing import Any

from web.raw_errors import install_json_errors

worker_class = "gthread"
logger_class = "web.access_log.AccessLogger"
# Slow clients, and what bounds them. A gthread worker's main thread accepts connections, waits for a new or
# kept-alive connection's first bytes in its poller (not in a request thread) and notifies the arbiter
# whatever its request threads are doing, so `timeout` only restarts a worker whose main loop is stuck.
# A request thread is bounded by the app instead (web/body.py:PacedBodies): a body must keep
# FACTGATE_BODY_MIN_BYTES_PER_S after FACTGATE_BODY_GRACE_S (else 408), every send and receive on the
# connection must progress within FACTGATE_SEND_TIMEOUT_S, the pages refuse a request without a session
# before reading its body, and each tenant streams at most FACTGATE_MAX_EXPORTS_PER_TENANT exports at once.
# gunicorn itself drains at most 64 KiB of an unread body, for at most 5 s, before reusing a connection.
timeout = 30
graceful_timeout = 30
# Seconds an idle kept-alive connection stays open in the poller.
keepalive = 5
# The largest request line gunicorn accepts; anything longer is a 414 in the API's JSON shape.
limit_request_line = 8190


def on_starting(server: Any) -> None:
    install_json_errors()


def post_worker_init(worker: Any) -> None:
    gc.freeze()
