"""A grounded claim's search sources, stored once per job and list (docs/architecture.md, `source_lists`).

Why: a grounded claim's output held every search result the Decisions API returned (title, url, date,
snippet), about 950 of its 2,695 bytes on the simulator's data (bench/footprint.py), and claims of one job
whose queries find the same pages stored the same list item after item. Now the item's output keeps a
reference, `src_ref`, where `sources` was, and the list is stored once per (job, digest); every reader puts
the list back before it builds anything, so result lines, exports, report pages and request lookups are
byte for byte what they were.

Why the reference is named `src_ref`: seven characters that sort between `sources` and `verdict`. JSONB
orders an object's keys by length, then bytes, so on Postgres the reference sits where `sources` sat and
the list put back in its place gives the object its stored order; on SQLite, whose JSON text keeps insertion
order, the reference replaces the key in place. Either way `join_sources(split_sources(o))` is `o`, key
order included.

Why a 128-bit digest of the list's JSON text: the reference is stored per item (34 bytes), the list once;
a collision between two different lists of one job is as likely as one between two random UUIDs. The text
is `json.dumps` of the list as the worker built it, so lists that differ in any byte, key order included,
get different digests.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "REF_KEY",
    "SOURCES_KEY",
    "SplitSources",
    "join_sources",
    "refs_of",
    "sources_digest",
    "split_sources",
]

SOURCES_KEY = "sources"
REF_KEY = "src_ref"


def sources_digest(sources: list[Any]) -> str:
    """32 hex digits (the first 128 bits of SHA-256) of the list's JSON text."""
    raw = json.dumps(sources, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return hashlib.sha256(raw).hexdigest()[:32]


@dataclass(frozen=True)
class SplitSources:
    """An output with its sources replaced by a reference, and the list to store under that reference."""

    output: dict[str, Any]
    ref: str
    sources: list[Any]


def split_sources(output: Mapping[str, Any]) -> SplitSources | None:
    """`output` with `src_ref` in place of a non-empty `sources` list (the key's position kept); None when
    there is nothing to store apart (no sources, an empty list, or already a reference)."""
    sources = output.get(SOURCES_KEY)
    if not isinstance(sources, list) or not sources or REF_KEY in output:
        return None
    ref = sources_digest(sources)
    out = {(REF_KEY if k == SOURCES_KEY else k): (ref if k == SOURCES_KEY else v) for k, v in output.items()}
    return SplitSources(out, ref, sources)


def refs_of(outputs: Iterable[Mapping[str, Any] | None]) -> set[str]:
    """The source references these outputs hold."""
    return {o[REF_KEY] for o in outputs if o is not None and isinstance(o.get(REF_KEY), str)}


def join_sources(output: dict[str, Any], lists: Mapping[str, list[Any]]) -> dict[str, Any]:
    """`output` with its reference replaced by the list it names, in the reference's place; an output
    without one is returned as it is. A reference with no list raises LookupError: the list is written in
    the statement or transaction that writes the reference, so a missing one is lost data, not an answer."""
    ref = output.get(REF_KEY)
    if not isinstance(ref, str):
        return output
    if ref not in lists:
        raise LookupError(f"source list {ref} is missing")
    sources = lists[ref]
    return {(SOURCES_KEY if k == REF_KEY else k): (sources if k == REF_KEY else v) for k, v in output.items()}
