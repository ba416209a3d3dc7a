"""``trainperf bench``: the words of its comparison, its repeated runs, batches that are not pairs, and
the contract its help states."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

from trainperf.data._bench import BenchResult, compare, format_bench, run_bench  # noqa: E402


def result(mode: str, total: float, low: float | None = None, high: float | None = None, runs: int = 3):
    return BenchResult(mode, 10, 0.0, total, total, None, 0.0, runs, total if low is None else low,
                       total if high is None else high)


def test_a_mode_that_takes_longer_is_said_to_be_slower_not_a_fraction_faster():
    base = result("as given", 1.0, 0.98, 1.02)
    assert compare(base, result("prefetch", 1.0 / 0.61, 1.6, 1.7)) == "1.64x slower than as given per pass"
    assert compare(base, result("pre-saved", 0.5, 0.49, 0.51)) == "2.00x faster than as given per pass"
    assert compare(base, result("prefetch", 0.99, 0.97, 1.01)) == (
        "1.01x faster than as given per pass, within the spread of the runs")
    text = format_bench([base, result("prefetch", 1.0 / 0.61, 1.6, 1.7)])
    assert "prefetch: 1.64x slower than as given per pass" in text and "0.61x" not in text
    assert text.splitlines()[0] == "median of 3 runs per mode (spread: the fastest and slowest total)"


class Pairs(torch.utils.data.Dataset):
    def __len__(self):
        return 6

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.randn(4, 8, generator=g), torch.randint(0, 3, (4,), generator=g)


class Dicts(Pairs):
    def __getitem__(self, i):
        x, y = super().__getitem__(i)
        return {"pixels": x, "labels": y}


def model():
    return torch.nn.Linear(8, 3)


def test_each_mode_runs_repeats_times_and_reports_its_median_run_with_the_spread():
    results = run_bench(model, lambda: torch.utils.data.DataLoader(Pairs(), batch_size=None), repeats=3)
    assert [r.mode for r in results] == ["as given", "prefetch", "pre-saved"]
    for r in results:
        assert r.runs == 3 and r.batches == 6
        assert r.total_min_s <= r.total_s <= r.total_max_s
        assert r.total_s == pytest.approx(r.etl_s + r.compute_s)
    assert results[2].prepare_s > 0 and results[0].prepare_s == 0


def test_batches_that_are_not_pairs_need_a_batch_loss_and_say_so():
    loader = lambda: torch.utils.data.DataLoader(Dicts(), batch_size=None)  # noqa: E731
    with pytest.raises(ValueError, match=r"the loader's batches are dicts, not \(inputs, targets\) pairs: give a "
                                         r"batch loss \(--loss module:function"):
        run_bench(model, loader, repeats=1)
    seen = []

    def dict_loss(net, batch):
        seen.append(sorted(batch))
        return torch.nn.functional.cross_entropy(net(batch["pixels"]), batch["labels"])

    results = run_bench(model, loader, batch_loss=dict_loss, repeats=1)
    assert all(r.batches == 6 for r in results) and seen[0] == ["labels", "pixels"]
    with pytest.raises(ValueError, match="repeats must be a positive int, got 0"):
        run_bench(model, loader, batch_loss=dict_loss, repeats=0)


FACTORIES = textwrap.dedent("""
    import torch

    class Dicts(torch.utils.data.Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return {"pixels": torch.randn(4, 8), "labels": torch.randint(0, 3, (4,))}

    def make_model():
        return torch.nn.Linear(8, 3)

    def make_loader():
        return torch.utils.data.DataLoader(Dicts(), batch_size=None)

    def loss(model, batch):
        return torch.nn.functional.cross_entropy(model(batch["pixels"]), batch["labels"])
""")


def bench(tmp_path, *args):
    (tmp_path / "dictrain.py").write_text(FACTORIES)
    return subprocess.run([sys.executable, "-m", "trainperf", "bench", "--model", "dictrain:make_model",
                           "--loader", "dictrain:make_loader", "--repeats", "1", *args],
                          capture_output=True, text=True, timeout=180, cwd=tmp_path)


def test_the_cli_takes_a_loss_for_dict_batches_and_says_what_to_do_without_one(tmp_path):
    done = bench(tmp_path, "--loss", "dictrain:loss", "--json")
    assert done.returncode == 0, done.stderr
    refused = bench(tmp_path)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "not (inputs, targets) pairs: give a batch loss (--loss module:function" in refused.stderr


def test_the_help_states_the_contract():
    done = subprocess.run([sys.executable, "-m", "trainperf", "bench", "--help"], capture_output=True, text=True,
                          timeout=60)
    text = " ".join(done.stdout.split())
    for words in ("a function taking no argument", "returning an iterable of batches",
                  "cross entropy of model(inputs) against targets", "--loss names a function(model, batch)",
                  "median run", "--repeats"):
        assert words in text, words


def test_the_cli_says_its_progress_on_stderr_and_keeps_stdout_for_the_result(tmp_path):
    import re

    done = subprocess.run([sys.executable, "-m", "trainperf", "bench", "--iterations", "4", "--decode-ms", "1",
                           "--repeats", "2"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if line.startswith("trainperf bench: ")]
    steps = []  # each step in the order said (a long one is said again, with its count)
    for line in said[:-1]:
        match = re.fullmatch(r"trainperf bench: \[(\d)/7\] ([a-z -]+?(?:, run \d of 2)?)(?::.*)? \([\d.]+ s elapsed\)",
                             line)
        assert match, line
        if not steps or steps[-1] != match.groups():
            steps.append(match.groups())
    runs = [(f"{1 + 3 * r + m}", f"{mode}, run {r + 1} of 2") for r in range(2)
            for m, mode in enumerate(("as given", "prefetch", "pre-saved"), start=1)]
    assert steps == [("1", "pre-saving the batches once"), *runs]
    assert re.fullmatch(r"trainperf bench: done in [\d.]+ s", said[-1])
    out = done.stdout.splitlines()  # the table alone, as before
    assert out[0] == "median of 2 runs per mode (spread: the fastest and slowest total)"
    assert [line.split()[0] for line in out[3:6]] == ["as", "prefetch", "pre-saved"] and len(out) == 8
    assert "trainperf bench:" not in done.stdout
