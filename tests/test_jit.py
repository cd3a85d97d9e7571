"""lodtool._jit: kernels compile lazily, and other packages' Numba extensions load only for their own code."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import numpy as np
import pytest

from lodtool._jit import block_count, kernel, kernels_pay, parallel_blocks


@kernel
def _twice(a, out):  # pragma: no cover - compiled
    for i in range(a.shape[0]):
        out[i] = 2 * a[i]


def test_a_kernel_compiles_on_first_call_and_computes():
    out = np.empty(4, np.int64)
    _twice(np.arange(4), out)
    assert out.tolist() == [0, 2, 4, 6]
    assert "compiled" in repr(_twice) and "not" not in repr(_twice)


def test_tiers():
    assert kernels_pay(None, 10, 5) and kernels_pay(10 ** 9, 100, 10)


def _has_extension_entry_point() -> bool:
    return any(True for _ in importlib.metadata.entry_points(group="numba_extensions", name="init"))


@pytest.mark.skipif(not _has_extension_entry_point(), reason="no package here registers a Numba extension")
def test_extensions_are_deferred_until_someone_elses_code_compiles():
    ep = next(iter(importlib.metadata.entry_points(group="numba_extensions", name="init")))
    root = ep.module.split(".")[0]
    code = f"""
import sys, numpy as np
from lodtool.io._jsonfmt import encode_lines
assert encode_lines(np.arange(3), [np.array([0, 2, 3])], ()).tobytes() == b"[0,1]\\n[2]\\n"
print({root!r} in sys.modules)
import numba
@numba.njit
def f(x):
    return x + 1
