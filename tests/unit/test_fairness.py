"""The fairness policy: examples that read as documentation, then the properties that are its contract.

`run` stands in for the dispatcher of one scope: every call passes the backlogs it would see after
dispatching what earlier calls allocated (ready minus allocated), with one `FairState` carried throughout.
Jobs given `ENDLESS` items never run dry within a test: that is "permanently backlogged".

Bounds used below, with q(t) = weight(t) / lightest weight among tenants with work (a tenant's quantum, in
items, >= 1), N = items allocated so far, share(t) = weight(t) / sum of weights:
- waits: every `wait_bounds()[job]` consecutive items include one for the job (fixed set of jobs);
- tenant lag: |items(t) - N x share(t)| < 2 x q(t), at every point, however slots are sliced (fresh state,
  fixed set of backlogged tenants);
- class split: with both classes backlogged, |interactive - 0.9 x items(tenant)| < 1 item;
- job lag: |items(job) - N x shares()[job]| < 2 x q(tenant) + 2;
- a tenant returning from idle never gets more than N x share + 2 x q from its return on.
"""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from checks.fairness import (
    CLASS_WEIGHTS,
    DEFAULT_WEIGHT,
    PRIORITIES,
    Backlog,
    FairState,
    Priority,
    allocate,
    shares,
    wait_bounds,
)

ENDLESS = 10**9
SLACK = 0.01  # quanta are rounded to millionths of an item; this covers that rounding over these runs

Calls = list[dict[str, int]]


def job(
    job_id: str, tenant: str, priority: Priority = "batch", ready: int = ENDLESS, order: int = 0
) -> Backlog:
    return Backlog(job_id=job_id, tenant=tenant, priority=priority, ready=ready, order=order)


def run(
    backlogs: Sequence[Backlog],
    weights: Mapping[str, float],
    sizes: Iterable[int],
    state: FairState | None = None,
) -> Calls:
    """One `allocate` call per size; each sees the backlogs left by the calls before it."""
    state = FairState() if state is None else state
    ready = {b.job_id: b.ready for b in backlogs}
    calls: Calls = []
    for size in sizes:
        got = allocate([replace(b, ready=ready[b.job_id]) for b in backlogs], weights, size, state)
        for job_id, n in got.items():
            ready[job_id] -= n
        calls.append(got)
    return calls


def picks(backlogs: Sequence[Backlog], weights: Mapping[str, float], n: int) -> list[str]:
    """The job of each of the next `n` items, one slot per call."""
    return [next(iter(call)) for call in run(backlogs, weights, [1] * n)]


def by_tenant(calls: Iterable[Mapping[str, int]], backlogs: Sequence[Backlog]) -> Counter[str]:
    tenant_of = {b.job_id: b.tenant for b in backlogs}
    out: Counter[str] = Counter()
    for call in calls:
        for job_id, n in call.items():
            out[tenant_of[job_id]] += n
    return out


def weight(weights: Mapping[str, float], tenant: str) -> float:
    return weights.get(tenant, DEFAULT_WEIGHT)


def quantum(weights: Mapping[str, float], tenants: Iterable[str], tenant: str) -> float:
    """A tenant's quantum in items: its weight over the lightest weight among `tenants`."""
    return weight(weights, tenant) / min(weight(weights, t) for t in tenants)


def longest_run_without(received: Sequence[int], sizes: Sequence[int]) -> int:
    """The most consecutive items, over whole calls, in which a job got nothing (calls of `sizes` items)."""
    longest = current = 0
    for got, size in zip(received, sizes, strict=True):
        current = 0 if got else current + size
        longest = max(longest, current)
    return longest


def sizes_until(sizes: Sequence[int], total: int) -> list[int]:
    """`sizes` repeated until they add up to at least `total` items."""
    out: list[int] = []
    for size in itertools.cycle(sizes):
        if sum(out) >= total:
            return out
        out.append(size)
    raise AssertionError("unreachable")


# --- examples ---------------------------------------------------------------------------------------------


