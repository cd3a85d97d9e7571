"""The one place that knows about device (GPU) arrays: is it one, bring it to the host, which array module.

A device array is anything exposing ``__cuda_array_interface__`` (CuPy, and
Numba's device arrays).  CuPy itself is imported here only, and only when a
caller asks for it (:func:`cupy_module`), so no lodtool import pays for it.

>>> import numpy as np
>>> is_device_array(np.zeros(2)), to_host(np.arange(3)).tolist(), array_module(np.zeros(1)).__name__
(False, [0, 1, 2], 'numpy')
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import LodBackendError

_cupy_module = None


def is_device_array(data: Any) -> bool:
    """True for GPU arrays (anything exposing ``__cuda_array_interface__``).

    >>> is_device_array([1, 2])
    False
    """
    return hasattr(data, "__cuda_array_interface__")


def to_host(a: Any) -> Any:
    """A device array's host copy (CuPy's ``.get()``); anything else as it is.

    >>> to_host([1, 2])
    [1, 2]
    """
    return a.get() if is_device_array(a) and hasattr(a, "get") else a


def array_module(*arrays: Any):
    """CuPy if any of ``arrays`` lives on the GPU, else NumPy.

    >>> array_module([1], np.zeros(2)).__name__
    'numpy'
    """
    return cupy_module() if any(is_device_array(a) for a in arrays) else np


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


__all__ = ["is_device_array", "to_host", "array_module", "cupy_module"]
