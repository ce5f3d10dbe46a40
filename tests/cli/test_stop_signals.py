"""``stop_on_signals``: what every long-running command relies on to stop cleanly."""

from __future__ import annotations

import signal

import pytest

from cadenza.cli.stop_signals import STOP_SIGNALS, stop_on_signals


@pytest.mark.parametrize("sig", STOP_SIGNALS)
def test_a_stop_signal_sets_the_event_instead_of_interrupting(sig: signal.Signals) -> None:
    with stop_on_signals() as stop:
        assert not stop.is_set()
        signal.raise_signal(sig)
        assert stop.is_set()


def test_the_handlers_from_before_are_restored_even_after_an_error() -> None:
    before = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    with pytest.raises(RuntimeError), stop_on_signals():
        assert all(signal.getsignal(sig) is not before[sig] for sig in STOP_SIGNALS)
        raise RuntimeError("the command failed")
    assert {sig: signal.getsignal(sig) for sig in STOP_SIGNALS} == before
