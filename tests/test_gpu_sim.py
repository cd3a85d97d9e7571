"""The CUDA kernels of lodtool.ops._cuda, run by Numba's CUDA simulator on small inputs (no GPU needed).

The simulator must be switched on before Numba is imported, so the one test
the ordinary run collects (:func:`test_kernels_under_the_simulator`) starts a
child pytest on this file with ``NUMBA_ENABLE_CUDASIM=1``; in that child the
other tests run, with ``xp = numpy``.  The ``check_*`` functions compare one
CUDA operator with lodtool's NumPy reference; ``tests/test_gpu.py`` runs the
same checks with CuPy on a real GPU.

The ``check_op_*`` functions test the public path instead: ``x.to("cuda")``,
then ``lodtool.ops.<op>`` (the backend picks the CUDA kernels), results on the
device.  In the child, "CuPy" is :class:`FakeCupy`: NumPy arrays posing as
device arrays (:class:`DeviceArray`), which refuse to mix with host arrays
as CuPy's do, so the dispatch, the device validation and the
``LoDTensor.to`` round trips run without a GPU.
"""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lodtool import LoDTensor
from lodtool.errors import LodError
from lodtool.lod import lod_from_lengths, validate_lod
from lodtool.ops import (array_to_lod_tensor, from_time_major, lod_tensor_to_array, pack_plan, sequence_expand,
                         sequence_mask, sequence_pad, sequence_pool, sequence_reverse, sequence_softmax, sequence_unpad,
                         to_time_major)
from lodtool import _device
from lodtool.ops import _cuda
from lodtool.ops.expand import cuda_expand
from lodtool.ops.pack_plan import cuda_from_time_major, cuda_pack_plan, cuda_to_time_major
from lodtool.ops.pad import cuda_mask, cuda_pad, cuda_unpad
from lodtool.ops.pool import cuda_pool
from lodtool.ops.reverse import cuda_reverse
from lodtool.ops.softmax import cuda_softmax
from lodtool.ops._util import row_offsets
from tests.strategies import lod_lengths
from tests.test_ops_common import arrays, same_bits, same_tensor, tensors

SIM = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
ROOT = Path(__file__).resolve().parent.parent

#: relative tolerance of float reductions per output dtype (the kernels' documented bounds)
RTOL = {np.dtype(np.float16): 2e-3, np.dtype(np.float32): 2e-6, np.dtype(np.float64): 1e-13}
REAL = ["int8", "int32", "int64", "uint8", "uint64", "float16", "float32", "float64", "bool"]
POOL_TYPES = ["sum", "average", "sqrt", "max", "min", "first", "last"]


# -- the checks (xp: the array module the kernels run on) ---------------------------------------

def host(a):
    return _cuda.to_host(a)


def outcome(fn):
    """``("ok", value)`` or ``("error", class name)`` for the lodtool error ``fn`` raises."""
    try:
        return "ok", fn()
    except LodError as exc:
        return "error", type(exc).__name__


def check_expand(xp, x: LoDTensor, reps: list[int]) -> None:
    ref = np.concatenate([[0], np.cumsum(reps)]).astype(np.int64)
    y = LoDTensor._trusted(np.zeros(int(ref[-1])), (ref,))
    want = outcome(lambda: sequence_expand(x, y, backend="numpy"))
    got = outcome(lambda: cuda_expand(xp, xp.asarray(x.data), x.offsets[0] if x.lod_level else None, ref))
    assert want[0] == got[0], (want, got)
    if want[0] == "error":
        assert want[1] == got[1]
        return
    out, off = got[1]
    assert same_bits(want[1].data, host(out))
    if x.lod_level:
        assert host(off).tolist() == want[1].lod[0]
    else:
        assert off is None


def close(want: np.ndarray, got: np.ndarray) -> bool:
    if want.dtype != got.dtype or want.shape != got.shape:
        return False
    if want.dtype.kind != "f":
        return np.array_equal(want, got)
    return np.allclose(got, want, rtol=RTOL[want.dtype], atol=0, equal_nan=True)


