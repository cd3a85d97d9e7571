"""sequence_concat: Paddle's documented example, its rules and errors, and kernel == reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lodtool import LoDTensor
from lodtool.errors import LodDtypeError, LodShapeError
from lodtool.ops import sequence_concat
from lodtool.ops._util import row_offsets
from tests.test_ops_common import ALL_DTYPES, BACKENDS, OPS_SETTINGS, arrays, same_tensor


@pytest.mark.parametrize("backend", BACKENDS)
def test_paddle_doc_example(backend):
    # Paddle's op comment: LoD of X1 = [0, 3, 7], LoD of X2 = [0, 7, 9] -> [0, 10, 16]
    x1 = LoDTensor(np.arange(7, dtype=np.float32).reshape(7, 1), [[0, 3, 7]])
    x2 = LoDTensor(np.arange(100, 109, dtype=np.float32).reshape(9, 1), [[0, 7, 9]])
    out = sequence_concat([x1, x2], backend=backend)
    assert out.lod == [[0, 10, 16]] and out.shape == (16, 1) and out.dtype == np.float32
    expected = np.concatenate([x1.data[0:3], x2.data[0:7], x1.data[3:7], x2.data[7:9]])
    assert np.array_equal(out.data, expected)


@pytest.mark.parametrize("lod1,lod2,out_lod", [([7, 3], [12, 8], [19, 11]), ([10, 0], [12, 8], [22, 8]),
                                               ([10, 0], [20, 0], [30, 0]), ([0, 10], [0, 20], [0, 30]),
                                               ([0, 10], [20, 0], [20, 10])])
@pytest.mark.parametrize("backend", BACKENDS)
def test_paddle_unit_test_cases(lod1, lod2, out_lod, backend):
    # Paddle's test/sequence/test_sequence_concat.py: x1 (10, 80), x2 (20, 80) float64
    rng = np.random.default_rng(0)
    x1 = LoDTensor(rng.random((10, 80)), recursive_sequence_lengths=[lod1])
    x2 = LoDTensor(rng.random((20, 80)), recursive_sequence_lengths=[lod2])
    out = sequence_concat([x1, x2], backend=backend)
    expected = np.concatenate([x1.data[:lod1[0]], x2.data[:lod2[0]], x1.data[lod1[0]:], x2.data[lod2[0]:]])
    assert out.recursive_sequence_lengths == [out_lod] and np.array_equal(out.data, expected)


@pytest.mark.parametrize("backend", BACKENDS)
def test_three_inputs_and_empty_sequences(backend):
    a = LoDTensor(np.array([1, 2, 3], np.int16), recursive_sequence_lengths=[[0, 3]])
    b = LoDTensor(np.array([4], np.int16), recursive_sequence_lengths=[[1, 0]])
    c = LoDTensor(np.zeros(0, np.int16), recursive_sequence_lengths=[[0, 0]])
    out = sequence_concat([a, b, c], backend=backend)
    assert out.data.tolist() == [4, 1, 2, 3] and out.lod == [[0, 1, 4]] and out.dtype == np.int16


@pytest.mark.parametrize("backend", BACKENDS)
def test_zero_rows(backend):
    a = LoDTensor(np.zeros((0, 2)), recursive_sequence_lengths=[[0, 0]])
    out = sequence_concat([a, a], backend=backend)
    assert out.shape == (0, 2) and out.lod == [[0, 0, 0]]


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_levels_join_at_the_top(backend):
    a = LoDTensor(np.arange(6.0), recursive_sequence_lengths=[[2, 1], [1, 2, 3]])
    b = LoDTensor(np.arange(10.0, 13.0), recursive_sequence_lengths=[[1, 1], [3, 0]])
    out = sequence_concat([a, b], backend=backend)
    assert out.recursive_sequence_lengths == [[3, 2], [1, 2, 3, 3, 0]]
    assert out.data.tolist() == [0, 1, 2, 10, 11, 12, 3, 4, 5]
    assert out.to_nested() == [[[0], [1, 2], [10, 11, 12]], [[3, 4, 5], []]]


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_every_dtype(dtype, backend):
    a = LoDTensor(np.arange(6).reshape(3, 2).astype(dtype), [[0, 1, 3]])
    b = LoDTensor(np.arange(6, 10).reshape(2, 2).astype(dtype), [[0, 2, 2]])
    out = sequence_concat([a, b], backend=backend)
    assert out.dtype == np.dtype(dtype) and np.array_equal(out.data, np.concatenate([a.data[:1], b.data,
                                                                                     a.data[1:]]))


def test_keeps_level_names_when_all_agree():
    a = LoDTensor(np.arange(3), [[0, 1, 3]], level_names=["words"])
    assert sequence_concat([a, a]).level_names == ("words",)
    assert sequence_concat([a, LoDTensor(np.arange(3), [[0, 1, 3]])]).level_names is None


@pytest.mark.parametrize("xs,error,match", [
    (lambda: [LoDTensor(np.arange(3), [[0, 3]])], LodShapeError, "at least two"),
    (lambda: LoDTensor(np.arange(3), [[0, 3]]), LodShapeError, "list"),
    (lambda: [LoDTensor(np.arange(3), [[0, 3]]), np.arange(3)], LodShapeError, "no LoD"),
    (lambda: [LoDTensor(np.arange(3), [[0, 3]]), LoDTensor(np.arange(3), [[0, 1, 3]])], LodShapeError,
     r"2 sequences but xs\[0\] has 1"),
    (lambda: [LoDTensor(np.arange(3), [[0, 3]]), LoDTensor(np.arange(3.0), [[0, 3]])], LodDtypeError, "dtype"),
    (lambda: [LoDTensor(np.zeros((3, 2)), [[0, 3]]), LoDTensor(np.zeros((3, 1, 2)), [[0, 3]])], LodShapeError,
     "element shape"),
    (lambda: [LoDTensor(np.arange(3), [[0, 3]]), LoDTensor(np.arange(3), [[0, 1], [0, 3]])], LodShapeError,
     "levels"),
])
@pytest.mark.parametrize("backend", BACKENDS)
def test_errors(xs, error, match, backend):
    with pytest.raises(error, match=match):
        sequence_concat(xs(), backend=backend)


def _table(draw, n_top, n_levels):
    lengths = [draw(st.lists(st.integers(0, 3), min_size=n_top, max_size=n_top))]
    for _level in range(1, n_levels):
        if sum(lengths[-1]) == 0:
            lengths[-1][-1] = 1  # a level below needs at least one sequence
        count = sum(lengths[-1])
        lengths.append(draw(st.lists(st.integers(0, 3), min_size=count, max_size=count)))
    return lengths


@st.composite
def concat_cases(draw):
    """Two to four tensors with the same number of levels, top-level sequences, dtype and element shape."""
    n_levels, n_top = draw(st.integers(1, 3)), draw(st.integers(1, 5))
    dtype = draw(st.sampled_from(ALL_DTYPES))
    shape = draw(st.sampled_from([(), (1,), (3,), (2, 2)]))
    xs = []
    for _ in range(draw(st.integers(2, 4))):
        lengths = _table(draw, n_top, n_levels)
        data = draw(arrays(sum(lengths[-1]), [dtype], [shape]))
        xs.append(LoDTensor(data, recursive_sequence_lengths=lengths))
    return xs


@OPS_SETTINGS
@given(concat_cases())
def test_kernel_matches_reference(xs):
    want = sequence_concat(xs, backend="numpy")
    got = sequence_concat(xs, backend="numba")
    assert same_tensor(got, want)
    # sequence i of the output holds the rows of sequence i of every input, in input order
    rows = [row_offsets(x.offsets, 0) for x in xs]
    out_rows = row_offsets(got.offsets, 0)
    for i in range(xs[0].num_sequences(0)):
        expected = b"".join(x.data[r[i]:r[i + 1]].tobytes() for x, r in zip(xs, rows))
        assert got.data[out_rows[i]:out_rows[i + 1]].tobytes() == expected


@pytest.mark.parametrize("backend", BACKENDS)
def test_zero_sequences(backend):
    # offsets [0] (no sequences at all), the empty value Paddle's operators produce
    z = LoDTensor._trusted(np.zeros(0, np.int64), (np.zeros(1, np.int64),))
    out = sequence_concat([z, z], backend=backend)
    assert out.lod == [[0]] and out.n_rows == 0
