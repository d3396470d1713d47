"""The collector settings of a long-running process (syncd.daemon.heap)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from syncd.daemon.heap import YOUNG_THRESHOLD, tune_collector


@pytest.fixture
def restored_collector() -> Iterator[None]:
    thresholds = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


@pytest.mark.usefixtures("restored_collector")
def test_tuning_freezes_what_lives_and_collects_the_young_less_often() -> None:
    gc.unfreeze()
    _, middle, old = gc.get_threshold()
    alive = [{"kept": True}]
    tune_collector()
    assert gc.get_threshold() == (YOUNG_THRESHOLD, middle, old)
    assert gc.get_freeze_count() > 0
    assert alive  # still there: frozen, not collected


class _Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


@pytest.mark.usefixtures("restored_collector")
def test_garbage_is_collected_before_freezing() -> None:
    gc.unfreeze()
    gc.disable()
    try:
        node = _Node()
        gone = weakref.ref(node)
        del node
        assert gone() is not None  # garbage, not yet collected
        tune_collector()
        assert gone() is None  # collected, not frozen for the process's life
    finally:
        gc.enable()
