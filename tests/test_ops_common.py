"""Shared strategies for the operator tests, and tests of lodtool.ops' backend and helpers."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st

from lodtool import LoDTensor
from lodtool import _device, _jit, ops
from lodtool.errors import LodBackendError, LodDtypeError, LodShapeError, LodUsageError
from lodtool.ops import _backend
from lodtool._jit import prange
from lodtool.ops._util import as_words, cast_value, row_offsets
from tests.strategies import lod_lengths

#: examples per property test: modest by default, the long profile's count when it is loaded
EXAMPLES = 50 if settings.default.max_examples <= 100 else settings.default.max_examples
OPS_SETTINGS = settings(max_examples=EXAMPLES, deadline=None)

INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
FLOATS = ["float16", "float32", "float64"]
ALL_DTYPES = INTS + FLOATS + ["bool", "complex64", "complex128"]
ELEMENT_SHAPES = [(), (1,), (3,), (2, 2)]
BACKENDS = ["numpy", "numba"]


@st.composite
def arrays(draw, n_rows: int, dtypes=None, element_shapes=None, values: str = "bytes"):
    """``(n_rows, *element_shape)`` data: arbitrary bit patterns (``bytes``) or small integers (``small``)."""
    dtype = np.dtype(draw(st.sampled_from(dtypes or ALL_DTYPES)))
    shape = (n_rows,) + tuple(draw(st.sampled_from(element_shapes or ELEMENT_SHAPES)))
    size = int(np.prod(shape, dtype=np.int64))
    if dtype == np.bool_:
        raw = draw(st.lists(st.booleans(), min_size=size, max_size=size))
        return np.array(raw, dtype=bool).reshape(shape)
    if values == "bytes":
        raw = draw(st.binary(min_size=size * dtype.itemsize, max_size=size * dtype.itemsize))
        return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
    lo = 0 if dtype.kind in "ub" else -50
    raw = draw(st.lists(st.integers(lo, 100), min_size=size, max_size=size))
    return np.array(raw, dtype=np.int64).astype(dtype).reshape(shape)


@st.composite
def tensors(draw, min_levels: int = 1, max_levels: int = 3, dtypes=None, element_shapes=None,
            values: str = "bytes"):
    """A LoDTensor with empty sequences, sometimes 0 rows, 1-3 levels, any element shape and dtype."""
    table = draw(lod_lengths(min_levels, max_levels))
    if draw(st.integers(0, 9)) == 0:  # now and then, no rows at all
        table[-1] = [0] * len(table[-1])
    n_rows = sum(table[-1]) if table else draw(st.integers(0, 8))
    data = draw(arrays(n_rows, dtypes, element_shapes, values))
    return LoDTensor(data, recursive_sequence_lengths=table or None)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal dtype, shape and bytes (so NaN payloads and -0.0 count)."""
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def same_tensor(a: LoDTensor, b: LoDTensor) -> bool:
    return (a.lod_level == b.lod_level and all(np.array_equal(x, y) for x, y in zip(a.offsets, b.offsets))
            and same_bits(a.data, b.data))


# -- backend -------------------------------------------------------------------------------------

def test_import_is_cheap():
    code = "import sys, lodtool.ops; print('numba' in sys.modules, 'cupy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_get_backend_choices():
    assert _backend.get_backend(None).name == "numba"
    assert _backend.get_backend(None, "auto", "cpu").name == "numba"
    assert _backend.get_backend(None, "numpy").name == "numpy"
    with pytest.raises(LodUsageError, match="unknown backend"):
        _backend.get_backend(None, "fortran")
    with pytest.raises(LodUsageError, match="unknown device"):
        _backend.get_backend(None, device="tpu")


def _fake_cupy(count):
    """A module named cupy whose runtime reports ``count`` devices (or raises it, if an exception)."""
    def device_count():
        if isinstance(count, Exception):
            raise count
        return count
    module = type(sys)("cupy")
    module.cuda = type(sys)("cupy.cuda")
    module.cuda.runtime = type(sys)("cupy.cuda.runtime")
    module.cuda.runtime.getDeviceCount = device_count
    return module


@pytest.fixture
def no_cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # make "import cupy" fail
    monkeypatch.setattr(_device, "_cupy_module", None)  # forget a CuPy found earlier (on a GPU machine)


