"""Plots of a log: where the time went, iteration time with its p95, data wait, throughput, GC time and
score, one column of panels per run (a restart starts a new run)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..records import PerformanceRecord
from ._parse import ParsedLog, number_runs

__all__ = ["plot"]

#: One colour per part of a window's time, the same in every panel and every run: the shares, the
#: lines of that part and the shading of windows bound by it.
PART_COLORS = {"compute": "#4C72B0", "data wait": "#DD5555", "GC": "#8172B2", "other host work": "#E8A33D"}
#: The colours of the other figures, none a part's.
ITERATION_COLOR, THROUGHPUT_COLOR, SCORE_COLOR = "#333333", "#55A868", "#937860"
_VERDICT_PARTS = {"input-bound": "data wait", "gc-bound": "GC", "loop-bound": "other host work"}
#: A run with more report windows than this is drawn as bucket means; more points than pixels
#: only paint a solid block.
MAX_POINTS = 1000
_SHARES = "where the time went (%)"
#: Figure width per run drawn, and the most the figure is given however many runs there are.
_COLUMN_INCHES, _MAX_WIDTH_INCHES = 4.5, 40.0


@dataclass(frozen=True)
class _Line:
    column: str
    name: str
    color: str
    style: dict[str, Any] = field(default_factory=dict)


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


def plot(data: Any, *, title: str | None = None, rank: int | None = None, run: int | None = None) -> Any:
    """Draw a log on one figure: one row of panels per figure the data holds, against iteration, and
    one column per run, side by side (a log holds several runs where training restarted: the
    iteration number goes back). Each part of the time keeps its colour in every panel and run.

    The lines of several ranks in one log (``torchrun``) are drawn apart in each run's column, in
    shades of the figure's colour, one per rank.

    Args:
        data: what :func:`trainperf.parse_log` returned, its DataFrame, a listener, or records.
        title: the figure's title.
        rank: draw only this rank's lines.
        run: draw only this run, counted from 1 as the figure names them (run 1 is the first).

    Returns:
        The ``matplotlib.figure.Figure`` (save it with ``fig.savefig("run.png")``).
    """
    frame = to_frame(data)
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ImportError("plotting needs matplotlib: pip install 'trainperf[plot]'") from exc
    if run is not None and (isinstance(run, bool) or not isinstance(run, int)):
        raise TypeError(f"run must be an int or None, got {run!r}")
    if run is not None and run < 1:
        raise ValueError(f"run must be 1 or more (run 1 is the first), got {run}")
    if len(frame) == 0:
        raise ValueError("data holds no listener records to plot")
    if rank is not None:
        frame = _one_rank(frame, rank)
    frame = _with_runs(frame)
    runs = held = sorted(frame["_run"].unique())
    if run is not None:
        if run - 1 not in held:
            raise ValueError(f"run {run} has no lines to plot: the data holds runs 1 to {len(held)}")
        runs = [run - 1]
        frame = frame[frame["_run"] == run - 1]
    frame, panels = _figures(frame)
    # each rank keeps its shade in every run: its place among the ranks of the data
    ranks = []
    if "rank" in frame:
        ranks = [_rank_name(rank) for rank in sorted(frame["rank"].dropna().unique())]
        ranks += ["no rank"] if frame["rank"].isna().any() else []
    width = min(_MAX_WIDTH_INCHES, _COLUMN_INCHES * (len(runs) + 1))
    fig = Figure(figsize=(width, 2.1 * len(panels) + 0.9), layout="constrained")
    grid = fig.subplots(len(panels), len(runs), sharex="col", sharey="row", squeeze=False)
    thinned, shaded = 1, False
    for c, key in enumerate(runs):
        part = frame[frame["_run"] == key]
        lines = [_Rank(*_shade_of(_rank_name(group["rank"].iloc[0]) if "rank" in group else "", ranks), _thin(group))
                 for _, group in part.groupby("run", sort=True)]
        thinned = max(thinned, *(line.rows.attrs.get("windows_per_point", 1) for line in lines))
        shaded = _draw_run(grid[:, c], panels, lines, part, legend=c == 0) or shaded
        if len(held) > 1:
            grid[0, c].set_title(f"run {key + 1}" if run is None else f"run {key + 1} of {len(held)}", fontsize=10)
    for ax in grid[-1, :]:
        ax.set_xlabel("iteration")
    for (label, _), row in zip(panels, grid, strict=True):
        if label not in (_SHARES, "score (loss)"):  # once every run is drawn: the row's axes share their limits
            top = row[0].get_ylim()[1]
            row[0].set_ylim(0, top * 1.05 if top > 0 else None)  # a flat line clear of the frame
    key_text = "grey: warm-up window" + ("; shading: the window's verdict" if shaded else "")
    heading = f"{title} ({key_text})" if title else f"training performance ({key_text})"
    if thinned > 1:
        heading += f"\neach point: mean of {thinned} report windows, band: their min-max"
    fig.suptitle(heading, fontsize=11)
    return fig


def _with_runs(frame: Any) -> Any:
    """``frame`` with ``run`` (one per rank and per restart within a rank, as :meth:`ParsedLog.to_pandas`
    numbers them) and ``_run``: which run of its rank a row belongs to, from 0, the column it is drawn in."""
    if "run" not in frame:
        frame = frame.assign(run=number_runs(frame))
    ranks = frame.groupby("run", sort=True)["rank"].first() if "rank" in frame else None
    attempt: dict[Any, int] = {}
    seen: dict[Any, int] = {}
    for key in sorted(frame["run"].unique()):
        owner = None if ranks is None or ranks[key] != ranks[key] else ranks[key]
        attempt[key] = seen.get(owner, 0)
        seen[owner] = attempt[key] + 1
    return frame.assign(_run=frame["run"].map(attempt))


def _figures(frame: Any) -> tuple[Any, list[tuple[str, list[_Line]]]]:
    """``frame`` with the columns drawn that it computes (iterations per window, GC per iteration,
    the shares), and the panels: a label and the lines drawn in it."""
    def have(name: str) -> bool:
        return name in frame and frame[name].notna().any()

    # iterations per window: recorded, or the step of the iteration count within a run
    if have("window_iterations"):
        per_window = frame["window_iterations"].astype(float)
    else:
        per_window = frame.groupby("run")["iteration"].diff().fillna(frame["iteration"]).astype(float)
    frame = frame.assign(_per_window=per_window)
    gc_ms_cols = [c for c in frame.columns if c.startswith("gc.") and c.endswith(".ms")]
    if gc_ms_cols:
        frame = frame.assign(_gc_ms=frame[gc_ms_cols].sum(axis=1, min_count=1) / per_window.where(per_window > 0))
    panels: list[tuple[str, list[_Line]]] = []
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
        lines = [_Line("iteration_ms", "mean", ITERATION_COLOR)]
        if have("iteration_p95_ms"):
            lines.append(_Line("iteration_p95_ms", "p95", ITERATION_COLOR, {"linestyle": "--", "alpha": 0.7}))
        panels.append(("iteration time (ms)", lines))
    wait = PART_COLORS["data wait"]
    if have("etl_ms"):
        lines = [_Line("etl_ms", "mean", wait)]
        if have("etl_max_ms"):
            lines.append(_Line("etl_max_ms", "max", wait, {"linestyle": ":", "alpha": 0.7}))
        panels.append(("data wait, ETL (ms)", lines))
    if have("samples_per_sec"):
        panels.append(("samples/sec", [_Line("samples_per_sec", "samples/sec", THROUGHPUT_COLOR)]))
    elif have("batches_per_sec"):
        panels.append(("batches/sec", [_Line("batches_per_sec", "batches/sec", THROUGHPUT_COLOR)]))
    if gc_ms_cols:
        panels.append(("GC pause per iteration (ms)", [_Line("_gc_ms", "all collectors", PART_COLORS["GC"])]))
    if have("score"):
        panels.append(("score (loss)", [_Line("score", "score", SCORE_COLOR)]))
    return frame, panels


def _draw_run(axes: Any, panels: list[tuple[str, list[_Line]]], lines: list[_Rank], part: Any, legend: bool) -> bool:
    """One run's column of panels: ``lines`` holds each rank's rows (thinned). True if some window is
    shaded by its verdict."""
    for ax, (label, drawn) in zip(axes, panels, strict=True):
        if label == _SHARES:
            _draw_shares(ax, part, legend)
            continue
        for r, (rank_name, shade, rows) in enumerate(lines):
            for j, line in enumerate(drawn):
                color = _shade(line.color, *shade)
                shown = line.name if rank_name is None else f"{line.name}, {rank_name}"
                ax.plot(rows["iteration"], rows[line.column], label=shown, linewidth=1.4,
                        **{**line.style, "color": color})
                if j == 0 and f"{line.column}:min" in rows:
                    ax.fill_between(rows["iteration"], rows[f"{line.column}:min"], rows[f"{line.column}:max"],
                                    color=color, alpha=0.15, linewidth=0, label="min-max" if r == 0 else None)
        if legend:
            ax.set_ylabel(label, fontsize=9)
        ax.grid(True, alpha=0.3)
        if legend and (len(drawn) > 1 or len(lines) > 1 or any(":min" in c for line in lines for c in line.rows)):
            ax.legend(loc="upper right", fontsize=7, framealpha=0.8)
    windows = [group for _, group in part.groupby("run", sort=True)]
    for group in windows:
        warm = group[group["warmup"].astype(bool)] if "warmup" in group else group.iloc[:0]
        if len(warm):
            start = float(warm["iteration"].min() - warm["_per_window"].iloc[0])
            for ax in axes:
                ax.axvspan(max(start, 0.0), warm["iteration"].max(), color="grey", alpha=0.12, linewidth=0)
    _mark_epochs(axes, windows[0])
    return all(len(group) <= MAX_POINTS for group in windows) and _shade_verdicts(axes, windows)


class _Rank(NamedTuple):
    """One rank's rows in a run's column: its name in the legend (``None`` for the only rank), its
    shade (its place among the ranks, and how many there are) and its rows."""

    name: str | None
    shade: tuple[int, int]
    rows: Any


def _rank_name(rank: Any) -> str:
    return "no rank" if rank != rank or rank is None else f"rank {int(rank)}"


def _shade_of(name: str, ranks: list[str]) -> tuple[str | None, tuple[int, int]]:
    """A rank's name in the legend and its shade, from its place among ``ranks`` (all in the data)."""
    if len(ranks) < 2:
        return None, (0, 1)
    return name, (ranks.index(name), len(ranks))


