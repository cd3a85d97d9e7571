"""sequence_expand: the seed example, Paddle's rules and errors, and kernel == reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lodtool import LoDTensor
from lodtool.errors import LodError, LodIndexError, LodShapeError
from lodtool.ops import sequence_expand
from tests.strategies import lod_lengths
from tests.test_ops_common import ALL_DTYPES, BACKENDS, OPS_SETTINGS, arrays, same_tensor


def lod_only(lengths):
    """A y whose data is a zero-cost stand-in that is never read."""
    t = LoDTensor(np.zeros(sum(lengths[-1])), recursive_sequence_lengths=lengths)
    return LoDTensor._trusted(np.broadcast_to(np.zeros(1), (t.n_rows,)), t.offsets)


@pytest.mark.parametrize("backend", BACKENDS)
def test_seed_example(backend):
    x = LoDTensor(np.array([[1.1], [2.2], [3.3], [4.4]], np.float32), recursive_sequence_lengths=[[1, 3]])
    y = LoDTensor(np.full((6, 1), 1.1, np.float32), recursive_sequence_lengths=[[1, 3], [1, 2, 1, 2]])
    out = sequence_expand(x, y, ref_level=0, backend=backend)
    expected = np.array([1.1, 2.2, 3.3, 4.4, 2.2, 3.3, 4.4, 2.2, 3.3, 4.4], np.float32).reshape(10, 1)
    assert out.dtype == np.float32 and np.array_equal(out.data, expected)
    assert out.lod == [[0, 1, 4, 7, 10]]
    assert out.recursive_sequence_lengths == [[1, 3, 3, 3]]


@pytest.mark.parametrize("backend", BACKENDS)
def test_rows_case_matches_paddle(backend):
    # Paddle 3.3: x [[0],[1]] (no LoD), y lengths [[2, 3]] -> [[0],[0],[1],[1],[1]], no LoD
    x = np.arange(2, dtype=np.float32).reshape(2, 1)
    out = sequence_expand(x, lod_only([[2, 3]]), backend=backend)
    assert out.lod_level == 0 and out.data.ravel().tolist() == [0, 0, 1, 1, 1]
    # ref_level 0 of a 2-level y: repeat by the top level's lengths
    out = sequence_expand(x, lod_only([[1, 1], [2, 4]]), ref_level=0, backend=backend)
    assert out.data.ravel().tolist() == [0, 1]
    # trailing dims are kept
    out = sequence_expand(np.arange(6).reshape(2, 3), lod_only([[2, 3]]), backend=backend)
    assert out.shape == (5, 3) and out.data[4].tolist() == [3, 4, 5]


@pytest.mark.parametrize("backend", BACKENDS)
def test_zero_repeats_drop_sequences(backend):
    # Paddle 3.3: x lengths [[1, 3]], y lengths [[0, 3]] -> sequence 1 three times, lod [[0, 3, 6, 9]]
    x = LoDTensor(np.array([0.0, 1, 2, 3]).reshape(4, 1), recursive_sequence_lengths=[[1, 3]])
    out = sequence_expand(x, lod_only([[0, 3]]), backend=backend)
    assert out.data.ravel().tolist() == [1, 2, 3] * 3 and out.lod == [[0, 3, 6, 9]]


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_repeat_zero_gives_zero_sequences(backend):
    # Paddle 3.3: 0 rows with lod [[0]]; a level of zero sequences is a value in lodtool too
    x = LoDTensor(np.arange(4.0).reshape(4, 1), recursive_sequence_lengths=[[1, 3]])
    out = sequence_expand(x, lod_only([[0, 0]]), backend=backend)
    assert out.lod == [[0]] and out.shape == (0, 1) and out.to_nested() == []
    y = LoDTensor(np.zeros(0), recursive_sequence_lengths=[[0, 0], []])  # y's level 1 holds zero sequences
    out = sequence_expand(x, y, ref_level=0, backend=backend)
    assert out.lod == [[0]] and out.shape == (0, 1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_x_without_rows(backend):
    # Paddle crashes here; the correct result is empty data with one empty sequence per copy
    x = LoDTensor(np.zeros((0, 2), np.int16), recursive_sequence_lengths=[[0, 0]])
    out = sequence_expand(x, lod_only([[1, 2]]), backend=backend)
    assert out.shape == (0, 2) and out.dtype == np.int16 and out.lod == [[0, 0, 0, 0]]


@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_sequences_expand(backend):
    x = LoDTensor(np.array([5, 6, 7]), recursive_sequence_lengths=[[0, 2, 1]])
    out = sequence_expand(x, lod_only([[2, 1, 0]]), backend=backend)
    assert out.lod == [[0, 0, 0, 2]] and out.data.tolist() == [5, 6]


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_every_dtype(dtype, backend):
    x = np.arange(6).reshape(3, 2).astype(dtype)
    out = sequence_expand(x, lod_only([[1, 0, 2]]), backend=backend)
    assert out.dtype == np.dtype(dtype)
    assert np.array_equal(out.data, x[[0, 2, 2]])


def test_accepts_lists_and_strided_views():
    assert sequence_expand([7, 8], lod_only([[1, 2]])).data.tolist() == [7, 8, 8]
    base = np.arange(12, dtype=np.float32).reshape(4, 3)
    x = base[::2, ::2]  # not contiguous
    for backend in BACKENDS:
        assert sequence_expand(x, lod_only([[2, 1]]), backend=backend).data.tolist() == [[0, 2], [0, 2], [6, 8]]


@pytest.mark.parametrize("make_x,y,ref_level,error,match", [
    (lambda: LoDTensor(np.zeros(4), recursive_sequence_lengths=[[1, 1], [1, 3]]), [[1, 2]], -1,
     LodShapeError, "0 or 1"),
    (lambda: np.zeros(2), None, -1, LodShapeError, "no LoD"),
    (lambda: np.zeros(2), [[1, 1], [2, 4]], -2, LodIndexError, "ref_level -2"),
    (lambda: np.zeros(2), [[1, 1], [2, 4]], 2, LodIndexError, "ref_level 2"),
    (lambda: LoDTensor(np.zeros(4), recursive_sequence_lengths=[[1, 3]]), [[1, 1, 1]], -1, LodShapeError,
     "2 sequences but y's level 0 has 3"),
    (lambda: np.zeros(3), [[1, 2]], -1, LodShapeError, "3 rows"),
])
@pytest.mark.parametrize("backend", BACKENDS)
def test_errors(make_x, y, ref_level, error, match, backend):
    yt = LoDTensor(np.zeros(2)) if y is None else lod_only(y)
    with pytest.raises(error, match=match):
        sequence_expand(make_x(), yt, ref_level=ref_level, backend=backend)


def test_errors_are_lod_errors():
    with pytest.raises(LodError):
        sequence_expand(np.zeros(3), lod_only([[1, 2]]))
    with pytest.raises(ValueError):
        sequence_expand(np.zeros(3), lod_only([[1, 2]]))


@st.composite
def expand_cases(draw):
    table = draw(lod_lengths(1, 3))
    y_offsets = LoDTensor(np.zeros(sum(table[-1])), recursive_sequence_lengths=table).offsets
    ref_level = draw(st.integers(-1, len(table) - 1))
    count = len(y_offsets[ref_level]) - 1
    if draw(st.booleans()):
        x = LoDTensor(draw(arrays(count)))
    else:
        lens = draw(st.lists(st.integers(0, 4), min_size=count, max_size=count))
        x = LoDTensor(draw(arrays(sum(lens))), recursive_sequence_lengths=[lens])
    y = LoDTensor._trusted(np.broadcast_to(np.zeros(1), (sum(table[-1]),)), y_offsets)
    return x, y, ref_level


@OPS_SETTINGS
@given(expand_cases())
def test_kernel_matches_reference(case):
    x, y, ref_level = case
    try:
        expected = sequence_expand(x, y, ref_level, backend="numpy")
    except LodShapeError:
        with pytest.raises(LodShapeError):
            sequence_expand(x, y, ref_level, backend="numba")
        return
    got = sequence_expand(x, y, ref_level, backend="numba")
    assert same_tensor(got, expected)
    ref = y.offsets[ref_level]
    reps = np.diff(ref)
    if x.lod_level == 0:
        assert got.n_rows == ref[-1]
    else:
        assert got.recursive_sequence_lengths == [np.repeat(np.diff(x.offsets[0]), reps).tolist()]
        # each output sequence is a copy of its source sequence
        src = np.repeat(np.arange(len(reps)), reps)
        for k, s in enumerate(src.tolist()[:20]):
            assert np.array_equal(got.branch(k).data, x.branch(s).data, equal_nan=False) or \
                got.branch(k).data.tobytes() == x.branch(s).data.tobytes()
