"""`make demo` on a fresh machine: no services, no key, nothing but this process.

Runs the Makefile's own `demo` target (with this test run's virtual environment, so nothing is installed)
with the instance folder in a temporary directory, inside a new network namespace when the machine allows
one: there even loopback is down, so the demo provably reaches no Postgres, Redis or Perplexity.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.test_cli_helpers import ROOT, clean_env, kill_group

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _isolated_network() -> list[str]:
    """`unshare --net` as a prefix if this machine lets us make a network namespace, else nothing."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return []
    probe = subprocess.run([unshare, "--net", "true"], capture_output=True, check=False)
    return [unshare, "--net"] if probe.returncode == 0 else []


def test_make_demo_prints_the_24_claim_table_and_both_scorecards_then_the_citations(tmp_path: Path) -> None:
    venv = Path(sys.executable).parent.parent
    make = shutil.which("make")
    assert make is not None, "make is needed for the demo"
    argv = [*_isolated_network(), make, "--no-print-directory", "-C", str(ROOT),
            "-o", f"{venv}/.installed", f"VENV={venv}", "demo"]  # fmt: skip
    env = clean_env(
        FACTGATE_INSTANCE_PATH=str(tmp_path / "instance"),
        # Were any of these used, the demo would fail: the namespace has no route anywhere.
        DATABASE_URL="postgresql://nobody@127.0.0.1:1/none",
        REDIS_URL="redis://127.0.0.1:1/0",
        FACTGATE_URL="http://127.0.0.1:1",
    )
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=180)
    finally:
        kill_group(proc)
    assert proc.returncode == 0, f"stdout:\n{out}\nstderr:\n{err}"
    out, citations = out.split("\nanswer eiffel: ", 1)
    lines = out.splitlines()
    header = lines[0].split()
    assert header == [
        "id",
        "kind",
        "label",
        "p_ungrounded",
        "verdict_ungrounded",
        "p_grounded",
        "verdict_grounded",
    ]
    rows = lines[1:25]
    ids = [r.split()[0] for r in rows]
    assert ids == [f"s0{i}" for i in range(1, 9)] + [f"r{i:02d}" for i in range(1, 17)]
    assert all(len(r.split()) >= 7 for r in rows)
    flips = [r.split()[0] for r in rows if r.endswith("flip")]
    assert flips and all(f.startswith("r") for f in flips)  # grounding changes only the recent claims

    assert "claim text in the search query: 24 of 24" in out
    (ungrounded,) = [i for i, line in enumerate(lines) if line.startswith("ungrounded correct ")]
    (grounded,) = [i for i, line in enumerate(lines) if line.startswith("grounded   correct ")]
    assert lines[grounded].startswith("grounded   correct 24/24  wrong 0  review 0 (0%, bound 25%)")
    assert "missed failures 0 (bound 0)" in lines[grounded]
    assert lines[grounded + 1].rstrip().endswith("acceptance met")
    assert "mean search results 5.0" in lines[grounded + 1]
    assert "false contradictions" in lines[ungrounded]
    assert lines[ungrounded + 1].rstrip().endswith("acceptance not met")
    assert f"flips {len(flips)}" in lines[grounded]

    assert any(line.startswith("job ") and "completed: 48 of 48 requests done" in line for line in lines)
    report = Path(next(line for line in lines if line.startswith("report: ")).removeprefix("report: "))
    assert report.is_file() and report.is_relative_to(tmp_path)
    assert lines[-1] == "note: results come from the bundled simulator, not Perplexity"

    # Then the example answers (examples/citations.jsonl): each sentence labelled, and the job's metrics.
    cited = ("answer eiffel: " + citations).splitlines()
    assert cited[0] == "answer eiffel: done"
    assert any("[contradicted] The Danube flows through 12 countries" in line for line in cited)
    assert any("misattributed: [wall-b]" in line for line in cited)
    assert any("no such source: [4]" in line for line in cited)
    (summary,) = [i for i, line in enumerate(cited) if line.startswith("citations summary: ")]
    assert cited[summary] == "citations summary: 11 answers"
    assert cited[summary + 1].lstrip().startswith("recall ")
    assert "completed" in next(line for line in cited if line.startswith("job "))
    assert cited[-1] == "note: results come from the bundled simulator, not Perplexity"
