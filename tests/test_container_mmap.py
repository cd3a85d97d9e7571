"""Rows read from a memory map of the file give exactly libhdf5's values, and anything unusual goes to libhdf5."""

from __future__ import annotations

import gc
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lodtool import LoDTensor
from lodtool.container import _h5, _mmap, open_file, save
from lodtool.errors import LodFormatError


@pytest.fixture(scope="module")
def numba_loaded():
    from lodtool._jit import numba_module

    numba_module()


def _file(tmp_path, data, name="x.h5", chunks=(4,), **kw):
    path = str(tmp_path / name)
    with h5py.File(path, "w", **{k: v for k, v in kw.items() if k == "userblock_size"}) as f:
        f.create_dataset("d", data=data, chunks=chunks, **{k: v for k, v in kw.items() if k != "userblock_size"})
    return path


@pytest.mark.parametrize("layout", ["contiguous", "chunked", "chunked+fletcher32"])
@settings(max_examples=30, deadline=None)
@given(n=st.integers(4, 200), span=st.tuples(st.integers(0, 200), st.integers(0, 200)),
       dtype=st.sampled_from(["int64", "int8", "float32", "uint16", "complex64", "bool"]),
       width=st.sampled_from([(), (3,)]))
def test_mapped_reads_equal_libhdf5(tmp_path_factory, numba_loaded, layout, n, span, dtype, width):
    data = (np.arange(n * int(np.prod(width)), dtype=np.int64) * 7 - 50).astype(dtype).reshape((n,) + width)
    kw = {"chunks": None} if layout == "contiguous" else {"chunks": (4,) + width, "fletcher32": "f" in layout}
    path = _file(tmp_path_factory.mktemp("d"), data, **kw)
    start, stop = min(span[0], n), min(max(span), n)
    with h5py.File(path, "r") as f:
        ds = f["d"]
        assert _mmap.mapping(ds) is not None
        rows = _h5.read_rows(ds, start, stop)
        np.testing.assert_array_equal(rows, ds[start:stop])
        assert rows.dtype == ds.dtype and rows.shape == (stop - start,) + width
        one_run = stop > start and (layout == "contiguous" or start // 4 == (stop - 1) // 4)
        if one_run:  # a view of the map: no copy, and nobody writes through it
            assert not rows.flags.owndata and not rows.flags.writeable


def test_an_uncompressed_container_reads_its_data_and_offsets_from_the_map(tmp_path):
    t = LoDTensor(np.arange(400_000, dtype=np.int64) % 977, [[0, 40_000, 400_000]])
    path = str(tmp_path / "t.lod.h5")
    save(path, t, compression="none")
    with open_file(path) as f:
        x = f.tensor()
        np.testing.assert_array_equal(x.read().data, t.data)
        assert x.branch(1).data.shape == (360_000,)
        assert _mmap.mapping(x._data) is not None and all(_mmap.mapping(ds) is not None for ds in x._lod)


def test_a_damaged_chunk_is_refused_with_libhdf5s_message(tmp_path, numba_loaded):
    data = np.arange(400, dtype=np.int64)
    path = _file(tmp_path, data, fletcher32=True)
    with h5py.File(path, "r") as f:
        info = f["d"].id.get_chunk_info(20)
    with open(path, "r+b") as fh:
        fh.seek(info.byte_offset + 3)
        byte = fh.read(1)
        fh.seek(info.byte_offset + 3)
        fh.write(bytes([byte[0] ^ 0xFF]))
    with h5py.File(path, "r") as f:
        assert _mmap.mapping(f["d"]).rows(80, 84) is None  # the check failed: libhdf5 reads, and refuses
        np.testing.assert_array_equal(_h5.read_rows(f["d"], 0, 80), data[:80])  # the chunks before are sound
        with pytest.raises(LodFormatError), _h5.translate(path):
            _h5.read_rows(f["d"], 78, 86)


def test_with_libhdf5s_sum_the_map_checks_its_first_read_without_numba(tmp_path):
    path = _file(tmp_path, np.arange(40_000, dtype=np.int64), fletcher32=True)
    code = ("import sys, h5py; from lodtool.container import _h5, _fletcher\n"
            "assert _fletcher.native() is not None  # found in h5py's libhdf5 on Linux\n"
            f"f = h5py.File({path!r}, 'r'); ds = f['d']\n"
            "first = _h5.read_rows(ds, 8, 12)\n"
            "assert not first.flags.owndata and (first == range(8, 12)).all()  # checked here, read from the map\n"
            "assert (_h5.read_rows(ds, 0, 40000) == range(40000)).all() and 'numba' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_without_numba_libhdf5_checks_each_chunk_once_then_the_map_serves_it(tmp_path):
    path = _file(tmp_path, np.arange(40_000, dtype=np.int64), fletcher32=True)
    code = ("import sys, h5py; from lodtool.container import _h5, _mmap, _fletcher\n"
            "_fletcher._native = None  # neither libhdf5's sum nor Numba at hand\n"
            f"f = h5py.File({path!r}, 'r'); ds = f['d']\n"
            "first = _h5.read_rows(ds, 8, 12)\n"
            "assert first.flags.owndata  # libhdf5 read (and checked) the chunk\n"
            "again = _h5.read_rows(ds, 8, 12)\n"
            "assert not again.flags.owndata and (again == range(8, 12)).all()\n"
            "assert (_h5.read_rows(ds, 0, 40000) == range(40000)).all() and 'numba' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_unwritten_chunks_read_as_the_fill_value(tmp_path):
    path = str(tmp_path / "x.h5")
    with h5py.File(path, "w") as f:
        ds = f.create_dataset("d", shape=(400,), dtype="int64", chunks=(4,), fillvalue=-9)
        ds[:200] = np.arange(200)
        ds[300:] = np.arange(300, 400)
    with h5py.File(path, "r") as f:
        assert _mmap.mapping(f["d"]) is None
        rows = _h5.read_rows(f["d"], 0, 400)
    assert (rows[200:300] == -9).all() and (rows[:200] == np.arange(200)).all()


def test_chunks_stored_out_of_order(tmp_path, numba_loaded):
    path = str(tmp_path / "x.h5")
    with h5py.File(path, "w") as f:
        ds = f.create_dataset("d", shape=(400,), dtype="int32", chunks=(4,), fletcher32=True)
        for start in range(396, -1, -4):  # last chunk first: no two neighbours adjacent in the file
            ds[start:start + 4] = np.arange(start, start + 4)
    with h5py.File(path, "r") as f:
        assert _mmap.mapping(f["d"]) is not None
        np.testing.assert_array_equal(_h5.read_rows(f["d"], 1, 399), np.arange(1, 399))


@pytest.mark.parametrize("chunks", [None, (4,)])
def test_a_user_block_shifts_nothing(tmp_path, chunks):
    data = np.arange(400, dtype=np.int64)
    path = _file(tmp_path, data, chunks=chunks, userblock_size=512)
    with h5py.File(path, "r") as f:
        np.testing.assert_array_equal(_h5.read_rows(f["d"], 0, 400), data)
        np.testing.assert_array_equal(_h5.read_rows(f["d"], 5, 9), data[5:9])


@pytest.mark.parametrize("make", [
    lambda p, d: _file(p, d, chunks=(4, 2), compression="gzip"),  # a codec: libhdf5 decodes it
    lambda p, d: _file(p, d, chunks=(4, 1)),  # a row spread over chunks
    lambda p, d: _file(p, d.astype(">i8"), chunks=(4, 2)),  # big-endian: converted by libhdf5
    lambda p, d: _file(p, d.astype(">i8"), chunks=None),
])
def test_what_is_not_plain_bytes_goes_to_libhdf5(tmp_path, make):
    data = np.arange(800, dtype=np.int64).reshape(400, 2)
    path = make(tmp_path, data)
    with h5py.File(path, "r") as f:
        assert _mmap.mapping(f["d"]) is None
        np.testing.assert_array_equal(_h5.read_rows(f["d"], 0, 400), data)


def test_a_file_open_for_writing_goes_to_libhdf5(tmp_path):
    path = _file(tmp_path, np.arange(400, dtype=np.int64))
    with h5py.File(path, "r+") as f:
        f["d"][0:4] = -1  # may still sit in libhdf5's cache
        assert _mmap.mapping(f["d"]) is None
        assert _h5.read_rows(f["d"], 0, 400)[0] == -1


def test_a_file_changed_under_the_map_is_an_error_not_a_crash(tmp_path, monkeypatch):
    monkeypatch.setattr(_mmap, "STAT_EVERY", 0.0)  # every read checks (by default at most every 10 ms)
    path = _file(tmp_path, np.arange(400, dtype=np.int64), chunks=None)
    with h5py.File(path, "r") as f:
        ds = f["d"]
        assert _h5.read_rows(ds, 0, 4).tolist() == [0, 1, 2, 3]
        with open(path, "ab") as fh:  # another program rewrites the file in place
            fh.write(b"\0" * 4096)
        with pytest.raises(LodFormatError, match="changed on disk"):
            _h5.read_rows(ds, 0, 4)


def test_a_read_of_a_compressed_dataset_holds_one_result_array(tmp_path):
    import tracemalloc

    data = np.arange(1 << 20, dtype=np.int64)
    path = _file(tmp_path, data, chunks=(1024,), compression="gzip")
    with h5py.File(path, "r") as f:
        assert _mmap.mapping(f["d"]) is None
        tracemalloc.start()
        try:
            rows = _h5.read_rows(f["d"], 0, data.shape[0])
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    np.testing.assert_array_equal(rows, data)
    assert peak < 1.5 * data.nbytes


def test_the_map_outlives_nothing(tmp_path):
    path = _file(tmp_path, np.arange(400, dtype=np.int64), chunks=None)
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(20):
        with h5py.File(path, "r") as f:
            _h5.read_rows(f["d"], 0, 4)
    import gc

    gc.collect()
    assert len(os.listdir("/proc/self/fd")) <= before + 1  # the duplicated descriptors close with their handles


def test_inspect_says_which_tensors_are_memory_mapped(tmp_path):
    from lodtool.container import inspect_file

    t = LoDTensor(np.arange(100, dtype=np.int64), [[0, 40, 100]])
    for compression, mapped in (("none", True), ("deflate", False)):
        path = str(tmp_path / f"{compression}.lod.h5")
        save(path, t, compression=compression)
        assert inspect_file(path)["tensors"][0]["memory_mapped"] is mapped


def test_a_handle_holds_its_offsets_only_once_it_reads_many_windows(tmp_path):
    from lodtool.container import reader

    t = LoDTensor(np.arange(30_000, dtype=np.int32), [np.arange(0, 30_001, 3)])
    path = str(tmp_path / "t.lod.h5")
    save(path, t)  # default compression: offsets decoded through libhdf5
    with open_file(path) as f:
        x = f.tensor()
        assert x.branch(7).data.tolist() == [21, 22, 23]
        assert x._resident == [None] and x._checked_levels() is None  # a one-shot read reads no whole level
        for i in range(reader.RESIDENT_AFTER):
            x.branch(i)
        levels = x._checked_levels()
        assert levels is not None and levels[0].size == 10_001 and not levels[0].flags.writeable
        assert x.branch(9_999).data.tolist() == [29_997, 29_998, 29_999]


def test_a_loop_of_reads_loads_the_compiled_check_and_a_one_shot_read_does_not(tmp_path):
    path = _file(tmp_path, np.arange(40_000, dtype=np.int64), fletcher32=True)  # 10,000 chunks of 4 rows
    code = ("import sys, h5py; from lodtool.container import _h5, _mmap, _fletcher\n"
            "_fletcher._native = None  # neither libhdf5's sum nor Numba at hand\n"
            f"f = h5py.File({path!r}, 'r'); ds = f['d']\n"
            "_h5.read_rows(ds, 0, 4)\n"
            "assert 'numba' not in sys.modules  # one read: libhdf5 checks its chunk\n"
            "for c in range(1, _mmap.CHECKS_BEFORE_NUMBA + 2):\n"
            "    rows = _h5.read_rows(ds, 4 * c, 4 * c + 4)\n"
            "assert 'numba' in sys.modules and not rows.flags.owndata  # checked here, read from the map\n"
            "assert (rows == range(4 * c, 4 * c + 4)).all()\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_file_opened_again_unchanged_is_not_checked_again(tmp_path, numba_loaded):
    path = _file(tmp_path, np.arange(400, dtype=np.int64), fletcher32=True)
    with h5py.File(path, "r") as f:
        first = _mmap.mapping(f["d"])
        assert first.unchecked == 100
        _h5.read_rows(f["d"], 0, 400)
        assert first.unchecked == 0
    with h5py.File(path, "r") as f:  # another handle of the same file shares what this process checked
        assert _mmap.mapping(f["d"]).unchecked == 0
    del first  # its descriptor holds the file's lock
    gc.collect()
    with h5py.File(path, "r+") as f:  # rewritten: a new modification time, so checked again
        f["d"][0] = 5
    os.utime(path, ns=(os.stat(path).st_atime_ns, os.stat(path).st_mtime_ns + 1_000_000))
    with h5py.File(path, "r") as f:
        assert _mmap.mapping(f["d"]).unchecked == 100
        assert _h5.read_rows(f["d"], 0, 2).tolist() == [5, 1]


def test_a_file_opened_again_unchanged_is_not_indexed_again(tmp_path, monkeypatch):
    path = _file(tmp_path, np.arange(400, dtype=np.int64), fletcher32=False)
    with h5py.File(path, "r") as f:
        assert _mmap.mapping(f["d"]) is not None
    indexed = []
    real = _mmap._chunk_addresses
    monkeypatch.setattr(_mmap, "_chunk_addresses", lambda *a: indexed.append(1) or real(*a))
    with h5py.File(path, "r") as f:  # the chunk table this process built is shared: no chunk_iter pass
        assert _mmap.mapping(f["d"]).rows(397, 400).tolist() == [397, 398, 399] and not indexed
    os.utime(path, ns=(os.stat(path).st_atime_ns, os.stat(path).st_mtime_ns + 1_000_000))
    with h5py.File(path, "r") as f:  # changed (a new modification time): indexed again
        assert _mmap.mapping(f["d"]).rows(0, 2).tolist() == [0, 1] and indexed == [1]


def test_the_chunk_table_gathers_what_libhdf5_reads(tmp_path, numba_loaded):
    from lodtool.ops.batching import gather_batch

    data = (np.arange(300, dtype=np.int64) * 3 - 7).astype(np.complex128)
    path = _file(tmp_path, data, chunks=(16,), fletcher32=True)  # chunks 4 bytes apart from 8-byte alignment
    with h5py.File(path, "r") as f:
        m = _mmap.mapping(f["d"])
        words, table, chunk_rows = m.chunk_table()
        assert not words.flags.writeable and (table < 0).all()
        _h5.read_rows(f["d"], 0, 300)  # checks every chunk: the table fills in place
        assert (table >= 0).all()
        out = np.zeros(300, np.complex128)
        seqs, rows = np.array([0]), np.array([0, 300])
        gather_batch(words, table, words.dtype.itemsize, chunk_rows, 16 // words.dtype.itemsize, seqs, rows,
                     np.zeros(0, np.int64), False, 0, out.view(words.dtype), np.zeros(1, np.int64),
                     np.zeros(2, np.int64), np.zeros(0, np.int64), np.zeros(0, bool), np.zeros(64, np.int64))
        np.testing.assert_array_equal(out, f["d"][:])


@pytest.mark.parametrize("kw", [{"chunks": None}, {"chunks": (4,)}, {"chunks": (4,), "compression": "gzip"}])
def test_mapping_builds_no_file_object(tmp_path, monkeypatch, kw):
    # ds.file builds an h5py File per call: once per dataset, it made inspect of many tensors slow
    path = _file(tmp_path, np.arange(20, dtype=np.int64), **kw)
    built = []
    init = h5py.File.__init__
    with h5py.File(path, "r") as f:
        ds = f["d"]
        monkeypatch.setattr(h5py.File, "__init__", lambda self, *a, **k: built.append(a) or init(self, *a, **k))
        found = _mmap.mapping(ds)
        monkeypatch.undo()
        assert (found is None) == ("compression" in kw)
    assert built == []
