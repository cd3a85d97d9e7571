"""im2sequence: against PaddlePaddle 3.3.1's outputs (committed goldens), its unit test's reference, and kernel == reference."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lodtool.errors import LodShapeError, LodUsageError
from lodtool.ops import im2sequence
from tests.test_ops_common import ALL_DTYPES, BACKENDS, OPS_SETTINGS, same_tensor

GOLDENS = Path(__file__).parent / "data" / "paddle_ops" / "conv_im2sequence.npz"


def paddle_cases():
    with np.load(GOLDENS) as z:
        count = len([k for k in z.files if k.startswith("im2seq_") and k.endswith("_out")])
        cases = []
        for i in range(count):
            case = {name: z[f"im2seq_{i}_{name}"] for name in ("x", "attrs", "out", "lod")}
            case["y"] = z[f"im2seq_{i}_y"] if f"im2seq_{i}_y" in z.files else None
            cases.append(case)
        return cases


CASES = paddle_cases()


def test_goldens_are_there():
    assert len(CASES) >= 30 and sum(c["y"] is not None for c in CASES) >= 10


@pytest.mark.parametrize("backend", BACKENDS)
def test_matches_paddle(backend):
    for i, case in enumerate(CASES):
        a = case["attrs"].tolist()
        out = im2sequence(case["x"], a[0:2], a[2:4], a[4:8], real_sizes=case["y"], out_stride=a[8:10],
                          backend=backend)
        assert out.lod == [case["lod"].tolist()], i
        assert out.dtype == np.float32 and np.array_equal(out.data, case["out"]), i  # values move: bit-exact


def paddle_im2col(attrs, im, col):
    """test/legacy_test/test_im2sequence_op.py's im2col, in its own terms."""
    channels, height, width = im.shape
    out_h, out_w, _, fh, fw = col.shape
    sh, sw = attrs["strides"]
    ph, pw = attrs["paddings"][0:2]
    for r in range(out_h):
        for q in range(out_w):
            for c in range(channels):
                for i in range(fh):
                    for j in range(fw):
                        y, x = r * sh + i - ph, q * sw + j - pw
                        col[r][q][c][i][j] = im[c][y][x] if 0 <= y < height and 0 <= x < width else 0.0


@pytest.mark.parametrize("shape,attrs", [
    ((1, 3, 4, 10), {"kernels": [2, 2], "strides": [1, 1], "paddings": [1, 1, 1, 1]}),
    ((2, 3, 4, 5), {"kernels": [2, 1], "strides": [2, 1], "paddings": [2, 1, 2, 1]}),
    ((6, 1, 4, 5), {"kernels": [2, 1], "strides": [2, 1], "paddings": [2, 0, 2, 0]}),
    ((6, 2, 3, 3), {"kernels": [2, 2], "strides": [1, 1], "paddings": [0, 0, 0, 0]}),
])
@pytest.mark.parametrize("backend", BACKENDS)
def test_paddle_unit_tests(shape, attrs, backend):
    x = np.random.default_rng(3).uniform(0.1, 1, shape).astype(np.float32)
    n, c, h, w = shape
    (kh, kw), (sh, sw), (up, left, down, right) = attrs["kernels"], attrs["strides"], attrs["paddings"]
    oh, ow = (h + up + down - kh) // sh + 1, (w + left + right - kw) // sw + 1
    want = []
    for img in x:
        col = np.zeros((oh, ow, c, kh, kw), np.float32)
        paddle_im2col(attrs, img, col)
        want.append(col.reshape(oh * ow, c * kh * kw))
    out = im2sequence(x, attrs["kernels"], attrs["strides"], attrs["paddings"], backend=backend)
    assert np.array_equal(out.data, np.concatenate(want))
    assert out.lod == [list(range(0, n * oh * ow + 1, oh * ow))]


