"""One TLS trust store per process (clients/tls.py): building one costs ~37 ms of CPU, and the upstream
client, each webhook delivery and the CLI would otherwise build one per thread, delivery or command."""

from __future__ import annotations

import ssl
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from cli.client import ApiClient
from clients import PerplexityClient
from clients.tls import trust_store
from tests.unit.test_client_perplexity import KEY, claim_body, local_upstream


@pytest.fixture
def contexts_built(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[ssl.SSLContext]]:
    """Every SSLContext built through the standard library from here on (httpx builds its own with
    `ssl.create_default_context`), with the process's trust store forgotten first."""
    built: list[ssl.SSLContext] = []
    real = ssl.create_default_context

    def counting(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        context = real(*args, **kwargs)
        built.append(context)
        return context

    trust_store.cache_clear()
    monkeypatch.setattr(ssl, "create_default_context", counting)
    yield built
    trust_store.cache_clear()


def test_the_trust_store_verifies_like_httpx_default() -> None:
    context = trust_store()
    assert context is trust_store()
    assert trust_store(trust_env=False) is trust_store(trust_env=False) is not context  # the webhooks' own
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.cert_store_stats()["x509_ca"] > 0  # a CA bundle is loaded


def test_every_thread_of_the_upstream_client_and_the_cli_share_one_context(
    contexts_built: list[ssl.SSLContext],
) -> None:
    with local_upstream(lambda _handler: None, keep_alive=True) as port:
        # own transports with a gate (one per thread) and without (httpx's default): both kinds
        gated = PerplexityClient(f"http://127.0.0.1:{port}", KEY, max_retries=0, before_send=lambda _e: None)
        plain = PerplexityClient(f"http://127.0.0.1:{port}", KEY, max_retries=0)
        try:
            threads = [
                threading.Thread(target=lambda c=client: c.decide(claim_body()))
                for client in (gated, plain)
                for _ in range(3)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        finally:
            gated.close()
            plain.close()
    ApiClient("http://127.0.0.1:9", "fg_token").close()
    assert len(contexts_built) == 1
    assert contexts_built[0] is trust_store()
