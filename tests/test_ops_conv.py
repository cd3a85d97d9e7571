"""sequence_conv: against PaddlePaddle 3.3.1's outputs (committed goldens), its unit tests' reference, and kernel == reference."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lodtool import LoDTensor
from lodtool.errors import LodDtypeError, LodError, LodShapeError, LodUsageError
from lodtool.ops import sequence_conv
from tests.strategies import lod_lengths
from tests.test_ops_common import BACKENDS, OPS_SETTINGS, same_tensor

GOLDENS = Path(__file__).parent / "data" / "paddle_ops" / "conv_im2sequence.npz"


def paddle_cases():
    with np.load(GOLDENS) as z:
        count = len([k for k in z.files if k.startswith("conv_") and k.endswith("_out")])
        return [{name: z[f"conv_{i}_{name}"] for name in ("x", "lod", "filter", "attrs", "out")} for i in range(count)]


CASES = paddle_cases()


def test_goldens_are_there():
    assert len(CASES) >= 40  # Paddle's 4 unit-test cases and the random ones


@pytest.mark.parametrize("backend", BACKENDS)
def test_matches_paddle(backend):
    for i, case in enumerate(CASES):
        start, length = (int(v) for v in case["attrs"])
        x = LoDTensor(case["x"], [case["lod"]])
        out = sequence_conv(x, case["filter"], context_length=length, context_start=start, backend=backend)
        assert out.dtype == case["out"].dtype and out.lod == x.lod, i
        np.testing.assert_allclose(out.data, case["out"], rtol=2e-5, atol=2e-5, err_msg=f"case {i}")


def paddle_seqconv(x, lengths, filt, context_length, context_start):
    """test/sequence/test_sequence_conv.py's reference (padding_trainable=False), in its own terms."""
    t, m = x.shape
    col = np.zeros((t, context_length * m), x.dtype)
    offset = np.concatenate([[0], np.cumsum(lengths)])
    for i in range(len(offset) - 1):
        for j in range(context_length):
            in_begin, in_end = offset[i] + context_start + j, offset[i + 1] + context_start + j
            out_begin, out_end = offset[i], offset[i + 1]
            if in_begin < offset[i]:
                pad = min(offset[i] - in_begin, offset[i + 1] - offset[i])
                out_begin, in_begin = offset[i] + pad, offset[i]
            if in_end > offset[i + 1]:
                pad = min(in_end - offset[i + 1], offset[i + 1] - offset[i])
                in_end, out_end = offset[i + 1], offset[i + 1] - pad
            if in_end <= in_begin:
                continue
            col[out_begin:out_end, j * m:(j + 1) * m] += x[in_begin:in_end]
    return col @ filt


@pytest.mark.parametrize("lengths,start,length", [([4, 1, 3, 3], 0, 1), ([4, 1, 3, 3], -1, 3),
                                                  ([0, 4, 1, 0, 3, 3, 0], -1, 3), ([3, 2, 5, 1, 4, 2, 3, 3, 2], 2, 3),
                                                  ([1, 1], -4, 2), ([6], 5, 2)])
@pytest.mark.parametrize("backend", BACKENDS)
def test_paddle_unit_test_reference(lengths, start, length, backend):
    rng = np.random.default_rng(len(lengths))
    x = rng.uniform(0.1, 1, (sum(lengths), 5))
    filt = rng.uniform(0.1, 1, (length * 5, 8))
    out = sequence_conv(LoDTensor(x, recursive_sequence_lengths=[lengths]), filt, length, start, backend=backend)
    np.testing.assert_allclose(out.data, paddle_seqconv(x, lengths, filt, length, start), rtol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_defaults_centre_the_window(backend):
    x = LoDTensor(np.arange(1.0, 5.0), [[0, 4]])
    out = sequence_conv(x, np.array([[1.0], [10.0], [100.0]]), backend=backend)  # length 3, start -1
    assert out.data.ravel().tolist() == [210.0, 321.0, 432.0, 43.0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_upper_levels_are_kept_and_windows_stay_in_the_last_level(backend):
    x = LoDTensor(np.arange(1.0, 6.0)[:, None].astype(np.float16), recursive_sequence_lengths=[[1, 1], [2, 3]])
    out = sequence_conv(x, np.ones((2, 2)), context_start=0, backend=backend)
    assert out.dtype == np.float16 and out.lod == x.lod and out.shape == (5, 2)
    assert out.data[:, 0].tolist() == [3.0, 2.0, 7.0, 9.0, 5.0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_rows(backend):
    x = LoDTensor(np.zeros((0, 3), np.float32), [[0, 0, 0]])
    out = sequence_conv(x, np.ones((9, 4), np.float32), backend=backend)
    assert out.shape == (0, 4) and out.lod == [[0, 0, 0]]


@pytest.mark.parametrize("make,error,match", [
    (lambda: (LoDTensor(np.zeros((3, 2), np.int32), [[0, 3]]), np.ones((6, 1))), LodDtypeError, "float"),
    (lambda: (LoDTensor(np.zeros((3, 2)), [[0, 3]]), np.ones((5, 1))), LodShapeError, "multiple"),
    (lambda: (LoDTensor(np.zeros((3, 2)), [[0, 3]]), np.ones(6)), LodShapeError, "2-D"),
    (lambda: (np.zeros((3, 2)), np.ones((6, 1))), LodShapeError, "no LoD"),
])
@pytest.mark.parametrize("backend", BACKENDS)
def test_errors(make, error, match, backend):
    with pytest.raises(error, match=match):
        sequence_conv(*make(), backend=backend)


def test_window_errors():
    x = LoDTensor(np.zeros((3, 2)), [[0, 3]])
    with pytest.raises(LodShapeError, match="context_length 2"):
        sequence_conv(x, np.ones((6, 1)), context_length=2)
    with pytest.raises(LodUsageError, match="at least 1"):
        sequence_conv(x, np.ones((0, 1)), context_length=0)
    with pytest.raises(LodUsageError, match="integer"):
        sequence_conv(x, np.ones((6, 1)), context_start=0.5)
    with pytest.raises(LodError):
        sequence_conv(x, np.ones((6, 1)), context_length=True)


@st.composite
def conv_cases(draw):
    table = draw(lod_lengths(1, 2, max_len=7))
    width = draw(st.integers(1, 4))
    dtype = draw(st.sampled_from(["float16", "float32", "float64"]))
    rows = sum(table[-1])
    raw = draw(st.lists(st.integers(-20, 20), min_size=rows * width, max_size=rows * width))
    x = LoDTensor(np.array(raw, dtype).reshape(rows, width), recursive_sequence_lengths=table)
    length = draw(st.integers(1, 5))
    start = draw(st.integers(-length - 2, 3))
    filt = np.array(draw(st.lists(st.integers(-3, 3), min_size=length * width * 2, max_size=length * width * 2)),
                    dtype).reshape(length * width, 2)
    return x, filt, length, start


@OPS_SETTINGS
@given(conv_cases())
def test_kernel_matches_reference(case):
    x, filt, length, start = case
    want = sequence_conv(x, filt, length, start, backend="numpy")
    got = sequence_conv(x, filt, length, start, backend="numba")
    assert same_tensor(got, want)  # the same windows, then the same matrix product
