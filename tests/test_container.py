"""The container: round trips, lazy partial reads, append, compression, checksums and hostile files."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lodtool import LoDTensor
from lodtool.errors import (LodChecksumError, LodDtypeError, LodFileNotFoundError, LodFormatError, LodIndexError,
                            LodMemoryError, LodShapeError, LodUsageError, LodValidationError, LodVersionError)
from lodtool.format import filters, writer
from lodtool.format.atomic import is_temp_path
from lodtool.format.container import (ChecksumMismatch, FileReport, LazyTensor, LodFile, LodWriter, inspect_file,
                                      load, open_file, save, validate_file, verify_file)

from .strategies import lod_tensors

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARTICLES = [[3, 1, 2], [3, 2, 4, 1, 2, 3]]


def articles(**kw) -> LoDTensor:
    return LoDTensor(np.arange(1, 16), recursive_sequence_lengths=ARTICLES, **kw)


_TMP = tempfile.TemporaryDirectory(prefix="lodtool-test-")  # removed when the interpreter exits
_COUNT = itertools.count()


def tmpfile(name: str = "t.lod.h5") -> str:
    """A fresh file name (hypothesis tests cannot use pytest's function-scoped tmp_path)."""
    folder = os.path.join(_TMP.name, str(next(_COUNT)))
    os.mkdir(folder)
    return os.path.join(folder, name)


@pytest.fixture
def path(tmp_path) -> str:
    return str(tmp_path / "t.lod.h5")


def same(a: LoDTensor, b: LoDTensor) -> bool:
    return a.equals(b) and a.level_names == b.level_names


def raises_same(fn_a, fn_b):
    """Both calls give equal tensors, or both raise the same error type and message."""
    try:
        a = fn_a()
    except (LodIndexError, LodValidationError) as exc:
        with pytest.raises(type(exc)) as info:
            fn_b()
        assert str(info.value) == str(exc)
        return
    b = fn_b()
    assert same(a, b), (a, b)


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
    save(path, t)
    with open_file(path) as f:
        sizes = [c.shape[0] for c in f.tensor().iter_chunks(max_rows=25)]
    assert sizes == [20, 20, 20, 20, 20]
    # one sequence larger than max_rows is one chunk on its own
    save(path, LoDTensor(np.arange(12), recursive_sequence_lengths=[[1, 10, 1]]))
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


# -- shared offsets -------------------------------------------------------------------------------------
def test_share_lod_hard_links(path):
    tokens = articles(level_names=["article", "sentence"])
    labels = LoDTensor(np.arange(15, dtype=np.int8), tokens.lod)
    other = LoDTensor(np.arange(15), recursive_sequence_lengths=[[1], [15]])
    save(path, {"tokens": tokens, "labels": labels, "other": other})
    with h5py.File(path, "r") as f:
        assert f["tokens/lod/0"].id == f["labels/lod/0"].id and f["tokens/lod/1"].id == f["labels/lod/1"].id
        assert f["other/lod/0"].id != f["tokens/lod/0"].id
    info = inspect_file(path)
    shared = {t["name"]: t["shared_lod_with"] for t in info["tensors"]}
    assert shared == {"tokens": ["labels"], "labels": ["tokens"], "other": []}
    assert same(load(path, "labels"), labels)
    save(path, {"tokens": tokens, "labels": labels}, share_lod=False)
    with h5py.File(path, "r") as f:
        assert f["tokens/lod/0"].id != f["labels/lod/0"].id


def test_link_lod(path):
    with LodWriter(path) as w:
        w.write("tokens", articles())
        w.write("labels", LoDTensor(np.zeros(15, np.int8), articles().lod))
        w.link_lod("labels", "tokens")
    with open_file(path) as f:
        assert f.shared_lod_with("labels") == ["tokens"]
    assert verify_file(path) == []
    with pytest.raises(LodShapeError, match="different LoDs"):
        with LodWriter(tmpfile()) as w:
            w.write("a", articles())
            w.write("b", LoDTensor(np.arange(15), [[0, 15]]))
            w.link_lod("b", "a")
    with pytest.raises(LodUsageError):
        with LodWriter(tmpfile()) as w:
            w.link_lod("a", "nope")


# -- the streaming writer -----------------------------------------------------------------------------------
@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of 64 bytes, so a handful of rows spans several chunks and buffer boundaries."""
    monkeypatch.setattr(writer, "CHUNK_BYTES", 64)
    monkeypatch.setattr(writer, "MIN_CHUNK_BYTES", 16)


@given(st.lists(lod_tensors(min_levels=2, max_levels=2, dtypes=["int32"], element_shapes=[(3,)]),
                min_size=1, max_size=5))
def test_streamed_appends_equal_concatenation(parts):
    p = tmpfile()
    old = writer.CHUNK_BYTES
    writer.CHUNK_BYTES = 64
    try:
        with LodWriter(p) as w:
            tw = w.add_tensor("x", dtype="int32", element_shape=(3,), lod_level=2)
            for part in parts:
                tw.append(part)
    finally:
        writer.CHUNK_BYTES = old
    back = load(p)
    assert np.array_equal(back.data, np.concatenate([q.data for q in parts]))
    assert back.recursive_sequence_lengths == [sum((q.recursive_sequence_lengths[k] for q in parts), [])
                                               for k in range(2)]
    assert verify_file(p) == []


def test_writer_copies_buffered_rows(path, small_chunks):
    buf = np.arange(3)
    with LodWriter(path) as w:
        tw = w.add_tensor("x", dtype=None, element_shape=(), lod_level=1)
        tw.append(LoDTensor(buf, [[0, 3]]))
        buf[:] = -1  # the caller reuses its buffer
        tw.append(LoDTensor(np.arange(3, 5), [[0, 2]]))
    assert load(path).data.tolist() == [0, 1, 2, 3, 4]


def test_auto_dtype_promotes_by_rewriting(path, small_chunks):
    with LodWriter(path) as w:
        tw = w.add_tensor("x", dtype=None, element_shape=(), lod_level=1)
        tw.append(LoDTensor(np.arange(20), [[0, 20]]))  # several chunks written as int64
        tw.append(LoDTensor(np.array([0.5]), [[0, 1]]))
    t = load(path)
    assert t.dtype == np.float64 and t.data.tolist() == list(range(20)) + [0.5]
    assert verify_file(path) == [] and validate_file(path).ok
    with h5py.File(path) as f:
        assert list(f["x"].keys()) == ["data", "lod"] and f["x"].attrs["dtype"] == "<f8"


def test_explicit_dtype_casts_safely_or_refuses(path):
    with LodWriter(path) as w:
        tw = w.add_tensor("x", dtype="int16", element_shape=(), lod_level=1)
        tw.append(LoDTensor(np.array([1, 2, 300]), [[0, 3]]))  # int64 values that fit
        tw.append(LoDTensor(np.array([4.0]), [[0, 1]]))  # an integral float
    assert load(path).dtype == np.int16 and load(path).data.tolist() == [1, 2, 300, 4]
    for bad in (np.array([70000]), np.array([1.5]), np.array([np.nan])):
        with pytest.raises(LodDtypeError, match="without changing values"):
            with LodWriter(path) as w:
                w.add_tensor("x", dtype="int16", element_shape=(), lod_level=1).append(LoDTensor(bad, [[0, 1]]))
    with LodWriter(path) as w:  # narrower floats round, they do not refuse
        w.add_tensor("x", dtype="float32", element_shape=(), lod_level=1).append(LoDTensor(np.array([0.1]), [[0, 1]]))
    with pytest.raises(LodDtypeError):
        with LodWriter(path) as w:
            w.add_tensor("x", dtype="float16", element_shape=(), lod_level=1).append(
                LoDTensor(np.array([1e6]), [[0, 1]]))
    with pytest.raises(LodDtypeError):
        with LodWriter(path) as w:
            w.add_tensor("x", dtype=object, element_shape=(), lod_level=1)


def test_writer_shape_checks(path):
    with pytest.raises(LodShapeError, match="LoD level"):
        with LodWriter(path) as w:
            w.add_tensor("x", dtype=None, element_shape=(), lod_level=2).append(articles().branch(0))
    with pytest.raises(LodShapeError, match="element shape"):
        with LodWriter(path) as w:
            w.add_tensor("x", dtype=None, element_shape=(2,), lod_level=2).append(articles())
    with pytest.raises(LodShapeError, match="no sequences"):
        with LodWriter(path) as w:
            w.add_tensor("x", dtype="int64", element_shape=(), lod_level=1)
    with pytest.raises(LodShapeError, match="level name"):
        with LodWriter(path) as w:
            w.add_tensor("x", dtype=None, lod_level=2, level_names=["a"])
    with pytest.raises(LodUsageError, match="already"):
        with LodWriter(path) as w:
            w.add_tensor("x", lod_level=1)
            w.add_tensor("x", lod_level=1)
    assert not os.path.exists(path)
    assert not os.listdir(os.path.dirname(path))


def test_writer_without_with(path):
    w = LodWriter(path)
    tw = w.add_tensor("x", dtype=writer.AUTO, lod_level=1)
    tw.append(LoDTensor(np.arange(2), [[0, 2]]))
    assert tw.n_rows == 2
    w.commit()
    with pytest.raises(LodUsageError, match="already closed"):
        w.add_tensor("y", lod_level=0)
    w = LodWriter(path)
    w.write("other", LoDTensor(np.arange(2), [[0, 2]]))
    w.abort()
    assert load(path).data.tolist() == [0, 1]
    del w
    assert os.listdir(os.path.dirname(path)) == ["t.lod.h5"]


def test_iter_chunks_argument(path):
    save(path, articles())
    with open_file(path) as f:
        with pytest.raises(LodUsageError):
            next(f.tensor().iter_chunks(max_rows=0))


def test_write_to_stream():
    import io

    buf = io.BytesIO()
    save(buf, articles())
    p = tmpfile()
    with open(p, "wb") as f:
        f.write(buf.getvalue())
    assert load(p).equals(articles())
    with pytest.raises(LodUsageError):
        LodWriter(io.BytesIO(), append=True)


# -- append ---------------------------------------------------------------------------------------------
def test_append_shifts_offsets_and_updates_checksums(path):
    save(path, {"tokens": articles(level_names=["article", "sentence"])})
    more = LoDTensor(np.array([16, 17, 18]), recursive_sequence_lengths=[[2], [1, 2]])
    with LodWriter(path, append=True) as w:
        w.write("tokens", more)
        w.write("fresh", LoDTensor(np.ones(2), [[0, 2]]))
    t = load(path, "tokens")
    assert t.recursive_sequence_lengths == [[3, 1, 2, 2], [3, 2, 4, 1, 2, 3, 1, 2]]
    assert t.data.tolist() == list(range(1, 19)) and t.level_names == ("article", "sentence")
    assert load(path, "fresh").data.tolist() == [1.0, 1.0]
    assert verify_file(path) == [] and validate_file(path).ok
    with open_file(path) as f:
        assert f.names == ["tokens", "fresh"]


def test_append_to_missing_file_creates_it(path):
    with LodWriter(path, append=True) as w:
        w.write("x", articles())
    assert load(path).equals(articles())


def test_append_many_times_with_small_chunks(path, small_chunks):
    expected = []
    for i in range(6):
        part = LoDTensor(np.arange(i * 5, i * 5 + 5), recursive_sequence_lengths=[[2, 3]])
        expected.extend(range(i * 5, i * 5 + 5))
        with LodWriter(path, append=True) as w:
            w.write("x", part)
    t = load(path)
    assert t.data.tolist() == expected and t.lod == [list(range(0, 31, 5))[:1] + sum(
        ([5 * i + 2, 5 * i + 5] for i in range(6)), [])]
    assert verify_file(path) == []


def test_append_mismatches_are_refused(path):
    save(path, {"x": articles()})
    before = open(path, "rb").read()
    with pytest.raises(LodShapeError, match="LoD level"):
        with LodWriter(path, append=True) as w:
            w.write("x", LoDTensor(np.arange(3), [[0, 3]]))
    with pytest.raises(LodShapeError, match="element shape"):
        with LodWriter(path, append=True) as w:
            w.write("x", LoDTensor(np.ones((2, 2)), recursive_sequence_lengths=[[1], [2]]))
    with pytest.raises(LodDtypeError, match="stores int64"):
        with LodWriter(path, append=True) as w:
            w.add_tensor("x", dtype="float32", element_shape=(), lod_level=2)
    with pytest.raises(LodShapeError, match="level names"):
        save(path, {"x": articles(level_names=["a", "b"])})
        with LodWriter(path, append=True) as w:
            w.write("x", articles(level_names=["c", "d"]))
    assert open(path, "rb").read() != before  # the save inside the last block did happen
    assert not [n for n in os.listdir(os.path.dirname(path)) if is_temp_path(n)]


def test_append_auto_promotes_existing(path):
    save(path, {"x": LoDTensor(np.arange(3), [[0, 3]])})
    with LodWriter(path, append=True) as w:
        w.write("x", LoDTensor(np.array([0.5]), [[0, 1]]))
    t = load(path)
    assert t.dtype == np.float64 and t.data.tolist() == [0, 1, 2, 0.5]
    assert verify_file(path) == []


def test_append_breaks_and_restores_shared_lod(path):
    tokens = articles()
    labels = LoDTensor(np.arange(15, dtype=np.int8), tokens.lod)
    save(path, {"tokens": tokens, "labels": labels})
    more = LoDTensor(np.array([16, 17]), recursive_sequence_lengths=[[1], [2]])
    with LodWriter(path, append=True) as w:
        w.write("tokens", more)
    assert same(load(path, "labels"), labels)  # untouched
    assert load(path, "tokens").recursive_sequence_lengths == [[3, 1, 2, 1], [3, 2, 4, 1, 2, 3, 2]]
    with open_file(path) as f:
        assert f.shared_lod_with("tokens") == []
    assert verify_file(path) == [] and validate_file(path).ok
    # appending the same LoD to the other one makes them equal again: shared again
    with LodWriter(path, append=True) as w:
        w.write("labels", LoDTensor(np.array([1, 2], np.int8), more.lod))
    with open_file(path) as f:
        assert f.shared_lod_with("labels") == ["tokens"]
    # appending to both in one go keeps them shared
    with LodWriter(path, append=True) as w:
        w.write("tokens", more)
        w.write("labels", LoDTensor(np.array([3, 4], np.int8), more.lod))
    with open_file(path) as f:
        assert f.shared_lod_with("tokens") == ["labels"]
    assert verify_file(path) == [] and validate_file(path).ok


def test_append_is_all_or_nothing(path):
    save(path, {"x": articles()})
    before = open(path, "rb").read()
    with pytest.raises(KeyboardInterrupt):
        with LodWriter(path, append=True) as w:
            w.write("x", articles())
            raise KeyboardInterrupt
    assert open(path, "rb").read() == before
    assert os.listdir(os.path.dirname(path)) == ["t.lod.h5"]


def test_killed_append_leaves_the_original(path):
    save(path, {"x": articles()})
    before = open(path, "rb").read()
    code = ("import os, numpy as np, sys\n"
            "from lodtool import LoDTensor\n"
            "from lodtool.format.container import LodWriter\n"
            f"w = LodWriter({path!r}, append=True)\n"
            "tw = w.add_tensor('x', dtype=None, element_shape=(), lod_level=2)\n"
            "tw.append(LoDTensor(np.arange(10), recursive_sequence_lengths=[[1], [10]]))\n"
            "os._exit(9)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 9, proc.stderr
    assert open(path, "rb").read() == before
    assert load(path).equals(articles())
    leftovers = [n for n in os.listdir(os.path.dirname(path)) if n != "t.lod.h5"]
    assert all(is_temp_path(n) for n in leftovers)  # a killed process leaves only a marked temp file


def test_append_refuses_corrupt_or_newer_files(path):
    save(path, {"x": articles()})
    with h5py.File(path, "r+") as f:
        f["x/data"][0] = 99
    with pytest.raises(LodChecksumError, match="does not match"):
        with LodWriter(path, append=True) as w:
            w.write("x", articles())
    save(path, {"x": articles()})
    with h5py.File(path, "r+") as f:
        f["x/lod/1"][2] = 0
        f["x/lod/1"].attrs["checksum"] = "xxh3_64:0000000000000000"
    with pytest.raises(LodValidationError, match="cannot append"):
        with LodWriter(path, append=True) as w:
            w.write("x", articles())
    save(path, {"x": articles()})
    with h5py.File(path, "r+") as f:
        f.attrs["lodtool_format_version"] = "1.9"
    assert load(path).equals(articles())  # a newer minor version reads
    with pytest.raises(LodVersionError, match="cannot append"):
        LodWriter(path, append=True)
    p = tmpfile("foreign.h5")
    with h5py.File(p, "w") as f:
        f["x"] = np.arange(3)
    with pytest.raises(LodFormatError, match="not a lodtool container"):
        LodWriter(p, append=True)


# -- compression ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("compression,level,filter_name", [
    (None, None, "lzf"), ("lzf", None, "lzf"), ("gzip", 1, "gzip"), ("gzip", None, "gzip"), ("none", None, None),
    ("zstd", 5, "zstd"), ("blosc", None, "blosc"), ("lz4", None, "lz4")])
def test_compression_options(path, compression, level, filter_name):
    pytest.importorskip("hdf5plugin")
    t = LoDTensor(np.tile(np.arange(1000), 20), recursive_sequence_lengths=[[10000, 10000]])
    save(path, t, compression=compression, compression_level=level)
    assert load(path).equals(t)
    with open_file(path) as f:
        x = f.tensor()
        assert x.compression == (compression or filters.DEFAULT_COMPRESSION)
        assert x.storage_size < x.nbytes or compression == "none"
        assert filters.describe(f.h5["tensor/data"]) == (filter_name or "none")
        assert f.h5["tensor/data"].fletcher32
        lod_filter = filters.describe(f.h5["tensor/lod/0"])
        assert lod_filter in ("lzf", "gzip", "none")  # offsets never need a plugin
    assert verify_file(path) == []


def test_compression_argument_errors(path):
    with pytest.raises(LodUsageError, match="unknown compression"):
        save(path, articles(), compression="brotli")
    with pytest.raises(LodUsageError, match="takes no level"):
        save(path, articles(), compression="lzf", compression_level=3)
    with pytest.raises(LodUsageError, match="0..9"):
        save(path, articles(), compression="gzip", compression_level=12)
    save(path, articles(), fletcher32=False)
    with h5py.File(path) as f:
        assert not f["tensor/data"].fletcher32


def test_missing_plugin_is_a_clear_error(path):
    pytest.importorskip("hdf5plugin")
    save(path, articles(), compression="zstd")
    code = ("import sys; sys.modules['hdf5plugin'] = None\n"
            "from lodtool.format.container import load, inspect_file\n"
            "from lodtool.errors import LodFormatError\n"
            f"info = inspect_file({path!r}); assert info['tensors'][0]['compression'] == 'zstd'\n"
            "try:\n"
            f"    load({path!r})\n"
            "except LodFormatError as e:\n"
            "    print(e)\n"
            "from lodtool.format.container import save, LodWriter\n"
            "from lodtool.errors import LodUsageError\n"
            "try:\n"
            f"    LodWriter({path!r} + '.new', compression='lz4')\n"
            "except LodUsageError as e:\n"
            "    print(e)\n")
    env = {k: v for k, v in os.environ.items() if k != "HDF5_PLUGIN_PATH"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"{path}: tensor 'tensor' is compressed with zstd; pip install hdf5plugin",
                                        "compression 'lz4' needs hdf5plugin; pip install hdf5plugin"]
    assert not os.path.exists(path + ".new")


def test_appending_to_a_file_whose_filter_is_missing_names_the_fix(path):
    pytest.importorskip("hdf5plugin")
    save(path, articles(), compression="zstd")
    before = open(path, "rb").read()
    code = ("import sys; sys.modules['hdf5plugin'] = None\n"
            "from lodtool.format.container import LodWriter\n"
            "from lodtool.errors import LodFormatError\n"
            "from lodtool import LoDTensor\n"
            "import numpy as np\n"
            "try:\n"
            f"    with LodWriter({path!r}, append=True) as w:\n"
            "        w.write('tensor', LoDTensor(np.arange(2), [[0, 1], [0, 2]]))\n"
            "except LodFormatError as e:\n"
            "    print(e)\n")
    env = {k: v for k, v in os.environ.items() if k != "HDF5_PLUGIN_PATH"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{path}: tensor 'tensor': /tensor/data is compressed with zstd; pip install hdf5plugin"
    assert open(path, "rb").read() == before


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


def test_verify_without_checksums(path):
    save(path, articles())
    with h5py.File(path, "r+") as f:
        del f.attrs["lodtool_checksum"]
    with pytest.raises(LodFormatError, match="no checksums"):
        verify_file(path)
    report = validate_file(path)
    assert not report.ok and "no checksums" in report.problems[0].message


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
    save(path, articles())
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
    (0, [0], "a level needs at least 2"),
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
    save(path, {"x": articles()})
    with h5py.File(path, "r+") as f:
        f["x"].attrs["lod_level"] = 3
    with pytest.raises(LodFormatError, match="'lod/2' is missing"):
        load(path)
    with h5py.File(path, "r+") as f:
        f["x"].attrs["lod_level"] = "two"
    with pytest.raises(LodFormatError, match="expected an integer"):
        load(path)
    save(path, {"x": articles()})
    with h5py.File(path, "r+") as f:
        f["x/data2"] = h5py.ExternalLink("/etc/passwd", "/")
        del f["x/data"]
        f["x/data"] = h5py.SoftLink("/x/data2")
    with pytest.raises(LodFormatError, match="'data' is missing or not a dataset"):
        load(path)
    save(path, {"x": articles()})
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
    from lodtool.format.limits import default_max_memory

    assert (1 << 20) <= default_max_memory() <= (4 << 30)


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
    from lodtool.format import lazy

    monkeypatch.setattr(lazy, "OFFSET_BLOCK", 3)
    lengths = [5, 0, 2_000_000, 1, 7, 0, 3]
    save(path, LoDTensor(np.zeros(sum(lengths), np.int8), recursive_sequence_lengths=[lengths]))
    with open_file(path) as f:
        assert f.tensor().level_stats(0) == {"count": 7, "min": 0, "median": 3.0, "mean": sum(lengths) / 7,
                                             "max": 2_000_000, "empty": 2}
        assert f.tensor().validate() == []


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


# -- cost -------------------------------------------------------------------------------------------------
def test_import_is_light():
    code = ("import sys, lodtool.format.container as c\n"
            "heavy = [m for m in ('numba', 'rich', 'click', 'hdf5plugin') if m in sys.modules]\n"
            "print(heavy)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.stdout.strip() == "[]", proc.stderr


def test_branch_is_close_to_raw_h5py(path):
    import time

    rng = np.random.default_rng(0)
    lengths0 = rng.integers(1, 20, 5_000)
    lengths1 = rng.integers(1, 30, int(lengths0.sum()))
    t = LoDTensor(np.arange(int(lengths1.sum()), dtype=np.int32), recursive_sequence_lengths=[lengths0, lengths1])
    save(path, t)
    picks = rng.integers(0, len(t), 300)

    def best(fn):
        times = []
        for _ in range(3):
            start = time.perf_counter()
            for i in picks:
                fn(int(i))
            times.append(time.perf_counter() - start)
        return min(times)

    with h5py.File(path, "r") as f:
        o0, o1, data = f["tensor/lod/0"], f["tensor/lod/1"], f["tensor/data"]

        def raw(i):
            a, b = o0[i:i + 2]
            w = o1[a:b + 1]
            return data[w[0]:w[-1]]

        raw_time = best(raw)
    with open_file(path) as f:
        lazy = f.tensor()
        lazy_time = best(lambda i: lazy.branch(i))
        for i in picks[:20]:
            assert lazy.branch(int(i)).equals(t.branch(int(i)))
    assert lazy_time < 5 * raw_time, (lazy_time, raw_time)
