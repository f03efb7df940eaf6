"""The rule by which a slow leader hands the dispatcher lock over (workers/fitness.py)."""

from __future__ import annotations

import pytest

from workers.dispatcher import (
    MIN_TENURE_S,
    RTT_MARGIN,
    RTT_SLACK_S,
    UNFIT_FOR_S,
    should_step_aside,
    slow_host,
)

SLOW = 0.6  # a leader on a 256 kbit/s link: its round trips queue behind its own traffic
FAST = 0.003


def _rule(**over: object) -> bool:
    args: dict[str, object] = {
        "tenure_s": MIN_TENURE_S + 1,
        "unfit_for_s": UNFIT_FOR_S + 1,
        "own_rtt_s": SLOW,
        "others_rtt_s": [FAST],
    }
    args.update(over)
    return should_step_aside(**args)  # type: ignore[arg-type]


def test_an_unfit_leader_hands_over_to_a_clearly_fitter_host() -> None:
    assert _rule()


@pytest.mark.parametrize(
    "over",
    [
        {"tenure_s": MIN_TENURE_S - 0.1},  # a reign lasts its minimum tenure
        {"unfit_for_s": None},  # fit now
        {"unfit_for_s": UNFIT_FOR_S - 0.1},  # unfit, but not for long enough
        {"others_rtt_s": []},  # nobody to hand over to: a slow leader beats none
        {"others_rtt_s": [SLOW / RTT_MARGIN + 0.01]},  # the other host is not fitter by the margin
        {"own_rtt_s": 0.01, "others_rtt_s": [0.004]},  # both near zero: within the slack, no hand-over
    ],
)
def test_a_leader_keeps_the_lock(over: dict[str, object]) -> None:
    assert not _rule(**over)


def test_the_best_of_several_hosts_counts() -> None:
    assert _rule(others_rtt_s=[SLOW, 0.5, FAST])


def test_the_new_leader_never_hands_back_to_the_slow_one() -> None:
    """No flapping: after the hand-over, the new leader's rule, with the slow host as the other, says keep
    the lock — however long the new leader has been unfit (by a drained scope, say)."""
    assert _rule(own_rtt_s=SLOW, others_rtt_s=[FAST])
    assert not _rule(own_rtt_s=FAST, others_rtt_s=[SLOW], unfit_for_s=1e6, tenure_s=1e6)


def test_the_margin_is_a_ratio_less_the_slack() -> None:
    edge = (SLOW - RTT_SLACK_S) / RTT_MARGIN
    assert _rule(others_rtt_s=[edge * 0.99])
    assert not _rule(others_rtt_s=[edge * 1.01])


def test_a_host_is_slow_beside_the_leader_by_the_same_margin() -> None:
    assert slow_host(SLOW, FAST)
    assert not slow_host(FAST, FAST)
    assert not slow_host(0.1, 0.001)  # under the fit bound: a quick enough host, however quick the leader
    assert not slow_host(SLOW, SLOW / RTT_MARGIN)  # within the margin
    # Never both: a host the leader would hand over to is never the slow one, nor the reverse.
    assert _rule(own_rtt_s=SLOW, others_rtt_s=[FAST]) and not slow_host(FAST, SLOW)
