"""The report as one self-contained HTML page: inline styles, inline script, data as inline JSON,
charts drawn on canvas. It loads nothing from anywhere."""

from __future__ import annotations

import html
import json
import re
import time
from typing import Any
from urllib.parse import quote

from ...records import MFU_ABOVE_PEAK, counted
from ._goodput_html import GOODPUT_CSS, goodput_section
from ._notes import figure_words, mfu_words, read_notes, untimed_lines
from ._page import CSS, SCRIPT

__all__ = ["render_html", "script_json"]

_PHASE_COLOURS = {"data": "#e8833a", "forward": "#1f9bd1", "backward": "#6a5acd", "step": "#2aa198",
                  "compute": "#3b6fc8", "other": "#9a9a9a", "report": "#d33682"}
#: What each phase holds, in the page's words (the timeline's ``step`` is the optimizer step only).
_PHASE_LABELS = {"data": "data wait", "forward": "forward", "backward": "backward", "step": "optimizer step",
                 "compute": "compute (whole step)", "other": "other host time", "report": "trainperf's report"}


def script_json(value: Any) -> str:
    """``value`` as JSON that is safe inside ``<script type="application/json">``: ``<``, ``>``, ``&``
    and the line separators U+2028/U+2029 are written as ``\\u`` escapes, so no string can end the
    element or start markup."""
    text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _counted(count: Any, noun: str) -> str:
    return counted(count, noun) if isinstance(count, int) else f"{count} {noun}s"


def _notes(report: dict[str, Any]) -> str:
    notes = report["notes"] if "notes" in report else read_notes(report)
    if not notes:
        return "<p class=note>Every file of every rank was read whole.</p>"
    items = "".join(f"<li>{_e(n)}</li>" for n in notes)
    return f"<h2>What could not be read or timed</h2><ul class=notes>{items}</ul>"


def _untimed(report: dict[str, Any]) -> str:
    """Beside the stragglers: which ranks' collectives were not timed, and what that leaves out."""
    return "".join(f"<p class=note>{_e(line[0].upper() + line[1:])}.</p>" for line in untimed_lines(report))


def _ms(value: Any) -> str:
    return "&ndash;" if value is None else f"{round(float(value), 1) + 0.0:.1f}"  # + 0.0: never "-0.0"


def _when(t: float | None, start: float) -> str:
    if t is None:
        return "&ndash;"
    try:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))
    except (OverflowError, ValueError, OSError):  # a time no calendar of this platform holds
        return f"{t - start:+.1f} s"
    return f"{t - start:+.1f} s ({_e(when)} UTC)"


def _stragglers_table(report: dict[str, Any]) -> str:
    rows = report["stragglers"]
    if not rows:
        return "<p class=ok>No straggler: no rank arrives at the collective clearly later than the others.</p>"
    body = "".join(
        f"<tr><td>{_e(s['rank'])}</td><td class='cause {_e(s['cause'])}'>{_e(s['cause'])}</td>"
        f"<td>{_ms(s['excess_ms'])}</td><td>{_e(s['windows'])} of {_e(report['analysed_windows'])}"
        f"{'<br>' + _e(s['pattern']) if s.get('pattern') else ''}</td>"
        f"<td>{_e(s['evidence'])}</td></tr>" for s in rows)
    return ("<table><tr><th>rank</th><th>cause</th><th>late by (ms/iteration)</th><th>windows</th>"
            f"<th>evidence</th></tr>{body}</table>")


#: The ranks table's columns of mean times: the label and the JSON field of each (``etl_ms`` is a dict).
_MEAN_COLUMNS = (("data wait mean", "etl_ms"), ("forward mean", "forward_ms"), ("backward mean", "backward_ms"),
                 ("optimizer step mean", "step_ms"), ("collective wait mean", "wait_ms"),
                 ("compute mean", "compute_ms"), ("host time mean", "other_ms"))
NOT_MEASURED = "not measured"


