"""sequence_erase: Paddle's documented example and unit-test cases, its rules, and kernel == reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lodtool import LoDTensor
from lodtool.errors import LodDtypeError, LodShapeError
from lodtool.ops import sequence_erase
from lodtool.ops.erase import erase_tokens
from tests.test_ops_common import BACKENDS, INTS, OPS_SETTINGS, same_tensor, tensors


@pytest.mark.parametrize("backend", BACKENDS)
def test_paddle_doc_example(backend):
    x = LoDTensor(np.array([2, 2, 6, 1, 3, 9, 6, 1, 0, 1], np.int64).reshape(10, 1), [[0, 3, 6, 10]])
    out = sequence_erase(x, [2, 3, 5], backend=backend)
    assert out.data.ravel().tolist() == [6, 1, 9, 6, 1, 0, 1] and out.lod == [[0, 1, 3, 7]]
    assert out.shape == (7, 1) and out.dtype == np.int64


def paddle_expected(in_seq, lod0, tokens):
    """Paddle's unit test's own reference (test/sequence/test_sequence_erase_op.py), restated."""
    out, new_lod0, start = [], [], 0
    for n in lod0:
        kept = [v for v in in_seq[start:start + n].ravel().tolist() if v not in tokens]
        out += kept
        new_lod0.append(len(kept))
        start += n
    return out, new_lod0


@pytest.mark.parametrize("dtype,lod,tokens", [
    ("int32", [[9, 4, 11, 6]], [2, 3, 5]),
    ("int32", [[1, 3], [9, 4, 11, 6]], [2, 3, 5]),
    ("int64", [[9, 4, 11, 6]], [2, 3, 5]),
    ("int64", [[0, 9, 0, 0, 10, 11, 0]], [2, 3, 5]),
    ("int32", [[9, 4, 11, 6]], []),
])
@pytest.mark.parametrize("backend", BACKENDS)
def test_paddle_unit_test_cases(dtype, lod, tokens, backend):
    in_seq = np.random.default_rng(3).integers(0, 10, (30, 1)).astype(dtype)
    out = sequence_erase(LoDTensor(in_seq, recursive_sequence_lengths=lod), tokens, backend=backend)
    data, new_lod0 = paddle_expected(in_seq, lod[-1], tokens)
    assert out.data.ravel().tolist() == data and out.recursive_sequence_lengths == lod[:-1] + [new_lod0]
    assert out.dtype == np.dtype(dtype)


@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_every_integer_dtype(dtype, backend):
    x = LoDTensor(np.array([0, 1, 2, 1, 127], dtype), [[0, 2, 5]])
    out = sequence_erase(x, [1, -1, 1000], backend=backend)  # -1 and 1000 match nothing in uint8
    assert out.data.tolist() == [0, 2, 127] and out.lod == [[0, 1, 3]] and out.dtype == np.dtype(dtype)


@pytest.mark.parametrize("backend", BACKENDS)
def test_everything_erased_and_zero_rows(backend):
    x = LoDTensor(np.array([4, 4, 4]), [[0, 1, 3]])
    out = sequence_erase(x, 4, backend=backend)
    assert out.shape == (0,) and out.lod == [[0, 0, 0]]
    out = sequence_erase(LoDTensor(np.zeros((0, 1), np.int32), [[0, 0]]), [1], backend=backend)
    assert out.shape == (0, 1) and out.lod == [[0, 0]]


@pytest.mark.parametrize("backend", BACKENDS)
def test_many_tokens_are_searched(backend):
    x = LoDTensor(np.arange(100, dtype=np.int16), [[0, 50, 100]])
    out = sequence_erase(x, list(range(0, 100, 3)), backend=backend)
    assert out.data.tolist() == [v for v in range(100) if v % 3] and out.lengths().tolist() == [33, 33]


@pytest.mark.parametrize("backend", BACKENDS)
def test_many_tokens_spread_out_are_binary_searched(backend):
    tokens = [-(2**40), 5, 7, 9, 11, 13, 15, 17, 19, 2**40]
    x = LoDTensor(np.arange(-5, 25, dtype=np.int64), [[0, 10, 30]])
    out = sequence_erase(x, tokens, backend=backend)
    assert out.data.tolist() == [v for v in range(-5, 25) if v not in tokens]


@pytest.mark.parametrize("backend", BACKENDS)
def test_few_tokens_far_apart_are_compared_in_turn(backend):
    tokens = [-(2**40), 3, 2**40]
    x = LoDTensor(np.array([3, -(2**40), 4, 2**40, 5], np.int64), [[0, 2, 5]])
    out = sequence_erase(x, tokens, backend=backend)
    assert out.data.tolist() == [4, 5] and out.lod == [[0, 0, 2]]


def test_tokens():
    assert erase_tokens([3, 1, 3, -5], np.uint16).tolist() == [1, 3]
    assert erase_tokens(np.array([2**63], np.uint64), np.uint64).tolist() == [2**63]
    assert erase_tokens([], np.int8).tolist() == []
    for bad in ([1.5], [True], ["a"]):
        with pytest.raises(LodDtypeError, match="tokens must be integers"):
            erase_tokens(bad, np.int32)


@pytest.mark.parametrize("backend", BACKENDS)
def test_errors(backend):
    with pytest.raises(LodDtypeError, match="integer token ids"):
        sequence_erase(LoDTensor(np.zeros(3), [[0, 3]]), [0], backend=backend)
    with pytest.raises(LodShapeError, match="one token id"):
        sequence_erase(LoDTensor(np.zeros((3, 2), np.int32), [[0, 3]]), [0], backend=backend)
    with pytest.raises(LodShapeError, match="no LoD"):
        sequence_erase(np.zeros(3, np.int32), [0], backend=backend)


@OPS_SETTINGS
@given(tensors(dtypes=INTS, element_shapes=[(), (1,)], values="small"),
       st.lists(st.integers(-60, 110), max_size=12))
def test_kernel_matches_reference(x, tokens):
    want = sequence_erase(x, tokens, backend="numpy")
    got = sequence_erase(x, tokens, backend="numba")
    assert same_tensor(got, want)
    off = x.offsets[-1]
    for i in range(len(off) - 1):
        kept = [v for v in x.data[off[i]:off[i + 1]].ravel().tolist() if v not in tokens]
        assert got.data[got.offsets[-1][i]:got.offsets[-1][i + 1]].ravel().tolist() == kept


@pytest.mark.parametrize("backend", BACKENDS)
def test_zero_sequences(backend):
    # offsets [0] (no sequences at all), the empty value Paddle's operators produce
    z = LoDTensor._trusted(np.zeros(0, np.int64), (np.zeros(1, np.int64),))
    out = sequence_erase(z, [1], backend=backend)
    assert out.lod == [[0]] and out.n_rows == 0
