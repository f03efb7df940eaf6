"""When a request has reached the peer: the wire gate's send time as an upper bound on arrival.

Why: the wire gate (workers/limiter.py, docs/architecture.md "The wire gate") scores each request by when
it left and relies on the time from "left" to "counted upstream" differing between requests by less than
its margin (10 ms). "Written to the socket" is not "left" when a queue sits between the socket and the
peer: behind a slow link (a token bucket holding up to 500 ms of data, in the multi-host drill's
slow-link scenario) a request written at t reaches the upstream up to half a second later, a fast host's
requests written meanwhile arrive first, and the upstream counts 11 in its window: a 429, and a pause for
every worker. So once the body is written the client waits until the peer has acknowledged every byte
written on the connection (Linux TCP_INFO: no segment unacknowledged, nothing left unsent) and only then
reports the request as gone: the peer's kernel had the whole request by then, so the reported time is an
upper bound on its arrival whatever queues lay on the way. On an idle path the acknowledgement comes back
within the round trip (loopback: tens of µs); a delayed ACK makes the bound later, which only makes the
gate stricter (never a 429).

The wait is bounded (`ACK_WAIT_S`): past it, or where TCP_INFO cannot be read (not Linux, not TCP, a
kernel too old to report unsent bytes), the time of the write is used as before. The waiting costs the
request nothing: the upstream cannot answer before it has the request, so the response is not yet there.

The socket is found through the connection's network stream: `AckingBackend` wraps httpcore's backend so
that every stream it opens notes itself in a thread-local when written to, and the trace hook that runs
right after the body's write in the same thread reads it (`last_written_socket`).

The same streams also put a request on the wire in one write. httpcore writes the request's headers and
then its body as two writes, and with `TCP_NODELAY` (which httpcore sets) each becomes a segment of its
own: two `send` calls, two wake-ups of the server, two acknowledgements. A stream here keeps what it is
given until the request is complete — the first read (the response's headers), or `await_arrival` at the
end of the body — and sends it with one `send`, as `http.client` does for a body it is handed whole. Nothing
is sent later than before in any way that matters: the wire gate decides before the first byte (the
headers' trace event), and arrival is awaited after this flush. What the one write saves in client CPU is
measured in docs/profiles/README.md (round 3, with bench/ceiling.py).
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import httpcore
import httpx

# struct tcp_info (linux/tcp.h): tcpi_unacked is the u32 at byte 24 (segments sent, not acknowledged);
# tcpi_notsent_bytes the u32 at byte 144 (bytes written, not yet sent; Linux 4.6 and later).
_UNACKED_AT = 24
_NOTSENT_AT = 144
TCP_INFO_LEN = 256  # asked for; the kernel returns what it has (232 bytes on Linux 6.x)
ACK_WAIT_S = 4.0  # past this, the time then stands; below the gate's in-flight bound (5 s)
_POLL_FIRST_S = 0.0002
_POLL_MAX_S = 0.005

_TCP_INFO: int | None = getattr(socket, "TCP_INFO", None)
_local = threading.local()


def all_acked(info: bytes) -> bool | None:
    """From a TCP_INFO buffer: True when every byte written has been acknowledged by the peer, False
    when some is unsent or unacknowledged, None when the buffer is too short to say (an old kernel)."""
    if len(info) < _NOTSENT_AT + 4:
        return None
    (unacked,) = struct.unpack_from("=I", info, _UNACKED_AT)
    (notsent,) = struct.unpack_from("=I", info, _NOTSENT_AT)
    return bool(unacked == 0 and notsent == 0)


class _Sock(Protocol):
    def getsockopt(self, level: int, optname: int, buflen: int, /) -> bytes: ...


def wait_acked(
    sock: _Sock | None,
    *,
    max_wait_s: float = ACK_WAIT_S,
    sleep: Callable[[float], object] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> bool:
    """Wait (polling TCP_INFO: first after 0.2 ms, growing to 5 ms) until the peer has acknowledged every
    byte written on `sock`. True when it did; False when it could not be known (no socket, no TCP_INFO,
    a short buffer, an error) or not within `max_wait_s`: the caller then keeps the write time."""
    if sock is None or _TCP_INFO is None:
        return False
    deadline = clock() + max_wait_s
    step = _POLL_FIRST_S
    while True:
        try:
            acked = all_acked(sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, TCP_INFO_LEN))
        except (OSError, TypeError, ValueError):
            return False
        if acked is None:
            return False
        if acked:
            return True
        left = deadline - clock()
        if left <= 0:
            return False
        sleep(min(step, left))
        step = min(_POLL_MAX_S, step * 2)


def last_written_socket() -> Any:
    """The socket this thread last wrote to through an `AckingBackend` stream since `forget_written`
    (None if none). What that stream still holds is sent first: the request is on the wire once this
    returns."""
    stream: _NotingStream | None = getattr(_local, "stream", None)
    if stream is None:
        return None
    stream.flush()
    return stream.socket


def forget_written() -> None:
    """Before a request's first byte: a socket noted for an earlier request is not this one's."""
    _local.stream = None


def await_arrival() -> bool:
    """After a request's last byte: wait until the connection this thread wrote it on is acknowledged."""
    return wait_acked(last_written_socket())


# A stream sends what it holds once it holds this much, whatever comes next (a large body goes out in
# pieces of about this size, as it would have without the holding).
FLUSH_BYTES = 64 * 1024


class _NotingStream(httpcore.NetworkStream):
    """A network stream that holds what it is given until the request is whole, then writes it at once,
    and notes itself as this thread's last written stream (module docstring)."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner
        self._held: list[bytes] = []
        self._held_bytes = 0
        self._timeout: float | None = None

    @property
    def socket(self) -> Any:
        return self._inner.get_extra_info("socket")

    def flush(self) -> None:
        """Send what is held, in one write."""
        if not self._held:
            return
        data = self._held[0] if len(self._held) == 1 else b"".join(self._held)
        self._held, self._held_bytes = [], 0
        self._inner.write(data, self._timeout)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        self.flush()  # the response comes only after the whole request: it must be on the wire by now
        return self._inner.read(max_bytes, timeout)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        _local.stream = self
        if not buffer:
            return
        self._held.append(buffer)
        self._held_bytes += len(buffer)
        self._timeout = timeout
        if self._held_bytes >= FLUSH_BYTES:
            self.flush()

    def close(self) -> None:
        self._held, self._held_bytes = [], 0  # a request cut off by the close is not sent half
        self._inner.close()

    def start_tls(
        self,
        ssl_context: Any,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        self.flush()  # a proxy's CONNECT, say, goes out before the handshake
        return _NotingStream(self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class AckingBackend(httpcore.NetworkBackend):
    """httpcore's network backend whose streams note their socket when written to (module docstring)."""

    def __init__(self, inner: httpcore.NetworkBackend | None = None) -> None:
        self._inner = inner or httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        return _NotingStream(self._inner.connect_tcp(host, port, timeout, local_address, socket_options))

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        return _NotingStream(self._inner.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def acking_transport(**kwargs: Any) -> httpx.HTTPTransport:
    """httpx's default transport with an `AckingBackend` (httpx builds its pool without a way to pass a
    backend; where its pool is not the one expected, the transport is returned as it is and reports
    fall back to the write time)."""
    transport = httpx.HTTPTransport(**kwargs)
    pool = getattr(transport, "_pool", None)
    if isinstance(pool, httpcore.ConnectionPool) and hasattr(pool, "_network_backend"):
        pool._network_backend = AckingBackend(pool._network_backend)
    return transport
