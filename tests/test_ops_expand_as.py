"""sequence_expand_as: Paddle's documented cases and unit-test cases, its errors, and kernel == reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lodtool import LoDTensor
from lodtool.errors import LodShapeError
from lodtool.ops import sequence_expand_as
from tests.strategies import lod_lengths
from tests.test_ops_common import ALL_DTYPES, BACKENDS, OPS_SETTINGS, arrays, same_tensor


def lod_only(lengths):
    """A y whose data is a zero-cost stand-in that is never read."""
    t = LoDTensor(np.zeros(sum(lengths[-1])), recursive_sequence_lengths=lengths)
    return LoDTensor._trusted(np.broadcast_to(np.zeros(1), (t.n_rows,)), t.offsets)


@pytest.mark.parametrize("backend", BACKENDS)
def test_paddle_doc_cases(backend):
    # Case 1: X [[a], [b], [c], [d]], Y.lod [[0, 3, 6, 7, 8]] -> a a a b b b c d, Out.lod = Y.lod
    out = sequence_expand_as(np.array([[1.0], [2.0], [3.0], [4.0]]), LoDTensor(np.zeros(8), [[0, 3, 6, 7, 8]]),
                             backend=backend)
    assert out.lod == [[0, 3, 6, 7, 8]] and out.data.ravel().tolist() == [1, 1, 1, 2, 2, 2, 3, 4]
    # Case 2: X [[a, b], [c, d], [e, f]], Y.lod [[0, 2, 3, 6]]
    out = sequence_expand_as(np.array([[1, 2], [3, 4], [5, 6]]), LoDTensor(np.zeros(6), [[0, 2, 3, 6]]),
                             backend=backend)
    assert out.lod == [[0, 2, 3, 6]] and out.data.tolist() == [[1, 2], [1, 2], [3, 4], [5, 6], [5, 6], [5, 6]]


@pytest.mark.parametrize("x_shape,x_lod,y_lod", [
    ((3, 40), None, [1, 3, 4]),
    ((5, 20), [2, 3], [2, 2, 0, 3, 3]),
    ((5, 20), [2, 3], [0, 4, 0, 6, 0]),
    ((1, 2, 50), [1], [2]),
])
@pytest.mark.parametrize("backend", BACKENDS)
def test_paddle_unit_test_cases(x_shape, x_lod, y_lod, backend):
    # Paddle's test/sequence/test_sequence_expand_as.py; x's own LoD is not considered
    data = np.random.default_rng(2).uniform(0.1, 1, x_shape)
    x = LoDTensor(data, recursive_sequence_lengths=[x_lod] if x_lod else None)
    out = sequence_expand_as(x, lod_only([y_lod]), backend=backend)
    repeats = [i for i, n in enumerate(y_lod) for _ in range(n)]
    assert out.recursive_sequence_lengths == [y_lod] and np.array_equal(out.data, data[repeats])


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_level_of_y_is_kept(backend):
    out = sequence_expand_as([10, 20, 30], lod_only([[2, 1], [1, 0, 2]]), backend=backend)
    assert out.recursive_sequence_lengths == [[2, 1], [1, 0, 2]] and out.data.tolist() == [10, 30, 30]


@pytest.mark.parametrize("backend", BACKENDS)
def test_zero_rows_out(backend):
    out = sequence_expand_as(np.ones((2, 3), np.uint16), lod_only([[0, 0]]), backend=backend)
    assert out.shape == (0, 3) and out.lod == [[0, 0, 0]] and out.dtype == np.uint16


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_every_dtype(dtype, backend):
    x = np.arange(6).reshape(3, 2).astype(dtype)
    out = sequence_expand_as(x, lod_only([[1, 0, 2]]), backend=backend)
    assert out.dtype == np.dtype(dtype) and np.array_equal(out.data, x[[0, 2, 2]])


@pytest.mark.parametrize("backend", BACKENDS)
def test_errors(backend):
    with pytest.raises(LodShapeError, match="x has 2 rows but y's last level has 3 sequences"):
        sequence_expand_as(np.zeros(2), lod_only([[1, 1, 1]]), backend=backend)
    with pytest.raises(LodShapeError, match="y has no LoD"):
        sequence_expand_as(np.zeros(2), np.zeros(2), backend=backend)


@st.composite
def expand_as_cases(draw):
    table = draw(lod_lengths(1, 3))
    x = draw(arrays(len(table[-1])))
    return x, lod_only(table)


@OPS_SETTINGS
@given(expand_as_cases())
def test_kernel_matches_reference(case):
    x, y = case
    want = sequence_expand_as(x, y, backend="numpy")
    got = sequence_expand_as(x, y, backend="numba")
    assert same_tensor(got, want) and got.lod == y.lod
    assert got.data.tobytes() == np.repeat(x, np.diff(y.offsets[-1]), axis=0).tobytes()


@pytest.mark.parametrize("backend", BACKENDS)
def test_zero_sequences(backend):
    # offsets [0] (no sequences at all), the empty value Paddle's operators produce
    z = LoDTensor._trusted(np.zeros(0, np.int64), (np.zeros(1, np.int64),))
    out = sequence_expand_as(np.zeros(0, np.int64), z, backend=backend)
    assert out.lod == [[0]] and out.n_rows == 0
