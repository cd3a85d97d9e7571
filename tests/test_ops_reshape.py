"""sequence_reshape: Paddle's documented example and unit-test cases, its rules, and kernel == reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lodtool import LoDTensor
from lodtool.errors import LodShapeError, LodUsageError
from lodtool.ops import sequence_reshape
from tests.test_ops_common import ALL_DTYPES, BACKENDS, OPS_SETTINGS, arrays, same_tensor


@pytest.mark.parametrize("backend", BACKENDS)
def test_paddle_doc_example(backend):
    x = LoDTensor(np.arange(1, 13, dtype=np.float32).reshape(6, 2), [[0, 2, 6]])
    out = sequence_reshape(x, 4, backend=backend)
    assert out.lod == [[0, 1, 3]] and out.data.tolist() == [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]]


@pytest.mark.parametrize("new_dim,lod,shape", [
    (12, [4, 1, 3, 3], (11, 24)),
    (24, [4, 2, 2, 4], (12, 12)),
    (12, [4, 2, 2, 4], (12, 12)),
    (24, [0, 6, 0, 2, 4], (12, 12)),
    (24, [0, 2, 8, 2, 0], (12, 12)),
])
@pytest.mark.parametrize("backend", BACKENDS)
def test_paddle_unit_test_cases(new_dim, lod, shape, backend):
    # Paddle's test/sequence/test_sequence_reshape.py: out lengths are length * width / new_dim
    x = np.random.default_rng(5).uniform(0.1, 1, shape)
    out = sequence_reshape(LoDTensor(x, recursive_sequence_lengths=[lod]), new_dim, backend=backend)
    assert out.recursive_sequence_lengths == [[n * shape[1] // new_dim for n in lod]]
    assert out.shape == (x.size // new_dim, new_dim) and np.array_equal(out.data.ravel(), x.ravel())


@pytest.mark.parametrize("backend", BACKENDS)
def test_upper_levels_kept_and_any_row_shape(backend):
    x = LoDTensor(np.arange(24).reshape(6, 2, 2), recursive_sequence_lengths=[[1, 1], [2, 4]])
    out = sequence_reshape(x, 8, backend=backend)
    assert out.recursive_sequence_lengths == [[1, 1], [1, 2]] and out.shape == (3, 8)
    out = sequence_reshape(LoDTensor(np.arange(6), [[0, 2, 6]]), 2, backend=backend)
    assert out.lod == [[0, 1, 3]] and out.data.tolist() == [[0, 1], [2, 3], [4, 5]]


@pytest.mark.parametrize("backend", BACKENDS)
def test_shares_contiguous_data(backend):
    x = LoDTensor(np.arange(8.0).reshape(4, 2), [[0, 2, 4]])
    assert np.shares_memory(sequence_reshape(x, 4, backend=backend).data, x.data)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_every_dtype_and_zero_rows(dtype, backend):
    x = LoDTensor(np.arange(12).reshape(4, 3).astype(dtype), [[0, 2, 4]])
    out = sequence_reshape(x, 2, backend=backend)
    assert out.dtype == np.dtype(dtype) and out.lod == [[0, 3, 6]]
    empty = sequence_reshape(LoDTensor(np.zeros((0, 3), dtype), [[0, 0, 0]]), 6, backend=backend)
    assert empty.shape == (0, 6) and empty.lod == [[0, 0, 0]]


@pytest.mark.parametrize("backend", BACKENDS)
def test_errors(backend):
    x = LoDTensor(np.zeros((5, 2)), [[0, 2, 5]])
    with pytest.raises(LodShapeError, match="sequence 1 has 3 rows of 2 values = 6 values.*new_dim=4"):
        sequence_reshape(x, 4, backend=backend)
    for bad in (0, -1, 2.0, True):
        with pytest.raises(LodUsageError, match="new_dim"):
            sequence_reshape(x, bad, backend=backend)
    with pytest.raises(LodShapeError, match="no LoD"):
        sequence_reshape(np.zeros((2, 2)), 4, backend=backend)


@st.composite
def reshape_cases(draw):
    width = draw(st.sampled_from([1, 2, 3, 4, 6]))
    new_dim = draw(st.sampled_from([1, 2, 3, 4, 6, 12]))
    lens = draw(st.lists(st.integers(0, 6), min_size=1, max_size=8))
    if draw(st.booleans()):  # most sequences fit whole rows; some do not
        step = new_dim // np.gcd(width, new_dim)
        lens = [n * step for n in lens]
    data = draw(arrays(sum(lens), element_shapes=[(width,)]))
    return LoDTensor(data, recursive_sequence_lengths=[lens]), new_dim


@OPS_SETTINGS
@given(reshape_cases())
def test_kernel_matches_reference(case):
    x, new_dim = case
    try:
        want = sequence_reshape(x, new_dim, backend="numpy")
    except LodShapeError as exc:
        with pytest.raises(LodShapeError) as info:
            sequence_reshape(x, new_dim, backend="numba")
        assert str(info.value) == str(exc)
        return
    got = sequence_reshape(x, new_dim, backend="numba")
    assert same_tensor(got, want) and got.data.tobytes() == x.data.tobytes()


@pytest.mark.parametrize("backend", BACKENDS)
def test_zero_sequences(backend):
    # offsets [0] (no sequences at all), the empty value Paddle's operators produce
    z = LoDTensor._trusted(np.zeros(0, np.int64), (np.zeros(1, np.int64),))
    out = sequence_reshape(z, 1, backend=backend)
    assert out.lod == [[0]] and out.n_rows == 0
