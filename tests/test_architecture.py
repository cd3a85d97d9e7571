"""The floors of ARCHITECTURE.md, checked on the source: each imports only from the floors below it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "lodtool"
CORE = {"errors", "lod", "tensor"}


def imports_of(path: Path) -> set[str]:
    """Absolute module names a file imports (relative imports resolved)."""
    tree = ast.parse(path.read_text())
    module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    package = module.rsplit(".", 1)[0] if path.name != "__init__.py" else module
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            found.add(name)
            found.update(f"{name}.{alias.name}" for alias in node.names)
    return found


def files(sub: str = "") -> list[Path]:
    return sorted((PACKAGE / sub).rglob("*.py"))


def floor_of(path: Path) -> str:
    rel = path.relative_to(PACKAGE).parts
    return rel[0] if len(rel) > 1 else "core"


@pytest.mark.parametrize("path", files(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_floors(path):
    floor = floor_of(path)
    imported = {name for name in imports_of(path) if name.startswith("lodtool")}
    if floor == "core" and path.stem in CORE:
        assert not {n for n in imported if n.split(".")[1:2] and n.split(".")[1] in ("format", "ops", "cli",
                                                                                     "pipeline")}, imported
    if floor == "format":
        assert not any(n.startswith(("lodtool.ops", "lodtool.cli", "lodtool.pipeline")) for n in imported), imported
    if floor == "ops":
        assert not any(n.startswith(("lodtool.format", "lodtool.cli", "lodtool.pipeline")) for n in imported), \
            imported
    if floor != "cli" and path.name != "__main__.py":
        assert not any(n.startswith("lodtool.cli") for n in imported), f"{path} imports the CLI"


@pytest.mark.parametrize("path", files(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_only_the_device_module_imports_cupy(path):
    if path.relative_to(PACKAGE).as_posix() == "_device.py":
        return
    assert not any(name == "cupy" or name.startswith("cupy.") for name in imports_of(path)), \
        f"{path} imports cupy; only lodtool/_device.py may"
