"""``trainperf demo`` on shapes the default does not take."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("torch")


def test_a_demo_too_short_for_a_window_after_warm_up_is_refused_not_reported_as_0_to_0():
    done = subprocess.run([sys.executable, "-m", "trainperf", "demo", "--iterations", "5", "--frequency", "10"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "--iterations (5) must be at least twice --frequency (10)" in done.stderr
    assert "0 -> 0" not in done.stdout


def test_the_shortest_demo_compares_one_window_after_warm_up(capsys):
    from trainperf.cli._demo import run_demo

    result = run_demo(iterations=8, frequency=4, decode_ms=1.0)
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("data wait: ") and "samples/sec: 0 -> 0" not in last
    assert result["slow"].samples_per_sec and result["fixed"].samples_per_sec


def test_the_torch_extra_brings_numpy_so_torch_does_not_warn_on_import():
    from pathlib import Path

    import tomllib

    extras = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    for extra in ("torch", "lightning", "all"):
        assert any(req.startswith("numpy") for req in extras[extra]), extra
