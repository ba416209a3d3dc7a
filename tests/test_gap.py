"""GapSplitter: the time a loop spends inside its own iterable between a step and the next forward
pass, on a fake clock that the loop's "work" advances."""

from __future__ import annotations

import math
import sys

import pytest

pytest.importorskip("torch")

from trainperf.torch._gap import GapSplitter  # noqa: E402


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def work(self, seconds: float) -> None:
        self.t += seconds


def run_loop(source, clock: Clock, gap: GapSplitter, host_s: float, iterations: int) -> list[float | None]:
    """A training loop over ``source``: each batch's "forward" closes the gap, each "step" opens it,
    and ``host_s`` of host work follows the step (part of it consuming a generator expression)."""
    timed = []

    def forward() -> None:
        timed.append(gap.close())
        if not gap.loop_codes:
            gap.learn_loop(sys._getframe(1))

    for _batch in source:
        forward()
        gap.open()
        clock.work(host_s / 2)
        sum(clock.work(host_s / 20) or 1 for _ in range(10))  # host work through a generator expression
        if len(timed) == iterations:
            break
    gap.close()
    return timed


def test_a_generators_own_time_is_the_data_wait_and_the_loops_host_work_is_not():
    clock = Clock()
    gap = GapSplitter(clock)

    def batches():
        k = 0
        while True:
            k += 1
            math.sqrt(4.0)  # a C call inside the iterable: still the iterable's time
            clock.work(0.01 * k)
            yield 1

    timed = run_loop(batches(), clock, gap, host_s=0.01, iterations=5)
    assert timed[0] is None  # before the first step nothing was timed
    assert timed[1:] == [pytest.approx(0.02), pytest.approx(0.03), pytest.approx(0.04), pytest.approx(0.05)]
    assert sys.getprofile() is None


def forward_inside_the_iterable(clock: Clock, works: list[float]) -> list[float | None]:
    """A loop whose iterable spends ``works`` seconds, one batch each, then runs the forward pass
    itself (which closes the gap); what each forward's ``close()`` gave."""
    gap = GapSplitter(clock)
    got: list[float | None] = []

    def loop_body():  # the loop's frame: it resumes a generator that runs the forward pass itself
        def batches():
            for seconds in works:
                clock.work(seconds)
                got.append(gap.close())
                yield 1

        for _ in batches():
            if not gap.loop_codes:
                gap.learn_loop(sys._getframe(0))
            gap.open()
            clock.work(0.01)

    loop_body()
    gap.close()
    return got


def test_a_forward_pass_inside_the_iterable_closes_the_gap_at_its_start():
    assert forward_inside_the_iterable(Clock(), [0.02] * 3)[1:] == [pytest.approx(0.02)] * 2


def test_library_frames_are_not_the_loop():
    import torch

    from trainperf.torch._gap import _is_library

    assert _is_library(GapSplitter.open.__code__) and _is_library(torch.nn.Module.__call__.__code__)
    assert not _is_library(test_library_frames_are_not_the_loop.__code__)


def test_an_iterator_class_and_next_called_by_hand_are_timed_too():
    clock = Clock()

    class Batches:
        def __iter__(self):
            return self

        def __next__(self):
            clock.work(0.03)
            return 1

    timed = run_loop(Batches(), clock, GapSplitter(clock), host_s=0.005, iterations=4)
    assert timed[1:] == [pytest.approx(0.03)] * 3

    gap = GapSplitter(clock)
    it = Batches()
    got = []
    for _ in range(4):
        next(it)
        got.append(gap.close())
        if not gap.loop_codes:
            gap.learn_loop(sys._getframe(0))
        gap.open()
        clock.work(0.01)
    gap.close()
    assert got[1:] == [pytest.approx(0.03)] * 3


def test_a_list_of_batches_has_no_data_wait_and_a_profiler_is_left_alone():
    clock = Clock()
    assert run_loop([1] * 6, clock, GapSplitter(clock), host_s=0.01, iterations=4)[1:] == [0.0] * 3

    def profiler(frame, event, arg):
        return None

    sys.setprofile(profiler)
    try:
        gap = GapSplitter(clock)
        gap.learn_loop(sys._getframe(0))
        gap.open()
        assert gap.close() is None and sys.getprofile() is profiler
    finally:
        sys.setprofile(None)


def _chain(depth: int):
    """``depth`` nested functions, each with its own code; the innermost returns its frame's list of
    codes from itself outwards, and the splitter that learned the loop from it."""
    namespace: dict = {"sys": sys, "GapSplitter": GapSplitter}
    source = ["def f0(codes):\n    gap = GapSplitter(lambda: 0.0)\n    gap.learn_loop(sys._getframe(0))\n"
              "    frame = sys._getframe(0)\n    while frame is not None:\n        codes.append(frame.f_code)\n"
              "        frame = frame.f_back\n    return gap\n"]
    source += [f"def f{i}(codes):\n    return f{i - 1}(codes)\n" for i in range(1, depth)]
    exec("".join(source), namespace)  # noqa: S102 - distinct code objects, one per depth
    codes: list = []
    gap = namespace[f"f{depth - 1}"](codes)
    return gap, codes


def test_the_loop_is_looked_for_in_the_eight_nearest_frames_outside_the_library():
    gap, codes = _chain(12)
    assert gap.loop_codes == frozenset(codes[:8])


def _timed_loop(source, clock: Clock, gap: GapSplitter, iterations: int, before_forward_s: float = 0.004):
    """A loop that does host work between receiving its batch and the forward (moving the batch), and
    after the step through a callable object, and by unpacking a generator expression."""
    class Metric:
        def __call__(self, seconds: float) -> None:
            clock.work(seconds)

    metric = Metric()
    timed = []
    for _batch in source:
        clock.work(before_forward_s)  # the batch moved to the device: host time, not data wait
        timed.append(gap.close())
        if not gap.loop_codes:
            gap.learn_loop(sys._getframe(0))
        gap.open()
        metric(0.003)
        first, second = (clock.work(0.001) or k for k in range(2))
        if len(timed) == iterations:
            break
    gap.close()
    return timed


def test_a_generator_that_spends_its_time_in_python_calls_is_the_data_wait_and_nothing_else():
    clock = Clock()

    def batches():
        while True:
            clock.work(0.02)  # a Python call, no C call before it
            yield 1

    timed = _timed_loop(batches(), clock, GapSplitter(clock), iterations=5)
    assert timed[0] is None and timed[1:] == [pytest.approx(0.02)] * 4


def test_a_loop_over_a_generator_expression_times_the_expression():
    clock = Clock()
    timed = _timed_loop((clock.work(0.015) or i for i in range(10)), clock, GapSplitter(clock), iterations=5)
    assert timed[1:] == [pytest.approx(0.015)] * 4


def test_a_splitter_that_has_not_learned_the_loop_times_nothing():
    clock = Clock()
    gap = GapSplitter(clock)
    gap.open()
    clock.work(0.01)
    assert gap.close() is None and sys.getprofile() is None


def test_a_forward_inside_the_iterable_counts_the_iterables_time_however_long_it_grows():
    got = forward_inside_the_iterable(Clock(), [0.02, 0.5, 5.0, 40.0])
    assert got[1:] == [pytest.approx(0.5), pytest.approx(5.0), pytest.approx(40.0)]
