"""Sharded containers: the manifest, the writer, the ShardedTensor read handle, and the checks."""

from __future__ import annotations

import json
import os

import h5py
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lodtool import LoDTensor, load, save
from lodtool.container import shards
from lodtool.container.reader import open_file
from lodtool.container.shards import (
    MANIFEST_NAME,
    ShardWriter,
    commit_manifest,
    concat_tensors,
    merge,
    open_path,
    open_sharded,
    read_manifest,
    shard_file,
    shard_name,
    validate_sharded,
    verify_sharded,
    write_shard,
)
from lodtool.errors import (LodExistsError, LodFileNotFoundError, LodFormatError, LodIndexError, LodUsageError,
                            LodVersionError)

from .strategies import lod_tensors


def _tensor(n_docs: int = 40, seed: int = 0) -> LoDTensor:
    rng = np.random.default_rng(seed)
    docs = rng.integers(0, 4, n_docs)
    docs[0] = max(docs[0], 1)
    sents = rng.integers(0, 6, int(docs.sum()))
    return LoDTensor(np.arange(int(sents.sum()), dtype=np.int32), recursive_sequence_lengths=[docs.tolist(),
                                                                                             sents.tolist()],
                     level_names=["doc", "sentence"])


def _sharded(tmp_path, t: LoDTensor, shard_size) -> str:
    folder = str(tmp_path / "shards")
    with ShardWriter(folder, shard_size=shard_size) as w:
        w.write(t)
    return folder


# -- writing ----------------------------------------------------------------------------------------------
def test_writer_splits_at_sequence_boundaries_and_records_counts(tmp_path):
    t = _tensor()
    folder = _sharded(tmp_path, t, 64)
    m = read_manifest(folder)
    assert len(m.shards) > 3
    assert [s.file for s in m.shards] == [shard_name(i) for i in range(len(m.shards))]
    assert sum(s.tensors["tensor"].sequences for s in m.shards) == len(t)
    assert sum(s.tensors["tensor"].rows for s in m.shards) == t.n_rows
    assert m.tensors["tensor"].level_names == ("doc", "sentence")
    raw = json.load(open(os.path.join(folder, MANIFEST_NAME)))
    assert raw["format"] == "lodtool-sharded" and raw["format_version"] == "1.0"
    assert set(raw["shards"][0]["tensors"]["tensor"]) == {"sequences", "rows", "level_sequences"}
    for s in m.shards:  # each shard is a whole container of its own
        alone = load(os.path.join(folder, s.file))
        assert len(alone) == s.tensors["tensor"].sequences and alone.level_names == ("doc", "sentence")




def test_writer_keeps_trailing_and_inner_empty_sequences_in_valid_shards(tmp_path):
    # documents without sentences can't be a shard alone: they join a neighbour
    t = LoDTensor(np.arange(6), recursive_sequence_lengths=[[0, 2, 0, 0, 1, 0, 0], [3, 2, 1]])
    folder = _sharded(tmp_path, t, 1)
    with open_sharded(folder) as f:
        assert f.tensor().read().equals(t)
    assert validate_sharded(folder).ok


def test_failed_write_leaves_previous_manifest_and_no_new_shards(tmp_path):
    t = _tensor()
    folder = _sharded(tmp_path, t, 1 << 20)
    before = open(os.path.join(folder, MANIFEST_NAME)).read()
    with pytest.raises(RuntimeError):
        with ShardWriter(folder, shard_size=32, append=True) as w:
            w.write(t)
            raise RuntimeError("crash before the manifest")
    assert open(os.path.join(folder, MANIFEST_NAME)).read() == before
    assert sorted(os.listdir(folder)) == [MANIFEST_NAME, shard_name(0)]


def test_failed_write_into_a_new_folder_leaves_no_folder(tmp_path):
    with pytest.raises(RuntimeError):
        with ShardWriter(tmp_path / "new", shard_size=32) as w:
            w.write(_tensor())
            raise RuntimeError("crash before the manifest")
    assert not os.path.exists(tmp_path / "new")
    (tmp_path / "mine").mkdir()  # a folder that was there before stays
    with pytest.raises(RuntimeError):
        with ShardWriter(tmp_path / "mine", shard_size=32) as w:
            w.write(_tensor())
            raise RuntimeError("crash before the manifest")
    assert os.listdir(tmp_path / "mine") == []