def test_a_small_job_behind_a_big_one_of_another_tenant_gets_half_the_slots_at_once() -> None:
    state = FairState()
    big = job("a-big", "A", ready=1_500, order=1)
    run([big], {}, [1] * 20, state)  # tenant A alone for a while: no credit builds up for anyone
    small = job("b-small", "B", ready=10, order=2)
    assert allocate([replace(big, ready=1_480), small], {}, 10, state) == {"a-big": 5, "b-small": 5}
    assert allocate([replace(big, ready=1_475), replace(small, ready=5)], {}, 10, state) == {
        "a-big": 5,
        "b-small": 5,
    }


def test_equal_tenants_alternate_item_by_item_one_slot_at_a_time() -> None:
    backlogs = [job("a1", "A", order=1), job("b1", "B", order=2)]
    assert picks(backlogs, {}, 6) == ["a1", "b1", "a1", "b1", "a1", "b1"]


def test_weights_1_1_2_give_25_25_50_percent_however_the_slots_are_sliced() -> None:
    backlogs = [job("a1", "A", order=1), job("b1", "B", order=2), job("c1", "C", order=3)]
    calls = run(backlogs, {"A": 1, "B": 1, "C": 2}, [1, 7, 20, 3, 13] * 40)
    got = by_tenant(calls, backlogs)
    total = sum(got.values())
    assert total == 44 * 40
    for tenant, expected in {"A": 0.25, "B": 0.25, "C": 0.5}.items():
        assert got[tenant] / total == pytest.approx(expected, abs=0.02)


def test_a_heavy_tenant_cannot_starve_a_light_one() -> None:
    backlogs = [job("heavy", "A", order=1), job("light", "B", order=2)]
    sequence = picks(backlogs, {"A": 10, "B": 1}, 110)
    assert wait_bounds(backlogs, {"A": 10, "B": 1}) == {"heavy": 2, "light": 11}
    assert sequence[:11] == ["heavy"] * 10 + ["light"]
    assert all("light" in sequence[i : i + 11] for i in range(100))


def test_an_interactive_job_overtakes_its_own_tenants_batch_work_but_not_other_tenants() -> None:
    state = FairState()
    bulk = job("a-bulk", "A", "batch", ready=100_000, order=1)
    other = job("b-bulk", "B", "batch", order=2)
    run([bulk, other], {}, [5] * 4, state)
    urgent = job("a-urgent", "A", "interactive", ready=30, order=3)
    got = allocate([replace(bulk, ready=100_000 - 10), other, urgent], {}, 20, state)
    # Tenant A keeps its half; within it, interactive gets 9 items of every 10 and batch still moves.
    assert got == {"b-bulk": 10, "a-urgent": 9, "a-bulk": 1}


def test_the_wait_bound_is_reached() -> None:
    """Tenant A's batch job waits for A's turn (every 2nd item) and for batch's turn (every 10th of A's)."""
    backlogs = [
        job("a-interactive", "A", "interactive", order=1),
        job("a-batch", "A", "batch", order=2),
        job("b-batch", "B", "batch", order=3),
    ]
    bounds = wait_bounds(backlogs, {})
    assert bounds == {"a-interactive": 2 * 2 * 1, "a-batch": 2 * 10 * 1, "b-batch": 2 * 1 * 1}
    sequence = picks(backlogs, {}, 200)
    gaps = [b - a for a, b in itertools.pairwise(i for i, j in enumerate(sequence) if j == "a-batch")]
    assert max(gaps) == bounds["a-batch"]  # 19 items for others in between, then its own


def test_shares_for_an_eta() -> None:
    backlogs = [
        job("a-interactive", "A", "interactive", order=1),
        job("a-batch-1", "A", "batch", order=2),
        job("a-batch-2", "A", "batch", order=3),
        job("b-batch", "B", "batch", order=4),
        job("c-done", "C", "batch", ready=0, order=5),
    ]
    assert shares(backlogs, {"A": 2}) == pytest.approx(
        {
            "a-interactive": 2 / 3 * 0.9,
            "a-batch-1": 2 / 3 * 0.1 / 2,
            "a-batch-2": 2 / 3 * 0.1 / 2,
            "b-batch": 1 / 3,
            "c-done": 0.0,
        }
    )


