"""The container reader: round trips, lazy partial reads, chunks, layout checks of hostile and broken files, level statistics, cost."""

from __future__ import annotations

import subprocess
import sys

import h5py
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lodtool import LoDTensor
from lodtool.container import (FileReport, LazyTensor, LodFile, LodWriter, inspect_file, load, open_file, save,
                               validate_file, verify_file)
from lodtool.errors import (LodFileNotFoundError, LodFormatError, LodIndexError, LodMemoryError, LodUsageError,
                            LodValidationError, LodVersionError)

from .container_helpers import ARTICLES, ROOT, articles, path, raises_same, same, small_chunks, tmpfile  # noqa: F401
from .strategies import lod_tensors


# -- round trips ----------------------------------------------------------------------------------------
@given(lod_tensors(min_levels=0, max_levels=3), st.booleans())
def test_round_trip(t, named):
    if named and t.lod_level:
        t = t.with_level_names([f"l{k}" for k in range(t.lod_level)])
    p = tmpfile()
    save(p, t)
    back = load(p)
    assert same(back, t)
    assert back.dtype == t.dtype and back.shape == t.shape
    assert verify_file(p) == []
    assert validate_file(p).ok


@given(lod_tensors(min_levels=1, max_levels=3), st.lists(st.integers(-8, 8), min_size=0, max_size=4))
def test_lazy_branch_equals_in_memory(t, path_):
    p = tmpfile()
    save(p, t)
    with open_file(p) as f:
        lazy = f.tensor()
        raises_same(lambda: t.branch(*path_), lambda: lazy.branch(*path_))


@given(lod_tensors(min_levels=1, max_levels=3), st.integers(-3, 3), st.integers(-1, 8), st.integers(-1, 9),
       st.integers(0, 7))
def test_lazy_slices_equal_in_memory(t, level, begin, end, k):
    p = tmpfile()
    save(p, t)
    with open_file(p) as f:
        lazy = f.tensor()
        assert (len(lazy), lazy.shape, lazy.dtype, lazy.lod_level) == (len(t), t.shape, t.dtype, t.lod_level)
        assert lazy.level_sizes == [len(o) for o in t.offsets]
        raises_same(lambda: t.slice_level(level, begin, end), lambda: lazy.slice_level(level, begin, end))
        if k:
            raises_same(lambda: t.head(k), lambda: lazy.head(k))
            raises_same(lambda: t.tail(k), lambda: lazy.tail(k))
        for lv in range(t.lod_level):
            assert lazy.read_offsets(lv).tolist() == t.lod[lv]


@given(lod_tensors(min_levels=0, max_levels=3), st.integers(1, 12))
def test_iter_chunks_concatenate_to_whole(t, max_rows):
    p = tmpfile()
    save(p, t)
    with open_file(p) as f:
        chunks = list(f.tensor().iter_chunks(max_rows=max_rows))
    assert chunks
    data = np.concatenate([np.asarray(c) for c in chunks])
    assert np.array_equal(data, np.asarray(t))
    if t.lod_level:
        for c in chunks:  # every chunk is a valid tensor of whole top-level sequences
            LoDTensor(np.asarray(c), c.lod)
        # rebuild the whole LoD by concatenating the chunks' lengths
        lengths = [sum((c.recursive_sequence_lengths[k] for c in chunks), []) for k in range(t.lod_level)]
        assert lengths == t.recursive_sequence_lengths


def test_iter_chunks_respects_max_rows(path):
    t = LoDTensor(np.arange(100), recursive_sequence_lengths=[[10] * 10])
    save(path, t, force=True)
    with open_file(path) as f:
        sizes = [c.shape[0] for c in f.tensor().iter_chunks(max_rows=25)]
    assert sizes == [20, 20, 20, 20, 20]
    # one sequence larger than max_rows is one chunk on its own
    save(path, LoDTensor(np.arange(12), recursive_sequence_lengths=[[1, 10, 1]]), force=True)
    with open_file(path) as f:
        assert [c.lod for c in f.tensor().iter_chunks(max_rows=2)] == [[[0, 1]], [[0, 10]], [[0, 1]]]


