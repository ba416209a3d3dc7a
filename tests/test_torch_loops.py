"""The loops people write, unchanged, against a fake clock that the loader and the step advance.

The truth is exact: the loader advances the clock by a known load time per batch, the model's
forward by a known compute time, so data wait, iteration time and samples/sec are known to the
microsecond; the listener must report them within 10%, with the right verdict.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from clocked import CostlyNet
from trainperf import BottleneckWarning, PerformanceListener
from trainperf.torch import attach, timed

BATCH = 8


class ClockedData(torch.utils.data.Dataset):
    """Each batch costs ``load_s`` on the fake clock."""

    def __init__(self, clock, load_s: float, n: int = 40, pair: bool = False) -> None:
        self.clock, self.load_s, self.n, self.pair = clock, load_s, n, pair

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        self.clock.advance(self.load_s)
        g = torch.Generator().manual_seed(i)
        x = torch.randn(BATCH, 4, generator=g)
        if self.pair:
            return x, torch.randn(BATCH, 4, generator=g), torch.randint(0, 2, (BATCH,), generator=g)
        return x, torch.randint(0, 2, (BATCH,), generator=g)


def loader(clock, load_s, n=40, **kw):
    return torch.utils.data.DataLoader(ClockedData(clock, load_s, n, **kw), batch_size=None)


class CostlySGD(torch.optim.SGD):
    """An optimizer step that costs ``step_s`` on the fake clock."""

    def __init__(self, params, clock, step_s: float = 0.0) -> None:
        super().__init__(params, lr=0.01)
        self.clock, self.step_s = clock, step_s

    def step(self, closure=None):
        self.clock.advance(self.step_s)
        return super().step(closure)


def listen(model, clock, frequency=10):
    lst = PerformanceListener(frequency, sinks=[], clock=clock, history=None)
    attach(model, lst)
    return lst


def after_warmup(lst):
    return [r for r in lst.history if not r.warmup]


def close_to(value, truth, rel=0.10):
    return value == pytest.approx(truth, rel=rel, abs=1e-6)


def loss_of(out, y):
    return torch.nn.functional.cross_entropy(out, y)


@pytest.fixture(autouse=True)
def _no_bottleneck_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def test_plain_loop_reports_the_loaders_time_and_the_step(clock):
    model = CostlyNet(clock, 0.005)
    lst = listen(model, clock)
    opt = CostlySGD(model.parameters(), clock)
    for x, y in loader(clock, 0.010):
        opt.zero_grad()
        loss_of(model(x), y).backward()
        opt.step()
    for r in after_warmup(lst):
        assert close_to(r.etl_ms, 10.0) and close_to(r.iteration_ms, 15.0)
        assert close_to(r.samples_per_sec, BATCH / 0.015)
        assert r.other_ms == pytest.approx(0.0, abs=1e-6)
        assert r.etl_source == "loader"
        assert r.verdict.kind == "input-bound" and close_to(r.verdict.share, 66.7)


def test_gradient_accumulation_counts_every_micro_batch_load(clock):
    """4 micro-batches per step: 40 ms of loading in a 60 ms step is 67% input-bound."""
    model = CostlyNet(clock, 0.005)
    lst = listen(model, clock, frequency=5)
    opt = CostlySGD(model.parameters(), clock)
    for i, (x, y) in enumerate(loader(clock, 0.010, n=80)):
        loss_of(model(x), y).backward()
        if i % 4 == 3:
            opt.step()
            opt.zero_grad()
    records = after_warmup(lst)
    assert records
    for r in records:
        assert close_to(r.etl_ms, 40.0) and close_to(r.iteration_ms, 60.0)
        assert r.batches == 20 and r.samples == 20 * BATCH
        assert close_to(r.samples_per_sec, 4 * BATCH / 0.060)
        assert r.verdict.kind == "input-bound"
    assert lst.iteration == 20


def test_no_grad_teacher_forward_is_compute_not_data_wait(clock):
    """Distillation: a 10 ms no-grad teacher pass and a 5 ms student pass with a 2 ms loader is compute-bound."""
    student, teacher = CostlyNet(clock, 0.005), CostlyNet(clock, 0.010)
    lst = listen(student, clock)
    opt = CostlySGD(student.parameters(), clock)
    for x, _ in loader(clock, 0.002):
        with torch.no_grad():
            target = teacher(x).argmax(1)
        opt.zero_grad()
        loss_of(student(x), target).backward()
        opt.step()
    for r in after_warmup(lst):
        assert close_to(r.etl_ms, 2.0) and close_to(r.iteration_ms, 17.0)
        assert close_to(r.compute_ms, 15.0)
        assert r.verdict.kind == "fine"


def test_evaluation_inside_the_loop_is_other_host_time(clock):
    """A no-grad evaluation after each step (its own loader and forward) is neither data wait nor the step."""
    model = CostlyNet(clock, 0.005)
    lst = listen(model, clock)
    opt = CostlySGD(model.parameters(), clock)
    val = loader(clock, 0.003, n=1)
    for x, y in loader(clock, 0.002):
        opt.zero_grad()
        loss_of(model(x), y).backward()
        opt.step()
        model.eval()
        with torch.no_grad():
            for vx, _ in val:
                model(vx)
        model.train()
    for r in after_warmup(lst):
        assert close_to(r.etl_ms, 2.0)
        assert close_to(r.other_ms, 8.0)  # 3 ms val loading + 5 ms val forward
        assert close_to(r.iteration_ms, 15.0)
        assert r.etl_ms + r.compute_ms + r.other_ms == pytest.approx(r.iteration_ms)
        assert r.verdict.kind == "loop-bound" and close_to(r.verdict.share, 53.3)


def test_two_optimizers_on_one_model_are_one_iteration_per_batch(clock):
    """A backbone and a head stepped apart: both steps are compute, counted as two optimizer steps."""
    model = CostlyNet(clock, 0.005)
    model.head = torch.nn.Linear(2, 2)
    lst = listen(model, clock)
    body_opt = CostlySGD(model.fc.parameters(), clock, 0.003)
    head_opt = CostlySGD(model.head.parameters(), clock, 0.003)
    for x, y in loader(clock, 0.004):
        body_opt.zero_grad()
        head_opt.zero_grad()
        loss_of(model.head(model(x)), y).backward()
        body_opt.step()
        head_opt.step()
    assert lst.iteration == 40
    for r in after_warmup(lst):
        assert close_to(r.etl_ms, 4.0) and close_to(r.iteration_ms, 15.0)
        assert r.optimizer_steps == 20  # two per iteration
        assert close_to(r.samples_per_sec, BATCH / 0.015)
        assert r.verdict.kind == "input-bound" and close_to(r.verdict.share, 26.7)


def test_gan_discriminator_pass_and_its_step_are_not_data_wait(clock):
    """Listening to the generator: the discriminator's passes and step sit inside the iteration."""
    gen, disc = CostlyNet(clock, 0.004), CostlyNet(clock, 0.003)
    gen.fc = torch.nn.Linear(4, 4)
    lst = listen(gen, clock)
    g_opt, d_opt = CostlySGD(gen.parameters(), clock, 0.001), CostlySGD(disc.parameters(), clock, 0.002)
    for x, y in loader(clock, 0.005):
        fake = gen(x)
        d_opt.zero_grad()
        (loss_of(disc(x), y) + loss_of(disc(fake.detach()), y)).backward()
        d_opt.step()
        g_opt.zero_grad()
        loss_of(disc(fake), y).backward()
        g_opt.step()
    # per batch: 5 load + 4 gen + 3*3 disc + 2 d-step + 1 g-step = 21 ms
    for r in after_warmup(lst):
        assert close_to(r.etl_ms, 5.0) and close_to(r.iteration_ms, 21.0)
        assert close_to(r.samples_per_sec, BATCH / 0.021)
        assert r.verdict.kind == "input-bound" and close_to(r.verdict.share, 23.8)


