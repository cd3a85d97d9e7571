"""sequence_scatter: Paddle's documented example and unit tests, errors, and kernel == reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lodtool import LoDTensor
from lodtool.errors import LodDtypeError, LodError, LodIndexError, LodShapeError
from lodtool.ops import sequence_scatter
from tests.test_ops_common import BACKENDS, OPS_SETTINGS, arrays, same_tensor


@pytest.mark.parametrize("backend", BACKENDS)
def test_documented_example(backend):
    x = np.ones((3, 6), np.float32)
    ids = LoDTensor(np.array([[0], [1], [2], [5], [4], [3], [2], [1], [3], [2], [5], [4]]), [[0, 3, 8, 12]])
    updates = LoDTensor(np.array([[.3], [.3], [.4], [.1], [.2], [.3], [.4], [.0], [.2], [.3], [.1], [.4]],
                                 np.float32), [[0, 3, 8, 12]])
    out = sequence_scatter(x, ids, updates, backend=backend)
    want = np.array([[1.3, 1.3, 1.4, 1.0, 1.0, 1.0], [1.0, 1.0, 1.4, 1.3, 1.2, 1.1],
                     [1.0, 1.0, 1.3, 1.2, 1.4, 1.1]], np.float32)
    assert out.dtype == np.float32 and out.lod_level == 0
    np.testing.assert_allclose(out.data, want, rtol=1e-6)
    assert np.array_equal(x, np.ones((3, 6)))  # x is not changed


def paddle_unit_test_expected(x, ids, updates, lengths):
    """test/sequence/test_sequence_scatter_op.py's own computation of the expected output."""
    out = np.copy(x)
    offset = 0
    for i in range(3):
        for j in range(lengths[i]):
            out[i][ids[offset + j]] += updates[offset + j]
        offset += lengths[i]
    return out


@pytest.mark.parametrize("lengths", [[30, 50, 40], [60, 60, 0], [0, 60, 60], [60, 0, 60], [120, 0, 0],
                                     [0, 120, 0], [0, 0, 120]])
@pytest.mark.parametrize("backend", BACKENDS)
def test_paddle_unit_tests(lengths, backend):
    rng = np.random.default_rng(sum(lengths[:2]))
    x = rng.uniform(0.1, 1.0, [3, 6])
    ids = rng.integers(0, 6, (120, 1)).astype(np.int64)
    updates = rng.uniform(0.1, 1.0, [120, 1])
    lod = [[0, lengths[0], lengths[0] + lengths[1], 120]]
    out = sequence_scatter(x, LoDTensor(ids, lod), LoDTensor(updates, lod), backend=backend)
    np.testing.assert_allclose(out.data, paddle_unit_test_expected(x, ids[:, 0], updates[:, 0], lengths),
                               rtol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_rows_of_several_dimensions_are_indexed_flat(backend):
    x = np.zeros((2, 2, 3), np.int32)
    ids = LoDTensor(np.array([5, 0, 5, 3]), [[0, 3, 4]])
    out = sequence_scatter(x, ids, np.array([1, 2, 3, 4], np.int32), backend=backend)
    assert out.data.tolist() == [[[2, 0, 0], [0, 0, 4]], [[0, 0, 0], [4, 0, 0]]]


@pytest.mark.parametrize("backend", BACKENDS)
def test_integers_wrap_and_float16_rounds_once(backend):
    out = sequence_scatter(np.array([[120]], np.int8), LoDTensor(np.array([0, 0]), [[0, 2]]),
                           np.array([5, 5], np.int8), backend=backend)
    assert out.dtype == np.int8 and out.data.tolist() == [[-126]]
    out = sequence_scatter(np.array([[2048]], np.float16), LoDTensor(np.array([0, 0]), [[0, 2]]),
                           np.array([1, 1], np.float16), backend=backend)
    assert out.dtype == np.float16 and out.data.tolist() == [[2050.0]]  # float16 alone would stay at 2048


@pytest.mark.parametrize("make,error,match", [
    (lambda: (np.zeros((2, 3)), LoDTensor(np.array([0, 3]), [[0, 1, 2]]), [1.0, 1.0]), LodIndexError, r"ids\[1\]=3"),
    (lambda: (np.zeros((2, 3)), LoDTensor(np.array([0, -1]), [[0, 1, 2]]), [1.0, 1.0]), LodIndexError, r"ids\[1\]=-1"),
    (lambda: (np.zeros((3, 3)), LoDTensor(np.array([0, 1]), [[0, 1, 2]]), [1.0, 1.0]), LodShapeError, "3 rows"),
    (lambda: (np.zeros((2, 3)), LoDTensor(np.array([0, 1]), [[0, 1, 2]]), [1.0]), LodShapeError, "1 updates"),
    (lambda: (np.zeros((2, 3)), LoDTensor(np.array([0.0, 1.0]), [[0, 1, 2]]), [1.0, 1.0]), LodDtypeError, "integers"),
    (lambda: (np.zeros((2, 3), np.int32), LoDTensor(np.array([0, 1]), [[0, 1, 2]]), [1.5, 1.0]), LodDtypeError,
     "different kind"),
    (lambda: (np.zeros((2, 3), bool), LoDTensor(np.array([0, 1]), [[0, 1, 2]]), [True, True]), LodDtypeError, "bool"),
    (lambda: (np.zeros((2, 3)), np.array([0, 1]), [1.0, 1.0]), LodShapeError, "no LoD"),
    (lambda: (np.zeros((2, 3)), LoDTensor(np.array([0, 1]), [[0, 1, 2]]),
              LoDTensor(np.ones(2), [[0, 2]])), LodShapeError, "differs"),
])
@pytest.mark.parametrize("backend", BACKENDS)
def test_errors(make, error, match, backend):
    with pytest.raises(error, match=match):
        sequence_scatter(*make(), backend=backend)


def test_errors_are_lod_errors():
    with pytest.raises(LodError):
        sequence_scatter(np.zeros((1, 2)), LoDTensor(np.array([2]), [[0, 1]]), [1.0])


@st.composite
def scatter_cases(draw):
    n = draw(st.integers(1, 6))
    lengths = draw(st.lists(st.integers(0, 6), min_size=n, max_size=n))
    x = draw(arrays(n, dtypes=["int8", "int32", "uint16", "int64", "float16", "float32", "float64", "complex64"],
                    element_shapes=[(1,), (3,), (2, 2)], values="small"))
    width = int(np.prod(x.shape[1:]))
    k = sum(lengths)
    ids = np.array(draw(st.lists(st.integers(0, width - 1), min_size=k, max_size=k)), np.int64)
    updates = draw(arrays(k, dtypes=[x.dtype.name], element_shapes=[()], values="small"))
    return x, LoDTensor(ids, recursive_sequence_lengths=[lengths]), updates


@OPS_SETTINGS
@given(scatter_cases())
def test_kernel_matches_reference(case):
    x, ids, updates = case
    want = sequence_scatter(x, ids, updates, backend="numpy")
    got = sequence_scatter(x, ids, updates, backend="numba")
    assert same_tensor(got, want)
    if x.dtype.kind in "iu":  # exact: the plain loop of Paddle's kernel
        loop = x.reshape(x.shape[0], -1).astype(np.int64)
        for i in range(ids.num_sequences(0)):
            for j in range(ids.offsets[0][i], ids.offsets[0][i + 1]):
                loop[i, ids.data[j]] += int(updates[j])
        assert np.array_equal(got.data.reshape(x.shape[0], -1), loop.astype(x.dtype))
