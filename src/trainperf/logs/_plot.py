"""Plots of a run: iteration time with its p95, data wait, throughput, GC time and score."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..records import PerformanceRecord
from ._parse import ParsedLog, number_runs

__all__ = ["plot"]


def to_frame(data: Any) -> Any:
    """A DataFrame of figures from a :class:`ParsedLog`, a DataFrame, or records (a listener's history)."""
    try:
        import pandas as pd
    except ImportError as exc:
        raise ImportError("plotting needs pandas and matplotlib: pip install 'trainperf[plot]'") from exc
    if isinstance(data, ParsedLog):
        return data.to_pandas()
    if isinstance(data, pd.DataFrame):
        return data
    history = getattr(data, "history", data)
    if isinstance(history, Iterable):
        rows = [r.to_dict(flat=True) for r in history if isinstance(r, PerformanceRecord)]
        frame = pd.DataFrame(rows)
        return frame.drop(columns=["extra"], errors="ignore")
    raise TypeError(f"data must be a ParsedLog, a DataFrame or records, got {type(data).__name__}")


def plot(data: Any, *, title: str | None = None, rank: int | None = None) -> Any:
    """Draw the run on one figure, one panel per figure that the data holds, against iteration.

    The lines of several ranks in one log (``torchrun``) are drawn apart, one colour per rank, as
    are the runs of a log that holds restarts (see :meth:`ParsedLog.to_pandas`).

    Args:
        data: what :func:`trainperf.parse_log` returned, its DataFrame, a listener, or records.
        title: the figure's title.
        rank: draw only this rank's lines.

    Returns:
        The ``matplotlib.figure.Figure`` (save it with ``fig.savefig("run.png")``).
    """
    frame = to_frame(data)
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ImportError("plotting needs matplotlib: pip install 'trainperf[plot]'") from exc
    if len(frame) == 0:
        raise ValueError("data holds no listener records to plot")
    if rank is not None:
        frame = _one_rank(frame, rank)
    if "run" not in frame:
        frame = frame.assign(run=number_runs(frame))
    gc_ms_cols = [c for c in frame.columns if c.startswith("gc.") and c.endswith(".ms")]
    panels: list[tuple[str, list[tuple[str, str, dict[str, Any]]]]] = []

    def have(name: str) -> bool:
        return name in frame and frame[name].notna().any()

    # iterations per window: recorded, or the step of the iteration count within a run
    if have("window_iterations"):
        per_window = frame["window_iterations"].astype(float)
    else:
        per_window = frame.groupby("run")["iteration"].diff().fillna(frame["iteration"]).astype(float)
    if gc_ms_cols:
        frame = frame.assign(_gc_ms=frame[gc_ms_cols].sum(axis=1, min_count=1) / per_window.where(per_window > 0))
    lines: list[tuple[str, str, dict[str, Any]]]
    if have("iteration_ms"):
        total = frame["iteration_ms"].where(frame["iteration_ms"] > 0)
        parts = {
            "data wait": frame["etl_ms"].fillna(0.0) if "etl_ms" in frame else 0.0 * total,
            "GC": frame["_gc_ms"].fillna(0.0) if "_gc_ms" in frame else 0.0 * total,
            "other host work": frame["other_ms"].fillna(0.0) if "other_ms" in frame else 0.0 * total,
        }
        # other_ms holds no GC pause: a record counts each pause once, in GC (see PerformanceRecord)
        shares = {name: (100.0 * part / total).clip(0, 100) for name, part in parts.items()}
        shares = {"compute": (100.0 - sum(shares.values())).clip(lower=0), **shares}
        frame = frame.assign(**{f"_share:{name}": value for name, value in shares.items()})
        panels.append((_SHARES, []))
    if have("iteration_ms"):
        lines = [("iteration_ms", "mean", {"color": "C0"})]
        if have("iteration_p95_ms"):
            lines.append(("iteration_p95_ms", "p95", {"color": "C0", "linestyle": "--", "alpha": 0.7}))
        panels.append(("iteration time (ms)", lines))
    if have("etl_ms"):
        lines = [("etl_ms", "mean", {"color": "C3"})]
        if have("etl_max_ms"):
            lines.append(("etl_max_ms", "max", {"color": "C3", "linestyle": ":", "alpha": 0.7}))
        panels.append(("data wait, ETL (ms)", lines))
    if have("samples_per_sec"):
        panels.append(("samples/sec", [("samples_per_sec", "samples/sec", {"color": "C2"})]))
    elif have("batches_per_sec"):
        panels.append(("batches/sec", [("batches_per_sec", "batches/sec", {"color": "C2"})]))
    if gc_ms_cols:
        panels.append(("GC pause per iteration (ms)", [("_gc_ms", "all collectors", {"color": "C4"})]))
    if have("score"):
        panels.append(("score (loss)", [("score", "score", {"color": "C1"})]))

    runs = [(key, _thin(part)) for key, part in frame.groupby("run", sort=True)]
    names = _run_names(frame)
    thinned = max(part.attrs.get("windows_per_point", 1) for _, part in runs)
    fig = Figure(figsize=(9, 2.1 * len(panels) + 0.6), layout="constrained")
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    markers = ["", "", "o", "s", "^", "D"]
    for ax, (label, lines) in zip(axes, panels, strict=True):
        if label == _SHARES:
            _draw_shares(ax, runs)
            continue
        for r, (key, part) in enumerate(runs):
            run_style: dict[str, Any] = {"alpha": 1.0 if len(runs) == 1 else 0.9}
            if len(runs) > 1:
                run_style["marker"] = markers[r % len(markers)] or None
                run_style["markersize"] = 3
            for j, (column, name, style) in enumerate(lines):
                shown = name if len(runs) == 1 else f"{name}, {names[key]}"
                color = style.get("color") if len(runs) == 1 else f"C{(r * len(lines) + j) % 10}"
                ax.plot(part["iteration"], part[column], label=shown, linewidth=1.4,
                        **{**style, **run_style, "color": color})
                if j == 0 and f"{column}:min" in part:
                    ax.fill_between(part["iteration"], part[f"{column}:min"], part[f"{column}:max"], color=color,
                                    alpha=0.15, linewidth=0, label=None if r or len(runs) > 1 else "min-max")
        ax.set_ylabel(label, fontsize=9)
        ax.grid(True, alpha=0.3)
        if label != "score (loss)":
            ax.set_ylim(bottom=0)
        if len(lines) > 1 or len(runs) > 1 or thinned > 1:
            ax.legend(loc="upper right", fontsize=7, framealpha=0.8)
    if "warmup" in frame and frame["warmup"].astype(bool).any():
        for _, part in frame.groupby("run", sort=True):
            warm = part[part["warmup"].astype(bool)]
            if len(warm):
                for ax in axes:
                    ax.axvspan(0, warm["iteration"].max(), color="grey", alpha=0.12, linewidth=0)
    shaded = _shade_verdicts(axes, frame) if thinned == 1 else False
    _mark_epochs(axes, frame)
    axes[-1].set_xlabel("iteration")
    key = "grey: warm-up window" + ("; shading: the window's verdict" if shaded else "")
    heading = f"{title} ({key})" if title else f"training performance ({key})"
    if thinned > 1:
        heading += f"\neach point: mean of {thinned} report windows, band: their min-max"
    fig.suptitle(heading, fontsize=11)
    return fig


#: A run with more report windows than this is drawn as bucket means; more points than pixels
#: only paint a solid block.
MAX_POINTS = 1000


def _one_rank(frame: Any, rank: int) -> Any:
    if isinstance(rank, bool) or not isinstance(rank, int):
        raise TypeError(f"rank must be an int or None, got {rank!r}")
    ranks = sorted({int(r) for r in frame["rank"].dropna()}) if "rank" in frame else []
    if rank not in ranks:
        held = f"the ranks in the data are {', '.join(map(str, ranks))}" if ranks else "the data names no rank"
        raise ValueError(f"rank {rank} has no lines to plot: {held}")
    return frame[frame["rank"] == rank]


def _run_names(frame: Any) -> dict[Any, str]:
    """How the legend names each run: ``run 2`` in a one-rank log, ``rank 1`` (``rank 1, run 2`` for a
    rank restarted) when several ranks' lines are in it."""
    if "rank" not in frame or frame["rank"].nunique(dropna=False) < 2:
        return {key: f"run {n + 1}" for n, key in enumerate(sorted(frame["run"].unique()))}
    first = frame.groupby("run", sort=True)["rank"].first()
    attempts: dict[Any, int] = {}
    names = {}
    for key, rank in first.items():
        attempts[rank] = attempts.get(rank, 0) + 1
        names[key] = "no rank" if rank != rank else f"rank {int(rank)}"
    seen: dict[Any, int] = {}
    for key, rank in first.items():
        if attempts[rank] > 1:
            seen[rank] = seen.get(rank, 0) + 1
            names[key] += f", run {seen[rank]}"
    return names


def _thin(part: Any) -> Any:
    """``part`` with at most about :data:`MAX_POINTS` rows: consecutive windows averaged in equal
    buckets, with each number column's bucket minimum and maximum as ``<column>:min``/``:max``."""
    if len(part) <= MAX_POINTS:
        return part
    import numpy as np

    size = -(-len(part) // MAX_POINTS)  # windows per point, rounded up
    numbers = part.select_dtypes("number")
    buckets = numbers.groupby(np.arange(len(part)) // size, sort=True)
    thinned = buckets.mean()
    low, high = buckets.min().add_suffix(":min"), buckets.max().add_suffix(":max")
    thinned = thinned.join(low).join(high)
    thinned.attrs["windows_per_point"] = size
    return thinned


_SHARES = "where the time went (%)"
_SHARE_COLORS = {"compute": "#4C72B0", "data wait": "#DD5555", "GC": "#8172B2", "other host work": "#E8A33D"}
_VERDICT_COLORS = {"input-bound": "#DD5555", "gc-bound": "#8172B2", "loop-bound": "#E8A33D"}


def _draw_shares(ax: Any, runs: list[tuple[Any, Any]]) -> None:
    """Each window's time split as stacked shares that add up to 100%."""
    for r, (_, part) in enumerate(runs):
        names = [name for name in _SHARE_COLORS if f"_share:{name}" in part]
        ax.stackplot(part["iteration"], *[part[f"_share:{name}"].fillna(0.0) for name in names],
                     labels=names if r == 0 else (), colors=[_SHARE_COLORS[n] for n in names], alpha=0.85,
                     step="pre")
    ax.set_ylabel(_SHARES, fontsize=9)
    ax.set_ylim(0, 100)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper right", fontsize=7, framealpha=0.8, ncol=4)


def _shade_verdicts(axes: Any, frame: Any) -> bool:
    """Shade each window judged input-, GC- or loop-bound in its verdict's colour; True if any was."""
    if "verdict" not in frame:
        return False
    shaded = False
    for _, part in frame.groupby("run", sort=True):
        previous = 0.0
        for iteration, verdict in zip(part["iteration"], part["verdict"], strict=True):
            color = _VERDICT_COLORS.get(verdict) if isinstance(verdict, str) else None
            if color is not None:
                for ax in axes[1:] if len(axes) > 1 else axes:
                    ax.axvspan(previous, iteration, color=color, alpha=0.12, linewidth=0)
                shaded = True
            previous = float(iteration)
    return shaded


def _mark_epochs(axes: Any, frame: Any) -> None:
    """A dashed line where a new epoch starts, labelled on the top panel."""
    if "epoch" not in frame or not frame["epoch"].notna().any():
        return
    if "rank" in frame and frame["rank"].nunique() > 1:  # every rank's epochs start at the same iterations
        frame = frame[frame["rank"] == frame["rank"].dropna().iloc[0]]
    epochs = frame["epoch"]
    changed = epochs.ne(epochs.shift()) & epochs.shift().notna()
    # a new epoch starts where the previous window ended
    starts = frame.assign(iteration=frame["iteration"].shift()).loc[changed, ["iteration", "epoch"]]
    for iteration, epoch in zip(starts["iteration"], starts["epoch"], strict=True):
        for ax in axes:
            ax.axvline(iteration, color="black", linestyle="--", linewidth=0.8, alpha=0.5)
        axes[0].annotate(f"epoch {int(epoch)}", (iteration, 1.0), xycoords=("data", "axes fraction"),
                         fontsize=7, ha="left", va="bottom")
