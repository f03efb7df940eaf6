"""Webhook rules without a network: the Standard Webhooks signature, secrets, URLs accepted at intake, the
address checks, pinning the connection to the checked address, and the retry waits."""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import socket
from typing import Any

import httpx
import pytest

from checks.options import OptionsError, parse_claims_options, parse_questions_options
from checks.webhooks import (
    MAX_URL_CHARS,
    MAX_WAIT_S,
    WebhookUrlError,
    new_secret,
    retry_wait_s,
    secret_key,
    sign,
    validate_webhook_url,
    verify,
)
from clients.webhooks import WebhookRefusedError, address_refusal, prepare, send

# The reference vector of the Standard Webhooks libraries (standard-webhooks/standard-webhooks,
# libraries/python/tests/test_webhooks.py::test_sign_function; the other languages' tests use the same).
REF_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
REF_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
REF_TIMESTAMP = 1614265330
REF_BODY = '{"test": 2432232314}'
REF_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_signature_matches_the_standard_webhooks_reference_vector() -> None:
    assert sign(REF_SECRET, REF_ID, REF_TIMESTAMP, REF_BODY) == REF_SIGNATURE
    assert sign(REF_SECRET, REF_ID, REF_TIMESTAMP, REF_BODY.encode()) == REF_SIGNATURE
    # The secret works with or without its prefix, as in the reference libraries.
    assert sign(REF_SECRET.removeprefix("whsec_"), REF_ID, REF_TIMESTAMP, REF_BODY) == REF_SIGNATURE


def test_signature_is_the_documented_hmac_so_a_receiver_can_check_it_with_the_stdlib() -> None:
    """What docs/operations.md tells receivers to compute, written out here with hmac/hashlib/base64."""
    key = base64.b64decode(REF_SECRET.split("_", 1)[1])
    mac = hmac.new(key, f"{REF_ID}.{REF_TIMESTAMP}.{REF_BODY}".encode(), hashlib.sha256).digest()
    assert "v1," + base64.b64encode(mac).decode() == REF_SIGNATURE


def test_verify_accepts_any_listed_signature_and_refuses_changes() -> None:
    other = "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc="
    assert verify(REF_SECRET, REF_ID, REF_TIMESTAMP, REF_BODY, f"{other} {REF_SIGNATURE}")
    assert not verify(REF_SECRET, REF_ID, REF_TIMESTAMP, REF_BODY, other)
    assert not verify(REF_SECRET, REF_ID, REF_TIMESTAMP + 1, REF_BODY, REF_SIGNATURE)
    assert not verify(REF_SECRET, "msg_other", REF_TIMESTAMP, REF_BODY, REF_SIGNATURE)
    assert not verify(REF_SECRET, REF_ID, REF_TIMESTAMP, REF_BODY + " ", REF_SIGNATURE)
    # The reference libraries' "invalid signature" case: the last character changed.
    assert not verify(REF_SECRET, REF_ID, REF_TIMESTAMP, REF_BODY, REF_SIGNATURE[:-2] + "A=")


def test_new_secrets_are_whsec_and_32_random_bytes() -> None:
    a, b = new_secret(), new_secret()
    assert a.startswith("whsec_") and a != b
    assert len(secret_key(a)) == 32
    with pytest.raises(ValueError, match="base64"):
        secret_key("whsec_not base64!")


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.com/factgate",
        "http://hooks.example.com:8080/x?token=abc",
        "https://[2606:4700::1111]/hook",
        "http://127.0.0.1:9000/",  # shape only: the address is checked when sending
    ],
)
def test_webhook_urls_accepted_at_intake(url: str) -> None:
    assert validate_webhook_url(url) == url


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("ftp://example.com/x", "http or https"),
        ("javascript:alert(1)", "http or https"),
        ("//example.com/x", "http or https"),
        ("https://", "host"),
        ("https://user:pass@example.com/x", "user name or password"),
        ("https://user@example.com/x", "user name or password"),
        ("https://example.com/ x", "spaces"),
        ("https://example.com/\u0000", "control"),
        ("https://example.com\\@evil.com/", "backslash"),
        ("https://example.com:99999/", "valid URL"),
        ("https://example.com/#frag", "fragment"),
        ("https://example.com/" + "a" * MAX_URL_CHARS, "at most"),
        ("", "http or https"),
        ("http://\u2603\u2603.example/hook", "internationalized name"),
        ("http://" + "\u00fc" * 70 + ".example/hook", "internationalized name"),
    ],
)
def test_webhook_urls_refused_at_intake(url: str, why: str) -> None:
    with pytest.raises(WebhookUrlError, match=why):
        validate_webhook_url(url)


