"""Whole-file checks: checksums and verify, inspect, validate."""

from __future__ import annotations

import json
import os

import h5py
import numpy as np
import pytest

from lodtool import LoDTensor
from lodtool.container import (ChecksumMismatch, LazyTensor, LodWriter, inspect_file, load, save, validate_file,
                               verify_file)
from lodtool.errors import LodFormatError

from .container_helpers import ARTICLES, ROOT, articles, path, raises_same, same, small_chunks, tmpfile  # noqa: F401


# -- checksums ---------------------------------------------------------------------------------------------
def test_checksums_are_recorded_and_match_plain_xxhash(path):
    import xxhash

    save(path, {"t": articles()})
    with h5py.File(path, "r") as f:
        assert f.attrs["lodtool_checksum"] == "xxh3_64"
        for name in ("t/data", "t/lod/0", "t/lod/1"):
            ds = f[name]
            assert ds.attrs["checksum"] == "xxh3_64:" + xxhash.xxh3_64_hexdigest(
                np.ascontiguousarray(ds[...]).tobytes())


def test_verify_detects_rewritten_value(path):
    save(path, {"a": articles(), "b": LoDTensor(np.zeros(15), articles().lod)})
    with h5py.File(path, "r+") as f:
        f["a/lod/1"][3] = 8
    mismatches = verify_file(path)
    assert [m.dataset for m in mismatches] == ["/a/lod/1"]  # shared with b: reported once
    m = mismatches[0]
    assert isinstance(m, ChecksumMismatch) and m.expected != m.actual and m.actual.startswith("xxh3_64:")
    assert "/a/lod/1" in str(m)


def test_verify_detects_a_flipped_byte(path):
    data = np.arange(4096, dtype=np.int64)
    save(path, LoDTensor(data, [[0, 4096]]), compression="none", fletcher32=False)
    raw = bytearray(open(path, "rb").read())
    needle = data[1000:1002].tobytes()
    at = raw.find(needle)
    assert at > 0
    raw[at] ^= 0x01
    open(path, "wb").write(bytes(raw))
    assert [m.dataset for m in verify_file(path)] == ["/tensor/data"]


def test_verify_reports_unreadable_chunk(path):
    save(path, LoDTensor(np.arange(4096, dtype=np.int64), [[0, 4096]]))  # lzf + fletcher32
    with h5py.File(path, "r") as f:
        offset = f["tensor/data"].id.get_chunk_info(0).byte_offset
    raw = bytearray(open(path, "rb").read())
    raw[offset + 20] ^= 0xFF
    open(path, "wb").write(bytes(raw))
    (m,) = verify_file(path)
    assert m.dataset == "/tensor/data" and m.actual is None and m.error
    with pytest.raises(LodFormatError, match=f"{path}: cannot read the data of tensor 'tensor'"):
        load(path)
    assert validate_file(path).ok  # offsets are fine; validate never reads the data


def test_verify_reports_progress_in_bytes_hashed(path):
    save(path, {"a": articles(), "b": LoDTensor(np.zeros(15, np.float32), articles().lod)})  # b shares a's offsets
    seen = []
    assert verify_file(path, progress=lambda done, total: seen.append((done, total))) == []
    total = 15 * 8 + 4 * 8 + 7 * 8 + 15 * 4  # a's data and offsets, b's data; shared offsets hashed once
    assert seen[-1] == (total, total) and all(t == total for _, t in seen)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_verify_keeps_the_order_of_datasets_with_progress(path):
    save(path, {"a": articles(), "b": LoDTensor(np.zeros(15), [[0, 15]])})
    with h5py.File(path, "r+") as f:
        f["a/data"][0] = 99
        del f["b/lod/0"]
        f["b/lod/0"] = np.array([0, 15])  # no recorded checksum: reported after a's data, in file order
    plain = [m.dataset for m in verify_file(path)]
    assert plain == ["/a/data", "/b/lod/0"]
    assert [m.dataset for m in verify_file(path, progress=lambda done, total: None)] == plain