assert f(1) == 2
print({root!r} in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True"]


def test_small_work_adds_up_to_the_first_call_cost(monkeypatch):
    import lodtool._jit as jit

    monkeypatch.setattr(jit, "numba_loaded", lambda: False)
    monkeypatch.setattr(jit, "_slow_spent", 0.0)
    answers = [kernels_pay(300, 1000, 10) for _ in range(4)]
    assert answers == [False, False, False, True]  # 300 + 300 + 300 turned away; the 4th call reaches 1,000
    assert kernels_pay(2000, 1000, 10) and not kernels_pay(9, 10 ** 9, 10 ** 9)
    monkeypatch.setattr(jit, "numba_loaded", lambda: True)
    assert kernels_pay(10, 10 ** 9, 10) and not kernels_pay(9, 10 ** 9, 10)


@pytest.mark.parametrize("name", ["LODTOOL_NUM_THREADS", "NUMBA_NUM_THREADS"])
def test_thread_limit_follows_the_environment(monkeypatch, name):
    from lodtool._jit import THREAD_LIMITS, thread_limit
    from lodtool.container import _deflate

    for other in THREAD_LIMITS:
        monkeypatch.delenv(other, raising=False)
    cores = thread_limit()
    monkeypatch.setenv(name, "1")
    assert thread_limit() == 1 and _deflate.workers() == 1
    monkeypatch.setenv(name, "100000")
    assert thread_limit() == cores  # never more than the cores this process may use
    monkeypatch.setenv(name, "zero")
    assert thread_limit() == cores  # not a positive integer: ignored


def test_omp_num_threads_is_not_read(monkeypatch):
    from lodtool._jit import THREAD_LIMITS, thread_limit

    for other in THREAD_LIMITS:
        monkeypatch.delenv(other, raising=False)
    cores = thread_limit()
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # what `import paddle` does to the process
    assert thread_limit() == cores


def test_a_single_thread_dask_worker_runs_lodtool_on_one_thread():
    distributed = pytest.importorskip("distributed")
    code = """
import os
from distributed import Client, LocalCluster

def probe():
    import numpy as np
    from lodtool import LoDTensor
    from lodtool._jit import thread_limit
    from lodtool.container import _deflate
    from lodtool.ops import sequence_pool
    sequence_pool(LoDTensor(np.arange(4.0), [[0, 4]]), backend="numba")
    import numba
    return thread_limit(), _deflate.workers(), numba.config.NUMBA_NUM_THREADS

if __name__ == "__main__":
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        with Client(cluster) as client:
            print(*client.submit(probe).result())
"""
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("NUMBA_NUM_THREADS", "LODTOOL_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-3:] == ["1", "1", "1"]


def test_one_thread_allowed_means_no_helper_threads(monkeypatch, tmp_path):
    import threading

    import lodtool
    from lodtool.tasks._pipe import read_ahead

    monkeypatch.setenv("LODTOOL_NUM_THREADS", "1")
    items = iter([1, 2, 3])
    assert read_ahead(items) is items
    before = threading.active_count()
    data = np.arange(3_000_000)
    lodtool.save(str(tmp_path / "one.lod.h5"), lodtool.LoDTensor(data, [[0, 1_000_000, 3_000_000]]))
    assert threading.active_count() == before  # the deflate encoders ran in this thread
    assert np.array_equal(lodtool.load(str(tmp_path / "one.lod.h5")).data, data)
    monkeypatch.setenv("LODTOOL_NUM_THREADS", "2")
    if lodtool._jit.thread_limit() > 1:
        assert list(read_ahead(iter([1, 2, 3]))) == [1, 2, 3]


@parallel_blocks
def _blocks_seen(lo, hi, blk, first, last, owner):  # pragma: no cover - compiled
    first[blk] = lo
    last[blk] = hi
    for i in range(lo, hi):
        owner[i] = blk


@pytest.mark.parametrize("n, options", [(0, {}), (1, {}), (1000, {}), (1000, {"per_worker": 1}), (10, {"nblocks": 4})])
def test_a_block_kernel_hands_every_item_to_exactly_one_block_in_order(n, options):
    nblocks = options.get("nblocks") or block_count(n, options.get("per_worker", 16))
    first, last = np.full(nblocks, -1, np.int64), np.full(nblocks, -1, np.int64)
    owner = np.full(n, -1, np.int64)
    _blocks_seen(n, first, last, owner, **options)
    assert first[0] == 0 and last[-1] == n and (first[1:] == last[:-1]).all() and (first <= last).all()
    assert (owner == np.repeat(np.arange(nblocks), last - first)).all()
    assert "compiled" in repr(_blocks_seen) and "not" not in repr(_blocks_seen)


_BLOCK_KERNELS = '''
import numpy as np
from lodtool._jit import parallel_blocks

@parallel_blocks
def scaled(lo, hi, blk, a, out):
    for i in range(lo, hi):
        out[i] = FACTOR * a[i]

@parallel_blocks
def shifted(lo, hi, blk, a, out):
    for i in range(lo, hi):
        out[i] = a[i] + 1
'''

_RUN_BLOCK_KERNELS = """
import sys, numpy as np
sys.path.insert(0, sys.argv[1])
import blockmod
a, out, out2 = np.arange(5), np.empty(5, np.int64), np.empty(5, np.int64)
blockmod.scaled(5, a, out)
blockmod.shifted(5, a, out2)
stats = [blockmod.scaled.dispatcher.stats, blockmod.shifted.dispatcher.stats]
print(out.tolist(), out2.tolist(), [sum(s.cache_hits.values()) for s in stats], [sum(s.cache_misses.values()) for s in stats])
"""


@pytest.mark.slow
def test_block_kernels_load_from_numbas_cache_in_a_new_process_and_a_changed_body_recompiles(tmp_path):
    import os

    module = tmp_path / "blockmod.py"

    def run() -> str:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
        out = subprocess.run([sys.executable, "-c", _RUN_BLOCK_KERNELS, str(tmp_path)], capture_output=True,
                             text=True, env=env, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        return out.stdout.strip()

    module.write_text(_BLOCK_KERNELS.replace("FACTOR", "2"))
    assert run() == "[0, 2, 4, 6, 8] [1, 2, 3, 4, 5] [0, 0] [1, 1]"  # compiled, and cached
    assert run() == "[0, 2, 4, 6, 8] [1, 2, 3, 4, 5] [1, 1] [0, 0]"  # each kernel its own cache entry: loaded
    module.write_text(_BLOCK_KERNELS.replace("FACTOR", "30"))  # another size: Python's and Numba's stamps both see it
    assert run() == "[0, 30, 60, 90, 120] [1, 2, 3, 4, 5] [0, 0] [1, 1]"  # the body's file changed: compiled again


def test_kernels_and_block_kernels_run_as_python_under_numba_disable_jit():
    code = """
import numpy as np
from lodtool import LoDTensor
from lodtool.ops import sequence_expand, sequence_reverse, sequence_softmax
x = LoDTensor(np.arange(5.0), [[0, 2, 5]])
y = LoDTensor(np.zeros(3), [[0, 2, 3]])
print(sequence_reverse(x, backend="numba").data.tolist(), sequence_expand(x, y, 0, backend="numba").lod,
      sequence_softmax(x, backend="numba").data.round(3).tolist())
"""
    env = {**__import__("os").environ, "NUMBA_DISABLE_JIT": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[0] == ("[1.0, 0.0, 4.0, 3.0, 2.0] [[0, 2, 4, 7]] "
                                         "[0.269, 0.731, 0.09, 0.245, 0.665]")
