"""Whole chunks read straight from the file give exactly libhdf5's values, and anything unusual goes back to libhdf5."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lodtool import LoDTensor
from lodtool.container import _direct, _h5, load, save
from lodtool.errors import LodFormatError


@pytest.fixture(autouse=True)
def _kernels_always(monkeypatch):
    # the Fletcher-32 check is compiled and runs where Numba is loaded: load it, let small test reads take
    # the direct path, and index on the first long read
    from lodtool._jit import numba_module

    numba_module()
    monkeypatch.setattr(_direct, "FLETCHER_FROM_BYTES", 0)
    monkeypatch.setattr(_direct, "_SCAN_FRACTION", 1 << 30)


def _file(tmp_path, data, name="x.h5", chunks=(4,), **kw):
    path = str(tmp_path / name)
    with h5py.File(path, "w", **{k: v for k, v in kw.items() if k == "userblock_size"}) as f:
        f.create_dataset("d", data=data, chunks=chunks, **{k: v for k, v in kw.items() if k != "userblock_size"})
    return path


def _read(path, start, stop):
    with h5py.File(path, "r") as f:
        ds = f["d"]
        out = np.empty((stop - start,) + ds.shape[1:], ds.dtype)
        used = _direct.read_whole_chunks(ds, start, stop, out)
        return used, out, _h5.read_rows(ds, start, stop), ds[start:stop]


@pytest.mark.parametrize("fletcher32", [False, True])
@settings(max_examples=40, deadline=None)
@given(n=st.integers(80, 400), span=st.tuples(st.integers(0, 400), st.integers(0, 400)),
       dtype=st.sampled_from(["int64", "int8", "float32", "uint16", "complex64"]), width=st.sampled_from([(), (3,)]))
def test_direct_reads_equal_libhdf5(tmp_path_factory, fletcher32, n, span, dtype, width):
    data = (np.arange(n * int(np.prod(width)), dtype=np.int64) * 7 - 50).astype(dtype).reshape((n,) + width)
    path = _file(tmp_path_factory.mktemp("d"), data, chunks=(4,) + width, fletcher32=fletcher32)
    start, stop = min(span[0], n), min(max(span), n)
    used, direct, rows, expected = _read(path, start, stop)
    whole = min(stop, n - n % 4) // 4 - -(-start // 4)
    assert used == (whole >= _direct.MIN_CHUNKS)
    if used:
        np.testing.assert_array_equal(direct, expected)
    np.testing.assert_array_equal(rows, expected)


def test_a_lodtool_container_written_uncompressed_reads_directly(tmp_path):
    t = LoDTensor(np.arange(400_000, dtype=np.int64) % 977, [[0, 40_000, 400_000]])  # 49 chunks
    path = str(tmp_path / "t.lod.h5")
    save(path, t, compression="none")
    with h5py.File(path, "r") as f:
        ds = f["tensor/data"] if "tensor" in f else next(iter(f.values()))["data"]
        out = np.empty(ds.shape, ds.dtype)
        assert _direct.read_whole_chunks(ds, 0, ds.shape[0], out)
        np.testing.assert_array_equal(out, t.data)
    np.testing.assert_array_equal(load(path).data, t.data)


def test_a_damaged_chunk_is_refused_by_libhdf5_with_its_message(tmp_path):
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
        out = np.empty(400, np.int64)
        assert not _direct.read_whole_chunks(f["d"], 0, 400, out)
        with pytest.raises(LodFormatError), _h5.translate(path):
            _h5.read_rows(f["d"], 0, 400)


def test_unwritten_chunks_read_as_the_fill_value(tmp_path):
    path = str(tmp_path / "x.h5")
    with h5py.File(path, "w") as f:
        ds = f.create_dataset("d", shape=(400,), dtype="int64", chunks=(4,), fillvalue=-9)
        ds[:200] = np.arange(200)
        ds[300:] = np.arange(300, 400)
    used, direct, rows, expected = _read(path, 0, 400)
    assert not used
    np.testing.assert_array_equal(rows, expected)
    assert (rows[200:300] == -9).all()
    used, direct, _, expected = _read(path, 300, 400)  # every chunk written: read directly
    assert used and (direct == expected).all()


def test_chunks_stored_out_of_order(tmp_path):
    path = str(tmp_path / "x.h5")
    with h5py.File(path, "w") as f:
        ds = f.create_dataset("d", shape=(400,), dtype="int32", chunks=(4,), fletcher32=True)
        for start in range(396, -1, -4):  # last chunk first: no two neighbours adjacent in the file
            ds[start:start + 4] = np.arange(start, start + 4)
    used, direct, rows, expected = _read(path, 1, 399)
    assert used
    np.testing.assert_array_equal(direct, expected)
    np.testing.assert_array_equal(rows, np.arange(1, 399))


def test_a_user_block_shifts_nothing(tmp_path):
    data = np.arange(400, dtype=np.int64)
    path = _file(tmp_path, data, userblock_size=512, fletcher32=True)
    used, direct, rows, _ = _read(path, 0, 400)
    np.testing.assert_array_equal(rows, data)
    if used:
        np.testing.assert_array_equal(direct, data)


@pytest.mark.parametrize("make", [
    lambda p, d: _file(p, d, chunks=(4, 2), compression="gzip"),  # a codec: libhdf5 decodes it
    lambda p, d: _file(p, d, chunks=(4, 1)),  # a row spread over chunks
    lambda p, d: _file(p, d.astype(">i8"), chunks=(4, 2)),  # big-endian: converted by libhdf5
])
def test_what_is_not_plain_bytes_goes_to_libhdf5(tmp_path, make):
    data = np.arange(800, dtype=np.int64).reshape(400, 2)
    path = make(tmp_path, data)
    with h5py.File(path, "r") as f:
        ds = f["d"]
        out = np.empty(ds.shape, ds.dtype.newbyteorder("="))
        assert not _direct.read_whole_chunks(ds, 0, 400, out)
        np.testing.assert_array_equal(_h5.read_rows(ds, 0, 400), data)


def test_a_file_open_for_writing_goes_to_libhdf5(tmp_path):
    data = np.arange(400, dtype=np.int64)
    path = _file(tmp_path, data)
    with h5py.File(path, "r+") as f:
        f["d"][0:4] = -1  # may still sit in libhdf5's cache
        out = np.empty(400, np.int64)
        assert not _direct.read_whole_chunks(f["d"], 0, 400, out)
        assert _h5.read_rows(f["d"], 0, 400)[0] == -1


def test_a_short_read_goes_to_libhdf5(tmp_path, monkeypatch):
    data = np.arange(4000, dtype=np.int64)
    path = _file(tmp_path, data, fletcher32=True)
    monkeypatch.setattr(_direct.os, "preadv", lambda fd, buffers, offset: 8)  # a file shorter than its index says
    with h5py.File(path, "r") as f:
        out = np.empty(4000, np.int64)
        assert not _direct.read_whole_chunks(f["d"], 0, 4000, out)
        np.testing.assert_array_equal(_h5.read_rows(f["d"], 0, 4000), data)


def test_the_index_waits_for_a_sixteenth_of_the_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(_direct, "_SCAN_FRACTION", 16)
    data = np.arange(4000, dtype=np.int64)  # 1000 chunks
    path = _file(tmp_path, data)
    with h5py.File(path, "r") as f:
        ds = f["d"]
        out = np.empty(80, np.int64)
        answers = [_direct.read_whole_chunks(ds, 100 * i, 100 * i + 80, out) for i in range(6)]
        assert answers == [False] * 3 + [True] * 3  # 20 chunks a read: the index once 63 are read
        np.testing.assert_array_equal(out, data[500:580])


def test_a_read_of_a_compressed_dataset_holds_one_result_array(tmp_path):
    import tracemalloc

    data = np.arange(1 << 20, dtype=np.int64)  # 8 MiB, 1,024 chunks: long enough for the direct path's size test
    path = _file(tmp_path, data, chunks=(1024,), compression="gzip")
    with h5py.File(path, "r") as f:
        assert not _direct.may_apply(f["d"])
        tracemalloc.start()
        try:
            rows = _h5.read_rows(f["d"], 0, data.shape[0])
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    np.testing.assert_array_equal(rows, data)
    assert peak < 1.5 * data.nbytes  # no result allocated for the direct path and then another by libhdf5


def test_a_checksummed_read_never_loads_numba_itself(tmp_path):
    import subprocess
    import sys

    path = _file(tmp_path, np.arange(40_000, dtype=np.int64), fletcher32=True)
    code = ("import sys, h5py; from lodtool.container import _direct, _h5; _direct._SCAN_FRACTION = 1 << 30\n"
            f"f = h5py.File({path!r}, 'r'); rows = _h5.read_rows(f['d'], 0, 40000)\n"
            "assert (rows == range(40000)).all() and 'numba' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
