"""A pytest gate on a factgate citations job: copy it into your repository's tests.

It sends your evaluation set (RAGAS samples, DeepEval test cases or factgate rows; NDJSON, a JSON array or
`{"test_cases": [...]}`) to a factgate server, waits for the job, and fails when a figure is out of bounds,
listing each flagged answer with its sentences, labels and request ids.

Environment: FACTGATE_URL and FACTGATE_TOKEN (the server and a tenant's token); FACTGATE_DATASET (default
examples/ragas.jsonl); the bounds FACTGATE_MIN_SUPPORTED_SHARE (default 0.7) and
FACTGATE_MAX_CONTRADICTED_RATE (default 0.1).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from factgate import CitationsResult, Client

DATASET = Path(os.environ.get("FACTGATE_DATASET", "examples/ragas.jsonl"))
MIN_SUPPORTED_SHARE = float(os.environ.get("FACTGATE_MIN_SUPPORTED_SHARE", "0.7"))
MAX_CONTRADICTED_RATE = float(os.environ.get("FACTGATE_MAX_CONTRADICTED_RATE", "0.1"))


def _rows(path: Path) -> list[dict[str, object]]:
    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith(("[", "{")):
        try:
            document = json.loads(text)
        except ValueError:
            document = None  # NDJSON whose first line is an object
        if isinstance(document, list):
            return document
        if isinstance(document, dict):
            for key in ("test_cases", "goldens", "items"):
                if isinstance(document.get(key), list):
                    return list(document[key])
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_answers_stay_faithful_to_their_sources() -> None:
    with Client(os.environ["FACTGATE_URL"], os.environ["FACTGATE_TOKEN"]) as fg:
        job_id = fg.submit("citations", _rows(DATASET))
        job = fg.wait(job_id, timeout_s=1800)
        assert job.status == "completed", f"job {job_id} ended {job.status}"
        flagged = []
        for line in fg.results(job_id):
            assert isinstance(line, CitationsResult)
            for s in line.report.sentences if line.report else []:
                if s.label in ("weak", "unsupported", "contradicted", "uncited"):
                    flagged.append(f"{line.custom_id} #{s.number} [{s.label}] {s.text} ({s.request_id})")
        missed = job.misses(
            under={"supported_share": MIN_SUPPORTED_SHARE}, over={"contradicted_rate": MAX_CONTRADICTED_RATE}
        )
        assert not missed, "\n".join([*missed, f"job {job_id}; flagged sentences:", *flagged])