def _tflops(value: float | None) -> str:
    return NOT_MEASURED if value is None else _e(figure_words(value))


def _mfu(value: float | None) -> str:
    if value is None:
        return NOT_MEASURED
    return f"<span class=bad>{mfu_words(value)} (above 100%)</span>" if value > 1 else mfu_words(value)


def _ranks_table(report: dict[str, Any]) -> str:
    clocks = {c["rank"]: c for c in report["clocks"]}
    start = report["start"]
    body = []
    for r in report["ranks"]:
        c = clocks.get(r["rank"], {})
        it = r["iteration_ms"]
        silent = r["silent_since"]
        flag = f"<span class=bad>silent since {_when(silent, start)}</span>" if silent is not None else "ok"
        means = "".join(f"<td>{_ms(r[key]['mean'] if key == 'etl_ms' else r.get(key))}</td>"
                        for _, key in _MEAN_COLUMNS)
        body.append(
            f"<tr><td>{_e(r['rank'])}</td><td>{_e(r['host'])}</td><td>{_e(r['pid'])}</td>"
            f"<td>{_e(r['iterations'])}</td><td>{_ms(it['p50'])}</td><td>{_ms(it['p95'])}</td>"
            f"<td>{_ms(it['max'])}</td><td>{_ms(it['mean'])}</td>{means}<td>{_ms(r['samples_per_sec'])}</td>"
            f"<td>{_tflops(r.get('tflops_per_sec'))}</td><td>{_mfu(r.get('mfu'))}</td>"
            f"<td class='{'bad' if c.get('status') == 'unknown' else ''}'>{_e(c.get('status'))}</td>"
            f"<td>{flag}</td></tr>")
    heads = "".join(f"<th>{label}</th>" for label, _ in _MEAN_COLUMNS)
    return ("<table><tr><th>rank</th><th>host</th><th>pid</th><th>iterations</th><th>iteration p50</th>"
            f"<th>p95</th><th>max</th><th>mean</th>{heads}<th>samples/s</th><th>TFLOP/s</th><th>MFU</th>"
            f"<th>clock</th><th>state</th></tr>{''.join(body)}</table>")


_RANKS_NOTE = (
    "Milliseconds per iteration over the windows past warm-up, each column the JSON field of its name: compute is "
    "the whole step (forward, backward with the wait in its collectives, optimizer step: <code>compute_ms</code>), "
    "the optimizer step from the end of the backward pass to the end of <code>optimizer.step()</code> "
    "(<code>step_ms</code>). TFLOP/s not measured: no FLOP count per step (the adapters count a step of each new "
    "batch shape from the second on; a loop of its own passes <code>flops_per_step=</code>). MFU not measured: "
    "no FLOP count, or no peak known "
    "for the device (<code>peak_flops=</code>); above 100%, the peak or the FLOP count is wrong.")


def _clocks_table(report: dict[str, Any]) -> str:
    body = []
    for c in report["clocks"]:
        status = c["status"]
        note = ("alignment unknown: the rank's local clock is used as is" if status == "unknown"
                else "rank 0's clock" if status == "reference" else f"{c['estimates']} estimate(s)")
        body.append(f"<tr class='{'bad' if status == 'unknown' else ''}'><td>{_e(c['rank'])}</td>"
                    f"<td>{_e(status)}</td><td>{_ms(c['offset_ms'])}</td><td>{_ms(c['uncertainty_ms'])}</td>"
                    f"<td>{_ms(c['drift_ms'])}</td><td>{_e(note)}</td></tr>")
    return ("<table><tr><th>rank</th><th>status</th><th>offset (ms)</th><th>uncertainty (ms)</th>"
            f"<th>drift (ms)</th><th></th></tr>{''.join(body)}</table>")


def _silent_list(report: dict[str, Any]) -> str:
    if not report["silent"]:
        return "<p class=ok>Every rank reported until the end of the run or closed cleanly.</p>"
    items = "".join(f"<li>rank {_e(s['rank'])}: last seen {_when(s['since'], report['start'])}</li>"
                    for s in report["silent"])
    return f"<ul class=bad>{items}</ul>"


