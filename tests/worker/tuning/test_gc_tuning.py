"""The collector's settings while workers run: raised and frozen by the first, put back by the last
(no broker: the tuning is process state only)."""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator

import pytest

from cadenza.errors import ConfigError
from cadenza.worker.config import WorkerConfig
from cadenza.worker.tuning.gc_tuning import FREEZE_EVERY, GcTuning


@pytest.fixture(autouse=True)
def _interpreter_settings() -> Iterator[None]:
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.unfreeze()
    gc.set_threshold(*saved)


def test_the_first_holder_raises_the_threshold_and_freezes_the_last_puts_both_back() -> None:
    first, second = GcTuning(10_000), GcTuning(50_000)
    first.acquire()
    assert gc.get_threshold() == (10_000, 10, 10)
    assert gc.get_freeze_count() > 0
    second.acquire()
    assert gc.get_threshold() == (50_000, 10, 10)
    first.release()
    assert gc.get_threshold() == (50_000, 10, 10), "a worker still running keeps its setting"
    assert gc.get_freeze_count() > 0
    second.release()
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == 0


def test_acquire_and_release_are_idempotent() -> None:
    tuning, other = GcTuning(10_000), GcTuning(20_000)
    other.acquire()
    tuning.acquire()
    tuning.acquire()
    tuning.release()
    tuning.release()  # a second release must not take the other worker's hold away
    assert gc.get_threshold() == (20_000, 10, 10)
    other.release()
    assert gc.get_threshold() == (700, 10, 10)


def test_zero_leaves_the_collector_alone() -> None:
    tuning = GcTuning(0)
    tuning.acquire()
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == 0
    tuning.release()


def test_a_lower_threshold_never_lowers_the_interpreters_and_a_disabled_collector_stays_disabled() -> None:
    gc.set_threshold(20_000, 10, 10)
    tuning = GcTuning(5_000)
    tuning.acquire()
    assert gc.get_threshold() == (20_000, 10, 10)
    tuning.release()
    gc.set_threshold(0, 10, 10)
    tuning.acquire()
    assert gc.get_threshold()[0] == 0
    tuning.release()
    assert gc.get_threshold()[0] == 0


def test_a_negative_threshold_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="gc_young_threshold"):
        WorkerConfig.load(gc_young_threshold=-1)


def test_settle_freezes_after_a_full_collection_or_a_restore_and_only_then() -> None:
    tuning = GcTuning(10_000)
    tuning.acquire()
    frozen = gc.get_freeze_count()
    tuning.settle(restored=0)
    assert tuning.freezes == 0, "nothing happened since acquire: nothing to freeze"
    state = [[i] for i in range(1_000)]  # long-lived, tracked objects (lists), like state entries
    gc.collect(2)
    tuning.settle(restored=0)
    assert tuning.freezes == 1
    assert gc.get_freeze_count() >= frozen + len(state), "the survivors of the full pass are frozen"
    tuning.settle(restored=0)
    assert tuning.freezes == 1, "no new full pass, no restore: no freeze"
    tuning.settle(restored=FREEZE_EVERY - 1)
    assert tuning.freezes == 1, "a small restore waits for the next full pass"
    restored = [[i] for i in range(FREEZE_EVERY)]
    tuning.settle(restored=FREEZE_EVERY)
    assert tuning.freezes == 2, "a large restore's entries are frozen at once"
    assert gc.get_freeze_count() >= frozen + len(state) + len(restored)
    gc.collect(1)
    tuning.settle(restored=FREEZE_EVERY + 1)
    assert tuning.freezes == 2, "a young or middle pass is not a full one"
    tuning.release()
    assert gc.get_freeze_count() == 0
    assert all(cb.__name__ != "_count_full_passes" for cb in gc.callbacks), "the callback goes too"


def test_settle_does_nothing_unless_held() -> None:
    tuning = GcTuning(0)
    tuning.acquire()
    gc.collect(2)
    tuning.settle(restored=5)
    assert tuning.freezes == 0
    assert gc.get_freeze_count() == 0


def test_a_long_full_collection_is_timed_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    tuning = GcTuning(10_000, long_pause=0.0)  # every full pass counts as long here
    tuning.acquire()
    state = [[i] for i in range(10_000)]
    with caplog.at_level(logging.WARNING, logger="cadenza.worker"):
        gc.collect(2)
        tuning.settle(restored=0)
        tuning.settle(restored=0)
    tuning.release()
    assert len(state) == 10_000
    assert tuning.longest_pause > 0.0
    logged = [r.getMessage() for r in caplog.records if "full garbage collection" in r.getMessage()]
    assert len(logged) == 1, logged
