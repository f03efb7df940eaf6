"""clients/wire_ack.py: a request is reported as gone only once the peer has acknowledged all of it.

The TCP_INFO parsing and the bounded wait run on fakes (a socket whose TCP_INFO changes as the fake clock
moves), so nothing here sleeps; one test reads a real loopback socket's TCP_INFO on Linux, where the
peer's kernel acknowledges at once.
"""

from __future__ import annotations

import socket
import struct
import sys
import threading

import httpcore
import httpx
import pytest

from clients import wire_ack
from clients.wire_ack import AckingBackend, acking_transport, all_acked, last_written_socket, wait_acked


def tcp_info(unacked: int, notsent: int, length: int = 232) -> bytes:
    buf = bytearray(length)
    struct.pack_into("=I", buf, 24, unacked)
    if length >= 148:
        struct.pack_into("=I", buf, 144, notsent)
    return bytes(buf)


def test_all_acked_reads_unacked_segments_and_unsent_bytes() -> None:
    assert all_acked(tcp_info(0, 0)) is True
    assert all_acked(tcp_info(1, 0)) is False  # sent, not acknowledged (queued behind a slow link)
    assert all_acked(tcp_info(0, 700)) is False  # not even sent: unacked alone would say "acked"
    assert all_acked(tcp_info(0, 0, length=104)) is None  # an old kernel: no notsent_bytes, cannot say


class FakeSock:
    """TCP_INFO that reports `unacked` segments until the fake clock reaches `acked_at`."""

    def __init__(self, clock: list[float], acked_at: float, *, length: int = 232) -> None:
        self.clock = clock
        self.acked_at = acked_at
        self.length = length
        self.asked = 0

    def getsockopt(self, level: int, optname: int, buflen: int, /) -> bytes:
        assert level == socket.IPPROTO_TCP
        self.asked += 1
        return tcp_info(0 if self.clock[0] >= self.acked_at else 2, 0, self.length)


def fake_time() -> tuple[list[float], object, object]:
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    return now, sleep, lambda: now[0]


needs_tcp_info = pytest.mark.skipif(not hasattr(socket, "TCP_INFO"), reason="TCP_INFO is Linux's")


@needs_tcp_info
def test_wait_acked_returns_once_the_peer_has_everything() -> None:
    now, sleep, clock = fake_time()
    sock = FakeSock(now, acked_at=0.5)  # half a second in a slow link's queue
    assert wait_acked(sock, sleep=sleep, clock=clock) is True  # type: ignore[arg-type]
    assert 0.5 <= now[0] < 0.51  # polled finely enough to report soon after the ACK (5 ms steps at most)


@needs_tcp_info
def test_wait_acked_does_not_wait_when_already_acked() -> None:
    now, sleep, clock = fake_time()
    sock = FakeSock(now, acked_at=0.0)
    assert wait_acked(sock, sleep=sleep, clock=clock) is True  # type: ignore[arg-type]
    assert now[0] == 0.0 and sock.asked == 1


@needs_tcp_info
def test_wait_acked_gives_up_at_its_bound() -> None:
    now, sleep, clock = fake_time()
    sock = FakeSock(now, acked_at=99.0)  # a silent peer
    assert wait_acked(sock, max_wait_s=1.0, sleep=sleep, clock=clock) is False  # type: ignore[arg-type]
    assert now[0] == pytest.approx(1.0)


def test_wait_acked_without_a_socket_or_readable_info_falls_back_at_once() -> None:
    now, sleep, clock = fake_time()
    assert wait_acked(None, sleep=sleep, clock=clock) is False  # type: ignore[arg-type]

    class Broken:
        def getsockopt(self, level: int, optname: int, buflen: int, /) -> bytes:
            raise OSError("not a TCP socket")

    assert wait_acked(Broken(), sleep=sleep, clock=clock) is False  # type: ignore[arg-type]
    if hasattr(socket, "TCP_INFO"):
        assert wait_acked(FakeSock(now, 9.0, length=104), sleep=sleep, clock=clock) is False  # type: ignore[arg-type]
    assert now[0] == 0.0


