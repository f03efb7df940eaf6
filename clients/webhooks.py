"""Sending one webhook request, safely: the host is resolved once, every address it resolves to is checked,
and the connection goes to the checked address — never to whatever a second DNS answer would say.

- Refused unless `allow_private`: private, loopback, link-local, multicast, reserved, unspecified and other
  addresses that are not globally routable, in IPv4 and IPv6, including IPv4 inside IPv6 (IPv4-mapped
  `::ffff:a.b.c.d`, NAT64 `64:ff9b::/96` (all of it: Python counts it reserved), 6to4 `2002::/16`,
  Teredo). A host with any such address is refused whole: one public answer among private ones is no
  reason to trust it.
- Pinned: the request is made to the checked IP literal; the `Host` header carries the URL's host, and
  over https the TLS server name (SNI) and the certificate check use the URL's host too, so the
  certificate must still match the name (httpx's `sni_hostname` extension).
- Redirects are not followed (a 3xx is a failed attempt), proxies from the environment are ignored, and
  the response body is never read.
- One deadline bounds the whole attempt (connect, TLS, sending, and the response's status line and
  headers), not each read: httpx's timeouts bound every read alone, so a receiver sending a byte every few
  seconds would hold the connection for ever. A watchdog shuts the connection's socket down when the
  deadline passes, which ends any read or write in progress.
- An internationalized host goes out in its IDNA `xn--` form (resolver, `Host` header, TLS name); a host
  without one is refused. Any other exception ends the attempt as a failure with its reason, never an
  exception to the caller.

Imports nothing of ours: the caller signs the body and decides what a result means.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import idna

from clients.tls import trust_store

USER_AGENT = "factgate-webhooks/1"
MAX_ERROR_CHARS = 500
NAT64 = ipaddress.IPv6Network("64:ff9b::/96")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[..., Sequence[Any]]


class WebhookRefusedError(Exception):
    """The URL may not be sent to (an address outside the public internet, a malformed URL). Permanent."""


class WebhookResolveError(Exception):
    """The host did not resolve (may be temporary)."""


def wire_host(host: str) -> str:
    """The host as the resolver, the `Host` header and TLS see it: its IDNA `xn--` form when not ASCII."""
    if host.isascii():
        return host
    try:
        return idna.encode(host, uts46=True).decode("ascii")
    except (idna.IDNAError, UnicodeError) as exc:
        why = f"the host cannot be written as an internationalized name ({exc})"
        raise WebhookRefusedError(why) from None


def address_refusal(ip: IPAddress) -> str | None:
    """Why a webhook may not go to `ip` (e.g. "loopback"), or None when it is a public address."""
    if isinstance(ip, ipaddress.IPv6Address):
        mapped = ip.ipv4_mapped
        if mapped is not None:
            inner = address_refusal(mapped)
            return f"IPv4-mapped {inner}" if inner else None
        if ip in NAT64:
            inner = address_refusal(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
            if inner:
                return f"NAT64 of a {inner} address"
        if ip.sixtofour is not None:
            inner = address_refusal(ip.sixtofour)
            if inner:
                return f"6to4 of a {inner} address"
        if ip.teredo is not None:
            for part in ip.teredo:
                inner = address_refusal(part)
                if inner:
                    return f"Teredo of a {inner} address"
    for reason, test in (
        ("unspecified", ip.is_unspecified),
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("multicast", ip.is_multicast),
        ("private", ip.is_private),
        ("reserved", ip.is_reserved),
        ("site-local", isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local),
    ):
        if test:
            return reason
    if not ip.is_global:
        return "not globally routable"
    return None


@dataclass(frozen=True)
class Target:
    """Where one request goes: the URL rewritten to the checked address, and the names the server sees."""

    url: str  # the request URL with the host replaced by the checked IP literal
    address: str
    host_header: str
    sni_hostname: str | None  # https only: the name TLS and the certificate check use


def resolve(host: str, port: int, resolver: Resolver = socket.getaddrinfo) -> list[IPAddress]:
    """Every address `host` resolves to (an IP literal resolves to itself), in the resolver's order."""
    try:
        return [ipaddress.ip_address(host.strip("[]"))]
    except ValueError:
        pass
    try:
        infos = resolver(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise WebhookResolveError(f"{host} did not resolve ({exc})") from None
    out: list[IPAddress] = []
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if address not in out:
            out.append(address)
    if not out:
        raise WebhookResolveError(f"{host} resolved to no address")
    return out


def prepare(url: str, *, allow_private: bool, resolver: Resolver = socket.getaddrinfo) -> Target:
    """Resolve and check `url`'s host once; the Target connects to the first address, checked."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise WebhookRefusedError(f"not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not host:
        raise WebhookRefusedError("only http and https URLs with a host are sent to")
    if parts.username is not None or parts.password is not None:
        raise WebhookRefusedError("URLs with a user name or password are not sent to")
    host = wire_host(host)
    addresses = resolve(host, port, resolver)
    if not allow_private:
        for address in addresses:
            reason = address_refusal(address)
            if reason:
                raise WebhookRefusedError(
                    f"{host} resolves to {address}, a {reason} address: webhooks are only sent to public "
                    "addresses (FACTGATE_WEBHOOK_ALLOW_PRIVATE=1 lifts this)"
                )
    chosen = addresses[0]
    literal = f"[{chosen}]" if chosen.version == 6 else str(chosen)
    netloc = f"{literal}:{parts.port}" if parts.port else literal
    default_port = parts.port is None or parts.port == (443 if parts.scheme == "https" else 80)
    host_header = host if default_port else f"{host}:{port}"
    if ":" in host and not host.startswith("["):  # an IPv6 literal host
        host_header = f"[{host}]" if default_port else f"[{host}]:{port}"
    return Target(
        url=urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, "")),
        address=str(chosen),
        host_header=host_header,
        sni_hostname=host if parts.scheme == "https" else None,
    )


@dataclass(frozen=True)
class SendResult:
    """What one attempt came to. `status_code` is None when no response came; `permanent` says the URL
    will never be sent to as it stands (refused), so retrying is pointless."""

    status_code: int | None
    error: str | None
    duration_ms: float
    permanent: bool = False
    address: str | None = None

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


def _cut(text: str) -> str:
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"


class Watchdog:
    """Shuts a connection's socket down at a wall-clock deadline, ending whatever read or write is in
    progress on it (a blocked `recv` returns at once). httpcore reports each new connection through the
    documented `trace` request extension (`connection.connect_tcp.complete`), which is how it learns the
    socket; a connection made after the deadline is shut at once."""

    def __init__(self, seconds: float) -> None:
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self.expired = False
        self._timer = threading.Timer(max(0.0, seconds), self._expire)
        self._timer.daemon = True

    def __enter__(self) -> Watchdog:
        self._timer.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._timer.cancel()

    def trace(self, event: str, info: Mapping[str, Any]) -> None:
        """The `trace` extension's callback."""
        if event != "connection.connect_tcp.complete":
            return
        stream = info.get("return_value")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if not isinstance(sock, socket.socket):
            return
        with self._lock:
            self._sockets.append(sock)
            expired = self.expired
        if expired:
            _shut(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shut(sock)


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed: nothing is waiting on it
        sock.shutdown(socket.SHUT_RDWR)


def send(
    url: str,
    body: bytes,
    headers: Mapping[str, str],
    *,
    allow_private: bool,
    connect_timeout_s: float,
    timeout_s: float,
    resolver: Resolver = socket.getaddrinfo,
    transport: httpx.BaseTransport | None = None,
    verify: ssl.SSLContext | bool = True,
) -> SendResult:
    """POST `body` to `url` once (see the module docstring); never raises.

    `timeout_s` bounds the whole attempt from the first connect to the response's headers;
    `connect_timeout_s` bounds the connect alone. `resolver`, `transport` and `verify` (the TLS trust
    store) are for tests; the defaults are the system's resolver, a fresh connection and the default CA
    bundle."""
    started = time.monotonic()

    def took() -> float:
        return round((time.monotonic() - started) * 1000.0, 1)

    try:
        target = prepare(url, allow_private=allow_private, resolver=resolver)
    except WebhookRefusedError as exc:
        return SendResult(None, _cut(f"refused: {exc}"), took(), permanent=True)
    except WebhookResolveError as exc:
        return SendResult(None, _cut(str(exc)), took())
    except Exception as exc:  # whatever else a URL can provoke is a failed attempt, with its reason
        return SendResult(None, _cut(f"{type(exc).__name__} preparing the request: {exc}"), took())
    try:
        return _post(
            target,
            body,
            headers,
            connect_timeout_s=connect_timeout_s,
            timeout_s=timeout_s,
            transport=transport,
            verify=verify,
            took=took,
        )
    except Exception as exc:
        failure = _cut(f"{type(exc).__name__} sending to {target.address}: {exc}")
        return SendResult(None, failure, took(), address=target.address)


def _post(
    target: Target,
    body: bytes,
    headers: Mapping[str, str],
    *,
    connect_timeout_s: float,
    timeout_s: float,
    transport: httpx.BaseTransport | None,
    verify: ssl.SSLContext | bool,
    took: Callable[[], float],
) -> SendResult:
    request_headers = {
        **headers,
        "Host": target.host_header,
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
    }
    # Each read and write is bounded by the whole attempt's time too, so a silent receiver ends it by the
    # usual timeout, and the watchdog ends a trickling one.
    timeout = httpx.Timeout(timeout_s, connect=min(connect_timeout_s, timeout_s))
    with Watchdog(timeout_s) as watchdog:
        extensions: dict[str, object] = {"trace": watchdog.trace}
        if target.sni_hostname:
            extensions["sni_hostname"] = target.sni_hostname
        try:
            with (
                httpx.Client(
                    timeout=timeout,
                    follow_redirects=False,
                    trust_env=False,
                    transport=transport,
                    verify=trust_store(trust_env=False) if verify is True else verify,
                ) as client,
                client.stream(
                    "POST", target.url, content=body, headers=request_headers, extensions=extensions
                ) as response,
            ):
                status = response.status_code  # the body is never read
        except httpx.ConnectTimeout:
            failure = f"no connection to {target.address} within {min(connect_timeout_s, timeout_s):g} s"
            return SendResult(None, failure, took(), address=target.address)
        except (httpx.TimeoutException, httpx.HTTPError) as exc:
            if watchdog.expired or isinstance(exc, httpx.TimeoutException):
                failure = f"no complete response from {target.address} within {timeout_s:g} s"
            else:
                failure = _cut(f"{type(exc).__name__} talking to {target.address}: {exc}")
            return SendResult(None, failure, took(), address=target.address)
    error: str | None = None
    if 300 <= status < 400:
        error = f"HTTP {status}: a redirect, which is not followed"
    elif not 200 <= status < 300:
        error = f"HTTP {status}"
    return SendResult(status, error, took(), address=target.address)
