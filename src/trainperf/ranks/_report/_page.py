"""The report page's style sheet and script: inline, loading nothing; the script draws the charts
from the report's JSON (``R``) and the phases' colours and labels (``P``) embedded in the page."""

from __future__ import annotations

__all__ = ["CSS", "SCRIPT"]

CSS = """
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

SCRIPT = r"""
(function(){
"use strict";
var R = JSON.parse(document.getElementById("data").textContent);
var P = JSON.parse(document.getElementById("phases").textContent), C = P.colours, L = P.labels;
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
// Whole run, at window resolution: each cell split into data wait / compute (the whole step) / other shares.
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
        " s\niteration " + c[2] + " ms\ndata wait " + c[3] + " ms\ncompute " + c[4] + " ms\nother " + c[5] + " ms"; }
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
        if(t >= s[2] && t <= s[2] + s[3]) return "rank " + s[0] + "  iteration " + s[4] + "\n" + L[R.phases[s[1]]] +
          " " + (s[3] * 1000).toFixed(2) + " ms at +" + ((s[2] - t0) * 1000).toFixed(2) + " ms"; }
      return null;
    });
  }
  R.slowest.forEach(function(win, k){
    var b = document.createElement("button");
    b.textContent = "iterations " + win.iteration_first + "-" + win.iteration_last + " (" +
      (win.warmup ? "warm-up, " : "") + win.iteration_ms + " ms)";
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
