"""The CUDA launchers of issue 17's operators (and sequence_pool's MaxIndex), under Numba's simulator.

As tests/test_gpu_sim.py (whose NumPy-backed stand-in for CuPy this reuses):
the one test of the ordinary run starts a child pytest on this file with
``NUMBA_ENABLE_CUDASIM=1``, where each operator runs on the stand-in "device"
(``device="cuda"``, or inputs moved there with ``.to("cuda")``) and must give
the NumPy reference's result, with its outputs left on the device.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lodtool import LoDTensor
from lodtool.errors import LodIndexError
from lodtool.ops import im2sequence, sequence_conv, sequence_pool, sequence_scatter, sequence_topk_avg_pooling
from tests import test_gpu_sim as sim
from tests.test_ops_common import same_bits, same_tensor, tensors
from tests.test_ops_conv import conv_cases
from tests.test_ops_im2sequence import image_cases
from tests.test_ops_scatter import scatter_cases
from tests.test_ops_topk_avg_pool import topk_cases

SIM = sim.SIM
ROOT = Path(__file__).resolve().parent.parent
sim_only = pytest.mark.skipif(not SIM, reason="runs in the simulator child (NUMBA_ENABLE_CUDASIM=1)")
SIM_SETTINGS = settings(max_examples=10, deadline=None)


@pytest.mark.skipif(SIM, reason="this is the child run")
def test_launchers_under_the_simulator():
    if not sim._simulator_available():
        pytest.skip("numba's CUDA simulator is not importable (pip install numba-cuda, in lodtool[test])")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    env.pop("PYTEST_ADDOPTS", None)
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-o", "addopts=",
           str(Path(__file__).relative_to(ROOT))]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert " passed" in proc.stdout and " failed" not in proc.stdout


@sim_only
@SIM_SETTINGS
@given(scatter_cases())
def test_sim_scatter(case):
    x, ids, updates = case
    want = sequence_scatter(x, ids, updates, backend="numpy")
    got = sequence_scatter(x, ids.to("cuda"), updates, device="cuda")
    assert sim.on_device(got.data) and same_tensor(want, got.to("cpu"))


@sim_only
def test_sim_scatter_checks_ids_on_the_device():
    with pytest.raises(LodIndexError, match=r"ids\[1\]=3 is outside"):
        sequence_scatter(np.zeros((2, 3)), LoDTensor(np.array([0, 3]), [[0, 1, 2]]).to("cuda"), [1.0, 1.0],
                         device="cuda")


@sim_only
@SIM_SETTINGS
@given(conv_cases())
def test_sim_conv(case):
    x, filt, length, start = case
    want = sequence_conv(x, filt, length, start, backend="numpy")
    got = sequence_conv(x.to("cuda"), filt, length, start)
    assert sim.all_on_device(got) and same_tensor(want, got.to("cpu"))  # the stand-in multiplies as NumPy does


@sim_only
@SIM_SETTINGS
@given(topk_cases())
def test_sim_topk_avg_pooling(case):
    x, rows, cols, topks, channels = case
    want, want_pos = sequence_topk_avg_pooling(x, rows, cols, topks, channels, return_pos=True, backend="numpy")
    got, pos = sequence_topk_avg_pooling(x.to("cuda"), rows, cols, topks, channels, return_pos=True)
    assert sim.all_on_device(got) and sim.on_device(pos)
    assert same_tensor(want, got.to("cpu")) and same_bits(want_pos, sim.host(pos))


@sim_only
@SIM_SETTINGS
@given(image_cases())
def test_sim_im2sequence(case):
    x, kernels, strides, paddings, real, out_stride = case
    want = sim.outcome(lambda: im2sequence(x, kernels, strides, paddings, real, out_stride, backend="numpy"))
    got = sim.outcome(lambda: im2sequence(x, kernels, strides, paddings, real, out_stride, device="cuda"))
    assert want[0] == got[0] and (want[0] == "ok" or want[1] == got[1]), (want, got)
    if want[0] == "ok":
        assert sim.all_on_device(got[1]) and same_tensor(want[1], got[1].to("cpu"))


@sim_only
@pytest.mark.parametrize("dtype", ["bool", "float16", "complex128", "int64"])
def test_sim_im2sequence_dtypes(dtype):
    x = (np.arange(2 * 2 * 4 * 3) % 5).astype(dtype).reshape(2, 2, 4, 3)
    want = im2sequence(x, (2, 2), (1, 2), (1, 0, 1, 1), backend="numpy")
    assert same_tensor(want, im2sequence(x, (2, 2), (1, 2), (1, 0, 1, 1), device="cuda").to("cpu"))


@sim_only
@SIM_SETTINGS
@given(tensors(max_levels=2, dtypes=["int8", "uint16", "int64", "float16", "float32", "float64", "bool"],
               values="small"), st.sampled_from(["max", "min"]))
def test_sim_max_index(x, pool_type):
    pad = 0.3 if x.dtype.kind == "f" else 1  # through float32 on float64, as on the CPU
    want, want_index = sequence_pool(x, pool_type, pad, return_index=True, backend="numpy")
    got, index = sequence_pool(x.to("cuda"), pool_type, pad, return_index=True)
    assert sim.all_on_device(got) and sim.on_device(index)
    assert same_tensor(want, got.to("cpu")) and same_bits(want_index, sim.host(index))
