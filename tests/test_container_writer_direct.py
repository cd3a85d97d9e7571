"""The writer's direct chunk path stores exactly what libhdf5's fletcher32 filter stores."""

from __future__ import annotations

import struct

import h5py
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lodtool import LoDTensor
from lodtool.container import writer
from lodtool.container._fletcher import fletcher32_chunks
from lodtool.container import load, verify_file
from lodtool.container.writer import save


def _raw_chunks(path: str) -> list[bytes]:
    with h5py.File(path, "r") as f:
        ds = f["tensor/data"]
        infos = [ds.id.get_chunk_info(i) for i in range(ds.id.get_num_chunks())]
        return [ds.id.read_direct_chunk(info.chunk_offset)[1] for info in infos]


def _libhdf5_fletcher(payload: bytes, chunk: int) -> list[int]:
    """The checksums libhdf5 itself stores for ``payload`` cut into chunks of ``chunk`` bytes."""
    raw = np.frombuffer(payload, np.uint8)
    with h5py.File("mem.h5", "w", driver="core", backing_store=False) as f:
        ds = f.create_dataset("x", data=raw, chunks=(chunk,), fletcher32=True)
        return [struct.unpack("<I", ds.id.read_direct_chunk((c,))[1][-4:])[0] for c in range(0, raw.size, chunk)]


@settings(max_examples=60, deadline=None)
@given(payload=st.binary(min_size=1, max_size=3000), chunk=st.integers(1, 800), native=st.booleans())
def test_fletcher32_matches_libhdf5(payload, chunk, native):
    """Both implementations (libhdf5's function through ctypes, the Numba kernel) store libhdf5's sums."""
    from lodtool.container import _fletcher

    assert _fletcher.native() is not None  # found in h5py's libhdf5 on Linux
    padded = payload + bytes(-len(payload) % chunk)  # libhdf5 pads the edge chunk with the fill value
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_fletcher, "numba_loaded", lambda: not native)  # the kernel runs where Numba is loaded
        if not native:
            mp.setattr(_fletcher, "_native", None)
        sums = fletcher32_chunks(np.frombuffer(padded, np.uint8), chunk).tolist()
    assert sums == _libhdf5_fletcher(padded, chunk)


def test_libhdf5s_function_is_refused_unless_it_gives_the_known_sums(monkeypatch):
    from lodtool.container import _fletcher

    monkeypatch.setattr(_fletcher, "_native", _fletcher._UNSEARCHED)
    monkeypatch.setattr(_fletcher, "_KNOWN_SUMS", ((b"abcde", 1341139398),))  # one off: not HDF5's Fletcher-32
    assert _fletcher.native() is None
    monkeypatch.setattr(_fletcher, "_native", _fletcher._UNSEARCHED)
    monkeypatch.setattr(_fletcher, "_loaded_libhdf5", lambda: None)  # not found (not Linux)
    monkeypatch.setattr(_fletcher, "numba_loaded", lambda: False)
    assert _fletcher.native() is None and not _fletcher.compiled_without_numba()


