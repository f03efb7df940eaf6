"""The webhook sender over real sockets on 127.0.0.1: the connection goes to the address that was checked
(a name is resolved once, by the resolver given), and over https the certificate is still checked against
the URL's name, not the pinned IP (a certificate for another name is refused)."""

from __future__ import annotations

import datetime as dt
import http.server
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from clients.webhooks import send

pytestmark = pytest.mark.integration


class Recorder(http.server.BaseHTTPRequestHandler):
    seen: ClassVar[list[tuple[str, str]]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        Recorder.seen.append((self.headers.get("Host") or "", self.path))
        self.send_response(204)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return


def self_signed(tmp: Path, name: str) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp / f"{name}.pem", tmp / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """An https receiver on 127.0.0.1 with a certificate for `hooks.test`; yields its port and the cert."""
    cert, key = self_signed(tmp_path, "hooks.test")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Recorder.seen = []
    try:
        yield server.server_address[1], cert
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def loopback(host: str, port: int, **_: Any) -> list[Any]:
    """A resolver that answers 127.0.0.1 for any name (names here exist in no DNS)."""
    return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]


def test_https_goes_to_the_checked_address_and_checks_the_certificate_against_the_name(
    tls_server: tuple[int, Path], tmp_path: Path
) -> None:
    port, cert = tls_server
    trust = ssl.create_default_context(cafile=str(cert))
    common: dict[str, Any] = dict(
        allow_private=True, connect_timeout_s=2, timeout_s=5, resolver=loopback, verify=trust
    )
    ok = send(f"https://hooks.test:{port}/in?x=1", b"{}", {}, **common)
    assert ok.status_code == 204 and ok.ok and ok.address == "127.0.0.1", ok
    assert Recorder.seen == [(f"hooks.test:{port}", "/in?x=1")]
    # The same address under another name: the certificate (for hooks.test) does not match, so nothing is
    # sent — pinning the IP does not weaken the TLS check.
    wrong = send(f"https://other.test:{port}/in", b"{}", {}, **common)
    assert (
        wrong.status_code is None and wrong.error is not None and "CERTIFICATE_VERIFY_FAILED" in wrong.error
    )
    assert len(Recorder.seen) == 1
    # Refused outright without the setting: 127.0.0.1 is loopback.
    refused = send(f"https://hooks.test:{port}/in", b"{}", {}, **{**common, "allow_private": False})
    assert refused.permanent and len(Recorder.seen) == 1
