"""Parquet files: round trips (one row group per chunk), row group by row group reading, located errors."""

from __future__ import annotations

import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lodtool import LoDTensor, from_nested
from lodtool._jit import thread_limit
from lodtool.errors import (LodDtypeError, LodError, LodFileNotFoundError, LodInputError, LodMemoryError,
                            LodShapeError, LodUsageError)
from tests.strategies import lod_tensors

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
from lodtool.io.parquet import iter_parquet, read_parquet, write_parquet

DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32",
          "float64", "bool"]


def split_top(t: LoDTensor, cuts: list[int]) -> list[LoDTensor]:
    n = len(t)
    bounds = sorted({0, n, *[c % (n + 1) for c in cuts]})
    return [t.slice_level(0, a, b) if t.lod_level else LoDTensor(t.data[a:b])
            for a, b in zip(bounds, bounds[1:]) if b > a]


@settings(max_examples=40)
@given(lod_tensors(min_levels=0, max_levels=3, dtypes=DTYPES), st.lists(st.integers(0, 50), max_size=3))
def test_round_trip_one_row_group_per_chunk(t, cuts):
    try:
        chunks = split_top(t, cuts)
    except LodError:  # a cut leaving a part with nothing below one level has no LoD of its own
        chunks = [t]
    buf = io.BytesIO()
    rows = write_parquet(chunks, buf, name="ids")
    assert rows == sum(len(c) for c in chunks)
    pf = pq.ParquetFile(io.BytesIO(buf.getvalue()))
    assert pf.num_row_groups == len(chunks)
    back = read_parquet(io.BytesIO(buf.getvalue()))
    assert back.equals(t) and back.dtype == t.dtype


def test_reads_row_group_by_row_group(tmp_path, monkeypatch):
    path = tmp_path / "x.parquet"
    table = pa.table({"tokens": pa.array([[i] * (i % 4) for i in range(100)], pa.list_(pa.int32())),
                      "label": pa.array(range(100))})
    pq.write_table(table, path, row_group_size=10)
    reads = []
    real = pq.ParquetFile.read_row_group
    monkeypatch.setattr(pq.ParquetFile, "read_row_group", lambda self, i, **kw: reads.append(i) or real(self, i, **kw))
    chunks = iter_parquet([path], column="tokens")
    first = next(chunks)
    # bounded: the first row group, and at most one per thread read ahead of it (the threads may start
    # those reads in any order)
    assert 0 in reads and set(reads) <= set(range(thread_limit() + 1)) and len(first) == 10
    rest = list(chunks)
    assert sorted(reads) == list(range(10)) and sum(len(c) for c in rest) == 90
    whole = read_parquet(path, column="tokens")
    assert whole.to_nested() == table["tokens"].to_pylist()
    assert whole.offsets[0].dtype == np.int64


def test_one_thread_reads_one_row_group_at_a_time(tmp_path, monkeypatch):
    monkeypatch.setenv("LODTOOL_NUM_THREADS", "1")
    path = tmp_path / "x.parquet"
    pq.write_table(pa.table({"tokens": pa.array([[i] * (i % 3) for i in range(40)])}), path, row_group_size=10)
    reads = []
    real = pq.ParquetFile.read_row_group
    monkeypatch.setattr(pq.ParquetFile, "read_row_group", lambda self, i, **kw: reads.append(i) or real(self, i, **kw))
    chunks = iter_parquet([path])
    next(chunks)
    assert reads == [0]
    list(chunks)
    assert reads == [0, 1, 2, 3]


@pytest.mark.parametrize("as_stream", [False, True])
def test_no_parquet_file_is_read_from_two_threads(tmp_path, monkeypatch, as_stream):
    # a ParquetFile's read cache (and a stream's position) are shared: concurrent reads failed with
    # "ReadRangeCache did not find matching cache entry"
    import threading

    path = tmp_path / "x.parquet"
    table = pa.table({"tokens": pa.array([[i] * (i % 5) for i in range(400)])})
    pq.write_table(table, path, row_group_size=10)
    readers: dict[int, set] = {}
    real = pq.ParquetFile.read_row_group

    def spy(self, i, **kw):
        readers.setdefault(id(self), set()).add(threading.get_ident())
        return real(self, i, **kw)

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", spy)
    source = io.BytesIO(path.read_bytes()) if as_stream else path
    got = read_parquet(source)
    assert got.to_nested() == table["tokens"].to_pylist()
    assert all(len(threads) == 1 for threads in readers.values())
    assert len(readers) == 1 if as_stream else 1 <= len(readers) <= thread_limit()  # a file per reading thread