def test_cuda_without_cupy_is_a_clear_error(no_cupy):
    with pytest.raises(LodBackendError) as info:
        _backend.get_backend(None, device="cuda")
    assert "\n" not in str(info.value) and "CuPy" in str(info.value)


OPS_CALLS = {
    "sequence_expand": lambda x: ops.sequence_expand(x, x, device="cuda"),
    "sequence_pool": lambda x: ops.sequence_pool(x, device="cuda"),
    "sequence_first_step": lambda x: ops.sequence_first_step(x, device="cuda"),
    "sequence_last_step": lambda x: ops.sequence_last_step(x, device="cuda"),
    "sequence_softmax": lambda x: ops.sequence_softmax(x, device="cuda"),
    "sequence_pad": lambda x: ops.sequence_pad(x, device="cuda"),
    "sequence_unpad": lambda x: ops.sequence_unpad(np.zeros((2, 3)), [1, 2], device="cuda"),
    "sequence_mask": lambda x: ops.sequence_mask([1, 2], device="cuda"),
    "sequence_reverse": lambda x: ops.sequence_reverse(x, device="cuda"),
    "pack_plan": lambda x: ops.pack_plan(x, device="cuda"),
    "to_time_major": lambda x: ops.to_time_major(x, ops.pack_plan(x), device="cuda"),
    "from_time_major": lambda x: ops.from_time_major(x.data, ops.pack_plan(x), device="cuda"),
    "LoDTensor.to": lambda x: x.to("cuda"),
    "sequence_concat": lambda x: ops.sequence_concat([x, x], device="cuda"),
    "sequence_slice": lambda x: ops.sequence_slice(x, [0, 0], [1, 1], device="cuda"),
    "sequence_expand_as": lambda x: ops.sequence_expand_as(np.zeros(2), x, device="cuda"),
    "lod_reset": lambda x: ops.lod_reset(x, target_lod=[0, 5], device="cuda"),
    "lod_append": lambda x: ops.lod_append(np.arange(2), [0, 1, 2], device="cuda"),
    "sequence_erase": lambda x: ops.sequence_erase(LoDTensor(np.arange(5), x.offsets), [1], device="cuda"),
    "sequence_enumerate": lambda x: ops.sequence_enumerate(x, 2, device="cuda"),
    "sequence_reshape": lambda x: ops.sequence_reshape(x, 1, device="cuda"),
}
OPS_CALLS.update({
    "sequence_scatter": lambda x: ops.sequence_scatter(np.zeros((2, 3)), LoDTensor(np.array([0, 1]), [[0, 1, 2]]),
                                                       [1.0, 2.0], device="cuda"),
    "sequence_conv": lambda x: ops.sequence_conv(x, np.ones((3, 1)), device="cuda"),
    "sequence_topk_avg_pooling": lambda x: ops.sequence_topk_avg_pooling(x, [1, 1], [2, 3], [1], device="cuda"),
    "im2sequence": lambda x: ops.im2sequence(np.zeros((1, 1, 2, 2)), (1, 1), device="cuda"),
    "lod_tensor_to_array": lambda x: ops.lod_tensor_to_array(x, ops.pack_plan(x), device="cuda"),
    "array_to_lod_tensor": lambda x: ops.array_to_lod_tensor(ops.lod_tensor_to_array(x, ops.pack_plan(x)),
                                                             ops.pack_plan(x), device="cuda"),
    "reorder_lod_tensor_by_rank": lambda x: ops.reorder_lod_tensor_by_rank(x, ops.pack_plan(x), device="cuda"),
    "shrink_memory": lambda x: ops.shrink_memory(x, 0, ops.pack_plan(x), device="cuda"),
})


@pytest.mark.parametrize("name", sorted(OPS_CALLS))
def test_every_operator_on_cuda_without_cupy_is_one_line(no_cupy, name):
    x = LoDTensor(np.arange(5.0), [[0, 2, 5]])
    with pytest.raises(LodBackendError) as info:
        OPS_CALLS[name](x)
    assert str(info.value) == "device='cuda' needs CuPy: pip install 'lodtool[gpu]'"


