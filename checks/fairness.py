"""Which jobs the next items of one upstream scope come from: hierarchical deficit round robin.

An upstream scope (API key + endpoint) is a few requests a second shared by every tenant and job. The
dispatcher keeps only as many item messages in flight as keep the scope busy, and each time slots free up
it asks `allocate` which jobs the next `slots` items come from. Usually that is one to a few slots per call,
so fairness cannot come from dividing one big batch: it comes from `FairState`, carried from call to call.
The split is exactly that of one long call (see "Calls" below), so how the dispatcher slices its slots
never changes who gets what.

The order is decided at three levels, each a deficit round robin (DRR, Shreedhar and Varghese, 1995):

1. tenants, with a quantum proportional to the tenant's weight (default 1);
2. within a tenant, its two priority classes, `interactive` weighted 9 to `batch`'s 1;
3. within a class, the tenant's jobs, with equal quanta (plain round robin, in submission order).

A level is a ring of its members that have work. The member at the head gets its quantum added to its
deficit when its turn starts, then one item per pick while the deficit covers an item, then goes to the
tail keeping the remainder (less than one item). A member that runs out of work leaves the ring and its
deficit is dropped, so idle time earns no credit; it rejoins at the tail with nothing banked. A pick at
level 1 picks a tenant, then level 2 a class of that tenant, then level 3 a job of that class.

Why DRR rather than weighted fair queueing, stride or virtual-time schedulers: every item costs the same
(one request), so DRR needs no sorting or heap per pick, only a pointer move: O(1) per item. Its state is a
ring position and one integer per member, which is cheap to reconcile with the database's view on each
call and obviously bounded. An idle member is simply removed, where virtual-time schedulers need care to
stop returning flows from claiming lost time. And its lag bounds are short, checkable sums.

The variant: quanta are normalised so that the lightest member with work at a level gets exactly one item
of credit per turn (classic DRR only needs quantum >= the largest cost, which keeps a pick O(1); choosing
the smallest such quantum keeps turns, and so waits, as short as possible: two weight-1 tenants alternate
item by item instead of in bursts). Quanta are integers in millionths of an item (`UNIT`), so rounds are
exact: float drift cannot leak credit from one tenant to another over millions of items.

Class weights 9:1: while both classes of a tenant have work, interactive gets 9 of every 10 of the
tenant's items, so a person waiting on a small job is slowed by at most a tenth by their own organisation's
bulk work, and batch still gets 1 in 10, so it never starves (strict priority would starve it for as
long as interactive work keeps arriving). Classes only split a tenant's own share: one tenant marking
work interactive takes nothing from other tenants.

Guarantees, with q(t) = w(t) / min w over tenants with work (a tenant's quantum in items, >= 1), counting
every item of the scope, and checked by tests/unit/test_fairness.py:

- conservation: allocations sum to min(slots, total ready), and no job gets more than its `ready`;
- no starvation: while the set of jobs with work, their classes and the weights stay fixed, every window
  of `wait_bounds()[job]` consecutive items contains one for the job:
  (1 + sum over the other tenants u of ceil(q(u))) x (1 + ceil(quantum of the tenant's other class, if it
  has work: 9 for a batch job, 1 for an interactive one)) x (jobs in the job's class).
  After a change to that set, the bound for the new set applies once the turns then in progress end;
- shares: tenants competing from a fresh state, after N items, each has received N x w(t) / sum(w)
  items to within 2 x q(t) (strictly), however the slots were sliced, so the share error is below
  2 x q(t) / N; within a tenant whose two classes got work together, interactive has 9/10 of the
  tenant's items to within one item, batch the rest; so each job is within 2 x q(t) + 2 items of
  N x `shares()[job]`;
- no banked credit: a member that leaves and comes back is indistinguishable from one never seen; from
  its return, a tenant gets at most N x w(t) / sum(w) + 2 x q(t) of the next N items.

Weights are relative: the heaviest tenant's turn is q items in a row, and that is also how long each other
tenant can wait for it, so keep the spread between weights modest (say 1:10 at most).

Calls: a call first reconciles the state with `backlogs` (drops members without work, queues newcomers
at the tail in a stable order), then picks `min(slots, total ready)` items, removing a job as soon as its
`ready` is used up. So given the backlogs the dispatcher would report after dispatching (ready minus what
was allocated), k calls of one slot allocate the same items, in the same order, as one call of k slots.

Cost: O(backlogs + slots) per call, plus O(log tenants) for each tenant that runs dry within the call;
state holds only the tenants, classes and jobs with work at the last call. The state is in memory and per
scope: one dispatcher owns it. Losing it (restart) just starts a fresh round, so it is not persisted.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from types import MappingProxyType
from typing import Generic, Literal, TypeVar, get_args

__all__ = [
    "CLASS_WEIGHTS",
    "DEFAULT_WEIGHT",
    "PRIORITIES",
    "UNIT",
    "Backlog",
    "FairState",
    "Priority",
    "allocate",
    "shares",
    "wait_bounds",
]

Priority = Literal["interactive", "batch"]
# Also the order in which a tenant's classes join its ring when both arrive together: interactive first.
PRIORITIES: tuple[Priority, ...] = get_args(Priority)
CLASS_WEIGHTS: Mapping[Priority, int] = MappingProxyType({"interactive": 9, "batch": 1})
DEFAULT_WEIGHT = 1.0  # a tenant missing from `weights`
UNIT = 1_000_000  # one item, in deficit units: quanta are whole numbers of millionths of an item

_K = TypeVar("_K", bound=Hashable)


@dataclass(frozen=True, slots=True)
class Backlog:
    """One job's dispatchable work in one scope, right now.

    `ready` counts items that could be dispatched now (not those in flight). `order` is a stable tie-break,
    e.g. the job's submission sequence: jobs and tenants that start waiting in the same call join the
    rings in this order.
    """

    job_id: str
    tenant: str
    priority: Priority
    ready: int
    order: int

    def __post_init__(self) -> None:
        if self.priority not in PRIORITIES:
            raise ValueError(
                f"job {self.job_id!r}: priority must be one of {PRIORITIES}, got {self.priority!r}"
            )
        if isinstance(self.ready, bool) or not isinstance(self.ready, int) or self.ready < 0:
            raise ValueError(
                f"job {self.job_id!r}: ready must be a whole number of 0 or more, got {self.ready!r}"
            )


class _Ring(Generic[_K]):
    """One DRR level: the members with work in service order; the head is the member whose turn it is."""

    __slots__ = ("_deficit", "_granted", "_queue")

    def __init__(self) -> None:
        self._queue: deque[_K] = deque()
        self._deficit: dict[_K, int] = {}  # exactly the members of _queue
        self._granted = False  # whether the head's current turn has had its quantum

    def __len__(self) -> int:
        return len(self._queue)

    def __contains__(self, key: object) -> bool:
        return key in self._deficit

    def members(self) -> Iterable[_K]:
        return iter(self._queue)

    def sync(self, present: Mapping[_K, object], arrival: Callable[[_K], tuple[int, str]]) -> None:
        """Keep members still in `present`, forget the rest and their deficit, queue newcomers at the tail."""
        if not self._deficit.keys() <= present.keys():
            head = self._queue[0]
            self._queue = deque(key for key in self._queue if key in present)
            self._deficit = {key: self._deficit[key] for key in self._queue}
            if not self._queue or self._queue[0] != head:
                self._granted = False
        for key in sorted(present.keys() - self._deficit.keys(), key=arrival):
            self._queue.append(key)
            self._deficit[key] = 0

    def pick(self, quantum: Callable[[_K], int]) -> _K:
        """The member the next item goes to; it is left at the head. The ring must not be empty."""
        while True:
            head = self._queue[0]
            if not self._granted:
                self._deficit[head] += quantum(head)
                self._granted = True
            if self._deficit[head] >= UNIT:
                self._deficit[head] -= UNIT
                return head
            self._queue.rotate(-1)
            self._granted = False

    def drop_head(self) -> None:
        """The head ran out of work: it leaves, and its deficit with it (no credit for idle time)."""
        del self._deficit[self._queue.popleft()]
        self._granted = False


class FairState:
    """What one scope's policy carries from one `allocate` call to the next: ring order and deficits.

    Create one per scope (API key + endpoint) and pass it to every call for that scope. It only ever holds
    the tenants, classes and jobs that had work at the last call.
    """

    __slots__ = ("_classes", "_jobs", "_tenants")

    def __init__(self) -> None:
        self._tenants: _Ring[str] = _Ring()
        self._classes: dict[str, _Ring[Priority]] = {}
        self._jobs: dict[tuple[str, Priority], _Ring[str]] = {}

    def tracked_tenants(self) -> frozenset[str]:
        """Tenants the state holds anything for (for metrics and tests)."""
        return frozenset(self._tenants.members())

    def tracked_jobs(self) -> frozenset[str]:
        """Jobs the state holds anything for (for metrics and tests)."""
        return frozenset(job for ring in self._jobs.values() for job in ring.members())


_Tree = dict[str, dict[Priority, dict[str, Backlog]]]


def _tree(backlogs: Sequence[Backlog]) -> _Tree:
    """Jobs with work, grouped by tenant then class; ValueError on a job listed twice."""
    tree: _Tree = {}
    seen: set[str] = set()
    for backlog in backlogs:
        if backlog.job_id in seen:
            raise ValueError(f"job {backlog.job_id!r} is listed more than once")
        seen.add(backlog.job_id)
        if backlog.ready > 0:
            tree.setdefault(backlog.tenant, {}).setdefault(backlog.priority, {})[backlog.job_id] = backlog
    return tree


def _weights(tree: _Tree, weights: Mapping[str, float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for tenant in tree:
        weight = weights.get(tenant, DEFAULT_WEIGHT)
        if (
            isinstance(weight, bool)
            or not isinstance(weight, int | float)
            or not math.isfinite(weight)
            or weight <= 0
        ):
            raise ValueError(f"tenant {tenant!r}: weight must be a finite number above 0, got {weight!r}")
        out[tenant] = float(weight)
    return out


def _units(ratio: float) -> int:
    """A quantum of `ratio` items (>= 1) in whole deficit units."""
    return max(UNIT, round(ratio * UNIT))


def _class_quanta(classes: Iterable[Priority]) -> dict[Priority, int]:
    """Class quanta with the lighter class having work at exactly one item."""
    active = list(classes)
    lightest = min(CLASS_WEIGHTS[p] for p in active)
    return {p: _units(CLASS_WEIGHTS[p] / lightest) for p in active}


_BOTH_CLASSES = _class_quanta(PRIORITIES)


def _class_quantum(classes: _Ring[Priority], priority: Priority) -> int:
    return _BOTH_CLASSES[priority] if len(classes) > 1 else UNIT


def _tenant_quanta(weight_of: Mapping[str, float]) -> dict[str, int]:
    lightest = min(weight_of.values())
    return {tenant: _units(weight / lightest) for tenant, weight in weight_of.items()}


def _sync(state: FairState, tree: _Tree) -> None:
    def tenant_arrival(tenant: str) -> tuple[int, str]:
        return (min(b.order for jobs in tree[tenant].values() for b in jobs.values()), tenant)

    def class_arrival(priority: Priority) -> tuple[int, str]:
        return (PRIORITIES.index(priority), priority)

    def job_arrival(jobs: Mapping[str, Backlog]) -> Callable[[str], tuple[int, str]]:
        return lambda job: (jobs[job].order, job)

    state._tenants.sync(tree, tenant_arrival)
    old_classes, old_jobs = state._classes, state._jobs
    state._classes, state._jobs = {}, {}
    for tenant, classes in tree.items():
        class_ring = old_classes.get(tenant) or _Ring()
        class_ring.sync(classes, class_arrival)
        state._classes[tenant] = class_ring
        for priority, jobs in classes.items():
            job_ring = old_jobs.get((tenant, priority)) or _Ring()
            job_ring.sync(jobs, job_arrival(jobs))
            state._jobs[(tenant, priority)] = job_ring


def allocate(
    backlogs: Sequence[Backlog], weights: Mapping[str, float], slots: int, state: FairState
) -> dict[str, int]:
    """How many of the next `slots` items each job gets (jobs getting none are left out); mutates `state`.

    `backlogs` is every job of the scope with its current `ready` count (jobs without work may be left out
    or given with ready 0: either way their state is dropped). `weights` maps tenant to weight; a tenant
    missing from it weighs `DEFAULT_WEIGHT`.
    """
    if isinstance(slots, bool) or not isinstance(slots, int) or slots < 0:
        raise ValueError(f"slots must be a whole number of 0 or more, got {slots!r}")
    tree = _tree(backlogs)
    weight_of = _weights(tree, weights)
    _sync(state, tree)
    remaining = {
        job: b.ready for classes in tree.values() for jobs in classes.values() for job, b in jobs.items()
    }
    wanted = min(slots, sum(remaining.values()))
    allocation: dict[str, int] = {}
    if not wanted:
        return allocation

    # Tenant quanta are relative to the lightest tenant still with work; a heap finds the next lightest
    # when that one runs dry within the call, so one call of k slots behaves as k calls of one.
    lightest = [(weight, tenant) for tenant, weight in weight_of.items()]
    heapq.heapify(lightest)
    tenants = state._tenants

    def tenant_quantum(tenant: str) -> int:
        while lightest[0][1] not in tenants:
            heapq.heappop(lightest)
        return _units(weight_of[tenant] / lightest[0][0])

    def one_item(_job: str) -> int:
        return UNIT

    for _ in range(wanted):
        tenant = tenants.pick(tenant_quantum)
        classes = state._classes[tenant]
        priority = classes.pick(partial(_class_quantum, classes))
        jobs = state._jobs[(tenant, priority)]
        job = jobs.pick(one_item)
        allocation[job] = allocation.get(job, 0) + 1
        remaining[job] -= 1
        if remaining[job]:
            continue
        jobs.drop_head()
        if jobs:
            continue
        del state._jobs[(tenant, priority)]
        classes.drop_head()
        if classes:
            continue
        del state._classes[tenant]
        tenants.drop_head()
    return allocation


def shares(backlogs: Sequence[Backlog], weights: Mapping[str, float]) -> dict[str, float]:
    """Each listed job's steady-state fraction of the scope's capacity, for ETAs.

    tenant share (weight over the weights of tenants with work) x class share (9/10 or 1/10 while both
    classes of the tenant have work, else 1) x job share (1 / jobs in the class). Jobs without work get
    0.0; the rest sum to 1. It is the rate each job would get if every job listed kept its work.
    """
    tree = _tree(backlogs)
    weight_of = _weights(tree, weights)
    total = sum(weight_of.values())
    out = {b.job_id: 0.0 for b in backlogs}
    for tenant, classes in tree.items():
        class_total = sum(CLASS_WEIGHTS[p] for p in classes)
        for priority, jobs in classes.items():
            share = weight_of[tenant] / total * CLASS_WEIGHTS[priority] / class_total / len(jobs)
            for job in jobs:
                out[job] = share
    return out


def wait_bounds(backlogs: Sequence[Backlog], weights: Mapping[str, float]) -> dict[str, int]:
    """For each job with work, B such that any B consecutive items of the scope include one for it.

    Holds while the set of jobs with work, their classes and the weights stay as given (the bound for a
    new set applies once the turns in progress when it changed have ended). At each level a member gets a
    pick in any window of 1 + (the longest turns of all other members) picks of that level, and the three
    windows multiply: (1 + sum over other tenants of ceil(q)) x (1 + ceil(q of the tenant's other class,
    if it has work)) x (jobs in the class), with q in items: tenant weight / lightest weight with work;
    interactive 9 and batch 1 while both have work.
    """
    tree = _tree(backlogs)
    if not tree:
        return {}
    tenant_turns = {t: _longest_turn(q) for t, q in _tenant_quanta(_weights(tree, weights)).items()}
    all_tenant_turns = sum(tenant_turns.values())
    out: dict[str, int] = {}
    for tenant, classes in tree.items():
        tenant_window = 1 + all_tenant_turns - tenant_turns[tenant]
        class_turns = {p: _longest_turn(q) for p, q in _class_quanta(classes).items()}
        for priority, jobs in classes.items():
            class_window = 1 + sum(class_turns.values()) - class_turns[priority]
            for job in jobs:
                out[job] = tenant_window * class_window * len(jobs)
    return out


def _longest_turn(quantum: int) -> int:
    """The most items one turn can take: the quantum plus a carried remainder below one item, rounded down."""
    return -(-quantum // UNIT)
