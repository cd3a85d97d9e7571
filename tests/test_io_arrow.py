"""Arrow IPC / Feather files: round trips (one record batch per chunk), memory-mapped reading, located errors."""

from __future__ import annotations

import io

import numpy as np
import pytest
from hypothesis import given, settings

from lodtool import LoDTensor
from lodtool.errors import LodError, LodInputError, LodMemoryError
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


# -- hostile files: offsets and views out of range, compressed buffers that lie ------------------------------------
@pytest.mark.parametrize("offsets, says", [
    ([-5, 3, 7], "Negative offsets in list array"),
    ([1 << 40, 3, 7], "First or last list offset out of bounds"),
    ([1 << 40, (1 << 40) + 3, (1 << 40) + 7], "First or last list offset out of bounds"),
    ([0, 3, 1 << 40], r"Length spanned by list offsets \(1099511627776\) larger than values array \(length 7\)"),
    ([0, 5, -2], "Negative offsets in list array"),
    ([0, 9, 3], r"level 0: offset\[2\]=3 < offset\[1\]=9 \(offsets must not decrease\)"),
])
def test_list_offsets_out_of_range_are_located_errors(tmp_path, offsets, says):
    """Checked (Arrow's own validation, then the LoD's) before any value is sliced: the IPC reader trusts them."""
    from tests.hostile_io import list_file

    path = tmp_path / "bad.arrow"
    path.write_bytes(list_file(offsets))
    with pytest.raises(LodError, match=rf"^{path}: record batch 0, column 't': {says}") as err:
        read_ipc(path)
    assert "\n" not in str(err.value)
    r = cli("pack", path, "-o", tmp_path / "x.lod.h5")
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert r.exit_code == 1 and len(lines) == 1 and "internal error" not in r.output, r.output
    assert lines[0].startswith(f"lodtool: error: {path}: record batch 0, column 't': ")
    assert not (tmp_path / "x.lod.h5").exists()


@pytest.mark.parametrize("starts, sizes, row", [
    ([0, 20], [3, 4], 1),  # starts past the values
    ([-3, 3], [3, 4], 0),  # starts before them
    ([0, 3], [3, -4], 1),  # a negative size
    ([0, 3], [3, 1 << 40], 1),  # a size far past the values (in order: once a view)
    ([3, 0], [4, 1 << 28], 1),  # out of order: once a gather of 2**28 values
    ([3, 0], [4, 1 << 50], 1),
])
def test_list_views_out_of_range_are_located_errors(tmp_path, starts, sizes, row):
    from tests.hostile_io import list_view_file

    path = tmp_path / "view.arrow"
    path.write_bytes(list_view_file(starts, sizes))
    with pytest.raises(LodInputError, match=rf"^{path}: record batch 0, column 't': row {row}: its list view starts "
                                            rf"at {starts[row]:,} and holds {sizes[row]:,} values, outside the 10"):
        read_ipc(path)


def test_a_gather_of_list_views_is_held_to_max_memory():
    # overlapping views, each in range: the gather is real, but it must fit the limit
    views = pa.LargeListViewArray.from_arrays(pa.array([5, 0] * 500, pa.int64()), pa.array([5, 10] * 500, pa.int64()),
                                              pa.array(np.arange(10)))
    blob = io.BytesIO(_ipc(views))
    with pytest.raises(LodMemoryError, match=r"^<stream>: record batch 0, column 't': gathering the list views' "
                                             r"7,500 values needs 120,000 bytes, above the memory limit of 100,000"):
        list(iter_ipc([blob], max_memory=100_000))
    t = read_ipc(io.BytesIO(_ipc(views)))
    assert t.n_rows == 7500 and t.data[:15].tolist() == [5, 6, 7, 8, 9, *range(10)]


def _ipc(arr) -> bytes:
    from tests.hostile_io import ipc_bytes

    return ipc_bytes(arr)


@pytest.mark.parametrize("stream", [False, True])
def test_a_compressed_buffer_claiming_too_much_is_named_never_decoded(tmp_path, stream):
    from tests.hostile_io import lz4_claiming

    path = tmp_path / ("lz4.arrows" if stream else "lz4.arrow")
    path.write_bytes(lz4_claiming(1 << 40, stream=stream))
    with pytest.raises(LodError, match=rf"^{path}: record batch 0: "):
        read_ipc(path)


@pytest.mark.parametrize("claim", [1 << 40, 3 << 30])
def test_lz4_claims_under_an_address_space_limit_are_one_line_errors(tmp_path, claim):
    """What the fuzzer saw: under a 3 GiB address space the claim is a memory error naming the batch."""
    from tests.hostile_io import lz4_claiming
    from tests.test_hostile_round2 import run_process

    path = tmp_path / "lz4.arrow"
    path.write_bytes(lz4_claiming(claim))
    proc = run_process(["pack", str(path), "-o", str(tmp_path / "x.lod.h5")], address_space=3 << 30)
    assert proc.returncode == 1, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"lodtool: error: {path}: record batch 0: "), proc.stderr
    assert "internal error" not in lines[0] and not (tmp_path / "x.lod.h5").exists()


