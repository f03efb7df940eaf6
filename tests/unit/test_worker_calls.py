"""What a handler's `Calls` makes of upstream failures: a refused tenant key says how to fix it."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pytest

from clients.perplexity import PerplexityClient
from config import Settings
from jobs.records import ClaimedItem
from workers.context import build_context
from workers.steps import Calls, StepError

BODY = {
    "model": "pplx-decider-latest",
    "state": "x",
    "questions": {"is_true": {"type": "noul", "instructions": "?"}},
}


def _item() -> ClaimedItem:
    return ClaimedItem(
        id=1, job_id=uuid.uuid4(), tenant_id=uuid.uuid4(), stage="claim", mode="ungrounded", custom_id="c1",
        input={}, token=1, options={}, dedupe_key=None,
    )  # fmt: skip


@pytest.mark.parametrize(("own_key", "hint"), [("0123456789ab", True), (None, False)])
def test_a_401_on_a_tenants_own_key_says_how_to_replace_it(
    tmp_path: Path, own_key: str | None, hint: bool
) -> None:
    ctx = build_context(Settings(instance_path=tmp_path))
    refused = httpx.Response(401, json={"error": {"message": "invalid api key", "type": "authentication"}})
    client = PerplexityClient(
        "https://api.example.test", "pplx-x", transport=httpx.MockTransport(lambda r: refused), max_retries=0
    )
    calls = Calls(ctx, _item(), client, own_key)
    with pytest.raises(StepError) as info:
        calls.run(lambda: client.decide(BODY))
    message = str(info.value)
    assert "401" in message and info.value.retryable is False
    assert ("fingerprint 0123456789ab" in message and "--upstream-key-file" in message) is hint
    assert len(calls.rows) == 1 and calls.rows[0].status_code == 401  # the refused attempt is recorded
    ctx.close()


def test_the_workers_client_takes_its_retries_and_backoff_from_the_settings(tmp_path: Path) -> None:
    settings = Settings.from_env(
        {
            "FACTGATE_INSTANCE_PATH": str(tmp_path),
            "FACTGATE_HTTP_MAX_RETRIES": "5",
            "FACTGATE_HTTP_RETRY_BASE_S": "0.1",
        }
    )
    ctx = build_context(settings)
    try:
        assert ctx.client.policy.max_retries == 5
        assert ctx.client.policy.base_delay_s == 0.1
    finally:
        ctx.close()