def test_append_adds_shards_after_the_existing_ones(tmp_path):
    a, b = _tensor(seed=1), _tensor(seed=2)
    folder = _sharded(tmp_path, a, 1 << 20)
    with ShardWriter(folder, append=True) as w:
        w.write(b)
    m = read_manifest(folder)
    assert [s.file for s in m.shards] == [shard_name(0), shard_name(1)]
    with open_sharded(folder) as f:
        assert f.tensor().read().equals(concat_tensors([a, b]))


def test_append_refuses_another_dtype(tmp_path):
    folder = _sharded(tmp_path, _tensor(), 1 << 20)
    with pytest.raises(LodUsageError, match="int32"):
        with ShardWriter(folder, append=True) as w:
            w.write(LoDTensor(np.zeros(3), [[0, 3]]))
    assert len(read_manifest(folder).shards) == 1


def test_rewrite_without_append_replaces_and_removes_old_shards(tmp_path):
    folder = _sharded(tmp_path, _tensor(), 32)
    small = LoDTensor(np.arange(3, dtype=np.int32), [[0, 3]], level_names=["doc"])
    with ShardWriter(folder) as w:
        w.write(small)
    assert sorted(os.listdir(folder)) == [MANIFEST_NAME, shard_name(0)] or \
        read_manifest(folder).shards[0].file in os.listdir(folder)
    with open_sharded(folder) as f:
        assert f.tensor().read().equals(small)
    assert len(os.listdir(folder)) == 1 + len(read_manifest(folder).shards)