def test_a_damaged_row_group_is_named_and_the_ones_before_it_come_first(tmp_path):
    path = tmp_path / "x.parquet"
    pq.write_table(pa.table({"tokens": pa.array([[i, i + 1] for i in range(60)])}), path, row_group_size=10,
                   compression="zstd")
    at = pq.ParquetFile(path).metadata.row_group(3).column(0).data_page_offset
    raw = bytearray(path.read_bytes())
    raw[at:at + 16] = b"\xff" * 16  # the page header of row group 3
    path.write_bytes(bytes(raw))
    got = []
    with pytest.raises(LodInputError, match=r"x\.parquet: row group 3, column 'tokens': cannot read it"):
        for chunk in iter_parquet([path]):
            got.append(len(chunk))
    assert sum(got) <= 30  # only the row groups before it, in order


def test_level_names_survive_the_file():
    t = from_nested([[[1], [2, 3]], [[4]]], level_names=["doc", "sentence"])
    buf = io.BytesIO()
    write_parquet([t], buf, name="ids")
    assert read_parquet(io.BytesIO(buf.getvalue())).level_names == ("doc", "sentence")


def parquet_file(tmp_path, table, **kw):
    path = tmp_path / "bad.parquet"
    pq.write_table(table, path, **kw)
    return path


def test_a_null_names_file_row_group_column_and_global_row(tmp_path):
    table = pa.table({"ids": pa.array([[1], [2], [3], [4, None]], pa.list_(pa.int64()))})
    path = parquet_file(tmp_path, table, row_group_size=2)
    with pytest.raises(LodInputError, match=rf"^{path}: row group 1, column 'ids': row 3 \(branch <3,1>\) is null"):
        list(iter_parquet([path]))


def test_columns_that_are_not_lists_of_numbers(tmp_path):
    path = parquet_file(tmp_path, pa.table({"text": ["a", "b"], "n": [1, 2]}))
    with pytest.raises(LodDtypeError, match=rf"^{path}: row group 0, column 'text': holds string, not numbers"):
        read_parquet(path, column="text")
    with pytest.raises(LodInputError, match=rf"^{path}: has 2 columns \(text, n\); choose one with column=\.\.\."):
        read_parquet(path)
    with pytest.raises(LodInputError, match=r"has no column 'tokens' \(columns: text, n\)"):
        read_parquet(path, column="tokens")
    plain = read_parquet(path, column="n")  # a numeric column is a 0-level tensor: its rows
    assert plain.lod_level == 0 and plain.data.tolist() == [1, 2]


def test_not_parquet_and_missing(tmp_path):
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(LodInputError, match=rf"^{junk}: not a Parquet file"):
        read_parquet(junk)
    with pytest.raises(LodFileNotFoundError):
        read_parquet(tmp_path / "none.parquet")
    with pytest.raises(LodUsageError, match="unknown Parquet compression"):
        write_parquet([LoDTensor(np.arange(2))], io.BytesIO(), compression="rar")


# -- the CLI: pack from Parquet, unpack to it ----------------------------------------------------------
def cli(*args):
    from click.testing import CliRunner

    from lodtool.cli.main import cli as main

    return CliRunner().invoke(main, [str(a) for a in args])