def test_webhook_url_is_an_option_of_every_kind_and_named_only_when_given() -> None:
    claims = parse_claims_options({"webhook_url": "https://hooks.example.com/a"})
    assert claims.as_dict()["webhook_url"] == "https://hooks.example.com/a"
    assert "webhook_url" not in parse_claims_options({}).as_dict()
    questions = parse_questions_options({"webhook_url": "https://hooks.example.com/q"})
    assert questions.as_dict()["webhook_url"] == "https://hooks.example.com/q"
    with pytest.raises(OptionsError) as err:
        parse_questions_options({"webhook_url": "https://a:b@example.com/"})
    assert err.value.field == "webhook_url"
    with pytest.raises(OptionsError) as err:
        parse_claims_options({"webhook_url": 42})
    assert err.value.field == "webhook_url"
    with pytest.raises(OptionsError) as err:
        parse_claims_options({"webhook_url": "http://\u2603.example:9208/hook"})
    assert err.value.field == "webhook_url" and "internationalized name" in str(err.value)


def test_an_internationalized_host_is_accepted_and_goes_out_in_its_idna_form() -> None:
    url = "http://b\u00fccher.example:9208/hook"
    assert validate_webhook_url(url) == url  # stored as given

    def resolver(host: str, port: int, **_: Any) -> list[Any]:
        assert host == "xn--bcher-kva.example"
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.215.14", port))]

    target = prepare(url, allow_private=False, resolver=resolver)
    assert target.host_header == "xn--bcher-kva.example:9208"
    assert prepare("https://b\u00fccher.example/x", allow_private=False, resolver=resolver).sni_hostname == (
        "xn--bcher-kva.example"
    )
    with pytest.raises(WebhookRefusedError, match="internationalized name"):
        prepare("http://\u2603.example/", allow_private=False, resolver=resolver)


def test_any_exception_while_sending_is_a_failed_attempt_not_an_exception() -> None:
    def resolver(host: str, port: int, **_: Any) -> list[Any]:
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.215.14", port))]

    def explode(request: httpx.Request) -> httpx.Response:
        raise UnicodeEncodeError("ascii", "\u00fc", 0, 1, "ordinal not in range(128)")

    result = send(
        "http://hooks.example/x", b"{}", {}, allow_private=False, connect_timeout_s=1, timeout_s=2,
        resolver=resolver, transport=httpx.MockTransport(explode),
    )  # fmt: skip
    assert result.status_code is None and not result.permanent
    assert result.error is not None and result.error.startswith("UnicodeEncodeError sending to 93.184.215.14")


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "link-local"),  # cloud metadata
        ("100.64.0.1", "not globally routable"),  # shared address space (carrier NAT)
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("240.0.0.1", "private"),  # reserved; ipaddress also counts it private
        ("255.255.255.255", "private"),
        ("192.0.2.10", "private"),  # documentation
        ("::1", "loopback"),
        ("::", "unspecified"),
        ("fe80::1", "link-local"),
        ("fc00::1", "private"),
        ("fd12:3456::1", "private"),
        ("ff02::1", "multicast"),
        ("fec0::1", "site-local"),
        ("::ffff:127.0.0.1", "IPv4-mapped loopback"),
        ("::ffff:10.0.0.1", "IPv4-mapped private"),
        ("::ffff:169.254.169.254", "IPv4-mapped link-local"),
        ("64:ff9b::7f00:1", "NAT64 of a loopback address"),
        ("64:ff9b::a9fe:a9fe", "NAT64 of a link-local address"),
        ("2002:7f00:1::", "6to4 of a loopback address"),
        ("2002:c0a8:101::1", "6to4 of a private address"),
        ("::7f00:1", "reserved"),  # IPv4-compatible, deprecated
        ("64:ff9b::808:808", "reserved"),  # NAT64 of a public address: inside ::/8, refused all the same
    ],
)
def test_addresses_refused(address: str, reason: str) -> None:
    assert address_refusal(ipaddress.ip_address(address)) == reason


@pytest.mark.parametrize(
    "address",
    ["8.8.8.8", "1.1.1.1", "93.184.216.34", "2606:4700::1111", "::ffff:8.8.8.8"],
)
def test_public_addresses_allowed(address: str) -> None:
    assert address_refusal(ipaddress.ip_address(address)) is None


def resolver_of(*addresses: str, calls: list[str] | None = None) -> Any:
    """A stand-in for socket.getaddrinfo answering these addresses (and counting the questions)."""

    def resolve(host: str, port: int, **_: Any) -> list[tuple[Any, ...]]:
        if calls is not None:
            calls.append(host)
        out = []
        for a in addresses:
            family = socket.AF_INET6 if ":" in a else socket.AF_INET
            sockaddr = (a, port, 0, 0) if family == socket.AF_INET6 else (a, port)
            out.append((family, socket.SOCK_STREAM, 6, "", sockaddr))
        return out

    return resolve