def test_verify_without_checksums(path):
    save(path, articles())
    with h5py.File(path, "r+") as f:
        del f.attrs["lodtool_checksum"]
    with pytest.raises(LodFormatError, match="no checksums"):
        verify_file(path)
    report = validate_file(path)
    assert not report.ok and "no checksums" in report.problems[0].message


# -- inspect / validate --------------------------------------------------------------------------------------
def test_inspect(path, monkeypatch):
    save(path, {"tokens": articles(level_names=["article", "sentence"]),
                "labels": LoDTensor(np.zeros(15, np.int8), articles().lod),
                "plain": LoDTensor(np.ones((4, 2), np.float32))}, compression="gzip", compression_level=1)
    monkeypatch.setattr(LazyTensor, "_rows", lambda *a: pytest.fail("inspect read the data"))
    info = inspect_file(path)
    json.dumps(info)
    assert info["path"] == path and info["format"] == "lodtool" and info["format_version"] == "1.0"
    assert info["created_by"].startswith("lodtool") and info["file_size"] == os.path.getsize(path)
    tokens = info["tensors"][0]
    assert tokens["name"] == "tokens" and tokens["dtype"] == "int64" and tokens["element_shape"] == []
    assert (tokens["rows"], tokens["lod_level"], tokens["level_names"]) == (15, 2, ["article", "sentence"])
    assert tokens["compression"] == "gzip" and tokens["compression_level"] == 1
    assert tokens["levels"] == [
        {"level": 0, "name": "article", "sequences": 3, "min": 1, "median": 2.0, "mean": 2.0, "max": 3, "empty": 0},
        {"level": 1, "name": "sentence", "sequences": 6, "min": 1, "median": 2.5, "mean": 2.5, "max": 4,
         "empty": 0}]
    assert tokens["nbytes"] == 15 * 8 + 11 * 8 and tokens["storage_size"] > 0
    assert tokens["shared_lod_with"] == ["labels"]
    plain = info["tensors"][2]
    assert plain["levels"] == [] and plain["element_shape"] == [2] and plain["dtype"] == "float32"


def test_validate_reports_every_problem(path):
    save(path, {"a": articles(), "b": LoDTensor(np.arange(3), [[0, 3]])})
    with h5py.File(path, "r+") as f:
        f["a/lod/1"][1:4] = [9, 8, 7]
        f["b/lod/0"][0] = 1
    report = validate_file(path, max_problems=20)
    assert not report.ok
    where = [(p.tensor, p.level, p.index) for p in report.problems]
    assert ("a", 1, 2) in where and ("a", 1, 3) in where and ("b", 0, 0) in where
    assert all(p.file == path for p in report.problems)
    assert str(report.problems[0]).startswith(f"{path}: tensor 'a', level 1, index")


def test_validate_empty_container_is_fine(path):
    with LodWriter(path):
        pass
    assert validate_file(path).ok and inspect_file(path)["tensors"] == []
    with pytest.raises(LodFormatError, match="holds no tensors"):
        load(path)




# -- token ids against a vocabulary --------------------------------------------------------------------------
def test_a_given_vocab_size_checks_the_ids_over_the_recorded_one_block_by_block(path):
    from lodtool.container.checks import token_id_problems
    from lodtool.container.reader import open_file
    from lodtool.tokens import TokenInfo

    ids = LoDTensor(np.array([1, 2, 3, 9, 4, 8], np.uint16), [[0, 3, 6]])
    with LodWriter(path) as w:
        w.add_tensor("ids", lod_level=1, tokens=TokenInfo(vocab_size=10)).append(ids)
        w.add_tensor("plain", lod_level=1).append(ids)
        w.add_tensor("scores", lod_level=1).append(LoDTensor(np.full(6, 99.0), [[0, 3, 6]]))
    assert validate_file(path).ok  # the recorded 10 holds every id; "plain" records none
    report = validate_file(path, vocab_size=5)
    found = [(p.tensor, p.index) for p in report.problems]
    assert found == [("ids", 3), ("ids", 5), ("plain", 3), ("plain", 5)]  # the floats hold no ids: not checked
    assert "data row 3: token id 9 is not under the vocabulary size 5" in report.problems[0].message
    with open_file(path) as f:  # in blocks of 2 rows, the rows counted across the blocks
        assert [p.index for p in token_id_problems(path, "ids", f["ids"], vocab_size=5, block_rows=2)] == [3, 5]
        assert [p.index for p in token_id_problems(path, "ids", f["ids"], vocab_size=5, block_rows=2,
                                                   max_problems=1)] == [3]
    assert validate_file(path, vocab_size=100).ok


