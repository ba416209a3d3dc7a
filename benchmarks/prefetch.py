"""ETL fixes, measured in one run on this machine.

1. A producer that takes 10 ms per batch (sleeping, as I/O does) and a consumer that takes 10 ms:
   the loop with ``prefetch`` against the plain loop (target: >= 1.7x faster).
2. The overhead of ``prefetch`` per batch when the producer is instant (target: <= 20 us).
3. One epoch of the demo's data reloaded from ``presave`` shards against rebuilding it
   (target: >= 5x faster).

Run: ``python benchmarks/prefetch.py [--json]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

from trainperf.data import load_presaved, prefetch, presave


def sleeping_producer(n: int, seconds: float):  # type: ignore[no-untyped-def]
    for i in range(n):
        time.sleep(seconds)
        yield i


def loop(source, consume_s: float) -> float:  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    for _ in source:
        time.sleep(consume_s)
    return time.perf_counter() - started


def overlap(n: int = 100, rounds: int = 3) -> dict[str, float]:
    plain = [loop(sleeping_producer(n, 0.010), 0.010) for _ in range(rounds)]
    fetched = [loop(prefetch(sleeping_producer(n, 0.010), depth=2), 0.010) for _ in range(rounds)]
    return {"batches": n, "plain_s": statistics.median(plain), "prefetch_s": statistics.median(fetched),
            "speedup": statistics.median(plain) / statistics.median(fetched)}


def overhead(n: int = 200_000, rounds: int = 5) -> dict[str, float]:
    items = list(range(n))
    bare, fetched = [], []
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in items:
            pass
        bare.append(time.perf_counter() - started)
        started = time.perf_counter()
        for _ in prefetch(items, depth=64):
            pass
        fetched.append(time.perf_counter() - started)
    return {"items": n, "overhead_us_per_batch": 1e6 * (min(fetched) - min(bare)) / n}


def presaved_reload(iterations: int = 60, decode_ms: float = 12.0) -> dict[str, float]:
    from trainperf.cli._demo import demo_factories

    _, make_loader = demo_factories(iterations=iterations, decode_ms=decode_ms)
    started = time.perf_counter()
    for _ in make_loader():
        pass
    rebuild = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as folder:
        presave(make_loader(), folder)
        reloads = []
        for _ in range(3):
            started = time.perf_counter()
            for _ in load_presaved(folder):
                pass
            reloads.append(time.perf_counter() - started)
    reload = statistics.median(reloads)
    return {"batches": iterations, "rebuild_s": rebuild, "reload_s": reload, "speedup": rebuild / reload}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = {"overlap": overlap(), "overhead": overhead(), "presaved": presaved_reload()}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    o, h, p = result["overlap"], result["overhead"], result["presaved"]
    print(f"10 ms producer + 10 ms consumer, {o['batches']} batches: plain {o['plain_s']:.2f} s, "
          f"prefetch {o['prefetch_s']:.2f} s -> {o['speedup']:.2f}x (target >= 1.7x)")
    print(f"prefetch overhead, instant producer: {h['overhead_us_per_batch']:.1f} us per batch (target <= 20 us)")
    print(f"demo data, {p['batches']} batches: rebuild {p['rebuild_s']:.3f} s, pre-saved reload {p['reload_s']:.4f} s "
          f"-> {p['speedup']:.0f}x (target >= 5x)")


if __name__ == "__main__":
    main()
