from __future__ import annotations

import gc
import time
import warnings

import pytest
import torch
from torch.optim import optimizer as optim_module

from clocked import BATCH, ClockedData, CostlyNet
from conftest import FakeClock
from trainperf import PerformanceListener
from trainperf.torch import Attachment, ListenerModule, attach, batch_size, timed
from trainperf.torch._gap import GapSplitter


class Net(ListenerModule, torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(x)


def listener(frequency=1, **kw):
    kw.setdefault("verdict", False)
    return PerformanceListener(frequency, sinks=[], **kw)


def data(n=6, batch=8):
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(batch, 4, generator=g), torch.randint(0, 2, (batch,), generator=g)) for _ in range(n)]


def step(model, opt, x, y):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss


def test_unchanged_loop_reports_one_iteration_per_optimizer_step():
    model = Net()
    lst = listener(2)
    model.set_listeners(lst)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in data(6):
        step(model, opt, x, y)
    assert [r.iteration for r in lst.history] == [2, 4, 6]
    assert all(r.samples == 16 and r.batches == 2 for r in lst.history)


def test_gradient_accumulation_counts_every_micro_batch():
    model = Net()
    lst = listener(1)
    model.set_listeners(lst)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = data(8, batch=5)
    for i in range(0, 8, 4):
        opt.zero_grad()
        for x, y in batches[i : i + 4]:
            torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    assert [(r.iteration, r.samples, r.batches) for r in lst.history] == [(1, 20, 4), (2, 20, 4)]


def test_forward_without_grad_and_foreign_optimizers_are_ignored():
    model, other = Net(), torch.nn.Linear(4, 2)
    lst = listener(1)
    model.set_listeners(lst)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    other_opt = torch.optim.SGD(other.parameters(), lr=0.1)
    x, y = data(1)[0]
    with torch.no_grad():
        model(x)
    other_opt.step()
    assert lst.iteration == 0
    step(model, opt, x, y)
    other(x).sum().backward()
    other_opt.step()
    assert lst.iteration == 1


def test_unchanged_loop_etl_is_the_gap_before_the_next_forward():
    model = Net()
    lst = listener(1)
    model.set_listeners(lst)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = data(4)
    forwards: list[float] = []
    # the stopwatch's end: the forward pass's start, seen before the listener's own hook sees it
    model.register_forward_pre_hook(lambda module, args: forwards.append(time.perf_counter()), prepend=True)
    step(model, opt, *batches[0])
    gaps = []
    for x, y in batches[1:]:
        began = time.perf_counter()  # the stopwatch: from the step's return to the next forward pass
        time.sleep(0.01)
        step(model, opt, x, y)
        gaps.append(1000 * (forwards[-1] - began))
    etls = [r.etl_ms for r in lst.history[1:]]
    assert len(etls) == 3
    # the gap (zero_grad included), plus the moments between the optimizer step's end and step()'s return
    assert all(gap <= etl <= gap + 1.5 for gap, etl in zip(gaps, etls, strict=True)), (gaps, etls)


def test_fit_reports_score_epochs_and_exact_loader_wait():
    model = Net()
    lst = listener(3, report_score=True)
    model.set_listeners(lst)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []

    def loss_fn(out, target):
        loss = torch.nn.functional.cross_entropy(out, target)
        losses.append(float(loss))
        return loss

    model.fit(data(6), opt, loss_fn, epochs=2)
    recs = list(lst.history)
    assert [r.iteration for r in recs] == [3, 6, 9, 12]
    assert [r.epoch for r in recs] == [0, 0, 1, 1]
    assert [r.score for r in recs] == pytest.approx([losses[2], losses[5], losses[8], losses[11]])  # the last step's
    assert all(r.samples_per_sec and r.samples_per_sec > 0 for r in recs)


