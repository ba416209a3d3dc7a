"""``trainperf report`` on generated hostile run directories: windows, meta data, timelines, clock
estimates and events cut, mangled, of the wrong types, nested, huge or garbage, and folders with odd
names. Every input gives a report in every format, or a clear error for a folder with no rank in it;
nothing else is raised. Memory stays under 500 MB (peak RSS of a process of its own) with 200 MB
files.

The default suite runs a few hundred fixed inputs; the long run (``-m long``, see tests/README.md)
runs 25,000 new ones and the 200 MB inputs, and prints its figures.
"""

from __future__ import annotations

import io
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from trainperf.cli import main  # noqa: E402
from trainperf.ranks._report import write_report  # noqa: E402
from trainperf.ranks._report._analyse import analyse  # noqa: E402
from trainperf.ranks._report._html import render_html  # noqa: E402
from trainperf.ranks._report._json import report_json  # noqa: E402
from trainperf.ranks._report._load import load_run  # noqa: E402
from trainperf.ranks._report._perfetto import perfetto_trace, perfetto_traces, write_trace  # noqa: E402

#: Inputs per focus in the long run (five focuses: 25,000 in all) and in the default suite.
LONG_EXAMPLES = int(os.environ.get("TRAINPERF_REPORT_FUZZ_EXAMPLES", "5000"))
CI_EXAMPLES = 30
FOCUSES = ("windows", "meta", "timeline", "clock and events", "folders")
_SUPPRESS = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
CI = settings(max_examples=CI_EXAMPLES, deadline=None, derandomize=True, database=None, suppress_health_check=_SUPPRESS)
LONG = settings(max_examples=LONG_EXAMPLES, deadline=None, database=None, suppress_health_check=_SUPPRESS)
#: The only error reading a run directory may give: one with no rank folder at all.
USER_ERRORS = ("holds no rank-<r> folder",)
BASE = 1_700_000_000.0
#: The figures of the run, printed at its end.
FIGURES = {"inputs": 0, "user errors": 0, "seconds": 0.0, "long": False}

# ------------------------------------------------------------------------------------------ values
figures = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 10**6), st.integers(-(10**400), 10**400),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1e15, -1e15, 1e308, 5e-324, 1e11, BASE]),
    st.text(max_size=6), st.sampled_from(["\ud800", "a\udcffb", "</script><b>", "\u2028&"]),
    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(),
                                                                               max_size=2),
)
json_values = st.recursive(figures, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                            st.dictionaries(st.text(max_size=4), inner, max_size=4)),
                           max_leaves=12)
ODD_NAMES = ("rank-", "rank-x", "rank-01", "rank-1 ", "rank-\u0663", "rank-2147483648", "rank-2147483647",
             "rank-99999999", "rank-9999999", "rank--1", "rank-0x1", "rank-\udcff", "rank-1\n", "rank-" + "9" * 200)


#: Symbolic links named like ranks: to itself, to another rank's folder, to a file, to nowhere, out of the run.
LINKS = (("rank-5", "rank-5"), ("rank-6", "rank-0"), ("rank-7", "rank-0/windows.jsonl"), ("rank-8", "nowhere"),
         ("rank-9", "/"), ("rank-1/windows.jsonl", "../rank-0/windows.jsonl"), ("rank-0/events.jsonl", "/dev/zero"))


def dump(value: object) -> str:
    return json.dumps(value, allow_nan=True, separators=(",", ":"))