def test_prepare_pins_the_checked_address_and_keeps_the_name_for_host_and_tls() -> None:
    target = prepare(
        "https://hooks.example.com/a/b?x=1", allow_private=False, resolver=resolver_of("93.184.216.34")
    )
    assert target.url == "https://93.184.216.34/a/b?x=1"
    assert target.host_header == "hooks.example.com"
    assert target.sni_hostname == "hooks.example.com"
    v6 = prepare(
        "http://hooks.example.com:8080/", allow_private=False, resolver=resolver_of("2606:4700::1111")
    )
    assert v6.url == "http://[2606:4700::1111]:8080/"
    assert v6.host_header == "hooks.example.com:8080" and v6.sni_hostname is None


def test_prepare_refuses_a_host_with_any_private_address_unless_allowed() -> None:
    mixed = resolver_of("93.184.216.34", "10.0.0.5")
    with pytest.raises(WebhookRefusedError, match=r"10\.0\.0\.5, a private address"):
        prepare("https://hooks.example.com/", allow_private=False, resolver=mixed)
    with pytest.raises(WebhookRefusedError, match="loopback"):
        prepare("http://[::ffff:127.0.0.1]:9/", allow_private=False)
    with pytest.raises(WebhookRefusedError, match="FACTGATE_WEBHOOK_ALLOW_PRIVATE"):
        prepare("http://localhost:9/", allow_private=False, resolver=resolver_of("127.0.0.1"))
    allowed = prepare("http://localhost:9/", allow_private=True, resolver=resolver_of("127.0.0.1"))
    assert allowed.url == "http://127.0.0.1:9/" and allowed.host_header == "localhost:9"


def test_send_resolves_once_connects_to_the_checked_ip_and_never_follows_a_redirect() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(302, headers={"Location": "http://169.254.169.254/latest/meta-data/"})

    calls: list[str] = []
    result = send(
        "https://hooks.example.com/in",
        b'{"id":"j"}',
        {"webhook-id": "msg_1", "webhook-timestamp": "1", "webhook-signature": "v1,x"},
        allow_private=False,
        connect_timeout_s=1,
        timeout_s=1,
        resolver=resolver_of("93.184.216.34", calls=calls),
        transport=httpx.MockTransport(handler),
    )
    assert calls == ["hooks.example.com"]  # one resolution: nothing to rebind between check and connect
    assert len(seen) == 1  # the redirect was not followed
    request = seen[0]
    assert str(request.url) == "https://93.184.216.34/in"
    assert request.headers["host"] == "hooks.example.com"
    assert request.extensions["sni_hostname"] == "hooks.example.com"
    assert request.headers["webhook-id"] == "msg_1" and request.content == b'{"id":"j"}'
    assert request.headers["content-type"] == "application/json"
    assert result.status_code == 302 and not result.ok and not result.permanent
    assert result.error is not None and "redirect" in result.error


def test_send_records_a_refusal_as_permanent_and_sends_nothing() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise AssertionError("nothing may be sent to a refused address")

    result = send(
        "http://internal.example/hook",
        b"{}",
        {},
        allow_private=False,
        connect_timeout_s=1,
        timeout_s=1,
        resolver=resolver_of("192.168.0.10"),
        transport=httpx.MockTransport(handler),
    )
    assert result.permanent and result.status_code is None
    assert result.error is not None and result.error.startswith(
        "refused: internal.example resolves to 192.168.0.10"
    )


def test_send_reports_a_name_that_does_not_resolve_as_retryable() -> None:
    def broken(host: str, port: int, **_: Any) -> list[Any]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    result = send(
        "https://nowhere.invalid/",
        b"{}",
        {},
        allow_private=False,
        connect_timeout_s=1,
        timeout_s=1,
        resolver=broken,
    )
    assert not result.permanent and result.status_code is None
    assert result.error is not None and "did not resolve" in result.error


def test_retry_waits_double_from_the_base_up_to_two_hours() -> None:
    assert [retry_wait_s(n, 10.0) for n in (1, 2, 3, 4)] == [10.0, 20.0, 40.0, 80.0]
    assert retry_wait_s(30, 10.0) == MAX_WAIT_S == 7200.0
    # With the defaults, tries over 24 hours: the first at once, then one after each wait.
    elapsed, tries = 0.0, 1
    while elapsed + retry_wait_s(tries, 10.0) <= 24 * 3600:
        elapsed += retry_wait_s(tries, 10.0)
        tries += 1
    assert 15 <= tries <= 25
