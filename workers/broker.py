"""The Redis broker transport, consumed without acknowledgements.

Why: acknowledging a message is the broker's at-least-once delivery, and factgate does not rely on it —
an item is claimed with a conditional UPDATE, so a second copy does nothing, and a lost message is sent
again by the database (a dispatch left unclaimed goes stale, a lease runs out; docs/architecture.md,
Invariants). Yet kombu's Redis transport emulates acknowledgements with two pipelines per message (record
the message as unacknowledged when it arrives, remove it when the task starts), a large share of a
worker's CPU per item at full speed for nothing (docs/profiles/README.md, "Acknowledgements"). With the task
queue declared `no_ack` (workers/app.py) a message is simply popped.

kombu's virtual channels skip the first pipeline for a `no_ack` consumer but still send the second when
Celery acknowledges; AMQP channels know their no-ack consumers and skip it. This channel does the same:
it names its no-ack consumers and tags each message with its consumer, so `Message.ack` returns at once.

Only kombu here: the web process loads this class too (it publishes through the same broker settings).
With a Sentinel `REDIS_URL` (config/redis_url.py) the same channel runs on kombu's Sentinel channel, which
asks the Sentinels for the current master on every new connection: `SentinelTransport`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kombu.transport import redis as kombu_redis


class Channel(kombu_redis.Channel):
    """A Redis channel whose no-ack consumers are not acknowledged (as on AMQP).

    A cancelled consumer stays in `no_ack_consumers`: when Redis goes away the channel is closed while its
    messages still wait in the worker's pool, and acknowledging one of them later would reach for the
    closed channel's connection and stop the consumer.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.no_ack_consumers: set[str] = set()

    def basic_consume(
        self,
        queue: str,
        no_ack: bool,
        callback: Callable[..., Any] | None,
        consumer_tag: str | None,
        **kwargs: Any,
    ) -> Any:
        if not no_ack or callback is None or consumer_tag is None:
            return super().basic_consume(queue, no_ack, callback, consumer_tag, **kwargs)
        self.no_ack_consumers.add(consumer_tag)
        deliver = callback

        def tagged(message: Any) -> Any:
            message.delivery_info["consumer_tag"] = consumer_tag  # what Message.ack looks up
            return deliver(message)

        return super().basic_consume(queue, no_ack, tagged, consumer_tag, **kwargs)


class Transport(kombu_redis.Transport):
    """kombu's Redis transport with `Channel` above (Celery's `broker_transport`)."""

    Channel = Channel


class SentinelChannel(Channel, kombu_redis.SentinelChannel):
    """`Channel`'s no-ack consumers on kombu's Sentinel channel (the master found through the Sentinels)."""


class SentinelTransport(kombu_redis.SentinelTransport):
    """kombu's Sentinel transport with `SentinelChannel` (Celery's `broker_transport` for sentinel://)."""

    Channel = SentinelChannel
