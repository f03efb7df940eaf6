"""Structured logging (config/logging.py) and the worker-side metrics and log context (workers/signals.py).

(Named test_cli_* because the CLI is what configures logging for every factgate process.)
"""

from __future__ import annotations

import io
import json
import logging
import threading
import time
from collections.abc import Iterator

import fakeredis
import pytest
from celery import signals as celery_signals

from config.logging import (
    bind,
    configure_logging,
    current_context,
    log_context,
    make_handler,
    redact,
    unbind,
)
from workers import signals
from workers.metrics import read_limiter_metrics

KEY = "pplx-0123456789abcdefghijklmnopqrstuvwxyz"


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """A logger with only a kv handler writing to a buffer (the root logger is left alone)."""
    stream = io.StringIO()
    logger = logging.getLogger(f"factgate.test.{id(stream)}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    handler = make_handler("kv", stream, secrets=[KEY])
    logger.addHandler(handler)
    yield logger, stream
    logger.removeHandler(handler)


def test_kv_lines_carry_the_bound_ids(captured: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = captured
    with log_context(job_id="j-1", request_id="r-9"):
        with log_context(item_id=42):
            logger.info("claimed item %s", 42)
        logger.warning("job level")
    logger.info("outside")
    first, second, third = stream.getvalue().splitlines()
    assert 'msg="claimed item 42"' in first and "level=info" in first
    assert first.endswith("job_id=j-1 item_id=42 request_id=r-9")
    assert second.endswith("job_id=j-1 request_id=r-9") and "item_id" not in second
    assert "job_id" not in third and third.startswith("ts=")


def test_json_lines(captured: tuple[logging.Logger, io.StringIO]) -> None:
    stream = io.StringIO()
    logger = logging.getLogger("factgate.test.json")
    logger.propagate = False
    handler = make_handler("json", stream)
    logger.addHandler(handler)
    try:
        with log_context(job_id="j-2"):
            logger.error("failed: %d items", 3)
    finally:
        logger.removeHandler(handler)
    record = json.loads(stream.getvalue())
    assert record["msg"] == "failed: 3 items" and record["level"] == "error"
    assert record["job_id"] == "j-2" and record["logger"] == "factgate.test.json"
    assert "item_id" not in record


def test_the_key_is_never_written(captured: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = captured
    logger.info("calling with key %s", KEY)
    logger.info("header Authorization: Bearer %s", "some-user-token-123")
    try:
        raise RuntimeError(f"upstream echoed {KEY}")
    except RuntimeError:
        logger.exception("call failed")
    text = stream.getvalue()
    assert KEY not in text and "some-user-token-123" not in text
    assert text.count("[redacted]") >= 3
    assert "RuntimeError: upstream echoed [redacted]" in text


def test_redact_leaves_short_secrets_and_other_text_alone() -> None:
    assert redact("key abc in text", ["abc"]) == "key abc in text"
    assert redact("Bearer abc.def, then more", []) == "Bearer [redacted], then more"


def test_configure_logging_replaces_its_own_handler_and_reads_the_environment() -> None:
    root = logging.getLogger()
    before = list(root.handlers)
    level = root.level
    try:
        configure_logging(env={"FACTGATE_LOG_LEVEL": "debug", "FACTGATE_LOG_FORMAT": "json"})
        handler = configure_logging(env={"FACTGATE_LOG_FORMAT": "json", "PERPLEXITY_API_KEY": KEY})
        ours = [h for h in root.handlers if h.get_name() == "factgate"]
        assert ours == [handler]  # configured twice, installed once
        assert root.level == logging.INFO
        with pytest.raises(ValueError, match="log format"):
            configure_logging(fmt="xml")
    finally:
        for h in list(root.handlers):
            if h not in before:
                root.removeHandler(h)
        root.setLevel(level)


def test_a_worker_at_info_logs_no_line_per_item_and_at_debug_it_does() -> None:
    """Celery's received/succeeded lines and httpx's per-request line are per item: quiet unless DEBUG."""
    root = logging.getLogger()
    before, level = list(root.handlers), root.level
    try:
        for loglevel, expected in (("INFO", logging.WARNING), ("DEBUG", logging.NOTSET)):
            signals._worker_logging(loglevel=loglevel)
            for name in ("celery.app.trace", "celery.worker.strategy", "httpx"):
                assert logging.getLogger(name).level == expected, (loglevel, name)
        signals._worker_logging(loglevel="INFO")
        assert not logging.getLogger("celery.app.trace").isEnabledFor(logging.INFO)
        assert logging.getLogger("celery.app.trace").isEnabledFor(logging.ERROR)  # failures still show
        assert logging.getLogger("factgate.workers").isEnabledFor(logging.INFO)
    finally:
        for h in list(root.handlers):
            if h not in before:
                root.removeHandler(h)
        root.setLevel(level)
        for name in signals.PER_TASK_LOGGERS:
            logging.getLogger(name).setLevel(logging.NOTSET)


def test_context_is_per_thread() -> None:
    token = bind(job_id="main-thread")
    seen: dict[str, str] = {}

    def other() -> None:
        seen.update(current_context())

    t = threading.Thread(target=other)
    t.start()
    t.join()
    unbind(token)
    assert seen == {} and current_context() == {}


# --- workers/signals.py --------------------------------------------------------------------------------


class FakeTask:
    """What the signal handlers read of a task: its name (senders must be hashable)."""

    def __init__(self, name: str) -> None:
        self.name = name


def test_task_ids_go_into_the_log_context_for_the_task_only() -> None:
    run_item = FakeTask("factgate.run_item")
    start_job = FakeTask("factgate.start_job")
    celery_signals.task_prerun.send(sender=run_item, task_id="t1", task=run_item, args=[7], kwargs={})
    assert current_context() == {"item_id": "7"}
    celery_signals.task_postrun.send(sender=run_item, task_id="t1", task=run_item, args=[7], kwargs={})
    assert current_context() == {}
    celery_signals.task_prerun.send(
        sender=start_job, task_id="t2", task=start_job, args=["job-uuid"], kwargs={}
    )
    assert current_context() == {"job_id": "job-uuid"}
    celery_signals.task_postrun.send(
        sender=start_job, task_id="t2", task=start_job, args=["job-uuid"], kwargs={}
    )
    assert current_context() == {}
    assert signals.task_log_fields("factgate.sweep", []) == {}


def test_limiter_waits_make_a_cumulative_histogram() -> None:
    store = fakeredis.FakeRedis()
    for waited in (0.0, 0.003, 0.07, 0.07, 2.0, 100.0):
        signals.record_limiter_wait(store, "decisions", waited)
    signals.record_limiter_wait(store, "decisions", 60.0, timed_out=True)
    signals.record_limiter_wait(store, "search", 0.2)
    signals.record_throttled(store, "decisions")
    signals.record_throttled(store, "decisions")
    data = read_limiter_metrics(store)
    dec = data["decisions"]
    assert dec.count == 7 and dec.timeouts == 1 and dec.throttled == 2
    assert dec.sum_s == pytest.approx(0.003 + 0.14 + 2.0 + 100.0 + 60.0)
    buckets = dict(dec.cumulative())
    assert buckets["0.005"] == 2 and buckets["0.1"] == 4 and buckets["2.5"] == 5
    assert buckets["60"] == 6 and buckets["+Inf"] == 7  # 100 s is only in +Inf
    counts = [n for _le, n in dec.cumulative()]
    assert counts == sorted(counts)  # cumulative: never decreasing
    assert data["search"].count == 1 and data["search"].throttled == 0


def test_a_worker_writes_limiter_waits_once_a_second_with_the_same_counts() -> None:
    store = fakeredis.FakeRedis()
    reference = fakeredis.FakeRedis()
    waits = signals.LimiterWaits(store, flush_s=3600.0)
    calls = [
        ("decisions", 0.0, False),
        ("decisions", 0.3, False),
        ("decisions", 60.0, True),
        ("search", 0.2, False),
    ]
    for endpoint, waited, timed_out in calls:
        waits.record(endpoint, waited, timed_out=timed_out)
        signals.record_limiter_wait(reference, endpoint, waited, timed_out=timed_out)
    assert not store.exists(signals.METRICS_KEY)  # counted in the process, not written yet
    waits.flush()
    assert read_limiter_metrics(store) == read_limiter_metrics(reference)
    waits.flush()  # nothing new: no write
    assert read_limiter_metrics(store)["decisions"].count == 3
    at_once = signals.LimiterWaits(store, flush_s=0.0)
    at_once.record("agent", 1.0)
    assert read_limiter_metrics(store)["agent"].count == 1


def test_an_idle_worker_still_writes_what_it_counted() -> None:
    """The write does not wait for a next call: a timer makes it once the counts are `flush_s` old."""
    store = fakeredis.FakeRedis()
    waits = signals.LimiterWaits(store, flush_s=0.01)
    waits.record("decisions", 0.5)
    deadline = time.monotonic() + 10
    while not store.exists(signals.METRICS_KEY) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert read_limiter_metrics(store)["decisions"].count == 1


def test_a_metrics_write_failure_never_raises(caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        def pipeline(self, **_: object) -> object:
            raise ConnectionError("redis down")

        def hincrby(self, *_: object) -> object:
            raise ConnectionError("redis down")

    signals.record_limiter_wait(Broken(), "decisions", 0.1)  # type: ignore[arg-type]
    signals.record_throttled(Broken(), "decisions")  # type: ignore[arg-type]
    signals.LimiterWaits(Broken(), flush_s=0.0).record("decisions", 0.1)  # type: ignore[arg-type]
    assert sum("could not record" in r.getMessage() for r in caplog.records) == 3