@needs_tcp_info
@pytest.mark.skipif(sys.platform != "linux", reason="the struct layout is Linux's")
def test_a_real_loopback_socket_is_acknowledged() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    received: list[bytes] = []

    def accept() -> None:
        conn, _ = server.accept()
        received.append(conn.recv(4096))
        conn.close()

    thread = threading.Thread(target=accept)
    thread.start()
    client = socket.create_connection(server.getsockname())
    try:
        client.sendall(b"x" * 700)
        assert wait_acked(client) is True
    finally:
        thread.join(5)
        client.close()
        server.close()
    assert received and received[0].startswith(b"x")


class Stream(httpcore.NetworkStream):
    def __init__(self, sock: object) -> None:
        self.sock = sock
        self.written: list[bytes] = []

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.written.append(buffer)

    def get_extra_info(self, info: str) -> object:
        return self.sock if info == "socket" else None


class Backend(httpcore.NetworkBackend):
    def __init__(self, sock: object) -> None:
        self.sock = sock

    def connect_tcp(self, *args: object, **kwargs: object) -> httpcore.NetworkStream:
        return Stream(self.sock)


def test_the_backend_notes_the_socket_last_written_in_this_thread() -> None:
    mine = object()
    stream = AckingBackend(Backend(mine)).connect_tcp("h", 1)  # type: ignore[arg-type]
    wire_ack.forget_written()
    assert last_written_socket() is None
    stream.write(b"POST / HTTP/1.1\r\n\r\n")
    assert last_written_socket() is mine
    seen: list[object] = []
    other = threading.Thread(target=lambda: seen.append(last_written_socket()))
    other.start()
    other.join()
    assert seen == [None]  # another thread's requests are its own
    wire_ack.forget_written()
    assert last_written_socket() is None


def test_httpx_default_transport_gets_the_acking_backend() -> None:
    transport = acking_transport()
    try:
        assert isinstance(transport._pool._network_backend, AckingBackend)  # type: ignore[attr-defined]
    finally:
        transport.close()
    assert isinstance(transport, httpx.HTTPTransport)


class Reading(Stream):
    """A stream that answers one canned HTTP response and counts the writes that reached it."""

    def __init__(self, sock: object, answer: bytes) -> None:
        super().__init__(sock)
        self.answer = answer

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        chunk, self.answer = self.answer[:max_bytes], self.answer[max_bytes:]
        return chunk


def test_a_request_goes_out_in_one_write_before_its_response_is_read() -> None:
    answer = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
    inner = Reading(object(), answer)

    class One(httpcore.NetworkBackend):
        def connect_tcp(self, *args: object, **kwargs: object) -> httpcore.NetworkStream:
            return inner

    pool = httpcore.ConnectionPool(network_backend=AckingBackend(One()))
    response = pool.request("POST", "http://upstream.test/v1/decisions", content=b'{"a":1}')
    assert response.status == 200 and response.content == b"{}"
    assert len(inner.written) == 1  # headers and body in one write, not two
    assert inner.written[0].startswith(b"POST /v1/decisions HTTP/1.1\r\n")
    assert inner.written[0].endswith(b'\r\n\r\n{"a":1}')


def test_arrival_is_awaited_only_after_what_the_stream_holds_is_sent() -> None:
    mine = object()
    inner = Stream(mine)
    stream = AckingBackend(Backend(mine)).connect_tcp("h", 1)  # type: ignore[arg-type]
    stream._inner = inner  # type: ignore[attr-defined]
    stream.write(b"POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\n")
    stream.write(b"{}")
    assert inner.written == []  # held: the request is not whole yet
    assert last_written_socket() is mine  # what the arrival wait asks first
    assert inner.written == [b"POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"]


def test_a_large_body_is_not_held_whole() -> None:
    inner = Stream(object())
    stream = AckingBackend(Backend(object())).connect_tcp("h", 1)  # type: ignore[arg-type]
    stream._inner = inner  # type: ignore[attr-defined]
    for _ in range(3):
        stream.write(b"x" * (wire_ack.FLUSH_BYTES // 2 + 1))
    assert [len(w) for w in inner.written] == [wire_ack.FLUSH_BYTES + 2]