def _trace_href(path: str) -> str | None:
    """A link to a trace file: ``file://`` and the path, percent-encoded, for an absolute path (POSIX or
    a drive letter's), the percent-encoded path for a relative one (``:`` encoded too, so no path
    becomes a scheme such as ``javascript:``); ``None`` for text no URL can hold."""
    try:
        if path.startswith("/"):
            return "file://" + quote(path)
        if re.match(r"[A-Za-z]:[\\/]", path):
            return "file:///" + quote(path.replace("\\", "/"), safe="/:")  # after file:///, no scheme
        return quote(path)
    except UnicodeError:  # a lone surrogate
        return None


def _trace_name(path: str) -> str:
    return re.split(r"[\\/]", path)[-1] or path


def _mb(size: Any) -> str:
    return "&ndash;" if size is None else f"{size / 1e6:.2f}"


def _trigger_time(window: dict[str, Any] | None) -> str:
    if window is None:
        return "&ndash; (window not read)"
    parts = [f"{label} {_ms(window[key])}" for key, label in (("iteration_p95_ms", "p95"), ("iteration_ms", "mean"))
             if window.get(key) is not None]
    return ", ".join(parts) or "&ndash;"


def _captures_section(report: dict[str, Any]) -> str:
    captures = report.get("captures") or []
    if not captures:
        return ""
    body = []
    for c in captures:
        path = str(c["path"])
        href = _trace_href(path)
        name = _e(_trace_name(path))
        link = f"<a href='{_e(href)}' title='{_e(path)}'>{name}</a>" if href is not None else name
        trimmed = c.get("trimmed_events")
        size = _mb(c.get("bytes")) + (f" ({_e(f'{trimmed:,}')} events left out)" if trimmed else "")
        body.append(
            f"<tr><td>{_e(c['rank'])}</td>"
            f"<td>iterations {_e(c['trigger_first_iteration'])}-{_e(c['trigger_last_iteration'])}</td>"
            f"<td>{_trigger_time(c.get('trigger_window'))}</td><td class=reason>{_e(c['reason'])}</td>"
            f"<td>{_e(c['first_iteration'])}-{_e(c['last_iteration'])}</td><td>{_ms(c.get('traced_iteration_ms'))}</td>"
            f"<td class=trace>{link}</td><td>{size}</td><td>{_ms(c.get('cost_ms'))}</td>"
            f"<td>{_ms(c.get('export_ms'))}</td></tr>")
    total = report.get("captures_total") or len(captures)
    more = (f"<p class=note>{_e(_counted(total - len(captures), 'more capture'))} not listed.</p>"
            if total > len(captures) else "")
    return ("<h2>Profiler captures</h2>\n<p class=note>Iterations traced with torch.profiler after a window turned "
            "bad (<code>profile_dir=</code>), beside the window that triggered each; the whole-run timeline outlines "
            "those windows in red. Times in ms; the cost is the training thread's, writing happened beside it."
            "</p>\n<div class=scroll><table><tr><th>rank</th><th>triggering window</th><th>its iteration time (ms)"
            "</th><th>reason</th><th>traced iterations</th><th>traced iteration mean</th><th>trace file</th>"
            f"<th>size (MB)</th><th>cost</th><th>writing</th></tr>{''.join(body)}</table></div>{more}")


def render_html(report: dict[str, Any]) -> str:
    """The whole page for a report from :func:`trainperf.build_report`.

    Args:
        report: the analysis; every string in it is escaped on the page and in the embedded data.
    """
    name = report.get("run_name")
    title = f"trainperf report: {name}" if name else "trainperf report"
    seen = report.get("phases_seen", list(_PHASE_COLOURS))
    key = "".join(f"<span><i style='background:{c}'></i>{_PHASE_LABELS[p]}</span>" for p, c in _PHASE_COLOURS.items()
                  if p in seen)
    capped = [r["rank"] for r in report["ranks"] if r.get("timeline_capped")]
    cap_note = (f" Ranks {', '.join(str(r) for r in capped)} reached their cap on detailed windows." if capped else "")
    cluster = report.get("cluster") or "no complete window"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy"
 content="default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'">