@pytest.mark.parametrize("backend", BACKENDS)
def test_real_sizes(backend):
    x = np.arange(2 * 1 * 5 * 5, dtype=np.float32).reshape(2, 1, 5, 5)
    out = im2sequence(x, (2, 2), real_sizes=np.array([[3, 4], [5, 5]], np.float32), backend=backend)
    assert out.lod == [[0, 6, 22]] and out.data[:3].tolist() == [[0, 1, 5, 6], [1, 2, 6, 7], [2, 3, 7, 8]]
    # a batch of one image uses its real size too (Paddle ignores it there); a tiny one gives an empty sequence
    out = im2sequence(x[:1], (2, 2), real_sizes=[[3, 3]], backend=backend)
    assert out.lod == [[0, 4]]
    out = im2sequence(x, (2, 2), real_sizes=[[1, 5], [4, 4]], out_stride=(2, 2), backend=backend)
    assert out.lod == [[0, 0, 1]] and out.data.tolist() == [[0.0, 1.0, 5.0, 6.0]] * 0 + [[25.0, 26.0, 30.0, 31.0]]


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_every_dtype(dtype, backend):
    x = (np.arange(18) % 2).astype(dtype).reshape(1, 2, 3, 3)
    out = im2sequence(x, (2, 2), paddings=(1, 1), backend=backend)
    assert out.dtype == np.dtype(dtype) and out.shape == (16, 8)
    assert np.array_equal(out.data, im2sequence(x.astype(np.float64), (2, 2), paddings=(1, 1)).data.astype(dtype))


@pytest.mark.parametrize("kwargs,error,match", [
    ({"kernels": (4, 1)}, LodShapeError, "does not fit"),
    ({"kernels": (0, 1)}, LodUsageError, "kernels"),
    ({"kernels": (1, 1), "strides": (1,)}, LodUsageError, "strides"),
    ({"kernels": (1, 1), "paddings": (1, 1, 1)}, LodUsageError, "paddings"),
    ({"kernels": (1, 1), "paddings": (-1, 0)}, LodUsageError, "paddings"),
    ({"kernels": (1, 1), "real_sizes": [[1, 1]]}, LodShapeError, r"\(2, 2\)"),
    ({"kernels": (1, 1), "real_sizes": [[1, 1], [-3, 1]]}, LodShapeError, "negative"),
    ({"kernels": (1, 1), "real_sizes": [[1, 1], [1, 1]], "out_stride": (0, 1)}, LodUsageError, "out_stride"),
])
def test_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        im2sequence(np.zeros((2, 1, 3, 3)), **kwargs)
    with pytest.raises(LodShapeError, match=r"\(N, C, H, W\)"):
        im2sequence(np.zeros((3, 3)), (1, 1))


@st.composite
def image_cases(draw):
    n, c = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    h, w = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    dtype = draw(st.sampled_from(["uint8", "int32", "float32", "float64", "bool"]))
    x = (np.arange(n * c * h * w) * 7 % 11).astype(dtype).reshape(n, c, h, w)
    kernels = [draw(st.integers(1, 3)), draw(st.integers(1, 3))]
    strides = [draw(st.integers(1, 3)), draw(st.integers(1, 3))]
    paddings = [draw(st.integers(0, 2)) for _ in range(4)]
    real = None
    if draw(st.booleans()):
        real = np.array([[draw(st.integers(0, 2 * h + 2)), draw(st.integers(0, 2 * w + 2))] for _ in range(n)])
    return x, kernels, strides, paddings, real, [draw(st.integers(1, 3)), draw(st.integers(1, 3))]


@OPS_SETTINGS
@given(image_cases())
def test_kernel_matches_reference(case):
    x, kernels, strides, paddings, real, out_stride = case
    try:
        want = im2sequence(x, kernels, strides, paddings, real, out_stride, backend="numpy")
    except LodShapeError:
        with pytest.raises(LodShapeError):
            im2sequence(x, kernels, strides, paddings, real, out_stride, backend="numba")
        return
    got = im2sequence(x, kernels, strides, paddings, real, out_stride, backend="numba")
    assert same_tensor(got, want)
