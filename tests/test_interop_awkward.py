"""The awkward bridge: zero-copy both ways, the one-copy cases, refused types, lazy buffers from a container."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

from lodtool import LoDTensor, from_nested
from lodtool.errors import LodDtypeError
from tests.strategies import lod_tensors

ak = pytest.importorskip("awkward")
from lodtool.interop.awkward import awkward_buffers, form_json, form_of, from_awkward, to_awkward

DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32",
          "float64", "bool", "complex64", "complex128"]


def shares(view, base) -> bool:
    """np.shares_memory, where an empty view (which has no memory to share) counts as shared."""
    return np.asarray(view).size == 0 or np.shares_memory(view, base)


def leaf(layout):
    while not isinstance(layout, ak.contents.NumpyArray):
        layout = layout.content
    return layout.data


def list_offsets(layout):
    found = []
    while isinstance(layout, ak.contents.ListOffsetArray):
        found.append(layout.offsets.data)
        layout = layout.content
    return found


@given(lod_tensors(min_levels=0, max_levels=3, dtypes=DTYPES))
def test_round_trip_shares_memory_both_ways(t):
    a = to_awkward(t)
    assert a.to_list() == t.to_nested()
    assert shares(leaf(a.layout), t.data)
    for theirs, ours in zip(list_offsets(a.layout), t.offsets):
        assert shares(theirs, ours)
    back = from_awkward(a)
    assert back.equals(t) and back.dtype == t.dtype and back.element_shape == t.element_shape
    assert shares(back.data, t.data)
    for theirs, ours in zip(back.offsets, t.offsets):
        assert shares(theirs, ours)


def test_level_names_travel_in_attrs():
    t = LoDTensor(np.arange(3), [[0, 1, 3]], level_names=["sentence"])
    assert from_awkward(to_awkward(t)).level_names == ("sentence",)


def test_sliced_array_copies_the_offsets_only():
    t = from_nested([[[1, 2], [3]], [[4, 5, 6]], [[7], [8, 9]], [[10]]])
    a = to_awkward(t)[1:3]
    back = from_awkward(a)
    assert back.equals(t.slice_level(0, 1, 3))
    assert np.shares_memory(back.data, t.data)


def test_offsets_that_do_not_start_at_zero():
    content = ak.contents.NumpyArray(np.arange(10))
    layout = ak.contents.ListOffsetArray(ak.index.Index64(np.array([2, 4, 7])), content)
    back = from_awkward(layout)
    assert back.lod == [[0, 2, 5]] and back.data.tolist() == [2, 3, 4, 5, 6]
    assert np.shares_memory(back.data, content.data)


def test_int32_offsets_are_widened():
    layout = ak.contents.ListOffsetArray(ak.index.Index32(np.array([0, 1, 3], np.int32)),
                                         ak.contents.NumpyArray(np.array([1.0, 2.0, 3.0])))
    back = from_awkward(layout)
    assert back.offsets[0].dtype == np.int64 and back.lod == [[0, 1, 3]]


def test_list_array_from_fancy_indexing():
    nested = [[[1, 2], [3]], [[4, 5, 6]], [[7], [8, 9]]]
    a = to_awkward(from_nested(nested))[[2, 0]]
    assert isinstance(a.layout, (ak.contents.ListArray, ak.contents.IndexedArray, ak.contents.ListOffsetArray))
    assert from_awkward(a).to_nested() == [nested[2], nested[0]]
    filtered = ak.Array([[1, 2, 3], [4, 5]])
    filtered = filtered[filtered > 1]
    assert from_awkward(filtered).to_nested() == [[2, 3], [4, 5]]


def test_regular_dimensions():
    a = ak.from_numpy(np.arange(12, dtype=np.int32).reshape(3, 2, 2))
    t = from_awkward(a)
    assert t.lod_level == 0 and t.shape == (3, 2, 2)
    upper = ak.to_regular(ak.Array([[[1], [2, 3]], [[4], []]]), axis=1)
    t = from_awkward(upper)
    assert t.lod == [[0, 2, 4], [0, 1, 3, 4, 4]]


def test_empty_arrays():
    t = from_awkward(ak.Array([[], []]))
    assert t.lod == [[0, 0, 0]] and t.dtype == np.float64


@pytest.mark.parametrize("array, match", [
    (ak.Array([[1, None], [2]]), r"depth 2 holds missing values .*ak.fill_none"),
    (ak.Array([[{"x": 1}], []]), r"depth 2 holds records"),
    (ak.Array([[1, [2]], [3]]), r"holds a union"),
    (ak.Array([["a", "bc"], []]), r"depth 2 holds strings"),
])
def test_types_without_a_lod_form(array, match):
    with pytest.raises(LodDtypeError, match=match):
        from_awkward(array)


def test_form_json_is_awkwards_own_form():
    t = LoDTensor(np.zeros((5, 3, 2), np.float32), [[0, 1, 2], [0, 2, 5]])
    form, length, _ = ak.to_buffers(to_awkward(t))
    assert form_of(2, np.dtype("float32"), (3, 2)) == form
    assert ak.forms.from_json(form_json(2, np.dtype("float32"), (3, 2))) == form
    assert length == 2


def test_awkward_buffers_reads_a_container_lazily(tmp_path, monkeypatch):
    from lodtool import save
    from lodtool.interop import awkward as bridge

    t = LoDTensor(np.arange(24, dtype=np.int16).reshape(12, 2), [[0, 2, 3], [0, 5, 5, 12]])
    path = tmp_path / "t.lod.h5"
    save(path, {"tokens": t})
    calls = []
    real = bridge._read_flat_data
    monkeypatch.setattr(bridge, "_read_flat_data", lambda *a: calls.append(a) or real(*a))
    form, length, container = awkward_buffers(path, "tokens")
    a = ak.from_buffers(form, length, container)
    assert all(callable(v) for v in container.values()) and calls == []
    assert a.to_list() == t.to_nested()
    assert from_awkward(a).equals(t)


@given(lod_tensors(min_levels=0, max_levels=2, dtypes=["int32", "uint16", "float64", "complex64"]))
def test_big_endian_data_is_copied_into_native_order(t):
    swapped = LoDTensor(t.data.astype(t.dtype.newbyteorder(">")), lod=t.offsets)
    a = to_awkward(swapped)
    assert a.to_list() == t.to_nested()
    assert leaf(a.layout).dtype == t.dtype.newbyteorder("=")
    assert from_awkward(a).equals(t)


def test_option_types_without_missing_values_are_taken_as_their_content():
    nullable = ak.Array([[1, 2], [], [3]]).layout
    opt = ak.contents.ListOffsetArray(nullable.offsets, ak.contents.UnmaskedArray(nullable.content))
    assert from_awkward(ak.Array(opt)).to_nested() == [[1, 2], [], [3]]
    masked = ak.Array([[1, None, 2], [3]])
    assert from_awkward(ak.drop_none(masked)).to_nested() == [[1, 2], [3]]
    indexed = ak.Array([[1, None], [3]])[:, :1]  # an option type whose remaining items are all present
    assert from_awkward(indexed).to_nested() == [[1], [3]]
    with pytest.raises(LodDtypeError, match="holds missing values"):
        from_awkward(masked)
