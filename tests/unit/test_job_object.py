"""The job object as a model (jobs/serialize.py:JobObject) and the `Job` component generated from it."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from jobs.serialize import SIMULATED_NOTE, TIMESTAMP_FIELDS, JobLinks, JobObject, JobTimestamps
from web.openapi import openapi_document

FIELDS: dict[str, Any] = {
    "id": "6f1c3a52-6c1e-4f7e-9d1e-2f1b6b0d9a11",
    "object": "job",
    "kind": "claims",
    "status": "in_progress",
    "options": {"mode": "grounded"},
    "metadata": {},
    "warnings": [],
    "request_counts": {"total": 2, "completed": 1, "failed": 0, "skipped": 0, "pending": 1, "running": 0},
    "request_counts_as_of": None,
    "usage": {"http_attempts": 1, "cost_usd": 0.005},
    "cost_usd": 0.005,
    "timestamps": JobTimestamps(**dict.fromkeys(TIMESTAMP_FIELDS)),
    "simulated": False,
    "priority": "batch",
    "schedule": None,
    "error": None,
    "summary": None,
    "expires_at": None,
    "purged_at": None,
    "links": JobLinks(
        self="/v1/jobs/x",
        results="/v1/jobs/x/results",
        errors="/v1/jobs/x/errors",
        scorecard="/v1/jobs/x/scorecard",
        cancel="/v1/jobs/x/cancel",
        retry="/v1/jobs/x/retry",
        report="/jobs/x",
    ),
}


def test_the_json_has_every_field_in_order_and_the_optional_ones_only_when_set() -> None:
    plain = JobObject(**FIELDS).as_json()
    assert list(plain) == list(FIELDS)
    assert plain["timestamps"] == dict.fromkeys(TIMESTAMP_FIELDS) and plain["links"]["self"] == "/v1/jobs/x"
    simulated = JobObject(**{**FIELDS, "simulated": True, "simulated_note": SIMULATED_NOTE}).as_json()
    assert list(simulated) == [*FIELDS, "simulated_note"]


def test_a_misspelt_or_missing_field_is_refused() -> None:
    with pytest.raises(ValidationError, match="simulated_notes"):
        JobObject(**{**FIELDS, "simulated_notes": "x"})
    with pytest.raises(ValidationError, match="links"):
        JobObject(**{k: v for k, v in FIELDS.items() if k != "links"})


def test_the_served_job_component_is_the_models() -> None:
    schemas = openapi_document()["components"]["schemas"]
    job = schemas["Job"]
    assert job["title"] == "Job" and list(job["properties"]) == list(JobObject.model_fields)
    assert set(job["required"]) == set(FIELDS)  # simulated_note, retried and message only when they apply
    assert "additionalProperties" not in job  # the object may grow fields
    refs = {name: job["properties"][name].get("$ref") for name in ("metadata", "request_counts", "usage")}
    assert refs == {
        "metadata": "#/components/schemas/Metadata",
        "request_counts": "#/components/schemas/RequestCounts",
        "usage": "#/components/schemas/Usage",
    }
    assert {"JobTimestamps", "JobLinks", "Metadata", "RequestCounts", "Usage"} <= set(schemas)
    assert "claims" in job["properties"]["kind"]["enum"]
    assert job["properties"]["summary"]["anyOf"][0] == {"type": "null"}  # the kinds' summaries follow
