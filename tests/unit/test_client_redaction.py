"""The key scrubber every surfaced text passes through."""

from __future__ import annotations

from clients.redaction import REDACTED, one_line, redact

KEY = "pplx-abcdef0123456789"


def test_key_and_bearer_credentials_are_replaced() -> None:
    text = f'{{"auth": "Bearer {KEY}", "echo": "{KEY}", "other": "bearer someone-elses-token"}}'
    out = redact(text, KEY)
    assert KEY not in out and "someone-elses-token" not in out
    assert out == f'{{"auth": "Bearer {REDACTED}", "echo": "{REDACTED}", "other": "bearer {REDACTED}"}}'


def test_short_test_keys_do_not_mangle_messages_but_bearer_still_goes() -> None:
    assert redact("Unknown model k", "k") == "Unknown model k"
    assert redact("Authorization: Bearer k", "k") == f"Authorization: Bearer {REDACTED}"
    assert redact("nothing secret", None) == "nothing secret"


def test_one_line_collapses_and_truncates() -> None:
    assert one_line("a\n\n  b\tc ") == "a b c"
    long = one_line("word " * 200, limit=50)
    assert len(long) == 50 and long.endswith("…") and "\n" not in long