def check_pool(xp, x: LoDTensor, pool_type: str, pad_value) -> None:
    want = outcome(lambda: sequence_pool(x, pool_type, pad_value, backend="numpy").data)
    got = outcome(lambda: host(cuda_pool(xp, xp.asarray(x.data), x.offsets[-1], pool_type, pad_value)))
    assert want[0] == got[0] and (want[0] == "ok" or want[1] == got[1]), (want, got)
    if want[0] == "ok":
        if pool_type in ("first", "last"):
            assert same_bits(want[1], got[1])
        else:
            assert close(want[1], got[1]), (want[1], got[1])


def check_softmax(xp, x: LoDTensor) -> None:
    want = outcome(lambda: sequence_softmax(x, backend="numpy").data)
    got = outcome(lambda: host(cuda_softmax(xp, xp.asarray(x.data), x.offsets[-1])))
    assert want[0] == got[0] and (want[0] == "ok" or want[1] == got[1]), (want, got)
    if want[0] == "ok":
        assert close(want[1], got[1]), (want[1], got[1])


def check_pad_unpad(xp, x: LoDTensor, level: int, extra: int, pad_value) -> None:
    lvl = level % x.lod_level
    roff = row_offsets(x.offsets, lvl)
    longest = int((roff[1:] - roff[:-1]).max())
    maxlen = None if extra < 0 else longest + extra
    want = outcome(lambda: sequence_pad(x, pad_value, maxlen, lvl, backend="numpy"))
    got = outcome(lambda: cuda_pad(xp, xp.asarray(x.data), roff, maxlen, pad_value))
    assert want[0] == got[0] and (want[0] == "ok" or want[1] == got[1]), (want, got)
    if want[0] == "error":
        return
    (wp, wl), (gp, gl) = want[1], got[1]
    assert same_bits(wp, host(gp)) and np.array_equal(wl, host(gl))
    back = sequence_unpad(wp, wl, backend="numpy")
    data, off = cuda_unpad(xp, gp, gl)
    assert same_bits(back.data, host(data)) and host(off).tolist() == back.lod[0]
    m = host(cuda_mask(xp, gl, maxlen, dtype="int32"))
    assert same_bits(sequence_mask(wl, maxlen, dtype="int32"), m)


def check_reverse(xp, x: LoDTensor) -> None:
    want = sequence_reverse(x, backend="numpy").data
    assert same_bits(want, host(cuda_reverse(xp, xp.asarray(x.data), x.offsets[-1])))


def check_pack(xp, x: LoDTensor, level: int) -> None:
    lvl = x.lod_level - 1  # the row-moving primitives: a step is a row at the last level
    plan = pack_plan(x, lvl, backend="numpy")
    lengths, s, u, b = cuda_pack_plan(xp, plan.row_offsets)
    assert np.array_equal(host(lengths), plan.lengths)
    assert np.array_equal(host(s), plan.sorted_indices) and np.array_equal(host(u), plan.unsorted_indices)
    assert np.array_equal(host(b), plan.batch_sizes)
    steps = cuda_to_time_major(xp, xp.asarray(x.data), plan.row_offsets, s, b)
    assert same_bits(to_time_major(x, plan, backend="numpy")[0], host(steps))
    back = cuda_from_time_major(xp, steps, plan.row_offsets, u, b)
    assert same_bits(np.asarray(x.data), host(back))


def check_validate(xp, levels: list[np.ndarray], n_rows: int) -> None:
    want = outcome(lambda: validate_lod(levels, n_rows))
    try:
        got = ("ok", _cuda.validate_offsets(xp, [xp.asarray(o) for o in levels], n_rows))
    except LodError as exc:
        got = ("error", str(exc))
    if want[0] == "ok":
        assert got[0] == "ok", got
        assert all(np.array_equal(host(a), b) for a, b in zip(got[1], levels))
    else:
        try:
            validate_lod(levels, n_rows)
        except LodError as exc:
            assert got == ("error", str(exc))


# -- the public path: LoDTensor.to("cuda") and lodtool.ops.<op> on the device ---------------------

