"""The page's goodput section: the job's account (``report["goodput"]``) as a headline, one stacked
bar of its rows over the wall time with a legend, the table of rows, and the attempts on a timeline.
Inline SVG and HTML only; every text is escaped."""

from __future__ import annotations

import html
import math
from typing import Any

from ...records import duration_words

__all__ = ["goodput_section", "GOODPUT_COLOURS", "GOODPUT_CSS"]

#: Each row's colour on the bar and in its legend, in :data:`~trainperf.records.GOODPUT_ROWS`'s order.
GOODPUT_COLOURS = {
    "productive": "#2e7d32", "startup": "#8d99ae", "warmup": "#9c6ade", "data_wait": "#e8833a", "gc": "#6d6d6d",
    "eval": "#1f9bd1", "checkpoint_save": "#8c5a2b", "checkpoint_load": "#c9a36b", "other_host": "#b8b8b8",
    "collective_wait": "#6a3fb0", "slowdown": "#e0b000", "lost_progress": "#b00020", "restart_gaps": "#3d3d3d",
    "trainperf": "#d33682",
}
GOODPUT_CSS = """
.gpbar{display:block;width:100%;max-width:1100px;height:26px;border:1px solid #ddd;background:#fff}
.gptimeline{display:block;width:100%;max-width:1100px;background:#fff;border:1px solid #ddd}
.gpkey{max-width:1100px;margin:6px 0}.gpkey span{display:inline-block;margin:0 14px 3px 0}
.gpkey i{display:inline-block;width:11px;height:11px;margin-right:4px;vertical-align:-1px}
.gphead{font-size:15px}
"""
#: The bar and the timeline are drawn in these units across (the SVG's view box).
WIDTH = 1000.0
#: The timeline: each attempt's row height, and the space left for its words after the bars.
_ROW = 26.0
_AXIS = 18.0
#: Attempts drawn on the timeline: the newest ones (a ledger can hold any number); the rest are counted.
MAX_DRAWN = 40


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _pct(share: float) -> str:
    return f"{100.0 * share + 0.0:.1f}%"  # + 0.0: never "-0.0%"


def _headline(g: dict[str, Any]) -> str:
    wall = duration_words(g["wall_s"])
    attempts = len(g["attempts"])
    if g["goodput"] is None or g["ideal_step_s"] is None:
        head = f"<b>Goodput not known</b>: no window was reported; wall time {_e(wall)}"
    else:
        head = (f"<b>Goodput {_pct(g['goodput'])}</b> of {_e(wall)} of wall time trained the model: the ideal step "
                f"({1000.0 * g['ideal_step_s']:.4g} ms, the median steady window's) x {g['net_progress']:,} "
                f"iterations of net progress ({g['first_iteration']:,} to {g['last_iteration']:,})")
    lost = g["lost_iterations"]
    tail = [f"{lost:,} iterations lost (trained again after a restart)" if lost else "no iteration trained twice",
            f"{attempts} attempt{'s' if attempts != 1 else ''}"]
    ranks = g.get("ranks") or {}
    if ranks and g.get("rank") is not None:
        tail.append(f"the job's wall time is rank {_e(g['rank'])}'s, the slowest of {len(ranks):,}")
    return f"<p class=gphead>{head}; {_e('; '.join(tail))}.</p>"


