"""sequence_slice: Paddle's documented example and unit-test cases, its errors, and kernel == reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lodtool import LoDTensor
from lodtool.errors import LodDtypeError, LodIndexError, LodShapeError
from lodtool.ops import sequence_slice
from tests.test_ops_common import ALL_DTYPES, BACKENDS, OPS_SETTINGS, same_tensor, tensors


@pytest.mark.parametrize("backend", BACKENDS)
def test_paddle_doc_example(backend):
    # Paddle's op comment: LoD(X) = {{0, 3, 5}}, Offset = [[0], [1]], Length = [[2], [1]]
    x = LoDTensor(np.arange(10.0).reshape(5, 2), [[0, 3, 5]])
    out = sequence_slice(x, np.array([[0], [1]]), np.array([[2], [1]]), backend=backend)
    assert out.lod == [[0, 2, 3]] and out.data.tolist() == [[0, 1], [2, 3], [8, 9]]


def paddle_expected(x, lod, offset, length):
    """Paddle's unit test's own reference (test/sequence/test_sequence_slice_op.py), restated."""
    outs, out_lod, start = [], [], 0
    for i in range(len(offset)):
        outs.append(x[start + offset[i]:start + offset[i] + length[i]])
        out_lod.append(length[i])
        start += lod[i]
    return np.concatenate(outs), out_lod


@pytest.mark.parametrize("lod,offset,length", [
    ([20, 20, 20, 20, 20], [1, 2, 3, 4, 5], [10, 8, 6, 4, 2]),
    ([20, 30, 0, 30, 20], [1, 2, 0, 4, 5], [10, 8, 0, 4, 2]),
    ([0, 70, 0, 30, 0], [0, 2, 0, 4, 0], [0, 8, 0, 4, 0]),
    ([0, 100, 0, 0, 0], [0, 2, 0, 0, 0], [0, 8, 0, 0, 0]),
])
@pytest.mark.parametrize("backend", BACKENDS)
def test_paddle_unit_test_cases(lod, offset, length, backend):
    x = np.random.default_rng(1).random((100, 3, 2)).astype(np.float32)
    out = sequence_slice(LoDTensor(x, recursive_sequence_lengths=[lod]),
                         np.array(offset, np.int64)[:, None], np.array(length, np.int64)[:, None], backend=backend)
    data, out_lod = paddle_expected(x, lod, offset, length)
    assert out.recursive_sequence_lengths == [out_lod] and np.array_equal(out.data, data)


@pytest.mark.parametrize("backend", BACKENDS)
def test_upper_levels_are_kept(backend):
    x = LoDTensor(np.arange(7), recursive_sequence_lengths=[[2, 1], [3, 0, 4]])
    out = sequence_slice(x, [1, 0, 2], [2, 0, 1], backend=backend)
    assert out.recursive_sequence_lengths == [[2, 1], [2, 0, 1]] and out.data.tolist() == [1, 2, 5]


@pytest.mark.parametrize("backend", BACKENDS)
def test_zero_rows(backend):
    x = LoDTensor(np.zeros((0, 3), np.int8), recursive_sequence_lengths=[[0, 0]])
    out = sequence_slice(x, [0, 0], [0, 0], backend=backend)
    assert out.shape == (0, 3) and out.lod == [[0, 0, 0]] and out.dtype == np.int8


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_every_dtype_and_index_dtype(dtype, backend):
    x = LoDTensor(np.arange(8).reshape(4, 2).astype(dtype), [[0, 3, 4]])
    out = sequence_slice(x, np.array([1, 0], np.uint8), np.array([2, 1], np.int32), backend=backend)
    assert out.dtype == np.dtype(dtype) and np.array_equal(out.data, x.data[[1, 2, 3]])


@pytest.mark.parametrize("offset,length,error,match", [
    ([0], [1, 1], LodShapeError, "offset has 1 entries but x has 2 sequences"),
    ([0, 0], [1], LodShapeError, "length has 1 entries"),
    ([[0, 0]], [1, 1], LodShapeError, r"shape \(n,\) or \(n, 1\)"),
    ([0.0, 1.0], [1, 1], LodDtypeError, "integers"),
    ([-1, 0], [1, 1], LodIndexError, r"offset\[0\]=-1 is negative"),
    ([0, 0], [1, -2], LodIndexError, r"length\[1\]=-2 is negative"),
    ([2, 0], [2, 1], LodIndexError, "sequence 0 has 3 rows, but offset 2 \\+ length 2 = 4 runs past its end"),
])
@pytest.mark.parametrize("backend", BACKENDS)
def test_errors(offset, length, error, match, backend):
    x = LoDTensor(np.arange(5), [[0, 3, 5]])
    with pytest.raises(error, match=match):
        sequence_slice(x, offset, length, backend=backend)


def test_needs_a_lod():
    with pytest.raises(LodShapeError, match="no LoD"):
        sequence_slice(np.arange(3), [0], [1])


@st.composite
def slice_cases(draw):
    x = draw(tensors())
    lens = np.diff(x.offsets[-1])
    offset = [draw(st.integers(0, int(n))) for n in lens]
    length = [draw(st.integers(0, int(n) - o)) for n, o in zip(lens, offset)]
    return x, offset, length


@OPS_SETTINGS
@given(slice_cases())
def test_kernel_matches_reference(case):
    x, offset, length = case
    want = sequence_slice(x, offset, length, backend="numpy")
    got = sequence_slice(x, offset, length, backend="numba")
    assert same_tensor(got, want)
    assert got.lengths().tolist() == length
    assert all(np.array_equal(a, b) for a, b in zip(got.offsets[:-1], x.offsets[:-1]))
    off = x.offsets[-1]
    for i, (o, m) in enumerate(zip(offset, length)):
        assert got.data[got.offsets[-1][i]:got.offsets[-1][i + 1]].tobytes() == \
            x.data[off[i] + o:off[i] + o + m].tobytes()


@pytest.mark.parametrize("backend", BACKENDS)
def test_zero_sequences(backend):
    # offsets [0] (no sequences at all), the empty value Paddle's operators produce
    z = LoDTensor._trusted(np.zeros(0, np.int64), (np.zeros(1, np.int64),))
    out = sequence_slice(z, [], [], backend=backend)
    assert out.lod == [[0]] and out.n_rows == 0
