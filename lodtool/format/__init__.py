"""The lodtool container (HDF5) and the ingest/export formats.

The container's public names are re-exported here and imported on first use,
so importing one format module (say JSON ingest) does not load h5py.

>>> import lodtool.format as fmt
>>> fmt.FORMAT_VERSION
'1.0'
>>> callable(fmt.save) and callable(fmt.open_file)
True
"""

from __future__ import annotations

import importlib
from typing import Any

#: public name -> module (inside lodtool.format) that defines it
_LAZY = {
    **{name: "container" for name in (
        "save", "load", "open_file", "LodFile", "LazyTensor", "LodWriter", "TensorWriter", "validate_file",
        "inspect_file", "verify_file", "FileReport", "Problem", "ChecksumMismatch")},
    **{name: "spec" for name in ("FORMAT_NAME", "FORMAT_VERSION", "SUPPORTED_MAJORS", "parse_version",
                                 "check_version")},
    **{name: "filters" for name in ("DEFAULT_COMPRESSION", "COMPRESSIONS")},
    **{name: "atomic" for name in ("atomic_path", "atomic_open", "AtomicPath", "is_temp_path")},
    **{name: "limits" for name in ("default_max_memory",)},
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = sorted(_LAZY)  # noqa: PLE0605 (a list, built from the table above)