def on_device(a) -> bool:
    return hasattr(a, "__cuda_array_interface__")


def all_on_device(t: LoDTensor) -> bool:
    return t.device == "cuda" and all(on_device(o) for o in t.offsets)


def same_lod(a: LoDTensor, b: LoDTensor) -> bool:
    return a.lod == b.lod


def check_op_expand(x: LoDTensor, reps: list[int]) -> None:
    ref = np.concatenate([[0], np.cumsum(reps)]).astype(np.int64)
    y = LoDTensor(np.zeros(int(ref[-1])), [ref])
    want = outcome(lambda: sequence_expand(x, y, backend="numpy"))
    xd, yd = x.to("cuda"), y.to("cuda")
    got = outcome(lambda: sequence_expand(xd if x.lod_level else xd.data, yd))
    assert want[0] == got[0] and (want[0] == "ok" or want[1] == got[1]), (want, got)
    if want[0] == "ok":
        out = got[1]
        assert all_on_device(out) and same_lod(out, want[1])
        assert same_bits(want[1].data, out.to("cpu").data)


def check_op_pool(x: LoDTensor, pool_type: str, pad_value) -> None:
    want = outcome(lambda: sequence_pool(x, pool_type, pad_value, backend="numpy"))
    got = outcome(lambda: sequence_pool(x.to("cuda"), pool_type, pad_value))
    assert want[0] == got[0] and (want[0] == "ok" or want[1] == got[1]), (want, got)
    if want[0] == "ok":
        out = got[1]
        assert all_on_device(out) and same_lod(out, want[1])
        w, g = want[1].data, out.to("cpu").data
        assert same_bits(w, g) if pool_type in ("first", "last") else close(w, g), (w, g)


def check_op_softmax(x: LoDTensor) -> None:
    want = outcome(lambda: sequence_softmax(x, backend="numpy"))
    got = outcome(lambda: sequence_softmax(x.to("cuda")))
    assert want[0] == got[0] and (want[0] == "ok" or want[1] == got[1]), (want, got)
    if want[0] == "ok":
        assert all_on_device(got[1]) and same_lod(got[1], want[1])
        assert close(want[1].data, got[1].to("cpu").data)


def check_op_pad(x: LoDTensor, level: int, extra: int, pad_value) -> None:
    lvl = level % x.lod_level
    roff = row_offsets(x.offsets, lvl)
    maxlen = None if extra < 0 else int((roff[1:] - roff[:-1]).max()) + extra
    want = outcome(lambda: sequence_pad(x, pad_value, maxlen, level, backend="numpy"))
    got = outcome(lambda: sequence_pad(x.to("cuda"), pad_value, maxlen, level))
    assert want[0] == got[0] and (want[0] == "ok" or want[1] == got[1]), (want, got)
    if want[0] == "error":
        return
    (wp, wl), (gp, gl) = want[1], got[1]
    assert on_device(gp) and on_device(gl)
    assert same_bits(wp, host(gp)) and np.array_equal(wl, host(gl))
    back = sequence_unpad(gp, gl)
    assert all_on_device(back) and same_tensor(sequence_unpad(wp, wl, backend="numpy"), back.to("cpu"))
    mask = sequence_mask(gl, maxlen, dtype="int32")
    assert on_device(mask) and same_bits(sequence_mask(wl, maxlen, dtype="int32"), host(mask))


def check_op_reverse(x: LoDTensor) -> None:
    want = sequence_reverse(x, backend="numpy")
    got = sequence_reverse(x.to("cuda"))
    assert all_on_device(got) and same_tensor(want, got.to("cpu"))
    # host input, device="cuda": it runs there and stays there
    assert all_on_device(sequence_reverse(x, device="cuda"))


