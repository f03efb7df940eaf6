"""`factgate citations` on RAGAS and DeepEval files, the CI gate's exit codes and the JUnit XML of
`citations`, `check` and `ask`, in embedded mode as a user runs them (no service needed)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.integration.test_cli_helpers import EXAMPLE_CLAIMS, clean_env, cli

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return clean_env(FACTGATE_INSTANCE_PATH=str(tmp_path / "instance"))


def _junit(path: Path) -> ET.Element:
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    cases = suite.findall("testcase")
    assert int(suite.get("tests") or 0) == len(cases)
    assert int(suite.get("failures") or 0) == sum(1 for c in cases if c.find("failure") is not None)
    assert int(suite.get("errors") or 0) == sum(1 for c in cases if c.find("error") is not None)
    return suite


def test_a_ragas_file_is_checked_and_a_missed_gate_exits_3_with_the_junit_written(
    env: dict[str, str], tmp_path: Path
) -> None:
    report = tmp_path / "ci" / "citations.xml"
    run = cli(
        "citations", str(EXAMPLES / "ragas.jsonl"),
        "--fail-under", "supported_share=0.95", "--fail-over", "contradicted_rate=0.5",
        "--junit-xml", str(report),
        env=env,
    )  # fmt: skip
    assert run.returncode == 3, run.stderr
    assert "rows read as RAGAS (detected)" in run.stderr
    assert "(no markers: checked against every source)" in run.stdout
    assert "[uncited]" not in run.stdout
    gate = [line for line in run.stderr.splitlines() if line.startswith("gate failed: ")]
    assert len(gate) == 1 and gate[0].startswith("gate failed: supported_share 0.8 is under 0.95")
    suite = _junit(report)
    names = [c.get("name") for c in suite.findall("testcase")]
    assert names == [json.loads(x)["id"] for x in (EXAMPLES / "ragas.jsonl").read_text().splitlines()] + [
        "gate"
    ]
    danube = next(c for c in suite.findall("testcase") if c.get("name") == "danube")
    failure = danube.find("failure")
    assert failure is not None and failure.get("message") == "1 of 2 sentences flagged"
    assert "[contradicted] The Danube flows through 12 countries" in (failure.text or "")
    assert "request ids: " in (failure.text or "")


def test_a_deepeval_file_meets_its_gate_and_exits_0(env: dict[str, str], tmp_path: Path) -> None:
    run = cli(
        "citations", str(EXAMPLES / "deepeval.json"),
        "--fail-under", "citation_recall=0.5", "--fail-over", "uncited_rate=0.2",
        "--junit-xml", str(tmp_path / "deepeval.xml"),
        env=env,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "rows read as DeepEval (detected)" in run.stderr
    assert "gate met: fail-under citation_recall=0.5, fail-over uncited_rate=0.2" in run.stderr
    suite = _junit(tmp_path / "deepeval.xml")
    assert "gate" not in [c.get("name") for c in suite.findall("testcase")]
    wall = next(c for c in suite.findall("testcase") if c.get("name") == "great-wall")
    failure = wall.find("failure")
    assert failure is not None and "misattributed: [2]" in (failure.text or "")


def test_bad_cases_and_unknown_metrics_are_the_callers_to_fix(env: dict[str, str], tmp_path: Path) -> None:
    unknown = cli("citations", str(EXAMPLES / "ragas.jsonl"), "--fail-under", "recall=0.8", env=env)
    assert unknown.returncode == 2
    assert "unknown metric 'recall' for a citations job (valid: citation_recall, citation_precision" in (
        unknown.stderr
    )
    cases = json.loads((EXAMPLES / "deepeval.json").read_text())
    cases["test_cases"][2]["retrieval_context"] = ["fine", 7]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(cases))
    run = cli("citations", str(bad), env=env)
    assert run.returncode == 2
    assert run.stderr.splitlines()[-1] == (
        f"error: {bad}: test_cases[2].retrieval_context[1]: must be a string, got 7 (nothing was stored)"
    )


def test_check_and_ask_gate_on_their_own_figures_and_write_junit(env: dict[str, str], tmp_path: Path) -> None:
    claims = tmp_path / "claims.jsonl"
    claims.write_text("".join(EXAMPLE_CLAIMS.read_text().splitlines(keepends=True)[:6]))
    run = cli(
        "check", str(claims), "--fail-under", "supported_rate=0.99", "--fail-over", "grounded.brier=0.5",
        "--junit-xml", str(tmp_path / "claims.xml"),
        env=env,
    )  # fmt: skip
    assert run.returncode == 3, run.stderr
    assert [line for line in run.stderr.splitlines() if line.startswith("gate failed: ")] == [
        "gate failed: grounded.supported_rate 0.6667 is under 0.99 (--fail-under supported_rate=0.99)"
    ]
    suite = _junit(tmp_path / "claims.xml")
    s05 = next(c for c in suite.findall("testcase") if c.get("name") == "s05")
    failure = s05.find("failure")
    assert failure is not None and failure.get("message") == "not supported: grounded contradicted"
    ask = cli(
        "ask", "What did the James Webb Space Telescope discover about exoplanet K2-18b?",
        "--fail-over", "contradicted_rate=1", "--junit-xml", str(tmp_path / "ask.xml"),
        env=env,
    )  # fmt: skip
    assert ask.returncode == 0, ask.stderr
    (case,) = _junit(tmp_path / "ask.xml").findall("testcase")
    assert case.get("classname") == "factgate.answer"
    wrong = cli("ask", "Anything?", "--fail-under", "citation_recall=0.5", env=env)
    assert wrong.returncode == 2 and "unknown metric 'citation_recall' for a answer job" in wrong.stderr
