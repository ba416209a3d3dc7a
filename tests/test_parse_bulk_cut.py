"""The bulk reader counts cut listener lines exactly as the cut-line pattern does, wherever they
stand in a block, and runs that pattern only on blocks that may hold one."""

from __future__ import annotations

import random

import pandas as pd
import pytest

import trainperf
from _parse_paths import assert_agree
from trainperf.logs import _bulk as _parse_bulk
from trainperf.logs import _parse
from trainperf.logs._lines import CUT_LINE

WHOLE = "ETL: {0} ms; iteration {1}; iteration time: {2} ms; samples/sec: {3}; GC: [gen0: {4} (0.{0}ms)];"
PREFIX = "2026-11-22 02:22:02,771 INFO trainperf - "


def _whole(rng: random.Random, prefix: str = PREFIX) -> str:
    return prefix + WHOLE.format(*(rng.randrange(1, 10_000) for _ in range(5)))


#: Lines that stand among whole ones: most have the whole lines' shape (digits and dots taken away).
VARIANTS = {
    "whole": lambda rng: _whole(rng),
    "digits after the last ;": lambda rng: _whole(rng) + str(rng.randrange(10)),  # same shape
    "a dot after the last ;": lambda rng: _whole(rng) + ".",  # same shape
    "cut": lambda rng: (line := _whole(rng))[: rng.randrange(len(PREFIX) + 5, len(line) - 1)],
    "cut before a restarted line": lambda rng: (line := _whole(rng))[: rng.randrange(len(PREFIX) + 5, len(line))]
    + _whole(rng, prefix=""),
    "cut after a word": lambda rng: _whole(rng).split(" samples/sec")[0] + " samples/sec",  # one shape, no ;
    "two whole lines on one": lambda rng: _whole(rng) + " " + _whole(rng, prefix=""),
    "ETL with a digit inside": lambda rng: _whole(rng).replace("ETL: ", f"ET{rng.randrange(10)}L: ") + "5",
    "trailing space": lambda rng: _whole(rng) + " ",
    "carriage return": lambda rng: _whole(rng) + "\r",
    "ETL: at the end": lambda rng: "loss 0.5 ETL: ",
    "another logger": lambda rng: f"2026-11-22 02:22:03,114 INFO root - saved epoch={rng.randrange(9)}",
    "empty": lambda rng: "",
}


def _counted(block: bytes) -> int:
    import numpy as np

    reader = _parse_bulk._BulkReader(pd, np)
    reader.add(block)
    return reader.cut


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v != "whole"])
@pytest.mark.parametrize("at", ["first", "middle", "last", "alone"])
def test_a_line_among_whole_ones_is_counted_as_the_cut_line_pattern_counts_it(variant, at):
    rng = random.Random(f"{variant} {at}")
    lines = [_whole(rng) for _ in range(9)]
    odd = VARIANTS[variant](rng)
    if at == "alone":
        lines = [odd]
    else:
        lines[{"first": 0, "middle": 4, "last": 8}[at]] = odd
    block = "".join(line + "\n" for line in lines).encode()
    assert _counted(block) == len(CUT_LINE.findall(block))


@pytest.mark.parametrize("seed", range(40))
def test_random_blocks_are_counted_as_the_cut_line_pattern_counts_them(seed):
    rng = random.Random(seed)
    names = list(VARIANTS)
    # blocks of one kind of line (often one shape), and blocks of a few kinds mixed
    kinds = [rng.choice(names)] if seed % 2 else rng.sample(names, rng.randrange(2, 5))
    lines = [VARIANTS[rng.choice(kinds) if rng.random() < 0.3 else kinds[0]](rng) for _ in range(rng.randrange(1, 60))]
    block = "".join(line + "\n" for line in lines).encode()
    assert _counted(block) == len(CUT_LINE.findall(block))


class _CountingPattern:
    """The cut-line pattern, counting how often it is run."""

    def __init__(self) -> None:
        self.calls = 0

    def findall(self, text: bytes) -> list[bytes]:
        self.calls += 1
        return CUT_LINE.findall(text)


@pytest.mark.parametrize("other", [False, True])
def test_blocks_of_whole_listener_lines_are_counted_without_the_cut_line_pattern(monkeypatch, other):
    pattern = _CountingPattern()
    monkeypatch.setattr(_parse_bulk, "CUT_LINE", pattern)
    rng = random.Random(1)
    lines = [_whole(rng) for _ in range(200)]
    if other:  # another logger's lines among them: a block of several shapes
        lines[::7] = [VARIANTS["another logger"](rng) for _ in lines[::7]]
    block = "".join(line + "\n" for line in lines).encode()
    assert _counted(block) == 0 and pattern.calls == 0