def test_several_forwards_per_batch_count_the_batch_once(clock):
    """A siamese pass (two inputs of one batch through the same model) delivers 8 samples, not 16."""
    model = CostlyNet(clock, 0.003)
    lst = listen(model, clock)
    opt = CostlySGD(model.parameters(), clock)
    for a, b, y in loader(clock, 0.002, pair=True):
        opt.zero_grad()
        (loss_of(model(a), y) + loss_of(model(b), y)).backward()
        opt.step()
    for r in after_warmup(lst):
        assert r.samples == 10 * BATCH and r.batches == 10
        assert close_to(r.samples_per_sec, BATCH / 0.008)


def test_lbfgs_closure_counts_its_repeated_forwards_once_without_a_loader(clock):
    """No DataLoader to see: samples come from forwards, a forward on the same tensor counting once."""
    model = CostlyNet(clock, 0.002)
    lst = listen(model, clock, frequency=5)
    opt = torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=4)
    batches = [(torch.randn(BATCH, 4), torch.randint(0, 2, (BATCH,))) for _ in range(15)]
    for x, y in batches:
        clock.advance(0.001)  # the host's own gap before the step

        def closure(x=x, y=y):
            opt.zero_grad()
            loss = loss_of(model(x), y)
            loss.backward()
            return loss

        opt.step(closure)
    records = after_warmup(lst)
    assert records and all(r.samples == 5 * BATCH and r.batches == 5 for r in records)
    assert all(r.etl_source == "gap" and close_to(r.etl_ms, 1.0) for r in records)