def test_cli_round_trip(tmp_path):
    src = tmp_path / "corpus.parquet"
    tokens = pa.array([[[1, 2], [3]], [[4, 5, 6]], [[7], [], [8, 9]], [[10]]], pa.list_(pa.list_(pa.int32())))
    pq.write_table(pa.table({"tokens": tokens, "label": [0, 1, 0, 1]}), src, row_group_size=3)
    r = cli("pack", src, "--column", "tokens", "-o", tmp_path / "c.lod.h5", "--level-names", "doc,sentence")
    assert r.exit_code == 0, r.output
    r = cli("unpack", tmp_path / "c.lod.h5", "-o", tmp_path / "back.parquet")  # the format from the extension
    assert r.exit_code == 0, r.output
    back = pq.read_table(tmp_path / "back.parquet")
    assert back.column("tensor").to_pylist() == tokens.to_pylist()
    assert pq.ParquetFile(tmp_path / "back.parquet").num_row_groups == 1
    again = read_parquet(tmp_path / "back.parquet")
    assert again.level_names == ("doc", "sentence") and again.dtype == np.int32
    r = cli("pack", tmp_path / "back.parquet", "-o", tmp_path / "d.lod.h5")
    assert r.exit_code == 0, r.output
    from lodtool import load

    assert load(tmp_path / "d.lod.h5").equals(load(tmp_path / "c.lod.h5"))


def test_cli_errors_are_one_line(tmp_path):
    src = tmp_path / "text.parquet"
    pq.write_table(pa.table({"text": ["a", "b"]}), src)
    r = cli("pack", src, "-o", tmp_path / "x.lod.h5")
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert r.exit_code == 1 and len(lines) == 1 and "Traceback" not in r.output
    assert f"{src}: row group 0, column 'text': holds string, not numbers" in lines[0]
    assert not (tmp_path / "x.lod.h5").exists()
    r = cli("pack", tmp_path / "x.json", "--column", "tokens", "-o", tmp_path / "y.lod.h5")
    assert r.exit_code != 0


def test_cli_lod_level_and_dtype_options(tmp_path):
    src = tmp_path / "v.parquet"
    pq.write_table(pa.table({"v": pa.array([[1, 300], [2]])}), src)
    r = cli("pack", src, "--lod-level", "2", "-o", tmp_path / "a.lod.h5")
    assert r.exit_code == 1 and f"{src}: holds 1 LoD level(s), not the 2 asked for" in r.output
    r = cli("pack", src, "--dtype", "uint8", "-o", tmp_path / "b.lod.h5")
    assert r.exit_code == 1 and f"{src}: value 300 does not fit in uint8" in r.output
    r = cli("pack", src, "--dtype", "int16", "--lod-level", "1", "-o", tmp_path / "c.lod.h5")
    assert r.exit_code == 0, r.output
    from lodtool import load

    assert load(tmp_path / "c.lod.h5").dtype == np.int16


def test_a_file_of_no_rows_is_empty_input(tmp_path):
    path = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"ids": pa.array([], pa.list_(pa.int64()))}), path)
    r = cli("pack", path, "-o", tmp_path / "e.lod.h5")
    assert r.exit_code == 1 and f"{path}: empty input (column 'ids' has no rows)" in r.output


# -- hostile files: claims checked before decoding, and what lodtool writes reads back everywhere --------------------
def test_a_dictionary_rle_bomb_is_refused_under_max_memory_and_read_within_it(tmp_path):
    n = 1 << 22  # a few hundred bytes of dictionary and RLE runs for 32 MiB of int64
    path = tmp_path / "bomb.parquet"
    arr = pa.LargeListArray.from_arrays(pa.array([0, n], pa.int64()), pa.array(np.zeros(n, np.int64)))
    pq.write_table(pa.table({"t": arr}), path, use_dictionary=True, compression="zstd")
    assert path.stat().st_size < 4096
    with pytest.raises(LodMemoryError, match=rf"^{path}: row group 0, column 't': decoding its 1 row needs "
                                             r"[\d,]+ bytes, above the memory limit of 8,388,608 \(raise it with "
                                             r"max_memory=\.\.\.\)$"):
        list(iter_parquet([path], max_memory=8 << 20))
    t = read_parquet(path)  # within the budget: read as it is
    assert t.lod == [[0, n]] and not t.data.any()