def test_fit_and_a_handle_report_the_score_without_report_score_and_fit_leaves_it_out_quietly_when_false():
    model, plain = Net(), torch.nn.Linear(4, 2)
    given, refused = listener(3), listener(3, report_score=False)
    model.set_listeners(given, refused)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # fit gives the loss only to the listeners that record it
        model.fit(data(6), opt, torch.nn.functional.cross_entropy)
    assert all(r.score is not None for r in given.history) and len(given.history) == 2
    assert [r.score for r in refused.history] == [None, None]
    handle = attach(plain, listener(2))
    plain_opt = torch.optim.SGD(plain.parameters(), lr=0.1)
    for x, y in data(2):
        plain_opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(plain(x), y)
        loss.backward()
        handle.set_score(loss.detach())
        plain_opt.step()
    assert handle.listener.history[-1].score == pytest.approx(float(loss))
    handle.detach()


def test_attach_works_on_a_model_whose_class_cannot_change():
    model = torch.nn.Sequential(torch.nn.Linear(4, 2))
    lst = listener(1)
    handle = attach(model, lst)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in data(3):
        step(model, opt, x, y)
    assert lst.iteration == 3
    handle.detach()
    step(model, opt, *data(1)[0])
    assert lst.iteration == 3


def live_step_hooks() -> int:
    """torch's global step hooks, less those of attachments already dropped (they do nothing)."""
    gc.collect()
    hooks = optim_module._global_optimizer_post_hooks.values()
    return sum(getattr(h, "attachment", lambda: True)() is not None for h in hooks)


def test_close_removes_every_hook():
    model = Net()
    step_hooks = live_step_hooks()
    lst = listener(1, report_gc=True)
    model.set_listeners(lst)
    assert "forward" in model.__dict__
    assert live_step_hooks() == step_hooks + 1
    lst.close()
    assert "forward" not in model.__dict__, "the model's own forward is back"
    assert live_step_hooks() == step_hooks
    assert model.listeners == []


def test_listening_uses_no_module_hooks_so_torch_keeps_its_fast_path():
    model = Net()
    model.set_listeners(listener(1))
    assert not model._forward_pre_hooks and not model._forward_hooks


def test_detach_in_any_order_keeps_the_other_listener_and_a_custom_forward():
    model = Net()
    custom = lambda x: model.fc(x) * 2  # noqa: E731 - an instance-level forward set by someone else
    model.forward = custom
    a, b = listener(1), listener(1)
    model.set_listeners(a, b)
    a.close()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    step(model, opt, *data(1)[0])
    assert a.iteration == 0 and b.iteration == 1
    b.close()
    assert model.__dict__["forward"] is custom


def test_deepcopy_and_pickle_of_a_listened_model_carry_no_listener():
    import copy
    import io

    model = Net()
    lst = listener(1)
    model.set_listeners(lst)
    clone = copy.deepcopy(model)
    assert clone.listeners == []
    x = torch.randn(3, 4)
    assert torch.equal(clone(x), model(x))
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert loaded.listeners == []
    assert torch.equal(loaded(x), model(x))
    opt = torch.optim.SGD(clone.parameters(), lr=0.1)
    step(clone, opt, x, torch.zeros(3, dtype=torch.long))
    assert lst.iteration == 0, "the copy's steps are not counted by the original's listener"


def test_signature_of_a_listened_forward_is_the_real_one():
    import inspect

    model = Net()
    model.set_listeners(listener(1))
    assert list(inspect.signature(model.forward).parameters) == ["x"]


def test_two_listeners_on_one_model_both_report():
    model = Net()
    a, b = listener(1), listener(2)
    model.set_listeners(a, b)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in data(4):
        step(model, opt, x, y)
    assert len(a.history) == 4 and len(b.history) == 2
    model.set_listeners()
    assert model.listeners == []


def test_set_listeners_requires_a_module():
    class NotAModule(ListenerModule):
        pass

    with pytest.raises(TypeError, match="must also subclass torch.nn.Module"):
        NotAModule().set_listeners(listener())


