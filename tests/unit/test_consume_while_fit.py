"""A worker host slow beside another live one stops taking task messages (workers/fitness.py
`keeps_consuming`, applied by workers/bootsteps.py `ConsumeWhileFitStep`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from workers.bootsteps import ConsumeWhileFitStep
from workers.dispatcher import CONSUME_HOLD_S, keeps_consuming, slow_host

SLOW = 0.214  # the drill's slow-link host: its mean figure during the fault
FAST = 0.004


def test_a_slow_host_stops_while_another_is_fit() -> None:
    assert not keeps_consuming(SLOW, [FAST], paused_for_s=None)
    assert keeps_consuming(FAST, [SLOW], paused_for_s=None)  # the fit one goes on


def test_two_hosts_are_never_both_stopped() -> None:
    for a, b in [(SLOW, FAST), (0.3, 0.1), (0.13, 0.05), (1.0, 0.49), (0.2, 0.2)]:
        assert keeps_consuming(a, [b], None) or keeps_consuming(b, [a], None)


def test_alone_or_unmeasured_a_host_always_consumes() -> None:
    assert keeps_consuming(SLOW, [], paused_for_s=None)
    assert keeps_consuming(SLOW, [], paused_for_s=0.5)  # the others went away during the hold: at once
    assert keeps_consuming(None, [FAST], paused_for_s=None)


def test_the_hold_keeps_an_idle_slow_link_from_taking_work_again_at_once() -> None:
    # Drained, the slow link looks fast: nothing queues behind the probe.
    assert not keeps_consuming(0.02, [FAST], paused_for_s=CONSUME_HOLD_S / 2)
    assert keeps_consuming(0.02, [FAST], paused_for_s=CONSUME_HOLD_S)
    assert not keeps_consuming(SLOW, [FAST], paused_for_s=CONSUME_HOLD_S * 2)  # still slow: stays out


def test_the_line_is_the_leaders_slow_host_rule() -> None:
    for own, other in [(SLOW, FAST), (0.1, 0.001), (0.3, 0.2), (0.6, 0.29)]:
        assert keeps_consuming(own, [other], None) is not slow_host(own, other)
    assert not keeps_consuming(SLOW, [0.1, FAST], None)  # the fittest other decides


@dataclass
class FakeConsumer:
    """What the step touches of Celery's consumer."""

    dispatcher: Any
    queues: list[str] = field(default_factory=lambda: ["celery"])
    calls: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.controller = SimpleNamespace(factgate_dispatcher=self.dispatcher)

    @property
    def task_consumer(self) -> Any:
        return SimpleNamespace(queues=[SimpleNamespace(name=q) for q in self.queues])

    def cancel_task_queue(self, name: str) -> None:
        self.calls.append(f"cancel {name}")
        self.queues.remove(name)

    def add_task_queue(self, name: str) -> None:
        self.calls.append(f"add {name}")
        self.queues.append(name)


def test_the_step_cancels_and_later_adds_the_queue_back() -> None:
    dispatcher = SimpleNamespace(rtt_s=SLOW, others_rtt_s={"w1 t": FAST})
    consumer = FakeConsumer(dispatcher)
    step = ConsumeWhileFitStep(consumer)
    step.check(consumer, now=100.0)
    assert consumer.calls == ["cancel celery"]
    step.check(consumer, now=101.0)
    assert consumer.calls == ["cancel celery"]  # once
    dispatcher.rtt_s = 0.02  # the link healed (or merely drained)
    step.check(consumer, now=100.0 + CONSUME_HOLD_S / 2)
    assert consumer.calls == ["cancel celery"]  # held
    step.check(consumer, now=100.0 + CONSUME_HOLD_S)
    assert consumer.calls == ["cancel celery", "add celery"]
    assert consumer.queues == ["celery"]


def test_the_step_resumes_at_once_when_the_other_host_is_gone() -> None:
    dispatcher = SimpleNamespace(rtt_s=SLOW, others_rtt_s={"w1 t": FAST})
    consumer = FakeConsumer(dispatcher)
    step = ConsumeWhileFitStep(consumer)
    step.check(consumer, now=0.0)
    dispatcher.others_rtt_s = {}
    step.check(consumer, now=1.0)
    assert consumer.calls == ["cancel celery", "add celery"]


def test_the_step_does_nothing_without_a_dispatcher() -> None:
    consumer = FakeConsumer(None)
    ConsumeWhileFitStep(consumer).check(consumer, now=0.0)
    assert consumer.calls == []
