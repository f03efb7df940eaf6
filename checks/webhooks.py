"""Webhook rules, pure: which URLs are accepted, how a message is signed, when it is tried again.

Signing follows the Standard Webhooks convention (https://www.standardwebhooks.com): the headers
`webhook-id`, `webhook-timestamp` (Unix seconds) and `webhook-signature`, whose value is `v1,` followed by
the base64 HMAC-SHA256 of `"{id}.{timestamp}.{body}"` keyed by the secret's bytes. A secret is written
`whsec_` + base64 of 32 random bytes; the key is those bytes (the part after `whsec_`, base64-decoded).
`tests/unit/test_webhooks.py` checks `sign` against the reference vector of the Standard Webhooks
libraries.

Which addresses a webhook may reach is decided where it is sent (clients/webhooks.py resolves the host and
refuses private, loopback, link-local and other special addresses); intake only checks the URL's shape,
and that its host can be written in ASCII (`ascii_host`: an internationalized name goes out in its IDNA
`xn--` form, in the `Host` header and to the resolver).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import unicodedata
from urllib.parse import urlsplit

import idna

MAX_URL_CHARS = 2_048
SECRET_PREFIX = "whsec_"  # noqa: S105 - the documented prefix of a signing secret, not a secret
SECRET_BYTES = 32
WEBHOOK_SCHEMES = frozenset({"http", "https"})

# Retries: the first try is at once, then waits of RETRY_BASE_S × 2^(n-1) (10 s, 20 s, 40 s, ... by
# default), each at most MAX_WAIT_S, until the delivery's retry window (24 h by default) has passed.
MAX_WAIT_S = 2 * 3600.0


class WebhookUrlError(ValueError):
    """A URL that cannot be a webhook target; the message says why."""


def ascii_host(host: str) -> str:
    """`host` as it goes on the wire: unchanged when ASCII, else its IDNA (UTS 46) `xn--` form, lower
    case. WebhookUrlError when it has no such form (e.g. a label of symbols, or longer than 63 characters)."""
    if host.isascii():
        return host
    try:
        return idna.encode(host, uts46=True).decode("ascii")
    except (idna.IDNAError, UnicodeError) as exc:
        why = f"has a host that cannot be written as an internationalized name ({exc})"
        raise WebhookUrlError(why) from None


def validate_webhook_url(value: object) -> str:
    """The URL unchanged when it can be a webhook target: an absolute http(s) URL with a host, no user name
    or password in it, no whitespace or control characters, at most MAX_URL_CHARS. Else WebhookUrlError."""
    if not isinstance(value, str) or not value:
        raise WebhookUrlError("must be an http or https URL")
    if len(value) > MAX_URL_CHARS:
        raise WebhookUrlError(f"must be at most {MAX_URL_CHARS} characters, got {len(value)}")
    for ch in value:
        if ch.isspace() or ch == "\\" or unicodedata.category(ch)[0] in ("C", "Z"):
            raise WebhookUrlError("must not contain spaces, backslashes or control characters")
    try:
        parts = urlsplit(value)
        host = parts.hostname
        _ = parts.port  # a malformed port raises here
    except ValueError as exc:
        raise WebhookUrlError(f"is not a valid URL ({exc})") from None
    if parts.scheme.lower() not in WEBHOOK_SCHEMES:
        raise WebhookUrlError(f"must be an http or https URL, got scheme {parts.scheme or 'none'!r}")
    if not host:
        raise WebhookUrlError("must name a host")
    ascii_host(host)
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise WebhookUrlError("must not carry a user name or password (the request is signed instead)")
    if parts.fragment:
        raise WebhookUrlError("must not have a #fragment")
    return value


def new_secret() -> str:
    """A fresh signing secret: `whsec_` + base64 of 32 random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode("ascii")


def secret_key(secret: str) -> bytes:
    """The HMAC key of a secret (with or without its `whsec_` prefix)."""
    raw = secret.removeprefix(SECRET_PREFIX)
    try:
        return base64.b64decode(raw, validate=True)
    except binascii.Error:
        raise ValueError("a webhook secret is `whsec_` followed by base64") from None


def sign(secret: str, msg_id: str, timestamp: int, body: str | bytes) -> str:
    """The `webhook-signature` header value for one attempt: `v1,<base64 HMAC-SHA256>`."""
    payload = body.encode("utf-8") if isinstance(body, str) else body
    signed = f"{msg_id}.{timestamp}.".encode() + payload
    digest = hmac.new(secret_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def verify(secret: str, msg_id: str, timestamp: int, body: str | bytes, header: str) -> bool:
    """True when any `v1,` signature in `header` (space-separated) matches; constant-time comparison."""
    expected = sign(secret, msg_id, timestamp, body)
    return any(hmac.compare_digest(expected, candidate) for candidate in header.split(" ") if candidate)


def retry_wait_s(attempt: int, base_s: float) -> float:
    """How long to wait after failed attempt number `attempt` (1-based) before the next one."""
    return min(MAX_WAIT_S, base_s * 2.0 ** max(0, attempt - 1))