def many_tensors(path: str, n: int) -> None:
    """A container of ``n`` small tensors ``t0``.. (copied in HDF5: saving them one by one is slower)."""
    save(path, LoDTensor(np.arange(7, dtype=np.int32), [[0, 2, 3, 7]]), name="t0")
    with h5py.File(path, "r+") as f:
        for i in range(1, n):
            f.copy("t0", f"t{i}")


def test_verify_holds_no_handle_of_the_datasets_it_is_not_hashing(path, monkeypatch):
    from lodtool.container import checks

    many_tensors(path, 300)
    open_objects = []
    hash_one = checks._verify_dataset

    def counting(p, ds, *args, **kwargs):
        open_objects.append(h5py.h5f.get_obj_count(ds.file.id, h5py.h5f.OBJ_DATASET | h5py.h5f.OBJ_GROUP))
        return hash_one(p, ds, *args, **kwargs)

    monkeypatch.setattr(checks, "_verify_dataset", counting)
    assert verify_file(path) == []
    assert len(open_objects) == 600 and max(open_objects) <= 8  # not two datasets per tensor of the file


def test_inspect_of_many_tensors_describes_each(path):
    many_tensors(path, 300)
    info = inspect_file(path)
    assert [t["name"] for t in info["tensors"]] == [f"t{i}" for i in range(300)]
    assert {json.dumps(t["levels"]) for t in info["tensors"]} == {json.dumps(info["tensors"][0]["levels"])}
    assert info["tensors"][299]["levels"][0]["sequences"] == 3 and info["tensors"][299]["rows"] == 7


def test_inspect_of_many_tensors_reads_each_attribute_once(path, monkeypatch):
    from h5py._hl.attrs import AttributeManager

    N = 600
    many_tensors(path, N)
    with h5py.File(path, "r+") as f:  # half of them with level names and token metadata too
        for i in range(0, N, 2):
            f[f"t{i}"].attrs.update({"level_names": ["doc"], "vocab_size": 100 + i})
    reads, listings = [], []
    read, iterate = AttributeManager.__getitem__, h5py.h5a.iterate

    def counted_read(self, name):
        reads.append(name)
        return read(self, name)

    def counted_iterate(obj, *args, **kwargs):
        listings.append(obj)
        return iterate(obj, *args, **kwargs)

    monkeypatch.setattr(AttributeManager, "__getitem__", counted_read)
    monkeypatch.setattr(h5py.h5a, "iterate", counted_iterate)
    info = inspect_file(path)
    with h5py.File(path, "r") as f:
        stored = sum(len(f[f"t{i}"].attrs) for i in range(N))
    root_reads = sum(1 for name in reads if name.startswith("lodtool_"))
    assert len(reads) - root_reads <= stored  # no attribute of a tensor read twice
    assert len(listings) <= N + 1  # one listing per tensor (and the root's)
    summaries = info["tensors"]
    assert [t["name"] for t in summaries] == [f"t{i}" for i in range(N)]
    assert summaries[0]["level_names"] == ["doc"] and summaries[0]["tokens"]["vocab_size"] == 100
    assert summaries[1]["level_names"] is None and summaries[1]["tokens"] is None
    assert summaries[N - 2]["tokens"]["vocab_size"] == 100 + N - 2
    assert {json.dumps(t["levels"][0]["sequences"]) for t in summaries} == {"3"}