def test_large_chunks_written_directly_through_the_pool_equal_filtered_chunks(tmp_path, monkeypatch):
    data = np.random.default_rng(3).integers(0, 50_000, 3_300_001).astype(np.int32)  # 13 MB: 13 chunks of 1 MiB
    tensor = LoDTensor(data, [[0, 7, data.shape[0]]])
    direct, filtered = str(tmp_path / "direct.h5"), str(tmp_path / "filtered.h5")
    for path in (direct, filtered):
        with writer.LodWriter(path, compression="none") as w:
            w.add_tensor("tensor", dtype=None, element_shape=(), lod_level=1, chunk_bytes=writer.MAPPED_CHUNK_BYTES)
            w.write("tensor", tensor)
        monkeypatch.setattr(writer, "DIRECT_MIN_BYTES", 1 << 62)  # the second through libhdf5's filter
    with h5py.File(direct, "r") as f:
        assert f["tensor/data"].chunks == (writer.MAPPED_CHUNK_BYTES // 4,)
    assert _raw_chunks(direct) == _raw_chunks(filtered)
    assert np.array_equal(load(direct).data, data) and verify_file(direct) == []


@pytest.mark.parametrize("shape, dtype", [((3_000_001,), np.int64), ((500_003, 3), np.float32),
                                          ((200_001, 2, 2), np.int16), ((5_000_001,), np.int8)])
def test_direct_chunks_equal_filtered_chunks(tmp_path, monkeypatch, shape, dtype):
    data = np.random.default_rng(7).integers(-100, 100, shape).astype(dtype)
    tensor = LoDTensor(data, [[0, 1, shape[0]]])
    direct, filtered = str(tmp_path / "direct.h5"), str(tmp_path / "filtered.h5")
    save(direct, tensor, compression="none")
    monkeypatch.setattr(writer, "DIRECT_MIN_BYTES", 1 << 62)  # everything through libhdf5's filter
    save(filtered, tensor, compression="none")
    assert _raw_chunks(direct) == _raw_chunks(filtered)
    assert np.array_equal(load(direct).data, data)
    assert verify_file(direct) == []


def _direct_write(path: str, data: np.ndarray, rows: int, **file_options) -> tuple[list[bytes], int, str]:
    """``data`` written by the direct path into a fresh fletcher32 dataset of ``rows``-row chunks: its stored chunks,
    how many chunks were staged (copied with their sum) and the digest fed."""
    from lodtool.container import checksum

    staged = []
    stage = writer._stage_chunks

    def counting(flat, first, count, chunk_bytes, buf):
        staged.append(count)
        return stage(flat, first, count, chunk_bytes, buf)

    hasher = checksum.new_hasher()
    with pytest.MonkeyPatch.context() as mp, h5py.File(path, "w", **file_options) as f:
        mp.setattr(writer, "_stage_chunks", counting)
        ds = f.create_dataset("x", shape=data.shape, maxshape=(None,) + data.shape[1:], dtype=data.dtype,
                              chunks=(rows,) + data.shape[1:], fletcher32=True)
        writer._write_chunks_direct(ds, 0, data, rows, hasher)
        chunks = [ds.id.read_direct_chunk((c,) + (0,) * (data.ndim - 1))[1] for c in range(0, data.shape[0], rows)]
        assert np.array_equal(ds[...], data)  # read through libhdf5's filter: every sum checked
    return chunks, sum(staged), checksum.format_digest(hasher)


@pytest.mark.parametrize("dtype, n, staged", [(np.int32, 800_000, 1), (np.int32, 786_433, 1), (np.int32, 786_432, 1),
                                              (np.int16, 1_572_865, 2), (np.int32, 60_000, 1)])
def test_chunks_of_a_plain_file_are_written_without_a_copy(tmp_path, monkeypatch, dtype, n, staged):
    """Into a plain file every chunk followed by four bytes of the block goes to libhdf5 from the block itself (its
    sum written over those four bytes after it); the last chunk (and the one before it, when the last is under four
    bytes) is staged. The stored chunks are those of libhdf5's filter, and of a file libhdf5 keeps in memory (where
    every chunk is staged)."""
    rows = writer.IN_PLACE_FROM_BYTES // np.dtype(dtype).itemsize  # the smallest chunks written in place
    monkeypatch.setattr(writer, "STAGE_BYTES", 4 * rows * np.dtype(dtype).itemsize)  # groups of 4 chunks in the pool
    info = np.iinfo(dtype)
    data = np.random.default_rng(n).integers(info.min, info.max, n, dtype=np.int64).astype(dtype)
    chunks, copied, digest = _direct_write(str(tmp_path / "plain.h5"), data, rows)
    assert copied == staged
    in_memory, all_copied, same_digest = _direct_write(str(tmp_path / "core.h5"), data, rows, driver="core",
                                                       backing_store=False)
    assert all_copied == -(-n // rows) and in_memory == chunks and same_digest == digest
    sums = [struct.unpack("<I", c[-4:])[0] for c in chunks]
    padded = np.concatenate([data, np.zeros(-n % rows, dtype)]).view(np.uint8)
    assert sums == _libhdf5_fletcher(padded.tobytes(), padded.shape[0] // len(chunks))


def test_chunks_under_the_in_place_size_are_staged(tmp_path):
    """Asking libhdf5 where each small chunk went costs more than copying it: they are all staged."""
    rows = writer.IN_PLACE_FROM_BYTES // 8 // 2
    data = np.arange(10 * rows + 3, dtype=np.int64)
    chunks, copied, _ = _direct_write(str(tmp_path / "plain.h5"), data, rows)
    assert copied == 11 and len(chunks) == 11


def test_direct_path_is_skipped_for_compressed_data(tmp_path):
    data = np.arange(2_000_000, dtype=np.int64)
    path = str(tmp_path / "lzf.h5")
    save(path, LoDTensor(data, [[0, data.shape[0]]]), compression="lzf")
    with h5py.File(path, "r") as f:
        assert f["tensor/data"].compression == "lzf"
    assert np.array_equal(load(path).data, data)


def test_a_flipped_byte_in_a_direct_chunk_is_detected(tmp_path):
    data = np.arange(1_000_000, dtype=np.int64)
    path = str(tmp_path / "x.h5")
    save(path, LoDTensor(data, [[0, data.shape[0]]]), compression="none")
    with h5py.File(path, "r+") as f:
        ds = f["tensor/data"]
        mask, raw = ds.id.read_direct_chunk((0,))
        broken = bytearray(raw)
        broken[100] ^= 0x10
        ds.id.write_direct_chunk((0,), bytes(broken), mask)
    with h5py.File(path, "r") as f, pytest.raises(OSError):
        f["tensor/data"][:10]


def test_the_writer_starts_write_back_as_it_goes(tmp_path, monkeypatch):
    from lodtool.container import _writeback

    started = []
    real = _writeback.start_writeback
    monkeypatch.setattr(writer, "start_writeback", lambda f: started.append(f.filename) or real(f))
    monkeypatch.setattr(writer, "WRITEBACK_BYTES", 1 << 20)
    data = np.arange(4 << 20, dtype=np.int64)  # 32 MiB in appends of 4 MiB
    with writer.LodWriter(tmp_path / "a.lod.h5", compression="none") as w:
        tw = w.add_tensor("tensor", dtype=None, element_shape=(), lod_level=1)
        for part in np.split(data, 8):
            tw.append(LoDTensor(part, [[0, len(part)]]))
    assert len(started) >= 8 and all(name.endswith(".lod.h5") or "lodtmp" in name for name in started)
    out = load(tmp_path / "a.lod.h5")
    assert np.array_equal(out.data, data) and verify_file(tmp_path / "a.lod.h5") == []


def test_start_writeback_is_a_no_op_without_a_file_descriptor():
    from lodtool.container._writeback import start_writeback

    with h5py.File("mem.h5", "w", driver="core", backing_store=False) as f:
        assert start_writeback(f) is False


def test_a_writer_expecting_few_bytes_leaves_fletcher32_to_libhdf5(tmp_path, monkeypatch):
    """Where libhdf5's checksum function cannot be called, a small write does not import Numba for the kernel."""
    from lodtool import _jit
    from lodtool.container import _fletcher

    monkeypatch.setattr(_jit, "_slow_spent", 0.0)
    monkeypatch.setattr(_jit, "numba_loaded", lambda: False)  # as in a fresh process (loaded, direct pays)
    monkeypatch.setattr(_fletcher, "numba_loaded", lambda: False)
    monkeypatch.setattr(_fletcher, "_native", None)  # libhdf5's function not found
    monkeypatch.setattr(writer, "_write_chunks_direct", None)  # any direct write fails
    data = np.arange(3_000_001, dtype=np.int64)  # 24 MB: above DIRECT_MIN_BYTES
    tensor = LoDTensor(data, [[0, 1, data.shape[0]]])
    small, unknown = str(tmp_path / "small.h5"), str(tmp_path / "unknown.h5")
    with writer.LodWriter(small, compression="none", expected_bytes=data.nbytes) as w:
        assert not w.direct_pays
        w.write("tensor", tensor)
    monkeypatch.undo()
    with writer.LodWriter(unknown, compression="none") as w:  # a size not given: large writes go direct
        assert w.direct_pays
        w.write("tensor", tensor)
    assert _raw_chunks(small) == _raw_chunks(unknown)
    assert verify_file(small) == []


def test_a_writer_expecting_many_bytes_writes_directly(tmp_path):
    with writer.LodWriter(str(tmp_path / "x.h5"), expected_bytes=writer.DIRECT_FROM_BYTES) as w:
        assert w.direct_pays


def test_chunks_past_the_in_place_count_are_staged(tmp_path, monkeypatch):
    """libhdf5 walks a dataset's chunks to say where one went: past IN_PLACE_UNTIL_CHUNKS every chunk is staged."""
    monkeypatch.setattr(writer, "IN_PLACE_UNTIL_CHUNKS", 5)
    rows = writer.IN_PLACE_FROM_BYTES // 4
    data = np.random.default_rng(5).integers(0, 2**31 - 1, 12 * rows + 7).astype(np.int32)
    chunks, copied, digest = _direct_write(str(tmp_path / "plain.h5"), data, rows)
    assert copied == 13 - 5 and len(chunks) == 13
    same, _, same_digest = _direct_write(str(tmp_path / "core.h5"), data, rows, driver="core", backing_store=False)
    assert same == chunks and same_digest == digest
