"""The parallel shuffle + deflate writer stores HDF5's standard pipeline, readable with built-in filters only."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import zlib

import h5py
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lodtool import LoDTensor
from lodtool.container import _deflate, filters, load, verify_file
from lodtool.container.writer import LodWriter, save

GOLDEN_V1 = os.path.join(os.path.dirname(__file__), "data", "golden_v1.h5")


def _libhdf5_fletcher(payload: bytes) -> int:
    raw = np.frombuffer(payload, np.uint8)
    with h5py.File("mem.h5", "w", driver="core", backing_store=False) as f:
        ds = f.create_dataset("x", data=raw, chunks=(raw.size,), fletcher32=True)
        return struct.unpack("<I", ds.id.read_direct_chunk((0,))[1][-4:])[0]


@settings(max_examples=80, deadline=None)
@given(payload=st.one_of(st.binary(min_size=1, max_size=3000),
                         st.builds(lambda n, b: bytes([b]) * n, st.integers(1, 2000), st.sampled_from([0, 1, 255]))))
def test_fletcher32_in_closed_form_matches_libhdf5(payload):
    assert _deflate.fletcher32(payload) == _libhdf5_fletcher(payload)


@settings(max_examples=40, deadline=None)
@given(shape=st.sampled_from([(70_001,), (30_003, 3)]), level=st.sampled_from([1, 6]))
def test_compiled_checksums_store_the_same_bytes(shape, level):
    flat = np.random.default_rng(sum(shape)).integers(-500, 500, shape).astype("<i8").reshape(-1).view(np.uint8)
    chunk_bytes = 8 * 3 * 4096
    kwargs = dict(level=level, fletcher32=True)
    assert _deflate.encode_chunks(flat, chunk_bytes, 8, compiled=True, **kwargs) == \
        _deflate.encode_chunks(flat, chunk_bytes, 8, compiled=False, **kwargs)


def test_a_long_write_switches_to_the_compiled_sums(tmp_path, monkeypatch):
    monkeypatch.setattr(_deflate, "FLETCHER_FROM_BYTES", (1 << 20, 1 << 20))
    seen = []
    real = _deflate._checksum
    monkeypatch.setattr(_deflate, "_checksum", lambda enc, compiled: seen.append(compiled) or real(enc, compiled))
    data = np.random.default_rng(4).integers(0, 1 << 20, 600_000)
    path = str(tmp_path / "long.lod.h5")
    save(path, LoDTensor(data, [[0, 1, data.shape[0]]]))
    assert True in seen
    assert np.array_equal(load(path).data, data) and verify_file(path) == []


def _spy(monkeypatch) -> list:
    calls = []
    real = _deflate.write_chunks

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(_deflate, "write_chunks", spy)
    return calls


@pytest.mark.parametrize("shape, dtype", [((300_001,), np.int64), ((50_003, 3), np.float32),
                                          ((20_001, 2, 2), np.int16), ((70_001,), np.int8), ((5,), np.float64)])
def test_the_default_is_shuffle_deflate_fletcher32_encoded_here(tmp_path, monkeypatch, shape, dtype):
    calls = _spy(monkeypatch)
    data = np.random.default_rng(3).integers(-1000, 1000, shape).astype(dtype)
    path = str(tmp_path / "d.lod.h5")
    save(path, LoDTensor(data, [[0, 1, shape[0]]]))
    assert calls and calls[0]["level"] == 1 and calls[0]["fletcher32"]
    with h5py.File(path, "r") as f:
        ds = f["tensor/data"]
        assert filters.filter_ids(ds) == [filters.SHUFFLE, filters.DEFLATE, filters.FLETCHER32]
        assert np.array_equal(ds[...], data)  # decoded by libhdf5's own filters
        item, chunk_rows = ds.dtype.itemsize, ds.chunks[0]
        padded = np.zeros((-(-shape[0] // chunk_rows) * chunk_rows,) + shape[1:], dtype)
        padded[: shape[0]] = data
        for i in range(ds.id.get_num_chunks()):
            info = ds.id.get_chunk_info(i)
            raw = ds.id.read_direct_chunk(info.chunk_offset)[1]
            start = info.chunk_offset[0]
            plain = padded[start:start + chunk_rows].reshape(-1).view(np.uint8)
            assert zlib.decompress(raw[:-4]) == _deflate.shuffle(plain, item).tobytes()
            assert struct.unpack("<I", raw[-4:])[0] == _libhdf5_fletcher(raw[:-4])
    assert verify_file(path) == []


def test_a_flipped_byte_in_a_deflate_chunk_is_detected(tmp_path):
    data = np.arange(100_000, dtype=np.int64)
    path = str(tmp_path / "x.h5")
    save(path, LoDTensor(data, [[0, data.shape[0]]]))
    with h5py.File(path, "r+") as f:
        ds = f["tensor/data"]
        mask, raw = ds.id.read_direct_chunk((0,))
        broken = bytearray(raw)
        broken[10] ^= 0x10
        ds.id.write_direct_chunk((0,), bytes(broken), mask)
    with h5py.File(path, "r") as f, pytest.raises(OSError):
        f["tensor/data"][:10]


@pytest.mark.parametrize("compression, level", [("gzip", 9), ("deflate", 0), ("deflate", 3)])
def test_every_deflate_level_reads_back(tmp_path, monkeypatch, compression, level):
    calls = _spy(monkeypatch)
    data = np.random.default_rng(5).normal(size=40_000).astype(np.float32)
    path = str(tmp_path / "g.h5")
    save(path, LoDTensor(data, [[0, 40_000]]), compression=compression, compression_level=level)
    assert calls[0]["level"] == level
    assert np.array_equal(load(path).data, data)


def test_appending_to_a_deflate_tensor_keeps_the_pipeline(tmp_path):
    path = str(tmp_path / "a.h5")
    first, second = np.arange(70_000, dtype=np.int64), np.arange(50_000, dtype=np.int64) * 3
    save(path, LoDTensor(first, [[0, 70_000]]))
    with LodWriter(path, append=True) as w:
        w.write("tensor", LoDTensor(second, [[0, 50_000]]))
    assert np.array_equal(load(path).data, np.concatenate([first, second]))
    assert verify_file(path) == []


def test_without_fletcher32_and_without_isal(tmp_path, monkeypatch):
    monkeypatch.setattr(_deflate, "_isal", None)  # the zlib fallback
    assert _deflate.codec_name(1) == "zlib"
    data = np.arange(90_000, dtype=np.int32)
    path = str(tmp_path / "n.h5")
    save(path, LoDTensor(data, [[0, 90_000]]), fletcher32=False)
    with h5py.File(path, "r") as f:
        assert filters.filter_ids(f["tensor/data"]) == [filters.SHUFFLE, filters.DEFLATE]
        assert np.array_equal(f["tensor/data"][...], data)


def test_lzf_stays_an_option_and_the_v1_golden_file_reads(tmp_path):
    path = str(tmp_path / "l.h5")
    save(path, LoDTensor(np.arange(10), [[0, 10]]), compression="lzf")
    with h5py.File(path, "r") as f:
        assert f["tensor/data"].compression == "lzf"
    with h5py.File(GOLDEN_V1, "r") as f:
        names = list(f)
    assert names and load(GOLDEN_V1, name=names[0]).n_rows > 0


@pytest.mark.skipif(shutil.which("h5dump") is None, reason="h5dump (hdf5-tools) is not installed")
@pytest.mark.parametrize("dtype", ["<i8", "<f4", "<i2"])
def test_h5dump_reads_the_default_with_builtin_filters(tmp_path, dtype):
    data = np.random.default_rng(9).integers(-5000, 5000, 123_457).astype(dtype)
    path, dumped = str(tmp_path / "d.lod.h5"), str(tmp_path / "data.bin")
    save(path, LoDTensor(data, [[0, 3, 123_457]]))
    env = {k: v for k, v in os.environ.items() if k != "HDF5_PLUGIN_PATH"}  # built-in filters only
    run = subprocess.run(["h5dump", "-d", "/tensor/data", "-b", "LE", "-o", dumped, path], env=env,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert np.array_equal(np.fromfile(dumped, dtype), data)
    run = subprocess.run(["h5dump", "-d", "/tensor/lod/0", path], env=env, capture_output=True, text=True)
    assert "0, 3, 123457" in run.stdout


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_writes_with_a_pool_of_its_own(tmp_path):
    data = np.arange(400_000, dtype=np.int64)
    save(str(tmp_path / "parent.h5"), LoDTensor(data, [[0, data.size]]))  # the parent's pool now exists
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        try:
            save(str(tmp_path / "child.h5"), LoDTensor(data, [[0, data.size]]))
            os._exit(0 if np.array_equal(load(str(tmp_path / "child.h5")).data, data) else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_h5py_takes_its_own_lock_in_write_direct_chunk(tmp_path):
    """The writers call ``write_direct_chunk`` beside other threads' h5py calls and take no lock of their own:
    h5py >= 3.16 (the floor pyproject.toml names) takes its global lock there.  This holds h5py to it."""
    import threading

    from h5py._objects import phil  # h5py's lock, read here only to check the dependency's promise

    with h5py.File(tmp_path / "x.h5", "w") as f:
        ds = f.create_dataset("d", (100,), chunks=(10,), dtype="u1")
        done = threading.Event()
        with phil:
            writer = threading.Thread(target=lambda: (ds.id.write_direct_chunk((0,), bytes(10)), done.set()))
            writer.start()
            assert not done.wait(0.3)  # blocked on the lock this thread holds
        writer.join(10)
        assert done.is_set()


def _keep_reading(path: str, stop, errors: list) -> None:
    try:
        while not stop.is_set():
            load(path)
    except Exception as exc:  # handed to the test
        errors.append(exc)


def test_writing_beside_a_reading_thread_stays_correct(tmp_path):
    """The race of direct-chunk writes against another thread's h5py calls (h5py takes its lock in write_direct_chunk):
    a few seconds here, a minute under LODTOOL_TEST_PROFILE=long."""
    import threading
    import time

    long_profile = os.environ.get("LODTOOL_TEST_PROFILE", "").lower() == "long"
    rng = np.random.default_rng(5)
    t = LoDTensor(rng.standard_normal(300_000).astype(np.float32), [[0, 100_000, 300_000]])
    save(tmp_path / "read.lod.h5", t)
    stop, errors = threading.Event(), []
    readers = [threading.Thread(target=_keep_reading, args=(str(tmp_path / "read.lod.h5"), stop, errors))
               for _ in range(2)]
    for r in readers:
        r.start()
    end, runs = time.monotonic() + (60 if long_profile else 3), 0
    try:
        while time.monotonic() < end and not errors:
            out = tmp_path / f"w{runs % 2}.lod.h5"
            with LodWriter(out, force=True) as w:  # the default pipeline: many chunks, direct writes
                tw = w.add_tensor("tensor", dtype=np.float32, lod_level=1)
                for a in range(0, 300_000, 60_000):
                    tw.append(LoDTensor(t.data[a:a + 60_000], [[0, 60_000]]))
            assert load(out).data.tobytes() == t.data.tobytes()
            runs += 1
    finally:
        stop.set()
        for r in readers:
            r.join()
    assert not errors and runs