@pytest.mark.parametrize(
    "batch, expected",
    [
        (torch.zeros(7, 3), 7),
        ((torch.zeros(5, 2), torch.zeros(5)), 5),
        ({"input_ids": torch.zeros(3, 9, dtype=torch.long)}, 3),
        ([[{"x": torch.zeros(2, 2)}]], 2),
        ((1, "text", torch.zeros(4)), 4),
        (torch.tensor(1.0), None),
        ("no tensors", None),
    ],
)
def test_batch_size_found_in_nested_inputs(batch, expected):
    assert batch_size(batch) == expected


def test_unknown_batch_size_omits_samples_with_one_warning():
    class DictNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 2)

        def forward(self, scale):
            return self.fc(torch.ones(3, 4)) * scale

    model = DictNet()
    lst = listener(1)
    attach(model, lst)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.warns(RuntimeWarning, match="batch size") as caught:
        for _ in range(3):
            opt.zero_grad()
            model(2.0).sum().backward()
            opt.step()
    assert len([w for w in caught if "batch size" in str(w.message)]) == 1
    assert all(r.samples_per_sec is None for r in lst.history)


class CountingLoss(torch.Tensor):
    reads = 0

    def __float__(self):
        CountingLoss.reads += 1
        return super().__float__()


def test_device_path_records_two_events_per_iteration_and_never_waits_while_training(clock):
    """A fake device timeline stands in for CUDA events: a begin at the first forward, an end at the
    step, the score staged on report iterations, one wait at the close."""
    from fake_device import FakeDevice, FakeTimeline

    model = Net()
    timelines = []
    lst = PerformanceListener(5, sinks=[], clock=clock, report_score=True, report_hardware=False, verdict=False)
    device = FakeDevice(clock)
    attach(model, lst, timeline_factory=lambda dev: timelines.append(FakeTimeline(device)) or timelines[-1])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    CountingLoss.reads = 0
    for x, y in data(10):
        clock.advance(0.003)
        device.launch(0.004)  # the step's device work, still running when the step returns
        loss = step(model, opt, x, y)
        model.set_score(loss.detach().as_subclass(CountingLoss))
    (timeline,) = timelines
    assert timeline.calls["begin"] == 10 and timeline.calls["end"] == 10
    assert timeline.calls["stage"] == 2 and timeline.calls["wait"] == 0
    assert [r.iteration for r in lst.history] == [5]  # the second window waits for the device
    lst.close()
    assert timeline.calls["wait"] == 1
    assert [(r.first_iteration, r.iteration) for r in lst.history] == [(1, 5), (6, 10)]
    assert CountingLoss.reads == 2


def test_timed_needs_a_target_and_keeps_len():
    assert len(timed([1, 2, 3], listener())) == 3


def test_timed_loader_advises_on_num_workers():
    lst = listener(1)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.zeros(4, 4)), batch_size=2)
    timed(loader, lst)
    assert any("num_workers=0" in fix for fix in lst.fixes_for("input-bound"))


# -- leaks -----------------------------------------------------------------------------------------
def test_attach_step_close_cycles_leave_nothing_on_the_optimizer():
    """One optimizer outlives many attachments: none of them leaves a weak reference or finalizer on it."""
    import weakref

    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.ones(4, 2)).sum().backward()
    opt.step()
    refs = weakref.getweakrefcount(opt)  # torch's own
    finalizers = len(weakref.finalize._registry)  # type: ignore[attr-defined]
    for _ in range(200):
        listener = PerformanceListener(10, sinks=[])
        attach(model, listener)
        model(torch.ones(4, 2)).sum().backward()
        opt.step()
        listener.close()
    assert weakref.getweakrefcount(opt) <= refs
    assert len(weakref.finalize._registry) <= finalizers  # type: ignore[attr-defined]


