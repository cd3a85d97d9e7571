"""Optional libraries, imported on first use: a missing one is a one-line error naming the extra that installs it.

Every import of a library that lodtool does not depend on (pyarrow, awkward,
torch, tensorflow, datasets, dask, ...) goes through :func:`optional_import`,
so a user without it is told which ``pip install 'lodtool[EXTRA]'`` to run,
with the extra spelled as ``pyproject.toml`` names it (a test checks that).

>>> optional_import("json", "all", "this example").__name__
'json'
>>> optional_import("no_such_library.sub", "torch", "the PyTorch bridge")
Traceback (most recent call last):
...
lodtool.errors.LodBackendError: the PyTorch bridge needs no_such_library: pip install 'lodtool[torch]'
"""

from __future__ import annotations

import importlib
from types import ModuleType

from ._device import _one_line
from .errors import LodBackendError


def optional_import(module: str, extra: str, needed_by: str) -> ModuleType:
    """``module`` imported, or :class:`~lodtool.errors.LodBackendError` naming ``pip install 'lodtool[extra]'``.

    ``needed_by`` says what needs it ("the PyTorch bridge").  A library that is
    there but fails to import (a missing dependency of its own, a broken
    build) is named with its error, and the same extra.
    """
    library = module.split(".")[0]
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and (module == missing or module.startswith(missing + ".")):  # it, or a package above it
            raise LodBackendError(f"{needed_by} needs {library}: pip install 'lodtool[{extra}]'") from None
        failure = exc
    except Exception as exc:  # there, but broken (its own import fails: a version mismatch, a missing C library)
        failure = exc
    raise LodBackendError(f"{needed_by} needs {library}, which failed to import ({_one_line(failure)}): "
                          f"pip install 'lodtool[{extra}]'")


__all__ = ["optional_import"]
