"""The order of the suite's modules under xdist (tests/schedule.py): each once, waiting mixed with working."""

from __future__ import annotations

from pathlib import Path

from tests.schedule import MEASURED_S, Module, interleave

ROOT = Path(__file__).resolve().parents[2]


def _modules() -> list[Module]:
    waiting = [
        Module(f"tests/integration/test_queue_{n}.py", tests=5 + n, slow=True, e2e=False) for n in range(4)
    ]
    e2e = [Module(f"tests/e2e/test_page_{n}.py", tests=3, slow=True, e2e=True) for n in range(3)]
    quick = [Module(f"tests/unit/test_u{n}.py", tests=50, slow=False, e2e=False) for n in range(20)]
    return [*quick, *e2e, *waiting]  # collection order puts the unit tests first


def test_every_module_is_handed_out_once() -> None:
    modules = _modules()
    order = interleave(modules, workers=4)
    assert sorted(order) == sorted(m.path for m in modules)


def test_half_the_workers_start_on_waiting_modules_the_longest_first_and_the_rest_on_e2e() -> None:
    order = interleave(_modules(), workers=4)
    assert order[:4] == [
        "tests/integration/test_queue_3.py",
        "tests/integration/test_queue_2.py",
        "tests/e2e/test_page_0.py",
        "tests/e2e/test_page_1.py",
    ]


def test_waiting_modules_are_spread_out_not_run_all_at_once() -> None:
    order = interleave(_modules(), workers=4)
    # The third waiting module goes out only when one of the first two is done, after other work.
    third = order.index("tests/integration/test_queue_1.py")
    assert third > 4
    assert any(path.startswith("tests/e2e/") or "/unit/" in path for path in order[4:third])


def test_one_worker_runs_everything_in_turn() -> None:
    modules = _modules()
    assert len(interleave(modules, workers=1)) == len(modules)


def test_every_measured_module_still_exists() -> None:
    # A renamed or deleted module would leave its figure behind and steer nothing.
    assert [path for path in MEASURED_S if not (ROOT / path).is_file()] == []
