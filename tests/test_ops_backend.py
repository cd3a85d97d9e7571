"""Work-size tiers: small work runs the NumPy reference without importing Numba; results agree across the boundary."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lodtool import LoDTensor
from lodtool import ops
from lodtool.ops import _backend
from lodtool.ops._backend import Crossover, get_backend

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SMALL_RUN = r"""
import json, os, sys
import numpy as np
d = sys.argv[1]
rng = np.random.default_rng(0)
with open(os.path.join(d, "small.jsonl"), "w") as f:
    for _ in range(700):  # about 10k rows
        f.write(json.dumps([rng.integers(0, 1000, rng.integers(1, 30)).tolist() for _ in range(2)]) + "\n")
from lodtool import tasks
src, x = os.path.join(d, "small.jsonl"), os.path.join(d, "x.lod.h5")
tasks.pack([src], x)
with open(os.path.join(d, "flat.jsonl"), "w") as f:  # one level: what expand takes as x
    for _ in range(700):
        f.write(json.dumps(rng.integers(0, 1000, rng.integers(1, 5)).tolist()) + "\n")
one = os.path.join(d, "one.lod.h5")
tasks.pack([os.path.join(d, "flat.jsonl")], one)
out = lambda n: os.path.join(d, n)
tasks.pool(x, out("p.h5"), pool_type="max")
tasks.softmax(x, out("s.h5"))
tasks.reverse(x, out("r.h5"))
tasks.pad(x, out("p.npz"))
tasks.expand(one, x, out("e.h5"), ref_level=0)
tasks.unpad(out("p.npz"), out("u.h5"))
print(json.dumps(sorted(m for m in sys.modules if m == "numba" or m.startswith("numba."))))
"""


def test_small_runs_never_import_numba(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    run = subprocess.run([sys.executable, "-c", SMALL_RUN, str(tmp_path)], capture_output=True, text=True, env=env,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout.strip().splitlines()[-1]) == []


def test_the_cli_pack_and_pool_of_a_small_file_never_import_numba(tmp_path):
    src = tmp_path / "docs.jsonl"
    src.write_text("[[1, 2], [3]]\n[[4, 5, 6]]\n" * 500)
    probe = ("import runpy, sys; sys.argv = ['lodtool', '-q'] + sys.argv[1:]\n"
             "try:\n    runpy.run_module('lodtool', run_name='__main__')\n"
             "except SystemExit as e:\n    assert not e.code, e.code\n"
             "print('numba' in sys.modules)")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for args in (["pack", str(src), "-o", str(tmp_path / "d.h5")],
                 ["pool", str(tmp_path / "d.h5"), "--type", "sum", "-o", str(tmp_path / "p.h5")]):
        run = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, env=env,
                             timeout=300)
        assert run.returncode == 0, run.stderr
        assert run.stdout.strip().splitlines()[-1] == "False", args


def test_the_tier_rule():
    small, big = Crossover(cold=1 << 40, warm=1 << 40), Crossover(cold=0, warm=0)
    assert get_backend(None, work=10, crossover=small).name == "numpy"
    assert get_backend(None, work=10, crossover=big).name == "numba"
    assert get_backend(None, "numba", work=10, crossover=small).name == "numba"  # an explicit backend wins
    assert get_backend(None, work=None, crossover=small).name == "numba"  # unknown work: the kernels


POOL, SOFTMAX, REVERSE, PAD, EXPAND, PLAN = (importlib.import_module(f"lodtool.ops.{m}") for m in
                                             ("pool", "softmax", "reverse", "pad", "expand", "pack_plan"))
ALWAYS_NUMPY, ALWAYS_NUMBA = Crossover(cold=1 << 62, warm=1 << 62), Crossover(cold=0, warm=0)


def _both(monkeypatch, module, attr, call):
    """``call()`` with ``module.attr`` set so that backend=None takes the reference, then the kernel."""
    monkeypatch.setattr(module, attr, ALWAYS_NUMPY)
    below = call()
    monkeypatch.setattr(module, attr, ALWAYS_NUMBA)
    above = call()
    return below, above


def _equal(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")


lengths = st.lists(st.integers(0, 12), min_size=1, max_size=30)


@settings(max_examples=25, deadline=None)
@given(lens=lengths, dtype=st.sampled_from(["int64", "int32", "float32", "float64"]), width=st.sampled_from([1, 3]),
       pool_type=st.sampled_from(["sum", "average", "sqrt", "max", "min", "first", "last"]))
def test_pool_reverse_pad_expand_are_identical_across_the_tier_boundary(lens, dtype, width, pool_type):
    with pytest.MonkeyPatch.context() as m:
        n = sum(lens)
        data = np.random.default_rng(n).integers(-50, 50, (n, width)).astype(dtype)
        x = LoDTensor(data, recursive_sequence_lengths=[lens])
        a, b = _both(m, POOL, "NUMBA_FROM", lambda: ops.sequence_pool(x, pool_type))
        assert _equal(a.data, b.data) and a.lod == b.lod
        a, b = _both(m, REVERSE, "NUMBA_FROM", lambda: ops.sequence_reverse(x))
        assert _equal(a.data, b.data)
        (pa, la), (pb, lb) = _both(m, PAD, "PAD_NUMBA_FROM", lambda: ops.sequence_pad(x, pad_value=-1))
        assert _equal(pa, pb) and _equal(la, lb)
        a, b = _both(m, PAD, "UNPAD_NUMBA_FROM", lambda: ops.sequence_unpad(pa, la))
        assert _equal(a.data, b.data) and a.lod == b.lod
        if n:
            y = LoDTensor(np.zeros(len(lens) * 2), recursive_sequence_lengths=[[2] * len(lens)])
            a, b = _both(m, EXPAND, "NUMBA_FROM", lambda: ops.sequence_expand(x, y, ref_level=0))
            assert _equal(a.data, b.data) and a.lod == b.lod
        a, b = _both(m, PLAN, "NUMBA_FROM", lambda: ops.pack_plan(x))
        assert _equal(a.sorted_indices, b.sorted_indices) and _equal(a.batch_sizes, b.batch_sizes)


@settings(max_examples=20, deadline=None)
@given(lens=lengths, dtype=st.sampled_from(["float32", "float64"]))
def test_softmax_across_the_tier_boundary(lens, dtype):
    with pytest.MonkeyPatch.context() as m:
        n = sum(lens)
        x = LoDTensor(np.random.default_rng(n).normal(size=n).astype(dtype), recursive_sequence_lengths=[lens])
        a, b = _both(m, SOFTMAX, "NUMBA_FROM", lambda: ops.sequence_softmax(x))
        assert a.dtype == b.dtype and a.lod == b.lod
        # exp may differ in its last bits between NumPy and LLVM, and the sum and the division carry that on
        # (3-6 ulp seen under hypothesis): the tolerance of the kernel-vs-reference tests of test_ops_softmax
        tol = 1e-13 if dtype == "float64" else 1e-6
        np.testing.assert_allclose(a.data, b.data, rtol=tol, atol=tol)


def test_pack_is_identical_across_the_json_tier_boundary(tmp_path, monkeypatch):
    from lodtool.container import load
    from lodtool.io import json as json_io
    from lodtool.tasks import pack

    src = tmp_path / "docs.jsonl"
    rng = np.random.default_rng(4)
    lines = [json.dumps([rng.integers(-9, 10 ** 12, rng.integers(0, 9)).tolist() for _ in range(rng.integers(1, 4))])
             for _ in range(300)]
    src.write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(json_io, "FAST_FROM_BYTES", 1 << 62)
    pack([str(src)], str(tmp_path / "general.h5"))
    monkeypatch.setattr(json_io, "FAST_FROM_BYTES", 0)
    pack([str(src)], str(tmp_path / "fast.h5"))
    a, b = load(str(tmp_path / "general.h5")), load(str(tmp_path / "fast.h5"))
    assert _equal(a.data, b.data) and a.lod == b.lod


def test_a_large_run_loads_the_kernels_up_front(monkeypatch):
    from lodtool.tasks import _pipe

    loaded = []
    monkeypatch.setattr(_backend, "numba_module", lambda: loaded.append(True))
    _pipe.tier("cpu", 100, Crossover(cold=10, warm=10))
    assert loaded
    loaded.clear()
    _pipe.tier("cpu", 5, Crossover(cold=10, warm=10))
    assert not loaded


def test_a_small_pipe_on_stdin_takes_the_general_path_and_a_large_one_the_scanner(tmp_path):
    from lodtool.container import load
    from lodtool.io.json import FAST_FROM_BYTES

    probe = ("import runpy, sys; sys.argv = ['lodtool', '-q'] + sys.argv[1:]\n"
             "try:\n    runpy.run_module('lodtool', run_name='__main__')\n"
             "except SystemExit as e:\n    assert not e.code, e.code\n"
             "print('numba' in sys.modules)")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    line = b"[[1, 2, 300], [-4]]\n"
    for count, numba_expected in ((100, "False"), (FAST_FROM_BYTES // len(line) + 10, "True")):
        out = tmp_path / f"p{count}.h5"
        run = subprocess.run([sys.executable, "-c", probe, "pack", "-", "--format", "jsonl", "-o", str(out)],
                             input=line * count, capture_output=True, env=env, timeout=300)
        assert run.returncode == 0, run.stderr
        assert run.stdout.decode().strip().splitlines()[-1] == numba_expected
        got = load(str(out))
        assert got.n_rows == 4 * count and got.data[:4].tolist() == [1, 2, 300, -4]
    bad = subprocess.run([sys.executable, "-m", "lodtool", "pack", "-", "--format", "jsonl", "-o",
                          str(tmp_path / "bad.h5")], input=b"[[1]]\n[[2, x]]\n", capture_output=True, env=env,
                         timeout=300)
    assert bad.returncode == 1 and b"<stdin>:2:6:" in bad.stderr and not (tmp_path / "bad.h5").exists()
