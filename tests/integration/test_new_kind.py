"""A fourth job kind, `echo`, added the way docs/architecture.md ("Adding a job kind") says — one module
per layer, no table edited — runs end to end: intake over the API, a real worker (a `celery worker`
subprocess that loads the kind), finalize, and the results export in NDJSON and CSV.

It also counts the files the kind needed: the registry's shape is the claim that a new kind needs at most
six (five modules here; the product's kinds add a report template as the sixth).
"""

from __future__ import annotations

import csv
import importlib
import io
import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from checks.recipes import RECIPES, kind_names
from cli.kinds import KINDS as CLI_KINDS
from cli.kinds import render_line
from jobs.kinds import KINDS as JOB_KINDS
from jobs.tenancy import create_token
from models import ItemStatus, JobStatus, make_session_factory, session_scope
from simulator.config import SimConfig
from simulator.server import run_in_thread
from tests.integration.stack import Stack, fresh_database, running_stack
from web.app import create_app
from web.kinds import KINDS as WEB_KINDS
from web.openapi import openapi_document
from workers.kinds import KINDS as WORKER_KINDS

KIND_DIR = Path(__file__).resolve().parents[1] / "kinds"
ECHO_MODULES = ("echo_checks", "echo_jobs", "echo_workers", "echo_web", "echo_cli")
REGISTRIES = (RECIPES, JOB_KINDS, WORKER_KINDS, WEB_KINDS, CLI_KINDS)


@pytest.fixture
def echo_kind() -> Iterator[None]:
    """Register the echo kind in this process for one test, then take it out again."""
    for name in ECHO_MODULES:
        importlib.import_module(f"tests.kinds.{name}")
    try:
        yield
    finally:
        for registry in REGISTRIES:
            registry.unregister("echo")
        for name in ECHO_MODULES:
            sys.modules.pop(f"tests.kinds.{name}", None)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    with (
        run_in_thread(SimConfig()) as sim,
        fresh_database() as (url, engine),
        running_stack(url, engine, sim.base_url, tmp_path) as st,
    ):
        yield st


def test_a_new_kind_needs_one_module_per_layer_and_no_table_edit() -> None:
    files = sorted(p.name for p in KIND_DIR.glob("echo_*.py") if p.name != "echo_app.py")
    assert files == sorted(f"{m}.py" for m in ECHO_MODULES)
    assert len(files) + 1 <= 6  # + the report template a product kind has (echo shows none)
    # Each module registers into its own layer's registry and nothing else.
    layers = {"echo_checks": "checks.recipes", "echo_jobs": "jobs.kinds", "echo_workers": "workers.kinds",
              "echo_web": "web.kinds", "echo_cli": "cli.kinds"}  # fmt: skip
    for module, registry in layers.items():
        text = (KIND_DIR / f"{module}.py").read_text()
        assert f"from {registry} import" in text and "register(" in text, module


def test_echo_runs_end_to_end_through_intake_a_real_worker_finalize_and_the_exports(
    stack: Stack, echo_kind: None, request: pytest.FixtureRequest
) -> None:
    assert "echo" in kind_names()
    stack.start_worker(app="tests.kinds.echo_app")
    app = create_app(
        {
            "database_url": stack.pg_url,
            "redis_url": stack.env["REDIS_URL"],
            "perplexity_api_key": "sim-test-key",
            "instance_path": stack.tmp / "instance",
        }
    )
    request.addfinalizer(app.extensions["factgate"].engine.dispose)  # its pool's connections closed
    app.testing = True
    client = app.test_client()
    with session_scope(make_session_factory(stack.engine)) as session:
        token = create_token(session, f"echo-{uuid.uuid4().hex[:8]}").token
    auth = {"Authorization": f"Bearer {token}"}

    # The kind is in the served document's enums, with its generated result-line schema.
    doc = openapi_document()
    assert "echo" in doc["components"]["schemas"]["Job"]["properties"]["kind"]["enum"]
    assert "EchoResult" in doc["components"]["schemas"]

    # Bad rows: one 400 naming the item and the field, nothing stored.
    bad = client.post("/v1/jobs", json={"kind": "echo", "items": [{"id": "a", "text": "x"}, {"id": "b"}]},
                      headers=auth)  # fmt: skip
    assert bad.status_code == 400, bad.get_data(as_text=True)
    assert bad.get_json()["error"]["field"] == "items[1].text"

    rows = [{"id": "a", "text": "hello"}, {"id": "b", "text": "=cmd()"}, {"id": "c", "text": "world"}]
    resp = client.post("/v1/jobs", json={"kind": "echo", "items": rows}, headers=auth)
    assert resp.status_code == 202, resp.get_data(as_text=True)
    job_id = uuid.UUID(resp.get_json()["id"])

    job = stack.wait_job(job_id, timeout=90)
    assert job.status == JobStatus.COMPLETED, job.error
    assert job.summary is not None
    assert job.summary["kind"] == "echo" and job.summary["rows"] == 3 and job.summary["echoed"] == 3
    assert job.summary["request_counts"]["completed"] == 3

    body = client.get(f"/v1/jobs/{job_id}/results", headers=auth).get_data(as_text=True)
    *lines, end = [json.loads(x) for x in body.splitlines()]
    assert end == {
        "_end": {"count": 3, "after": None, "last_id": "c"}
    }  # read in keyset chunks, then the trailer
    resumed = client.get(f"/v1/jobs/{job_id}/results?after=a", headers=auth).get_data(as_text=True)
    assert [json.loads(x).get("custom_id") for x in resumed.splitlines()] == ["b", "c", None]
    assert [(x["custom_id"], x["status"], x["echoed"]) for x in lines] == [
        ("a", ItemStatus.DONE, "HELLO"), ("b", ItemStatus.DONE, "=CMD()"), ("c", ItemStatus.DONE, "WORLD")
    ]  # fmt: skip
    table = list(csv.reader(io.StringIO(client.get(f"/v1/jobs/{job_id}/results?format=csv", headers=auth)
                                        .get_data(as_text=True))))  # fmt: skip
    assert table[0] == ["custom_id", "status", "echoed"]
    assert table[2][2].startswith("'")  # formula-safe, like every export
    assert table[-1] == ["#end", "3"]

    # A CSV body: its header is checked against the recipe's row fields; echo has no streamed loader, so
    # its rows are checked in memory and inserted like a JSON body's.
    csv_post = {"headers": {**auth, "Content-Type": "text/csv"}}
    missing = client.post("/v1/jobs?kind=echo", data="id,claim\nd,x\n", **csv_post)
    assert missing.status_code == 400 and "text" in missing.get_json()["error"]["message"]
    from_csv = client.post("/v1/jobs?kind=echo", data="id,text\nd,from a csv\n", **csv_post)
    assert from_csv.status_code == 202, from_csv.get_data(as_text=True)
    assert (
        client.get(f"/v1/jobs/{from_csv.get_json()['id']}", headers=auth).get_json()["request_counts"][
            "total"
        ]
        == 1
    )
    assert render_line("echo", lines[0]) == ["a: HELLO"]
    assert client.get(f"/v1/jobs/{job_id}", headers=auth).get_json()["kind"] == "echo"
