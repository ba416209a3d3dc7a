"""``trainperf doctor``: the guide's 13 causes of slow training, checked automatically."""

from ._checks import CHECKS, Context
from ._memory_fixes import Block, MemoryFix, MemorySplit, StepMemory, memory_fixes
from ._memory_step import step_memory
from ._probe import Environment, Measurement, collect_environment, measure, watch_concurrency
from ._report import Check, DoctorReport

__all__ = ["Block", "Check", "DoctorReport", "Environment", "Measurement", "MemoryFix", "MemorySplit", "StepMemory",
           "collect_environment", "doctor", "memory_fixes", "step_memory"]


def doctor(
    model: object = None,
    loader: object = None,
    optimizer: object = None,
    *,
    loss_fn: object = None,
    steps: int = 5,
    environment: Environment | None = None,
    watch_seconds: float = 0.3,
) -> DoctorReport:
    """Run the 13 checks; the more you hand over, the more is measured rather than skipped.

    Args:
        model: a ``torch.nn.Module``: its devices, dtypes and shape are read, concurrent use from
            other threads is watched for ``watch_seconds``, and with a loader a few forward and
            backward passes are timed (weights are left unchanged), and one training step's memory
            is split into parameters, gradients, optimizer state, activations and temporaries, on
            copies of the model and optimizer (``report.memory``).
        loader: an iterable of batches (a DataLoader's settings are read too).
        optimizer: a ``torch.optim.Optimizer`` over the model's parameters: a fresh one of its class
            and param-group settings is stepped on a copy of the model, so the memory split counts
            optimizer state; the one given is not stepped. Without it, optimizer state is not counted.
        loss_fn: ``loss_fn(outputs, targets)`` for ``(inputs, targets)`` batches; otherwise the mean
            of the outputs is back-propagated.
        steps: batches to time.
        environment: facts to judge instead of this machine's (tests pass a built one).

    Example:
        >>> report = trainperf.doctor(model=model, loader=loader)  # doctest: +SKIP
        >>> print(report)  # doctest: +SKIP
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}")
    if model is not None and not hasattr(model, "parameters"):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if loader is not None and not hasattr(loader, "__iter__"):
        raise TypeError(f"loader must be iterable, got {type(loader).__name__}")
    if optimizer is not None and not callable(getattr(optimizer, "step", None)):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
    if loss_fn is not None and not callable(loss_fn):
        raise TypeError(f"loss_fn must be callable, got {loss_fn!r}")
    if isinstance(watch_seconds, bool) or not isinstance(watch_seconds, (int, float)) or not 0 < watch_seconds < 3600:
        raise ValueError(f"watch_seconds must be a number of seconds in (0, 3600), got {watch_seconds!r}")
    env = environment or collect_environment()
    concurrency = watch_concurrency(model, watch_seconds) if model is not None else None
    measurement = measure(model, loader, steps=steps, loss_fn=loss_fn) if loader is not None else None
    ctx = Context(env=env, model=model, loader=loader, optimizer=optimizer, measurement=measurement,
                  max_concurrent_forwards=concurrency)
    return DoctorReport(tuple(check(ctx) for check in CHECKS), _memory(model, loader, optimizer, loss_fn))


def _memory(model: object, loader: object, optimizer: object, loss_fn: object) -> StepMemory:
    """The memory section; a model the tracker cannot follow gets a skipped section, not an error."""
    try:
        return step_memory(model, loader, optimizer, loss_fn=loss_fn)
    except Exception as exc:  # noqa: BLE001 - the checks above are worth printing still
        return StepMemory(None, skipped=f"measuring it failed: {type(exc).__name__}: {exc}")
