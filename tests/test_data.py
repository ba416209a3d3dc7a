from __future__ import annotations

import gc
import threading
import time
import traceback

import pytest
import torch

from trainperf.data import CorruptShardError, load_presaved, prefetch, presave


def prefetch_threads():
    return [t for t in threading.enumerate() if t.name == "trainperf-prefetch"]


def wait_no_threads(timeout=3.0):
    deadline = time.monotonic() + timeout
    while prefetch_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    return prefetch_threads()


def test_order_is_preserved_and_every_pass_is_fresh():
    source = prefetch(range(1000), depth=3)
    assert list(source) == list(range(1000))
    assert list(source) == list(range(1000))
    assert len(source) == 1000


def test_producer_exception_is_reraised_with_its_original_traceback():
    def broken():
        yield 1
        raise KeyError("shard 7 missing")

    iterator = iter(prefetch(broken()))
    assert next(iterator) == 1
    with pytest.raises(KeyError, match="shard 7 missing") as info:
        next(iterator)
    frames = [f.name for f in traceback.extract_tb(info.value.__traceback__)]
    assert "broken" in frames, "the traceback reaches into the producer"
    assert not wait_no_threads()


def test_breaking_out_early_stops_the_thread():
    produced = []

    def endless():
        i = 0
        while True:
            produced.append(i)
            yield i
            i += 1

    for item in prefetch(endless(), depth=2):
        if item == 5:
            break
    gc.collect()
    assert not wait_no_threads()
    count = len(produced)
    time.sleep(0.1)
    assert len(produced) == count, "nothing is produced after the loop ended"


def test_dropping_an_unfinished_iterator_stops_the_thread():
    iterator = iter(prefetch(iter(range(10**9)), depth=2))
    next(iterator)
    del iterator
    gc.collect()
    assert not wait_no_threads()


def test_close_joins_the_thread():
    iterator = iter(prefetch(range(100)))
    next(iterator)
    iterator.close()
    assert not iterator.thread.is_alive()
    with pytest.raises(StopIteration):
        next(iterator)


def test_memory_is_bounded_by_depth():
    produced = []

    def source():
        for i in range(100):
            produced.append(i)
            yield i

    iterator = iter(prefetch(source(), depth=3))
    next(iterator)
    time.sleep(0.2)
    # one taken, three queued, at most one more being offered
    assert len(produced) <= 1 + 3 + 1
    iterator.close()


def test_prefetch_overlaps_a_slow_producer_with_the_consumer():
    def slow():
        for i in range(10):
            time.sleep(0.02)
            yield i

    started = time.perf_counter()
    for _ in prefetch(slow()):
        time.sleep(0.02)
    elapsed = time.perf_counter() - started
    assert elapsed < 0.35, elapsed  # 0.4 s in sequence


def test_to_device_on_cpu_hands_batches_over_unchanged():
    batches = [(torch.ones(2), {"y": torch.zeros(3)}) for _ in range(4)]
    out = list(prefetch(batches, to_device="cpu"))
    assert len(out) == 4 and out[0][0] is batches[0][0]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_to_device_on_cuda_copies_on_a_side_stream_correctly():
    batches = [(torch.full((256, 256), float(i)), torch.tensor([i])) for i in range(20)]
    seen = []
    for x, y in prefetch(batches, to_device="cuda"):
        assert x.is_cuda and y.is_cuda
        seen.append(float((x @ torch.ones(256, 1, device="cuda")).mean().item()) / 256)
    assert seen == [float(i) for i in range(20)]


def nested_batches(n=10):
    g = torch.Generator().manual_seed(0)
    return [
        ({"ids": torch.randint(0, 100, (4, 7), generator=g), "mask": torch.ones(4, 7, dtype=torch.bool)},
         [torch.randn(4, 3, generator=g), (torch.tensor(i),)])
        for i in range(n)
    ]


def assert_same(a, b):
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b) and a.dtype == b.dtype
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            assert_same(a[k], b[k])
    else:
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same(x, y)


def test_presave_round_trips_nested_batches_in_order(tmp_path):
    batches = nested_batches(10)
    presave(batches, tmp_path / "data", batches_per_shard=4)
    loaded = load_presaved(tmp_path / "data", shuffle=False)
    assert len(loaded) == 10
    assert len(list((tmp_path / "data").glob("shard-*.pt"))) == 3
    for a, b in zip(batches, loaded, strict=True):
        assert_same(a, b)
    again = list(prefetch(loaded))
    assert_same(batches, again)


def test_truncated_shard_raises_naming_it(tmp_path):
    presave(nested_batches(6), tmp_path / "d", batches_per_shard=3)
    shard = tmp_path / "d" / "shard-00001.pt"
    shard.write_bytes(shard.read_bytes()[:-100])
    loaded = load_presaved(tmp_path / "d")
    with pytest.raises(CorruptShardError, match="shard-00001.pt.*truncated"):
        list(loaded)


