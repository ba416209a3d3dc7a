"""The hooks on torch's DataLoader: which fetches reach which observers (the training thread's, with
autograd on, outside a timed loader), whatever the number of observers."""

from __future__ import annotations

import gc
import threading

import pytest
import torch

from trainperf.torch import _loop_hooks as hooks


class Observer:
    def __init__(self, thread: int | None = None) -> None:
        self.fetches: list[object] = []
        self.loaders = 0
        self.thread = threading.get_ident() if thread is None else thread
        self.now = 0.0
        self.waits: list[float] = []  # the clock when each fetch said it was about to wait

    def about_to_wait(self) -> None:
        self.waits.append(self.now)

    def clock(self) -> float:
        self.now += 1.0
        return self.now

    def on_fetch(self, started: float, ended: float, batch: object) -> None:
        self.fetches.append((ended - started, batch))

    def on_loader(self, loader: object, iterator: object) -> None:
        self.loaders += 1

    def on_scaler_update(self) -> None:
        return None


def loader(n: int = 2) -> torch.utils.data.DataLoader:
    return torch.utils.data.DataLoader(list(range(n)), batch_size=None)


@pytest.fixture
def observers():
    made: list[Observer] = []

    def make(*threads: int | None) -> list[Observer]:
        for thread in threads:
            made.append(Observer(thread))
            hooks.register(made[-1])
        return made[-len(threads):]

    yield make
    for observer in made:
        hooks.unregister(observer)
    assert not hooks._observers


@pytest.mark.parametrize("count", [1, 2], ids=["one observer", "two observers"])
def test_each_fetch_reaches_the_observers_on_the_training_thread_with_its_batch_and_own_clock(observers, count):
    seen = observers(*[None] * count)
    assert list(loader(2)) == [0, 1]
    for observer in seen:
        # iter(), two batches, and the fetch that found the loader empty; 1 s apart on each clock
        assert observer.fetches == [(1.0, None), (1.0, 0), (1.0, 1), (1.0, None)] and observer.loaders == 1
        # each next() says, before its clock starts, that the thread is about to wait (iter() does not)
        assert observer.waits == [2.0, 4.0, 6.0]


def test_a_loader_whose_fetches_do_not_block_is_said_to_wait_before_its_first_fetch_only(observers):
    (observer,) = observers(None)
    observer.clock = lambda: observer.now  # type: ignore[method-assign]  # every fetch takes no time
    assert list(loader(3)) == [0, 1, 2]
    assert observer.waits == [0.0]


@pytest.mark.parametrize("count", [1, 2], ids=["one observer", "two observers"])
@pytest.mark.parametrize("shift", [-1, 1], ids=["a lower thread id", "a higher thread id"])
def test_a_fetch_on_another_thread_than_the_training_one_reaches_no_observer(observers, count, shift):
    seen = observers(*[threading.get_ident() + shift] * count)
    assert list(loader(2)) == [0, 1]
    assert all(not o.fetches and not o.loaders and not o.waits for o in seen)


@pytest.mark.parametrize("count", [1, 2], ids=["one observer", "two observers"])
def test_a_fetch_without_autograd_is_evaluation_not_data_wait(observers, count):
    seen = observers(*[None] * count)
    with torch.no_grad():
        assert list(loader(2)) == [0, 1]
    assert all(not o.fetches for o in seen)


def test_fetches_of_a_loader_timed_by_its_caller_are_not_told_and_later_ones_are(observers):
    (observer,) = observers(None)
    with hooks.suppressed():
        with hooks.suppressed():
            list(loader(2))
        list(loader(1))
    assert observer.fetches == []
    list(loader(1))
    assert [batch for _, batch in observer.fetches] == [None, 0, None]


def test_an_observer_dropped_without_unregistering_is_skipped():
    dropped = Observer()
    hooks.register(dropped)
    try:
        del dropped
        gc.collect()
        assert list(loader(2)) == [0, 1]  # the one registered observer is gone: nothing to tell
    finally:
        hooks._observers.clear()
        hooks._uninstall()