def _bar(rows: list[dict[str, Any]], wall: float) -> str:
    """The rows with time, side by side over the wall time; a row below zero (steps faster than the
    ideal) has no length to draw: the bar then runs past the wall time by as much, which a line marks."""
    shown = [r for r in rows if r["seconds"] > 0.0]
    scale = max(wall, sum(r["seconds"] for r in shown))
    if not shown or scale <= 0.0:
        return "<p class=note>No time to draw.</p>"
    parts, x = [], 0.0
    for r in shown:
        width = WIDTH * r["seconds"] / scale
        parts.append(f"<rect data-row=\"{_e(r['row'])}\" x=\"{x:.3f}\" width=\"{width:.3f}\" height=\"26\" "
                     f"fill=\"{GOODPUT_COLOURS.get(r['row'], '#000')}\"><title>{_e(r['what'])}: "
                     f"{_e(duration_words(r['seconds']))} ({_pct(r['share'])})</title></rect>")
        x += width
    if scale > wall:
        at = WIDTH * wall / scale
        parts.append(f"<line class=wall x1=\"{at:.3f}\" x2=\"{at:.3f}\" y1=\"0\" y2=\"26\" stroke=\"#000\" "
                     "stroke-width=\"3\"><title>the wall time ends here</title></line>")
    return (f"<svg class=gpbar viewBox=\"0 0 {WIDTH:.0f} 26\" preserveAspectRatio=\"none\" role=img "
            f"aria-label=\"the wall time by row\">{''.join(parts)}</svg>")


def _legend(rows: list[dict[str, Any]], wall: float) -> str:
    items = []
    for r in rows:
        if abs(r["seconds"]) < 0.0005 * max(wall, 1e-9) and r["row"] != "productive":  # the table has them all
            continue
        below = " (below zero: not in the bar)" if r["seconds"] < 0.0 else ""
        items.append(f"<span><i style='background:{GOODPUT_COLOURS.get(r['row'], '#000')}'></i>{_e(r['what'])}: "
                     f"{_e(duration_words(r['seconds']))}, {_pct(r['share'])}{below}</span>")
    over = sum(r["seconds"] for r in rows if r["seconds"] > 0.0) - wall
    note = (f"<p class=note>Rows below zero take {_e(duration_words(over))} back: the bar runs past the wall time "
            "(the black line) by as much.</p>" if over > 0.0005 * max(wall, 1e-9) else "")
    return f"<div class=gpkey>{''.join(items)}</div>{note}"


def _table(rows: list[dict[str, Any]], g: dict[str, Any]) -> str:
    body = []
    for r in rows:
        what = _e(r["what"])
        if r["row"] == "lost_progress" and g["lost_iterations"]:
            what += f" ({g['lost_iterations']:,} iterations)"
        body.append(f"<tr><td><i style='display:inline-block;width:10px;height:10px;background:"
                    f"{GOODPUT_COLOURS.get(r['row'], '#000')}'></i></td><td>{what}</td>"
                    f"<td>{r['seconds']:,.2f}</td><td>{_pct(r['share'])}</td></tr>")
    return ("<table><tr><th></th><th>row</th><th>seconds</th><th>share of the wall time</th></tr>"
            f"{''.join(body)}<tr><td></td><td><b>wall time</b></td><td><b>{g['wall_s']:,.2f}</b></td>"
            "<td><b>100.0%</b></td></tr></table>")


def _ticks(span: float) -> list[tuple[float, str]]:
    """Round times from 0 to ``span`` seconds, at most 8 steps apart, in the unit that suits the span:
    ``(seconds, label)``."""
    unit, name = (1.0, "s") if span < 300 else (60.0, "min") if span < 5 * 3600 else (3600.0, "h")
    length = span / unit
    if not length > 0.0:
        return [(0.0, "0 s")]
    step = 10.0 ** math.floor(math.log10(length / 6.0))
    step *= next(m for m in (1, 2, 5, 10) if length / (step * m) <= 8)
    return [(k * step * unit, f"{k * step:.6g} {name}") for k in range(int(length / step + 1e-9) + 1)]