def test_writer_refuses_a_folder_with_other_files(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(LodUsageError, match="notes.txt"):
        ShardWriter(str(tmp_path))


def test_commit_manifest_refuses_a_missing_shard(tmp_path):
    info = write_shard(tmp_path / shard_name(0), {"t": LoDTensor(np.arange(3), [[0, 3]])})
    os.unlink(tmp_path / shard_name(0))
    with pytest.raises(LodFileNotFoundError, match="missing"):
        commit_manifest(tmp_path, {"t": shards.TensorSpec(np.dtype("<i8"), (), 1, None)}, [info])
    assert not (tmp_path / MANIFEST_NAME).exists()


def test_commit_manifest_sweeps_temp_files_of_killed_writers(tmp_path):
    info = write_shard(tmp_path / shard_name(0), {"t": LoDTensor(np.arange(3), [[0, 3]])})
    stray = tmp_path / f".{shard_name(0)}.lodtmp-0123456789ab"
    stray.write_bytes(b"half a shard")
    commit_manifest(tmp_path, {"t": shards.TensorSpec(np.dtype("<i8"), (), 1, None)}, [info])
    assert sorted(os.listdir(tmp_path)) == [MANIFEST_NAME, shard_name(0)]


# -- shard and merge ----------------------------------------------------------------------------------------
def _same(read_one, read_many):
    """Both reads give equal tensors, or both refuse with the same error type."""
    try:
        want = read_one()
    except LodIndexError:
        with pytest.raises(LodIndexError):
            read_many()
        return
    got = read_many()
    assert got.equals(want) and got.level_names == want.level_names


@settings(max_examples=25)
@given(t=lod_tensors(), size=st.integers(16, 400), data=st.data())
def test_shard_then_merge_round_trips_and_range_reads_match(tmp_path_factory, t, size, data):
    d = tmp_path_factory.mktemp("rt")
    src = str(d / "one.lod.h5")
    save(src, t)
    folder = str(d / "shards")
    shard_file(src, folder, shard_size=size)
    merged = str(d / "merged.lod.h5")
    merge(folder, merged)
    back = load(merged)
    assert back.equals(t) and back.dtype == t.dtype and back.level_names == t.level_names
    n = len(t)
    a = data.draw(st.integers(0, n - 1))
    b = data.draw(st.integers(a + 1, n))
    with open_file(src) as one, open_sharded(folder) as many:
        x, y = one.tensor(), many.tensor()
        assert (y.n_rows, y.level_sizes, y.shape, y.dtype) == (x.n_rows, x.level_sizes, x.shape, x.dtype)
        # one pass over the shards gives the statistics of the whole, whatever the shards' cuts
        assert y.checked_level_stats() == x.checked_level_stats()
        assert y.storage_size == sum(y.shard(i)[1].storage_size for i in range(y.n_shards))
        if t.lod_level:
            _same(lambda: x.slice_level(0, a, b), lambda: y.slice_level(0, a, b))
            _same(lambda: x.branch(a), lambda: y.branch(a))
            _same(lambda: x.branch(-1), lambda: y.branch(-1))
            level = data.draw(st.integers(0, t.lod_level - 1))
            size_k = x.level_sizes[level]
            lo = data.draw(st.integers(0, size_k))
            hi = data.draw(st.integers(lo, size_k))
            assert np.array_equal(y.read_offsets(level, lo, hi), x.read_offsets(level, lo, hi))
            assert [c.lod for c in y.iter_chunks(3)] and concat_tensors(list(y.iter_chunks(3))).equals(t)
        lo = data.draw(st.integers(0, t.n_rows))
        hi = data.draw(st.integers(lo, t.n_rows))
        assert np.array_equal(y.read_rows(lo, hi), x.read_rows(lo, hi))
        _same(lambda: x.head(3), lambda: y.head(3))
        _same(lambda: x.tail(2), lambda: y.tail(2))


def test_shard_file_of_aligned_tensors_and_refusal_of_unaligned(tmp_path):
    t = _tensor()
    labels = LoDTensor(np.arange(t.n_rows, dtype=np.int8), t.lod)
    save(tmp_path / "two.lod.h5", {"tokens": t, "labels": labels})
    shard_file(tmp_path / "two.lod.h5", tmp_path / "s", shard_size=40)
    with open_sharded(tmp_path / "s") as f:
        assert f.names == ["tokens", "labels"]
        assert f["labels"].read().equals(labels) and f["tokens"].read().equals(t)
        with pytest.raises(LodUsageError, match="name one"):
            f.tensor()
    save(tmp_path / "bad.lod.h5", {"a": t, "b": LoDTensor(np.arange(3), [[0, 3]])})
    with pytest.raises(LodUsageError, match="different numbers"):
        shard_file(tmp_path / "bad.lod.h5", tmp_path / "s2")
    shard_file(tmp_path / "bad.lod.h5", tmp_path / "s3", name="b")
    assert read_manifest(tmp_path / "s3").names == ["b"]


def test_level_slices_across_shards_and_statistics(tmp_path):
    t = _tensor(60)
    save(tmp_path / "one.lod.h5", t)
    shard_file(tmp_path / "one.lod.h5", tmp_path / "s", shard_size=48)
    with open_file(tmp_path / "one.lod.h5") as one, open_sharded(tmp_path / "s") as many:
        x, y = one.tensor(), many.tensor()
        n1 = x.num_sequences(1)
        assert y.slice_level(1, 3, n1 - 2).equals(x.slice_level(1, 3, n1 - 2))
        assert y.checked_level_stats() == x.checked_level_stats()
        assert y.level_stats(1) == x.level_stats(1)
        assert y.validate() == []
        assert y.nbytes == x.nbytes


def test_index_errors_match_the_single_file_handle(tmp_path):
    folder = _sharded(tmp_path, _tensor(), 64)
    with open_sharded(folder) as f:
        t = f.tensor()
        for bad in (lambda: t.branch(len(t)), lambda: t.slice_level(0, 5, 3), lambda: t.read_offsets(0, 0, 10**6),
                    lambda: t.read_rows(0, t.n_rows + 1), lambda: t.slice_level(2, 0, 1)):
            with pytest.raises(LodIndexError):
                bad()


def test_open_path_opens_files_and_folders(tmp_path):
    t = _tensor()
    save(tmp_path / "x.lod.h5", t)
    folder = _sharded(tmp_path, t, 64)
    for p in (tmp_path / "x.lod.h5", folder):
        with open_path(p) as f:
            assert f.tensor().read().equals(t)
    with pytest.raises(LodFileNotFoundError, match="no lodtool.json"):
        open_path(tmp_path)


# -- hostile and damaged folders -------------------------------------------------------------------------------
def _edit_manifest(folder, fn):
    path = os.path.join(folder, MANIFEST_NAME)
    raw = json.load(open(path))
    fn(raw)
    json.dump(raw, open(path, "w"))


@pytest.mark.parametrize("edit, error, match", [
    (lambda m: m.update(format="zarr"), LodFormatError, "not a lodtool manifest"),
    (lambda m: m.update(format_version="2.0"), LodVersionError, "2.0"),
    (lambda m: m["shards"][0].update(file="../x.lod.h5"), LodFormatError, "plain file name"),
    (lambda m: m["shards"][0].update(file="/etc/passwd"), LodFormatError, "plain file name"),
    (lambda m: m["shards"][0]["tensors"]["tensor"].update(rows=-1), LodFormatError, "non-negative"),
    (lambda m: m["shards"][0].update(checksum="md5:00"), LodFormatError, "not supported"),
    (lambda m: m["tensors"]["tensor"].update(lod_level=1), LodFormatError, "level_names"),
    (lambda m: m["shards"].append(dict(m["shards"][0])), LodFormatError, "named twice"),
])
def test_bad_manifests_are_refused_with_the_manifest_named(tmp_path, edit, error, match):
    folder = _sharded(tmp_path, _tensor(), 64)
    _edit_manifest(folder, edit)
    with pytest.raises(error, match=match):
        open_sharded(folder)
    assert not validate_sharded(folder).ok


def test_unparsable_manifest(tmp_path):
    folder = _sharded(tmp_path, _tensor(), 64)
    open(os.path.join(folder, MANIFEST_NAME), "w").write("{not json")
    with pytest.raises(LodFormatError, match="unreadable manifest"):
        open_sharded(folder)


def test_counts_that_disagree_with_a_shard_are_refused_on_read(tmp_path):
    folder = _sharded(tmp_path, _tensor(), 64)

    def shift(m):  # move one row between two shards: the sums still add up
        m["shards"][0]["tensors"]["tensor"]["rows"] += 1
        m["shards"][1]["tensors"]["tensor"]["rows"] -= 1
    _edit_manifest(folder, shift)
    with open_sharded(folder) as f, pytest.raises(LodFormatError, match="says"):
        f.tensor().read()
    report = validate_sharded(folder)
    assert not report.ok and any("says" in p.message for p in report.problems)


def test_missing_and_symlinked_shards(tmp_path):
    folder = _sharded(tmp_path, _tensor(), 64)
    os.rename(os.path.join(folder, shard_name(1)), tmp_path / "elsewhere.lod.h5")
    with open_sharded(folder) as f, pytest.raises(LodFileNotFoundError, match="missing"):
        f.tensor().read()
    assert not validate_sharded(folder).ok
    os.symlink(tmp_path / "elsewhere.lod.h5", os.path.join(folder, shard_name(1)))
    with open_sharded(folder) as f, pytest.raises(LodFormatError, match="symbolic link"):
        f.tensor().read()
    assert verify_sharded(folder)


def test_virtual_and_external_storage_are_refused(tmp_path):
    folder = _sharded(tmp_path, _tensor(), 1 << 20)
    target = os.path.join(folder, shard_name(0))
    n = read_manifest(folder).shards[0].tensors["tensor"].rows
    (tmp_path / "raw.bin").write_bytes(np.arange(n, dtype="<i4").tobytes())
    with h5py.File(target, "r+") as h5:  # swap the data for a dataset stored in another file
        attrs = dict(h5["tensor/data"].attrs)
        del h5["tensor/data"]
        ds = h5.create_dataset("tensor/data", (n,), "<i4", external=[(str(tmp_path / "raw.bin"), 0, 4 * n)])
        ds.attrs.update(attrs)
    with open_sharded(folder) as f, pytest.raises(LodFormatError, match="external storage"):
        f.tensor().head(1)
    with h5py.File(target, "r+") as h5:
        del h5["tensor/data"]
        layout = h5py.VirtualLayout((n,), "<i4")
        layout[:] = h5py.VirtualSource(str(tmp_path / "src.h5"), "x", (n,))
        h5.create_virtual_dataset("tensor/data", layout).attrs.update(attrs)
    with open_sharded(folder) as f, pytest.raises(LodFormatError, match="virtual dataset"):
        f.tensor().head(1)


def test_verify_finds_damaged_data_and_swapped_shards(tmp_path):
    folder = _sharded(tmp_path, _tensor(), 64)
    assert verify_sharded(folder) == []
    with h5py.File(os.path.join(folder, shard_name(2)), "r+") as h5:
        h5["tensor/data"][0] += 1
    bad = verify_sharded(folder)
    assert [m.dataset for m in bad] == [f"{shard_name(2)}:/tensor/data"]
    # a valid container in place of a shard: its own checksums match, the manifest's does not
    other = _tensor(seed=9)
    folder2 = _sharded(tmp_path / "b", other, 64)
    os.replace(os.path.join(folder2, shard_name(0)), os.path.join(folder, shard_name(0)))
    assert any(m.dataset == shard_name(0) for m in verify_sharded(folder))


def test_validate_reports_broken_lod_inside_a_shard(tmp_path):
    folder = _sharded(tmp_path, _tensor(), 1 << 20)
    with h5py.File(os.path.join(folder, shard_name(0)), "r+") as h5:
        h5["tensor/lod/1"][2] = 10**6
    report = validate_sharded(folder)
    assert not report.ok and report.problems[0].file.endswith(shard_name(0))


def test_load_and_open_take_a_sharded_folder(tmp_path):
    import lodtool

    t = LoDTensor(np.arange(50, dtype=np.int32), [[0, 20, 21, 50]])
    with ShardWriter(tmp_path / "s", shard_size=64, name="ids") as w:
        w.write(t)
    assert len(read_manifest(tmp_path / "s").shards) > 1
    for ref, name in ((tmp_path / "s", None), (f"{tmp_path / 's'}:ids", None), (tmp_path / "s", "ids")):
        got = lodtool.load(ref, name)
        assert got.lod == t.lod and got.data.tobytes() == t.data.tobytes()
    with lodtool.open(tmp_path / "s") as f:
        assert f.tensor("ids").head(1).lod == [[0, 20]]
    with pytest.raises(LodFileNotFoundError, match="no tensor named 'nope'"):
        lodtool.load(tmp_path / "s", "nope")


def _set_count(field, value):
    def edit(m):
        m["shards"][0]["tensors"]["tensor"][field] = value
        m["shards"][0]["tensors"]["tensor"].pop("sequences", None)
    return edit


def _set_spec(field, value):
    return lambda m: m["tensors"]["tensor"].update({field: value})


def _two_halves_of(value):
    def edit(m):  # each count fits an int64, their sum does not
        for s in m["shards"][:2]:
            s["tensors"]["tensor"]["rows"] = value
    return edit


@pytest.mark.parametrize("edit, field", [
    (_set_count("rows", 2 ** 63), "rows"),
    (_set_count("rows", 10 ** 30), "rows"),
    (_set_count("level_sequences", [2 ** 64, 1]), "level_sequences"),
    (_two_halves_of(2 ** 62 + 1), "add up"),
    (_set_spec("element_shape", [1e30]), "element_shape"),
    (_set_spec("element_shape", [10 ** 30]), "element_shape"),
    (_set_spec("element_shape", [2 ** 40, 2 ** 40]), "element_shape"),
    (_set_spec("element_shape", [1] * 40), "element_shape"),
    (_set_spec("lod_level", 10 ** 30), "lod_level"),
    (_set_spec("dtype", "(2,)<i4"), "dtype"),
    (_set_spec("dtype", "|O"), "dtype"),
    (_set_spec("dtype", "<f16"), "dtype"),
    (_set_spec("dtype", "<M8[s]"), "dtype"),
    (_set_spec("dtype", "<m8[s]"), "dtype"),
    (_set_spec("dtype", "<i4,<i4"), "dtype"),
    (_set_spec("dtype", None), "dtype"),
    (_set_spec("dtype", 7), "dtype"),
    (_set_spec("dtype", "(99999999999999999999,)i4"), "dtype"),
])
def test_hostile_manifest_fields_are_one_line_errors_naming_the_file_and_the_field(tmp_path, edit, field):
    folder = _sharded(tmp_path, _tensor(), 64)
    _edit_manifest(folder, edit)
    for read in (load, open_sharded, validate_sharded):
        try:
            result = read(folder)
        except LodFormatError as exc:
            message = str(exc)
        else:
            assert read is validate_sharded, read
            assert not result.ok
            message = result.error
        assert MANIFEST_NAME in message or read is validate_sharded
        assert field in message and "\n" not in message, message


def test_shard_ranges_check_every_shard_against_the_manifest(tmp_path):
    folder = _sharded(tmp_path, _tensor(), 64)
    save(os.path.join(folder, shard_name(1)), LoDTensor(np.zeros(3, np.float32), [[0, 3]]), force=True)
    with open_sharded(folder) as f, pytest.raises(LodFormatError, match=shard_name(1)):
        f.tensor().shard_ranges()


def test_folder_file_refuses_links_and_other_entries(tmp_path):
    (tmp_path / "x").mkdir()
    os.symlink(tmp_path / "nowhere", tmp_path / "link")
    with pytest.raises(LodFormatError, match="symbolic link"):
        shards.folder_file(tmp_path, "link", missing_ok=True)
    with pytest.raises(LodFormatError, match="not a regular file"):
        shards.folder_file(tmp_path, "x")
    with pytest.raises(LodFileNotFoundError, match="shard 3 is missing"):
        shards.folder_file(tmp_path, "gone", what="shard 3")
    assert shards.folder_file(tmp_path, "gone", missing_ok=True) == os.path.join(tmp_path, "gone")


def test_write_shard_and_the_writer_refuse_a_linked_shard_name(tmp_path):
    outside = tmp_path / "outside.lod.h5"
    os.symlink(outside, tmp_path / shard_name(0))
    with pytest.raises(LodFormatError, match="symbolic link"):
        write_shard(tmp_path / shard_name(0), {"t": LoDTensor(np.arange(3), [[0, 3]])})
    assert not outside.exists()
    with pytest.raises(LodFormatError, match="symbolic link"):
        ShardWriter(tmp_path)
    assert not outside.exists()


def test_an_interrupted_writer_removes_every_shard_it_started_but_keeps_committed_ones(tmp_path):
    folder = tmp_path / "s"
    w = ShardWriter(folder, shard_size=64)
    w.write(_tensor())
    started = sorted(os.listdir(folder))
    assert started  # shards are written, no manifest names them yet
    w.shards.pop()  # as if the interrupt came between a shard's rename and its entry in the list
    w.abort()
    assert not folder.exists()
    made = _sharded(tmp_path, _tensor(), 64)
    named = sorted(os.listdir(made))
    shards.remove_uncommitted_shards(made, [os.path.join(made, n) for n in named if n != MANIFEST_NAME], created=True)
    assert sorted(os.listdir(made)) == named and load(made).equals(_tensor())


def test_a_writer_that_loses_a_shard_name_to_another_leaves_the_others_shard(tmp_path):
    folder = tmp_path / "s"
    w = ShardWriter(folder, shard_size="1GB")
    w.write(_tensor())
    theirs = write_shard(folder / shard_name(0), {"tensor": _tensor(5, seed=9)})  # made while w ran
    with pytest.raises(LodExistsError):
        w.commit()
    assert sorted(os.listdir(folder)) == [theirs.file] and load(folder / theirs.file).equals(_tensor(5, seed=9))


def test_inspect_opens_each_shard_once_when_more_shards_than_stay_open(tmp_path, monkeypatch):
    from lodtool.container import reader, shards

    t = _tensor(60)
    folder = _sharded(tmp_path, t, 40)
    n = len(read_manifest(folder).shards)
    monkeypatch.setattr(shards, "OPEN_SHARDS", 2)  # far fewer than the folder has: a second pass would reopen
    opened = []
    real = reader.open_file
    monkeypatch.setattr(reader, "open_file", lambda path, **kw: opened.append(path) or real(path, **kw))
    info = shards.inspect_sharded(folder)
    assert n > 4 and len(opened) == n == len(set(opened))
    got = [(lv["sequences"], lv["min"], lv["median"], lv["mean"], lv["max"], lv["empty"])
           for lv in info["tensors"][0]["levels"]]
    want = [t.level_stats(k) for k in range(t.lod_level)]
    assert got == [(w["count"], w["min"], w["median"], w["mean"], w["max"], w["empty"]) for w in want]