def _shade(color: str, r: int, n: int) -> str:
    """``color`` for the ``r``-th of ``n`` ranks: itself for one, else from darker to lighter."""
    if n == 1:
        return color
    from matplotlib.colors import to_hex, to_rgb

    t = -0.35 + 0.7 * r / (n - 1)
    red, green, blue = (c * (1 + t) if t < 0 else c + (1 - c) * t for c in to_rgb(color))
    return str(to_hex((red, green, blue)))


def _one_rank(frame: Any, rank: int) -> Any:
    if isinstance(rank, bool) or not isinstance(rank, int):
        raise TypeError(f"rank must be an int or None, got {rank!r}")
    ranks = sorted({int(r) for r in frame["rank"].dropna()}) if "rank" in frame else []
    if rank not in ranks:
        held = f"the ranks in the data are {', '.join(map(str, ranks))}" if ranks else "the data names no rank"
        raise ValueError(f"rank {rank} has no lines to plot: {held}")
    return frame[frame["rank"] == rank]


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


def _draw_shares(ax: Any, part: Any, legend: bool) -> None:
    """Each window's time split as stacked shares that add up to 100% (several ranks: their mean)."""
    names = [name for name in PART_COLORS if f"_share:{name}" in part]
    columns = ["_per_window", *(f"_share:{name}" for name in names)]
    shares = _thin(part.groupby("iteration", sort=True)[columns].mean().reset_index())
    # each value holds from the end of the window before (``step="pre"``): the first from where it began
    x = [shares["iteration"].iloc[0] - shares["_per_window"].iloc[0], *shares["iteration"]]
    ax.stackplot(x, *[[values.iloc[0], *values] for values in (shares[f"_share:{n}"].fillna(0.0) for n in names)],
                 labels=names, colors=[PART_COLORS[n] for n in names], alpha=0.85, step="pre")
    ax.set_ylim(0, 100)
    ax.grid(True, alpha=0.3)
    if legend:
        ranks = "rank" in part and part["rank"].nunique() > 1
        ax.set_ylabel(f"{_SHARES}, ranks' mean" if ranks else _SHARES, fontsize=9)
        ax.legend(loc="upper right", fontsize=7, framealpha=0.8, ncol=4)