@st.composite
def hostile_lines(draw, lines: list[str]) -> list[bytes]:
    """``lines`` with some of them cut, replaced, repeated or moved, and lines no run writes put in."""
    out = [line.encode("utf-8", "surrogatepass") for line in lines]
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["cut", "value", "bytes", "deep", "repeat", "swap", "blank", "nul", "long"]))
        at = draw(st.integers(0, len(out)))
        if kind == "cut" and out:
            k = min(at, len(out) - 1)
            out[k] = out[k][: draw(st.integers(0, max(0, len(out[k]) - 1)))]
        elif kind == "value":
            out.insert(at, dump(draw(json_values)).encode("utf-8", "surrogatepass"))
        elif kind == "bytes":
            out.insert(at, draw(st.binary(max_size=40)).replace(b"\n", b" "))
        elif kind == "deep":
            depth = draw(st.sampled_from([10, 1000, 200_000]))
            out.insert(at, b"[" * depth + b"]" * depth)
        elif kind == "repeat" and out:
            out.insert(at, out[min(at, len(out) - 1)])
        elif kind == "swap" and len(out) > 1:
            k = min(at, len(out) - 2)
            out[k], out[k + 1] = out[k + 1], out[k]
        elif kind == "blank":
            out.insert(at, b"   ")
        elif kind == "nul":
            out.insert(at, b'{"iteration":\x00}')
        elif kind == "long" and draw(st.integers(0, 9)) == 0:  # now and then: past the longest line read
            out.insert(at, b'{"a":"' + b"x" * (1 << 20) + b'"}')
    return out


@st.composite
def mangled(draw, obj: dict) -> dict:
    """``obj`` with some fields set to values of any type, or left out."""
    obj = dict(obj)
    for key in draw(st.lists(st.sampled_from(sorted(obj) + ["extra", "kind", "rank"]), max_size=3)):
        if draw(st.booleans()):
            obj[key] = draw(figures)
        else:
            obj.pop(key, None)
    return obj


def window(rank: int, k: int, freq: int) -> dict:
    last = k * freq
    return {"iteration": last, "window_iterations": freq, "window_s": 0.03 * freq, "warmup": k == 1,
            "timestamp": BASE + 0.03 * last + 0.001 * rank, "etl_ms": 2.0 + rank, "etl_max_ms": 3.0,
            "iteration_ms": 30.0, "iteration_p50_ms": 30.0, "iteration_p95_ms": 31.0, "iteration_max_ms": 32.0,
            "samples_per_sec": 100.0, "compute_ms": 27.0 - rank, "other_ms": 1.0, "gc_total_ms": 0.5,
            "tflops_per_sec": 0.0001, "mfu": 1.2 if rank == 2 else 0.01,
            "etl_source": "gap" if rank == 1 else "loader",
            "extra": {"forward_ms": 10.0, "backward_ms": 8.0, "step_ms": 4.0, "wait_ms": 5.0 - rank,
                      "wait_p50_ms": 4.0}}


def span(i: int, ph: str, t: float, d: float) -> dict:
    return {"i": i, "ph": ph, "t": t, "d": d}