def check_op_pack(x: LoDTensor, level: int) -> None:
    level %= x.lod_level
    want = pack_plan(x, level, backend="numpy")
    xd = x.to("cuda")
    plan = pack_plan(xd, level)
    assert plan.device == "cuda" and on_device(plan.sorted_indices) and on_device(plan.batch_sizes)
    back_on_host = plan.to("cpu")
    for name in ("lengths", "sorted_indices", "unsorted_indices", "batch_sizes", "row_offsets"):
        assert np.array_equal(getattr(back_on_host, name), getattr(want, name)), name
    steps, batch_sizes = to_time_major(xd, plan)
    assert on_device(steps) and same_bits(to_time_major(x, want, backend="numpy")[0], host(steps))
    restored = from_time_major(steps, plan)
    assert all_on_device(restored) and same_tensor(x, restored.to("cpu"))
    if plan.num_steps:  # the per-step list form
        assert same_tensor(x, from_time_major(plan.split(steps), plan).to("cpu"))
        parts = lod_tensor_to_array(xd, plan)
        assert all(on_device(p.data) for p in parts)
        assert same_tensor(x, array_to_lod_tensor(parts, plan).to("cpu"))


def check_op_validation(levels: list[np.ndarray], n_rows: int) -> None:
    """LoDTensor(device data, device offsets) is checked on the device, with the host's verdict."""
    if n_rows < 0:
        return
    want = outcome(lambda: validate_lod(levels, n_rows))
    data = LoDTensor(np.zeros(n_rows, np.int8)).to("cuda").data
    try:
        got = ("ok", LoDTensor(data, [_device.cupy_module().asarray(o) for o in levels]))
    except LodError as exc:
        got = ("error", str(exc))
    if want[0] == "ok":
        assert got[0] == "ok" and all_on_device(got[1]) and got[1].lod == [o.tolist() for o in levels]
    else:
        try:
            validate_lod(levels, n_rows)
        except LodError as exc:
            assert got == ("error", str(exc))


# -- the CLI: every operator command with --device cuda gives what --device cpu gives ------------

SAMPLES = ROOT / "sample_data"


def cli_runs(tmp_path: Path, device: str) -> dict:
    """Each operator command on the sample data with ``--device``; what each wrote, read back."""
    import json as _json

    from click.testing import CliRunner

    from lodtool import load
    from lodtool.cli.main import cli

    def run(*args):
        result = CliRunner().invoke(cli, [str(a) for a in args])
        assert result.exit_code == 0, result.output
        return result

    d = tmp_path / device
    d.mkdir()
    run("pack", SAMPLES / "articles.json", "-o", d / "a.h5", "--dtype", "float32")
    run("pack", SAMPLES / "expand_x.json", "--lod-level", "1", "-o", d / "x.h5")
    run("pack", SAMPLES / "expand_y.json", "--lod-level", "2", "-o", d / "y.h5")
    dev = ("--device", device)
    out = {}
    for pool_type in ("sum", "average", "max", "last"):
        run("pool", d / "a.h5", "--type", pool_type, "-o", d / f"pool_{pool_type}.h5", *dev)
        out[f"pool {pool_type}"] = load(d / f"pool_{pool_type}.h5")
    for command in ("softmax", "reverse"):
        run(command, d / "a.h5", "-o", d / f"{command}.h5", *dev)
        out[command] = load(d / f"{command}.h5")
    run("expand", d / "x.h5", d / "y.h5", "--ref-level", "0", "-o", d / "expand.h5", *dev)
    out["expand"] = load(d / "expand.h5")
    run("pad", d / "a.h5", "--level", "0", "--maxlen", "12", "-o", d / "pad.npz", *dev)
    with np.load(d / "pad.npz") as arrays:
        out["pad"] = {name: arrays[name] for name in arrays.files}
    run("unpad", d / "pad.npz", "-o", d / "unpad.h5", *dev)
    out["unpad"] = load(d / "unpad.h5")
    out["pack-plan"] = _json.loads(run("pack-plan", d / "a.h5", "--level", "1", "--json", *dev).stdout)
    return out


