"""Names a package exports from its modules, imported on first use (so importing the package stays cheap).

>>> getattr_, dir_ = lazy_exports("lodtool", {"validate_lod": "lod"}, {})
>>> getattr_("validate_lod").__name__, "validate_lod" in dir_()
('validate_lod', True)
"""

from __future__ import annotations

import importlib
from typing import Any, Callable


def lazy_exports(package: str, table: dict[str, str], namespace: dict[str, Any],
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: name -> the module (inside it) that defines the name.

    A name's first lookup imports its module and caches the value in ``namespace``
    (the package's globals), so later lookups cost nothing.
    """
    def __getattr__(name: str) -> Any:
        if name in table:
            value = getattr(importlib.import_module(f"{package}.{table[name]}"), name)
            namespace[name] = value
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(table))

    return __getattr__, __dir__


__all__ = ["lazy_exports"]
