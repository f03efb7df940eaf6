"""The `quote` kind's handlers: the Search question, each result's rank, the compare request."""

from __future__ import annotations

from workers.kinds import WorkerKind, register
from workers.quotes import handle_compare, handle_quote_question, handle_result, handle_result_pack

KIND = register(
    WorkerKind(
        "quote",
        {"question": handle_quote_question, "result": handle_result, "compare": handle_compare},
        packs={"result": handle_result_pack},
    )
)