def check_cli_devices(tmp_path: Path) -> None:
    cpu, cuda = cli_runs(tmp_path, "cpu"), cli_runs(tmp_path, "cuda")
    assert cpu.keys() == cuda.keys()
    for key, want in cpu.items():
        got = cuda[key]
        if isinstance(want, LoDTensor):
            assert got.device == "cpu" and want.lod == got.lod, key
            assert close(want.data, got.data) if key == "softmax" else same_bits(want.data, got.data), key
        elif key == "pad":
            assert want.keys() == got.keys() and all(same_bits(want[k], got[k]) for k in want), key
        else:
            assert want == got, key


@st.composite
def corrupt_lods(draw):
    """``(levels, n_rows)``: a valid LoD, or one with an offset or the row count nudged."""
    levels = lod_from_lengths(draw(lod_lengths(1, 3)))
    n_rows = int(levels[-1][-1])
    what = draw(st.sampled_from(["none", "offset", "rows", "drop"]))
    if what == "offset":
        k = draw(st.integers(0, len(levels) - 1))
        j = draw(st.integers(0, len(levels[k]) - 1))
        levels[k] = levels[k].copy()
        levels[k][j] += draw(st.sampled_from([-3, -1, 1, 2]))
    elif what == "rows":
        n_rows += draw(st.sampled_from([-1, 1]))
    elif what == "drop":
        k = draw(st.integers(0, len(levels) - 1))
        levels[k] = levels[k][: draw(st.integers(0, 1))]
    return levels, n_rows


@st.composite
def expand_cases(draw):
    """``(x, reps)``: x with 0 or 1 LoD level, one repeat count per row/sequence."""
    if draw(st.booleans()):
        x = draw(tensors(min_levels=1, max_levels=1))
    else:
        x = LoDTensor(draw(arrays(draw(st.integers(1, 8)))))
    count = x.num_sequences(0) if x.lod_level else x.n_rows
    reps = draw(st.lists(st.integers(0, 3), min_size=count, max_size=count))
    return x, reps


# -- a NumPy-backed stand-in for CuPy, for the simulator run --------------------------------------

class DeviceArray(np.ndarray):
    """A NumPy array posing as a CuPy one: ``__cuda_array_interface__``, ``.get()``, 0-d reductions.

    Like CuPy, it refuses host arrays in ufuncs and array functions, so code that
    mixes host and device arrays fails here as it would on a GPU.
    """

    @property
    def __cuda_array_interface__(self):
        iface = self.__array_interface__
        return {"shape": iface["shape"], "typestr": iface["typestr"], "data": iface["data"],
                "strides": iface["strides"], "version": 3}

    def get(self) -> np.ndarray:
        return np.array(self.view(np.ndarray), copy=True)

    def __array_ufunc__(self, ufunc, method, *inputs, out=None, **kwargs):
        if out is not None:
            kwargs["out"] = tuple(_device_only(o) for o in out)
        result = getattr(ufunc, method)(*(_device_only(a) for a in inputs), **kwargs)
        return out[0] if out is not None and len(out) == 1 else _as_device(result)

    def __array_function__(self, func, types_, args, kwargs):
        return _as_device(func(*_device_only(args), **{k: _device_only(v) for k, v in kwargs.items()}))


def _device_only(a):
    """Unwrap device arrays; a host array (not a scalar) here is the mix-up CuPy refuses."""
    if isinstance(a, DeviceArray):
        return a.view(np.ndarray)
    if isinstance(a, np.ndarray) and a.ndim:
        raise TypeError(f"a host array {a.shape} {a.dtype} given where CuPy needs a device array")
    if isinstance(a, (list, tuple)):
        return type(a)(_device_only(v) for v in a)
    return a


def _as_device(r):
    if isinstance(r, np.ndarray) and not isinstance(r, DeviceArray):
        return r.view(DeviceArray)
    if isinstance(r, np.generic):  # CuPy reductions give 0-d device arrays
        return np.asarray(r).view(DeviceArray)
    if isinstance(r, tuple):
        return tuple(_as_device(v) for v in r)
    return r


