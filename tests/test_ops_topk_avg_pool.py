"""sequence_topk_avg_pooling: Paddle's unit tests (its reference, in its own terms), ties, errors, kernel == reference."""

from __future__ import annotations

from copy import deepcopy

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lodtool import LoDTensor
from lodtool.errors import LodDtypeError, LodShapeError, LodUsageError
from lodtool.ops import sequence_topk_avg_pooling
from tests.test_ops_common import BACKENDS, OPS_SETTINGS, same_bits


def paddle_reference(x_data, x_lod, row_lod, col_lod, topks, channel_num):
    """test/sequence/test_sequence_topk_avg_pooling.py's ``compute`` (its expected Out and pos)."""
    max_k = topks[-1]
    out = np.zeros((0, len(topks) * channel_num), dtype=x_data.dtype)
    pos = np.zeros((0,), dtype="int32")
    out_lod = deepcopy(row_lod)
    offset = 0
    for idx in range(len(x_lod[0])):
        out_tmp = np.zeros((0,), dtype=x_data.dtype)
        pos_tmp = np.zeros((0,), dtype="int32")
        for _ch in range(channel_num):
            for _r in range(row_lod[0][idx]):
                x_sub = x_data[offset:offset + col_lod[0][idx]]
                real_topk = max_k if max_k < len(x_sub) else len(x_sub)
                topk_pos = np.array(x_sub).argsort()[-max_k:][::-1]
                topk_val = np.array(x_sub)[topk_pos]
                if real_topk < max_k:
                    topk_pos = np.hstack((topk_pos, np.full((max_k - real_topk,), -1)))
                    topk_val = np.hstack((topk_val, np.full((max_k - real_topk,), 0.0)))
                sums = [0.0] * (max_k + 1)
                for i in range(1, max_k + 1):
                    sums[i] = sums[i - 1] if topk_pos[i - 1] == -1 else sums[i - 1] + topk_val[i - 1]
                out_tmp = np.hstack((out_tmp, np.array([sums[k] / k for k in topks])))
                pos_tmp = np.hstack((pos_tmp, topk_pos))
                offset += col_lod[0][idx]
        out_tmp = out_tmp.reshape([channel_num, -1, len(topks)]).transpose(1, 0, 2)
        pos_tmp = pos_tmp.reshape([channel_num, -1, max_k]).transpose(1, 0, 2)
        out = np.vstack((out, out_tmp.reshape([-1, len(topks) * channel_num])))
        pos = np.hstack((pos, pos_tmp.flatten()))
    return out.astype("float32"), out_lod, pos


@pytest.mark.parametrize("topks,channel_num,row,col", [([1, 3, 5], 3, [30, 45], [25, 36]), ([2, 3], 5, [36], [48]),
                                                       ([1, 4], 2, [3, 0, 2], [2, 5, 0])])
@pytest.mark.parametrize("backend", BACKENDS)
def test_paddle_unit_tests(topks, channel_num, row, col, backend):
    feature = [r * c for r, c in zip(row, col)]
    x_data = np.arange(sum(feature) * channel_num).astype("float32")  # the unit test's data: no ties
    x_lod = [[f * channel_num for f in feature]]
    want, want_lod, want_pos = paddle_reference(x_data, x_lod, [row], [col], topks, channel_num)
    x = LoDTensor(x_data.reshape(-1, 1), recursive_sequence_lengths=x_lod)
    rows = LoDTensor(np.zeros((sum(row), 10), np.float32), recursive_sequence_lengths=[row])
    cols = LoDTensor(np.zeros((sum(col), 10), np.float32), recursive_sequence_lengths=[col])
    out, pos = sequence_topk_avg_pooling(x, rows, cols, topks, channel_num, return_pos=True, backend=backend)
    assert out.dtype == np.float32 and pos.dtype == np.int32
    assert out.recursive_sequence_lengths == want_lod
    np.testing.assert_allclose(out.data, want, rtol=1e-6)
    assert pos.tolist() == want_pos.tolist()


