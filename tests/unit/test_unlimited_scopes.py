"""An unlimited scope's 429 check (workers/context.py:UnlimitedScopes): one Redis read per scope per
`max_age_s` instead of one per call; a block set elsewhere is seen once the read is that old, one set here at
once, and a block that ends is over without another read."""

from __future__ import annotations

import time

import fakeredis
import pytest

from workers.context import UnlimitedScopes
from workers.limiter import RateLimiter


@pytest.fixture
def limiters() -> tuple[RateLimiter, RateLimiter]:
    server = fakeredis.FakeServer()
    return RateLimiter(fakeredis.FakeRedis(server=server)), RateLimiter(fakeredis.FakeRedis(server=server))


def _counting(limiter: RateLimiter, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    reads: list[str] = []
    real = limiter.state

    def state(scope: str):  # type: ignore[no-untyped-def]
        reads.append(scope)
        return real(scope)

    monkeypatch.setattr(limiter, "state", state)
    return reads


def test_a_free_scope_is_read_once_per_max_age(
    limiters: tuple[RateLimiter, RateLimiter], monkeypatch: pytest.MonkeyPatch
) -> None:
    mine, _ = limiters
    reads = _counting(mine, monkeypatch)
    scopes = UnlimitedScopes(mine, max_age_s=0.2)
    assert all(scopes.clear("k:decisions") for _ in range(50))
    assert reads == ["k:decisions"]
    time.sleep(0.25)
    assert scopes.clear("k:decisions") and len(reads) == 2


def test_another_processes_block_is_seen_within_max_age(limiters: tuple[RateLimiter, RateLimiter]) -> None:
    mine, other = limiters
    scopes = UnlimitedScopes(mine, max_age_s=0.1)
    assert scopes.clear("k:decisions")
    other.block("k:decisions", 5.0)
    time.sleep(0.12)
    assert not scopes.clear("k:decisions")  # the caller goes through acquire, which waits the block out


def test_a_block_set_here_is_seen_at_once_and_its_end_needs_no_read(
    limiters: tuple[RateLimiter, RateLimiter], monkeypatch: pytest.MonkeyPatch
) -> None:
    mine, _ = limiters
    scopes = UnlimitedScopes(mine, max_age_s=30.0)
    assert scopes.clear("k:decisions")
    mine.block("k:decisions", 0.1)
    scopes.forget("k:decisions")  # what on_throttled does after its block
    assert not scopes.clear("k:decisions")
    reads = _counting(mine, monkeypatch)
    time.sleep(0.15)
    assert scopes.clear("k:decisions") and reads == []