def test_timed_on_a_plain_list_is_exact_too(clock):
    model = CostlyNet(clock, 0.005)
    lst = listen(model, clock)
    opt = CostlySGD(model.parameters(), clock)

    def batches():
        for _ in range(30):
            clock.advance(0.007)
            yield torch.randn(BATCH, 4), torch.randint(0, 2, (BATCH,))

    for x, y in timed(batches(), model):
        opt.zero_grad()
        loss_of(model(x), y).backward()
        opt.step()
        clock.advance(0.001)  # logging
    for r in after_warmup(lst):
        assert close_to(r.etl_ms, 7.0) and close_to(r.other_ms, 1.0) and close_to(r.iteration_ms, 13.0)
        assert r.etl_source == "loader"


def test_an_optimizer_subclass_calling_super_step_counts_one_step(clock):
    torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)  # torch hooks SGD.step itself from now on
    model = CostlyNet(clock, 0.001)
    lst = listen(model, clock, frequency=2)
    opt = CostlySGD(model.parameters(), clock)
    for x, y in loader(clock, 0.001, n=4):
        opt.zero_grad()
        loss_of(model(x), y).backward()
        opt.step()
    assert lst.iteration == 4 and [r.optimizer_steps for r in lst.history] == [2, 2]


def test_skipped_gradscaler_steps_still_end_their_iteration(clock):
    """Steps the scaler skips for inf gradients close their iteration and are counted."""
    model = CostlyNet(clock, 0.005)
    lst = listen(model, clock)
    opt = CostlySGD(model.parameters(), clock)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**4)
    for i, (x, y) in enumerate(loader(clock, 0.002, n=60)):
        opt.zero_grad()
        loss = loss_of(model(x), y)
        if i % 4 == 0:
            loss = loss * float("inf")
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    assert lst.iteration == 60
    records = after_warmup(lst)
    assert sum(r.skipped_steps for r in records) == 15 - 3  # the warm-up window held 3 of the 15
    for r in records:
        assert close_to(r.iteration_ms, 7.0) and close_to(r.iteration_max_ms, 7.0)


def test_fit_is_exact_with_its_own_loop(clock):
    from trainperf.torch import ListenerModule

    class Net(ListenerModule, CostlyNet):
        pass

    model = Net(clock, 0.004)
    lst = PerformanceListener(10, sinks=[], clock=clock)
    model.set_listeners(lst)
    model.fit(loader(clock, 0.006), CostlySGD(model.parameters(), clock), loss_of)
    for r in after_warmup(lst):
        assert close_to(r.etl_ms, 6.0) and close_to(r.iteration_ms, 10.0)
        assert close_to(r.samples_per_sec, BATCH / 0.010)


