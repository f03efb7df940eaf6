"""Result lines are strict where they are written and tolerant where they are read.

The server validates every line it builds (`model_validate`: an unknown field is a bug in this version), but
a CLI of this version reading a newer server's lines must not fail on a field added since: `Contract.read`
ignores unknown fields at every depth and still checks the known ones.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from checks.contracts import ExportEnd
from checks.kinds.answer import AnswerResult
from checks.kinds.claims import ClaimResult
from checks.kinds.quote import QuoteResult
from cli.kinds import read_line


def claim_line(**extra_mode: Any) -> dict[str, Any]:
    mode = {"status": "done", "p": 0.91, "verdict": "supported", "request_id": "r1", **extra_mode}
    return {
        "custom_id": "c1",
        "claim": "Rust 1.0 came out in 2015.",
        "label": True,
        "results": {"grounded": mode},
    }


def test_the_writer_refuses_an_unknown_field_at_any_depth() -> None:
    with pytest.raises(ValidationError, match="added_later"):
        ClaimResult.model_validate({**claim_line(), "added_later": 1})
    with pytest.raises(ValidationError, match="nested_later"):
        ClaimResult.model_validate(claim_line(nested_later={"x": 1}))


def test_a_reader_ignores_unknown_fields_at_every_depth() -> None:
    newer = {**claim_line(nested_later={"x": 1}), "added_later": [1, 2]}
    line = ClaimResult.read(newer)
    assert line == ClaimResult.model_validate(claim_line())
    assert line.results["grounded"].p == 0.91
    assert "added_later" not in line.model_dump()
    assert "nested_later" not in line.results["grounded"].model_dump()


def test_a_reader_still_checks_the_fields_it_knows() -> None:
    with pytest.raises(ValidationError, match="status"):
        ClaimResult.read(claim_line(status="exploded"))
    with pytest.raises(ValidationError, match="custom_id"):
        ClaimResult.read({"results": {}, "added_later": 1})


@pytest.mark.parametrize(
    ("kind", "model", "line"),
    [
        ("claims", ClaimResult, {**claim_line(), "added_later": 1}),
        ("answer", AnswerResult, {"custom_id": "q1", "question": "Q?", "status": "done", "added_later": 1}),
        ("quote", QuoteResult, {"custom_id": "q1", "question": "Q?", "status": "done", "added_later": 1}),
    ],
)
def test_the_cli_reads_a_newer_servers_lines_of_every_kind(
    kind: str, model: type, line: dict[str, Any]
) -> None:
    with pytest.raises(ValidationError):
        model.model_validate(line)
    read = read_line(kind, line)
    assert isinstance(read, model)
    assert read.custom_id == line["custom_id"]


def test_the_export_trailer_keeps_its_wire_name_and_is_read_tolerantly() -> None:
    wire = {"_end": {"count": 3, "after": None, "last_id": "c3"}}
    end = ExportEnd.model_validate(wire)
    assert end.model_dump(mode="json", by_alias=True) == wire
    assert ExportEnd.read({"_end": {**wire["_end"], "bytes": 10}, "later": True}).end.count == 3
    with pytest.raises(ValidationError):
        ExportEnd.model_validate({"_end": {**wire["_end"], "count": -1}})
