"""The `answer` kind's handlers: the Agent question, each sentence's score, each investigation."""

from __future__ import annotations

from checks.packing import AUDIT_STAGE
from workers.answers import (
    handle_answer_investigation,
    handle_answer_question,
    handle_sentence,
    handle_sentence_pack,
)
from workers.kinds import WorkerKind, register

KIND = register(
    WorkerKind(
        "answer",
        {
            "question": handle_answer_question,
            "sentence": handle_sentence,
            "investigation": handle_answer_investigation,
            # the packing audit asks a packed sentence again in the unpacked shape
            AUDIT_STAGE: handle_sentence,
        },
        packs={"sentence": handle_sentence_pack},
    )
)