def _shade_verdicts(axes: Any, windows: list[Any]) -> bool:
    """Shade each window judged input-, GC- or loop-bound in its part's colour (each span once where
    several ranks judged it alike), on every panel but the shares; True if any was."""
    spans: dict[tuple[float, float, str], None] = {}
    for group in windows:
        if "verdict" not in group:
            return False
        previous = float(group["iteration"].iloc[0] - group["_per_window"].iloc[0])
        for iteration, verdict in zip(group["iteration"], group["verdict"], strict=True):
            part = _VERDICT_PARTS.get(verdict) if isinstance(verdict, str) else None
            if part is not None:
                spans[(max(previous, 0.0), float(iteration), PART_COLORS[part])] = None
            previous = float(iteration)
    for start, end, color in spans:
        for ax in axes[1:] if len(axes) > 1 else axes:
            ax.axvspan(start, end, color=color, alpha=0.12, linewidth=0)
    return bool(spans)


def _mark_epochs(axes: Any, rows: Any) -> None:
    """A dashed line where a new epoch starts (in one rank's rows), labelled on the top panel."""
    if "epoch" not in rows or not rows["epoch"].notna().any():
        return
    epochs = rows["epoch"]
    changed = epochs.ne(epochs.shift()) & epochs.shift().notna()
    # a new epoch starts where the previous window ended
    starts = rows.assign(iteration=rows["iteration"].shift()).loc[changed, ["iteration", "epoch"]]
    for iteration, epoch in zip(starts["iteration"], starts["epoch"], strict=True):
        for ax in axes:
            ax.axvline(iteration, color="black", linestyle="--", linewidth=0.8, alpha=0.5)
        axes[0].annotate(f"epoch {int(epoch)}", (iteration, 1.0), xycoords=("data", "axes fraction"),
                         fontsize=7, ha="left", va="bottom")