def test_a_fixed_size_list_of_2_22_in_one_row_is_checked_before_decoding(tmp_path):
    path = tmp_path / "wide.parquet"
    fsl = pa.FixedSizeListArray.from_arrays(pa.array(np.zeros(1 << 22, np.int8)), 1 << 22)
    pq.write_table(pa.table({"t": pa.LargeListArray.from_arrays(pa.array([0, 1], pa.int64()), fsl)}), path)
    with pytest.raises(LodMemoryError, match=rf"^{path}: row group 0, column 't': decoding its 1 row needs"):
        list(iter_parquet([path], max_memory=4 << 20))
    assert read_parquet(path).element_shape == (1 << 22,)


def test_a_footer_claiming_2_40_rows_is_refused_before_decoding(tmp_path):
    from tests.hostile_io import parquet_claiming_rows

    path = tmp_path / "rows.parquet"
    path.write_bytes(parquet_claiming_rows(1 << 40))
    with pytest.raises(LodMemoryError, match=rf"^{path}: row group 0, column 't': decoding its 1,099,511,627,776 rows "
                                             r"needs [\d,]+ bytes, above the memory limit of 1,073,741,824"):
        list(iter_parquet([path], max_memory=1 << 30))


def test_pages_claiming_more_than_memory_are_a_memory_error_naming_the_row_group(tmp_path, monkeypatch):
    path = tmp_path / "x.parquet"
    pq.write_table(pa.table({"t": pa.array([[1, 2], [3]])}), path)

    def no_memory(self, *args, **kwargs):
        raise pa.ArrowMemoryError("malloc of size 3221225472 failed")

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", no_memory)
    with pytest.raises(LodMemoryError, match=rf"^{path}: row group 0, column 't': decoding it asks for more memory"):
        read_parquet(path)


def test_files_mark_list_items_required_so_awkward_reads_no_option_type(tmp_path):
    t = LoDTensor(np.arange(12, dtype=np.float32).reshape(6, 2), [[0, 2, 3], [0, 1, 3, 6]])
    path = tmp_path / "r.parquet"
    write_parquet([t], path, name="x")
    schema = str(pq.ParquetFile(path).schema)
    assert "required float field_id=-1 element" in schema and "optional" not in schema
    assert pq.ParquetFile(path).schema.column(0).max_definition_level == 3  # three repeated levels, no optional one
    assert read_parquet(path).equals(t)
    ak = pytest.importorskip("awkward")
    arr = ak.from_parquet(str(path))
    assert str(arr.type) == "2 * {x: var * var * 2 * float32}"
    # a column written nullable, but holding no null, is read as it is
    nullable = tmp_path / "n.parquet"
    pq.write_table(pa.table({"x": pa.array([[1, 2], [3]], pa.list_(pa.int64()))}), nullable)
    assert read_parquet(nullable).lod == [[0, 2, 3]]


@pytest.mark.parametrize("shape", [(0,), (0, 3), (3, 0), (1, 0, 1)])
def test_an_element_shape_with_a_0_is_refused_before_writing(tmp_path, shape):
    t = LoDTensor(np.zeros((5, *shape), np.float32), [[0, 2, 5]])
    with pytest.raises(LodShapeError, match=r"^Parquet cannot hold element shape .*write arrow or npz instead"):
        write_parquet([t], io.BytesIO())
    from lodtool import load, save

    save(tmp_path / "z.lod.h5", t)
    r = cli("unpack", tmp_path / "z.lod.h5", "--to", "parquet", "-o", tmp_path / "z.parquet")
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert r.exit_code == 1 and len(lines) == 1 and "Parquet cannot hold element shape" in lines[0], r.output
    assert not (tmp_path / "z.parquet").exists()
    r = cli("unpack", tmp_path / "z.lod.h5", "--to", "arrow", "-o", tmp_path / "z.arrow")  # the way that works
    assert r.exit_code == 0, r.output
    assert cli("pack", tmp_path / "z.arrow", "-o", tmp_path / "back.lod.h5").exit_code == 0
    assert load(tmp_path / "back.lod.h5").equals(t)