def test_validate_describes_each_tensor_once_and_holds_one_open_at_a_time(path, monkeypatch):
    from lodtool.container import reader

    many_tensors(path, 300)
    described, open_objects = [], []
    describe, check = reader.describe_tensor, LazyTensor.validate

    def counted_describe(group, *args):
        described.append(group.name)
        return describe(group, *args)

    def counted_check(t, *args, **kwargs):
        open_objects.append(h5py.h5f.get_obj_count(t._data.file.id, h5py.h5f.OBJ_DATASET | h5py.h5f.OBJ_GROUP))
        return check(t, *args, **kwargs)

    monkeypatch.setattr(reader, "describe_tensor", counted_describe)
    monkeypatch.setattr(LazyTensor, "validate", counted_check)
    report = validate_file(path)
    assert report.ok and report.paddle_valid
    assert sorted(described) == sorted(f"/t{i}" for i in range(300))  # once each
    assert len(open_objects) == 300 and max(open_objects) <= 8  # not every tensor opened so far


@pytest.mark.parametrize("check", ["inspect_file", "spooled_inspection", "verify_file", "validate_file"])
def test_checks_of_many_tensors_open_each_object_of_a_tensor_once(path, monkeypatch, check):
    from collections import Counter

    from lodtool.container import _h5, checks

    N = 200
    many_tensors(path, N)
    calls = Counter()
    for module, name in ((h5py.h5o, "open"), (h5py.h5i, "get_file_id"), (_h5, "_chunk_bound")):
        def counted(*args, _original=getattr(module, name), _name=name, **kwargs):
            calls[_name] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(module, name, counted)
    result = getattr(checks, check)(path)
    assert list(result["tensors"]) if check.endswith("inspection") else result is not None
    # a tensor is four objects (its group, its data, the lod group, lod/0): each opened once, the file's intent
    # asked once per tensor (its members are its group's), and offsets of a few chunks never looked up chunk by chunk
    assert calls["open"] <= 4 * N + 10
    assert calls["get_file_id"] < N
    assert calls["_chunk_bound"] == 0


def test_spooled_inspection_holds_no_entries_in_memory(tmp_path):
    import tracemalloc

    from lodtool.container.checks import spooled_inspection

    peaks = []
    for n in (100, 400):
        path = str(tmp_path / f"many{n}.lod.h5")
        many_tensors(path, n)
        spooled_inspection(path)  # imports and caches first
        tracemalloc.start()
        try:
            info = spooled_inspection(path)
            assert sum(1 for _ in info["tensors"]) == len(info["tensors"]) == n
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
    # the names and what each tensor's offsets are (about 400 B a tensor), not the entries (1.5 KB each held)
    assert peaks[1] - peaks[0] < 300 * 800


def test_spooled_inspection_is_inspect_file(tmp_path):
    from lodtool.container.checks import spooled_inspection

    path = str(tmp_path / "shared.lod.h5")
    t = LoDTensor(np.arange(6), [[0, 2, 6]])
    save(path, {"a": t, "b": LoDTensor(np.ones(6), t.lod), "c": LoDTensor(np.arange(3.0), [[0, 1, 3]]),
                "d": LoDTensor(np.zeros(6, np.int8), t.lod)})
    info = spooled_inspection(path)
    assert {**info, "tensors": list(info["tensors"])} == inspect_file(path)
    assert [t["shared_lod_with"] for t in info["tensors"]] == [["b", "d"], ["a", "d"], [], ["a", "b"]]
    assert list(info["tensors"]) == list(info["tensors"])  # read again from the first


def test_verify_counts_and_hashes_each_dataset_once(path, monkeypatch):
    from lodtool.container import checks

    t = LoDTensor(np.arange(6), [[0, 2, 6]])
    save(path, {"a": t, "b": LoDTensor(np.ones(6), t.lod), "c": LoDTensor(np.arange(3.0))})
    hashed = []
    hash_one = checks._verify_dataset
    monkeypatch.setattr(checks, "_verify_dataset",
                        lambda p, ds, label, *a: hashed.append(label) or hash_one(p, ds, label, *a))
    found = checks.verify_datasets(path)
    assert found == checks.Verification([], 4, None)  # a's data and offsets, b's data, c's data
    assert hashed == ["/a/data", "/a/lod/0", "/b/data", "/c/data"]