@st.composite
def run_dirs(draw, focus: str) -> dict[str, bytes | None | tuple[str, str]]:
    """A small run directory as ``{relative path: content}`` (``None``: an empty folder, ``("link",
    target)``: a symbolic link), hostile where ``focus`` says."""
    ranks = draw(st.integers(1, 3))
    windows = draw(st.integers(0, 6))
    freq = draw(st.sampled_from([1, 2, 5]))
    files: dict[str, bytes | None | tuple[str, str]] = {}

    def lines_of(objs: list[dict], hostile: bool) -> bytes:
        if hostile:
            objs = [draw(mangled(o)) if draw(st.integers(0, 3)) == 0 else o for o in objs]
        text = [dump(o) for o in objs]
        lines = draw(hostile_lines(text)) if hostile else [t.encode() for t in text]
        return b"".join(line + b"\n" for line in lines)

    for r in range(ranks):
        folder = f"rank-{r}"
        meta = {"schema": 1, "rank": r, "world_size": ranks + draw(st.integers(0, 2)), "host": f"h{r}",
                "pid": 100 + r, "run_name": "fuzz", "collectives_untimed": None, "started": BASE,
                "ended": BASE + 10.0, "timeline_windows": 2, "timeline_capped": False}
        if focus == "meta":
            choice = draw(st.integers(0, 3))
            content = (dump(draw(mangled(meta))) if choice == 0 else dump(draw(json_values)) if choice == 1
                       else draw(st.binary(max_size=60)).decode("latin-1") if choice == 2 else dump(meta)[:-3])
            files[f"{folder}/meta.json"] = content.encode("utf-8", "surrogatepass")
        else:
            files[f"{folder}/meta.json"] = dump(meta).encode()
        files[f"{folder}/windows.jsonl"] = lines_of([window(r, k, freq) for k in range(1, windows + 1)],
                                                    focus == "windows")
        spans = [span(i, ph, BASE + 0.03 * i + off, d) for i in range(1, min(windows * freq, 12) + 1)
                 for ph, off, d in (("data", 0.0, 0.002), ("forward", 0.002, 0.01), ("backward", 0.012, 0.008),
                                    ("step", 0.02, 0.004), ("other", 0.024, 0.001))]
        files[f"{folder}/timeline.jsonl"] = lines_of(spans, focus == "timeline")
        odd = focus == "clock and events"
        files[f"{folder}/clock.jsonl"] = lines_of(
            [{"t": BASE, "offset_s": 0.0 if r == 0 else 0.25, "uncertainty_s": 0.001,
              "status": "reference" if r == 0 else "aligned"}], odd)
        events = [{"kind": "capture", "t": BASE + 1.0, "path": f"/t/rank{r}.pt.trace.json.gz", "reason": "slow",
                   "trigger_first_iteration": 1, "trigger_last_iteration": freq, "first_iteration": freq + 1,
                   "last_iteration": freq + 2, "bytes": 1000}]
        if r == 0:
            events.append({"kind": "silent", "rank": ranks - 1, "t": BASE + 2.0, "last_seen": BASE + 1.0})
            events.append({"kind": "cluster", "iteration": 10, "line": "cluster: ..."})
        files[f"{folder}/events.jsonl"] = lines_of(events, odd)
    if focus == "folders":
        for name in draw(st.lists(st.sampled_from(ODD_NAMES), max_size=4, unique=True)):
            as_file = draw(st.booleans())
            if draw(st.booleans()) and ranks:  # a copy of rank 0's files under the odd name
                for path, content in list(files.items()):
                    if path.startswith("rank-0/") and not as_file:
                        files[f"{name}/{path[7:]}"] = content
            files[name if as_file else f"{name}/"] = b"a file" if as_file else None
        for name, target in draw(st.lists(st.sampled_from(LINKS), max_size=2, unique=True)):
            files[name] = ("link", target)
        if draw(st.booleans()):  # the ranks renamed away: a folder of odd names only
            files = {("rank-z" + k[k.index("/"):] if k.startswith("rank-0/") else k): v for k, v in files.items()}
    return files


