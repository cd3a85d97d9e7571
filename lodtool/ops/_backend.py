"""Which implementation runs an operator: the NumPy reference, a Numba kernel, or CUDA through CuPy.

CuPy comes from :mod:`lodtool._device` and Numba from :mod:`lodtool._jit`, both
imported lazily, so ``import lodtool.ops`` costs neither.  An operator asks
:func:`get_backend` once per call::

    be = get_backend((x.data, *x.offsets), backend, device)
    if be.name == "cupy":
        return cuda_expand(be.xp, ...)  # the op's CUDA launcher, with be.xp (CuPy) as the array module
    if be.name == "numpy":
        return _reference(...)
    ...  # be.name == "numba": call the kernels

* ``backend``: ``None``/``"auto"`` (the fastest available: Numba on the CPU),
  ``"numpy"`` (the plain reference) or ``"numba"``; both of the last two run on
  the CPU, so with ``device="cuda"`` leave it unset.
* Work-size tiers: with ``backend=None`` on the CPU, an operator passes its
  ``work`` (elements it reads or writes) and its :class:`Crossover`.  Below the
  crossover the NumPy reference runs and Numba is never imported: importing
  Numba and loading the cached kernels costs 0.7-3.5 s, which small work never
  wins back.  Once Numba is loaded in the process, the lower ``warm`` crossover
  applies; a process whose small calls add up to one first-call cost loads it
  (:func:`lodtool._jit.kernels_pay`).  :func:`lodtool._jit.kernels_pay` is the one rule; the constants sit beside each operator.
* ``device``: ``None`` (the GPU if any of the arrays lives there, else the CPU),
  ``"cpu"`` or ``"cuda"``.  A CUDA request without CuPy, or without a GPU, is a
  one-line :class:`~lodtool.errors.LodBackendError`.

Kernels are declared with :func:`lodtool._jit.kernel` (compiled on their first call).

>>> get_backend(None, "numpy").name
'numpy'
>>> get_backend(None, device="cuda")  # doctest: +SKIP
Traceback (most recent call last):
...
lodtool.errors.LodBackendError: device='cuda' needs CuPy: pip install 'lodtool[gpu]'
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from .._device import cupy_module, is_device_array
from .._jit import kernels_pay, numba_module
from ..errors import LodBackendError, LodUsageError

BACKENDS = ("auto", "numpy", "numba")
DEVICES = ("cpu", "cuda")


class Crossover(NamedTuple):
    """Work (elements) from which an operator's Numba kernel beats its NumPy reference, whole process.

    ``cold``: while Numba is not imported yet (the kernel must also pay for the
    import and the loading of its cached code); ``warm``: once it is.  Measured
    as ``cold`` = (a fresh process's first kernel call - the reference's) / (the
    saving per element at 16M elements), halved towards Numba (more cores save
    more); ``warm`` = the smallest size from which the loaded kernel wins at
    every size measured.  Each operator's figures: docs/benchmarks.md.
    """

    cold: int
    warm: int


class Backend(NamedTuple):
    """The implementation chosen for one call: ``name`` is ``numpy``, ``numba`` or ``cupy``."""

    name: str
    device: str
    xp: Any  #: the array module: numpy, or cupy on the GPU


def get_backend(data: Any = None, backend: str | None = None, device: str | None = None, *,
                work: int | None = None, crossover: Crossover | None = None) -> Backend:
    """Choose the implementation for an operator call on ``data`` (one array, or a tuple of them).

    With ``backend=None`` on the CPU, ``work`` below ``crossover`` (see the
    module notes) picks the NumPy reference without importing Numba.

    >>> get_backend(None, work=10_000, crossover=Crossover(cold=1 << 20, warm=1 << 16)).name
    'numpy'
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
        return Backend("cupy", "cuda", cupy_module())
    if on_gpu:
        raise LodBackendError("an input is on the GPU; pass device='cuda', or copy it to the host with .to('cpu')")
    if backend == "numpy" or (backend == "auto" and crossover is not None  # kernels_pay counts what it turns away
                              and not kernels_pay(work, crossover.cold, crossover.warm)):
        return Backend("numpy", "cpu", np)
    numba_module()
    return Backend("numba", "cpu", np)


__all__ = ["Backend", "BACKENDS", "Crossover", "DEVICES", "get_backend"]
