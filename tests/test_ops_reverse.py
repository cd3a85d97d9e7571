"""sequence_reverse: examples, LoD kept, involution, kernel == reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

from lodtool import LoDTensor
from lodtool.errors import LodShapeError
from lodtool.ops import sequence_reverse
from tests.test_ops_common import ALL_DTYPES, BACKENDS, OPS_SETTINGS, same_bits, same_tensor, tensors


@pytest.mark.parametrize("backend", BACKENDS)
def test_example(backend):
    x = LoDTensor(np.arange(10).reshape(5, 2), recursive_sequence_lengths=[[1, 2], [2, 0, 3]],
                  level_names=["doc", "word"])
    out = sequence_reverse(x, backend=backend)
    assert out.data.tolist() == [[2, 3], [0, 1], [8, 9], [6, 7], [4, 5]]
    assert out.lod == x.lod and out.level_names == ("doc", "word")


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_every_dtype(dtype, backend):
    x = LoDTensor(np.arange(4).astype(dtype), recursive_sequence_lengths=[[3, 1]])
    out = sequence_reverse(x, backend=backend)
    assert out.dtype == np.dtype(dtype) and out.data.tolist() == np.array([2, 1, 0, 3]).astype(dtype).tolist()


def test_no_lod():
    with pytest.raises(LodShapeError, match="no LoD"):
        sequence_reverse(np.arange(3))


def test_input_untouched():
    data = np.arange(4)
    x = LoDTensor(data, recursive_sequence_lengths=[[4]])
    sequence_reverse(x)
    assert data.tolist() == [0, 1, 2, 3]


@OPS_SETTINGS
@given(tensors())
def test_kernel_matches_reference(x):
    got = sequence_reverse(x, backend="numba")
    assert same_tensor(got, sequence_reverse(x, backend="numpy"))
    assert same_tensor(sequence_reverse(got), x)
    off = x.offsets[-1].tolist()
    for a, b in list(zip(off[:-1], off[1:]))[:10]:
        assert same_bits(got.data[a:b], np.asarray(x.data)[a:b][::-1])
