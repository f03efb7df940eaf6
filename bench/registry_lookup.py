"""What the recipe registry costs a worker per item: the handler lookup (`workers/kinds:handler_for`) and
the "does settling this move a question on?" test (`workers/run.py:advances_on_settle`), both run for
every item, and writing a results line through its contract (`ClaimResult.model_validate`, then
`model_dump_json`, what the NDJSON export does), against the dict + `json.dumps` it replaced.

Prints each figure in microseconds and its ratio to a budget of 1 % of the cheapest item's own work (the
claim item settles in one round trip of about 2 ms to Postgres, so 20 µs), measured in one run.

    .venv/bin/python bench/registry_lookup.py [--n 100000]
"""

from __future__ import annotations

import argparse
import json
import sys
import timeit
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from checks.kinds.claims import ClaimResult
from jobs.records import ClaimedItem
from workers.kinds import handler_for
from workers.run import advances_on_settle

BUDGET_US = 20.0
LINE = {
    "custom_id": "c1",
    "claim": "Python 3.12 was released in October 2023.",
    "label": True,
    "results": {
        mode: {
            "status": "done",
            "p": 0.97,
            "verdict": "supported",
            "request_id": "r",
            "request_ids": ["r"],
            "attempts": 1,
            "input_tokens": 180,
            "usage": {"attempts": 1},
            "in_query": True,
            "sources": [{"title": "t", "url": "https://e.example", "date": None, "snippet": "s"}] * 5,
            "error": None,
        }
        for mode in ("ungrounded", "grounded")
    },
}


def _item(stage: str, kind: str) -> ClaimedItem:
    return ClaimedItem(id=1, job_id=uuid.uuid4(), tenant_id=uuid.uuid4(), stage=stage, mode="", custom_id="a",
                       input={"kind": kind}, token=1, options={}, dedupe_key=None, kind=kind)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=100_000)
    n = parser.parse_args().n
    claim, question = _item("claim", "claims"), _item("question", "quote")
    cases = {
        "handler_for(claim item)": lambda: handler_for(claim),
        "handler_for(question item, shared stage)": lambda: handler_for(question),
        "advances_on_settle(claim)": lambda: advances_on_settle("claim"),
        "claims results line: validate + NDJSON": lambda: ClaimResult.model_validate(LINE).model_dump_json(),
    }
    # The same line before the contracts: a dict written with json.dumps (what the export did).
    before = timeit.timeit(lambda: json.dumps(LINE, ensure_ascii=False, separators=(",", ":")), number=n)
    for name, fn in cases.items():
        fn()
        us = timeit.timeit(fn, number=n) / n * 1e6
        print(f"{name:<45} {us:8.2f} µs   {us / BUDGET_US:5.2f} × the {BUDGET_US:.0f} µs budget")
    line_us = timeit.timeit(lambda: ClaimResult.model_validate(LINE).model_dump_json(), number=n) / n * 1e6
    before_us = before / n * 1e6
    print(f"{'claims results line before (dict + json.dumps)':<45} {before_us:8.2f} µs   "
          f"contract / before = {line_us / before_us:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