def test_a_model_and_listener_dropped_without_close_are_freed_with_their_global_hook():
    import weakref

    from torch.optim.optimizer import _global_optimizer_post_hooks

    hooks_before = live_step_hooks()
    model = torch.nn.Linear(2, 1)
    listener = PerformanceListener(10, sinks=[])
    attachment = attach(model, listener)
    dead = weakref.ref(attachment), weakref.ref(listener)
    del model, listener, attachment
    gc.collect()
    assert [ref() for ref in dead] == [None, None]
    other = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(other.parameters(), lr=0.1)
    other(torch.ones(1, 2)).sum().backward()
    opt.step()  # the orphaned hook does nothing
    second = PerformanceListener(10, sinks=[])
    attach(other, second)  # and is removed at the next attach
    # torch's table holds our hooks' closures; the one of the dropped attachment is gone from it
    assert not any(getattr(h, "attachment", lambda: True)() is None for h in _global_optimizer_post_hooks.values())
    assert live_step_hooks() == hooks_before + 1
    second.close()
    assert live_step_hooks() == hooks_before


# --- the data-wait / compute / other split of attach, on a fake clock, in loop shapes the rest miss ---


def clocked_listener(clock, frequency=1, **kw):
    return PerformanceListener(frequency, sinks=[], sink_thread=False, verdict=False, clock=clock, history=None, **kw)


def costly_attached(compute_s, frequency=1):
    """A model whose forward costs ``compute_s`` on a fake clock from 0, attached to a listener on
    that clock: ``(clock, model, listener, attachment, optimizer)``."""
    clock = FakeClock(0.0)
    model = CostlyNet(clock, compute_s)
    lst = clocked_listener(clock, frequency)
    return clock, model, lst, attach(model, lst), torch.optim.SGD(model.parameters(), lr=0.1)


def sgd_step(model, opt, *inputs):
    opt.zero_grad()
    sum(model(x).sum() for x in inputs).backward()
    opt.step()


class Sub(torch.Tensor):
    """A tensor subclass, as some libraries hand to models."""


def test_repeated_forwards_on_a_tensor_subclass_count_its_batch_once():
    model = Net()
    lst = listener(1)
    handle = attach(model, lst)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 4).as_subclass(Sub), torch.randn(5, 4).as_subclass(Sub)
    sgd_step(model, opt, x, x, y, y, x)
    sgd_step(model, opt, y)
    handle.detach()
    assert [(r.samples, r.batches) for r in lst.history] == [(13, 2), (5, 1)]


def test_a_later_input_seen_again_in_the_step_counts_once():
    model = Net()
    lst = listener(1)
    handle = attach(model, lst)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 4), torch.randn(5, 4)
    sgd_step(model, opt, x, y, y)
    sgd_step(model, opt, x, y)  # the same tensors in the next step: a new step counts them again
    handle.detach()
    assert [(r.samples, r.batches) for r in lst.history] == [(13, 2), (13, 2)]


def test_a_scaler_update_before_any_forward_is_no_iteration():
    lst = listener(1)
    handle = attach(Net(), lst)
    handle.on_scaler_update()
    assert lst.iteration == 0
    handle.detach()


def test_optimizer_steps_without_a_forward_are_iterations_of_one_batch_and_their_gaps_are_data_wait():
    clock = FakeClock(0.0)
    model = Net()
    lst = clocked_listener(clock)
    handle = attach(model, lst)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        clock.advance(0.004)
        opt.step()
    handle.detach()
    records = lst.history
    assert [r.iteration for r in records] == [1, 2, 3]
    assert [r.batches for r in records] == [1, 1, 1] and all(r.samples is None for r in records)
    assert [r.iteration_ms for r in records[1:]] == [pytest.approx(4.0)] * 2


def test_a_loop_over_a_list_has_its_gaps_as_data_wait_in_every_window():
    clock, model, lst, handle, opt = costly_attached(0.003, 2)
    batches = [(torch.ones(BATCH, 4), torch.zeros(BATCH, dtype=torch.long))] * 8
    for x, y in batches:
        clock.advance(0.002)  # the gap before the forward: a data wait as far as anyone can tell
        step(model, opt, x, y)
    handle.detach()
    for r in lst.history[1:]:
        assert (r.etl_ms, r.compute_ms, r.other_ms) == (pytest.approx(2.0), pytest.approx(3.0), pytest.approx(0.0))
        assert r.etl_source == "gap"