def _timeline(g: dict[str, Any]) -> str:
    """One bar per attempt, from its process's start to its last sign of life, its start-up shaded;
    the restart gaps are the empty space between the bars."""
    attempts = g["attempts"][-MAX_DRAWN:]
    if not attempts:
        return ""
    left_out = len(g["attempts"]) - len(attempts)
    t0 = min(a["process_start"] for a in attempts)
    span = max(a["last_seen"] for a in attempts) - t0
    plot = WIDTH * 0.62  # the rest of the width holds each attempt's words
    sx = plot / span if span > 0.0 else 0.0
    height = _ROW * len(attempts) + _AXIS
    parts = []
    for t, label in _ticks(span):
        x = t * sx
        parts.append(f"<line x1=\"{x:.3f}\" x2=\"{x:.3f}\" y1=\"0\" y2=\"{height - _AXIS:.0f}\" stroke=\"#e4e4e4\"/>"
                     f"<text x=\"{x + 2:.3f}\" y=\"{height - 5:.0f}\">{_e(label)}</text>")
    for k, a in enumerate(attempts):
        number = left_out + k + 1
        y = k * _ROW + 4
        x = (a["process_start"] - t0) * sx
        width = max(0.0, a["last_seen"] - a["process_start"]) * sx
        started = a["started"] if a["started"] is not None else a["last_seen"]
        startup = min(width, max(0.0, started - a["process_start"]) * sx)
        last = k == len(attempts) - 1
        end = ("clean end" if a["clean"] else "no clean end: killed, or still running" if last
               else "killed (no clean end)")
        words = (f"attempt {number}: iterations {a['start_iteration']:,}-{a['reached']:,}, "
                 f"{duration_words(max(0.0, a['last_seen'] - a['process_start']))}, {end}")
        parts.append(
            f"<rect class=attempt x=\"{x:.3f}\" y=\"{y:.0f}\" width=\"{width:.3f}\" height=\"{_ROW - 8:.0f}\" "
            f"fill=\"{GOODPUT_COLOURS['productive'] if a['clean'] else '#c0392b'}\"><title>{_e(words)}</title></rect>"
            f"<rect class=startup x=\"{x:.3f}\" y=\"{y:.0f}\" width=\"{startup:.3f}\" height=\"{_ROW - 8:.0f}\" "
            f"fill=\"{GOODPUT_COLOURS['startup']}\"><title>start-up: process start to training, "
            f"{_e(duration_words(started - a['process_start']))}</title></rect>"
            f"<text x=\"{plot + 8:.0f}\" y=\"{y + 13:.0f}\">{_e(words)}</text>")
    more = f"<p class=note>The first {left_out:,} attempts are not drawn.</p>" if left_out else ""
    return more + (f"<svg class=gptimeline viewBox=\"-4 0 {WIDTH + 8:.0f} {height:.0f}\" font-size=\"12\" "
            f"font-family=\"system-ui,sans-serif\" role=img aria-label=\"the attempts over time\">"
            f"{''.join(parts)}</svg>")


def goodput_section(report: dict[str, Any]) -> str:
    """The section for ``report`` (what :func:`~trainperf.ranks._report._analyse.analyse` returned):
    the account, or why there is none."""
    g = report.get("goodput")
    head = "<section id=goodput>\n<h2>Goodput</h2>\n"
    if not g:
        why = report.get("goodput_missing") or "not read"
        return f"{head}<p class=note>Not known: {_e(why)}</p>\n</section>"
    rows = g["rows"]
    who = f"rank {_e(g['rank'])}'s" if g.get("rank") is not None else "the run's"
    notes = "".join(f"<li>{_e(n)}</li>" for n in g.get("notes") or [])
    return (f"{head}{_headline(g)}\n"
            "<p class=note>The job's whole time, from its first process's start to its last sign of life, split "
            "into rows that add up to it: the productive row is the ideal step times the iterations that stay "
            "trained; the others are where the rest went.</p>\n"
            f"{_bar(rows, g['wall_s'])}\n{_legend(rows, g['wall_s'])}\n"
            f"<div class=scroll>{_table(rows, g)}</div>\n"
            f"<h3>Attempts</h3>\n<p class=note>{who} processes, from each one's start to its last sign of life (a "
            "clean close or its last window); grey: start-up before training; the space between bars: restart "
            f"gaps.</p>\n{_timeline(g)}\n"
            + (f"<p class=note>What the account could not read:</p><ul class=notes>{notes}</ul>\n" if notes else "")
            + "</section>")
