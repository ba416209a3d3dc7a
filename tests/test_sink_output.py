"""The sinks write, for a fixed set of records, exactly what they wrote before their fast paths:
the files under ``tests/data/sink_output`` (see ``tests/_sink_records.py``), byte for byte, whether
each record is given alone or the writer thread hands them over in batches."""

from __future__ import annotations

from pathlib import Path

import pytest

from _sink_records import OUTPUT, OUTPUT_FILES, fixed_records, write_outputs


@pytest.mark.parametrize("name", OUTPUT_FILES)
def test_each_sink_writes_what_it_wrote_before(tmp_path: Path, name: str) -> None:
    write_outputs(tmp_path, fixed_records())
    assert (tmp_path / name).read_bytes() == (OUTPUT / name).read_bytes()