@pytest.mark.parametrize("chunk_bytes", [64, 150, 333, 1000, 4096])
def test_cut_lines_at_block_edges_and_inside_blocks_read_alike_on_both_paths(monkeypatch, chunk_bytes):
    """A log read in bulk in small blocks, with cut lines first and last in blocks and inside them,
    gives the line path's rows, columns, values, ``skipped`` and ``truncated``."""
    rng = random.Random(chunk_bytes)
    lines = []
    for i in range(600):
        kind = "whole" if rng.random() < 0.8 else rng.choice(list(VARIANTS))
        lines.append(VARIANTS[kind](rng) if kind != "whole" else PREFIX + WHOLE.format(3, i + 1, 7, 11, 2))
    data = "".join(line + "\n" for line in lines).encode()
    blocks: list[bytes] = []
    add = _parse_bulk._BulkReader.add

    def spy(self, block):
        blocks.append(block)
        return add(self, block)

    with monkeypatch.context() as m:
        m.setattr(_parse, "BULK_MIN_BYTES", 1 << 60)
        by_line = trainperf.parse_log(lines)
    monkeypatch.setattr(_parse, "BULK_MIN_BYTES", 0)
    monkeypatch.setattr(_parse_bulk, "MIN_LINES", 2)
    monkeypatch.setattr(_parse_bulk, "CHUNK_BYTES", chunk_bytes)
    monkeypatch.setattr(_parse_bulk._BulkReader, "add", spy)
    in_bulk = trainperf.parse_log(lines)
    assert by_line._frame is None and in_bulk._frame is not None
    assert_agree(by_line, in_bulk)
    assert by_line.truncated == len(CUT_LINE.findall(data)) > 0
    edges = [block[: block.find(b"\n") + 1] + block[block.rfind(b"\n", 0, len(block) - 1) + 1 :] for block in blocks]
    cut_edges = [len(CUT_LINE.findall(edge)) for edge in edges]
    assert len(blocks) > 1 and sum(cut_edges) > 0  # some block starts or ends with a cut line


def _pieces(rows: int, segments: int) -> tuple[list, pd.DataFrame]:
    """Two pieces of rows (line numbers, frame, first lines) that interleave in ``segments`` stretches,
    and the rows in line order."""
    import numpy as np

    cuts = np.linspace(0, rows, segments + 1).astype(int)
    owner = np.zeros(rows, dtype=int)
    for i, (a, b) in enumerate(zip(cuts[:-1], cuts[1:], strict=True)):
        owner[a:b] = i % 2
    pieces = []
    for p in (0, 1):
        lines = np.flatnonzero(owner == p)
        frame = pd.DataFrame({"iteration": lines * 10, "score": lines / 7.0})
        if p:
            frame["verdict"] = np.asarray([f"v{i}" for i in lines], dtype=object)
        pieces.append((lines, frame, {}))
    expected = pd.DataFrame({"iteration": np.arange(rows) * 10, "score": np.arange(rows) / 7.0,
                             "verdict": [f"v{i}" if owner[i] else np.nan for i in range(rows)]})
    return pieces, expected


@pytest.mark.parametrize("rows, segments", [(20_000, 3), (20_000, 19), (20_000, 21), (3000, 40), (6, 6)])
def test_pieces_that_interleave_come_out_in_line_order_by_slices_or_by_one_take(rows, segments, monkeypatch):
    """Slices while a stretch holds a thousand rows on average, one ``take`` past that: the same frame."""
    import numpy as np

    pieces, expected = _pieces(rows, segments)
    taken: list[int] = []
    take = pd.DataFrame.take

    def spy(self, indices, *args, **kwargs):
        taken.append(len(indices))
        return take(self, indices, *args, **kwargs)

    monkeypatch.setattr(pd.DataFrame, "take", spy)
    frame = _parse_bulk._in_line_order(pieces, pd, np)
    pd.testing.assert_frame_equal(frame, expected, check_exact=True)
    assert (rows in taken) == (segments * 1000 > rows)


#: Shapes of lines, several of one length (``true``/``null``), one that ends like another (a longer
#: line holding the common shape at its end), and an empty line.
SHAPES = [b"ETL:  ms; iteration ; warm: true;", b"ETL:  ms; iteration ; warm: null;",
          b"x" + b"ETL:  ms; iteration ; warm: true;", b"ETL:  ms; iteration ; warm: true;e-", b"", b"another logger"]


@pytest.mark.parametrize("seed", range(60))
def test_a_block_of_few_odd_lines_is_grouped_as_when_split_into_lines(seed):
    import numpy as np

    rng = random.Random(seed)
    count = rng.randrange(1, 80)
    common = rng.choice(SHAPES[:2])
    odd = rng.sample(range(count), min(count, rng.choice([0, 1, 2, 5, 16, 17, 40])))
    lines = [rng.choice(SHAPES) if i in odd else common for i in range(count)]
    shapes = b"".join(line + b"\n" for line in lines)
    grouped = _parse_bulk._few_odd_lines(shapes, np)
    assert grouped is None or grouped == _parse_bulk._group_lines(shapes)
    middle = lines[count // 2]
    differ = [line for line in lines if line != middle]
    if len(differ) <= 16 and 2 * len(differ) <= count and all(len(line) != len(middle) for line in differ):
        assert grouped is not None  # found without splitting the block: the odd lines are of another length


@pytest.mark.parametrize("between", [0, 1, 2])
def test_a_line_of_the_common_length_between_two_odd_ones_is_looked_at(between):
    """A line of another shape but the common one's length, with odd lines of another length right
    around it, is not taken for the common shape."""
    import numpy as np

    common, same_length, longer = SHAPES[0], SHAPES[1], SHAPES[3]
    lines = [common] * 10 + [longer] + [same_length] * between + [longer] + [common] * 30  # the middle: common
    shapes = b"".join(line + b"\n" for line in lines)
    grouped = _parse_bulk._few_odd_lines(shapes, np)
    assert grouped is None if between else grouped == _parse_bulk._group_lines(shapes)


def test_a_piece_that_starts_right_after_another_ends_is_a_stretch_of_its_own():
    """Three pieces where one piece's last line is right before the next piece's first line, among
    stretches of a thousand rows or more (put in order by slices): every row, once, in line order."""
    import numpy as np

    spans = [np.r_[0:1000, 4000:5000], np.r_[1000:2000], np.r_[2000:4000]]
    pieces = [(lines, pd.DataFrame({"iteration": lines * 10}), {}) for lines in spans]
    frame = _parse_bulk._in_line_order(pieces, pd, np)
    assert frame["iteration"].tolist() == list(range(0, 50_000, 10))