@pytest.mark.parametrize("backend", BACKENDS)
def test_ties_rank_the_lower_column_first_and_nan_last(backend):
    x = LoDTensor(np.array([2.0, 7.0, 7.0, np.nan, 1.0]), [[0, 5]])
    out, pos = sequence_topk_avg_pooling(x, [1], [5], [1, 2, 5], return_pos=True, backend=backend)
    assert pos.tolist() == [1, 2, 0, 4, 3]
    assert out.data[0, :2].tolist() == [7.0, 7.0] and np.isnan(out.data[0, 2])
    out = sequence_topk_avg_pooling(LoDTensor(np.array([-1e8, -2e8]), [[0, 2]]), [1], [2], [1], backend=backend)
    assert out.data.tolist() == [[-1e8]]  # Paddle's selection never picks values <= -1e7


@pytest.mark.parametrize("backend", BACKENDS)
def test_integers_give_float64_and_empty_matrices(backend):
    x = LoDTensor(np.array([3, 1, 2], np.int16), [[0, 3, 3]])
    out, pos = sequence_topk_avg_pooling(x, [1, 2], [3, 0], [2], return_pos=True, backend=backend)
    assert out.dtype == np.float64 and out.lod == [[0, 1, 3]]
    assert out.data.tolist() == [[2.5], [0.0], [0.0]] and pos.tolist() == [0, 2, -1, -1, -1, -1]


@pytest.mark.parametrize("make,error,match", [
    (lambda: (LoDTensor(np.zeros(4), [[0, 4]]), [1], [3], [1]), LodShapeError, "4 values"),
    (lambda: (LoDTensor(np.zeros(4), [[0, 4]]), [1, 1], [2, 2], [1]), LodShapeError, "1 sequences"),
    (lambda: (LoDTensor(np.zeros((4, 2)), [[0, 4]]), [1], [4], [1]), LodShapeError, "each row must hold one value"),
    (lambda: (LoDTensor(np.zeros(4, np.complex64), [[0, 4]]), [1], [4], [1]), LodDtypeError, "complex"),
    (lambda: (LoDTensor(np.zeros(4), [[0, 4]]), [1], [4], []), LodUsageError, "topks"),
    (lambda: (LoDTensor(np.zeros(4), [[0, 4]]), [1], [4], [0]), LodUsageError, "topks"),
    (lambda: (LoDTensor(np.zeros(4), [[0, 4]]), LoDTensor(np.zeros(1)), [4], [1]), LodShapeError, "row has no LoD"),
])
@pytest.mark.parametrize("backend", BACKENDS)
def test_errors(make, error, match, backend):
    with pytest.raises(error, match=match):
        sequence_topk_avg_pooling(*make(), backend=backend)


def test_channel_num_must_be_positive():
    with pytest.raises(LodUsageError, match="channel_num"):
        sequence_topk_avg_pooling(LoDTensor(np.zeros(4), [[0, 4]]), [1], [4], [1], channel_num=0)


@st.composite
def topk_cases(draw):
    n = draw(st.integers(1, 4))
    channels = draw(st.integers(1, 3))
    rows = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    cols = draw(st.lists(st.integers(0, 5), min_size=n, max_size=n))
    sizes = [channels * r * c for r, c in zip(rows, cols)]
    dtype = draw(st.sampled_from(["float16", "float32", "float64", "int32", "uint8"]))
    values = draw(st.lists(st.integers(0, 6), min_size=sum(sizes), max_size=sum(sizes)))  # small: many ties
    data = np.array(values, dtype)
    if dtype.startswith("float") and data.size and draw(st.booleans()):
        data[draw(st.integers(0, data.size - 1))] = np.nan
    topks = sorted(set(draw(st.lists(st.integers(1, 6), min_size=1, max_size=3))))
    return LoDTensor(data, recursive_sequence_lengths=[sizes]), rows, cols, topks, channels


@OPS_SETTINGS
@given(topk_cases())
def test_kernel_matches_reference(case):
    x, rows, cols, topks, channels = case
    want, want_pos = sequence_topk_avg_pooling(x, rows, cols, topks, channels, return_pos=True, backend="numpy")
    got, got_pos = sequence_topk_avg_pooling(x, rows, cols, topks, channels, return_pos=True, backend="numba")
    assert same_bits(got.data, want.data) and got.lod == want.lod and same_bits(got_pos, want_pos)