def test_a_job_back_from_idle_rejoins_at_the_tail_with_nothing_banked() -> None:
    state = FairState()
    x, y = job("x", "A", order=1), job("y", "A", order=2)
    run([replace(x, ready=0), y], {}, [1] * 50, state)  # x idle (its items in flight) while y runs
    assert allocate([x, y], {}, 10, state) == {"x": 5, "y": 5}  # not 10 to catch up


def test_when_the_lightest_tenant_runs_dry_the_others_turns_shrink_at_once() -> None:
    """Quanta are relative to the lightest tenant *still* with work, within a call as across calls."""
    backlogs = [job("light", "L", ready=1, order=1), job("a", "A", order=2), job("b", "B", order=3)]
    weights = {"L": 0.5, "A": 1, "B": 2}
    assert picks(backlogs, weights, 7) == ["light", "a", "b", "b", "a", "b", "b"]  # not a, a, b, b, b, b
    assert run(backlogs, weights, [4]) == [{"light": 1, "a": 1, "b": 2}]


def test_when_the_tenant_whose_turn_it_is_vanishes_the_next_one_gets_a_full_turn() -> None:
    state = FairState()
    a, b, c = job("a", "A", order=1), job("b", "B", order=2), job("c", "C", order=3)
    assert allocate([a, b, c], {}, 1, state) == {"a": 1}
    assert allocate([b, c], {}, 1, state) == {"b": 1}  # job a cancelled: B is next, not skipped
    assert allocate([b, c], {}, 3, state) == {"b": 1, "c": 2}


def test_finished_and_vanished_work_is_forgotten() -> None:
    state = FairState()
    backlogs = [job("a1", "A", ready=3, order=1), job("b1", "B", order=2), job("b2", "B", order=3)]
    assert allocate(backlogs, {}, 8, state) == {"a1": 3, "b1": 3, "b2": 2}
    assert state.tracked_tenants() == {"B"}  # a1 ran dry within the call
    assert state.tracked_jobs() == {"b1", "b2"}
    assert allocate([backlogs[1]], {}, 0, state) == {}  # b2 vanished (cancelled): dropped, even with no slots
    assert state.tracked_jobs() == {"b1"}
    assert allocate([], {}, 5, state) == {}
    assert state.tracked_tenants() == set()
    assert state.tracked_jobs() == set()


def test_no_work_at_all() -> None:
    idle = [job("x", "A", ready=0)]
    assert allocate(idle, {}, 5, FairState()) == {}
    assert shares(idle, {}) == {"x": 0.0}
    assert wait_bounds(idle, {}) == {}


def test_thousands_of_backlogs() -> None:
    rng = random.Random(5)
    backlogs = [
        job(f"j{i}", f"t{i % 400}", rng.choice(PRIORITIES), rng.randint(0, 40), i) for i in range(4_000)
    ]
    weights = {f"t{i}": 1 + i % 3 for i in range(400)}
    calls = run(backlogs, weights, [20] * 60)
    assert all(sum(call.values()) == 20 for call in calls)
    assert len(by_tenant(calls, backlogs)) > 100


BAD_VALUES: list[Any] = [-1, True, 1.5, "3"]


@pytest.mark.parametrize("ready", BAD_VALUES)
def test_a_backlog_refuses_a_bad_ready_count(ready: Any) -> None:
    with pytest.raises(ValueError, match="ready must be"):
        job("j", "A", ready=ready)


def test_a_backlog_refuses_an_unknown_priority() -> None:
    priority: Any = "urgent"
    with pytest.raises(ValueError, match="priority must be"):
        job("j", "A", priority)


@pytest.mark.parametrize("slots", BAD_VALUES)
def test_allocate_refuses_bad_slots(slots: Any) -> None:
    with pytest.raises(ValueError, match="slots must be"):
        allocate([job("j", "A")], {}, slots, FairState())


@pytest.mark.parametrize("bad", [0, -1.0, math.nan, math.inf, True])
def test_bad_weights_are_refused(bad: Any) -> None:
    with pytest.raises(ValueError, match="weight must be"):
        allocate([job("j", "A")], {"A": bad}, 1, FairState())
    with pytest.raises(ValueError, match="weight must be"):
        shares([job("j", "A")], {"A": bad})


