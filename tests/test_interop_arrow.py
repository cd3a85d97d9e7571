"""The Arrow bridge: zero-copy both ways, slices (arrow#37733), chunked and 32-bit lists, nulls named by row."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lodtool import LoDTensor, from_nested
from lodtool.errors import LodDtypeError, LodIndexError, LodInputError, LodValidationError
from tests.strategies import lod_tensors

pa = pytest.importorskip("pyarrow")
from lodtool.interop.arrow import from_arrow, to_arrow, to_record_batch

DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32",
          "float64", "bool"]


def shares(view, base) -> bool:
    """np.shares_memory, where an empty view (which has no memory to share) counts as shared."""
    return np.asarray(view).size == 0 or np.shares_memory(view, base)


def arrow_leaf(arr):
    while hasattr(arr, "values") and not isinstance(arr, pa.BooleanArray) and arr.type.num_fields:
        arr = arr.values
    return arr


@given(lod_tensors(min_levels=0, max_levels=3, dtypes=DTYPES))
def test_round_trip_shares_memory_both_ways(t):
    a = to_arrow(t)
    a.validate(full=True)
    assert a.to_pylist() == t.to_nested()
    back = from_arrow(a)
    assert back.equals(t) and back.dtype == t.dtype and back.element_shape == t.element_shape
    if t.dtype != np.bool_:  # Arrow packs bools in bits: one copy each way, by design
        leaf = arrow_leaf(a)
        assert shares(np.frombuffer(leaf.buffers()[1], t.dtype), t.data)
        assert shares(back.data, t.data)
    for theirs, ours in zip(back.offsets, t.offsets):
        assert shares(theirs, ours)


@given(lod_tensors(min_levels=1, max_levels=3, dtypes=["int32", "float64"]), st.data())
def test_sliced_arrays_rebase_their_offsets(t, data):
    n = len(t)
    a = data.draw(st.integers(0, n - 1))
    b = data.draw(st.integers(a + 1, n))
    sliced = to_arrow(t).slice(a, b - a)
    try:
        expected = t.slice_level(0, a, b)
    except LodIndexError:  # nothing below the selected sequences: lodtool's LoD rule has no form for that
        with pytest.raises(LodValidationError):
            from_arrow(sliced)
        return
    back = from_arrow(sliced)
    assert back.equals(expected)
    assert back.offsets[0][0] == 0
    assert shares(back.data, t.data)


@given(lod_tensors(min_levels=1, max_levels=3, dtypes=["int64"]))
def test_32_bit_lists_and_chunked_arrays(t):
    a = to_arrow(t)
    small = a.cast(_list32(a.type))
    assert from_arrow(small).equals(t)
    one = from_arrow(pa.chunked_array([a]))
    assert one.equals(t) and shares(one.data, t.data)
    k = len(t) // 2
    two = from_arrow(pa.chunked_array([a.slice(0, k), a.slice(k)]))
    assert two.equals(t)


def _list32(t):
    if pa.types.is_large_list(t):
        return pa.list_(_list32(t.value_type))
    return t


def test_fixed_size_list_above_a_variable_one_is_a_level():
    a = pa.array([[[1], [2, 3]], [[4], []]], pa.list_(pa.large_list(pa.int64()), 2))
    assert from_arrow(a).lod == [[0, 2, 4], [0, 1, 3, 4, 4]]


def test_fixed_shape_tensor_extension():
    storage = pa.array([list(range(6)), list(range(6, 12))], pa.list_(pa.int32(), 6))
    a = pa.ExtensionArray.from_storage(pa.fixed_shape_tensor(pa.int32(), (2, 3)), storage)
    t = from_arrow(a)
    assert t.shape == (2, 2, 3) and t.data[1, 1].tolist() == [9, 10, 11]


@pytest.mark.parametrize("array, match", [
    (pa.array([[1], None, [2]]), r"^arrow array: row 1 is null \(at depth 0\)"),
    (pa.array([[[1]], [[2], None]]), r"^arrow array: row 1 \(branch <1,1>\) is null \(at depth 1\)"),
    (pa.array([[1, 2], [3, None]]), r"^arrow array: row 1 \(branch <1,1>\) is null \(at depth 1\)"),
    (pa.chunked_array([pa.array([[1]]), pa.array([[2], None])]), r"^arrow array \(chunk 1\): row 2 is null"),
])
def test_nulls_name_their_row(array, match):
    with pytest.raises(LodInputError, match=match):
        from_arrow(array)


def test_types_without_a_lod_form():
    with pytest.raises(LodDtypeError, match="holds string, not numbers"):
        from_arrow(pa.array([["a"], ["b"]]))
    with pytest.raises(LodDtypeError, match="Arrow has no complex type"):
        to_arrow(LoDTensor(np.zeros(2, np.complex64)))


def test_list_views_in_order_and_out_of_order():
    values = pa.array([1, 2, 3, 4, 5])
    ordered = pa.ListViewArray.from_arrays(pa.array([0, 2], pa.int32()), pa.array([2, 3], pa.int32()), values)
    t = from_arrow(ordered)
    assert t.lod == [[0, 2, 5]] and t.data.tolist() == [1, 2, 3, 4, 5]
    jumbled = pa.ListViewArray.from_arrays(pa.array([3, 0, 1], pa.int32()), pa.array([2, 1, 3], pa.int32()), values)
    t = from_arrow(jumbled)
    assert t.to_nested() == jumbled.to_pylist()


def test_level_names_ride_in_the_field_metadata():
    t = from_nested([[[1], [2, 3]], [[4]]], level_names=["doc", "sentence"])
    batch = to_record_batch(t, "ids")
    back = from_arrow(batch)
    assert back.level_names == ("doc", "sentence") and back.equals(t)
