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
import pyarrow.feather as feather

from lodtool.io.arrow import iter_ipc, read_ipc, write_ipc


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


# -- the CLI: pack from Arrow IPC, unpack to it --------------------------------------------------------
def cli(*args):
    from click.testing import CliRunner

    from lodtool.cli.main import cli as main

    return CliRunner().invoke(main, [str(a) for a in args])


def test_cli_round_trip(tmp_path):
    src = tmp_path / "x.feather"
    feather.write_feather(pa.table({"emb": pa.array([[[0.5, 1.0]], [[2.0, 3.0], [4.0, 5.0]]],
                                                    pa.large_list(pa.list_(pa.float32(), 2)))}), src)
    r = cli("pack", src, "-o", tmp_path / "e.lod.h5", "--name", "emb")
    assert r.exit_code == 0, r.output
    from lodtool import load

    t = load(tmp_path / "e.lod.h5")
    assert t.lod == [[0, 1, 3]] and t.element_shape == (2,) and t.dtype == np.float32
    r = cli("unpack", tmp_path / "e.lod.h5", "--to", "arrow", "-o", tmp_path / "back.arrow")
    assert r.exit_code == 0, r.output
    with pa.memory_map(str(tmp_path / "back.arrow")) as f:
        table = pa.ipc.open_file(f).read_all()
    assert table.column("emb").to_pylist() == [[[0.5, 1.0]], [[2.0, 3.0], [4.0, 5.0]]]
    assert read_ipc(tmp_path / "back.arrow").equals(t)


def test_cli_null_is_a_one_line_error(tmp_path):
    src = tmp_path / "n.arrow"
    table = pa.table({"ids": pa.array([[1], [2, None]])})
    with pa.ipc.new_file(str(src), table.schema) as w:
        w.write_table(table)
    r = cli("pack", src, "-o", tmp_path / "n.lod.h5")
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert r.exit_code == 1 and len(lines) == 1, r.output
    assert f"{src}: record batch 0, column 'ids': row 1 (branch <1,1>) is null" in lines[0]


def test_a_file_of_no_batches_is_empty_input(tmp_path):
    path = tmp_path / "empty.arrow"
    with pa.ipc.new_file(str(path), pa.schema([("ids", pa.large_list(pa.int64()))])):
        pass
    with pytest.raises(LodInputError, match=rf"^{path}: empty input \(column 'ids' has no rows\)"):
        read_ipc(path)
