"""One training's set-up and its undoing (``torch.shared.TrainingSetup``), with a listener that records calls."""

from __future__ import annotations

import pytest
import torch

from trainperf.torch import _loop_hooks
from trainperf.torch.shared import StepFlopCounter, Teardown, TrainingSetup


class FakeListener:
    """What the set-up calls on a listener, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.advisors: list = []
        self.workers = None
        self.closed = 0
        self.device = None
        self.options = type("Options", (), {"flops_per_step": None, "report_hardware": False})()

    def set_step_threads(self, threads):
        self.calls.append(("step_threads", threads))

    def set_rank(self, rank):
        self.calls.append(("rank", rank))

    def set_etl_source(self, source):
        self.calls.append(("etl_source", source))

    def add_advisor(self, advisor):
        self.advisors.append(advisor)

    def set_loader_workers(self, pids):
        self.workers = pids

    def set_flops(self, *args, **kwargs):
        self.calls.append(("flops", args))

    def add_step_shape(self, shape):
        self.calls.append(("step_shape", shape))

    def close(self):
        self.closed += 1


class Observer:
    clock = staticmethod(lambda: 0.0)
    thread = 0

    def on_fetch(self, started, ended, batch):
        pass

    def on_loader(self, loader, iterator):
        pass

    def on_scaler_update(self):
        pass


class Owner:
    def method(self):
        return "original"


def test_every_undo_step_runs_once_newest_first_even_when_one_raises_and_a_second_undo_is_harmless():
    ran: list[str] = []
    teardown = Teardown()
    teardown.defer(lambda: ran.append("first"))

    def broken():
        ran.append("broken")
        raise ValueError("no")

    teardown.defer(broken)
    teardown.defer(lambda: ran.append("last"))
    with pytest.warns(RuntimeWarning, match="broken failed: ValueError"):
        teardown.undo()
    assert ran == ["last", "broken", "first"]
    teardown.undo()
    assert ran == ["last", "broken", "first"]


def test_an_interrupt_in_one_step_still_lets_the_others_run_then_is_raised():
    ran: list[str] = []
    teardown = Teardown()
    teardown.defer(lambda: ran.append("first"))

    def interrupted():
        raise KeyboardInterrupt

    teardown.defer(interrupted)
    with pytest.raises(KeyboardInterrupt):
        teardown.undo()
    assert ran == ["first"]


def test_the_listener_is_closed_last_and_once():
    listener = FakeListener()
    setup = TrainingSetup(listener, close=True)
    order: list[str] = []
    setup.defer(lambda: order.append(f"step, closed {listener.closed}"))
    setup.undo()
    setup.undo()
    assert order == ["step, closed 0"] and listener.closed == 1
    TrainingSetup(listener).undo()
    assert listener.closed == 1


def test_a_wrapper_is_removed_at_undo_and_a_users_own_instance_attribute_comes_back():
    plain, own = Owner(), Owner()
    own.method = lambda: "the user's"  # type: ignore[method-assign]
    setup = Teardown()
    for owner in (plain, own):
        assert setup.wrap(owner, "method", lambda original: lambda: "wrapped " + original())
    assert (plain.method(), own.method()) == ("wrapped original", "wrapped the user's")
    setup.undo()
    assert "method" not in vars(plain) and plain.method() == "original"
    assert own.method() == "the user's"


def test_a_wrapper_wrapped_again_since_stays_and_nothing_is_wrapped_that_is_not_a_method():
    owner = Owner()
    setup = Teardown()
    setup.wrap(owner, "method", lambda original: lambda: "ours")
    owner.method = lambda: "someone else's"  # type: ignore[method-assign]
    setup.undo()
    assert owner.method() == "someone else's"
    assert not setup.wrap(None, "method", lambda original: original)
    assert not setup.wrap(owner, "missing", lambda original: original)


def test_the_step_hook_calls_back_for_the_given_optimizers_only_and_is_removed_at_undo():
    ours = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
    other = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
    steps: list[int] = []
    setup = TrainingSetup(FakeListener())
    setup.hook_steps([ours], lambda: steps.append(1))
    ours.step()
    other.step()
    assert steps == [1]
    setup.undo()
    ours.step()
    assert steps == [1]


def test_a_nested_optimizer_step_is_counted_once_and_its_pre_hook_removed():
    class Nested(torch.optim.SGD):
        def step(self, closure=None):
            return super().step(closure)

    optimizer = Nested([torch.nn.Parameter(torch.ones(1))], lr=0.1)
    steps: list[int] = []
    setup = TrainingSetup(FakeListener())
    setup.hook_steps([optimizer], lambda: steps.append(1))
    optimizer.step()
    optimizer.step()
    assert steps == [1, 1]
    setup.undo()
    assert not optimizer._optimizer_step_pre_hooks


def test_watching_the_loader_registers_the_loop_hooks_until_undo_and_tells_the_listener_its_workers_and_advice():
    listener = FakeListener()
    setup = TrainingSetup(listener)
    observer = Observer()
    setup.watch_loader(observer)
    assert observer in [ref() for ref in _loop_hooks._observers]
    assert ("etl_source", "loader") in listener.calls
    loader = torch.utils.data.DataLoader(list(range(4)), batch_size=2, num_workers=0, pin_memory=False)
    setup.use_loader(loader, iter(loader))
    assert set(listener.workers()) == set()
    (advise,) = listener.advisors
    assert advise("input-bound") and advise("compute-bound") == []
    setup.undo()
    assert observer not in [ref() for ref in _loop_hooks._observers]


def test_the_advice_can_come_from_the_loader_the_framework_has_when_asked():
    listener = FakeListener()
    setup = TrainingSetup(listener)
    current: list = [None]
    setup.watch_loader(Observer(), lambda: current[0])
    (advise,) = listener.advisors
    assert advise("input-bound") == []
    current[0] = torch.utils.data.DataLoader(list(range(4)), batch_size=2)
    assert advise("input-bound")
    setup.undo()


def test_a_cpu_device_tells_the_step_threads_and_the_flop_counter_is_left_at_undo(monkeypatch):
    left: list[StepFlopCounter] = []
    monkeypatch.setattr(StepFlopCounter, "abandon", lambda self: left.append(self))
    listener = FakeListener()
    setup = TrainingSetup(listener)
    counter = setup.use_device(torch.device("cpu"))
    assert ("step_threads", torch.get_num_threads()) in listener.calls and setup.counter is counter
    setup.undo()
    setup.undo()
    assert left == [counter]


def test_an_unknown_device_has_no_step_threads():
    listener = FakeListener()
    TrainingSetup(listener).use_device(None)
    assert not [c for c in listener.calls if c[0] == "step_threads"]


def test_a_rank_without_a_process_group_is_told_and_times_no_collectives():
    listener = FakeListener()
    setup = TrainingSetup(listener)
    assert setup.join(3, torch.nn.Linear(1, 1)) is False
    assert ("rank", 3) in listener.calls and setup.collective is None
