"""Optional libraries: every import of one goes through lodtool._optional, and a missing one names its extra."""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

from lodtool import LoDTensor, save
from lodtool._optional import optional_import
from lodtool.errors import LodBackendError

PACKAGE = Path(__file__).resolve().parent.parent / "lodtool"
#: the libraries of the extras in pyproject.toml, as imported (hdf5plugin is optional in another way: the
#: container registers it when it is there and names it when a file needs it; cupy and numba-cuda have their
#: own one place each, lodtool._device and lodtool.ops._cuda)
OPTIONAL = {"awkward", "pyarrow", "torch", "tensorflow", "datasets", "dask", "distributed", "dask_awkward"}
#: files whose owners move their imports onto optional_import (remove a line when its file passes)
NOT_YET: dict[str, str] = {}


def _direct_imports(path: Path) -> list[str]:
    """``line: module`` for each import of an optional library, outside ``if TYPE_CHECKING:`` blocks."""
    tree = ast.parse(path.read_text())
    typing_only = {id(n) for block in ast.walk(tree)
                   if isinstance(block, ast.If) and getattr(block.test, "id", None) == "TYPE_CHECKING"
                   for n in ast.walk(block)}
    found = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        else:
            continue
        found += [f"{node.lineno}: {name}" for name in names if name.split(".")[0] in OPTIONAL]
    return found


def _source_files() -> list:
    params = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        marks = [pytest.mark.xfail(strict=True, raises=AssertionError, reason=NOT_YET[rel])] if rel in NOT_YET else []
        params.append(pytest.param(path, id=rel, marks=marks))
    return params


@pytest.mark.parametrize("path", _source_files())
def test_optional_libraries_are_imported_through_the_one_helper(path):
    assert _direct_imports(path) == [], f"import these through lodtool._optional.optional_import: {path}"


def test_a_missing_library_and_a_broken_one_name_the_extra(monkeypatch, tmp_path):
    for module in ("torch", "torch.nn.utils.rnn"):  # as if torch were not installed, though a test imported it
        monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(LodBackendError, match=r"^the PyTorch bridge needs torch: pip install 'lodtool\[torch\]'$"):
        optional_import("torch.nn.utils.rnn", "torch", "the PyTorch bridge")
    # libraries that are there, but one lacks a dependency of its own and the other fails in its own code
    (tmp_path / "lacks_a_dependency.py").write_text("import no_such_dependency\n")
    (tmp_path / "broken_build.py").write_text("raise AttributeError('module numpy has no attribute float_')\n")
    monkeypatch.syspath_prepend(tmp_path)
    with pytest.raises(LodBackendError, match=r"^X needs lacks_a_dependency, which failed to import \(No module "
                                              r"named 'no_such_dependency'\): pip install 'lodtool\[all\]'$"):
        optional_import("lacks_a_dependency", "all", "X")
    with pytest.raises(LodBackendError, match=r"^X needs broken_build, which failed to import \(module numpy "
                                              r"has no attribute float_\): pip install 'lodtool\[all\]'$"):
        optional_import("broken_build", "all", "X")


T = LoDTensor(np.arange(5), [[0, 2, 5]])


@pytest.fixture
def container(tmp_path):
    path = tmp_path / "c.lod.h5"
    save(path, T)
    return path


def bridge(name: str):
    return importlib.import_module(f"lodtool.interop.{name}")

#: (library, its extra, a call of a bridge that needs it, given the path of a container)
CALLS = [
    ("awkward", "awkward", lambda path: bridge("awkward").to_awkward(T)),
    ("awkward", "awkward", lambda path: bridge("awkward").from_awkward([[1]])),
    ("torch", "torch", lambda path: bridge("torch").to_torch(T)),
    ("torch", "torch", lambda path: bridge("torch").to_padded(T)),
    ("torch", "torch", lambda path: bridge("torch").from_torch(object())),
    ("torch", "torch", lambda path: bridge("torch").BatchDataset),
    ("tensorflow", "tensorflow", lambda path: bridge("tf").to_ragged_tensor(T)),
    ("tensorflow", "tensorflow", lambda path: bridge("tf").batch_dataset(path, max_sequences=1)),
    ("datasets", "datasets", lambda path: bridge("hf").to_hf(T)),
    ("datasets", "datasets", lambda path: bridge("hf").from_hf(path)),
]


@pytest.mark.parametrize("library, extra, call", CALLS, ids=[f"{c[0]}-{k}" for k, c in enumerate(CALLS)])
def test_each_bridge_names_its_extra_when_its_library_is_missing(monkeypatch, container, library, extra, call):
    monkeypatch.setitem(sys.modules, library, None)
    with pytest.raises(LodBackendError, match=rf"needs {library}: pip install 'lodtool\[{extra}\]'$"):
        call(container)


def test_arrow_names_the_parquet_extra(monkeypatch):
    from lodtool.interop.arrow import to_arrow

    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(LodBackendError, match=r"pip install 'lodtool\[parquet\]'$"):
        to_arrow(LoDTensor(np.arange(3), [[0, 3]]))


def test_to_dask_awkward_names_its_extra(monkeypatch, container):
    pytest.importorskip("dask")
    import lodtool.interop.dask as lodtool_dask

    bag = lodtool_dask.read(container)
    monkeypatch.setitem(sys.modules, "dask_awkward", None)
    with pytest.raises(LodBackendError, match=r"pip install 'lodtool\[dask-awkward\]'$"):
        bag.to_dask_awkward()
