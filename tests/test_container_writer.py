"""The container writer: shared offsets, the streaming writer, appends."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lodtool import LoDTensor
from lodtool.atomic import is_temp_path
from lodtool.container import LodWriter, inspect_file, load, open_file, save, validate_file, verify_file, writer
from lodtool.errors import (LodChecksumError, LodDtypeError, LodFormatError, LodShapeError, LodUsageError,
                            LodValidationError, LodVersionError)

from .s3_server import s3, s3_endpoint  # noqa: F401 - fixtures
from .container_helpers import ARTICLES, ROOT, articles, path, raises_same, same, small_chunks, tmpfile  # noqa: F401
from .strategies import lod_tensors


# -- shared offsets -------------------------------------------------------------------------------------
def test_share_lod_hard_links(path):
    tokens = articles(level_names=["article", "sentence"])
    labels = LoDTensor(np.arange(15, dtype=np.int8), tokens.lod)
    other = LoDTensor(np.arange(15), recursive_sequence_lengths=[[1], [15]])
    save(path, {"tokens": tokens, "labels": labels, "other": other}, force=True)
    with h5py.File(path, "r") as f:
        assert f["tokens/lod/0"].id == f["labels/lod/0"].id and f["tokens/lod/1"].id == f["labels/lod/1"].id
        assert f["other/lod/0"].id != f["tokens/lod/0"].id
    info = inspect_file(path)
    shared = {t["name"]: t["shared_lod_with"] for t in info["tensors"]}
    assert shared == {"tokens": ["labels"], "labels": ["tokens"], "other": []}
    assert same(load(path, "labels"), labels)
    save(path, {"tokens": tokens, "labels": labels}, share_lod=False, force=True)
    with h5py.File(path, "r") as f:
        assert f["tokens/lod/0"].id != f["labels/lod/0"].id


def test_share_lod_compares_only_tensors_whose_offsets_digests_agree(path, monkeypatch):
    others = [[a, b, 9 - a - b] for a in range(1, 8) for b in range(1, 9 - a) if (a, b) != (3, 2)]
    lengths = [[3, 2, 4]] * 2 + others  # the first two LoDs equal; the 27 others differ, in the same shapes
    tensors = {f"t{i:02d}": LoDTensor(np.arange(9), recursive_sequence_lengths=[seq]) for i, seq in enumerate(lengths)}
    compared = []
    equal_lod = writer._equal_lod
    monkeypatch.setattr(writer, "_equal_lod", lambda a, b, n, *rest: compared.append(1) or equal_lod(a, b, n, *rest))
    save(path, tensors, force=True)
    with h5py.File(path, "r") as f:
        assert f["t00/lod/0"].id == f["t01/lod/0"].id and f["t02/lod/0"].id != f["t00/lod/0"].id
    assert len(compared) <= 2  # t00 and t01 with each other; the others with nobody (shapes alike, digests not)
    assert all(same(load(path, n), t) for n, t in tensors.items())


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
@given(st.lists(lod_tensors(min_levels=2, max_levels=2, dtypes=["int32"], element_shapes=[(3,)]),
                min_size=1, max_size=5))
def test_streamed_appends_equal_concatenation(parts):
    p = tmpfile()
    old = writer.STORAGE_CHUNK_BYTES
    writer.STORAGE_CHUNK_BYTES = 64
    try:
        with LodWriter(p) as w:
            tw = w.add_tensor("x", dtype="int32", element_shape=(3,), lod_level=2)
            for part in parts:
                tw.append(part)
    finally:
        writer.STORAGE_CHUNK_BYTES = old
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
    with LodWriter(path, force=True) as w:
        tw = w.add_tensor("x", dtype="int16", element_shape=(), lod_level=1)
        tw.append(LoDTensor(np.array([1, 2, 300]), [[0, 3]]))  # int64 values that fit
        tw.append(LoDTensor(np.array([4.0]), [[0, 1]]))  # an integral float
    assert load(path).dtype == np.int16 and load(path).data.tolist() == [1, 2, 300, 4]
    for bad in (np.array([70000]), np.array([1.5]), np.array([np.nan])):
        with pytest.raises(LodDtypeError, match="without changing values"):
            with LodWriter(path, force=True) as w:
                w.add_tensor("x", dtype="int16", element_shape=(), lod_level=1).append(LoDTensor(bad, [[0, 1]]))
    with LodWriter(path, force=True) as w:  # narrower floats round, they do not refuse
        w.add_tensor("x", dtype="float32", element_shape=(), lod_level=1).append(LoDTensor(np.array([0.1]), [[0, 1]]))
    with pytest.raises(LodDtypeError):
        with LodWriter(path, force=True) as w:
            w.add_tensor("x", dtype="float16", element_shape=(), lod_level=1).append(
                LoDTensor(np.array([1e6]), [[0, 1]]))
    with pytest.raises(LodDtypeError):
        with LodWriter(path, force=True) as w:
            w.add_tensor("x", dtype=object, element_shape=(), lod_level=1)


def test_a_tensor_of_zero_sequences_round_trips(path):
    with LodWriter(path) as w:  # nothing appended: offsets [0] at every level, a value like any other
        w.add_tensor("x", dtype="int64", element_shape=(3,), lod_level=2)
    t = load(path, "x")
    assert t.lod == [[0], [0]] and t.shape == (0, 3) and t.dtype == np.int64 and t.to_nested() == []
    assert validate_file(path).ok


def test_writer_shape_checks(path):
    with pytest.raises(LodShapeError, match="LoD level"):
        with LodWriter(path) as w:
            w.add_tensor("x", dtype=None, element_shape=(), lod_level=2).append(articles().branch(0))
    with pytest.raises(LodShapeError, match="element shape"):
        with LodWriter(path) as w:
            w.add_tensor("x", dtype=None, element_shape=(2,), lod_level=2).append(articles())
    with pytest.raises(LodShapeError, match="level name"):
        with LodWriter(path) as w:
            w.add_tensor("x", dtype=None, lod_level=2, level_names=["a"])
    with pytest.raises(LodUsageError, match="already"):
        with LodWriter(path) as w:
            w.add_tensor("x", lod_level=1)
            w.add_tensor("x", lod_level=1)
    assert not os.path.exists(path)
    assert not os.listdir(os.path.dirname(path))


def test_commit_inside_with_is_the_commit(path):
    with LodWriter(path) as w:
        w.write("x", LoDTensor(np.arange(3), [[0, 1, 3]]))
        w.commit()  # the block's end does not commit (or fail) a second time
    assert load(path, "x").lod == [[0, 1, 3]]


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
    save(path, {"x": articles()}, force=True)
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
        save(path, {"x": articles(level_names=["a", "b"])}, force=True)
        with LodWriter(path, append=True) as w:
            w.write("x", articles(level_names=["c", "d"]))
    assert open(path, "rb").read() != before  # the save inside the last block did happen
    assert not [n for n in os.listdir(os.path.dirname(path)) if is_temp_path(n)]


def test_append_never_changes_the_stored_dtype(path):
    save(path, {"x": LoDTensor(np.arange(3), [[0, 3]])})
    before = open(path, "rb").read()
    with pytest.raises(LodDtypeError, match=r"stores int64; the appended values are float64 and 0\.5 .*dtype='float64' and overwrite=True"):
        with LodWriter(path, append=True) as w:
            w.write("x", LoDTensor(np.array([0.5]), [[0, 1]]))
    assert open(path, "rb").read() == before
    with LodWriter(path, append=True) as w:  # values the stored dtype holds exactly are cast
        w.write("x", LoDTensor(np.array([4.0]), [[0, 1]]))
    t = load(path)
    assert t.dtype == np.int64 and t.data.tolist() == [0, 1, 2, 4]
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
            "from lodtool.container import LodWriter\n"
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
    save(path, {"x": articles()}, force=True)
    with h5py.File(path, "r+") as f:
        f["x/data"][0] = 99
    with pytest.raises(LodChecksumError, match="does not match"):
        with LodWriter(path, append=True) as w:
            w.write("x", articles())
    save(path, {"x": articles()}, force=True)
    with h5py.File(path, "r+") as f:
        f["x/lod/1"][2] = 0
        f["x/lod/1"].attrs["checksum"] = "xxh3_64:0000000000000000"
    with pytest.raises(LodValidationError, match="cannot append"):
        with LodWriter(path, append=True) as w:
            w.write("x", articles())
    save(path, {"x": articles()}, force=True)
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




def test_huge_rows_span_at_most_what_a_reader_reads_at_a_time(tmp_path):
    path = tmp_path / "wide.lod.h5"
    save(path, LoDTensor(np.zeros((0, 1 << 30), np.int8), [[0, 0]]))  # a 1 GiB row, no rows stored
    assert validate_file(path).ok
    with pytest.raises(LodShapeError, match="larger than a container stores"):
        save(tmp_path / "wider.lod.h5", LoDTensor(np.zeros((0, 1 << 34), np.int8), [[0, 0]]))
    assert not (tmp_path / "wider.lod.h5").exists()


def test_append_to_a_container_in_object_storage_is_refused_naming_the_redacted_url(s3, tmp_path):
    from .test_cli import SAMPLES, one_line_error, run

    server, root = s3
    url = root.replace("s3://", "s3://AKIAEXAMPLE:SECRETEXAMPLE@") + "/c.lod.h5?token=SESSIONEXAMPLE"
    result = run("pack", SAMPLES / "articles.json", "-o", url, "--append")
    assert result.exit_code != 0
    line = one_line_error(result)
    assert f"{root}/c.lod.h5: cannot append to a container in object storage" in line
    assert "sharded folder" in line
    for secret in ("AKIAEXAMPLE", "SECRETEXAMPLE", "SESSIONEXAMPLE", "testing-key-id", "testing-secret-key"):
        assert secret not in result.output
    with pytest.raises(LodUsageError, match="cannot append to a container in object storage"):
        LodWriter(root + "/c.lod.h5", append=True)
    with pytest.raises(LodUsageError, match="not a stream"):
        LodWriter(io.BytesIO(), append=True)


def test_save_of_many_tensors_compares_only_lods_with_equal_digests(tmp_path, monkeypatch):
    calls = []
    same = writer._same_lod
    monkeypatch.setattr(writer, "_same_lod", lambda a, b: calls.append(1) or same(a, b))
    items = {f"t{i}": LoDTensor(np.arange(i + 1), [[0, i + 1]]) for i in range(200)}  # 200 distinct LoDs
    items.update({f"u{i}": LoDTensor(np.zeros(i + 1), [[0, i + 1]]) for i in range(3)})  # equal to t0..t2
    save(str(tmp_path / "many.lod.h5"), items)
    assert len(calls) == 3  # one comparison per equal pair, none between distinct LoDs (was 20,000)
    with open_file(str(tmp_path / "many.lod.h5")) as f:
        assert f.shared_lod_with("u2") == ["t2"] and f.shared_lod_with("t7") == []
