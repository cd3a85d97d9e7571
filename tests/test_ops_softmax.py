"""sequence_softmax: Paddle's results, stability, dtype rules, errors, and kernel == reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

from lodtool import LoDTensor
from lodtool.errors import LodDtypeError, LodShapeError
from lodtool.ops import sequence_softmax
from tests.test_ops_common import BACKENDS, FLOATS, INTS, OPS_SETTINGS, tensors

# PaddlePaddle 3.3 (static graph, float32): arange(5) with lengths [[2, 0, 3]]
PADDLE_F32 = [0.2689414322376251, 0.7310585975646973, 0.09003058075904846, 0.24472849071025848, 0.665241003036499]
PADDLE_F64 = [0.2689414213699951, 0.7310585786300049, 0.09003057317038046, 0.24472847105479767, 0.6652409557748219]


@pytest.mark.parametrize("backend", BACKENDS)
def test_matches_paddle(backend):
    x = LoDTensor(np.arange(5, dtype=np.float32).reshape(5, 1), recursive_sequence_lengths=[[2, 0, 3]])
    out = sequence_softmax(x, backend=backend)
    assert out.shape == (5, 1) and out.dtype == np.float32 and out.lod == [[0, 2, 2, 5]]
    np.testing.assert_allclose(out.data.ravel(), PADDLE_F32, rtol=1e-6)
    x64 = LoDTensor(np.arange(5.0), recursive_sequence_lengths=[[2, 3]])
    out64 = sequence_softmax(x64, backend=backend)
    assert out64.shape == (5,) and out64.dtype == np.float64
    np.testing.assert_allclose(out64.data, [PADDLE_F64[0], PADDLE_F64[1], *PADDLE_F64[2:]], rtol=1e-15)


@pytest.mark.parametrize("backend", BACKENDS)
def test_levels_and_names_are_kept(backend):
    x = LoDTensor(np.arange(5.0), recursive_sequence_lengths=[[1, 1], [2, 3]], level_names=["a", "b"])
    out = sequence_softmax(x, backend=backend)
    assert out.lod == [[0, 1, 2], [0, 2, 5]] and out.level_names == ("a", "b")


@pytest.mark.parametrize("backend", BACKENDS)
def test_stable_for_large_values(backend):
    x = LoDTensor(np.array([1000.0, 1001.0, -1000.0, -1001.0], np.float32), recursive_sequence_lengths=[[2, 2]])
    out = sequence_softmax(x, backend=backend).data
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, [0.26894143, 0.7310586, 0.7310586, 0.26894143], rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_nan_poisons_only_its_sequence(backend):
    x = LoDTensor(np.array([1.0, np.nan, 2.0, 0.0, 0.0]), recursive_sequence_lengths=[[3, 2]])
    out = sequence_softmax(x, backend=backend).data
    assert np.isnan(out[:3]).all() and out[3:].tolist() == [0.5, 0.5]


@pytest.mark.parametrize("dtype,out", [("float16", "float16"), ("float32", "float32"), ("int32", "float64"),
                                       ("uint8", "float64"), ("bool", "float64")])
@pytest.mark.parametrize("backend", BACKENDS)
def test_dtypes(dtype, out, backend):
    x = LoDTensor(np.array([0, 1, 1], dtype), recursive_sequence_lengths=[[2, 1]])
    got = sequence_softmax(x, backend=backend)
    assert got.dtype == np.dtype(out)
    np.testing.assert_allclose(got.data.astype(np.float64), [0.26894142, 0.73105858, 1.0], rtol=1e-3)


def test_errors():
    with pytest.raises(LodShapeError, match="width of each time step must be 1"):
        sequence_softmax(LoDTensor(np.zeros((4, 2)), recursive_sequence_lengths=[[2, 2]]))
    with pytest.raises(LodShapeError, match="no LoD"):
        sequence_softmax(np.zeros(3))
    with pytest.raises(LodDtypeError, match="complex"):
        sequence_softmax(LoDTensor(np.zeros(2, np.complex64), recursive_sequence_lengths=[[2]]))
    # (N, 1, 1) holds one value per row, so it is accepted, as in Paddle
    assert sequence_softmax(LoDTensor(np.zeros((2, 1, 1)), [[0, 2]])).data.ravel().tolist() == [0.5, 0.5]


@OPS_SETTINGS
@given(tensors(dtypes=FLOATS + INTS + ["bool"], element_shapes=[(), (1,)], values="small"))
def test_kernel_matches_reference(x):
    got = sequence_softmax(x, backend="numba")
    expected = sequence_softmax(x, backend="numpy")
    assert got.dtype == expected.dtype and got.shape == x.shape and got.lod == x.lod
    tol = 2e-3 if x.dtype == np.float16 else 1e-6 if x.dtype == np.float32 else 1e-13
    np.testing.assert_allclose(got.data.astype(np.float64), expected.data.astype(np.float64), rtol=tol, atol=tol)
    # each non-empty sequence sums to 1
    off = x.offsets[-1]
    flat = got.data.astype(np.float64).ravel()
    for a, b in zip(off[:-1].tolist(), off[1:].tolist()):
        if b > a:
            assert abs(flat[a:b].sum() - 1) < 10 * tol * (b - a)


@OPS_SETTINGS
@given(tensors(dtypes=FLOATS, element_shapes=[(), (1,)], values="bytes"))
def test_kernel_matches_reference_any_floats(x):
    with np.errstate(all="ignore"):
        got = sequence_softmax(x, backend="numba").data.astype(np.float64)
        expected = sequence_softmax(x, backend="numpy").data.astype(np.float64)
    assert np.array_equal(np.isnan(got), np.isnan(expected))
    np.testing.assert_allclose(got, expected, rtol=2e-3, atol=2e-3)
