"""Browser-facing safety for the HTML pages: response headers, the link rule, CSRF and the session key.

- Every response carries a strict Content-Security-Policy (no inline script or style, nothing from
  other origins), so even markup that slipped past escaping could not run. Pages therefore use no
  `style=` attributes and no inline `<script>`; the one script is a static file.
- `safe_href` is the only way data becomes a link target: http(s) URLs with a host, nothing else.
  A `javascript:` or `data:` URL from a search result is shown as plain text instead.
- CSRF: flask-wtf checks a token on the pages' state-changing forms only (the pages blueprint calls
  `protect()` itself, and only once the page session is known to be live: the token is a form field, and
  reading the form means reading the whole body, which no request without a session may make the server
  do — web/pages.py:_guard); the JSON API under /v1 authenticates with bearer tokens, which a browser never
  sends on its own, so it needs no CSRF token and stays exempt. Referer checking is off because the
  pages send `Referrer-Policy: no-referrer`; the session cookie's SameSite=Lax and the token carry it.
- The session cookie is signed with `settings.secret_key`; without one (embedded mode, development) a
  random key is generated once and kept in the instance folder (mode 0600), so sign-ins survive restarts.
  It carries the page session's secret, the CSRF token and flash messages — never the tenant: whether a
  session may be used is decided on the server for every request (jobs/sessions.py, web/page_session.py).
  It is re-sent only when it changes, so a polling page does not keep re-signing it.
- Behind TLS: the cookie is `Secure` whenever the request was https (or always, with
  FACTGATE_COOKIE_SECURE), and https responses carry `Strict-Transport-Security`. Behind a proxy that
  terminates TLS the app sees http unless FACTGATE_TRUST_PROXY lets werkzeug's ProxyFix believe the
  proxy's X-Forwarded-* headers (web/app.py).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import logging
import os
import secrets
import unicodedata
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

from flask import Flask, Response, current_app, has_request_context, request
from flask.sessions import SecureCookieSessionInterface
from flask_wtf.csrf import CSRFProtect  # type: ignore[import-untyped]

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}
LINK_REL = "noopener noreferrer nofollow"
SAFE_SCHEMES = frozenset({"http", "https"})
MAX_HREF_CHARS = 2_048
SECRET_KEY_FILE = "secret_key"  # noqa: S105 - a file name, not a secret
HSTS_MAX_AGE_CONFIG = "FACTGATE_HSTS_MAX_AGE_S"

csrf = CSRFProtect()
log = logging.getLogger("factgate.web")


def safe_href(url: object) -> str | None:
    """`url` when it is safe as a link target (an absolute http or https URL with a host), else None.

    Browsers forgive a lot (leading spaces and control characters, tabs inside the scheme, odd
    Unicode), so anything a browser might read differently from us is refused outright: whitespace,
    control and format characters anywhere, backslashes, and over-long values. The URL returned is the
    input unchanged; autoescaping still applies when it is written into the attribute.
    """
    if not isinstance(url, str) or not url or len(url) > MAX_HREF_CHARS:
        return None
    for ch in url:
        if ch.isspace() or ch == "\\" or unicodedata.category(ch)[0] in ("C", "Z"):
            return None
    try:
        parts = urlsplit(url)
        host = parts.hostname  # parses the netloc: raises on a malformed IPv6 literal or port
        _ = parts.port
    except ValueError:
        return None
    if parts.scheme.lower() not in SAFE_SCHEMES or not host:
        return None
    return url


def report_csp(inline_style: str) -> str:
    """The policy of the downloadable report: its one inline `<style>` allowed by hash, nothing else."""
    digest = base64.b64encode(hashlib.sha256(inline_style.encode("utf-8")).digest()).decode("ascii")
    return (
        f"default-src 'none'; style-src 'sha256-{digest}'; img-src data:; form-action 'none'; "
        "frame-ancestors 'none'; base-uri 'none'"
    )


def set_security_headers(response: Response) -> Response:
    """`after_request` hook: the headers above, unless a view set a stricter policy of its own, and
    HSTS on whatever was served over https (as the app sees it: through ProxyFix when a proxy is trusted).
    """
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    max_age = int(current_app.config.get(HSTS_MAX_AGE_CONFIG) or 0)
    if max_age > 0 and has_request_context() and request.is_secure:
        response.headers.setdefault("Strict-Transport-Security", f"max-age={max_age}")
    return response


class SessionInterface(SecureCookieSessionInterface):
    """Flask's signed-cookie sessions with `Secure` set per request: on whenever served over https
    (`SESSION_COOKIE_SECURE` can force it on behind a proxy that hides the scheme)."""

    def get_cookie_secure(self, app: Flask) -> bool:
        forced = bool(app.config.get("SESSION_COOKIE_SECURE"))
        return forced or (has_request_context() and request.is_secure)


def load_or_create_secret_key(instance_path: Path) -> str:
    """The persisted development key: created once with mode 0600, read back on every start.

    Written to a private temporary file first and then hard-linked into place, so processes starting
    together agree on one key and none ever reads a half-written file: the link either wins or finds
    the winner's complete file.
    """
    instance_path.mkdir(parents=True, exist_ok=True)
    path = instance_path / SECRET_KEY_FILE
    if not path.exists():
        tmp = instance_path / f".{SECRET_KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="ascii") as fh:
                fh.write(secrets.token_urlsafe(48) + "\n")
            with contextlib.suppress(FileExistsError):
                os.link(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    key = path.read_text(encoding="ascii").strip()
    if len(key) < 32:
        raise RuntimeError(f"{path} holds no usable secret key; delete it to generate a new one")
    return key


def init_security(
    app: Flask,
    *,
    secret_key: str | None,
    instance_path: Path,
    embedded: bool,
    session_max_s: int,
    cookie_secure: bool = False,
    hsts_max_age_s: int = 0,
) -> None:
    """Session key and cookie flags, CSRF (pages only), and the headers on every response."""
    if not secret_key:
        if not embedded:
            log.warning(
                "FACTGATE_SECRET_KEY is not set: page sessions are signed with a key kept in %s; set it "
                "when web processes run on more than one machine",
                instance_path,
            )
        secret_key = load_or_create_secret_key(instance_path)
    app.config["SECRET_KEY"] = secret_key
    app.config.update(
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        SESSION_COOKIE_NAME="factgate_session",
        SESSION_COOKIE_SECURE=cookie_secure,
        # The browser may drop the cookie when the server would refuse it anyway (the absolute timeout);
        # the server-side check is what counts.
        PERMANENT_SESSION_LIFETIME=timedelta(seconds=session_max_s),
        # Re-send the cookie only when its content changes: a progress poll must not re-sign it.
        SESSION_REFRESH_EACH_REQUEST=False,
        # The pages blueprint calls csrf.protect() itself, so /v1 (bearer tokens) is never checked.
        WTF_CSRF_CHECK_DEFAULT=False,
        # Referer checking cannot work with `Referrer-Policy: no-referrer`; see the module docstring.
        WTF_CSRF_SSL_STRICT=False,
        # Tokens are bound to the signed cookie, which is only accepted while its server-side session lives.
        WTF_CSRF_TIME_LIMIT=None,
    )
    app.config[HSTS_MAX_AGE_CONFIG] = hsts_max_age_s
    app.session_interface = SessionInterface()
    csrf.init_app(app)
    app.after_request(set_security_headers)
