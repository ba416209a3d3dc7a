"""The report as one self-contained HTML page: inline styles, inline script, data as inline JSON,
charts drawn on canvas. It loads nothing from anywhere."""

from __future__ import annotations

import html
import json
import re
import time
from typing import Any
from urllib.parse import quote

from ...records import counted
from ._notes import read_notes, untimed_lines

__all__ = ["render_html", "script_json"]

_PHASE_COLOURS = {"data": "#e8833a", "forward": "#1f9bd1", "backward": "#6a5acd", "step": "#2aa198",
                  "compute": "#3b6fc8", "other": "#9a9a9a", "report": "#d33682"}


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
    notes = read_notes(report)
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


def _ranks_table(report: dict[str, Any]) -> str:
    clocks = {c["rank"]: c for c in report["clocks"]}
    start = report["start"]
    body = []
    for r in report["ranks"]:
        c = clocks.get(r["rank"], {})
        it, etl = r["iteration_ms"], r["etl_ms"]
        silent = r["silent_since"]
        flag = f"<span class=bad>silent since {_when(silent, start)}</span>" if silent is not None else "ok"
        body.append(
            f"<tr><td>{_e(r['rank'])}</td><td>{_e(r['host'])}</td><td>{_e(r['pid'])}</td>"
            f"<td>{_e(r['iterations'])}</td><td>{_ms(it['p50'])}</td><td>{_ms(it['p95'])}</td>"
            f"<td>{_ms(it['max'])}</td><td>{_ms(it['mean'])}</td><td>{_ms(etl['mean'])}</td>"
            f"<td>{_ms(r['forward_ms'])}</td><td>{_ms(r['compute_ms'])}</td><td>{_ms(r.get('wait_ms'))}</td>"
            f"<td>{_ms(r['other_ms'])}</td><td>{_ms(r['samples_per_sec'])}</td>"
            f"<td class='{'bad' if c.get('status') == 'unknown' else ''}'>{_e(c.get('status'))}</td>"
            f"<td>{flag}</td></tr>")
    return ("<table><tr><th>rank</th><th>host</th><th>pid</th><th>iterations</th><th>iteration p50</th>"
            "<th>p95</th><th>max</th><th>mean</th><th>data wait mean</th><th>forward mean</th><th>step mean</th>"
            "<th>collective wait mean</th><th>host time mean</th><th>samples/s</th>"
            f"<th>clock</th><th>state</th></tr>{''.join(body)}</table>")


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


