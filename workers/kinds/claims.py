"""The `claims` kind's handler: one Decisions request for one claim in one mode."""

from __future__ import annotations

from workers.claims import handle_claim, handle_claim_pack
from workers.kinds import WorkerKind, register

KIND = register(WorkerKind("claims", {"claim": handle_claim}, packs={"claim": handle_claim_pack}))
