"""Pure pieces of the pages: the link rule, the reliability diagram, formatting, the session key.

No database or browser needed (the secret-key test builds an embedded app on a SQLite file).
"""

from __future__ import annotations

import re
import stat
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from web.charts import reliability_bins, reliability_svg
from web.pages_format import duration, host, prob, usd
from web.security import load_or_create_secret_key, report_csp, safe_href

# --- safe_href -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "https://example.org/a?b=c#d",
        "http://example.org",
        "HTTPS://EXAMPLE.ORG/x",
        "https://bücher.example/straße",
        'https://example.org/path/"onmouseover="alert(1)',  # quotes are escaped on output, not refused
        "http://[::1]:8080/x",
    ],
)
def test_safe_href_keeps_http_and_https(url: str) -> None:
    assert safe_href(url) == url


@pytest.mark.parametrize(
    "url",
    [
        "javascript:alert(1)",
        "JaVaScRiPt:alert(1)",
        " javascript:alert(1)",
        "\x01javascript:alert(1)",
        "java\tscript:alert(1)",
        "java\nscript:alert(1)",
        "javascript&#58;alert(1)",
        "data:text/html,<script>alert(1)</script>",
        "vbscript:msgbox(1)",
        "file:///etc/passwd",
        "ftp://example.org/",
        "//example.org/x",
        "/relative/path",
        "https:",
        "https:///no-host",
        "https://exa mple.org/",
        "https://example.org/\u202ereversed",
        "https:\\\\example.org",
        "http://[::1/x",
        "http://example.org:99999/",
        "",
        "https://example.org/" + "a" * 3000,
    ],
)
def test_safe_href_refuses_everything_else(url: str) -> None:
    assert safe_href(url) is None


@pytest.mark.parametrize("value", [None, 42, b"https://example.org", ["https://example.org"]])
def test_safe_href_refuses_non_strings(value: object) -> None:
    assert safe_href(value) is None


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def test_safe_href_never_returns_a_non_http_url(text: str) -> None:
    for candidate in (text, "javascript:" + text, "https://" + text):
        out = safe_href(candidate)
        if out is not None:
            assert out == candidate
            assert re.match(r"(?i)https?://[^\s/]", out)
            assert not any(ch.isspace() for ch in out)


# --- reliability diagram --------------------------------------------------------------------------------


def test_reliability_bins_count_and_average() -> None:
    points = [(0.05, False), (0.08, True), (0.95, True), (1.0, True), (0.5, False)]
    bins = reliability_bins(points)
    assert len(bins) == 10
    first, middle, last = bins[0], bins[5], bins[9]
    assert (first.count, first.true_count, first.observed) == (2, 1, 0.5)
    assert first.mean_p == pytest.approx(0.065)
    assert (middle.count, middle.observed) == (1, 0.0)
    assert (last.count, last.true_count, last.mean_p) == (
        2,
        2,
        pytest.approx(0.975),
    )  # 1.0 is in the last bin
    assert sum(b.count for b in bins) == len(points)
    assert bins[3].mean_p is None and bins[3].observed is None


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), float("inf")])
def test_reliability_bins_refuse_bad_probabilities(bad: float) -> None:
    with pytest.raises(ValueError, match="probability"):
        reliability_bins([(bad, True)])


def test_reliability_svg_draws_each_series_without_inline_style() -> None:
    grounded = reliability_bins([(0.02, False), (0.97, True), (0.99, True)])
    ungrounded = reliability_bins([(0.1, True), (0.9, False)])
    svg = reliability_svg([("grounded", grounded), ("<b>ungrounded</b>", ungrounded)])
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert "style=" not in svg and "<script" not in svg
    assert svg.count("<circle") == 2 + 1  # two filled bins + the legend marker
    assert svg.count("<rect") >= 2 + 1
    assert "&lt;b&gt;ungrounded&lt;/b&gt;" in svg and "<b>" not in svg
    assert svg.count("<polyline") == 2
    assert ">2</text>" in svg  # the count of the grounded 0.9–1.0 bin


def test_reliability_svg_with_no_data_is_still_a_chart() -> None:
    svg = reliability_svg([("grounded", reliability_bins([]))])
    assert "<polyline" not in svg and "<circle" in svg  # only the legend marker


# --- formatting and the report policy --------------------------------------------------------------------


def test_formatting() -> None:
    assert prob(0.98765) == "0.988"
    assert prob(None) == "—" and prob(True) == "—"
    assert usd(0) == "$0.00" and usd(0.00204) == "$0.0020" and usd(1234.5) == "$1,234.50"
    assert usd(0.0000021) == "$0.000002"
    assert duration(0.25) == "250 ms" and duration(4.21) == "4.2 s" and duration(192) == "3 min 12 s"
    assert duration(7500) == "2 h 05 min"
    assert host("https://www.example.org/x") == "example.org" and host("javascript:x") == ""


def test_report_csp_allows_exactly_the_inline_style() -> None:
    policy = report_csp("body { color: red; }")
    assert "default-src 'none'" in policy
    assert re.search(r"style-src 'sha256-[A-Za-z0-9+/]+=*'", policy)
    assert "script-src" not in policy and "unsafe-inline" not in policy
    assert report_csp("body { color: blue; }") != policy


# --- the session key --------------------------------------------------------------------------------------


def test_secret_key_is_created_once_with_mode_0600(tmp_path: Path) -> None:
    first = load_or_create_secret_key(tmp_path / "instance")
    path = tmp_path / "instance" / "secret_key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(first) >= 48
    assert load_or_create_secret_key(tmp_path / "instance") == first
    assert load_or_create_secret_key(tmp_path / "other") != first


def test_processes_starting_together_agree_on_one_key(tmp_path: Path) -> None:
    with ThreadPoolExecutor(max_workers=8) as pool:
        keys = list(pool.map(lambda _: load_or_create_secret_key(tmp_path), range(16)))
    assert len(set(keys)) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["secret_key"]  # no temporary file left


def test_unusable_secret_key_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "secret_key").write_text("short")
    with pytest.raises(RuntimeError, match="no usable secret key"):
        load_or_create_secret_key(tmp_path)


def test_apps_share_the_persisted_key_unless_one_is_configured(tmp_path: Path) -> None:
    from web.app import create_app

    overrides = {"database_url": None, "redis_url": None, "instance_path": tmp_path}
    first = create_app(overrides)
    second = create_app(overrides)
    assert first.config["SECRET_KEY"] == second.config["SECRET_KEY"]
    assert (tmp_path / "secret_key").read_text().strip() == first.config["SECRET_KEY"]
    configured = create_app({**overrides, "secret_key": "x" * 40})
    assert configured.config["SECRET_KEY"] == "x" * 40
    for app in (first, second, configured):
        app.extensions["factgate"].engine.dispose()