class FakeCupy(types.ModuleType):
    """``cupy`` for the simulator run: NumPy's functions on :class:`DeviceArray`.

    ``asarray``/``array`` upload (copy) host data; every other function takes
    device arrays only, as CuPy's do.
    """

    ndarray = DeviceArray
    __version__ = "0+numpy-stand-in"

    def __init__(self):
        super().__init__("cupy")
        self.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=lambda: 1))

    @staticmethod
    def asarray(a, dtype=None):
        if isinstance(a, DeviceArray) and (dtype is None or a.dtype == dtype):
            return a
        return np.array(a.view(np.ndarray) if isinstance(a, DeviceArray) else a, dtype=dtype).view(DeviceArray)

    array = asarray

    def __getattr__(self, name):
        value = getattr(np, name)
        if isinstance(value, type) or not callable(value):
            return value

        def call(*args, **kwargs):
            return _as_device(value(*_device_only(args), **{k: _device_only(v) for k, v in kwargs.items()}))
        return call


# -- the simulator run ----------------------------------------------------------------------------

def _simulator_available() -> bool:
    code = "from numba import cuda; from numba.cuda import simulator"
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True).returncode == 0


@pytest.mark.skipif(SIM, reason="this is the child run")
def test_kernels_under_the_simulator():
    if not _simulator_available():
        message = "numba's CUDA simulator is not importable (pip install '.[gpu-sim]')"
        if os.environ.get("LODTOOL_REQUIRE_GPU_SIM"):  # CI's simulator run: there a missing one is a broken install
            pytest.fail(message)
        pytest.skip(message)
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    env.pop("PYTEST_ADDOPTS", None)
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-o", "addopts=",
           str(Path(__file__).relative_to(ROOT))]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert " passed" in proc.stdout and " failed" not in proc.stdout


sim_only = pytest.mark.skipif(not SIM, reason="runs in the simulator child (NUMBA_ENABLE_CUDASIM=1)")
SIM_SETTINGS = settings(max_examples=12, deadline=None)

_launch = _cuda.launch


def _launch_device_arrays_only(xp, kern, blocks, *args):
    """A launch given a device array gets no host array beside it (none slipped through the public path)."""
    if any(isinstance(a, DeviceArray) for a in args):
        host = [a.shape for a in args if isinstance(a, np.ndarray) and not isinstance(a, DeviceArray)]
        assert not host, f"host arrays {host} reached {kern}"
    return _launch(xp, kern, blocks, *args)


if SIM:  # the child: "import cupy" finds the stand-in (only lodtool._device imports it)
    sys.modules["cupy"] = FakeCupy()
    _cuda.launch = _launch_device_arrays_only


@sim_only
def test_sim_is_on():
    assert _cuda.simulated()


@sim_only
@SIM_SETTINGS
@given(expand_cases())
def test_sim_expand(case):
    check_expand(np, *case)


@sim_only
@SIM_SETTINGS
@given(tensors(max_levels=2, dtypes=REAL, values="small"), st.sampled_from(POOL_TYPES), st.sampled_from([0, -1, 7]))
def test_sim_pool(x, pool_type, pad_value):
    check_pool(np, x, pool_type, pad_value)


@sim_only
@SIM_SETTINGS
@given(tensors(max_levels=2, dtypes=REAL, element_shapes=[(), (1,)], values="small"))
def test_sim_softmax(x):
    check_softmax(np, x)


@sim_only
@SIM_SETTINGS
@given(tensors(), st.integers(-3, 2), st.integers(-1, 2), st.sampled_from([0, 1]))
def test_sim_pad_unpad_mask(x, level, extra, pad_value):
    check_pad_unpad(np, x, level, extra, pad_value)


@sim_only
@SIM_SETTINGS
@given(tensors())
def test_sim_reverse(x):
    check_reverse(np, x)


@sim_only
@SIM_SETTINGS
@given(tensors(), st.integers(-3, 2))
def test_sim_pack(x, level):
    check_pack(np, x, level)


@sim_only
@settings(max_examples=30, deadline=None)
@given(corrupt_lods())
def test_sim_validate(case):
    check_validate(np, *case)


