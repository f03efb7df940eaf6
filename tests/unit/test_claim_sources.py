"""A claim's sources stored apart come back exactly, key order included (checks/claim_sources.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from checks.claim_sources import REF_KEY, join_sources, refs_of, sources_digest, split_sources

SOURCES = [
    {"title": "Aconcagua", "url": "https://a.example", "date": "2023-05-02", "snippet": "é \u2028 6,961 m"},
    {"title": "Everest", "url": "https://e.example", "date": None, "snippet": "8,848.86 metres"},
]
# Every key the claim handler writes (workers/claims.py), the usage the settle adds, and a duplicate's mark.
OUTPUT: dict[str, Any] = {
    "p": 0.0132,
    "verdict": "contradicted",
    "request_id": "r1",
    "request_ids": ["r1"],
    "sanitized": [],
    "input_tokens": 298,
    "output_tokens": 1,
    "model": "m",
    "n_search_results": 2,
    "sources": SOURCES,
    "usage": {"attempts": 1},
    "duplicate_of_item": 7,
}


def jsonb_order(keys: list[str]) -> list[str]:
    """The order in which Postgres's JSONB keeps an object's keys: by length, then by bytes."""
    return sorted(keys, key=lambda k: (len(k.encode()), k.encode()))


def test_a_split_output_joins_back_to_the_same_text() -> None:
    split = split_sources(OUTPUT)
    assert split is not None and "sources" not in split.output and split.sources is SOURCES
    assert split.output[REF_KEY] == split.ref == sources_digest(SOURCES) and len(split.ref) == 32
    assert json.dumps(join_sources(split.output, {split.ref: SOURCES})) == json.dumps(OUTPUT)


def test_the_reference_sits_where_jsonb_keeps_sources() -> None:
    """On Postgres the stored object comes back in JSONB's order: the reference must take the place of
    `sources` there too, or a request lookup's item output would change its key order."""
    split = split_sources(OUTPUT)
    assert split is not None
    stored = jsonb_order(list(split.output))
    assert [("sources" if k == REF_KEY else k) for k in stored] == jsonb_order(list(OUTPUT))


@pytest.mark.parametrize("output", [{"p": 0.5}, {"p": 0.5, "sources": []}, {"sources": None}])
def test_nothing_to_store_apart(output: dict[str, Any]) -> None:
    assert split_sources(output) is None


def test_an_output_holding_a_reference_is_not_split_again() -> None:
    split = split_sources(OUTPUT)
    assert split is not None
    assert split_sources({**split.output, "sources": SOURCES}) is None


def test_lists_that_differ_in_any_byte_get_other_digests() -> None:
    reordered = [dict(reversed(list(SOURCES[0].items()))), SOURCES[1]]
    assert sources_digest(SOURCES) == sources_digest(json.loads(json.dumps(SOURCES)))
    assert sources_digest(reordered) != sources_digest(SOURCES)
    assert sources_digest(SOURCES[:1]) != sources_digest(SOURCES)


def test_refs_of_and_a_missing_list() -> None:
    split = split_sources(OUTPUT)
    assert split is not None
    assert refs_of([split.output, None, {"p": 1.0}, {REF_KEY: 3}]) == {split.ref}
    assert join_sources({"p": 1.0}, {}) == {"p": 1.0}
    with pytest.raises(LookupError, match=split.ref):
        join_sources(split.output, {})