def test_the_first_iteration_counts_the_first_fetch():
    clock, model, lst, handle, opt = costly_attached(0.005, 1)
    for x, y in torch.utils.data.DataLoader(ClockedData(clock, 0.010, 3), batch_size=None):
        step(model, opt, x, y)
    handle.detach()
    assert [r.iteration_ms for r in lst.history] == [pytest.approx(15.0)] * 3
    assert [r.etl_ms for r in lst.history] == [pytest.approx(10.0)] * 3


def test_an_epochs_start_at_a_small_clock_reading_is_data_wait_not_other_time():
    clock = FakeClock(0.001)

    class SlowStart(ClockedData):
        def __iter__(self):  # an iterable dataset whose start costs 50 ms
            clock.advance(0.050)
            return (self[i] for i in range(self.n))

    class Iterable(torch.utils.data.IterableDataset):
        def __iter__(self):
            return SlowStart(clock, 0.002, 3).__iter__()

    model = CostlyNet(clock, 0.005)
    lst = clocked_listener(clock, 3)
    handle = attach(model, lst)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader(Iterable(), batch_size=None)
    for _ in range(2):
        for x, y in loader:
            step(model, opt, x, y)
    handle.detach()
    first, second = lst.history
    assert second.etl_ms == pytest.approx((50.0 + 3 * 2.0) / 3) and second.other_ms == pytest.approx(0.0)
    assert second.iteration_ms == pytest.approx((50.0 + 3 * 7.0) / 3)


@pytest.mark.parametrize("batch, samples", [
    (lambda: 5, None),  # no size at all
    (lambda: torch.ones(8, 3), 8),  # one tensor: its rows
    (lambda: torch.tensor(3.0), None),  # a scalar
    (lambda: (torch.ones(8, 3),), 8),  # a tuple of one
    (lambda: (["a"] * 8, torch.ones(8)), 8),  # inputs as a list of strings
    (lambda: (torch.ones(8, 3), ["a"] * 8), 8),  # labels as a list of strings
    (lambda: (torch.ones(8, 3), torch.ones(4)), None),  # rows that disagree
    (lambda: (torch.ones(4, 8), torch.ones(8)), None),
    (lambda: (torch.ones(8, 3), torch.ones(3, 8)), None),
])
def test_a_loader_batch_is_counted_by_its_rows_or_not_at_all(batch, samples):
    model = torch.nn.Linear(4, 2)
    lst = listener(1)
    handle = attach(model, lst)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader([batch() for _ in range(3)], batch_size=None, collate_fn=lambda b: b)
    with pytest.warns(RuntimeWarning, match="batch size") if samples is None else _no_warning():
        for _ in loader:
            sgd_step(model, opt, torch.ones(2, 4))
    handle.detach()
    assert [r.samples for r in lst.history] == [samples] * 3 and [r.batches for r in lst.history] == [1] * 3


def _no_warning():
    import contextlib
    import warnings

    @contextlib.contextmanager
    def none():
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            yield

    return none()


def test_a_cpu_model_tells_the_listener_its_step_threads_and_no_collective_timing_starts():
    model = Net()
    lst = listener(1)
    handle = attach(model, lst)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sgd_step(model, opt, torch.ones(8, 4))
    assert lst._readings.step_threads == torch.get_num_threads()
    assert handle._collective is None and handle._collective_pending is False
    handle.detach()


def test_a_detached_model_is_forgotten_by_the_other_listened_models():
    models = [Net(), Net(), Net()]
    handles = [attach(m, listener(1)) for m in models]
    handles[2].detach()
    for mine, theirs in ((handles[0], handles[1]), (handles[1], handles[0])):
        peers = [p() for p in mine._peers]
        assert theirs in peers and handles[2] not in peers and mine not in peers
    for h in handles[:2]:
        h.detach()


