"""Structured logs: one line per record, key=value or JSON, carrying the job, item and request ids.

Why contextvars: the ids belong to whatever code is running (a Flask request, a Celery task in a
pool thread), not to the logger, so a `log.info("...")` deep in jobs/ still says which job and item
it was about. `bind` sets them; web/ binds the request id per request, workers/signals.py binds job
and item ids per task.

The upstream API key must never reach a log line (docs/spec.md §1): `RedactFilter` rewrites every record
handled by our handler — message, arguments, exception text — replacing the key and any
`Bearer <token>` credential.

Environment (read here, so every process configures logging the same way):
- `FACTGATE_LOG_LEVEL` (default `INFO`),
- `FACTGATE_LOG_FORMAT`: `kv` (default, `key=value` pairs) or `json` (one JSON object per line).
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import IO, Any

LOG_FIELDS = ("job_id", "item_id", "request_id")
FORMATS = ("kv", "json")
REDACTED = "[redacted]"
# Perplexity keys are ~50 characters; a short test key replaced everywhere would mangle messages.
MIN_SECRET_CHARS = 8
_BEARER = re.compile(r"(?i)\b(bearer)\s+[^\s\"',;}\]]+")
_HANDLER_NAME = "factgate"
_KV_BARE = re.compile(r"^[A-Za-z0-9_.:/@+\-]+$")

_context: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar("factgate_log_context")


def current_context() -> dict[str, str]:
    """The ids bound in this thread/task right now."""
    return dict(_context.get({}))


def bind(**fields: object) -> contextvars.Token[Mapping[str, str]]:
    """Add ids to the log context; `None` values remove a field. Undo with `unbind(token)`."""
    merged = dict(_context.get({}))
    for name, value in fields.items():
        if value is None:
            merged.pop(name, None)
        else:
            merged[name] = str(value)
    return _context.set(merged)


def unbind(token: contextvars.Token[Mapping[str, str]]) -> None:
    """Restore the log context to what it was before the `bind` that returned `token`."""
    _context.reset(token)


@contextmanager
def log_context(**fields: object) -> Iterator[None]:
    """`with log_context(job_id=...):` — the ids apply to every record inside the block."""
    token = bind(**fields)
    try:
        yield
    finally:
        unbind(token)


class ContextFilter(logging.Filter):
    """Copy the bound ids onto each record (`record.job_id` …; None when unbound)."""

    def filter(self, record: logging.LogRecord) -> bool:
        ctx = _context.get({})
        for name in LOG_FIELDS:
            if getattr(record, name, None) is None:
                setattr(record, name, ctx.get(name))
        return True


def redact(text: str, secrets: Iterable[str]) -> str:
    """`text` with every secret and every `Bearer <token>` replaced by `[redacted]`."""
    text = _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    for secret in secrets:
        if secret and len(secret) >= MIN_SECRET_CHARS:
            text = text.replace(secret, REDACTED)
    return text


def secrets_from_env(env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The values that must never be logged: the upstream key and a CLI bearer token."""
    e = os.environ if env is None else env
    return tuple(v for v in (e.get("PERPLEXITY_API_KEY"), e.get("FACTGATE_TOKEN")) if v)


class RedactFilter(logging.Filter):
    """Rewrite the record so no formatter or later handler can print a secret.

    The message is rendered once here (args merged) and the traceback pre-rendered into `exc_text`,
    both redacted; formatters then use those instead of formatting the raw values again.
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self.secrets = tuple(s for s in secrets if s)

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string must not lose the record
            message = f"{record.msg!r} {record.args!r}"
        record.msg = redact(message, self.secrets)
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text, self.secrets)
        if record.stack_info:
            record.stack_info = redact(record.stack_info, self.secrets)
        return True


def _timestamp(record: logging.LogRecord) -> str:
    return datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")


def _fields(record: logging.LogRecord) -> dict[str, object]:
    # The bound ids are whatever the caller put on the record: both formatters write every value as text.
    out: dict[str, object] = {
        "ts": _timestamp(record),
        "level": record.levelname.lower(),
        "logger": record.name,
        "msg": record.getMessage(),
    }
    for name in LOG_FIELDS:
        value = getattr(record, name, None)
        if value is not None:
            out[name] = value
    if record.exc_text:
        out["exc"] = record.exc_text
    elif record.exc_info:
        out["exc"] = logging.Formatter().formatException(record.exc_info)
    return out


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, the bound ids, exc."""

    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(_fields(record), ensure_ascii=False, default=str)


def _kv_value(value: object) -> str:
    text = str(value)
    if text and _KV_BARE.match(text):
        return text
    return json.dumps(text, ensure_ascii=False)


class KeyValueFormatter(logging.Formatter):
    """`ts=… level=info logger=factgate.web msg="…" job_id=… item_id=… request_id=…` on one line."""

    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{k}={_kv_value(v)}" for k, v in _fields(record).items())


class _CurrentStderr:
    """Writes to whatever `sys.stderr` is at the time (test runners and click swap it)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def make_handler(
    fmt: str = "kv", stream: IO[str] | None = None, secrets: Iterable[str] = ()
) -> logging.Handler:
    """A stream handler with the context and redaction filters and the chosen format."""
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    handler: logging.StreamHandler[Any] = logging.StreamHandler(
        stream if stream is not None else _CurrentStderr()
    )
    handler.set_name(_HANDLER_NAME)
    handler.addFilter(ContextFilter())
    handler.addFilter(RedactFilter(secrets))
    handler.setFormatter(JsonFormatter() if fmt == "json" else KeyValueFormatter())
    return handler


def configure_logging(
    level: str | int | None = None,
    fmt: str | None = None,
    *,
    stream: IO[str] | None = None,
    secrets: Iterable[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> logging.Handler:
    """Install factgate's handler on the root logger (replacing one installed earlier).

    Arguments win over the environment; the environment over the defaults (INFO, kv).
    """
    e = os.environ if env is None else env
    chosen_level = level if level is not None else (e.get("FACTGATE_LOG_LEVEL") or "INFO")
    if isinstance(chosen_level, str):
        chosen_level = chosen_level.upper()
    chosen_fmt = (fmt or e.get("FACTGATE_LOG_FORMAT") or "kv").lower()
    handler = make_handler(chosen_fmt, stream, secrets_from_env(e) if secrets is None else secrets)
    root = logging.getLogger()
    for old in list(root.handlers):
        if old.get_name() == _HANDLER_NAME:
            root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(chosen_level)
    return handler
