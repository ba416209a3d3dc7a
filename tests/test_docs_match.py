"""What the README and the docs say matches the code: the options, the examples, the lines, the words."""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from trainperf import PerformanceListener
from trainperf.ranks._stragglers import RankFigures, cluster_line

ROOT = Path(__file__).parent.parent
README = (ROOT / "README.md").read_text()


def _shown(default: object) -> str:
    if callable(default):
        return f"{default.__module__}.{default.__name__}"
    return repr(default)


def test_the_readmes_options_are_the_listeners_signature():
    block = README[README.index("## Options") :]
    text = " ".join(block[block.index("`PerformanceListener(") + 1 : block.index(")`") + 1].split())
    expected = []
    for name, p in inspect.signature(PerformanceListener).parameters.items():
        if p.kind is p.KEYWORD_ONLY and "*" not in expected:
            expected.append("*")
        expected.append(name if p.default is p.empty else f"{name}={_shown(p.default)}")
    assert text == f"PerformanceListener({', '.join(expected)})"


@pytest.mark.parametrize("name", ["sink_thread", "cluster_every", "cluster_timeout_s", "report_hardware",
                                  "set_epoch"])
def test_every_option_and_set_epoch_is_described_in_the_readme(name):
    options = README[README.index("## Options") :]
    bullets = [line for line in options.splitlines() if line.startswith("- ")]
    assert any(f"`{name}`" in line or f"`listener.{name}(" in line for line in bullets), name


def test_the_readmes_run_dir_example_runs_in_one_process_without_torchrun(tmp_path):
    example = re.search(r"```python\n(listener = PerformanceListener\(.*run_dir=.*\))\n```", README)
    assert example is not None
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    code = f"from trainperf import PerformanceListener\n{example.group(1)}\nlistener.close()\n"
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "runs" / "today" / "rank-0" / "meta.json").exists()


def test_the_readmes_cluster_line_has_the_shape_of_a_real_one():
    shown = re.search(r"`(cluster at iteration \d+: cluster: [^`]*)`", README)
    assert shown is not None
    figures = [RankFigures(r, 400, 1.0, None, 60.0 + r, 0.0, 61.2 + 0.2 * r) for r in range(4)]
    real = f"cluster at iteration 400: {cluster_line(figures)}"
    shape = re.compile(r"cluster at iteration \d+: cluster: \d+ ranks; iteration [\d.]+-[\d.]+ ms \(spread [\d.]+ ms, "
                       r"\d+%\); slowest rank \d+; ")
    assert shape.match(" ".join(shown.group(1).split())) and shape.match(real)


def test_one_rank_is_one_rank_not_1_ranks():
    line = cluster_line([RankFigures(0, 10, 1.0, None, 9.0, 0.0, 10.0)])
    assert line.startswith("cluster: 1 rank; ") and "1 ranks" not in line


def test_the_html_report_says_1_rank_and_never_shows_minus_zero(tmp_path, clock):
    from trainperf.ranks._report._analyse import build_report
    from trainperf.ranks._report._html import _ms, render_html

    listener = PerformanceListener(2, run_dir=tmp_path / "run", rank=0, clock=clock, sinks=[], report_hardware=False)
    for _ in range(6):
        clock.advance(0.01)
        listener.record_iteration(samples=4)
    listener.close()
    page = render_html(build_report(tmp_path / "run"))
    assert "1 rank;" in page and "1 ranks" not in page
    assert _ms(-0.04) == "0.0" and _ms(-0.06) == "-0.1" and _ms(0.04) == "0.0"