def test_a_job_listed_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="more than once"):
        allocate([job("j", "A", order=1), job("j", "B", order=2)], {}, 1, FairState())


# --- properties -------------------------------------------------------------------------------------------

WEIGHTS = st.one_of(st.sampled_from([0.5, 1.0, 2.0, 3.0]), st.floats(min_value=0.5, max_value=3.0))
SIZES = st.integers(min_value=1, max_value=20)
NEVER_DRY = st.just(ENDLESS)
RUNS_DRY = st.one_of(st.integers(min_value=0, max_value=4), st.integers(min_value=0, max_value=40))


@st.composite
def scopes(
    draw: st.DrawFn, ready: st.SearchStrategy[int] = NEVER_DRY, min_tenants: int = 1
) -> tuple[list[Backlog], dict[str, float]]:
    """Up to 4 tenants (some left out of `weights`: default weight), each with 1 to 3 jobs of either class."""
    tenants = [f"t{i}" for i in range(draw(st.integers(min_value=min_tenants, max_value=4)))]
    weights = {t: w for t in tenants if (w := draw(st.none() | WEIGHTS)) is not None}
    specs = [
        (t, k, draw(st.sampled_from(PRIORITIES)), draw(ready))
        for t in tenants
        for k in range(draw(st.integers(min_value=1, max_value=3)))
    ]
    orders = draw(st.permutations(range(len(specs))))
    return [Backlog(f"{t}/j{k}", t, p, r, o) for (t, k, p, r), o in zip(specs, orders, strict=True)], weights


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[list[Backlog]], dict[str, float], list[int]]:
    """Calls whose backlogs change arbitrarily: jobs come and go, ready counts jump, priorities change."""
    backlogs, weights = draw(scopes())
    calls = []
    for _ in range(draw(st.integers(min_value=1, max_value=30))):
        present = [
            replace(
                b,
                ready=draw(st.integers(min_value=0, max_value=12)),
                priority=draw(st.sampled_from(PRIORITIES)),
            )
            for b in backlogs
            if draw(st.booleans())
        ]
        calls.append(present)
    slots = draw(st.lists(st.integers(min_value=0, max_value=20), min_size=len(calls), max_size=len(calls)))
    return calls, weights, slots


@settings(max_examples=150, deadline=None)
@given(history=histories())
def test_work_is_conserved_and_state_holds_only_work_left(
    history: tuple[list[list[Backlog]], dict[str, float], list[int]],
) -> None:
    calls, weights, slots = history
    state = FairState()
    for backlogs, n in zip(calls, slots, strict=True):
        ready = {b.job_id: b.ready for b in backlogs}
        got = allocate(backlogs, weights, n, state)
        assert sum(got.values()) == min(n, sum(ready.values()))
        assert all(0 < k <= ready[j] for j, k in got.items())
        left = {j for j, r in ready.items() if r - got.get(j, 0) > 0}
        assert state.tracked_jobs() == left
        assert state.tracked_tenants() == {b.tenant for b in backlogs if b.job_id in left}


@settings(max_examples=100, deadline=None)
@given(scope=scopes(ready=RUNS_DRY), sizes=st.lists(SIZES, min_size=1, max_size=25))
def test_k_calls_of_one_slot_allocate_what_one_call_of_k_slots_does(
    scope: tuple[list[Backlog], dict[str, float]], sizes: list[int]
) -> None:
    """Fairness lives in the state carried between calls: slicing the slots changes nothing."""
    backlogs, weights = scope
    singles = iter(run(backlogs, weights, [1] * sum(sizes)))
    for call, size in zip(run(backlogs, weights, sizes), sizes, strict=True):
        merged: Counter[str] = Counter()
        for single in itertools.islice(singles, size):
            merged.update(single)
        assert call == dict(merged)


@settings(max_examples=100, deadline=None)
@given(
    scope=scopes(ready=RUNS_DRY),
    sizes=st.lists(SIZES, min_size=1, max_size=25),
    seed=st.randoms(use_true_random=False),
)
def test_results_do_not_depend_on_the_order_backlogs_are_listed(
    scope: tuple[list[Backlog], dict[str, float]], sizes: list[int], seed: random.Random
) -> None:
    backlogs, weights = scope
    shuffled = list(backlogs)
    seed.shuffle(shuffled)
    assert run(shuffled, weights, sizes) == run(backlogs, weights, sizes)