def test_every_operator_has_a_cuda_path():
    operators = {name for name in ops.__all__ if callable(getattr(ops, name)) and name not in
                 ("get_backend", "pool_dtypes", "softmax_dtype", "PackPlan")}
    assert operators == {name for name in OPS_CALLS if name != "LoDTensor.to"}


@pytest.mark.parametrize("count,match", [(0, "needs a CUDA GPU; CuPy finds none$"),
                                         (RuntimeError("cudaErrorNoDevice: no CUDA-capable device"),
                                          r"needs a CUDA GPU; CuPy finds none \(cudaErrorNoDevice")])
def test_cuda_with_cupy_but_no_gpu(monkeypatch, count, match):
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(count))
    monkeypatch.setattr(_device, "_cupy_module", None)
    with pytest.raises(LodBackendError, match=match):
        _backend.get_backend(None, device="cuda")


def test_cuda_with_cupy_but_no_kernel(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(1))
    monkeypatch.setattr(_device, "_cupy_module", None)
    assert _backend.get_backend(None, device="cuda").name == "cupy"


def test_cpu_backends_with_cuda_are_a_usage_error():
    with pytest.raises(LodUsageError, match="leave backend unset"):
        _backend.get_backend(None, "numba", "cuda")


def test_device_array_on_cpu_is_refused():
    class FakeGpuArray:
        __cuda_array_interface__ = {}

    with pytest.raises(LodBackendError, match="on the GPU"):
        _backend.get_backend(FakeGpuArray(), device="cpu")
    with pytest.raises(LodBackendError, match="on the GPU"):  # any of several arrays
        _backend.get_backend((np.zeros(2), FakeGpuArray()), device="cpu")


@_jit.kernel
def _inner(a, i):
    return a[i] * 2


@_jit.kernel(parallel=True)
def _outer(a, out):
    for i in prange(a.shape[0]):
        out[i] = _inner(a, i)


def test_lazy_kernel_compiles_on_first_call_and_sees_other_kernels():
    outer = _outer
    assert "not compiled" in repr(outer) or outer._dispatcher is not None
    a = np.arange(5.0)
    out = np.empty_like(a)
    outer(a, out)
    assert out.tolist() == [0.0, 2.0, 4.0, 6.0, 8.0]
    assert "compiled" in repr(outer) and "not" not in repr(outer)


# -- helpers -----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype,shape,word", [("float32", (16,), "uint64"), ("float32", (), "uint32"),
                                              ("int8", (3,), "uint8"), ("float16", (2,), "uint32"),
                                              ("complex128", (), "uint64"), ("bool", (4,), "uint32")])
def test_as_words_picks_the_widest_word(dtype, shape, word):
    words, k = as_words(np.zeros((3,) + shape, dtype))
    assert words.dtype == np.dtype(word)
    assert k * words.dtype.itemsize == np.dtype(dtype).itemsize * int(np.prod(shape, dtype=np.int64))


def test_as_words_respects_alignment():
    base = np.zeros(17, np.float32)
    words, k = as_words(base[1:].reshape(8, 2))  # 4-byte aligned only
    assert words.dtype == np.uint32 and k == 2


def test_cast_value():
    assert cast_value(-1, np.dtype(np.int8), "v").tolist() == -1
    assert np.isnan(cast_value(float("nan"), np.dtype(np.float32), "v"))
    assert cast_value([1, 2], np.dtype(np.int64), "v", (3, 2)).shape == (3, 2)
    for value, dtype in [(-1, "uint8"), (0.5, "int32"), (2, "bool"), (float("nan"), "int64"), (300, "int8"),
                         (1j, "float64")]:
        with pytest.raises(LodDtypeError):
            cast_value(value, np.dtype(dtype), "v")
    with pytest.raises(LodDtypeError):
        cast_value("x", np.dtype(np.float32), "v")
    with pytest.raises(LodShapeError):
        cast_value([1, 2, 3], np.dtype(np.float32), "v", (2,))


def test_row_offsets():
    lod = (np.array([0, 2, 3]), np.array([0, 1, 1, 4]), np.array([0, 2, 5, 5, 9, 9]))
    assert row_offsets(lod, 0).tolist() == [0, 2, 9]
    assert row_offsets(lod, 1).tolist() == [0, 2, 2, 9]
    assert row_offsets(lod, 2).tolist() == [0, 2, 5, 5, 9, 9]
