"""One TLS trust store per process, shared by every HTTP client factgate makes.

Why: httpx builds a fresh `ssl.SSLContext` for every client and every transport it makes, and loading
certifi's bundle into it costs ~37 ms of CPU here (`httpx.create_ssl_context()`). The upstream client
makes one transport per worker thread, each webhook delivery makes a client, and the CLI makes one per
command: with one context per process that cost is paid once. An `SSLContext` is safe to share between
threads and connections; what it trusts (certifi, or `SSL_CERT_FILE` / `SSL_CERT_DIR` as httpx reads
them) is settled when it is first asked for.
"""

from __future__ import annotations

import functools
import ssl

import httpx


@functools.cache
def trust_store(*, trust_env: bool = True) -> ssl.SSLContext:
    """The process's client-side TLS context (verifying certificates and host names, as httpx's default).

    `trust_env=False` is the one that ignores `SSL_CERT_FILE` / `SSL_CERT_DIR`, for a client made with
    httpx's `trust_env=False` (the webhook sender: nothing from the environment steers where it connects
    or whom it trusts). Two threads asking first may both build one; either is right and one is kept."""
    return httpx.create_ssl_context(trust_env=trust_env)
