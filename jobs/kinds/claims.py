"""The `claims` kind's state changes: an item per claim and mode; summary and result lines from them."""

from __future__ import annotations

from jobs.claims import claim_units, claims_summary, iter_claim_results
from jobs.kinds import JobKind, register

KIND = register(JobKind("claims", units=claim_units, summarize=claims_summary, results=iter_claim_results))
