"""Which implementation runs an operator: the NumPy reference, a Numba kernel, or CUDA through CuPy.

This is the one module of lodtool that may import ``cupy`` (lazily), and the
one that imports ``numba`` (lazily too), so ``import lodtool.ops`` costs
neither.  An operator asks :func:`get_backend` once per call::

    be = get_backend((x.data, *x.offsets), backend, device, op="sequence_expand")
    if be.name == "cupy":
        return ...  # lodtool.ops._cuda, with be.xp (CuPy) as the array module
    if be.name == "numpy":
        return _reference(...)
    ...  # be.name == "numba": call the kernels

* ``backend``: ``None``/``"auto"`` (the fastest available: Numba on the CPU),
  ``"numpy"`` (the plain reference) or ``"numba"``; both of the last two run on
  the CPU, so with ``device="cuda"`` leave it unset.
* ``device``: ``None`` (the GPU if any of the arrays lives there, else the CPU),
  ``"cpu"`` or ``"cuda"``.  A CUDA request without CuPy, or without a GPU, is a
  one-line :class:`~lodtool.errors.LodBackendError`; so is one for an operator
  outside :data:`CUDA_OPS`.

Importing this module also gives :mod:`lodtool.tensor` its device helpers
(:func:`lodtool.tensor.set_device_hooks`): the core floor may import neither
CuPy nor the operators, so ``LoDTensor.to("cuda")`` and the validation of
device offsets come from here.

Kernels are declared with :func:`kernel`, which compiles them with
``numba.njit(cache=True, nogil=True)`` on their first call.  Inside a kernel,
``prange`` is ``numba.prange`` (import the placeholder from here), and other
kernels may be called by name.

>>> get_backend(None, "numpy").name
'numpy'
>>> get_backend(None, device="cuda")  # doctest: +SKIP
Traceback (most recent call last):
...
lodtool.errors.LodBackendError: device='cuda' needs CuPy: pip install 'lodtool[gpu]'
"""

from __future__ import annotations

import threading
import types
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from ..errors import LodBackendError, LodUsageError
from ..tensor import set_device_hooks

#: ``for i in prange(n)`` in a kernel: plain ``range`` until the kernel is compiled,
#: where :func:`kernel` swaps in ``numba.prange``.
prange = range

BACKENDS = ("auto", "numpy", "numba")
DEVICES = ("cpu", "cuda")

#: operators that have a CUDA implementation (in lodtool.ops._cuda)
CUDA_OPS: frozenset[str] = frozenset({
    "sequence_expand", "sequence_pool", "sequence_softmax", "sequence_pad", "sequence_unpad", "sequence_mask",
    "sequence_reverse", "pack_plan", "to_time_major", "from_time_major",
})

_numba_module = None
_numba_error: str | None = None
#: Numba's workqueue threading layer aborts the process on concurrent parallel
#: launches; parallel kernels therefore run one at a time (each already uses every core).
_PARALLEL_LOCK = threading.Lock()


def atomic_add(counter, value):
    """``old = counter[0]; counter[0] += value; return old``, atomically in a compiled kernel.

    Parallel kernels hand out blocks of work through it (dynamic scheduling):
    Numba's OpenMP layer splits a ``prange`` statically, so a thread that shares
    its core with another process would hold up the whole kernel; with blocks
    taken from a counter, the other threads take over its share.  This is the
    plain-Python stand-in (for ``NUMBA_DISABLE_JIT``); :func:`kernel` swaps in an
    LLVM ``atomicrmw add``.
    """
    old = counter[0]
    counter[0] += value
    return old


def _atomic_add_intrinsic():
    global _ATOMIC_ADD
    if _ATOMIC_ADD is None:
        numba_module()
        from numba import types
        from numba.extending import intrinsic

        @intrinsic
        def atomic_add_i64(typingctx, counter, value):
            if not (isinstance(counter, types.Array) and counter.dtype in (types.int64, types.uint64)):
                return None
            sig = counter.dtype(counter, counter.dtype)

            def codegen(context, builder, signature, args):
                ary = context.make_array(signature.args[0])(context, builder, args[0])
                return builder.atomic_rmw("add", ary.data, args[1], "monotonic")
            return sig, codegen

        _ATOMIC_ADD = atomic_add_i64
    return _ATOMIC_ADD