<title>{_e(title)}</title><style>{CSS}{GOODPUT_CSS}</style></head>
<body>
<h1>{_e(title)}</h1>
<p>{_e(_counted(report['world_size'], 'rank'))}; {_e(_counted(report['analysed_windows'], 'report window'))}
compared across ranks.<br>
<b>{_e(cluster)}</b>{_world_line(report)}</p>
{goodput_section(report)}
{_notes(report)}
<h2>Stragglers</h2>
<p class=note>With data-parallel training every rank waits for the slowest one in the collectives, so iteration
times are equal; the rank that waits least in them arrives last and holds the others back. Its cause is the phase
of its own time that exceeds the other ranks' median most: data, forward, backward, optimizer, host, gc or
communication.</p>
{_untimed(report)}
{_stragglers_table(report)}
<h2>Silent ranks</h2>
{_silent_list(report)}
{_captures_section(report)}
<h2>Timeline of the whole run</h2>
<p class=note>Rows are ranks, time is aligned to rank 0's clock. Each cell is a stretch of report windows, split
into the shares of data wait, compute (the whole step) and other host time.</p>
<div class=key>{key}</div>
<canvas id=run></canvas>
<h2>The slowest windows, every iteration</h2>
<p class=note>Full spans are kept for a bounded number of windows per rank: the first ones and the
slowest. The warm-up window (each run's first, with its start-up costs) comes after the others.{cap_note}</p>
<div id=slowbuttons></div>
<canvas id=slow></canvas>
<h2>Iteration time per rank</h2>
<p class=note>Box: median to 95th percentile of the windows; line to the maximum; black tick: the mean.</p>
<canvas id=iterdist></canvas>
<h2>Data wait per rank</h2>
<canvas id=etldist></canvas>
<h2>Throughput over time</h2>
<canvas id=tput></canvas>
<h2>Ranks</h2>
<div class=scroll>{_ranks_table(report)}</div>
<p class=note>{_RANKS_NOTE}</p>
<h2>Clock alignment</h2>
<p class=note>Aligned time = a rank's wall clock + its offset to rank 0; uncertainty is half the best round
trip of the estimate; drift is the change of the offset over the run.</p>
<div class=scroll>{_clocks_table(report)}</div>
<div id=tip></div>
<script type="application/json" id="data">{script_json(report)}</script>
<script type="application/json" id="phases">{script_json({"colours": _PHASE_COLOURS, "labels": _PHASE_LABELS})}</script>
<script>{SCRIPT}</script>
</body></html>
"""


def world_words(world: dict[str, Any] | None) -> str | None:
    """The whole run's throughput in words (``World: 1,200 samples/s, 15,000 tokens/s, MFU 3.0% ...``)."""
    if not world:
        return None
    parts = []
    for key, unit in (("samples_per_sec", "samples/s"), ("tokens_per_sec", "tokens/s")):
        if world.get(key) is not None:
            parts.append(f"{world[key]:,.1f} {unit}")
    if world.get("tflops_per_sec") is not None:  # not measured: not said at all
        parts.append(f"{figure_words(world['tflops_per_sec'])} TFLOP/s")
    mfu = world.get("mfu")
    if mfu is not None:
        over = f"; {MFU_ABOVE_PEAK}" if mfu > 1 else ""
        parts.append(f"MFU {mfu_words(mfu)} (over {_counted(world['mfu_ranks'], 'rank')} with a peak{over})")
    return "World: " + ", ".join(parts) if parts else None


def _world_line(report: dict[str, Any]) -> str:
    words = world_words(report.get("world"))
    return f"<br>{_e(words)}" if words else ""
