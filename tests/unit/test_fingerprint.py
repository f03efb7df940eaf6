"""web/fingerprint.py: a submission's fingerprint, taken while its body is read."""

from __future__ import annotations

import io

import pytest

from web.fingerprint import SubmissionFingerprint

BODY = b'{"id":"a","claim":"x"}\n' * 5_000


def digest(body: bytes, params: list[tuple[str, str]], fmt: str = "ndjson", step: int = 4_096) -> str:
    fp = SubmissionFingerprint(fmt, params)
    reader = fp.reader(io.BytesIO(body))
    while reader.read(step):
        pass
    assert reader.bytes_read == len(body)
    return fp.hexdigest()


def test_the_same_submission_read_in_any_pieces_has_one_fingerprint() -> None:
    params = [("kind", "claims"), ("mode", "both")]
    assert digest(BODY, params, step=1) == digest(BODY, params, step=65_536) == digest(BODY, params[::-1])


@pytest.mark.parametrize(
    ("body", "params", "fmt"),
    [
        (BODY[:-1], [("kind", "claims"), ("mode", "both")], "ndjson"),  # a byte fewer
        (BODY, [("kind", "claims"), ("mode", "grounded")], "ndjson"),  # another option
        (BODY, [("kind", "claims")], "ndjson"),  # an option left out
        (BODY, [("kind", "claims"), ("mode", "both"), ("mode", "both")], "ndjson"),  # repeated
        (BODY, [("kind", "claims"), ("mode", "both")], "json"),  # another format
        (b"", [("kind", "claims"), ("mode", "both")], "ndjson"),
    ],
)
def test_anything_else_is_another_fingerprint(body: bytes, params: list[tuple[str, str]], fmt: str) -> None:
    assert digest(body, params, fmt) != digest(BODY, [("kind", "claims"), ("mode", "both")])


def test_parameters_cannot_be_shifted_into_the_body() -> None:
    """The head is length-safe JSON: a parameter's value never runs into the body bytes."""
    assert digest(b"b", [("k", "a")]) != digest(b"", [("k", "ab")])


def test_the_body_is_read_once() -> None:
    fp = SubmissionFingerprint("json", [])
    fp.reader(io.BytesIO(b"{}"))
    with pytest.raises(RuntimeError):
        fp.reader(io.BytesIO(b"{}"))
