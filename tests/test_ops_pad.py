"""sequence_pad / sequence_unpad / sequence_mask: examples, errors, round trips, kernel == reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lodtool import LoDTensor
from lodtool.errors import LodDtypeError, LodIndexError, LodShapeError, LodUsageError, LodValidationError
from lodtool.ops import sequence_mask, sequence_pad, sequence_unpad
from lodtool.ops._util import row_offsets
from tests.test_ops_common import ALL_DTYPES, BACKENDS, OPS_SETTINGS, arrays, same_bits, same_tensor, tensors


@pytest.mark.parametrize("backend", BACKENDS)
def test_pad_example(backend):
    x = LoDTensor(np.arange(10, dtype=np.float32).reshape(5, 2), recursive_sequence_lengths=[[2, 0, 3]])
    padded, lengths = sequence_pad(x, pad_value=-1, backend=backend)
    assert padded.shape == (3, 3, 2) and padded.dtype == np.float32
    assert lengths.dtype == np.int64 and lengths.tolist() == [2, 0, 3]
    assert padded.tolist() == [[[0, 1], [2, 3], [-1, -1]], [[-1, -1]] * 3, [[4, 5], [6, 7], [8, 9]]]
    padded, _ = sequence_pad(x, maxlen=4, backend=backend)
    assert padded.shape == (3, 4, 2) and padded[2, 3].tolist() == [0, 0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_pad_per_element_value(backend):
    x = LoDTensor(np.zeros((1, 3), np.int16), recursive_sequence_lengths=[[1, 0]])
    padded, _ = sequence_pad(x, pad_value=[7, 8, 9], maxlen=2, backend=backend)
    assert padded.tolist() == [[[0, 0, 0], [7, 8, 9]], [[7, 8, 9], [7, 8, 9]]]


@pytest.mark.parametrize("backend", BACKENDS)
def test_pad_upper_level(backend):
    x = LoDTensor(np.arange(6), recursive_sequence_lengths=[[2, 1], [1, 2, 3]])
    padded, lengths = sequence_pad(x, level=0, backend=backend)
    assert lengths.tolist() == [3, 3] and padded.tolist() == [[0, 1, 2], [3, 4, 5]]
    padded, lengths = sequence_pad(x, level=1, backend=backend)
    assert lengths.tolist() == [1, 2, 3] and padded.tolist() == [[0, 0, 0], [1, 2, 0], [3, 4, 5]]


@pytest.mark.parametrize("backend", BACKENDS)
def test_pad_all_empty(backend):
    x = LoDTensor(np.zeros((0, 2), np.uint8), recursive_sequence_lengths=[[0, 0]])
    padded, lengths = sequence_pad(x, pad_value=3, backend=backend)
    assert padded.shape == (2, 0, 2) and lengths.tolist() == [0, 0]
    padded, _ = sequence_pad(x, pad_value=3, maxlen=1, backend=backend)
    assert padded.tolist() == [[[3, 3]], [[3, 3]]]


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_pad_every_dtype(dtype, backend):
    x = LoDTensor(np.arange(3).astype(dtype), recursive_sequence_lengths=[[1, 2]])
    padded, _ = sequence_pad(x, pad_value=1, backend=backend)
    assert padded.dtype == np.dtype(dtype) and padded.tolist() == np.array([[0, 1], [1, 2]]).astype(dtype).tolist()


def test_pad_errors():
    x = LoDTensor(np.arange(5), recursive_sequence_lengths=[[2, 3]])
    with pytest.raises(LodShapeError, match="maxlen 2 is shorter than the longest sequence"):
        sequence_pad(x, maxlen=2)
    with pytest.raises(LodUsageError):
        sequence_pad(x, maxlen=-1)
    with pytest.raises(LodUsageError):
        sequence_pad(x, maxlen=2.5)
    with pytest.raises(LodShapeError, match="no LoD"):
        sequence_pad(np.arange(3))
    with pytest.raises(LodIndexError):
        sequence_pad(x, level=1)
    with pytest.raises(LodDtypeError, match="pad_value"):
        sequence_pad(LoDTensor(np.arange(5, dtype=np.uint8), [[0, 5]]), pad_value=-1)
    with pytest.raises(LodShapeError, match="pad_value"):
        sequence_pad(x, pad_value=[1, 2])


@pytest.mark.parametrize("backend", BACKENDS)
def test_unpad(backend):
    t = sequence_unpad(np.arange(12, dtype=np.float32).reshape(3, 4), [2, 0, 3], backend=backend)
    assert t.data.tolist() == [0, 1, 8, 9, 10] and t.lod == [[0, 2, 2, 5]] and t.dtype == np.float32
    t = sequence_unpad(np.arange(12).reshape(2, 3, 2), np.array([[1], [3]]), backend=backend)
    assert t.data.tolist() == [[0, 1], [6, 7], [8, 9], [10, 11]] and t.lod == [[0, 1, 4]]
    t = sequence_unpad(np.zeros((2, 0)), [0, 0], backend=backend)
    assert t.shape == (0,) and t.lod == [[0, 0, 0]]


def test_unpad_errors():
    padded = np.zeros((3, 4))
    with pytest.raises(LodShapeError, match="2 lengths for 3"):
        sequence_unpad(padded, [1, 2])
    with pytest.raises(LodShapeError, match="longer than the padded length 4"):
        sequence_unpad(padded, [1, 2, 5])
    with pytest.raises(LodValidationError, match="negative"):
        sequence_unpad(padded, [1, -2, 1])
    with pytest.raises(LodValidationError):
        sequence_unpad(padded, [1.0, 2.0, 1.0])
    empty = sequence_unpad(np.zeros((0, 4)), [])  # zero sequences: an empty tensor with offsets [0]
    assert empty.lod == [[0]] and empty.shape == (0,)
    with pytest.raises(LodShapeError, match="sequences, maxlen"):
        sequence_unpad(np.zeros(4), [1, 2, 1, 0])


def test_mask():
    assert sequence_mask([2, 0, 3]).tolist() == [[True, True, False], [False] * 3, [True] * 3]
    # Paddle 3.3: sequence_mask([2, 0, 3], maxlen=2) -> [[1, 1], [0, 0], [1, 1]] (int64)
    m = sequence_mask(np.array([2, 0, 3]), maxlen=2, dtype="int64")
    assert m.dtype == np.int64 and m.tolist() == [[1, 1], [0, 0], [1, 1]]
    assert sequence_mask([[1], [2]], maxlen=3).shape == (2, 1, 3)
    assert sequence_mask([]).shape == (0, 0)
    assert sequence_mask(np.array([1, 2], np.uint8), dtype=np.float32).tolist() == [[1, 0], [1, 1]]
    with pytest.raises(LodValidationError):
        sequence_mask([1, -1])
    with pytest.raises(LodValidationError):
        sequence_mask([1.5])
    with pytest.raises(LodUsageError):
        sequence_mask([1], maxlen=-3)


@pytest.mark.parametrize("maxlen", [np.array([2]), np.array([[2]], np.int32), [2], np.int64(2)])
def test_mask_takes_maxlen_as_a_one_element_array(maxlen):
    # Paddle takes maxlen as a tensor of one element as well as an int
    m = sequence_mask(np.array([2, 0, 3]), maxlen=maxlen, dtype="int64")
    assert m.tolist() == [[1, 1], [0, 0], [1, 1]]


@pytest.mark.parametrize("maxlen", [np.array([2, 3]), np.array([2.0]), np.array([], np.int64), np.array([-1])])
def test_mask_refuses_other_arrays(maxlen):
    with pytest.raises(LodUsageError, match="maxlen"):
        sequence_mask([1, 2], maxlen=maxlen)


def test_pad_and_pool_of_zero_sequences():
    x = LoDTensor(np.zeros((0, 3), np.float32), [[0]])
    for backend in BACKENDS:
        padded, lengths = sequence_pad(x, backend=backend)
        assert padded.shape == (0, 0, 3) and lengths.shape == (0,)
        padded, _ = sequence_pad(x, maxlen=4, backend=backend)
        assert padded.shape == (0, 4, 3)
        back = sequence_unpad(padded, lengths, backend=backend)
        assert back.lod == [[0]] and back.shape == (0, 3)
    assert sequence_mask(np.zeros(0, np.int64), maxlen=np.array([3])).shape == (0, 3)


@OPS_SETTINGS
@given(tensors(), st.data())
def test_pad_kernel_matches_reference_and_round_trips(x, data):
    level = data.draw(st.integers(-x.lod_level, x.lod_level - 1))
    extra = data.draw(st.integers(0, 2))
    lengths = np.diff(row_offsets(x.offsets, level % x.lod_level))
    maxlen = int(lengths.max()) + extra
    pad = data.draw(arrays(1, dtypes=[str(x.dtype)], element_shapes=[x.element_shape]))[0]
    padded, lens = sequence_pad(x, pad, maxlen=maxlen, level=level, backend="numba")
    expected, lens2 = sequence_pad(x, pad, maxlen=maxlen, level=level, backend="numpy")
    assert same_bits(padded, expected) and np.array_equal(lens, lens2) and np.array_equal(lens, lengths)
    mask = sequence_mask(lens, maxlen)
    assert same_bits(padded[~mask], np.broadcast_to(pad, padded[~mask].shape))
    for backend in ("numba", "numpy"):
        back = sequence_unpad(padded, lens, backend=backend)
        assert back.lod == [np.concatenate([[0], np.cumsum(lengths)]).tolist()]
        assert same_bits(back.data, x.data)
    if x.lod_level == 1:
        assert same_tensor(sequence_unpad(padded, lens), x)
