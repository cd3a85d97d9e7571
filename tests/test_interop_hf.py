"""The HuggingFace datasets bridge: files Dataset.from_file memory-maps, zero-copy datasets, and back."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

from lodtool import LoDTensor, from_nested
from lodtool.errors import LodInputError
from tests.strategies import lod_tensors

datasets = pytest.importorskip("datasets")
from lodtool.interop.hf import from_hf, to_hf, write_hf_file

DTYPES = ["int8", "int32", "int64", "uint8", "uint64", "float16", "float32", "float64", "bool"]


def shares(view, base) -> bool:
    """np.shares_memory, where an empty view (which has no memory to share) counts as shared."""
    return np.asarray(view).size == 0 or np.shares_memory(view, base)


@settings(max_examples=25)
@given(lod_tensors(min_levels=0, max_levels=3, dtypes=DTYPES))
def test_file_round_trip_through_dataset_from_file(tmp_path_factory, t):
    path = tmp_path_factory.mktemp("hf") / "t.arrow"
    write_hf_file(t, path, name="ids")
    ds = datasets.Dataset.from_file(str(path))
    assert ds.column_names == ["ids"] and ds.num_rows == len(t)
    assert ds.with_format("arrow")[:].column("ids").to_pylist() == t.to_nested()
    back = from_hf(ds)
    assert back.equals(t) and back.dtype == t.dtype


@settings(max_examples=25)
@given(lod_tensors(min_levels=1, max_levels=3, dtypes=["int64", "float32"]))
def test_in_memory_dataset_is_zero_copy_both_ways(t):
    ds = to_hf(t, "x")
    back = from_hf(ds, "x")
    assert back.equals(t) and shares(back.data, t.data)
    for theirs, ours in zip(back.offsets, t.offsets):
        assert shares(theirs, ours)


def test_features_level_names_and_chunks(tmp_path):
    t = from_nested([[[1, 2], [3]], [[4, 5, 6]], [[7]]], level_names=["doc", "sentence"])
    path = write_hf_file([t.slice_level(0, 0, 2), t.slice_level(0, 2, 3)], tmp_path / "t.arrow", name="ids")
    ds = datasets.Dataset.from_file(path)
    assert str(ds.features["ids"]) == "LargeList(LargeList(Value('int64')))"
    back = from_hf(path)
    assert back.equals(t) and back.level_names == ("doc", "sentence")
    shuffled = from_hf(ds.select([2, 0]))
    assert shuffled.to_nested() == [[[7]], [[1, 2], [3]]]


def test_datasets_own_lists_and_element_shapes():
    ds = datasets.Dataset.from_dict({"ids": [[1, 2], [3]], "label": [0, 1]})
    assert from_hf(ds, "ids").lod == [[0, 2, 3]]
    vec = LoDTensor(np.arange(8, dtype=np.float32).reshape(4, 2), [[0, 3, 4]])
    ds = to_hf(vec, "emb")
    assert str(ds.features["emb"]) == "LargeList(List(Value('float32'), length=2))"
    assert from_hf(ds).equals(vec)
    with pytest.raises(LodInputError, match=r"has 2 columns \(ids, label\); choose one"):
        from_hf(datasets.Dataset.from_dict({"ids": [[1]], "label": [0]}))
    with pytest.raises(LodInputError, match="pick a split"):
        from_hf(datasets.DatasetDict({"train": ds}))


def test_a_save_to_disk_folder_is_loaded(tmp_path):
    t = from_nested([[[1, 2], [3]], [[4, 5, 6]]])
    to_hf(t, "ids").save_to_disk(str(tmp_path / "saved"))
    assert from_hf(tmp_path / "saved").equals(t)
    assert from_hf(str(tmp_path / "saved"), "ids", level_names=["doc", "sentence"]).level_names == ("doc", "sentence")


def test_a_dataset_dict_folder_or_another_folder_is_one_line_naming_the_way_out(tmp_path):
    ds = to_hf(from_nested([[1, 2], [3]]), "ids")
    datasets.DatasetDict({"train": ds, "test": ds}).save_to_disk(str(tmp_path / "splits"))
    with pytest.raises(LodInputError, match=r"splits: a DatasetDict saved with save_to_disk \(splits: train, test\); "
                                            r"pass one split's folder, e\.g\. .*splits/train$"):
        from_hf(tmp_path / "splits")
    assert from_hf(tmp_path / "splits" / "test").to_nested() == [[1, 2], [3]]
    (tmp_path / "other").mkdir()
    with pytest.raises(LodInputError, match=r"other: a folder, but not one that Dataset\.save_to_disk wrote"):
        from_hf(tmp_path / "other")


def test_a_damaged_folder_or_file_is_one_line_naming_it(tmp_path):
    to_hf(from_nested([[1, 2], [3]]), "ids").save_to_disk(str(tmp_path / "saved"))
    (tmp_path / "saved" / "state.json").write_text("{not json")
    with pytest.raises(LodInputError, match=r"saved: datasets cannot open it \(.+\)$"):
        from_hf(tmp_path / "saved")
    (tmp_path / "x.arrow").write_bytes(b"garbage")
    with pytest.raises(LodInputError, match=r"x\.arrow: datasets cannot open it \(.+\)$"):
        from_hf(tmp_path / "x.arrow")


def test_no_chunks_to_write_is_the_shape_error_every_arrow_writer_raises(tmp_path):
    from lodtool.errors import LodShapeError

    with pytest.raises(LodShapeError, match=r"^nothing to write: no chunks$"):
        write_hf_file([], tmp_path / "t.arrow")
    assert not (tmp_path / "t.arrow").exists()


def test_a_column_is_picked_as_every_table_reader_picks_it():
    ds = to_hf(LoDTensor(np.arange(3), [[0, 1, 3]]), "ids").add_column("label", [0, 1])
    with pytest.raises(LodInputError,
                       match=r"^the dataset: has 2 columns \(ids, label\); choose one with column=\.\.\.$"):
        from_hf(ds)
    with pytest.raises(LodInputError, match=r"^the dataset: has no column 'x' \(columns: ids, label\)$"):
        from_hf(ds, "x")