def test_iter_chunks_never_yields_an_empty_lower_level(path):
    # top-level sequences 0 and 2 have no sentences: no chunk may consist of them alone
    t = LoDTensor(np.arange(4), recursive_sequence_lengths=[[0, 2, 0], [2, 2]])
    save(path, t)
    with open_file(path) as f:
        chunks = list(f.tensor().iter_chunks(max_rows=1))
    assert all(len(o) >= 2 for c in chunks for o in c.offsets)
    assert sum(len(c) for c in chunks) == 3


def test_zero_level_and_empty_sequences(path):
    save(path, {"plain": LoDTensor(np.arange(5.0)), "empty": LoDTensor(np.zeros((0, 3)), [[0, 0, 0]])})
    with open_file(path) as f:
        assert f["plain"].lod_level == 0 and len(f["plain"]) == 5
        assert f["plain"].head(2).data.tolist() == [0.0, 1.0]
        assert f["plain"].tail(2).data.tolist() == [3.0, 4.0]
        with pytest.raises(LodIndexError, match="0-level"):
            f["plain"].branch(0)
        e = f["empty"]
        assert e.shape == (0, 3) and len(e) == 2
        assert e.branch(1).shape == (0, 3)
    assert load(path, "empty").lod == [[0, 0, 0]]


def test_element_shapes_and_dtypes(path):
    tensors = {
        "f16": LoDTensor(np.arange(6, dtype=np.float16).reshape(3, 2), [[0, 3]]),
        "c128": LoDTensor(np.array([1 + 2j, 3j]), [[0, 1, 2]]),
        "b": LoDTensor(np.array([True, False, True]), [[0, 3]]),
        "u64": LoDTensor(np.array([2**64 - 1], dtype=np.uint64), [[0, 1]]),
        "be": LoDTensor(np.arange(4, dtype=">i4").reshape(2, 2), [[0, 2]]),
        "cube": LoDTensor(np.ones((2, 2, 3, 4), np.float32), [[0, 2]]),
        "zero_width": LoDTensor(np.zeros((3, 0)), [[0, 3]]),
    }
    save(path, tensors)
    for name, t in tensors.items():
        back = load(path, name)
        assert np.array_equal(back.data, t.data) and back.shape == t.shape, name
        assert back.dtype == t.dtype.newbyteorder("<") or back.dtype == t.dtype
    assert load(path, "be").dtype.byteorder in "=<|"
    assert verify_file(path) == []


def test_names_and_lookup(path):
    save(path, {"a": articles(), "b": LoDTensor(np.arange(3), [[0, 3]])})
    with pytest.raises(LodUsageError, match="'a'.*'b'|a, b"):
        load(path)
    with pytest.raises(LodFileNotFoundError, match="no tensor named 'zz'"):
        load(path, "zz")
    with open_file(path) as f:
        assert isinstance(f, LodFile) and list(f) == ["a", "b"] and "a" in f and "zz" not in f
        assert isinstance(f.tensor("a"), LazyTensor) and f["a"] is f.tensor("a")
        assert f["a"][2, 0].data.tolist() == [11, 12]
    for bad in ["", "a/b", "_x", ".x"]:
        with pytest.raises(LodUsageError, match="bad tensor name"):
            save(path, {bad: articles()})
    with pytest.raises(LodUsageError):
        save(path, {})
    with pytest.raises(LodUsageError):
        save(path, [articles()])


# -- hostile and broken files ---------------------------------------------------------------------------------
def test_missing_file(path):
    for fn in (load, open_file, validate_file, inspect_file, verify_file):
        with pytest.raises(LodFileNotFoundError, match=f"{path}: no such file"):
            fn(path)


def test_not_hdf5_empty_folder(path, tmp_path):
    open(path, "w").write("[[1, 2], [3]]\n")
    with pytest.raises(LodFormatError, match=f"{path}: not an HDF5 file"):
        load(path)
    open(path, "w").close()
    with pytest.raises(LodFormatError, match=f"{path}: empty file"):
        validate_file(path)
    with pytest.raises(LodFormatError, match="is a folder"):
        open_file(str(tmp_path))


