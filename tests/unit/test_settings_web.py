"""The web settings of config/settings.py: session timeouts, the trusted proxies, the Secure cookie, HSTS."""

from __future__ import annotations

import pytest

from config import Settings


def test_defaults() -> None:
    s = Settings.from_env({})
    assert s.session_idle_s == 8 * 3600
    assert s.session_max_s == 7 * 24 * 3600
    assert s.trust_proxy == 0
    assert s.cookie_secure is False
    assert s.hsts_max_age_s == 365 * 24 * 3600


def test_read_from_the_environment() -> None:
    s = Settings.from_env(
        {
            "FACTGATE_SESSION_IDLE_S": "900",
            "FACTGATE_SESSION_MAX_S": "86400",
            "FACTGATE_TRUST_PROXY": "2",
            "FACTGATE_COOKIE_SECURE": "true",
            "FACTGATE_HSTS_MAX_AGE_S": "0",
        }
    )
    assert (s.session_idle_s, s.session_max_s, s.trust_proxy, s.cookie_secure, s.hsts_max_age_s) == (
        900,
        86400,
        2,
        True,
        0,
    )


@pytest.mark.parametrize(
    ("raw", "value"), [("1", True), ("yes", True), ("ON", True), ("0", False), ("off", False)]
)
def test_cookie_secure_spellings(raw: str, value: bool) -> None:
    assert Settings.from_env({"FACTGATE_COOKIE_SECURE": raw}).cookie_secure is value


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"FACTGATE_COOKIE_SECURE": "sure"}, "FACTGATE_COOKIE_SECURE"),
        ({"FACTGATE_TRUST_PROXY": "yes"}, "FACTGATE_TRUST_PROXY must be an integer"),
        ({"FACTGATE_TRUST_PROXY": "-1"}, "FACTGATE_TRUST_PROXY is a number of proxies"),
        ({"FACTGATE_SESSION_IDLE_S": "0"}, "must be above 0"),
        ({"FACTGATE_SESSION_MAX_S": "-5"}, "must be above 0"),
        ({"FACTGATE_HSTS_MAX_AGE_S": "-1"}, "FACTGATE_HSTS_MAX_AGE_S"),
        ({"FACTGATE_HTTP_RETRY_BASE_S": "-0.5"}, "FACTGATE_HTTP_RETRY_BASE_S must be 0 or more"),
    ],
)
def test_bad_values_are_refused_naming_the_variable(env: dict[str, str], needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        Settings.from_env(env)


def test_overrides_are_checked_too() -> None:
    with pytest.raises(ValueError, match="must be above 0"):
        Settings().with_overrides({"session_idle_s": 0})
