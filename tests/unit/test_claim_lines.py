"""Result lines' fast paths give what the rules and the contract give (jobs/claims.py, web/exports.py)."""

from __future__ import annotations

import gc
import json

import pytest

from checks import claims as claim_rules
from jobs.claims import _mode_result, _verdict, decoded
from web.exports import gc_paused


@pytest.mark.parametrize("p", [0.0, 0.2, 0.2000001, 0.5, 0.7999999, 0.8, 1.0, 1e-05])
@pytest.mark.parametrize("cutoffs", [(0.8, 0.2), (0.5, 0.49), (1.0, 0.0)])
def test_the_verdict_is_the_rules_verdict(p: float, cutoffs: tuple[float, float]) -> None:
    smin, cmax = cutoffs
    assert _verdict(p, "done", smin, cmax) == claim_rules.verdict(p, smin, cmax)
    assert _verdict(p, "failed", smin, cmax) is None
    assert _verdict(None, "done", smin, cmax) is None


def test_a_verdict_of_an_odd_p_goes_through_the_rule() -> None:
    assert _verdict(1, "done", 0.8, 0.2) == claim_rules.verdict(1, 0.8, 0.2)
    with pytest.raises(ValueError, match="probability"):
        _verdict(1.5, "done", 0.8, 0.2)
    with pytest.raises(ValueError, match="probability"):
        _verdict(True, "done", 0.8, 0.2)


def test_a_mode_result_reads_the_output_text_as_the_json_module_does() -> None:
    source = {"title": "é \u2028", "url": "https://x", "date": None, "snippet": "s"}
    output = {"p": 1e-05, "request_id": "r1", "request_ids": ["r1"], "input_tokens": 420, "sources": [source]}
    row = (0, 1, "c1", "grounded", "a claim", True, True, json.dumps(output), "done", None)
    got = _mode_result((0.8, 0.2), row, decoded(row[7]))
    assert got["p"] == 1e-05 and got["verdict"] == "contradicted" and got["sources"] == output["sources"]
    assert got["in_query"] is True and got["request_ids"] == ["r1"] and got["error"] is None
    pending = _mode_result((0.8, 0.2), (2, 3, "c2", "grounded", "x", None, None, None, "pending", None), None)
    assert pending["p"] is None and pending["verdict"] is None and pending["sources"] == []


def test_gc_paused_restores_the_collector_whatever_happens() -> None:
    assert gc.isenabled()
    with pytest.raises(RuntimeError), gc_paused():
        assert not gc.isenabled()
        raise RuntimeError
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # a process that runs without it keeps running without it
    finally:
        gc.enable()
