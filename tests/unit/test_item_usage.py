"""jobs/items.py:ItemUsage.as_dict: what every settled item's output carries under `usage`."""

from __future__ import annotations

from dataclasses import fields

from jobs.items import ItemUsage


def test_as_dict_names_every_field_with_money_and_time_rounded() -> None:
    usage = ItemUsage(
        attempts=2,
        searches=1,
        input_tokens=30,
        output_tokens=4,
        cost_usd=0.0123456789,
        upstream_latency_s=0.123456,
        queue_wait_s=1.000049,
    )
    out = usage.as_dict()
    assert list(out) == [f.name for f in fields(ItemUsage)]  # a new field cannot be left out
    assert out == {
        "attempts": 2,
        "searches": 1,
        "input_tokens": 30,
        "output_tokens": 4,
        "cost_usd": 0.01234568,
        "upstream_latency_s": 0.1235,
        "queue_wait_s": 1.0,
    }