@sim_only
def test_sim_edge_cases():
    # a tile with more empty sequences than the staged window holds (the in-place search)
    lens = np.zeros(3 * _cuda.STAGE, np.int64)
    lens[::997] = 3
    x = LoDTensor(np.arange(int(lens.sum()), dtype=np.int16), recursive_sequence_lengths=[lens])
    check_reverse(np, x)
    check_pool(np, x, "last", -1)
    # several tiles; rows of 1 byte, 3 bytes and many words
    rng = np.random.default_rng(7)
    for shape, dtype in [((), np.bool_), ((3,), np.uint8), ((700,), np.float64)]:
        rows = 3000 if shape != (700,) else 40
        data = rng.integers(0, 100, (rows,) + shape).astype(dtype)
        check_expand(np, LoDTensor(data), rng.integers(0, 3, rows).tolist())
    x = LoDTensor(rng.random(5000).astype(np.float32), recursive_sequence_lengths=[[1000, 0, 4000]])
    check_pad_unpad(np, x, 0, 1, 0.5)
    check_softmax(np, x)
    # NaN rules of max/min: a NaN first row stays, later NaNs are skipped
    x = LoDTensor(np.array([np.nan, 1.0, 2.0, np.nan, 0.5], np.float32), recursive_sequence_lengths=[[2, 3]])
    for pool_type in ("max", "min", "sum"):
        check_pool(np, x, pool_type, 0)
    # offsets given on the "device", as lengths, and refused
    assert _cuda.lengths_to_offsets(np, [2, 0, 3]).tolist() == [0, 2, 2, 5]
    assert _cuda.offsets_to_lengths(np, np.array([0, 2, 2, 5])).tolist() == [2, 0, 3]
    with pytest.raises(LodError, match=r"length\[1\]=-1 is negative"):
        _cuda.lengths_to_offsets(np, [2, -1])
    with pytest.raises(LodError, match="must be integers"):
        _cuda.validate_offsets(np, [np.array([0.0, 1.0])], 1)
    with pytest.raises(LodError, match=r"lengths\[1\]=5 is longer"):
        cuda_unpad(np, np.zeros((2, 4)), [1, 5])
    with pytest.raises(LodError, match=r"lengths\[0\]=-1 is negative"):
        cuda_unpad(np, np.zeros((2, 4)), [-1, 2])
    out, off = cuda_expand(np, np.zeros(2), [0, 2], [0, 0])  # every sequence repeated 0 times: zero sequences
    assert host(out).shape == (0,) and host(off).tolist() == [0]


# -- the public path on the stand-in "device" -----------------------------------------------------

@sim_only
@SIM_SETTINGS
@given(expand_cases())
def test_sim_op_expand(case):
    check_op_expand(*case)


@sim_only
@SIM_SETTINGS
@given(tensors(max_levels=2, dtypes=REAL, values="small"), st.sampled_from(POOL_TYPES), st.sampled_from([0, -1, 7]))
def test_sim_op_pool(x, pool_type, pad_value):
    check_op_pool(x, pool_type, pad_value)


@sim_only
@SIM_SETTINGS
@given(tensors(max_levels=2, dtypes=REAL, element_shapes=[(), (1,)], values="small"))
def test_sim_op_softmax(x):
    check_op_softmax(x)


@sim_only
@SIM_SETTINGS
@given(tensors(), st.integers(-3, 2), st.integers(-1, 2), st.sampled_from([0, 1]))
def test_sim_op_pad_unpad_mask(x, level, extra, pad_value):
    check_op_pad(x, level, extra, pad_value)


@sim_only
@SIM_SETTINGS
@given(tensors())
def test_sim_op_reverse(x):
    check_op_reverse(x)


@sim_only
@SIM_SETTINGS
@given(tensors(), st.integers(-3, 2))
def test_sim_op_pack(x, level):
    check_op_pack(x, level)


@sim_only
@settings(max_examples=30, deadline=None)
@given(corrupt_lods())
def test_sim_op_validation(case):
    check_op_validation(*case)


@sim_only
def test_sim_cli_device_cuda_matches_cpu(tmp_path):
    check_cli_devices(tmp_path)