def test_another_models_step_after_this_models_own_host_work_counts_only_its_own_time():
    clock = FakeClock(0.0)
    gen, disc = CostlyNet(clock, 0.004), CostlyNet(clock, 0.003)
    lst = clocked_listener(clock, 1)
    handle = attach(gen, lst)
    g_opt, d_opt = torch.optim.SGD(gen.parameters(), lr=0.1), torch.optim.SGD(disc.parameters(), lr=0.1)
    other = attach(disc, clocked_listener(clock, 1))
    x, y = torch.ones(BATCH, 4), torch.zeros(BATCH, dtype=torch.long)
    for _ in range(4):
        step(gen, g_opt, x, y)
        clock.advance(0.010)  # the generator loop's own host work (logging)
        step(disc, d_opt, x, y)  # 3 ms of the discriminator: compute of the generator's next iteration
    other.detach()
    handle.detach()
    for r in lst.history[1:]:
        assert (r.etl_ms, r.compute_ms) == (pytest.approx(10.0), pytest.approx(7.0))


def test_a_distributed_generator_loop_splits_its_gap_into_the_iterables_time_and_host_work():
    clock = FakeClock(0.0)
    model = CostlyNet(clock, 0.005)
    lst = clocked_listener(clock, 1)
    handle = attach(model, lst)
    handle._gap = GapSplitter(handle.clock)  # as a rank that joined the cluster has it
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def batches():
        while True:
            clock.advance(0.020)  # the generator's own time: data wait
            yield torch.ones(BATCH, 4), torch.zeros(BATCH, dtype=torch.long)

    for i, (x, y) in enumerate(batches()):
        step(model, opt, x, y)
        clock.advance(0.004)  # the loop's own host work after the step
        if i == 4:
            break
    handle.detach()
    for r in lst.history[1:]:
        assert (r.etl_ms, r.other_ms, r.compute_ms) == (pytest.approx(20.0), pytest.approx(4.0), pytest.approx(5.0))


def test_a_forward_on_a_scalar_tensor_counts_no_samples_and_breaks_nothing():
    class Scale(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(1))

        def forward(self, t):
            return self.w * t

    model = Scale()
    lst = listener(1)
    handle = attach(model, lst)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.warns(RuntimeWarning, match="batch size"):
        sgd_step(model, opt, torch.tensor(3.0))
    handle.detach()
    assert [(r.samples, r.batches) for r in lst.history] == [(None, 1)]


def test_detach_is_idempotent_and_says_so():
    handle = attach(Net(), listener(1))
    assert handle.detached is False
    handle.detach()
    handle.detach()
    assert handle.detached is True


def test_an_optimizer_whose_step_calls_its_base_ends_the_iteration_after_its_own_work_and_leaves_no_hook():
    clock = FakeClock(0.0)

    class Lookahead(torch.optim.SGD):
        def step(self, closure=None):
            clock.advance(0.001)
            out = super().step(closure)
            clock.advance(0.002)  # its own work after the base step
            return out

    from trainperf.torch._registry import hooked_step_levels as _hooked_step_levels

    torch.optim.SGD(torch.nn.Linear(1, 1).parameters(), lr=0.1)  # torch wraps SGD.step once an SGD is built
    model = CostlyNet(clock, 0.005)
    lst = clocked_listener(clock, 1)
    handle = attach(model, lst)
    opt = Lookahead(model.parameters(), lr=0.1)
    assert _hooked_step_levels(opt) == 2
    x, y = torch.ones(BATCH, 4), torch.zeros(BATCH, dtype=torch.long)
    for _ in range(3):
        clock.advance(0.004)
        step(model, opt, x, y)
    handle.detach()
    assert [r.optimizer_steps for r in lst.history] == [1, 1, 1]
    for r in lst.history[1:]:
        assert (r.etl_ms, r.compute_ms) == (pytest.approx(4.0), pytest.approx(8.0))
    assert not opt._optimizer_step_pre_hooks


