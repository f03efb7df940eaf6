"""The OWASP rule for CSV injection, cell by cell."""

from __future__ import annotations

import pytest

from web.csv_safety import SafeCsv, formula_safe


@pytest.mark.parametrize(
    ("cell", "written"),
    [
        ("=1+1", "'=1+1"),
        ("+SUM(A1:A2)", "'+SUM(A1:A2)"),
        ("-2+3", "'-2+3"),
        ("@cmd", "'@cmd"),
        ("\t=1", "'\t=1"),
        ("\r=1", "'\r=1"),
        ("plain text", "plain text"),
        ("a=b", "a=b"),  # only a leading trigger counts
        ("-0.5", "-0.5"),  # a number is a value, not a formula
        ("+3", "+3"),
        ("", ""),
        (0.97, 0.97),
        (None, None),
    ],
)
def test_formula_safe(cell: object, written: object) -> None:
    assert formula_safe(cell) == written


def test_safe_csv_writes_rows_and_hands_them_out_once() -> None:
    out = SafeCsv()
    out.row(["id", "text"])
    out.row(["=x", 'say "hi", then go'])
    assert out.take() == 'id,text\r\n\'=x,"say ""hi"", then go"\r\n'
    assert out.take() == ""
