"""The TensorFlow bridge: RaggedTensor round trips (skipped where TensorFlow is not installed)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

from lodtool import LoDTensor
from lodtool.errors import LodUsageError
from tests.strategies import lod_tensors

tf = pytest.importorskip("tensorflow")
from lodtool.interop.tf import from_ragged_tensor, to_ragged_tensor

DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "float16", "float32", "float64", "bool",
          "complex64"]


@settings(max_examples=50)
@given(lod_tensors(min_levels=0, max_levels=3, dtypes=DTYPES))
def test_round_trip(t):
    rt = to_ragged_tensor(t)
    if t.lod_level:
        assert rt.ragged_rank == t.lod_level
        assert [s.numpy().tolist() for s in rt.nested_row_splits] == t.lod
        np.testing.assert_array_equal(rt.flat_values.numpy(), t.data)
    back = from_ragged_tensor(rt)
    assert back.equals(t) and back.dtype == t.dtype


def test_tensorflows_own_ragged_tensors():
    rt = tf.RaggedTensor.from_row_splits(tf.constant([[1, 2], [3, 4], [5, 6]]), tf.constant([0, 2, 3], tf.int32))
    t = from_ragged_tensor(rt)
    assert t.lod == [[0, 2, 3]] and t.element_shape == (2,) and t.offsets[0].dtype == np.int64
    uniform = tf.RaggedTensor.from_uniform_row_length(tf.ragged.constant([[1], [2, 3], [], [4]]), 2)
    assert from_ragged_tensor(uniform).lod == [[0, 2, 4], [0, 1, 3, 3, 4]]


def test_int32_row_splits():
    t = LoDTensor(np.arange(3), [[0, 1, 3]])
    assert to_ragged_tensor(t, row_splits_dtype="int32").row_splits.dtype == tf.int32
    with pytest.raises(LodUsageError):
        to_ragged_tensor(t, row_splits_dtype="int16")