def test_files_mark_list_items_required(tmp_path):
    """A LoD tensor has no missing values: lodtool's IPC files say so, and awkward reads no option type."""
    t = LoDTensor(np.arange(12, dtype=np.float32).reshape(6, 2), [[0, 2, 3], [0, 1, 3, 6]])
    path = tmp_path / "r.arrow"
    with open(path, "wb") as f:
        write_ipc([t], f, name="x")
    field = pa.ipc.open_file(str(path)).schema.field("x")
    assert str(field.type) == "large_list<item: large_list<item: fixed_size_list<item: float not null>[2] not null> " \
                              "not null>" and not field.nullable
    assert read_ipc(path).equals(t)
    ak = pytest.importorskip("awkward")
    assert "?" not in str(ak.from_feather(str(path)).type)


@pytest.mark.parametrize("stream", [False, True])
def test_a_schema_arrow_cannot_decode_is_a_located_error(tmp_path, stream):
    """Any of Arrow's errors (here ArrowNotImplementedError: a 4-bit integer) means a file it cannot read."""
    from tests.hostile_io import ipc_bytes

    arr = pa.LargeListArray.from_arrays(pa.array([0, 3, 7], pa.int64()), pa.array(np.arange(7)))
    blob = ipc_bytes(arr, stream=stream)
    path = tmp_path / "int4.arrow"
    path.write_bytes(blob.replace(b"\x01\x40\x00\x00\x00", b"\x01\x04\x00\x00\x00"))  # Int{is_signed, bitWidth=4}
    with pytest.raises(LodInputError, match=rf"^{path}: not an Arrow IPC file or stream \(Integers with less than 8 "
                                            r"bits not implemented\)"):
        read_ipc(path)


@pytest.mark.parametrize("length", [-1, 1 << 40, 100])
def test_a_batch_whose_lengths_lie_is_refused_before_it_is_read(tmp_path, length):
    """The IPC reader trusts a field node's length: a negative one, or one past its buffers, is caught first."""
    from tests.hostile_io import VALUES, ipc_bytes, patched_ints

    arr = pa.LargeListArray.from_arrays(pa.array([0, 3, 7], pa.int64()), pa.array(VALUES[:7]))
    path = tmp_path / "nodes.arrow"
    path.write_bytes(patched_ints(ipc_bytes(arr), [2, 0, 7, 0], [2, 0, length, 0]))  # the field nodes
    with pytest.raises(LodInputError, match=rf"^{path}: record batch 0, column 't': "):
        read_ipc(path)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_compressed_batches_are_held_to_max_memory_before_they_are_decoded(tmp_path, stream, codec):
    """A few kB of compressed zeros inflate to 32 MiB: checked batch by batch from what each buffer states."""
    small = pa.LargeListArray.from_arrays(pa.array([0, 2], pa.int64()), pa.array([1, 2]))
    big = pa.LargeListArray.from_arrays(pa.array([0, 1 << 22], pa.int64()), pa.array(np.zeros(1 << 22, np.int64)))
    path = tmp_path / ("z.arrows" if stream else "z.arrow")
    schema = pa.schema([("t", small.type)])
    options = pa.ipc.IpcWriteOptions(compression=codec)
    with pa.OSFile(str(path), "wb") as f, (pa.ipc.new_stream if stream else pa.ipc.new_file)(f, schema,
                                                                                              options=options) as w:
        for arr in (small, big, small):
            w.write_batch(pa.RecordBatch.from_arrays([arr], schema=schema))
    assert path.stat().st_size < 1 << 20
    chunks = iter_ipc([path], max_memory=8 << 20)
    assert next(chunks).lod == [[0, 2]]  # batch 0 fits
    with pytest.raises(LodMemoryError, match=rf"^{path}: record batch 1: inflating its compressed buffers needs "
                                             r"33,554,4\d\d bytes, above the memory limit of 8,388,608"):
        next(chunks)
    assert [c.lod for c in iter_ipc([path], max_memory=64 << 20)] == [[[0, 2]], [[0, 1 << 22]], [[0, 2]]]


def test_a_column_name_that_is_not_utf8_is_a_located_error(tmp_path):
    from tests.hostile_io import ipc_bytes

    blob = ipc_bytes(pa.array([[1, 2]], pa.large_list(pa.int64())), name="tensorname")
    path = tmp_path / "name.arrow"
    path.write_bytes(blob.replace(b"tensorname", b"tensor\xf4\xf4me"))
    with pytest.raises(LodInputError, match=rf"^{path}: a column name is not UTF-8 text"):
        read_ipc(path)
