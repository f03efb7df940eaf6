"""The retry policy as pure logic: which outcomes retry and how long each wait is."""

from __future__ import annotations

import email.utils

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clients.retry import (
    MAX_WAIT_S,
    RETRYABLE_STATUSES,
    RetryPolicy,
    parse_retry_after,
    retryable_exception,
    retryable_status,
)

NOW = 1_800_000_000.0  # a fixed "wall clock" for HTTP-date Retry-After


def http_date(offset_s: float) -> str:
    return email.utils.formatdate(NOW + offset_s, usegmt=True)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("3", 3.0),
        (" 7 ", 7.0),
        ("0", 0.0),
        ("600", 600.0),  # parsed as told; the cap is the policy's job
        (http_date(12), 12.0),
        (http_date(-60), 0.0),  # a date in the past means "now"
        (email.utils.formatdate(NOW + 5), 5.0),  # "-0000" zone: parses naive, read as GMT
        (None, None),
        ("", None),
        ("-5", None),
        ("2.5", None),  # not whole seconds
        ("soon", None),
        ("²", None),  # a Unicode digit is not a whole number of seconds
    ],
)
def test_parse_retry_after(value: str | None, seconds: float | None) -> None:
    assert parse_retry_after(value, NOW) == (pytest.approx(seconds) if seconds is not None else None)


def test_backoff_without_retry_after_is_1_2_4_at_the_jitter_midpoint() -> None:
    policy = RetryPolicy()
    assert [policy.wait_s(i, None, NOW, 0.5) for i in range(3)] == [1.0, 2.0, 4.0]


def test_jitter_is_plus_or_minus_a_quarter() -> None:
    policy = RetryPolicy()
    assert [policy.backoff_s(i, 0.0) for i in range(3)] == [0.75, 1.5, 3.0]
    assert policy.backoff_s(2, 0.999999) == pytest.approx(5.0, abs=1e-4)
    assert RetryPolicy(jitter=0.0).backoff_s(1, 0.0) == 2.0


@settings(max_examples=150)
@given(retry_index=st.integers(0, 12), rand=st.floats(0.0, 1.0, exclude_max=True))
def test_backoff_stays_within_jitter_band_and_cap(retry_index: int, rand: float) -> None:
    wait = RetryPolicy().backoff_s(retry_index, rand)
    base = 2.0**retry_index
    assert 0.0 <= wait <= MAX_WAIT_S
    assert min(0.75 * base, MAX_WAIT_S) <= wait <= min(1.25 * base, MAX_WAIT_S)


@pytest.mark.parametrize(
    ("retry_after", "wait"),
    [("3", 3.0), ("600", MAX_WAIT_S), (http_date(45), MAX_WAIT_S), (http_date(4), 4.0), ("-5", 2.0)],
)
def test_retry_after_wins_over_backoff_and_is_capped(retry_after: str, wait: float) -> None:
    # retry index 1: the backoff would be 2 s; a usable Retry-After replaces it, unjittered
    assert RetryPolicy().wait_s(1, retry_after, NOW, 0.0 if retry_after != "-5" else 0.5) == pytest.approx(
        wait
    )


def test_retry_after_is_not_jittered() -> None:
    policy = RetryPolicy()
    assert {policy.wait_s(0, "3", NOW, r) for r in (0.0, 0.3, 0.99)} == {3.0}


def test_bound_is_three_retries_four_posts() -> None:
    policy = RetryPolicy()
    assert policy.max_attempts == 4
    assert [policy.can_retry(sent) for sent in range(1, 6)] == [True, True, True, False, False]
    assert not RetryPolicy(max_retries=0).can_retry(1)


def test_only_429_and_overload_5xx_retry() -> None:
    retrying = {status for status in range(100, 600) if retryable_status(status)}
    assert retrying == set(RETRYABLE_STATUSES) == {429, 500, 502, 503, 504}


REQUEST = httpx.Request("POST", "https://api.perplexity.ai/v1/decisions")


@pytest.mark.parametrize(
    ("error", "retries"),
    [
        (httpx.ReadTimeout("slow", request=REQUEST), True),
        (httpx.ConnectTimeout("slow", request=REQUEST), True),
        (httpx.PoolTimeout("busy", request=REQUEST), True),
        (httpx.ConnectError("refused", request=REQUEST), True),
        (httpx.ReadError("reset", request=REQUEST), True),
        (httpx.RemoteProtocolError("peer closed", request=REQUEST), True),
        (httpx.UnsupportedProtocol("ftp", request=REQUEST), False),
        (httpx.LocalProtocolError("bad header", request=REQUEST), False),
        (httpx.TooManyRedirects("loop", request=REQUEST), False),
        (ValueError("not transport"), False),
    ],
)
def test_transient_transport_errors_retry(error: BaseException, retries: bool) -> None:
    assert retryable_exception(error) is retries


@pytest.mark.parametrize(
    "kwargs", [{"max_retries": -1}, {"jitter": 1.0}, {"jitter": -0.1}, {"max_wait_s": -1}]
)
def test_policy_rejects_nonsense(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)