@settings(max_examples=80, deadline=None)
@given(scope=scopes(), sizes=st.lists(SIZES, min_size=10, max_size=40))
def test_every_job_is_served_within_its_wait_bound(
    scope: tuple[list[Backlog], dict[str, float]], sizes: list[int]
) -> None:
    backlogs, weights = scope
    bounds = wait_bounds(backlogs, weights)
    tenants = {b.tenant for b in backlogs}
    # The bound derived by hand: tenant turn x class turn x round robin of the class's jobs.
    for b in backlogs:
        others = sum(math.ceil(quantum(weights, tenants, t) - 1e-9) for t in tenants if t != b.tenant)
        classes = {o.priority for o in backlogs if o.tenant == b.tenant}
        lightest = min(CLASS_WEIGHTS[p] for p in classes)
        other_class = sum(math.ceil(CLASS_WEIGHTS[p] / lightest) for p in classes if p != b.priority)
        jobs = sum(1 for o in backlogs if o.tenant == b.tenant and o.priority == b.priority)
        assert bounds[b.job_id] <= (1 + others) * (1 + other_class) * jobs
    # Slots sliced at random: a run of whole calls without the job is shorter than its bound.
    sized = sizes_until(sizes, 2 * max(bounds.values()) + 20)
    calls = run(backlogs, weights, sized)
    for b in backlogs:
        assert longest_run_without([c.get(b.job_id, 0) for c in calls], sized) < bounds[b.job_id]
    # One slot at a time: every window of `bound` consecutive items has one for the job.
    sequence = picks(backlogs, weights, sum(sized))
    for b in backlogs:
        served = [i for i, j in enumerate(sequence) if j == b.job_id]
        assert served
        gaps = [served[0] + 1, *(y - x for x, y in itertools.pairwise(served)), len(sequence) - served[-1]]
        assert max(gaps) <= bounds[b.job_id]


@settings(max_examples=60, deadline=None)
@given(scope=scopes(), sizes=st.lists(SIZES, min_size=20, max_size=60))
def test_long_run_tenant_shares_match_weights(
    scope: tuple[list[Backlog], dict[str, float]], sizes: list[int]
) -> None:
    backlogs, weights = scope
    tenants = {b.tenant for b in backlogs}
    total_weight = sum(weight(weights, t) for t in tenants)
    q = {t: quantum(weights, tenants, t) for t in tenants}
    sized = sizes_until(sizes, 100 * math.ceil(max(q.values())))  # 2 x q / N <= 2 %
    received: Counter[str] = Counter()
    n = 0
    for call in run(backlogs, weights, sized):
        received.update(by_tenant([call], backlogs))
        n += sum(call.values())
        for t in tenants:
            assert abs(received[t] - n * weight(weights, t) / total_weight) < 2 * q[t] + SLACK
    for t in tenants:
        assert received[t] / n == pytest.approx(weight(weights, t) / total_weight, abs=0.02)


@st.composite
def mixed_scopes(draw: st.DrawFn) -> tuple[list[Backlog], dict[str, float]]:
    """A scope whose first tenant has work in both classes."""
    backlogs, weights = draw(scopes())
    first = [
        Backlog("mix/i", "t0", "interactive", ENDLESS, -2),
        Backlog("mix/b", "t0", "batch", ENDLESS, -1),
    ]
    return first + backlogs, weights


@settings(max_examples=60, deadline=None)
@given(scope=mixed_scopes(), sizes=st.lists(SIZES, min_size=5, max_size=40))
def test_interactive_gets_nine_tenths_of_its_tenant_and_batch_the_rest(
    scope: tuple[list[Backlog], dict[str, float]], sizes: list[int]
) -> None:
    backlogs, weights = scope
    mine = {b.job_id: b.priority for b in backlogs if b.tenant == "t0"}
    interactive = tenant_items = 0
    for call in run(backlogs, weights, sizes):
        for job_id, n in call.items():
            if job_id in mine:
                tenant_items += n
                interactive += n if mine[job_id] == "interactive" else 0
        assert abs(interactive - 0.9 * tenant_items) < 1
        assert tenant_items - interactive >= tenant_items // 10  # batch: 1 item in every 10 of the tenant's