@pytest.mark.parametrize("joined", [True, False])
def test_a_rank_that_joins_its_cluster_times_collectives_and_its_iterable_and_one_that_does_not_neither(
        monkeypatch, joined):
    from trainperf.torch import _attach, _setup

    calls = []
    monkeypatch.setattr(_attach, "process_rank", lambda: 1)
    monkeypatch.setattr(_setup, "join_cluster", lambda listener: joined)
    monkeypatch.setattr(_setup, "time_collectives", lambda *args: calls.append(args))
    model = Net()
    lst = listener(1)
    handle = attach(model, lst)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        sgd_step(model, opt, torch.ones(8, 4))
    assert lst.rank == 1
    assert calls == ([(lst, model, None, None)] if joined else [])  # no DDP or FSDP given: found from the forward
    assert (handle._gap is not None) is joined and handle._collective_pending is False
    handle.detach()


def test_time_left_out_with_exclude_is_in_no_share_of_a_loop_without_a_loader():
    clock, model, lst, handle, opt = costly_attached(0.005, 1)
    x, y = torch.ones(BATCH, 4), torch.zeros(BATCH, dtype=torch.long)
    for _ in range(4):
        clock.advance(0.030)  # evaluation, left out
        lst.exclude(0.030)
        clock.advance(0.002)  # the gap before the forward
        step(model, opt, x, y)
    handle.detach()
    for r in lst.history[1:]:
        assert (r.iteration_ms, r.etl_ms, r.compute_ms) == (pytest.approx(7.0), pytest.approx(2.0), pytest.approx(5.0))


def test_host_work_after_the_step_of_a_loader_loop_is_other_time():
    clock, model, lst, handle, opt = costly_attached(0.005, 1)
    for x, y in torch.utils.data.DataLoader(ClockedData(clock, 0.004, 5), batch_size=None):
        step(model, opt, x, y)
        clock.advance(0.010)  # logging
    handle.detach()
    for r in lst.history[1:]:
        assert (r.etl_ms, r.compute_ms, r.other_ms) == (pytest.approx(4.0), pytest.approx(5.0), pytest.approx(10.0))


def test_a_skipped_scaler_step_ends_its_iteration_as_one_optimizer_step():
    model = Net()
    lst = listener(1)
    handle = attach(model, lst)
    model(torch.ones(8, 4)).sum().backward()
    handle.on_scaler_update()  # the scaler skipped the step (inf gradients)
    handle.detach()
    assert [(r.iteration, r.optimizer_steps, r.samples) for r in lst.history] == [(1, 1, 8)]


def test_a_model_without_parameters_can_be_listened_to():
    lst = listener(1)
    handle = attach(torch.nn.ReLU(), lst)
    torch.nn.ReLU()(torch.ones(2))  # another module: nothing
    handle.model(torch.ones(8, 4, requires_grad=True)).sum().backward()
    handle.detach()
    assert lst.iteration == 0 and lst.device is None


def test_attach_takes_its_model_and_listener_by_name_and_the_rest_only_by_name():
    handle = attach(model=Net(), listener=listener(1), timeline_factory=None)
    handle.detach()
    with pytest.raises(TypeError):
        attach(Net(), listener(1), None)  # type: ignore[misc]
    with pytest.raises(TypeError):
        Attachment(Net(), listener(1), None)  # type: ignore[misc]


def test_the_first_window_starts_where_the_first_epochs_loader_began():
    """An iterable dataset whose start costs 50 ms: the first window holds it as data wait."""
    clock = FakeClock(0.001)

    class Slow(torch.utils.data.IterableDataset):
        def __iter__(self):
            clock.advance(0.050)
            return (ClockedData(clock, 0.002, 3)[i] for i in range(3))

    model = CostlyNet(clock, 0.005)
    lst = clocked_listener(clock, 3)
    handle = attach(model, lst)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in torch.utils.data.DataLoader(Slow(), batch_size=None):
        step(model, opt, x, y)
    handle.detach()
    (first,) = lst.history
    assert first.etl_ms == pytest.approx((50.0 + 3 * 2.0) / 3) and first.other_ms == pytest.approx(0.0)
    assert (first.iteration_ms, first.compute_ms) == (pytest.approx((50.0 + 3 * 7.0) / 3), pytest.approx(5.0))
