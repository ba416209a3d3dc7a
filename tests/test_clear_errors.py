"""Bad input gets a clear error that names the argument, never a traceback or a silent wrong result."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

import trainperf
from trainperf import PerformanceListener
from trainperf.sinks import RunDirSink

SCRIPT = "import sys; from trainperf.cli import main; sys.exit(main(sys.argv[1:]))"


def cli(*args: str, script: str = SCRIPT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=180)


def assert_clear(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    for word in words:
        assert word in done.stderr, (word, done.stderr)


def test_plot_refuses_a_resolution_it_cannot_draw(tmp_path):
    log = tmp_path / "t.log"
    log.write_text("ETL: 1 ms; iteration 5; iteration time: 2 ms;\n")
    assert_clear(cli("plot", str(log), "-o", str(tmp_path / "x.png"), "--dpi", "100000"), "--dpi", "at most 1200")
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize("value", ["inf", "nan", "-3", "1e9"])
def test_demo_and_bench_refuse_a_decode_time_that_is_not_a_finite_positive_number(value):
    for command in ("demo", "bench"):
        assert_clear(cli(command, "--decode-ms", value), "--decode-ms", value)


@pytest.mark.parametrize("command", ["doctor", "bench"])
def test_doctor_and_bench_without_torch_give_the_install_hint(command):
    done = cli(command, script="import sys; sys.modules['torch'] = None; " + SCRIPT)
    assert_clear(done, f"trainperf {command} needs PyTorch: pip install 'trainperf[torch]'")


def test_doctor_given_a_model_as_its_loader_says_so(tmp_path):
    (tmp_path / "factories.py").write_text(
        "import torch\n"
        "def model():\n    return torch.nn.Linear(4, 2)\n"
        "def stack():\n    return torch.nn.Sequential(torch.nn.Linear(4, 2))\n"
    )
    script = f"import sys; sys.path.insert(0, {str(tmp_path)!r}); " + SCRIPT
    for name, kind in (("model", "Linear"), ("stack", "Sequential")):  # a Sequential is iterable
        done = cli("doctor", "--loader", f"factories:{name}", script=script)
        assert_clear(done, f"--loader 'factories:{name}' must give an iterable data loader, got {kind} (a model: "
                     "give it as --model)")


def test_parse_log_refuses_bytes_and_says_what_to_give_instead():
    with pytest.raises(TypeError, match=r"source must be a path .* got bytes: give a path as str"):
        trainperf.parse_log(b"/tmp/train.log")


def test_build_report_names_its_argument():
    from trainperf.ranks import build_report

    with pytest.raises(TypeError, match="run_dir must be the path of a run directory .* got None"):
        build_report(None)  # type: ignore[arg-type]


@pytest.fixture
def run_dir(tmp_path, clock):
    for rank in (0, 1):
        listener = PerformanceListener(2, run_dir=tmp_path / "run", rank=rank, clock=clock, sinks=[],
                                       report_hardware=False)
        for _ in range(6):
            clock.advance(0.01)
            listener.record_iteration(samples=4)
        listener.close()
    return tmp_path / "run"


def test_report_to_a_folder_that_is_a_file_or_a_file_that_is_a_folder_is_refused(tmp_path, run_dir):
    existing = tmp_path / "report.html"
    existing.write_text("keep me")
    assert_clear(cli("report", str(run_dir), "-o", f"{existing}/"), "names a folder", "one file: give its name")
    assert_clear(cli("report", str(run_dir), "-o", f"{existing}/", "--format", "perfetto"), "names a folder",
                 "is a file")
    assert existing.read_text() == "keep me"
    assert_clear(cli("report", str(run_dir), "-o", str(tmp_path)), "is a folder", "give its name")
    assert_clear(cli("report", str(run_dir), "-o", f"{tmp_path}/new/", "--format", "json"), "names a folder")
    done = cli("report", str(run_dir), "-o", f"{tmp_path}/traces/", "--format", "perfetto")
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "traces").iterdir()) == ["rank-0.json", "rank-1.json"]


@pytest.mark.parametrize("reading", [math.nan, math.inf, "soon", None])
def test_a_clock_that_does_not_give_finite_seconds_is_refused_at_once(reading, tmp_path):
    with pytest.raises(ValueError, match=r"clock must return finite seconds \(a monotonic clock\), got"):
        PerformanceListener(1, clock=lambda: reading, run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()  # refused before anything was opened


@pytest.mark.parametrize("method", ["add_time", "add_sample"])
def test_add_time_and_add_sample_check_their_arguments(method):
    listener = PerformanceListener(1, sinks=[])
    add = getattr(listener, method)
    for name, seconds, error, words in [
        ("forward", -1.0, ValueError, "seconds must be a finite, non-negative number of seconds, got -1.0"),
        ("forward", math.nan, ValueError, "seconds must be a finite, non-negative number of seconds, got nan"),
        ("forward", "1", TypeError, "seconds must be a number of seconds, got '1'"),
        (3, 1.0, TypeError, "name must be a str, got 3"),
        ("", 1.0, ValueError, "name must be a non-empty str"),
    ]:
        with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
            add(name, seconds)
    add("forward", 0.002)
    listener.close()


def test_run_dir_spans_check_their_rows(tmp_path):
    with RunDirSink(tmp_path / "run", rank=0) as sink:
        for rows, error, words in [
            ("abc", TypeError, "rows must be an iterable of span rows, got str"),
            ([(1, 0.0, 0.1)], TypeError, r"rows\[0\] must be \(iteration, start_wall_s"),
            ([(1, 0.0, 0.1, 0.2, 0.0), (-2, 0.0, 0.1, 0.2, 0.0)], ValueError, r"rows\[1\]: the iteration must be"),
            ([(1, math.inf, 0.1, 0.2, 0.0)], ValueError, r"rows\[0\]: start_wall_s must be a finite"),
            ([(1, 0.0, -0.1, 0.2, 0.0)], ValueError, r"rows\[0\]: etl_s must be a finite, non-negative"),
            ([(1, 0.0, 0.1, "x", 0.0)], TypeError, r"rows\[0\]: compute_s must be a number of seconds"),
            ([(1, 0.0, 0.1, 0.2, 0.0, [1])], TypeError, r"rows\[0\]: the phases must be a mapping"),
            ([(1, 0.0, 0.1, 0.2, 0.0, {"forward": math.nan})], ValueError, r"rows\[0\]: forward must be"),
        ]:
            with pytest.raises(error, match=words):
                sink.spans(rows)
        assert sink.spans([(1, 0.0, 0.1, 0.2, 0.0, {"forward": 0.1, "backward": 0.1})])
