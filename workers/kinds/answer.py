"""The `answer` kind's handlers: the Agent question, each sentence's score, each investigation."""

from __future__ import annotations

from workers.answers import handle_answer_question, handle_investigation, handle_sentence
from workers.kinds import WorkerKind, register

KIND = register(
    WorkerKind(
        "answer",
        {
            "question": handle_answer_question,
            "sentence": handle_sentence,
            "investigation": handle_investigation,
        },
    )
)
