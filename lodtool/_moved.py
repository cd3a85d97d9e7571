"""Old import paths of moved modules (``lodtool.format.*``, ``lodtool.pipeline``): they warn, and go in 0.2.

The old modules are no files any more (so version control follows each file
to its new home).  :func:`install`, called by ``import lodtool``, adds an
import hook that makes each old path a thin alias module: its ``__getattr__``
finds the name in the modules that now hold it and warns with
:class:`DeprecationWarning` naming the new place.

>>> import warnings
>>> getattr_, dir_ = moved("lodtool.old", "lodtool.lod", renames={"old_name": "validate_lod"})
>>> with warnings.catch_warnings(record=True) as caught:
...     warnings.simplefilter("always")
...     fn = getattr_("old_name")
>>> fn.__name__, caught[0].category.__name__
('validate_lod', 'DeprecationWarning')
>>> str(caught[0].message)
'lodtool.old.old_name moved to lodtool.lod.validate_lod; the old path goes in 0.2'
"""

from __future__ import annotations

import importlib
import os
import sys
import types
import warnings
from importlib.machinery import ModuleSpec
from typing import Any, Callable

#: old module -> (the modules that now hold its names, searched in order; old name -> new name)
MOVED: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    "lodtool.format": (("lodtool.container", "lodtool.atomic"), {}),
    "lodtool.format.container": (("lodtool.container.checks", "lodtool.container.reader",
                                  "lodtool.container.writer"), {}),
    "lodtool.format.lazy": (("lodtool.container.reader", "lodtool.container.planner"), {}),
    "lodtool.format.writer": (("lodtool.container.writer",), {}),
    "lodtool.format.spec": (("lodtool.container.spec",), {}),
    "lodtool.format.checksum": (("lodtool.container.checksum",), {}),
    "lodtool.format.filters": (("lodtool.container.filters",), {}),
    "lodtool.format.limits": (("lodtool.container.limits",), {}),
    "lodtool.format.isolate": (("lodtool.container.isolate",), {}),
    "lodtool.format.atomic": (("lodtool.atomic",), {}),
    "lodtool.format.checks": (("lodtool.tasks", "lodtool.container.checks", "lodtool.tasks._check"),
                              {"validate_files": "validate", "inspect_one": "inspect", "verify_files": "verify",
                               "FileValidation": "FileReport"}),
    "lodtool.format.pack": (("lodtool.tasks", "lodtool.tasks._pack"), {}),
    "lodtool.format.unpack": (("lodtool.tasks", "lodtool.tasks._unpack"), {}),
    "lodtool.format.export": (("lodtool.tasks", "lodtool.tasks._export"), {"write_tensor": "export"}),
    "lodtool.format.jsonio": (("lodtool.io.json", "lodtool.io._values", "lodtool._moved"),
                              {"format_from_path": "_format_from_path", "EXTENSIONS": "_EXTENSIONS"}),
    "lodtool.format.npyio": (("lodtool.io.npy",), {}),
    "lodtool.pipeline": (("lodtool.tasks", "lodtool.tasks._operators"),
                         {"pool_file": "pool", "softmax_file": "softmax", "reverse_file": "reverse",
                          "expand_file": "expand", "pad_file": "pad", "unpad_file": "unpad",
                          "pack_plan_file": "pack_plan"}),
}


def moved(old: str, *new: str, renames: dict[str, str] | None = None,
          ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for the alias module ``old`` whose names now live in the modules ``new``."""
    renames = renames or {}

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        target = renames.get(name, name)
        for module_name in new:
            module = importlib.import_module(module_name)
            value = getattr(module, target, None)
            if value is not None and not isinstance(value, types.ModuleType):  # submodules import as such
                where = "the io registry, lodtool.io" if module_name == __name__ else f"{module_name}.{target}"
                warnings.warn(f"{old}.{name} moved to {where}; the old path goes in 0.2", DeprecationWarning,
                              stacklevel=2)
                return value
        raise AttributeError(f"module {old!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        names = set(renames)
        for module_name in new:
            module = importlib.import_module(module_name)
            names.update(getattr(module, "__all__", [n for n in dir(module) if not n.startswith("_")]))
        return sorted(names)

    return __getattr__, __dir__


class _AliasFinder:
    """Finds the old module paths of :data:`MOVED` and makes each an alias module."""

    def find_spec(self, fullname: str, path=None, target=None):
        if fullname not in MOVED:
            return None
        return ModuleSpec(fullname, self, is_package=fullname == "lodtool.format")

    def create_module(self, spec):
        return None  # the default module object

    def exec_module(self, module) -> None:
        new, renames = MOVED[module.__name__]
        module.__doc__ = (f"Deprecated alias of {', '.join(n for n in new if n != __name__)}: "
                          "the old import path warns and goes in 0.2.")
        module.__getattr__, module.__dir__ = moved(module.__name__, *new, renames=renames)


def install() -> None:
    """Make the old import paths importable (once per process)."""
    if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
        sys.meta_path.append(_AliasFinder())


#: the old ``jsonio.EXTENSIONS``: input formats by file extension (now ``lodtool.io.REGISTRY``)
_EXTENSIONS = {".json": "json", ".jsonl": "jsonl", ".ndjson": "jsonl", ".npy": "npy", ".npz": "npz"}


def _format_from_path(path) -> str | None:
    """The old ``jsonio.format_from_path``: the input format a file's extension names (now ``lodtool.io``)."""
    return _EXTENSIONS.get(os.path.splitext(os.fspath(path))[1].lower())

__all__ = ["moved", "install", "MOVED"]
