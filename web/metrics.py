"""GET /metrics in the Prometheus text format, and the request id of every web request.

Everything is read at scrape time from the places that already hold it, so any web process answers
for the whole deployment and nothing is lost when a process restarts:
- jobs by status (the `ix_jobs_status` index) and items in flight per upstream endpoint (dispatched and not
  settled: the scheduler's partial index `ix_items_in_flight`, bounded by the in-flight targets) — never a
  count over the items of a job, which would cost as much as the job is large on every scrape;
- upstream calls by endpoint and status, and 429s, from `api_calls` over a recent window
  (FACTGATE_METRICS_WINDOW_S, default 900 s);
- limiter waits (histogram), limiter timeouts and 429 blocks per endpoint: counters the workers keep in
  Redis (written by workers/signals.py, read through the public workers/metrics.py), in the embedded
  store in embedded mode;
- queue depth: messages waiting in the Celery queue (Redis LLEN in server mode, the in-memory broker
  in embedded mode) and messages delivered but not yet acknowledged (server mode).

Nothing in it names a tenant, a job or a key, but it tells anyone how busy the deployment is and costs
database queries on every scrape, so it is closed unless configured: with FACTGATE_METRICS_TOKEN set, a
scrape must send `Authorization: Bearer <token>` (401 otherwise); without a token it answers 404 unless
FACTGATE_METRICS_PUBLIC=true opens it to anyone on purpose; FACTGATE_METRICS=0 removes the endpoint.

`init_app` also gives every request an id (the caller's `X-Request-Id` if it sends a sane one, else a
new one), binds it into the log context and echoes it in the `X-Request-Id` response header.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import os
import re
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

from flask import Blueprint, Flask, Response, g, request
from kombu.exceptions import ChannelError
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from sqlalchemy import func, select, text

from config.logging import bind, configure_logging, unbind
from models import JOB_STATUSES, ApiCall, Item, Job, utcnow
from models.jobs import IN_FLIGHT_SQL
from web.session import WebResources, resources
from workers.metrics import EndpointWaits, embedded_redis, read_limiter_metrics

log = logging.getLogger("factgate.web")

metrics = Blueprint("metrics", __name__)

DEFAULT_WINDOW_S = 900
QUEUE = "celery"
# The classic text format every Prometheus version scrapes (what generate_latest writes).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
REQUEST_ID_HEADER = "X-Request-Id"
_SANE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")

# The limiter's counters, one series per endpoint each: the metric's name, its help, and its figure.
LIMITER_COUNTERS: tuple[tuple[str, str, Callable[[EndpointWaits], float]], ...] = (
    ("factgate_limiter_timeouts", "Limiter waits that gave up (task retried later)", lambda e: e.timeouts),
    (
        "factgate_upstream_throttled",
        "Upstream 429s that paused the endpoint for every worker (Retry-After)",
        lambda e: e.throttled,
    ),
    (
        "factgate_limiter_wire_held",
        "Requests the wire gate held back because the upstream's window was full of recent sends",
        lambda e: e.wire_held,
    ),
    (
        "factgate_limiter_wire_held_seconds",
        "Seconds requests were held back by the wire gate",
        lambda e: e.wire_held_s,
    ),
)


def metrics_enabled(env: dict[str, str] | None = None) -> bool:
    e = os.environ if env is None else env
    return (e.get("FACTGATE_METRICS") or "1").strip().lower() not in ("0", "false", "no", "off")


def metrics_public(env: dict[str, str] | None = None) -> bool:
    """FACTGATE_METRICS_PUBLIC: answer scrapes without a token (off unless set to a true value)."""
    e = os.environ if env is None else env
    return (e.get("FACTGATE_METRICS_PUBLIC") or "").strip().lower() in ("1", "true", "yes", "on")


def window_s(env: dict[str, str] | None = None) -> int:
    e = os.environ if env is None else env
    raw = (e.get("FACTGATE_METRICS_WINDOW_S") or "").strip()
    try:
        return max(1, int(raw)) if raw else DEFAULT_WINDOW_S
    except ValueError:
        return DEFAULT_WINDOW_S


def init_app(app: Flask) -> None:
    """Request ids for every request, and /metrics unless FACTGATE_METRICS=0 (one call in create_app).

    Also structured logging when nothing configured logging yet (a gunicorn web process): like
    `logging.basicConfig`, it leaves alone a process that set up its own handlers (the CLI, tests).
    """
    if not logging.getLogger().handlers:
        configure_logging()
    app.before_request(_bind_request_id)
    app.after_request(_echo_request_id)
    app.teardown_request(_unbind_request_id)
    if metrics_enabled():
        app.register_blueprint(metrics)


# --- request ids ---------------------------------------------------------------------------------------


def _bind_request_id() -> None:
    incoming = request.headers.get(REQUEST_ID_HEADER, "")
    rid = incoming if _SANE_REQUEST_ID.match(incoming) else uuid.uuid4().hex
    g.request_id = rid
    g.request_log_token = bind(request_id=rid)


def _echo_request_id(response: Response) -> Response:
    rid = g.get("request_id")
    if rid:
        response.headers[REQUEST_ID_HEADER] = rid
    return response


def _unbind_request_id(_exc: BaseException | None = None) -> None:
    token = g.pop("request_log_token", None)
    if token is not None:
        with contextlib.suppress(ValueError, RuntimeError):  # torn down in another context
            unbind(token)


# --- /metrics ------------------------------------------------------------------------------------------


def _refusal() -> Response | None:
    """Why this scrape is not answered, or None when it is: the bearer token of FACTGATE_METRICS_TOKEN
    when one is set; else nobody, unless FACTGATE_METRICS_PUBLIC opens it."""
    expected = (os.environ.get("FACTGATE_METRICS_TOKEN") or "").strip()
    text_plain = "text/plain; charset=utf-8"
    if not expected:
        if metrics_public():
            return None
        return Response(
            "metrics are closed: set FACTGATE_METRICS_TOKEN (and scrape with it as a bearer token), or "
            "FACTGATE_METRICS_PUBLIC=true\n",
            status=404,
            headers={"Content-Type": text_plain},
        )
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), expected.encode()):
        return None
    return Response(
        "metrics need the bearer token of FACTGATE_METRICS_TOKEN\n",
        status=401,
        headers={"Content-Type": text_plain, "WWW-Authenticate": 'Bearer realm="metrics"'},
    )


@metrics.get("/metrics")
def prometheus_metrics() -> Response:
    refusal = _refusal()
    if refusal is not None:
        return refusal
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FactgateCollector(resources(), window_s()))
    return Response(generate_latest(registry), headers={"Content-Type": CONTENT_TYPE})


class FactgateCollector:
    """A prometheus_client collector that reads the database, Redis and the broker on each scrape."""

    def __init__(self, res: WebResources, window: int) -> None:
        self.res = res
        self.window = window

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        up = GaugeMetricFamily(
            "factgate_metrics_source_up", "1 if the source answered this scrape", labels=["source"]
        )
        for source, fn in (("database", self._database), ("redis", self._limiter), ("broker", self._queue)):
            try:
                families = list(fn())
            except Exception:
                log.warning("metrics: %s unavailable", source, exc_info=True)
                up.add_metric([source], 0)
                continue
            up.add_metric([source], 1)
            yield from families
        yield up

    def _database(self) -> Iterator[Any]:
        with self.res.sessions() as session:
            job_rows = dict(session.execute(select(Job.status, func.count()).group_by(Job.status)).all())
            in_flight = dict(
                session.execute(
                    select(Item.endpoint, func.count())
                    .where(Item.scope.is_not(None), text(IN_FLIGHT_SQL))
                    .group_by(Item.endpoint)
                ).all()
            )
            since = utcnow() - timedelta(seconds=self.window)
            call_rows = session.execute(
                select(ApiCall.endpoint, ApiCall.status_code, func.count())
                .where(ApiCall.created_at >= since, ApiCall.reused.is_(False))
                .group_by(ApiCall.endpoint, ApiCall.status_code)
            ).all()
        jobs = GaugeMetricFamily("factgate_jobs", "Jobs by status", labels=["status"])
        for status in JOB_STATUSES:
            jobs.add_metric([status], int(job_rows.get(status, 0)))
        yield jobs
        items = GaugeMetricFamily(
            "factgate_items_in_flight",
            "Items dispatched to the workers and not settled yet, by upstream endpoint",
            labels=["endpoint"],
        )
        for endpoint in ("decisions", "agent", "search"):
            items.add_metric([endpoint], int(in_flight.get(endpoint, 0)))
        yield items
        window = str(self.window)
        calls = GaugeMetricFamily(
            "factgate_upstream_calls",
            "Upstream HTTP attempts in the last window_s seconds by endpoint and status (none: no answer)",
            labels=["endpoint", "status", "window_s"],
        )
        throttled = GaugeMetricFamily(
            "factgate_upstream_429",
            "Upstream 429 answers in the last window_s seconds, by endpoint",
            labels=["endpoint", "window_s"],
        )
        per_endpoint_429: dict[str, int] = {}
        for endpoint, code, n in call_rows:
            calls.add_metric([endpoint, "none" if code is None else str(code), window], int(n))
            per_endpoint_429.setdefault(endpoint, 0)
            if code == 429:
                per_endpoint_429[endpoint] += int(n)
        for endpoint, n in sorted(per_endpoint_429.items()):
            throttled.add_metric([endpoint, window], n)
        yield calls
        yield throttled

    def _limiter_store(self) -> Any:
        if self.res.redis is not None:
            return self.res.redis
        return embedded_redis()  # embedded mode: the in-process store the limiter uses

    def _limiter(self) -> Iterator[Any]:
        data = read_limiter_metrics(self._limiter_store())
        wait = HistogramMetricFamily(
            "factgate_limiter_wait_seconds",
            "Seconds a worker waited for an upstream rate-limiter slot, per endpoint",
            labels=["endpoint"],
        )
        counters = [
            (CounterMetricFamily(name, about, labels=["endpoint"]), figure)
            for name, about, figure in LIMITER_COUNTERS
        ]
        for endpoint, entry in sorted(data.items()):
            wait.add_metric([endpoint], entry.cumulative(), entry.sum_s)
            for family, figure in counters:
                family.add_metric([endpoint], figure(entry))
        yield wait
        for family, _ in counters:
            yield family

    def _queue(self) -> Iterator[Any]:
        depth = GaugeMetricFamily(
            "factgate_queue_depth", "Messages waiting in the task queue", labels=["queue"]
        )
        if self.res.redis is not None:
            depth.add_metric([QUEUE], int(self.res.redis.llen(QUEUE)))
            unacked = GaugeMetricFamily(
                "factgate_queue_unacked", "Messages delivered to workers and not yet acknowledged"
            )
            unacked.add_metric([], int(self.res.redis.hlen("unacked")))
            yield depth
            yield unacked
            return
        depth.add_metric([QUEUE], self._memory_queue_depth())
        yield depth

    def _memory_queue_depth(self) -> int:
        """Messages in the embedded in-memory broker (empty when no worker ever declared the queue)."""
        with self.res.celery.connection_for_read() as conn:
            try:
                channel: Any = conn.default_channel  # kombu's virtual channel: message_count on declare
                declared = channel.queue_declare(queue=QUEUE, passive=True)
            except ChannelError:
                return 0
        return int(declared.message_count)