_ATOMIC_ADD = None


def workers() -> int:
    """Threads a parallel kernel runs on (Numba's current setting)."""
    return int(numba_module().get_num_threads())


def schedule(n: int, per_worker: int = 16) -> tuple[np.uint64, np.ndarray, int]:
    """``(nblocks, counter, nworkers)`` for a kernel that hands out ``n`` items in blocks.

    ``nblocks`` is a uint64 and ``counter`` a zeroed uint64 array of one, so the
    kernel's block and item indices are unsigned (see the kernel notes in expand.py).

    >>> nblocks, counter, nworkers = schedule(1000)
    >>> counter.tolist(), 1 <= int(nblocks) <= 1000
    ([0], True)
    """
    nworkers = workers()
    nblocks = max(1, min(int(n), nworkers * per_worker))
    return np.uint64(nblocks), np.zeros(1, np.uint64), nworkers


class Backend(NamedTuple):
    """The implementation chosen for one call: ``name`` is ``numpy``, ``numba`` or ``cupy``."""

    name: str
    device: str
    xp: Any  #: the array module: numpy, or cupy on the GPU


def numba_module():
    """Import Numba on first use; a clear :class:`LodBackendError` if it is missing."""
    global _numba_module, _numba_error
    if _numba_module is None:
        if _numba_error is not None:
            raise LodBackendError(_numba_error)
        try:
            import numba
        except Exception as exc:  # pragma: no cover - numba is a dependency
            _numba_error = f"backend='numba' needs Numba, which failed to import ({exc}); use backend='numpy'"
            raise LodBackendError(_numba_error) from None
        _numba_module = numba
    return _numba_module


_cupy_module = None


def cupy_module():
    """CuPy, imported on first use; a clear one-line :class:`LodBackendError` without CuPy or a GPU."""
    global _cupy_module
    if _cupy_module is None:
        try:
            import cupy  # noqa: TID251 (the only place lodtool imports cupy)
        except ModuleNotFoundError as exc:
            if exc.name == "cupy":
                raise LodBackendError("device='cuda' needs CuPy: pip install 'lodtool[gpu]'") from None
            raise LodBackendError(f"device='cuda' needs CuPy, which failed to import: {_one_line(exc)}") from None
        except Exception as exc:  # CuPy is there but broken (its CUDA libraries, say)
            raise LodBackendError(f"device='cuda' needs CuPy, which failed to import: {_one_line(exc)}") from None
        try:
            count = int(cupy.cuda.runtime.getDeviceCount())
        except Exception as exc:  # no driver: CuPy raises here, not at import
            raise LodBackendError(f"device='cuda' needs a CUDA GPU; CuPy finds none ({_one_line(exc)})") from None
        if count < 1:
            raise LodBackendError("device='cuda' needs a CUDA GPU; CuPy finds none")
        _cupy_module = cupy
    return _cupy_module


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def is_device_array(data: Any) -> bool:
    """True for GPU arrays (anything exposing ``__cuda_array_interface__``)."""
    return hasattr(data, "__cuda_array_interface__")


def get_backend(data: Any = None, backend: str | None = None, device: str | None = None, *,
                op: str = "this operator") -> Backend:
    """Choose the implementation for an operator call on ``data`` (one array, or a tuple of them).

    >>> get_backend(None).name
    'numba'
    >>> get_backend(None, "numpy").xp.__name__
    'numpy'
    """
    backend = "auto" if backend is None else backend
    if backend not in BACKENDS:
        raise LodUsageError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    arrays = data if isinstance(data, tuple) else (data,)
    on_gpu = any(is_device_array(a) for a in arrays)
    if device is None:
        device = "cuda" if on_gpu else "cpu"
    if device not in DEVICES:
        raise LodUsageError(f"unknown device {device!r}; choose cpu or cuda")
    if device == "cuda":
        if backend != "auto":
            raise LodUsageError(f"backend={backend!r} runs on the CPU; with device='cuda' leave backend unset")
        cp = cupy_module()
        if op not in CUDA_OPS:
            raise LodBackendError(f"{op} has no CUDA implementation; use device='cpu'")
        return Backend("cupy", "cuda", cp)
    if on_gpu:
        raise LodBackendError("an input is on the GPU; pass device='cuda', or copy it to the host with .to('cpu')")
    if backend == "numpy":
        return Backend("numpy", "cpu", np)
    numba_module()
    return Backend("numba", "cpu", np)


