"""Arrow IPC / Feather files: round trips (one record batch per chunk), memory-mapped reading, located errors."""

from __future__ import annotations

import io

import numpy as np
import pytest
from hypothesis import given, settings

from lodtool import LoDTensor
from lodtool.errors import LodInputError
from tests.strategies import lod_tensors

pa = pytest.importorskip("pyarrow")
import pyarrow.feather as feather  # noqa: E402

from lodtool.io.arrow import iter_ipc, read_ipc, write_ipc  # noqa: E402


@settings(max_examples=40)
@given(lod_tensors(min_levels=0, max_levels=3, dtypes=["int8", "uint64", "float16", "float64", "bool"]))
def test_round_trip_file_and_stream(t):
    for stream in (False, True):
        buf = io.BytesIO()
        write_ipc([t, t], buf, name="x", stream=stream)
        parts = list(iter_ipc([io.BytesIO(buf.getvalue())]))
        assert len(parts) == 2 and all(p.equals(t) for p in parts)


def test_memory_mapped_chunks_view_the_file(tmp_path):
    t = LoDTensor(np.arange(1000, dtype=np.int64), [[0, 10, 1000]])
    path = tmp_path / "x.arrow"
    with open(path, "wb") as f:
        write_ipc([t], f, name="ids")
    back = read_ipc(path)
    assert back.equals(t) and not back.data.flags.owndata and not back.data.flags.writeable


def test_feather_files_written_by_pyarrow(tmp_path):
    path = tmp_path / "x.feather"
    feather.write_feather(pa.table({"ids": pa.array([[1, 2], [], [3]]), "y": [1, 2, 3]}), path)
    assert read_ipc(path, column="ids").lod == [[0, 2, 2, 3]]


def test_errors_name_the_file_and_row(tmp_path):
    path = tmp_path / "x.arrow"
    table = pa.table({"ids": pa.array([[1], None])})
    with pa.ipc.new_file(str(path), table.schema) as w:
        w.write_table(table)
    with pytest.raises(LodInputError, match=rf"^{path}: record batch 0, column 'ids': row 1 is null"):
        read_ipc(path)
    junk = tmp_path / "junk.arrow"
    junk.write_bytes(b"not arrow at all")
    with pytest.raises(LodInputError, match=rf"^{junk}: not an Arrow IPC file or stream"):
        read_ipc(junk)