def test_row_groups_decode_at_once_only_as_many_as_fit_max_memory(tmp_path, monkeypatch):
    import threading
    import time

    monkeypatch.setenv("LODTOOL_NUM_THREADS", "4")
    path = tmp_path / "x.parquet"
    pq.write_table(pa.table({"tokens": pa.array([[i] * 50 for i in range(80)])}), path, row_group_size=10)
    from lodtool.io.parquet import row_group_claims

    largest = max(n for _, n in row_group_claims(pq.ParquetFile(path).metadata, "tokens"))
    lock, now, peak = threading.Lock(), [0], [0]
    real = pq.ParquetFile.read_row_group

    def counted_read(self, i, **kw):
        with lock:
            now[0] += 1
            peak[0] = max(peak[0], now[0])
        time.sleep(0.02)  # long enough for the reads in flight to overlap
        try:
            return real(self, i, **kw)
        finally:
            with lock:
                now[0] -= 1

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", counted_read)
    for limit, most in ((largest, 1), (2 * largest, 2), (None, 4)):
        peak[0] = 0
        assert sum(len(c) for c in iter_parquet([path], max_memory=limit)) == 80
        assert 1 <= peak[0] <= most, (limit, peak[0])
    assert peak[0] > 1  # without a limit they do overlap, so the bounds above mean something


@pytest.mark.parametrize("table, options", [
    (pa.table({"t": pa.array([[1, 2], [], [3]] * 20), "y": pa.array([True, False, None] * 20),
               "s": pa.array(["a", None, "ccc"] * 20)}), {"row_group_size": 7}),
    (pa.table({"t": pa.array([[[0.5]], [[1.5, 2.5], []]] * 5, pa.large_list(pa.list_(pa.float32())))}),
     {"compression": "zstd", "use_dictionary": False, "write_page_index": True}),
    (pa.table({"t": pa.array([[1.0, 2.0]] * 9, pa.list_(pa.float64(), 2)),
               "m": pa.array([{"k": 1}] * 9, pa.map_(pa.string(), pa.int8()))}),
     {"store_schema": False, "row_group_size": 4, "write_statistics": False}),
])
def test_the_footer_claims_are_the_ones_pyarrow_reads(tmp_path, table, options):
    """The claims come from the footer's own bytes (pyarrow aborts on some column metadata): they must agree."""
    from lodtool.io.parquet import row_group_claims

    path = tmp_path / "x.parquet"
    pq.write_table(table, path, **options)
    metadata = pq.ParquetFile(path).metadata
    widths = {"BOOLEAN": 1, "INT32": 4, "INT64": 8, "FLOAT": 4, "DOUBLE": 8}
    want = []
    for g in range(metadata.num_row_groups):
        rg = metadata.row_group(g)
        total = 8 * (rg.num_rows + 1)
        for j in range(rg.num_columns):
            c = rg.column(j)
            if c.path_in_schema.split(".")[0] == "t":
                total += c.num_values * (widths[c.physical_type] + 4) + c.total_uncompressed_size
        want.append((rg.num_rows, total))
    assert row_group_claims(metadata, "t") == want


def test_column_metadata_pyarrow_aborts_on_is_a_located_error(tmp_path):
    """A size-statistics histogram of the wrong length: pyarrow's RowGroupMetaData.column() would abort."""
    path = tmp_path / "histogram.parquet"
    pq.write_table(pa.table({"t": pa.array([[1, 2], [3]])}), path)
    blob = path.read_bytes()
    size = int.from_bytes(blob[-8:-4], "little")
    footer = blob[-8 - size:-8]
    histogram = b"\x29\x26\x04\x02"  # SizeStatistics' repetition level histogram: a list of 2 i64, [2, 1]
    assert footer.count(histogram) == 1
    footer = footer.replace(histogram, b"\x29\x76\x04\x02" + bytes(5))  # now 7 entries
    path.write_bytes(blob[:-8 - size] + footer + len(footer).to_bytes(4, "little") + b"PAR1")
    with pytest.raises(LodInputError, match=rf"^{path}: row group 0, column 't': cannot read it \(Repetition level "
                                            r"histogram size mismatch"):
        list(iter_parquet([path], max_memory=1 << 30))
