"""What the leader puts on the broker: each window's `run_item` messages, window bodies, finalize requests.

On a Redis result backend (server mode) a window's items go out as plain `run_item` messages, built from
one template made by Celery's own message builder (`Publisher.publish_item`): `send_task` per item routed,
repr'd, signalled and validated the same message over again, a cost paid for every item at the ceiling.
The leader closes the window itself once its items have left flight (workers/windows.py) and sends its
body, `after_window`, then. Other backends (embedded mode's) join on a saved group, so they get `chord()`.

Every `run_item` carries the reign's term (`epoch`): a worker refuses an older one
(workers/leadership.py:refuse_stale_dispatch).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, TypedDict

import pydantic
from celery import Celery, chord
from celery.backends.redis import RedisBackend

from checks.recipes import stages_sending_nothing
from jobs.scheduling import Ready
from workers.api import DEFAULT_QUEUE

log = logging.getLogger("factgate.workers")

# One window's sender: (job, its items, the batch's producer). Tests pass their own.
Send = Callable[[uuid.UUID, list[Ready], Any], None]


@pydantic.dataclasses.dataclass(frozen=True)
class PublishingConfig:
    """The queue `run_item` messages go to."""

    queue: Annotated[str, pydantic.Field(min_length=1)] = DEFAULT_QUEUE
    # Items of a stage that calls nothing upstream (checks/recipes.py:`stages_sending_nothing`) go out this
    # many to a `run_items` message: each is milliseconds of work, and on a re-run the verdict store answers
    # its whole row, so a message, a claim transaction and a finalize per row would be most of the cost.
    batch_sending_nothing: Annotated[int, pydantic.Field(ge=1, le=100)] = 16


class PublishOptions(TypedDict):
    """How every `run_item` message is published (kombu's `Producer.publish` keywords)."""

    exchange: str
    routing_key: str
    serializer: str
    delivery_mode: int
    retry: bool
    reply_to: str


@dataclass(frozen=True)
class ItemTemplate:
    """What every `run_item` message shares, made once by Celery's own message builder.

    `headers` and `embed` (the body's third part: callbacks, errbacks, chain, chord) are Celery's protocol
    2, which we copy into each message and never read, so they stay open mappings here."""

    headers: Mapping[str, object]
    embed: Mapping[str, object]
    options: PublishOptions


class Publisher:
    """Builds and sends the leader's messages on `app`'s broker."""

    def __init__(self, app: Celery, config: PublishingConfig | None = None) -> None:
        self.app = app
        self.config = config or PublishingConfig()
        # An item task returns nothing anyone reads: its outcome is in the database. Storing it cost a
        # GET, a SET and a PUBLISH per item. On Redis the leader closes the windows itself, so there the
        # results need not be stored (`ignore_result`); the in-memory backend of embedded mode joins a
        # chord by reading each stored result, so there they must be.
        self.closes_windows = isinstance(app.backend, RedisBackend)
        self._templates: dict[str, ItemTemplate] = {}

    def send_windows(self, windows: Sequence[tuple[uuid.UUID, list[Ready]]], send: Send) -> None:
        """Every window through `send`, in one producer batch: on Redis all their messages go out in one
        pipeline (transports without batches send each message at once). Raises if sending fails; the
        caller makes the windows' items dispatchable again."""
        with self.app.producer_or_acquire() as producer, producer.batch():
            for job_id, window in windows:
                send(job_id, window, producer)

    def send_chord(self, job_id: uuid.UUID, window: list[Ready], producer: Any, term: int) -> None:
        """One window: its items as `run_item(item, epoch=term)`, then `after_window` with the questions
        they belong to (on Redis, sent by the leader when it closes the window)."""
        questions = sorted({r.parent_id for r in window if r.parent_id is not None})
        if not self.closes_windows:
            body = self.app.signature("factgate.after_window", args=(str(job_id), questions), immutable=True)
            chord(
                [
                    self.app.signature(
                        "factgate.run_item", args=(r.id,), kwargs={"epoch": term}, immutable=True
                    )
                    for r in window
                ]
            )(body)
            return
        quiet = stages_sending_nothing()
        together = [r.id for r in window if r.stage in quiet]
        for r in window:
            if r.stage not in quiet:
                self.publish_item(producer, r.id, term)
        size = self.config.batch_sending_nothing
        for start in range(0, len(together), size):
            self.publish_items(producer, together[start : start + size], term)

    def _item_template(self, task: str = "factgate.run_item") -> ItemTemplate:
        """Headers, body extras and publish options of a `run_item` (or `run_items`) message, made once by
        Celery's own message builder (so they follow its protocol) and copied for every item."""
        template = self._templates.get(task)
        if template is None:
            queue = self.app.amqp.queues[self.config.queue]
            headers, properties, body, _event = self.app.amqp.as_task_v2(
                "template", task, args=(0,), kwargs={}, ignore_result=True,
                origin=self.app.conf.get("origin") or None,
            )  # fmt: skip
            # Straight to the queue (the anonymous exchange, as `send_task` routes a direct queue): through
            # the named exchange kombu's Redis channel looks its bindings up with an SMEMBERS per message,
            # outside the batch. Nothing to declare: a Redis list needs none, and the workers bind theirs.
            options = PublishOptions(
                exchange="",
                routing_key=queue.name,
                serializer=self.app.conf.task_serializer,
                delivery_mode=queue.exchange.delivery_mode or 2,
                retry=False,  # a failed batch is undone whole by the caller
                reply_to=properties.get("reply_to") or "",
            )
            template = self._templates[task] = ItemTemplate(headers=headers, embed=body[2], options=options)
        return template

    def publish_item(self, producer: Any, item_id: int, term: int) -> None:
        """Publish one `run_item(item_id, epoch=term)` message into the tick's batch."""
        self._publish(producer, "factgate.run_item", item_id, term)

    def publish_items(self, producer: Any, item_ids: list[int], term: int) -> None:
        """One `run_items(item_ids, epoch=term)` message: items whose stage calls nothing upstream."""
        self._publish(producer, "factgate.run_items", item_ids, term)

    def _publish(self, producer: Any, task: str, first: int | list[int], term: int) -> None:
        template = self._item_template(task)
        task_id = str(uuid.uuid4())
        args = (first,)
        kwargs = {"epoch": term}  # the reign's term: a worker refuses an older one
        message_headers = {
            **template.headers,
            "id": task_id,
            "root_id": task_id,
            "argsrepr": f"({first!r},)",
            "kwargsrepr": f"{{'epoch': {term}}}",
        }
        producer.publish(
            (args, kwargs, template.embed),
            headers=message_headers,
            correlation_id=task_id,
            **template.options,
        )

    def send_bodies(self, per_job: Mapping[uuid.UUID, list[int]]) -> None:
        """The bodies of the windows closed this tick, one `after_window` per job (its questions merged), in
        one producer batch. A failure is logged: the job's finalize and the sweep remain."""
        if not per_job:
            return
        try:
            with self.app.producer_or_acquire() as producer, producer.batch():
                for job_id, questions in per_job.items():
                    self.app.send_task(
                        "factgate.after_window",
                        args=(str(job_id), questions),
                        ignore_result=True,
                        producer=producer,
                    )
        except Exception:
            log.warning(
                "dispatcher: could not send %d closed windows' bodies; the finalize and the sweep will",
                len(per_job),
                exc_info=True,
            )

    def send_finalize(self, job_id: uuid.UUID) -> None:
        """`after_window` with no questions is the job's finalize alone (idempotent; any worker runs it)."""
        try:
            self.app.send_task("factgate.after_window", args=(str(job_id), []), ignore_result=True)
        except Exception:
            log.warning("dispatcher: could not ask to finalize job %s; the sweep will", job_id, exc_info=True)
