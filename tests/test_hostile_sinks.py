"""Sinks that fail in every way a user's object can: training goes on, the others get every record,
and what is said names the sink even when its own ``__repr__`` raises."""

from __future__ import annotations

import warnings

import pytest

from trainperf import MemorySink, PerformanceListener, SinkError


class Hostile:
    """Fails when called, when closed, when shown and when asked where it runs."""

    def __call__(self, record: object) -> None:
        raise OSError("disk full")

    def close(self) -> None:
        raise OSError("cannot close")

    def __repr__(self) -> str:
        raise RuntimeError("repr is broken")

    @property
    def on_training_thread(self) -> bool:
        raise RuntimeError("property is broken")


class BadError(Exception):
    def __repr__(self) -> str:
        raise RuntimeError("the error's repr is broken too")


class RaisesBadError:
    def __call__(self, record: object) -> None:
        raise BadError()

    def __repr__(self) -> str:
        raise RuntimeError("repr is broken")


@pytest.mark.parametrize("sink_thread", [True, False])
@pytest.mark.parametrize("sink_type", [Hostile, RaisesBadError])
def test_a_failing_sink_whose_repr_raises_never_escapes_and_is_named_by_its_type(sink_thread, sink_type, clock):
    kept = MemorySink()
    listener = PerformanceListener(2, sinks=[sink_type(), kept], sink_thread=sink_thread, clock=clock,
                                   report_hardware=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(6):
            clock.advance(0.01)
            listener.record_iteration(samples=4)
        listener.close()
    assert [r.iteration for r in kept.records] == [2, 4, 6]
    said = [str(w.message) for w in caught if issubclass(w.category, SinkError)]
    assert any(f"{sink_type.__qualname__} object at 0x" in m and "(its repr raised)" in m and "was skipped" in m
               for m in said), said


def test_a_sink_that_fails_to_close_and_to_show_itself_is_said_and_the_others_close():
    closed: list[str] = []

    class Good:
        def __call__(self, record: object) -> None:
            pass

        def close(self) -> None:
            closed.append("good")

    listener = PerformanceListener(1, sinks=[Hostile(), Good()], report_hardware=False)
    with pytest.warns(SinkError, match=r"<Hostile object at 0x[0-9a-f]+ \(its repr raised\)> failed to close"):
        listener.close()
    assert closed == ["good"]


def test_describe_and_on_training_thread_survive_hostile_objects():
    from trainperf.sinks._base import describe, on_training_thread

    assert describe([1, 2]) == "[1, 2]"
    shown = describe(Hostile())
    assert shown.startswith("<Hostile object at 0x") and shown.endswith("(its repr raised)>")
    assert on_training_thread(Hostile()) is False

    class Asks:
        on_training_thread = True

    assert on_training_thread(Asks()) is True


def test_a_non_callable_sink_whose_repr_raises_is_refused_with_a_type_error_naming_the_argument():
    class NotASink:
        def __repr__(self) -> str:
            raise RuntimeError("repr is broken")

    with pytest.raises(TypeError, match=r"sinks must be callables taking a record, got <\S*NotASink object at 0x"):
        PerformanceListener(1, sinks=[NotASink()])
    listener = PerformanceListener(1, sinks=[])
    with pytest.raises(TypeError, match=r"sink must be a callable taking a record, got <\S*NotASink object at 0x"):
        listener.add_sink(NotASink())  # type: ignore[arg-type]
    listener.close()


def test_strict_fan_out_re_raises_the_first_failure_after_every_sink_had_the_record():
    from trainperf import PerformanceRecord
    from trainperf.sinks._base import FanOut

    got: list[int] = []

    def first(r):
        raise KeyError("first")

    def second(r):
        raise ValueError("second")

    fan = FanOut([first, lambda r: got.append(r.iteration), second], strict=True)
    record = PerformanceRecord(iteration=3, window_iterations=1, window_s=0.1, warmup=False, timestamp=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SinkError)
        with pytest.raises(KeyError, match="first"):
            fan(record)
    assert got == [3]


def test_a_strict_fan_out_closes_quietly_when_no_sink_fails():
    from trainperf.sinks._base import FanOut

    closed: list[str] = []

    class Closing:
        def __call__(self, record):
            pass

        def close(self):
            closed.append("x")

    FanOut([Closing(), lambda r: None], strict=True).close()
    assert closed == ["x"]


def test_only_a_true_on_training_thread_asks_for_the_training_thread():
    from trainperf.sinks._base import on_training_thread

    for value, expected in ((True, True), (1, False), ("yes", False), (False, False)):
        class Sink:
            on_training_thread = value

        assert on_training_thread(Sink()) is expected, value


def test_a_strict_close_re_raises_the_first_sinks_failure_after_closing_them_all():
    from trainperf.sinks._base import FanOut

    closed: list[str] = []

    class Failing:
        def __init__(self, error: Exception) -> None:
            self.error = error

        def __call__(self, record):
            pass

        def close(self):
            closed.append(type(self.error).__name__)
            raise self.error

    fan = FanOut([Failing(KeyError("first")), Failing(ValueError("second"))], strict=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SinkError)
        with pytest.raises(KeyError, match="first"):
            fan.close()
    assert closed == ["KeyError", "ValueError"]


def test_a_sink_that_asks_for_the_training_thread_gets_each_record_once():
    from trainperf import PerformanceRecord
    from trainperf.core._emit import Emitter

    got: list[int] = []

    class OnTraining:
        on_training_thread = True

        def __call__(self, record):
            got.append(record.iteration)

    other: list[int] = []
    emitter = Emitter([OnTraining(), lambda r: other.append(r.iteration)])
    for i in range(1, 4):
        emitter.deliver(PerformanceRecord(iteration=i, window_iterations=1, window_s=0.1, warmup=False,
                                          timestamp=0.0))
    assert emitter.flush(10.0)
    emitter.close()
    assert got == [1, 2, 3] and other == [1, 2, 3]
