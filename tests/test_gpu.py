"""The CUDA operators (lodtool.ops._cuda) on a real GPU with CuPy: each equals its CPU reference.

Skipped where CuPy or a CUDA device is missing (and in the simulator run).
The small random cases are the checks of ``tests/test_gpu_sim.py``: the
kernels directly (``check_*``) and the public path, ``LoDTensor.to("cuda")``
and ``lodtool.ops.<op>`` (``check_op_*``); the large ones cross many tiles and
compare with the Numba CPU kernels bit for bit.  Data movement must be
bit-identical; float reductions are held to ``RTOL`` (float16 2e-3, float32
2e-6, float64 1e-13, relative).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lodtool import LoDTensor
from lodtool.errors import LodShapeError, LodValidationError
from lodtool.lod import validate_lod
from lodtool.ops import sequence_expand, sequence_pad, sequence_pool, sequence_reverse, sequence_softmax
from lodtool.ops import _cuda
from lodtool.ops.expand import cuda_expand
from lodtool.ops.pad import cuda_pad
from lodtool.ops.pool import cuda_pool
from lodtool.ops.reverse import cuda_reverse
from lodtool.ops.softmax import cuda_softmax
from tests.test_gpu_sim import (POOL_TYPES, REAL, check_cli_devices, check_expand, check_op_expand, check_op_pack,
                                check_op_pad, check_op_pool, check_op_reverse, check_op_softmax,
                                check_op_validation, check_pack, check_pad_unpad, check_pool, check_reverse,
                                check_softmax, check_validate, close, corrupt_lods, expand_cases)
from tests.test_ops_common import same_bits, tensors

if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
    pytest.skip("the simulator run has no real GPU", allow_module_level=True)
cp = pytest.importorskip("cupy")
try:
    _DEVICES = cp.cuda.runtime.getDeviceCount()
except Exception:  # pragma: no cover - no driver
    _DEVICES = 0
if not _DEVICES:
    pytest.skip("no CUDA device", allow_module_level=True)

pytestmark = pytest.mark.gpu
GPU_SETTINGS = settings(max_examples=int(os.environ.get("LODTOOL_GPU_EXAMPLES", "100")), deadline=None)


@GPU_SETTINGS
@given(expand_cases())
def test_expand(case):
    check_expand(cp, *case)


@GPU_SETTINGS
@given(tensors(max_levels=2, dtypes=REAL, values="small"), st.sampled_from(POOL_TYPES), st.sampled_from([0, -1, 7]))
def test_pool(x, pool_type, pad_value):
    check_pool(cp, x, pool_type, pad_value)


@GPU_SETTINGS
@given(tensors(max_levels=2, dtypes=REAL, element_shapes=[(), (1,)], values="small"))
def test_softmax(x):
    check_softmax(cp, x)


@GPU_SETTINGS
@given(tensors(), st.integers(-3, 2), st.integers(-1, 2), st.sampled_from([0, 1]))
def test_pad_unpad_mask(x, level, extra, pad_value):
    check_pad_unpad(cp, x, level, extra, pad_value)


@GPU_SETTINGS
@given(tensors())
def test_reverse(x):
    check_reverse(cp, x)


@GPU_SETTINGS
@given(tensors(), st.integers(-3, 2))
def test_pack(x, level):
    check_pack(cp, x, level)


@settings(max_examples=300, deadline=None)
@given(corrupt_lods())
def test_validate(case):
    check_validate(cp, *case)


# -- the public path: x.to("cuda"), lodtool.ops.<op>, results on the device -----------------------

@GPU_SETTINGS
@given(expand_cases())
def test_op_expand(case):
    check_op_expand(*case)


@GPU_SETTINGS
@given(tensors(max_levels=2, dtypes=REAL, values="small"), st.sampled_from(POOL_TYPES), st.sampled_from([0, -1, 7]))
def test_op_pool(x, pool_type, pad_value):
    check_op_pool(x, pool_type, pad_value)


@GPU_SETTINGS
@given(tensors(max_levels=2, dtypes=REAL, element_shapes=[(), (1,)], values="small"))
def test_op_softmax(x):
    check_op_softmax(x)


@GPU_SETTINGS
@given(tensors(), st.integers(-3, 2), st.integers(-1, 2), st.sampled_from([0, 1]))
def test_op_pad_unpad_mask(x, level, extra, pad_value):
    check_op_pad(x, level, extra, pad_value)


@GPU_SETTINGS
@given(tensors())
def test_op_reverse(x):
    check_op_reverse(x)


@GPU_SETTINGS
@given(tensors(), st.integers(-3, 2))
def test_op_pack(x, level):
    check_op_pack(x, level)


@settings(max_examples=300, deadline=None)
@given(corrupt_lods())
def test_op_validation(case):
    check_op_validation(*case)


def test_public_results_are_cupy_arrays():
    x = LoDTensor(np.arange(6, dtype=np.float32), [[0, 2, 2, 6]]).to("cuda")
    assert isinstance(x.data, cp.ndarray) and isinstance(x.offsets[0], cp.ndarray) and x.device == "cuda"
    out = sequence_pool(x, "sum")
    assert isinstance(out.data, cp.ndarray) and out.to("cpu").data.tolist() == [1.0, 0.0, 14.0]
    with pytest.raises(LodValidationError, match="offset"):
        LoDTensor(x.data, [cp.asarray([0, 3, 2, 6])])


def test_cli_device_cuda_matches_cpu(tmp_path):
    check_cli_devices(tmp_path)


# -- large inputs: many tiles, both phase-1 paths, bit-identical to the Numba CPU kernels ---------

def _lengths(rng, n, hi, empty=0.1):
    lens = rng.integers(1, hi, n)
    lens[rng.random(n) < empty] = 0
    return lens


@pytest.mark.parametrize("shape,dtype", [((), np.float32), ((16,), np.float32), ((3,), np.uint8), ((5,), np.float64),
                                         ((), np.bool_), ((2, 3), np.int16)])
def test_large_movement_is_bit_identical(shape, dtype):
    rng = np.random.default_rng(1)
    lens = _lengths(rng, 200_000, 20)
    rows = int(lens.sum())
    data = rng.integers(0, 250, (rows,) + shape).astype(dtype)
    x = LoDTensor(data, recursive_sequence_lengths=[lens])
    d = cp.asarray(data)
    # expand, rows case and sequences case
    reps = rng.integers(0, 4, len(lens))
    y = LoDTensor(np.zeros(int(reps.sum())), recursive_sequence_lengths=[reps])
    out, _ = cuda_expand(cp, cp.asarray(data[:len(lens)]), None, y.offsets[0])
    assert same_bits(sequence_expand(data[:len(lens)], y, backend="numba").data, out.get())
    want = sequence_expand(x, y, backend="numba")
    out, off = cuda_expand(cp, d, x.offsets[0], y.offsets[0])
    assert same_bits(want.data, out.get()) and off.get().tolist() == want.lod[0]
    # pad (to the longest, and longer), reverse, first/last
    for maxlen in (None, 25):
        wp, wl = sequence_pad(x, 1, maxlen, backend="numba")
        gp, gl = cuda_pad(cp, d, x.offsets[0], maxlen, 1)
        assert same_bits(wp, gp.get()) and np.array_equal(wl, gl.get())
    assert same_bits(sequence_reverse(x, backend="numba").data, cuda_reverse(cp, d, x.offsets[0]).get())
    for kind in ("first", "last"):
        want = sequence_pool(x, kind, 1, backend="numba").data
        assert same_bits(want, cuda_pool(cp, d, x.offsets[0], kind, 1).get())


@pytest.mark.parametrize("width", [1, 16])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_large_pool_matches_the_numba_kernel(width, dtype):
    rng = np.random.default_rng(2)
    lens = _lengths(rng, 100_000, 40)
    data = (rng.standard_normal((int(lens.sum()), width)) * 100).astype(dtype)
    x = LoDTensor(data, recursive_sequence_lengths=[lens])
    for pool_type in ("sum", "average", "sqrt", "max", "min"):
        want = sequence_pool(x, pool_type, 0, backend="numba").data
        got = cuda_pool(cp, cp.asarray(data), x.offsets[0], pool_type, 0).get()
        # the same operations in the same order: the CPU kernel's bits
        assert same_bits(want, got), pool_type


def test_large_softmax():
    rng = np.random.default_rng(3)
    lens = _lengths(rng, 100_000, 40)
    for dtype in (np.float32, np.float64):
        data = (rng.standard_normal(int(lens.sum())) * 10).astype(dtype)
        x = LoDTensor(data, recursive_sequence_lengths=[lens])
        want = sequence_softmax(x, backend="numba").data
        assert close(want, cuda_softmax(cp, cp.asarray(data), x.offsets[0]).get())


def test_many_empty_sequences_in_one_tile():
    lens = np.zeros(50_000, np.int64)
    lens[::4999] = 7
    x = LoDTensor(np.arange(int(lens.sum()), dtype=np.float32), recursive_sequence_lengths=[lens])
    check_reverse(cp, x)
    check_pool(cp, x, "sum", -1)
    check_pad_unpad(cp, x, 0, 0, 0)


def test_validation_names_the_first_bad_offset():
    rng = np.random.default_rng(4)
    top = rng.integers(1, 8, 1_000_000)
    low = rng.integers(0, 4, int(top.sum()))
    levels = [np.concatenate([[0], np.cumsum(t)]) for t in (top, low)]
    n_rows = int(levels[1][-1])
    _cuda.validate_offsets(cp, [cp.asarray(o) for o in levels], n_rows)
    bad = levels[1].copy()
    bad[2_000_001] = bad[2_000_000] - 1
    bad[3_000_000] = -5
    with pytest.raises(LodValidationError) as err:
        _cuda.validate_offsets(cp, [cp.asarray(levels[0]), cp.asarray(bad)], n_rows)
    with pytest.raises(LodValidationError) as cpu:
        validate_lod([levels[0], bad], n_rows)
    assert str(err.value) == str(cpu.value) and "offset[2000001]" in str(err.value)
    check_validate(cp, levels, n_rows + 1)


def test_runs_on_cupys_current_stream():
    rng = np.random.default_rng(5)
    lens = _lengths(rng, 50_000, 20)
    data = rng.random((int(lens.sum()), 4)).astype(np.float32)
    x = LoDTensor(data, recursive_sequence_lengths=[lens])
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        d = cp.asarray(data)
        out = cuda_reverse(cp, d, x.offsets[0])
        padded, _ = cuda_pad(cp, out, x.offsets[0])
    stream.synchronize()
    assert same_bits(sequence_reverse(x, backend="numpy").data, out.get())
    assert same_bits(sequence_pad(LoDTensor(out.get(), [x.offsets[0]]), backend="numpy")[0], padded.get())


def test_outputs_are_device_arrays_and_errors_are_lodtool_errors():
    out, off = cuda_expand(cp, cp.arange(3.0), [0, 1, 3], cp.asarray([0, 2, 3]))
    assert isinstance(out, cp.ndarray) and isinstance(off, cp.ndarray)
    assert out.tolist() == [0.0, 0.0, 1.0, 2.0] and off.tolist() == [0, 1, 2, 4]
    with pytest.raises(LodShapeError):
        cuda_expand(cp, cp.arange(3.0), None, [0, 1, 2])
    with pytest.raises(LodValidationError, match="offset"):
        cuda_pad(cp, cp.arange(3.0), cp.asarray([0, 2, 1, 3]))
