"""sequence_enumerate: Paddle's documented example and unit-test cases, its rules, and kernel == reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lodtool import LoDTensor
from lodtool.errors import LodDtypeError, LodShapeError, LodUsageError
from lodtool.ops import sequence_enumerate
from tests.test_ops_common import ALL_DTYPES, BACKENDS, OPS_SETTINGS, same_tensor, tensors


@pytest.mark.parametrize("backend", BACKENDS)
def test_paddle_doc_example(backend):
    x = LoDTensor(np.array([[1], [2], [3], [4], [5]], np.int32), [[0, 3, 5]])
    out = sequence_enumerate(x, win_size=2, pad_value=0, backend=backend)
    assert out.data.tolist() == [[1, 2], [2, 3], [3, 0], [4, 5], [5, 0]] and out.lod == [[0, 3, 5]]
    assert out.dtype == np.int32 and out.shape == (5, 2)


def paddle_expected(in_seq, lengths, win_size, pad_value):
    """Paddle's unit test's own reference (test/sequence/test_sequence_enumerate_op.py), restated."""
    lod0 = np.concatenate([[0], np.cumsum(lengths)]).tolist()
    out = []
    for i in range(len(lod0) - 1):
        for idx in range(lod0[i], lod0[i + 1]):
            out.append([int(in_seq[idx + t, 0]) if idx + t < lod0[i + 1] else pad_value for t in range(win_size)])
    return out


@pytest.mark.parametrize("dtype,lod,win_size,pad_value", [
    ("int32", [9, 4, 11, 6], 2, 0),
    ("int64", [9, 4, 11, 6], 2, 0),
    ("int32", [9, 4, 11, 6], 5, 0),
    ("int32", [9, 4, 11, 6], 30, 0),
    ("int32", [9, 4, 11, 6], 5, 5),
    ("int32", [0, 14, 0, 16, 0], 5, 5),
])
@pytest.mark.parametrize("backend", BACKENDS)
def test_paddle_unit_test_cases(dtype, lod, win_size, pad_value, backend):
    in_seq = np.random.default_rng(4).integers(0, 10, (30, 1)).astype(dtype)
    out = sequence_enumerate(LoDTensor(in_seq, recursive_sequence_lengths=[lod]), win_size, pad_value,
                             backend=backend)
    assert out.data.tolist() == paddle_expected(in_seq, lod, win_size, pad_value)
    assert out.recursive_sequence_lengths == [lod] and out.dtype == np.dtype(dtype)


@pytest.mark.parametrize("backend", BACKENDS)
def test_last_level_windows_and_all_levels_kept(backend):
    x = LoDTensor(np.arange(1, 6), recursive_sequence_lengths=[[2, 1], [2, 0, 3]])
    out = sequence_enumerate(x, 2, -1, backend=backend)
    assert out.data.tolist() == [[1, 2], [2, -1], [3, 4], [4, 5], [5, -1]] and out.lod == x.lod


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_every_dtype(dtype, backend):
    x = LoDTensor(np.arange(4).astype(dtype), [[0, 3, 4]])
    out = sequence_enumerate(x, 2, 1, backend=backend)
    expected = np.array([[0, 1], [1, 2], [2, 1], [3, 1]]).astype(dtype)
    assert out.dtype == np.dtype(dtype) and np.array_equal(out.data, expected)


@pytest.mark.parametrize("backend", BACKENDS)
def test_zero_rows(backend):
    out = sequence_enumerate(LoDTensor(np.zeros((0, 1), np.int64), [[0, 0]]), 3, backend=backend)
    assert out.shape == (0, 3) and out.lod == [[0, 0]]


@pytest.mark.parametrize("backend", BACKENDS)
def test_errors(backend):
    x = LoDTensor(np.arange(3, dtype=np.uint8), [[0, 3]])
    for win in (1, 0, -2, 2.0, True):
        with pytest.raises(LodUsageError, match="win_size must be an integer >= 2"):
            sequence_enumerate(x, win, backend=backend)
    with pytest.raises(LodDtypeError, match="pad_value"):
        sequence_enumerate(x, 2, -1, backend=backend)
    with pytest.raises(LodShapeError, match="one value"):
        sequence_enumerate(LoDTensor(np.zeros((3, 2)), [[0, 3]]), 2, backend=backend)
    with pytest.raises(LodShapeError, match="no LoD"):
        sequence_enumerate(np.zeros(3), 2, backend=backend)


@OPS_SETTINGS
@given(tensors(element_shapes=[(), (1,)]), st.integers(2, 7), st.sampled_from([0, 1]))
def test_kernel_matches_reference(x, win_size, pad_value):
    want = sequence_enumerate(x, win_size, pad_value, backend="numpy")
    got = sequence_enumerate(x, win_size, pad_value, backend="numba")
    assert same_tensor(got, want) and got.shape == (x.n_rows, win_size)


@pytest.mark.parametrize("backend", BACKENDS)
def test_zero_sequences(backend):
    # offsets [0] (no sequences at all), the empty value Paddle's operators produce
    z = LoDTensor._trusted(np.zeros(0, np.int64), (np.zeros(1, np.int64),))
    out = sequence_enumerate(z, 2, backend=backend)
    assert out.lod == [[0]] and out.n_rows == 0
