"""Keep the API key out of every text the client surfaces.

Upstream bodies, proxies and exception messages can echo request headers back; anything we
put in an error, a log line or a record passes through `redact` first.
"""

from __future__ import annotations

import re

REDACTED = "[redacted]"
# Short keys are not real Perplexity keys (those are ~50 characters); replacing a one-letter
# test key everywhere would mangle messages without protecting anything.
MIN_KEY_CHARS = 8
_BEARER = re.compile(r"(?i)\b(bearer)\s+[^\s\"',;}\]]+")


def redact(text: str, secret: str | None) -> str:
    """Return `text` with `secret` and any `Bearer <token>` credential replaced."""
    text = _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    if secret and len(secret) >= MIN_KEY_CHARS:
        text = text.replace(secret, REDACTED)
    return text


def one_line(text: str, limit: int = 300) -> str:
    """Collapse whitespace to single spaces and truncate, so an error stays one readable line."""
    collapsed = " ".join(text.split())
    if len(collapsed) <= limit:
        return collapsed
    return collapsed[: limit - 1].rstrip() + "…"