_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:0 24px 40px;color:#222;background:#fafafa}
h1{font-size:22px;margin:18px 0 4px}h2{font-size:17px;margin:26px 0 6px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:12.5px;background:#fff}td,th{border:1px solid #ddd;padding:2px 7px;
text-align:right}td:nth-child(2),td:last-child,th{text-align:left}.bad{color:#b00020}.ok{color:#2e7d32}
.cause{font-weight:600}.cause.data{color:#c0601a}.cause.forward,.cause.backward,.cause.compute{color:#2c5fb0}
.cause.optimizer{color:#1f7a72}.cause.host,.cause.gc{color:#666}.cause.communication{color:#6a3fb0}.note{color:#666;font-size:12.5px}
canvas{background:#fff;border:1px solid #ddd;display:block;max-width:100%}
.key span{display:inline-block;margin-right:14px}.key i{display:inline-block;width:11px;height:11px;
margin-right:4px;vertical-align:-1px}#tip{position:fixed;pointer-events:none;background:#222;color:#fff;
font-size:12px;padding:3px 6px;border-radius:3px;display:none;white-space:pre}
button{margin:0 4px 6px 0;font-size:12px}.scroll{max-height:420px;overflow:auto;display:inline-block}
td.reason,td.trace{text-align:left}td.reason{max-width:420px;overflow-wrap:anywhere}
"""

_JS = r"""
(function(){
"use strict";
var R = JSON.parse(document.getElementById("data").textContent);
var C = JSON.parse(document.getElementById("colours").textContent);
var tip = document.getElementById("tip");
var ranks = R.ranks.map(function(r){return r.rank;});
var rowOf = {}; ranks.forEach(function(r, k){rowOf[r] = k;});
var ROW = Math.max(6, Math.min(18, Math.floor(640 / Math.max(1, ranks.length))));
var LEFT = 70, RIGHT = 45;
function canvas(id, height){
  var c = document.getElementById(id), dpr = window.devicePixelRatio || 1;
  var w = Math.max(600, Math.min(1300, document.body.clientWidth - 40));
  c.width = w * dpr; c.height = height * dpr; c.style.width = w + "px"; c.style.height = height + "px";
  var g = c.getContext("2d"); g.scale(dpr, dpr); g.font = Math.min(11, ROW) + "px system-ui,sans-serif";
  return {c: c, g: g, w: w, h: height};
}
function hover(c, find){
  c.addEventListener("mousemove", function(ev){
    var b = c.getBoundingClientRect(), text = find(ev.clientX - b.left, ev.clientY - b.top);
    if(text){tip.textContent = text; tip.style.display = "block";
      tip.style.left = (ev.clientX + 12) + "px"; tip.style.top = (ev.clientY + 12) + "px";}
    else tip.style.display = "none";
  });
  c.addEventListener("mouseleave", function(){tip.style.display = "none";});
}
function axis(g, x0, x1, t0, t1, y, unit){
  g.fillStyle = "#555"; g.strokeStyle = "#ccc";
  var span = t1 - t0 || 1, step = Math.pow(10, Math.floor(Math.log10(span / 6)));
  [1, 2, 5, 10].some(function(m){ if(span / (step * m) <= 8){step *= m; return true;} return false;});
  for(var t = Math.ceil(t0 / step) * step; t <= t1; t += step){
    var x = x0 + (t - t0) / span * (x1 - x0);
    g.beginPath(); g.moveTo(x, 0); g.lineTo(x, y); g.stroke();
    g.fillText((+t.toPrecision(6)) + unit, x + 2, y + 12);
  }
}
function rankLabels(g, top){
  g.fillStyle = "#333";
  ranks.forEach(function(r, k){ if(ROW >= 9 || k % 4 === 0) g.fillText("rank " + r, 4, top + k * ROW + ROW - 2); });
}
// Whole run, at window resolution: each cell split into data wait / step / other shares.
(function(){
  var rows = R.rank_windows, tmax = 0;
  rows.forEach(function(rw){ rw.rows.forEach(function(c){ tmax = Math.max(tmax, c[1]); }); });
  var H = ranks.length * ROW + 20, v = canvas("run", H), g = v.g, sx = (v.w - LEFT - RIGHT) / (tmax || 1);
  axis(g, LEFT, v.w - RIGHT, 0, tmax, H - 18, " s");
  rows.forEach(function(rw){
    var y = rowOf[rw.rank] * ROW;
    rw.rows.forEach(function(c){
      var x = LEFT + c[0] * sx, w = Math.max(1, (c[1] - c[0]) * sx), tot = (c[3] || 0) + (c[4] || 0) + (c[5] || 0) || 1;
      var parts = [["data", c[3]], ["compute", c[4]], ["other", c[5]]], yy = y + 1;
      parts.forEach(function(p){
        var h = (ROW - 2) * (p[1] || 0) / tot; g.fillStyle = C[p[0]]; g.fillRect(x, yy, w, h); yy += h;
      });
    });
  });
  R.silent.forEach(function(s){
    var y = rowOf[s.rank]; if(y === undefined) return;
    var x = LEFT + (s.since - R.start) * sx; g.fillStyle = "#b00020"; g.fillRect(x, y * ROW, 3, ROW);
    g.fillText("silent", Math.min(x + 5, v.w - 40), y * ROW + ROW - 2);
  });
  (R.captures || []).forEach(function(c){
    var y = rowOf[c.rank], w = c.trigger_window;
    if(y === undefined || !w || w.t0 === null || w.t1 === null) return;
    g.strokeStyle = "#b00020"; g.lineWidth = 1.5;
    g.strokeRect(LEFT + w.t0 * sx, y * ROW + 1, Math.max(2, (w.t1 - w.t0) * sx), ROW - 2); g.lineWidth = 1;
  });
  rankLabels(g, 0);
  hover(v.c, function(x, y){
    var k = Math.floor(y / ROW); if(k < 0 || k >= ranks.length || x < LEFT) return null;
    var t = (x - LEFT) / sx, rw = rows[k];
    for(var j = 0; j < rw.rows.length; j++){ var c = rw.rows[j];
      if(t >= c[0] && t <= c[1]) return "rank " + rw.rank + "  " + c[0].toFixed(1) + "-" + c[1].toFixed(1) +
        " s\niteration " + c[2] + " ms\ndata wait " + c[3] + " ms\nstep " + c[4] + " ms\nother " + c[5] + " ms"; }
    return null;
  });
})();
// The slowest windows, every span.
(function(){
  var box = document.getElementById("slowbuttons");
  if(!R.slowest.length){
    box.textContent = "No timeline spans were recorded."; document.getElementById("slow").style.display = "none";
    return;
  }
  function draw(win){
    var H = ranks.length * ROW + 20, v = canvas("slow", H), g = v.g, t0 = win.t0, span = (win.t1 - win.t0) || 1e-9;
    var sx = (v.w - LEFT - RIGHT) / span;
    axis(g, LEFT, v.w - RIGHT, 0, span * 1000, H - 18, " ms");
    var rowsOf = {};
    win.spans.forEach(function(s){
      var y = rowOf[s[0]]; if(y === undefined) return;
      g.fillStyle = C[R.phases[s[1]]] || "#000";
      g.fillRect(LEFT + (s[2] - t0) * sx, y * ROW + 1, Math.max(0.5, s[3] * sx), ROW - 2);
      (rowsOf[y] = rowsOf[y] || []).push(s);
    });
    rankLabels(g, 0);
    hover(v.c, function(x, y){
      var list = rowsOf[Math.floor(y / ROW)]; if(!list || x < LEFT) return null;
      var t = t0 + (x - LEFT) / sx;
      for(var j = 0; j < list.length; j++){ var s = list[j];
        if(t >= s[2] && t <= s[2] + s[3]) return "rank " + s[0] + "  iteration " + s[4] + "\n" + R.phases[s[1]] +
          " " + (s[3] * 1000).toFixed(2) + " ms at +" + ((s[2] - t0) * 1000).toFixed(2) + " ms"; }
      return null;
    });
  }
  R.slowest.forEach(function(win, k){
    var b = document.createElement("button");
    b.textContent = "iterations " + win.iteration_first + "-" + win.iteration_last + " (" + win.iteration_ms +
      " ms)";
    b.addEventListener("click", function(){ draw(win); });
    box.appendChild(b);
  });
  draw(R.slowest[0]);
})();
// Distributions: p50-p95 box, whisker to max, mean tick, per rank.
function boxes(id, key){
  var H = ranks.length * ROW + 20, v = canvas(id, H), g = v.g, top = 0;
  R.ranks.forEach(function(r){ top = Math.max(top, r[key].max || 0, r[key].p95 || 0); });
  var sx = (v.w - LEFT - RIGHT) / (top || 1);
  axis(g, LEFT, v.w - RIGHT, 0, top, H - 18, " ms");
  R.ranks.forEach(function(r, k){
    var s = r[key], y = k * ROW; if(s.p50 === null) return;
    g.fillStyle = "#333"; g.fillRect(LEFT + s.p50 * sx, y + ROW / 2, ((s.max || s.p95) - s.p50) * sx, 1);
    g.fillStyle = key === "etl_ms" ? C.data : C.compute;
    g.fillRect(LEFT + s.p50 * sx, y + 2, Math.max(2, ((s.p95 || s.p50) - s.p50) * sx), ROW - 4);
    if(s.mean !== null){ g.fillStyle = "#000"; g.fillRect(LEFT + s.mean * sx - 1, y + 1, 2, ROW - 2); }
  });
  rankLabels(g, 0);
  hover(v.c, function(x, y){ var r = R.ranks[Math.floor(y / ROW)]; if(!r) return null; var s = r[key];
    return "rank " + r.rank + "\np50 " + s.p50 + "  p95 " + s.p95 + "\nmax " + s.max + "  mean " + s.mean + " ms"; });
}
boxes("iterdist", "iteration_ms"); boxes("etldist", "etl_ms");
// Throughput over time (all ranks together), and iteration time (median rank and slowest rank).
(function(){
  var pts = R.windows, v = canvas("tput", 330), g = v.g;
  if(!pts.length) return;
  var tmax = pts[pts.length - 1].t || 1, smax = 0, imax = 0;
  pts.forEach(function(p){
    smax = Math.max(smax, p.samples_per_sec || 0); imax = Math.max(imax, p.iteration_ms.max || 0);
  });
  var sx = (v.w - LEFT - RIGHT) / tmax;
  axis(g, LEFT, v.w - RIGHT, 0, tmax, 310, " s");
  function panel(top, bottom, max, label, series){
    g.fillStyle = "#fff"; g.fillRect(LEFT, top - 4, v.w - LEFT - RIGHT, bottom - top + 8);
    g.strokeStyle = "#999"; g.beginPath(); g.moveTo(LEFT, bottom); g.lineTo(v.w - RIGHT, bottom); g.stroke();
    g.fillStyle = "#555"; g.fillText(label, LEFT + 4, top - 6);
    g.fillText((+max.toPrecision(4)).toString(), 4, top + 8); g.fillText("0", 4, bottom);
    series.forEach(function(s){
      g.strokeStyle = s[1]; g.lineWidth = 1.5; g.beginPath(); var on = false;
      pts.forEach(function(p){ var val = s[0](p); if(val === null || val === undefined){ on = false; return; }
        var x = LEFT + p.t * sx, y = bottom - (bottom - top) * val / (max || 1);
        if(on) g.lineTo(x, y); else g.moveTo(x, y);
        on = true;
      });
      g.stroke(); g.lineWidth = 1;
    });
  }
  panel(22, 140, smax, "samples/s, all ranks together", [[function(p){ return p.samples_per_sec; }, "#2e7d32"]]);
  panel(180, 296, imax, "iteration ms: slowest rank (red), median rank (blue)",
        [[function(p){ return p.iteration_ms.max; }, "#b00020"],
         [function(p){ return p.iteration_ms.median; }, "#3b7dd8"]]);
  hover(v.c, function(x){ var t = (x - LEFT) / sx, best = null;
    pts.forEach(function(p){ if(best === null || Math.abs(p.t - t) < Math.abs(best.t - t)) best = p; });
    return best && ("t " + best.t + " s, iteration " + best.iteration + "\nsamples/s " + best.samples_per_sec +
      "\niteration ms median " + best.iteration_ms.median + ", max " + best.iteration_ms.max +
      "\ndata wait ms median " + best.etl_ms.median + ", max " + best.etl_ms.max); });
})();
document.body.setAttribute("data-rendered", String(Math.round(performance.now())));
})();
"""


def render_html(report: dict[str, Any]) -> str:
    """The whole page for a report from :func:`trainperf.build_report`.

    Args:
        report: the analysis; every string in it is escaped on the page and in the embedded data.
    """
    name = report.get("run_name")
    title = f"trainperf report: {name}" if name else "trainperf report"
    seen = report.get("phases_seen", list(_PHASE_COLOURS))
    key = "".join(f"<span><i style='background:{c}'></i>{p}</span>" for p, c in _PHASE_COLOURS.items() if p in seen)
    capped = [r["rank"] for r in report["ranks"] if r.get("timeline_capped")]
    cap_note = (f" Ranks {', '.join(str(r) for r in capped)} reached their cap on detailed windows." if capped else "")
    cluster = report.get("cluster") or "no complete window"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy"
 content="default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'">
<title>{_e(title)}</title><style>{_CSS}</style></head>
<body>
<h1>{_e(title)}</h1>
<p>{_e(_counted(report['world_size'], 'rank'))}; {_e(_counted(report['analysed_windows'], 'report window'))}
compared across ranks.<br>
<b>{_e(cluster)}</b>{_world_line(report)}</p>
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
into the shares of data wait, step and other host time.</p>
<div class=key>{key}</div>
<canvas id=run></canvas>
<h2>The slowest windows, every iteration</h2>
<p class=note>Full spans are kept for a bounded number of windows per rank: the first ones and the
slowest.{cap_note}</p>
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
<h2>Clock alignment</h2>
<p class=note>Aligned time = a rank's wall clock + its offset to rank 0; uncertainty is half the best round
trip of the estimate; drift is the change of the offset over the run.</p>
<div class=scroll>{_clocks_table(report)}</div>
<div id=tip></div>
<script type="application/json" id="data">{script_json(report)}</script>
<script type="application/json" id="colours">{script_json(_PHASE_COLOURS)}</script>
<script>{_JS}</script>
</body></html>
"""


def world_words(world: dict[str, Any] | None) -> str | None:
    """The whole run's throughput in words (``World: 1,200 samples/s, 15,000 tokens/s, MFU 3.0% ...``)."""
    if not world:
        return None
    parts = []
    for key, unit in (("samples_per_sec", "samples/s"), ("tokens_per_sec", "tokens/s"), ("tflops_per_sec", "TFLOP/s")):
        value = world.get(key)
        if value is not None:
            parts.append(f"{value:,.1f} {unit}" if key != "tflops_per_sec" else f"{value:.3g} {unit}")
    if world.get("mfu") is not None:
        parts.append(f"MFU {100 * world['mfu']:.1f}% (over {_counted(world['mfu_ranks'], 'rank')} with a peak)")
    return "World: " + ", ".join(parts) if parts else None


def _world_line(report: dict[str, Any]) -> str:
    words = world_words(report.get("world"))
    return f"<br>{_e(words)}" if words else ""