@settings(max_examples=60, deadline=None)
@given(scope=mixed_scopes(), sizes=st.lists(SIZES, min_size=5, max_size=40), data=st.data())
def test_one_tenants_interactive_work_takes_nothing_from_other_tenants(
    scope: tuple[list[Backlog], dict[str, float]], sizes: list[int], data: st.DataObject
) -> None:
    backlogs, weights = scope
    relabelled = [
        replace(b, priority=data.draw(st.sampled_from(PRIORITIES))) if b.tenant == "t0" else b
        for b in backlogs
    ]
    mine = {b.job_id for b in backlogs if b.tenant == "t0"}
    for x, y in zip(run(backlogs, weights, sizes), run(relabelled, weights, sizes), strict=True):
        assert {j: n for j, n in x.items() if j not in mine} == {j: n for j, n in y.items() if j not in mine}
        assert by_tenant([x], backlogs)["t0"] == by_tenant([y], relabelled)["t0"]


@settings(max_examples=60, deadline=None)
@given(
    scope=scopes(min_tenants=2),
    before=st.lists(SIZES, min_size=0, max_size=20),
    idle=st.lists(SIZES, min_size=1, max_size=40),
    after=st.lists(SIZES, min_size=1, max_size=40),
)
def test_a_tenant_back_from_idle_gets_its_share_and_no_banked_credit(
    scope: tuple[list[Backlog], dict[str, float]], before: list[int], idle: list[int], after: list[int]
) -> None:
    backlogs, weights = scope
    tenants = {b.tenant for b in backlogs}
    back = max(tenants)
    others = [b for b in backlogs if b.tenant != back]
    state = FairState()
    run(backlogs, weights, before, state)
    run(others, weights, idle, state)  # `back` has nothing ready for a while
    assert back not in state.tracked_tenants()
    # From its return on: never more than its share plus two of its quanta.
    share = weight(weights, back) / sum(weight(weights, t) for t in tenants)
    q = quantum(weights, tenants, back)
    returned = run(backlogs, weights, after, state)
    got = n = 0
    for call in returned:
        got += by_tenant([call], backlogs)[back]
        n += sum(call.values())
        assert got < n * share + 2 * q + SLACK
    # And it is treated exactly as a tenant never seen before would be.
    fresh = [replace(b, tenant="new", job_id="new/" + b.job_id) if b.tenant == back else b for b in backlogs]
    state = FairState()
    run(backlogs, weights, before, state)
    run(others, weights, idle, state)
    fresh_weights = {**weights, "new": weight(weights, back)}
    renamed = [
        {j.removeprefix("new/"): n for j, n in call.items()}
        for call in run(fresh, fresh_weights, after, state)
    ]
    assert renamed == returned


@settings(max_examples=50, deadline=None)
@given(scope=scopes(), sizes=st.lists(SIZES, min_size=10, max_size=40))
def test_shares_agree_with_the_long_run_measured_shares(
    scope: tuple[list[Backlog], dict[str, float]], sizes: list[int]
) -> None:
    """A job's count stays within 2 q + 2 items of N x share: the tenant's lag (< 2 q), then under one item
    each for the class split and the round robin of the class's jobs. So the share error falls as 1/N."""
    backlogs, weights = scope
    expected = shares(backlogs, weights)
    assert sum(expected.values()) == pytest.approx(1.0)
    tenants = {b.tenant for b in backlogs}
    q = {t: quantum(weights, tenants, t) for t in tenants}
    received: Counter[str] = Counter()
    n = 0
    for call in run(
        backlogs, weights, sizes_until(sizes, max(2_000, 100 * (math.ceil(max(q.values())) + 1)))
    ):
        received.update(call)
        n += sum(call.values())
        for b in backlogs:
            assert abs(received[b.job_id] - n * expected[b.job_id]) < 2 * q[b.tenant] + 2 + SLACK
    for b in backlogs:
        assert received[b.job_id] / n == pytest.approx(expected[b.job_id], abs=0.02)