def test_truncated_file(path):
    save(path, LoDTensor(np.arange(100_000), [[0, 100_000]]))
    raw = open(path, "rb").read()
    open(path, "wb").write(raw[: len(raw) // 2])
    with pytest.raises(LodFormatError) as info:
        load(path)
    assert str(info.value).startswith(f"{path}: ")


def test_foreign_hdf5_and_versions(path):
    with h5py.File(path, "w") as f:
        f["data"] = np.arange(3)
    with pytest.raises(LodFormatError, match=r"not a lodtool container \(the root attribute 'lodtool_format'"):
        load(path)
    with h5py.File(path, "w") as f:
        f.attrs["lodtool_format"] = "zarr"
    with pytest.raises(LodFormatError, match="not a lodtool container"):
        open_file(path)
    save(path, articles(), force=True)
    for version, error, message in [("2.0", LodVersionError, "version 2.0 is not supported .this lodtool reads 1.x"),
                                    ("1", LodFormatError, "not of the form MAJOR.MINOR"),
                                    ("01.0", LodFormatError, "not of the form"),
                                    ("1.0 ", LodFormatError, "not of the form")]:
        with h5py.File(path, "r+") as f:
            f.attrs["lodtool_format_version"] = version
        with pytest.raises(error, match=message):
            open_file(path)
    with h5py.File(path, "r+") as f:
        f.attrs["lodtool_format_version"] = np.int64(1)
    with pytest.raises(LodFormatError, match="not a string"):
        open_file(path)
    with h5py.File(path, "r+") as f:
        f.attrs["lodtool_format_version"] = b"1.0"  # bytes from other writers are fine
    assert open_file(path).format_version == "1.0"


def _rewrite(path: str, name: str, values, **kw) -> None:
    with h5py.File(path, "r+") as f:
        del f[name]
        f.create_dataset(name, data=values, **kw)


@pytest.mark.parametrize("values,message", [
    (np.array([0.0, 3.0, 4.0, 6.0]), "offsets have dtype float64; offsets must be integers"),
    (np.array([False, True, True, True]), "offsets have dtype bool"),
    (np.array([[0, 3, 4, 6]]), "offsets must be 1-D"),
])
def test_offsets_of_the_wrong_kind(path, values, message):
    save(path, articles())
    _rewrite(path, "tensor/lod/0", values)
    with pytest.raises(LodFormatError, match=message):
        load(path)
    report = validate_file(path)
    assert not report.ok and report.error is None
    assert any(message in p.message and p.level == 0 and p.tensor == "tensor" for p in report.problems)


def test_offsets_beyond_int64(path):
    save(path, articles())
    _rewrite(path, "tensor/lod/1", np.array([0, 3, 5, 9, 10, 12, 2**63], dtype=np.uint64))
    problems = validate_file(path).problems
    assert [(p.level, p.message) for p in problems if p.level is not None] == [(1, "offsets do not fit in int64")]
    with pytest.raises(LodValidationError, match="do not fit in int64"):
        load(path)


@pytest.mark.parametrize("level,values,message", [
    (1, [0, 3, 5, 4, 10, 12, 15], "offset[3]=4 < offset[2]=5"),
    (0, [1, 3, 4, 6], "the first offset must be 0"),
    (0, [0, 3, 4, 5], "level 1 has 6 sequences"),
    (1, [0, 3, 5, 9, 10, 12, 14], "the data has 15 rows"),
    (0, [0], "offset[0]=0 but level 1 has 6 sequences"),  # zero sequences: legal, but not over 6 below
    (0, [], "a level needs at least the offset 0"),
])
def test_bad_offsets_are_reported_and_refused(path, level, values, message):
    save(path, articles())
    _rewrite(path, f"tensor/lod/{level}", np.array(values, dtype=np.int64), maxshape=(None,), chunks=(2,))
    report = validate_file(path)
    assert not report.ok and isinstance(report, FileReport)
    assert any(message in p.message for p in report.problems), report.problems
    with pytest.raises(LodValidationError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load(path)
    with pytest.raises(LodValidationError):
        with open_file(path) as f:
            list(f.tensor().iter_chunks())


def test_branch_checks_the_windows_it_reads(path):
    save(path, articles())
    with h5py.File(path, "r+") as f:
        f["tensor/lod/0"][2] = 99  # points past level 1
    with open_file(path) as f:
        t = f.tensor()
        with pytest.raises(LodValidationError, match="past the 6 sequences of level 1"):
            t.branch(1)
        assert t.branch(0).data.tolist() == [1, 2, 3, 4, 5, 6, 7, 8, 9]  # untouched part still reads


def test_layout_problems(path):
    save(path, {"x": articles()}, force=True)
    with h5py.File(path, "r+") as f:
        f["x"].attrs["lod_level"] = 3
    with pytest.raises(LodFormatError, match="'lod/2' is missing"):
        load(path)
    with h5py.File(path, "r+") as f:
        f["x"].attrs["lod_level"] = "two"
    with pytest.raises(LodFormatError, match="expected an integer"):
        load(path)
    save(path, {"x": articles()}, force=True)
    with h5py.File(path, "r+") as f:
        f["x/data2"] = h5py.ExternalLink("/etc/passwd", "/")
        del f["x/data"]
        f["x/data"] = h5py.SoftLink("/x/data2")
    with pytest.raises(LodFormatError, match="'data' is missing or not a dataset"):
        load(path)
    save(path, {"x": articles()}, force=True)
    with h5py.File(path, "r+") as f:
        del f["x/data"]
        f["x/data"] = np.array(["a", "b"], dtype=h5py.string_dtype())
    assert not validate_file(path).ok
    with pytest.raises(LodFormatError):
        load(path)


def test_memory_limit(path):
    save(path, LoDTensor(np.zeros(10_000), [[0, 5_000, 10_000]]))
    with pytest.raises(LodMemoryError, match="above the memory limit of 1.0 KiB"):
        load(path, max_memory=1024)
    with open_file(path, max_memory=1024) as f:
        with pytest.raises(LodMemoryError):
            f.tensor().branch(0)
        assert f.tensor().validate() == []  # blockwise, allocates nothing big
    with pytest.raises(LodUsageError):
        load(path, max_memory=0)


def test_claimed_huge_size_is_refused_before_allocating(path):
    with h5py.File(path, "w") as f:
        f.attrs["lodtool_format"] = "lodtool"
        f.attrs["lodtool_format_version"] = "1.0"
        g = f.create_group("x")
        g.attrs["lod_level"] = 1
        g.create_dataset("data", shape=(10**12,), dtype="f8", chunks=(1 << 16,), maxshape=(None,))
        g.create_dataset("lod/0", data=np.array([0, 10**12]))
    with pytest.raises(LodMemoryError, match="reading tensor 'x' needs"):
        load(path)
    with open_file(path) as f:
        assert f["x"].shape == (10**12,)
        with pytest.raises(LodMemoryError):
            f["x"].branch(0)
    assert inspect_file(path)["tensors"][0]["rows"] == 10**12


def test_sizes_without_stored_chunks_are_refused(path):
    # a crafted shape whose chunks are not stored would read as zeros, block after block, for ages
    save(path, {"x": articles(), "y": LoDTensor(np.arange(3), [[0, 3]])})
    with h5py.File(path, "r+") as f:
        f["x/lod/1"].resize((10**12,))
        f["y/data"].resize((10**15,))
    report = validate_file(path)
    assert any("stores 1 of its" in p.message and p.tensor == "x" and p.level == 1 for p in report.problems)
    with pytest.raises(LodFormatError, match="offsets dataset claims shape"):
        load(path, "x")
    with pytest.raises(LodFormatError, match="the data claims shape"):
        load(path, "y", max_memory=1 << 62)
    bad = {m.dataset: m for m in verify_file(path)}
    assert "stores 1 of its" in bad["/y/data"].error and "stores 1 of its" in bad["/x/lod/1"].error
    with pytest.raises((LodFormatError, LodValidationError), match="cannot append|refusing to append"):
        with LodWriter(path, append=True) as w:
            w.write("y", LoDTensor(np.arange(3), [[0, 3]]))


def test_default_memory_limit():
    from lodtool.limits import default_max_memory

    assert (1 << 20) <= default_max_memory() <= (4 << 30)


@given(st.lists(st.integers(0, 40), min_size=1, max_size=60))
def test_level_stats_match_numpy(lengths):
    p = tmpfile()
    t = LoDTensor(np.zeros(sum(lengths)), recursive_sequence_lengths=[lengths])
    save(p, t)
    with open_file(p) as f:
        stats = f.tensor().level_stats(0)
    a = np.array(lengths)
    assert stats == {"count": a.size, "min": int(a.min()), "median": float(np.median(a)), "mean": float(a.mean()),
                     "max": int(a.max()), "empty": int((a == 0).sum())}


def test_level_stats_blockwise_and_long_lengths(path, monkeypatch):
    from lodtool.container import reader as lazy

    monkeypatch.setattr(lazy, "OFFSET_BLOCK", 3)
    lengths = [5, 0, 2_000_000, 1, 7, 0, 3]
    save(path, LoDTensor(np.zeros(sum(lengths), np.int8), recursive_sequence_lengths=[lengths]))
    with open_file(path) as f:
        assert f.tensor().level_stats(0) == {"count": 7, "min": 0, "median": 3.0, "mean": sum(lengths) / 7,
                                             "max": 2_000_000, "empty": 2}
        assert f.tensor().validate() == []


# -- cost -------------------------------------------------------------------------------------------------
def test_import_is_light():
    code = ("import sys, lodtool.container.checks, lodtool.container.reader\n"
            "heavy = [m for m in ('numba', 'rich', 'click', 'hdf5plugin') if m in sys.modules]\n"
            "print(heavy)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.stdout.strip() == "[]", proc.stderr


def test_branches_of_a_large_file_match_memory(path):
    # its speed against raw h5py is a benchmark target (benchmarks/bench_slice.py), not a timed test
    rng = np.random.default_rng(0)
    lengths0 = rng.integers(1, 20, 5_000)
    lengths1 = rng.integers(1, 30, int(lengths0.sum()))
    t = LoDTensor(np.arange(int(lengths1.sum()), dtype=np.int32), recursive_sequence_lengths=[lengths0, lengths1])
    save(path, t)
    with open_file(path) as f:
        lazy = f.tensor()
        for i in rng.integers(0, len(t), 20):
            assert lazy.branch(int(i)).equals(t.branch(int(i)))


def test_short_reads_of_a_compressed_tensor_share_one_bounded_cache_of_decoded_chunks(tmp_path):
    from lodtool.container.reader import CACHED_READ_CHUNKS

    lengths = np.full(2000, 100)  # 200,000 int64 rows: 25 chunks of 8,192
    t = LoDTensor(np.arange(200_000, dtype=np.int64), recursive_sequence_lengths=[[4] * 500, list(lengths)])
    path = str(tmp_path / "c.lod.h5")
    save(path, t)
    with open_file(path) as f:
        x = f.tensor()
        cache = x.decoded_chunks()
        assert cache is x.decoded_chunks() and cache.decodes == 0
        a = x.branch(3)
        assert a.data.tolist() == list(range(1200, 1600)) and cache.decodes == 1
        a.data  # a copy: later reads never change it
        x.branch(4), x.read_rows(1000, 1100), x.slice_level(1, 10, 15)
        assert cache.decodes == 1  # the same chunk, decoded once
        x.branch(499)
        assert cache.decodes == 2
        assert np.array_equal(x.read_rows(0, 200_000), t.data)  # a long read decodes directly
        assert cache.decodes == 2 and CACHED_READ_CHUNKS < 25
    with open_file(path) as f:
        x = f.tensor()
        small = x.decoded_chunks(budget_bytes=2 * 8192 * 8)  # two chunks: the first reads evict
        for i in range(0, 500, 37):
            assert x.branch(i).data.tolist() == list(range(400 * i, 400 * i + 400))
        assert small.slots == 2 and small.cached.nbytes == 2 * 8192 * 8


def test_shared_offsets_of_every_tensor_are_found_in_one_pass(tmp_path, monkeypatch):
    from lodtool.container import reader

    path = str(tmp_path / "many.lod.h5")
    x = LoDTensor(np.arange(3), [[0, 1, 3]])
    save(path, {"a": x, "b": LoDTensor(np.arange(3.0), [[0, 1, 3]]), **{f"t{i}": LoDTensor(np.arange(i + 1), [[0, i + 1]])
                                                             for i in range(40)}})
    described = []
    real = reader.describe_tensor
    monkeypatch.setattr(reader, "describe_tensor", lambda *a, **k: described.append(a[2]) or real(*a, **k))
    with reader.open_file(path) as f:
        shared = {name: f.shared_lod_with(name) for name in f.names}
    assert shared["a"] == ["b"] and shared["b"] == ["a"] and shared["t3"] == []
    assert len(described) == len(shared)  # each tensor's layout read once, not once per pair


def test_inspect_holds_one_tensor_open_at_a_time(tmp_path, monkeypatch):
    import gc
    import weakref

    from lodtool.container import checks, reader

    path = str(tmp_path / "many.lod.h5")
    save(path, {f"t{i}": LoDTensor(np.arange(i + 1), [[0, i + 1]]) for i in range(30)})
    live, most = weakref.WeakSet(), []
    real = reader.LazyTensor.__init__

    def counted(self, *args, **kwargs):
        real(self, *args, **kwargs)
        gc.collect()
        live.add(self)
        most.append(len(live))

    monkeypatch.setattr(reader.LazyTensor, "__init__", counted)
    info = checks.inspect_file(path)
    assert len(info["tensors"]) == 30 and max(most) == 1  # each tensor's HDF5 objects closed before the next


def test_inspect_reads_each_layout_once_and_names_the_tensors_that_share_offsets(tmp_path, monkeypatch):
    from lodtool.container import checks, reader

    path = str(tmp_path / "many.lod.h5")
    x = LoDTensor(np.arange(3), [[0, 1, 3]])
    save(path, {"a": x, "b": LoDTensor(np.arange(3.0), [[0, 1, 3]]), "c": LoDTensor(np.arange(2), [[0, 2]])})
    described = []
    real = reader.describe_tensor
    monkeypatch.setattr(reader, "describe_tensor", lambda *a, **k: described.append(a[2]) or real(*a, **k))
    info = checks.inspect_file(path)
    assert {t["name"]: t["shared_lod_with"] for t in info["tensors"]} == {"a": ["b"], "b": ["a"], "c": []}
    assert sorted(described) == ["a", "b", "c"]


def test_describe_lists_the_attributes_once_instead_of_checking_each(tmp_path, monkeypatch):
    # an HDF5 existence check per attribute per tensor made inspect of a file of many tensors slow
    p = str(tmp_path / "many.lod.h5")
    save(p, {f"t{i}": LoDTensor(np.arange(4, dtype="int32"), recursive_sequence_lengths=[[2, 2]]) for i in range(5)})
    checked = []
    contains = h5py.AttributeManager.__contains__
    with open_file(p) as f:
        monkeypatch.setattr(h5py.AttributeManager, "__contains__",
                            lambda self, key: checked.append(key) or contains(self, key))
        layouts = [f.describe(name)[0] for name in f.names]
    assert [layout.name for layout in layouts] == [f"t{i}" for i in range(5)]
    assert checked == []


def test_read_attribute_gives_what_h5py_gives_for_every_kind(tmp_path):
    from lodtool.container.reader import read_attribute

    values = {"int": np.int64(3), "big": np.array(7, ">i4"), "u8": np.uint8(200), "bool": True, "float": 2.5,
              "text": "deflate", "utf8": "naïve ✓", "fixed": np.bytes_(b"<i8"), "array": np.arange(3),
              "one": np.array([2]), "names": np.array(["doc", "sentence"], dtype=h5py.string_dtype()),
              "empty": h5py.Empty("f4")}
    with h5py.File(tmp_path / "a.h5", "w") as h5:
        h5.attrs.update(values)
        h5.attrs.create("ascii", "x", dtype=h5py.string_dtype("ascii"))
        h5.attrs.create("bad", b"\xff\xfe", dtype=h5py.string_dtype("utf-8"))  # not UTF-8 inside
        for name in [*values, "ascii", "bad"]:
            got, want = read_attribute(h5, name), h5.attrs[name]
            assert type(got) is type(want) and repr(got) == repr(want), name
            if isinstance(want, np.ndarray):
                assert got.dtype == want.dtype and got.shape == want.shape
