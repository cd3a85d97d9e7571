"""Optional: lodtool's expand, pool, softmax and mask against PaddlePaddle itself (static graph).

Skipped unless ``paddle`` is importable.  PaddlePaddle is never a dependency;
to run this module, install it next to lodtool (checked with paddlepaddle 3.3.1)::

    python -m venv /tmp/paddlevenv && /tmp/paddlevenv/bin/pip install paddlepaddle pytest hypothesis numba
    PYTHONPATH=. /tmp/paddlevenv/bin/python -m pytest tests/test_ops_paddle.py

Cases Paddle crashes on or refuses (x without rows, fewer rows than sequences
in pool) are left out here; the other test modules pin lodtool's choices there.
``sequence_pad``, ``sequence_unpad`` and ``sequence_reverse`` are no longer
registered operators in Paddle 3.x, so they cannot be compared.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("FLAGS_enable_pir_api", "0")
os.environ.setdefault("GLOG_minloglevel", "3")
paddle = pytest.importorskip("paddle")

from lodtool import LoDTensor  # noqa: E402
from lodtool.ops import sequence_expand, sequence_mask, sequence_pool, sequence_softmax  # noqa: E402

CASES = 25
pytestmark = pytest.mark.filterwarnings("ignore:(?s).*deprecated")


@pytest.fixture(scope="module")
def pd():
    from paddle.base import core

    paddle.enable_static()
    place = paddle.CPUPlace()
    exe = paddle.static.Executor(place)

    class Runner:
        def tensor(self, arr, lod=None):
            t = core.LoDTensor()
            t.set(np.ascontiguousarray(arr), place)
            if lod:
                t.set_lod([list(map(int, o)) for o in lod])
            return t

        def run(self, build, feed):
            main, startup = paddle.static.Program(), paddle.static.Program()
            with paddle.static.program_guard(main, startup):
                outs = build()
            return exe.run(main, feed=feed, fetch_list=outs, return_numpy=False)

    yield Runner()
    paddle.disable_static()


def _lengths(rng, n, lo, hi):
    return rng.integers(lo, hi + 1, n).tolist()


def _offsets(lens):
    return np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_expand(pd, dtype):
    rng = np.random.default_rng(11)
    for case in range(CASES):
        width = int(rng.integers(1, 4))
        y_levels = int(rng.integers(1, 3))
        top = _lengths(rng, int(rng.integers(1, 6)), 1, 3)
        y_lens = [top] + ([_lengths(rng, sum(top), 0, 3)] if y_levels == 2 else [])
        ref_level = int(rng.integers(-1, y_levels))
        ref = _offsets(y_lens[ref_level])
        count = len(ref) - 1
        x_has_lod = bool(case % 2)
        x_lens = _lengths(rng, count, 1, 3) if x_has_lod else None
        rows = sum(x_lens) if x_has_lod else count
        if x_has_lod and ref[-1] == 0:
            continue
        x = (rng.standard_normal((rows, width)) * 10).astype(dtype)
        y_rows = sum(y_lens[-1])
        if y_rows == 0:
            continue
        x_lod = [_offsets(x_lens)] if x_has_lod else None
        y_lod = [_offsets(lens) for lens in y_lens]

        def build():
            xv = paddle.static.data("x", [-1, width], dtype, lod_level=1 if x_has_lod else 0)
            yv = paddle.static.data("y", [-1, 1], "float32", lod_level=y_levels)
            return [paddle.static.nn.sequence_expand(xv, yv, ref_level=ref_level)]

        got = pd.run(build, {"x": pd.tensor(x, x_lod), "y": pd.tensor(np.zeros((y_rows, 1), np.float32), y_lod)})[0]
        xt = LoDTensor(x, x_lod) if x_has_lod else x
        yt = LoDTensor(np.zeros(y_rows), y_lod)
        for backend in ("numpy", "numba"):
            ours = sequence_expand(xt, yt, ref_level=ref_level, backend=backend)
            assert np.array_equal(ours.data, np.array(got)), (case, backend)
            assert ours.lod == [list(o) for o in got.lod()], (case, backend)


@pytest.mark.parametrize("pool_type", ["sum", "average", "sqrt", "max", "first", "last"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_pool(pd, pool_type, dtype):
    rng = np.random.default_rng(12)
    for case in range(CASES):
        width = int(rng.integers(1, 4))
        levels = 1 + case % 2
        top = _lengths(rng, int(rng.integers(1, 6)), 1, 3)
        lens = [top] if levels == 1 else [top, _lengths(rng, sum(top), 0, 6)]
        if sum(lens[-1]) < len(lens[-1]):  # Paddle refuses fewer rows than sequences
            continue
        x = rng.standard_normal((sum(lens[-1]), width)).astype(dtype)
        lod = [_offsets(lv) for lv in lens]

        def build():
            xv = paddle.static.data("x", [-1, width], dtype, lod_level=levels)
            return [paddle.static.nn.sequence_pool(xv, pool_type, pad_value=-2.5)]

        got = pd.run(build, {"x": pd.tensor(x, lod)})[0]
        tol = 1e-6 if dtype == "float32" else 1e-14
        for backend in ("numpy", "numba"):
            ours = sequence_pool(LoDTensor(x, lod), pool_type, pad_value=-2.5, backend=backend)
            assert ours.dtype == np.dtype(dtype)
            np.testing.assert_allclose(ours.data, np.array(got), rtol=tol, atol=tol, err_msg=f"{case} {backend}")
            assert ours.lod == [list(o) for o in got.lod()]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_softmax(pd, dtype):
    rng = np.random.default_rng(13)
    for case in range(CASES):
        levels = 1 + case % 2
        top = _lengths(rng, int(rng.integers(1, 6)), 1, 3)
        lens = [top] if levels == 1 else [top, _lengths(rng, sum(top), 0, 6)]
        rows = sum(lens[-1])
        if rows == 0:
            continue
        x = (rng.standard_normal((rows, 1)) * 5).astype(dtype)
        lod = [_offsets(lv) for lv in lens]

        def build():
            return [paddle.static.nn.sequence_softmax(paddle.static.data("x", [-1, 1], dtype, lod_level=levels))]

        got = pd.run(build, {"x": pd.tensor(x, lod)})[0]
        tol = 1e-6 if dtype == "float32" else 1e-14
        for backend in ("numpy", "numba"):
            ours = sequence_softmax(LoDTensor(x, lod), backend=backend)
            np.testing.assert_allclose(ours.data, np.array(got), rtol=tol, atol=tol)
            assert ours.lod == [list(o) for o in got.lod()]


def test_mask(pd):
    lens = np.array([2, 0, 3, 5], np.int64)
    for maxlen in (None, 2, 7):
        def build():
            xv = paddle.static.data("x", [4], "int64")
            return [paddle.static.nn.sequence_lod.sequence_mask(xv, maxlen=maxlen, dtype="int64")]

        got = np.array(pd.run(build, {"x": lens})[0])
        assert np.array_equal(sequence_mask(lens, maxlen, dtype="int64"), got)