def write_tree(root: Path, files: dict[str, bytes | None | tuple[str, str]]) -> None:
    links = []
    for rel, content in files.items():
        path = root / rel
        if isinstance(content, tuple):
            links.append((path, content[1]))
            continue
        if content is None:
            path.mkdir(parents=True, exist_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_dir():
            continue
        path.write_bytes(content)
    for path, target in links:
        if path.parent.is_dir():
            path.unlink(missing_ok=True)
            path.symlink_to(target)


def check(files: dict[str, bytes | None | tuple[str, str]]) -> None:
    """The report of ``files`` in every format, or the one clear error; fails on anything else."""
    started = time.perf_counter()
    FIGURES["inputs"] += 1
    with tempfile.TemporaryDirectory(prefix="trainperf-fuzz-") as tmp:
        root = Path(tmp) / "run"
        root.mkdir()
        write_tree(root, files)
        try:
            run = load_run(root)
        except ValueError as exc:
            assert any(words in str(exc) for words in USER_ERRORS), exc
            FIGURES["user errors"] += 1
            FIGURES["seconds"] += time.perf_counter() - started
            return
        report = analyse(run)
        assert json.loads(report_json(report)) == json.loads(json.dumps(report))  # strict JSON, no NaN
        page = render_html(report)
        page.encode("utf-8")  # no lone surrogate: the page can be written
        assert page.count("<script") == 3
        start = report["start"]
        for trace in (perfetto_trace(run.ranks, start), *perfetto_traces(run.ranks, start).values()):
            text = io.StringIO()
            write_trace(trace, text)
            assert "traceEvents" in json.loads(text.getvalue())
        ranks = [r["rank"] for r in report["ranks"]]
        assert ranks == sorted(set(ranks)) and all(isinstance(n, str) for n in report["notes"])
        # the command line writes each file whole, and says the notes
        out = Path(tmp) / "out"
        out.mkdir()
        try:
            assert write_report(root, out / "r.json", "json")
        except ValueError as exc:  # a rank folder that is a link to a folder above the output ("/")
            assert "in the run directory being read" in str(exc), exc
            FIGURES["user errors"] += 1
    FIGURES["seconds"] += time.perf_counter() - started


@pytest.fixture(scope="module", autouse=True)
def say_the_figures():
    yield
    if FIGURES["long"]:
        sys.__stderr__.write(
            f"\nreport fuzz: {FIGURES['inputs']:,} inputs in {FIGURES['seconds']:.0f} s, "
            f"{FIGURES['user errors']:,} clear errors (no rank folder; an output inside a rank folder), "
            "0 other exceptions; the test process's peak RSS (Hypothesis's own included) "
            f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB\n")


def _focused(focus: str, long: bool):
    def test(files):
        FIGURES["long"] = FIGURES["long"] or long
        check(files)

    test.__name__ = f"test_{'many ' if long else ''}hostile {focus}".replace(" ", "_")
    fn = given(run_dirs(focus))((LONG if long else CI)(test))
    return pytest.mark.long(fn) if long else fn


for _focus in FOCUSES:
    for _long in (False, True):
        _test = _focused(_focus, _long)
        globals()[_test.__name__] = _test


def test_a_folder_of_odd_rank_names_only_is_refused_in_words(tmp_path, capsys):
    for name in ("rank-x", "rank-2147483648"):
        (tmp_path / name).mkdir()
    assert main(["report", str(tmp_path), "-o", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert "holds no rank-<r> folder" in err and "'rank-2147483648' left out: beyond rank 2147483647" in err


# ------------------------------------------------------------------------------ 200 MB, peak RSS
MB = 1 << 20
#: The most a report may take, whatever the run directory holds.
MAX_RSS_MB = 500
#: The peak is the process's own high-water mark (``VmHWM``): Linux carries ``ru_maxrss`` over from the
#: parent through fork and exec, so a child of a large test process would report the parent's size.
PEAK = """
import sys, time
from trainperf.ranks._report import write_report
started = time.perf_counter()
for fmt, out in (("html", "r.html"), ("json", "r.json"), ("perfetto", "t.json"), ("perfetto", "traces/")):
    write_report(sys.argv[1], sys.argv[2] + "/" + out, fmt)
kb = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(kb, time.perf_counter() - started)
"""


def peak_rss_mb(run: Path, out: Path) -> tuple[float, float]:
    """The peak resident memory of a process of its own that writes every format of ``run``'s report, in MB,
    and its seconds."""
    out.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1] / "src"),
                                                        os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", PEAK, str(run), str(out)], capture_output=True, text=True, env=env,
                          timeout=3000)
    assert done.returncode == 0, done.stderr[-3000:]
    kb, seconds = done.stdout.split()
    return int(kb) / 1024, float(seconds)


def write_lines(path: Path, size: int, line) -> None:
    """Lines ``line(k)`` for k = 1, 2, ... until ``path`` holds ``size`` bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        written = k = 0
        while written < size:
            k += 1
            text = line(k)
            f.write(text)
            written += len(text)


def garbage(path: Path, size: int, seed: int) -> None:
    rnd = random.Random(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        for _ in range(size // MB):
            f.write(rnd.randbytes(MB))


def full_window(k: int) -> str:
    return dump({**window(0, k, 10), "host": "node-0", "pid": 1234, "samples": 320, "batches": 10, "gc": {},
                 "verdict": None, "cpu_pct": 90.1, "rss_mb": 24.6, "speedup_if_data_free": 1.07}) + "\n"


def small_window(k: int) -> str:
    return dump({"iteration": k, "window_iterations": 1, "etl_ms": 1.5 + (k % 7 == 0) * 10.0, "compute_ms": 3.25,
                 "iteration_ms": 5.0, "timestamp": BASE + 0.005 * k, "window_s": 0.005,
                 "extra": {"wait_ms": 1.0, "step_ms": 0.5, "forward_ms": 1.0}}) + "\n"


def small_spans(k: int) -> str:
    t = BASE + 0.005 * k
    return dump(span(k, "data", t, 0.0015)) + "\n" + dump(span(k, "compute", t + 0.0015, 0.00325)) + "\n"


def capture_line(k: int) -> str:
    return dump({"kind": "capture", "t": BASE + k, "path": "/t/" + "p" * 4000, "reason": "r" * 2000,
                 "trigger_first_iteration": k, "trigger_last_iteration": k + 9, "first_iteration": k + 11,
                 "last_iteration": k + 13}) + "\n"


def fat_clock_line(k: int) -> str:
    return dump({"t": BASE + k, "offset_s": 0.25, "status": "aligned", "junk": [{}] * 300_000}) + "\n"


needs_proc = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the peak from /proc (Linux)")


@pytest.mark.long
@needs_proc
def test_200_mb_windows_and_200_mb_of_garbage_stay_under_500_mb(tmp_path):
    """A 200 MB windows.jsonl as a listener writes it, and 200 MB of random bytes as a timeline, an events
    file and a meta.json; 200 MB of capture events and of clock estimates a megabyte long each."""
    run = tmp_path / "run"
    write_lines(run / "rank-0" / "windows.jsonl", 200 * MB, full_window)
    garbage(run / "rank-0" / "timeline.jsonl", 200 * MB, 1)
    garbage(run / "rank-1" / "meta.json", 200 * MB, 2)
    os.link(run / "rank-0" / "windows.jsonl", run / "rank-1" / "windows.jsonl")
    garbage(run / "rank-1" / "events.jsonl", 200 * MB, 3)
    write_lines(run / "rank-2" / "events.jsonl", 200 * MB, capture_line)
    write_lines(run / "rank-2" / "clock.jsonl", 200 * MB, fat_clock_line)
    peak, seconds = peak_rss_mb(run, tmp_path / "out")
    sys.__stderr__.write(f"\n200 MB windows and garbage: peak RSS {peak:.0f} MB, {seconds:.0f} s for four reports\n")
    assert peak < MAX_RSS_MB
    shutil.rmtree(run)


@pytest.mark.long
@needs_proc
def test_200_mb_of_the_smallest_windows_and_spans_on_two_ranks_stay_under_500_mb(tmp_path):
    """The most windows and spans 200 MB files can hold: every rank's share of the report's budget full."""
    run = tmp_path / "run"
    write_lines(run / "rank-0" / "windows.jsonl", 200 * MB, small_window)
    write_lines(run / "rank-0" / "timeline.jsonl", 200 * MB, small_spans)
    for name in ("windows.jsonl", "timeline.jsonl"):
        (run / "rank-1").mkdir(exist_ok=True)
        os.link(run / "rank-0" / name, run / "rank-1" / name)
    peak, seconds = peak_rss_mb(run, tmp_path / "out")
    sys.__stderr__.write(f"\n200 MB of the smallest windows and spans, two ranks: peak RSS {peak:.0f} MB, "
                         f"{seconds:.0f} s for four reports\n")
    assert peak < MAX_RSS_MB
    shutil.rmtree(run)