class _CudaHooks:
    """What :mod:`lodtool.tensor` needs for device arrays, on CuPy (see :func:`lodtool.tensor.set_device_hooks`)."""

    @staticmethod
    def upload(a):
        return cupy_module().asarray(a)

    @staticmethod
    def validate(levels, n_rows):
        from . import _cuda

        return _cuda.validate_offsets(cupy_module(), levels, n_rows)

    @staticmethod
    def lengths_to_offsets(lengths):
        from . import _cuda

        return _cuda.lengths_to_offsets(cupy_module(), lengths)


set_device_hooks(_CudaHooks)


class LazyKernel:
    """A Numba kernel compiled on its first call (``njit(cache=True, nogil=True, **options)``)."""

    def __init__(self, fn: Callable, options: dict):
        self.py_func = fn
        self.options = options
        self.parallel = bool(options.get("parallel"))
        self._dispatcher = None
        self._lock = threading.Lock()
        self.__name__ = fn.__name__
        self.__qualname__ = fn.__qualname__
        self.__doc__ = fn.__doc__
        self.__module__ = fn.__module__
        self.__wrapped__ = fn

    @property
    def dispatcher(self):
        """The compiled Numba dispatcher (compiles on first access)."""
        if self._dispatcher is None:
            with self._lock:
                if self._dispatcher is None:
                    self._dispatcher = self._compile()
        return self._dispatcher

    def _compile(self):
        numba = numba_module()
        fn = self.py_func
        glb = dict(fn.__globals__)
        glb["prange"] = numba.prange
        if "atomic_add" in fn.__code__.co_names and not numba.config.DISABLE_JIT:
            glb["atomic_add"] = _atomic_add_intrinsic()
        for name in fn.__code__.co_names:  # kernels calling kernels see their dispatchers
            value = glb.get(name)
            if isinstance(value, LazyKernel):
                glb[name] = value.dispatcher
        closure = fn.__closure__
        if closure:
            closure = tuple(types.CellType(c.cell_contents.dispatcher) if isinstance(c.cell_contents, LazyKernel)
                            else c for c in closure)
        func = types.FunctionType(fn.__code__, glb, fn.__name__, fn.__defaults__, closure)
        func.__qualname__ = fn.__qualname__
        func.__module__ = fn.__module__
        func.__doc__ = fn.__doc__
        return numba.njit(cache=True, nogil=True, **self.options)(func)

    def __call__(self, *args):
        dispatcher = self.dispatcher
        if self.parallel:
            with _PARALLEL_LOCK:
                return dispatcher(*args)
        return dispatcher(*args)

    def __repr__(self) -> str:
        state = "compiled" if self._dispatcher is not None else "not compiled yet"
        return f"<lodtool kernel {self.__qualname__} ({state})>"


def kernel(fn: Callable | None = None, **options):
    """Declare a Numba kernel, compiled lazily; ``@kernel`` or ``@kernel(parallel=True)``.

    >>> @kernel
    ... def _twice(a, out):
    ...     for i in range(a.shape[0]):
    ...         out[i] = 2 * a[i]
    >>> _twice  # doctest: +ELLIPSIS
    <lodtool kernel _twice (not compiled yet)>
    """
    if fn is None:
        return lambda f: LazyKernel(f, options)
    return LazyKernel(fn, options)


__all__ = ["Backend", "BACKENDS", "DEVICES", "CUDA_OPS", "get_backend", "kernel", "prange", "atomic_add",
           "schedule", "workers", "numba_module", "cupy_module", "is_device_array"]
