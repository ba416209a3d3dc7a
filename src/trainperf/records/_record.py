"""The record schema: one :class:`PerformanceRecord` per report window."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any

__all__ = ["GCStat", "PerformanceRecord", "Verdict", "SCHEMA_VERSION"]

#: Bumped when a field is renamed or removed; adding a field keeps the version.
SCHEMA_VERSION = 1

# Field roles, read by :func:`flat_columns` and :func:`metric_fields`: who and where a record comes
# from, and the figures that metric loggers (TensorBoard, Lightning) take.
_IDENTITY = {"role": "identity"}
_METRIC = {"role": "metric"}


@dataclass(frozen=True, slots=True)
class GCStat:
    """Collections of one collector during a window.

    Args:
        name: collector name (``gen0``, ``gen1``, ``gen2`` for Python's generations,
            ``cuda_alloc_retries`` for the CUDA caching allocator, or a Java collector
            name such as ``PS Scavenge`` when read back from a Deeplearning4j log).
        count: collections in the window.
        ms: total pause in the window, in milliseconds; ``None`` where the collector
            does not expose its pause time.
    """

    name: str
    count: int
    ms: float | None


@dataclass(frozen=True, slots=True)
class Verdict:
    """What limits the window: ``input-bound``, ``gc-bound``, ``loop-bound``, ``host-bound`` (CUDA),
    ``cpu-contention``, ``padding`` (the step computes pad tokens) or ``fine``; or ``memory-growth``, which
    outweighs them all: memory kept from step to step rises window after window, and the run will end
    out of memory (the time verdict it replaces is said in its reason).

    Args:
        kind: the verdict.
        share: the share of the window's wall time, in percent, that backs the verdict
            (data wait for ``input-bound``, GC pauses for ``gc-bound``, the step's time on pad
            tokens for ``padding``, the larger of the two for ``fine``); for ``memory-growth``, the
            growing floor's share of the memory it can grow into (0 when that is unknown).
        reason: the plain-words explanation printed after the figures.
    """

    kind: str
    share: float
    reason: str


@dataclass(frozen=True, slots=True)
class PerformanceRecord:
    """Figures for one report window (the iterations since the previous report).

    Tokens come in three counts: ``tokens`` the real ones (the attention mask's), ``tokens_padded``
    every position the model computed, padding included, and ``tokens_loss`` the labels other than
    -100; ``padding_share`` is ``1 - tokens / tokens_padded`` and ``mfu_real`` the MFU spent on real
    tokens (``mfu * tokens / tokens_padded``).

    Memory is in MB (2**20 bytes). On CUDA: ``cuda_allocated_max_mb`` and ``cuda_reserved_max_mb`` are the
    caching allocator's peaks in the window, ``_pct`` their share of the device's capacity,
    ``cuda_allocated_floor_mb`` what stays allocated between two steps (read at the report),
    ``cuda_headroom_mb`` the capacity above the allocated peak, ``cuda_fragmentation_mb`` reserved memory
    not allocated, ``cuda_inactive_split_pct`` the share of reserved memory in split blocks no tensor uses,
    ``cuda_ooms`` the out-of-memory errors the allocator raised in the window (its retries are the
    ``cuda_alloc_retries`` collector in ``gc``). On the host: ``rss_mb`` the process's resident memory at the
    report, ``rss_floor_mb`` what of it is in use (less the memory the C allocator keeps free for later, where
    it says how much: glibc), ``rss_peak_mb`` its highest so far, ``rss_headroom_mb`` what it can still grow by (the
    machine's available memory, or its cgroup's limit when lower), ``workers_memory_mb`` the loader
    workers' memory (their proportional share of shared pages, summed). ``memory_growth_mb`` is the rise
    per 100 iterations of a floor judged growing and ``memory_full_in`` the iterations until its headroom
    is used up (both ``None`` unless the verdict is ``memory-growth``).

    Times are milliseconds, rates are per second of wall time over the whole window.
    A figure that was not asked for, or cannot be measured, is ``None``; no figure is
    ever infinite because of a division by zero. ``score`` is the last loss as the
    model reported it and can be NaN or infinite when training diverges.
    """

    iteration: int
    window_iterations: int
    window_s: float
    warmup: bool
    timestamp: float = field(metadata=_IDENTITY)
    etl_ms: float | None = field(default=None, metadata=_METRIC)
    etl_max_ms: float | None = field(default=None, metadata=_METRIC)
    iteration_ms: float | None = field(default=None, metadata=_METRIC)
    iteration_p50_ms: float | None = field(default=None, metadata=_METRIC)
    iteration_p95_ms: float | None = field(default=None, metadata=_METRIC)
    iteration_max_ms: float | None = field(default=None, metadata=_METRIC)
    samples_per_sec: float | None = field(default=None, metadata=_METRIC)
    batches_per_sec: float | None = field(default=None, metadata=_METRIC)
    tokens_per_sec: float | None = field(default=None, metadata=_METRIC)
    tflops_per_sec: float | None = field(default=None, metadata=_METRIC)
    mfu: float | None = field(default=None, metadata=_METRIC)
    mfu_real: float | None = field(default=None, metadata=_METRIC)
    score: float | None = field(default=None, metadata=_METRIC)
    gc: tuple[GCStat, ...] = ()
    host: str = field(default="", metadata=_IDENTITY)
    pid: int = field(default=0, metadata=_IDENTITY)
    rank: int | None = field(default=None, metadata=_IDENTITY)
    device: int | None = field(default=None, metadata=_IDENTITY)
    epoch: int | None = field(default=None, metadata=_IDENTITY)
    samples: int | None = None
    batches: int = 0
    tokens: int | None = None
    tokens_padded: int | None = None
    tokens_loss: int | None = None
    padding_share: float | None = field(default=None, metadata=_METRIC)
    flops_per_step: float | None = None
    peak: str | None = None
    etl_total_ms: float | None = None
    gc_total_ms: float | None = field(default=None, metadata=_METRIC)
    compute_ms: float | None = field(default=None, metadata=_METRIC)
    other_ms: float | None = field(default=None, metadata=_METRIC)
    optimizer_steps: int = 0
    skipped_steps: int = 0
    etl_source: str | None = None
    overhead_ms: float | None = field(default=None, metadata=_METRIC)
    first_iteration: int | None = None
    device_idle_ms: float | None = field(default=None, metadata=_METRIC)
    device_idle_max_ms: float | None = field(default=None, metadata=_METRIC)
    speedup_if_data_free: float | None = field(default=None, metadata=_METRIC)
    speedup_if_gc_free: float | None = field(default=None, metadata=_METRIC)
    goodput: float | None = field(default=None, metadata=_METRIC)
    cuda_allocated_max_mb: float | None = field(default=None, metadata=_METRIC)
    cuda_reserved_max_mb: float | None = field(default=None, metadata=_METRIC)
    cuda_allocated_floor_mb: float | None = field(default=None, metadata=_METRIC)
    cuda_allocated_max_pct: float | None = field(default=None, metadata=_METRIC)
    cuda_reserved_max_pct: float | None = field(default=None, metadata=_METRIC)
    cuda_headroom_mb: float | None = field(default=None, metadata=_METRIC)
    cuda_fragmentation_mb: float | None = field(default=None, metadata=_METRIC)
    cuda_inactive_split_pct: float | None = field(default=None, metadata=_METRIC)
    cuda_ooms: int | None = field(default=None, metadata=_METRIC)
    gpu_utilization_pct: float | None = field(default=None, metadata=_METRIC)
    gpu_memory_used_mb: float | None = field(default=None, metadata=_METRIC)
    cpu_pct: float | None = field(default=None, metadata=_METRIC)
    workers_cpu_pct: float | None = field(default=None, metadata=_METRIC)
    rss_mb: float | None = field(default=None, metadata=_METRIC)
    rss_floor_mb: float | None = field(default=None, metadata=_METRIC)
    rss_peak_mb: float | None = field(default=None, metadata=_METRIC)
    rss_headroom_mb: float | None = field(default=None, metadata=_METRIC)
    workers_memory_mb: float | None = field(default=None, metadata=_METRIC)
    memory_growth_mb: float | None = field(default=None, metadata=_METRIC)
    memory_full_in: float | None = field(default=None, metadata=_METRIC)
    capture: str | None = None
    verdict: Verdict | None = None
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def gc_ms(self) -> float:
        """Total measured GC pause of the window in milliseconds (0 when none)."""
        return sum(s.ms for s in self.gc if s.ms is not None)

    def to_dict(self, *, flat: bool = False) -> dict[str, Any]:
        """The record as plain Python values.

        Args:
            flat: when true, ``gc`` becomes ``gc.<name>.count`` / ``gc.<name>.ms`` keys and
                ``verdict`` becomes ``verdict`` (its kind) and ``verdict_pct``: the column
                layout of :func:`trainperf.parse_log` and the CSV sink.
        """
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "gc":
                if flat:
                    for stat in value:
                        out[f"gc.{stat.name}.count"] = stat.count
                        out[f"gc.{stat.name}.ms"] = stat.ms
                else:
                    out["gc"] = {s.name: {"count": s.count, "ms": s.ms} for s in value}
            elif f.name == "verdict":
                if flat:
                    out["verdict"] = value.kind if value else None
                    out["verdict_pct"] = value.share if value else None
                else:
                    out["verdict"] = asdict(value) if value else None
            elif f.name == "extra":
                if flat:
                    out.update(value)
                else:
                    out["extra"] = dict(value)
            else:
                out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PerformanceRecord:
        """Rebuild a record written by :meth:`to_dict` (nested form); unknown keys are ignored."""
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in known}
        gc_raw = kwargs.get("gc") or {}
        kwargs["gc"] = tuple(
            GCStat(name, int(v.get("count", 0)), _opt_float(v.get("ms"))) for name, v in gc_raw.items()
        )
        verdict = kwargs.get("verdict")
        kwargs["verdict"] = Verdict(**verdict) if isinstance(verdict, dict) else None
        kwargs["extra"] = dict(kwargs.get("extra") or {})
        return cls(**kwargs)


def _compile_builder() -> Callable[..., PerformanceRecord]:
    """A function taking every field by keyword that sets each slot of a new record, its defaults
    bound in: the generated ``__init__`` of a frozen dataclass sets each field through
    ``object.__setattr__``, and a mapping would cost a lookup per field."""
    scope: dict[str, Any] = {"_new": object.__new__, "_record": PerformanceRecord, "_absent": object()}
    params, body = [], []
    for i, f in enumerate(fields(PerformanceRecord)):
        scope[f"_set{i}"] = PerformanceRecord.__dict__[f.name].__set__
        value = f.name
        if f.default is not MISSING:
            scope[f"_default{i}"] = f.default
            params.append(f"{f.name}=_default{i}")
        elif f.default_factory is not MISSING:
            scope[f"_factory{i}"] = f.default_factory
            params.append(f"{f.name}=_absent")
            value = f"_factory{i}() if {f.name} is _absent else {f.name}"
        else:
            params.append(f.name)
        body.append(f"    _set{i}(record, {value})")
    source = "\n".join([f"def build_record({', '.join(params)}):", "    record = _new(_record)", *body,
                        "    return record"])
    exec(source, scope)  # noqa: S102 - built from the dataclass's own field names
    build: Callable[..., PerformanceRecord] = scope["build_record"]
    build.__doc__ = """``PerformanceRecord(**fields)`` in about two thirds of the time, for the listener's
    reports; a name that is no field, or a field without a default left out, raises ``TypeError``.
    It also takes the fields by position, in the schema's order: a call with some 45 keywords costs
    more than setting them (Python matches each keyword against the names one by one)."""
    return build


build_record = _compile_builder()


def flat_columns() -> tuple[str, ...]:
    """The columns of :meth:`PerformanceRecord.to_dict` with ``flat=True``, collectors and ``extra``
    aside: who and when first (``timestamp``, ``host``, ``pid``, ``rank``, ``device``, ``epoch``), then
    every other field in the schema's order, ``verdict`` as ``verdict`` and ``verdict_pct``."""
    all_fields = fields(PerformanceRecord)
    identity = [f for f in all_fields if f.metadata.get("role") == "identity"]
    rest = [f for f in all_fields if f.metadata.get("role") != "identity" and f.name not in ("gc", "extra")]
    names: list[str] = []
    for f in [*identity, *rest]:
        names += ["verdict", "verdict_pct"] if f.name == "verdict" else [f.name]
    return tuple(names)


def metric_fields() -> tuple[str, ...]:
    """The record's per-window figures that metric loggers take, in the schema's order."""
    return tuple(f.name for f in fields(PerformanceRecord) if f.metadata.get("role") == "metric")


def _opt_float(value: Any) -> float | None:
    if value is None:
        return None
    return float(value)