def test_a_background_thread_iterating_a_loader_is_not_data_wait(clock):
    from trainperf.data import prefetch

    model = CostlyNet(clock, 0.005)
    lst = listen(model, clock)
    opt = CostlySGD(model.parameters(), clock)
    for x, y in prefetch(loader(clock, 0.0, n=30)):
        opt.zero_grad()
        loss_of(model(x), y).backward()
        opt.step()
    assert lst.iteration == 30
    assert all(r.etl_source == "gap" for r in lst.history)


@pytest.mark.parametrize("order", ["attach then compile", "compile then attach", "module.compile"])
def test_torch_compile_keeps_its_graph_and_the_figures(clock, order):
    import torch._dynamo

    torch._dynamo.reset()
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    lst = PerformanceListener(5, sinks=[], clock=clock)
    x = torch.randn(BATCH, 4)
    if order == "compile then attach":
        run = torch.compile(model, backend="eager")
        attach(run, lst)
    else:
        attach(model, lst)
        explained = torch._dynamo.explain(model)(x)  # what torch.compile will see of the listened model
        assert explained.graph_break_count == 0 and explained.graph_count == 1
        if order == "attach then compile":
            run = torch.compile(model, backend="eager")
        else:
            model.compile(backend="eager")
            run = model
    opt = CostlySGD(model.parameters(), clock, 0.004)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no Dynamo warning from trainperf
        warnings.simplefilter("ignore", BottleneckWarning)
        for xb, yb in loader(clock, 0.006, n=20):
            opt.zero_grad()
            loss_of(run(xb), yb).backward()
            opt.step()
    assert lst.iteration == 20
    for r in after_warmup(lst):
        assert close_to(r.etl_ms, 6.0) and close_to(r.iteration_ms, 10.0)
        assert r.samples == 5 * BATCH


def test_a_head_stepped_after_its_backbone_is_compute_not_the_wait_for_the_next_batch(clock):
    """No loader: the gap before the forward is the data wait, but the head's step that ends the
    previous batch's work is not part of it (3 ms head step, 2 ms gap, 5 ms forward, 1 ms body step)."""
    model = CostlyNet(clock, 0.005)
    model.head = torch.nn.Linear(2, 2)
    lst = listen(model, clock, frequency=2)
    body_opt = CostlySGD(model.fc.parameters(), clock, 0.001)
    head_opt = CostlySGD(model.head.parameters(), clock, 0.003)
    x, y = torch.ones(BATCH, 4), torch.zeros(BATCH, dtype=torch.long)
    for _ in range(12):
        clock.advance(0.002)
        body_opt.zero_grad()
        head_opt.zero_grad()
        loss_of(model.head(model(x)), y).backward()
        body_opt.step()
        head_opt.step()
    records = after_warmup(lst)
    assert len(records) == 5
    for r in records:
        assert (r.etl_ms, r.compute_ms, r.other_ms) == (pytest.approx(2.0), pytest.approx(9.0), pytest.approx(0.0))
        assert r.etl_source == "gap" and r.optimizer_steps == 4


def test_host_work_after_a_late_head_step_is_other_time_with_a_loader(clock):
    """With a loader: the head's step is compute, the logging after it the loop's other time."""
    model = CostlyNet(clock, 0.005)
    model.head = torch.nn.Linear(2, 2)
    lst = listen(model, clock, frequency=2)
    body_opt = CostlySGD(model.fc.parameters(), clock, 0.001)
    head_opt = CostlySGD(model.head.parameters(), clock, 0.003)
    for x, y in loader(clock, 0.004, n=12):
        body_opt.zero_grad()
        head_opt.zero_grad()
        loss_of(model.head(model(x)), y).backward()
        body_opt.step()
        head_opt.step()
        clock.advance(0.010)  # logging after both steps
    records = after_warmup(lst)
    assert len(records) == 5
    for r in records:
        assert (r.etl_ms, r.compute_ms, r.other_ms) == (pytest.approx(4.0), pytest.approx(9.0), pytest.approx(10.0))
