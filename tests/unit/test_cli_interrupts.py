"""Ctrl-C while the CLI waits: the first SIGINT sets the wait's flag (no exception thrown into whatever runs),
a second one acts at once, and the handler of before comes back when the wait ends."""

from __future__ import annotations

import signal
import threading

import pytest

from cli.interrupts import interrupt_flag


def test_the_first_sigint_sets_the_flag_and_the_second_raises() -> None:
    before = signal.getsignal(signal.SIGINT)
    with interrupt_flag() as interrupted:
        assert signal.getsignal(signal.SIGINT) is not before
        assert not interrupted.is_set()
        signal.raise_signal(signal.SIGINT)  # no KeyboardInterrupt here: only the flag
        assert interrupted.is_set()
        assert signal.getsignal(signal.SIGINT) is before
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is before


def test_the_handler_of_before_is_back_when_no_signal_came() -> None:
    before = signal.getsignal(signal.SIGINT)
    with interrupt_flag() as interrupted:
        pass
    assert not interrupted.is_set()
    assert signal.getsignal(signal.SIGINT) is before


def test_off_the_main_thread_nothing_is_installed() -> None:
    seen: list[object] = []

    def wait_elsewhere() -> None:
        with interrupt_flag() as interrupted:
            seen.append(signal.getsignal(signal.SIGINT))
            seen.append(interrupted.is_set())

    before = signal.getsignal(signal.SIGINT)
    thread = threading.Thread(target=wait_elsewhere)
    thread.start()
    thread.join()
    assert seen == [before, False]
