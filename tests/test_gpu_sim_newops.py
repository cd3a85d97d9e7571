"""The CUDA paths of concat, seq_slice, expand_as, lod_reset, erase, enumerate and reshape, under Numba's simulator.

As :mod:`tests.test_gpu_sim` does: the one test the ordinary run collects
starts a child pytest on this file with ``NUMBA_ENABLE_CUDASIM=1``; in the
child, "CuPy" is that module's :class:`~tests.test_gpu_sim.FakeCupy` (NumPy
arrays posing as device arrays, refusing to mix with host arrays), and the
kernel launches refuse host arrays beside device ones.  Each check runs an
operator on ``x.to("cuda")`` through the public function and compares it with
the NumPy reference: the same LoD, the same bytes, the same error class, and
every result on the device.
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
from lodtool.errors import LodError
from lodtool.ops import (
    lod_append,
    lod_reset,
    sequence_concat,
    sequence_enumerate,
    sequence_erase,
    sequence_expand_as,
    sequence_reshape,
    sequence_slice,
)
from tests import test_gpu_sim as sim  # in the child, this installs the CuPy stand-in
from tests.test_ops_common import INTS, tensors
from tests.test_ops_concat import concat_cases
from tests.test_ops_expand_as import expand_as_cases
from tests.test_ops_reshape import reshape_cases
from tests.test_ops_seq_slice import slice_cases

SIM = sim.SIM
ROOT = Path(__file__).resolve().parent.parent
sim_only = pytest.mark.skipif(not SIM, reason="runs in the simulator child (NUMBA_ENABLE_CUDASIM=1)")
SIM_SETTINGS = settings(max_examples=10, deadline=None)


@pytest.mark.skipif(SIM, reason="this is the child run")
def test_new_operators_under_the_simulator():
    if not sim._simulator_available():
        pytest.skip("numba's CUDA simulator is not importable (pip install numba-cuda, in lodtool[test])")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    env.pop("PYTEST_ADDOPTS", None)
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-o", "addopts=",
           str(Path(__file__).relative_to(ROOT))]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert " passed" in proc.stdout and " failed" not in proc.stdout


def same_outcome(want_fn, got_fn) -> None:
    """Both raise the same lodtool error, or both give the same tensor, the device one entirely on the device."""
    want, got = sim.outcome(want_fn), sim.outcome(got_fn)
    assert want[0] == got[0] and (want[0] == "ok" or want[1] == got[1]), (want, got)
    if want[0] == "ok":
        out = got[1]
        assert sim.all_on_device(out), out
        assert out.lod == want[1].lod
        assert sim.same_bits(want[1].data, out.to("cpu").data)


@sim_only
@SIM_SETTINGS
@given(concat_cases())
def test_sim_concat(xs):
    same_outcome(lambda: sequence_concat(xs, backend="numpy"), lambda: sequence_concat([x.to("cuda") for x in xs]))


@sim_only
@SIM_SETTINGS
@given(slice_cases(), st.booleans(), st.integers(-1, 1))
def test_sim_slice(case, offsets_on_device, nudge):
    x, offset, length = case
    length = [n + nudge if i == 0 else n for i, n in enumerate(length)]  # now and then, out of range
    xp = sim.FakeCupy()
    dev = (lambda a: xp.asarray(np.array(a, np.int64))) if offsets_on_device else (lambda a: a)
    same_outcome(lambda: sequence_slice(x, offset, length, backend="numpy"),
                 lambda: sequence_slice(x.to("cuda"), dev(offset), dev(length)))


@sim_only
@SIM_SETTINGS
@given(expand_as_cases())
def test_sim_expand_as(case):
    x, y = case
    y = LoDTensor(np.zeros(y.n_rows), [o for o in y.offsets])
    same_outcome(lambda: sequence_expand_as(x, y, backend="numpy"),
                 lambda: sequence_expand_as(LoDTensor(x).to("cuda"), y.to("cuda")))


@sim_only
@SIM_SETTINGS
@given(tensors(max_levels=2), st.lists(st.integers(0, 4), min_size=1, max_size=5), st.booleans())
def test_sim_lod_reset(x, lengths, append):
    total = sum(lengths)
    rows = x.n_rows
    lengths[-1] += rows - total if rows >= total else 0  # usually a level that fits
    target = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    same_outcome(lambda: lod_reset(x, target_lod=target.tolist(), append=append),
                 lambda: lod_reset(x.to("cuda"), target_lod=target.tolist(), append=append))
    same_outcome(lambda: lod_reset(x, target.astype(np.int32), append=append),
                 lambda: lod_reset(x.to("cuda"), sim.FakeCupy().asarray(target.astype(np.int32)), append=append))
    y = LoDTensor(np.zeros(rows), [target]) if target[-1] == rows else None
    if y is not None:
        same_outcome(lambda: lod_reset(x, y), lambda: lod_reset(x.to("cuda"), y.to("cuda")))
    if x.lod_level == 1 and int(x.offsets[0][-1]) == rows:
        per_row = np.arange(rows + 1, dtype=np.int64)
        same_outcome(lambda: lod_append(x, per_row), lambda: lod_append(x.to("cuda"), per_row))


@sim_only
@SIM_SETTINGS
@given(tensors(dtypes=INTS, element_shapes=[(), (1,)], values="small"), st.lists(st.integers(-5, 60), max_size=10))
def test_sim_erase(x, tokens):
    same_outcome(lambda: sequence_erase(x, tokens, backend="numpy"), lambda: sequence_erase(x.to("cuda"), tokens))


@sim_only
@SIM_SETTINGS
@given(tensors(element_shapes=[(), (1,)]), st.integers(1, 6), st.sampled_from([0, 1]))
def test_sim_enumerate(x, win_size, pad_value):
    same_outcome(lambda: sequence_enumerate(x, win_size, pad_value, backend="numpy"),
                 lambda: sequence_enumerate(x.to("cuda"), win_size, pad_value))


@sim_only
@SIM_SETTINGS
@given(reshape_cases())
def test_sim_reshape(case):
    x, new_dim = case
    same_outcome(lambda: sequence_reshape(x, new_dim, backend="numpy"),
                 lambda: sequence_reshape(x.to("cuda"), new_dim))


@sim_only
def test_sim_errors_match_the_host():
    x = LoDTensor(np.arange(5), [[0, 3, 5]])
    with pytest.raises(LodError, match="runs past its end"):
        sequence_slice(x.to("cuda"), [2, 0], [2, 1])
    with pytest.raises(LodError, match="appended level does not fit"):
        lod_append(x.to("cuda"), [0, 5])
    with pytest.raises(LodError, match="sequence 0 has 3 rows"):
        sequence_reshape(x.to("cuda"), 2)
