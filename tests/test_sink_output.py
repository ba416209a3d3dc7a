"""The sinks write, for a fixed set of records, exactly what they wrote before their fast paths:
the files under ``tests/data/sink_output`` (see ``tests/_sink_records.py``), byte for byte, whether
each record is given alone or the writer thread hands them over in batches."""

from __future__ import annotations

from pathlib import Path

import pytest

from _sink_records import OUTPUT, OUTPUT_FILES, fixed_records, write_outputs


@pytest.mark.parametrize("batch", [0, 1, 7, 64], ids=["one by one", "batches of 1", "of 7", "of 64"])
@pytest.mark.parametrize("name", OUTPUT_FILES)
def test_each_sink_writes_what_it_wrote_before(tmp_path: Path, name: str, batch: int) -> None:
    write_outputs(tmp_path, fixed_records(), batch)
    assert (tmp_path / name).read_bytes() == (OUTPUT / name).read_bytes()
