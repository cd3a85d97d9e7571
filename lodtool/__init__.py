"""lodtool: LoD (Level-of-Detail) tensors, their HDF5 container, and sequence operators.

A LoD tensor is one flat data array plus a LoD index (one offsets array per
level) describing nested variable-length sequences without padding.

>>> import lodtool, numpy as np
>>> t = lodtool.LoDTensor(np.arange(7), recursive_sequence_lengths=[[2, 1], [2, 2, 3]])
>>> t.lod
[[0, 2, 3], [0, 2, 4, 7]]
>>> t.branch(1).to_nested()
[[4, 5, 6]]

The container and operator functions are imported on first use, so
``import lodtool`` stays cheap (no h5py, no numba).
"""

from __future__ import annotations

import importlib
from typing import Any

from .errors import (LodBackendError, LodChecksumError, LodDtypeError, LodError, LodFileNotFoundError,
                     LodFormatError, LodIndexError, LodInputError, LodMemoryError, LodShapeError,
                     LodUsageError, LodValidationError, LodVersionError)
from .lod import lengths_to_offsets, offsets_to_lengths, validate_lod
from .tensor import LoDTensor, TensorView, from_nested

#: public name -> (module, attribute), resolved lazily
_LAZY = {
    "open": ("lodtool.tasks._open", "open"),
    "load": ("lodtool.tasks._open", "load"),
    "save": ("lodtool.container.writer", "save"),
    "LodWriter": ("lodtool.container.writer", "LodWriter"),
    "validate_file": ("lodtool.container.checks", "validate_file"),
    "inspect_file": ("lodtool.container.checks", "inspect_file"),
    "verify_file": ("lodtool.container.checks", "verify_file"),
    "pack": ("lodtool.tasks", "pack"),
    "unpack": ("lodtool.tasks", "unpack"),
    "ops": ("lodtool.ops", None),
    "batch_plan": ("lodtool.tasks", "batch_plan"),
    "batches": ("lodtool.tasks", "batches"),
    "BatchPlan": ("lodtool.tasks", "BatchPlan"),
    "dask": ("lodtool.interop.dask", None),
}


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from ._version import __version__ as value

        globals()[name] = value
        return value
    if name in _LAZY:
        module, attr = _LAZY[name]
        mod = importlib.import_module(module)
        value = mod if attr is None else getattr(mod, attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'lodtool' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "LoDTensor", "TensorView", "from_nested", "lengths_to_offsets", "offsets_to_lengths", "validate_lod",
    "open", "load", "save", "LodWriter", "validate_file", "inspect_file", "verify_file", "pack", "unpack", "ops",
    "batch_plan", "batches", "BatchPlan",
    "LodError", "LodValidationError", "LodIndexError", "LodShapeError", "LodDtypeError", "LodInputError",
    "LodFormatError", "LodVersionError", "LodChecksumError", "LodFileNotFoundError", "LodMemoryError",
    "LodBackendError", "LodUsageError", "__version__",
]