def test_damaged_shard_raises_naming_it(tmp_path):
    presave(nested_batches(6), tmp_path / "d", batches_per_shard=3)
    shard = tmp_path / "d" / "shard-00000.pt"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(CorruptShardError, match="shard-00000.pt.*checksum"):
        list(load_presaved(tmp_path / "d"))


def test_missing_shard_and_incomplete_presave(tmp_path):
    presave(nested_batches(4), tmp_path / "d", batches_per_shard=2)
    (tmp_path / "d" / "shard-00001.pt").unlink()
    with pytest.raises(CorruptShardError, match="shard-00001.pt.*missing"):
        list(load_presaved(tmp_path / "d"))
    (tmp_path / "e").mkdir()
    with pytest.raises(FileNotFoundError, match="not a complete pre-save"):
        load_presaved(tmp_path / "e")


def test_interrupted_presave_leaves_no_manifest(tmp_path):
    def dies():
        yield from nested_batches(3)
        raise RuntimeError("disk went away")

    with pytest.raises(RuntimeError):
        presave(dies(), tmp_path / "d", batches_per_shard=2)
    assert not (tmp_path / "d" / "manifest.json").exists()
    assert not list((tmp_path / "d").glob("*.tmp"))


@pytest.mark.realtime
def test_bench_compares_three_ways_and_presaved_wins():
    import json
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "trainperf", "bench", "--iterations", "20", "--json"],
        capture_output=True, text=True, timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    results = {r["mode"]: r for r in json.loads(proc.stdout)["results"]}
    assert list(results) == ["as given", "prefetch", "pre-saved"]
    assert all(r["batches"] == 20 for r in results.values())
    given, saved = results["as given"], results["pre-saved"]
    assert given["etl_s"] > 0.15  # 20 batches x 12 ms of decoding
    assert saved["etl_s"] < given["etl_s"] / 3
    # Compute on a loaded machine varies by more than the 240 ms of decoding saved, so whole-run
    # totals are not compared; each mode's total is its data wait plus its compute.
    for r in results.values():
        assert r["total_s"] == pytest.approx(r["etl_s"] + r["compute_s"], abs=2e-3)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_prefetch_to_cuda_without_cuda_fails_at_the_call_naming_the_argument():
    with pytest.raises(ValueError, match="to_device='cuda' but CUDA is not available"):
        prefetch([torch.ones(1)], to_device="cuda")
    with pytest.raises(ValueError, match="to_device must name a torch device, got 'gpu9'"):
        prefetch([torch.ones(1)], to_device="gpu9")


def _ids(loaded) -> list[int]:
    return [int(batch[0]) for batch in loaded]


def test_presaved_batches_come_in_a_new_seeded_order_every_epoch(tmp_path):
    presave([torch.tensor([i]) for i in range(20)], tmp_path / "d", batches_per_shard=4)
    loaded = load_presaved(tmp_path / "d")
    epochs = [_ids(loaded) for _ in range(3)]
    assert all(sorted(e) == list(range(20)) for e in epochs)  # every batch once per epoch
    assert len({tuple(e) for e in epochs}) == 3 and tuple(range(20)) not in {tuple(e) for e in epochs}
    again = load_presaved(tmp_path / "d")
    assert [_ids(again) for _ in range(3)] == epochs  # the same seed: the same run
    again.set_epoch(2)
    assert _ids(again) == epochs[2] and again.epoch == 3
    other = load_presaved(tmp_path / "d", seed=1)
    assert _ids(other) != epochs[0]
    first = epochs[0]  # shards stay together: a shard's four batches follow each other
    assert all(len({b // 4 for b in first[k : k + 4]}) == 1 for k in range(0, 20, 4))


def test_presaved_batches_without_shuffle_come_in_the_saved_order_every_epoch(tmp_path):
    presave([torch.tensor([i]) for i in range(9)], tmp_path / "d", batches_per_shard=4)
    loaded = load_presaved(tmp_path / "d", shuffle=False)
    assert _ids(loaded) == _ids(loaded) == list(range(9))


def test_presaved_order_arguments_are_checked(tmp_path):
    presave([torch.tensor([0])], tmp_path / "d")
    with pytest.raises(TypeError, match="shuffle must be a bool, got 'yes'"):
        load_presaved(tmp_path / "d", shuffle="yes")
    with pytest.raises(TypeError, match="seed must be an int, got 1.5"):
        load_presaved(tmp_path / "d", seed=1.5)
    with pytest.raises(ValueError, match="epoch must be a non-negative int, got -1"):
        load_presaved(tmp_path / "d").set_epoch(-1)
