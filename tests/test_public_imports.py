"""Every name the docs show imports from the path they give; the bridges' public functions are typed."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import re
import types
import warnings
from pathlib import Path

import pytest

from lodtool.errors import LodBackendError, LodUsageError
from tests.test_optional import OPTIONAL

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: ``lodtool.<x>`` in the docs that are file names, not Python: the shard manifest, fish's completion file
NOT_PYTHON = {"lodtool.json", "lodtool.fish"}
#: module paths the docs give that need a line in lodtool/__init__.py (the lead's; see the report of this change)
NOT_YET: dict[str, str] = {}


def _import_statements(text: str) -> list[str]:
    """``import lodtool...`` and ``from lodtool... import ...`` lines of the text (``>>>`` prompts too)."""
    found, lines = [], text.splitlines()
    for k, line in enumerate(lines):
        code = re.sub(r"^\s*(>>>|\.\.\.)?\s*", "", line)
        if not re.match(r"(from lodtool[\w.]* import |import lodtool)", code):
            continue
        while code.count("(") > code.count(")") and k + 1 < len(lines):  # a parenthesized name list
            k += 1
            code += " " + lines[k].strip()
        found.append(code.split("#")[0].strip())
    return found


def documented_names() -> dict[str, str]:
    """``{dotted name: where}``: each name a doc imports from lodtool, or writes as ``lodtool.a.b`` (or ``a.b``)."""
    names: dict[str, str] = {}
    for doc in DOCS:
        text = doc.read_text()
        where = doc.relative_to(ROOT).as_posix()
        for statement in _import_statements(text):
            for node in ast.walk(ast.parse(statement)):
                if isinstance(node, ast.ImportFrom):
                    names.update({f"{node.module}.{a.name}": where for a in node.names if a.name != "*"})
                elif isinstance(node, ast.Import):
                    names.update({a.name: where for a in node.names})
        for dotted in re.findall(r"(?<![\w/.-])lodtool(?:\.[A-Za-z_]\w*)+", text):
            if dotted not in NOT_PYTHON:
                names.setdefault(dotted, where)
        # the docs' tables and walk-throughs name modules inside the package without the prefix: `tasks.pack`
        for inside in re.findall(r"`((?:container|interop|io|ops|tasks)(?:\.[A-Za-z_]\w*)+)", text):
            names.setdefault(f"lodtool.{inside}", where)
    return names


def _resolve(dotted: str):
    """The object ``dotted`` names: the longest importable module, then attributes."""
    parts = dotted.split(".")
    for k in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:k]))
        except ModuleNotFoundError as exc:
            if exc.name is None or not ".".join(parts[:k]).startswith(exc.name):
                raise  # a module that is there but imports a missing one
            continue
        for attr in parts[k:]:
            value = getattr(value, attr)
        return value
    raise ModuleNotFoundError(dotted)


def _params() -> list:
    return [pytest.param(name, id=f"{name} ({where})",
                         marks=[pytest.mark.xfail(strict=True, raises=ModuleNotFoundError, reason=NOT_YET[name])]
                         if name in NOT_YET else [])
            for name, where in sorted(documented_names().items())]


def test_the_docs_are_parsed():
    names = documented_names()
    assert {"lodtool.interop.torch.to_torch", "lodtool.dask", "lodtool.io.pdtensor.read_pdtensor",
            "lodtool.tasks.pack"} <= set(names)
    assert not NOT_PYTHON & set(names)


@pytest.mark.parametrize("dotted", _params())
def test_every_documented_name_imports_from_the_documented_path(dotted):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # docs/architecture.md names the deprecated aliases
        try:
            value = _resolve(dotted)
        except (LodBackendError, LodUsageError) as exc:  # the name may be there, but an optional library is not
            missing = sorted(lib for lib in OPTIONAL if importlib.util.find_spec(lib) is None)
            if not missing:
                raise
            pytest.skip(f"{exc} ({', '.join(missing)} not installed)")
    if isinstance(value, types.ModuleType):  # users type `import lodtool.x` for a module the docs call lodtool.x
        assert importlib.import_module(dotted) is value


def test_batch_dataset_imports_from_the_torch_bridge():
    pytest.importorskip("torch")
    from lodtool.interop._torch_batch import BatchDataset as defined
    from lodtool.interop.torch import BatchDataset

    assert BatchDataset is defined
    with pytest.raises(AttributeError, match="module 'lodtool.interop.torch' has no attribute 'nothing'"):
        importlib.import_module("lodtool.interop.torch").nothing  # noqa: B018


# -- types ---------------------------------------------------------------------------------------------
BRIDGES = ["arrow", "awkward", "dask", "hf", "tf", "torch"]
#: bridge functions defined in modules whose owners annotate them (remove a line when its functions pass)
UNANNOTATED_ELSEWHERE = {
    "dask": "lodtool.interop.dask is another helper's",
}


def public_functions(module) -> list[str]:
    """The functions of ``module.__all__``, and the public methods of its classes, that lack a return annotation."""
    missing = []
    for name in module.__all__:
        obj = inspect.getattr_static(module, name, None)
        if inspect.isfunction(obj):
            if "return" not in obj.__annotations__:
                missing.append(name)
        elif inspect.isclass(obj):
            missing += [f"{name}.{attr}" for attr, fn in vars(obj).items()
                        if inspect.isfunction(fn) and not attr.startswith("_") and "return" not in fn.__annotations__]
    return missing


@pytest.mark.parametrize("bridge", [
    pytest.param(b, marks=[pytest.mark.xfail(strict=True, raises=AssertionError, reason=UNANNOTATED_ELSEWHERE[b])]
                 if b in UNANNOTATED_ELSEWHERE else []) for b in BRIDGES])
def test_every_public_bridge_function_has_a_return_annotation(bridge):
    module = importlib.import_module(f"lodtool.interop.{bridge}")
    assert public_functions(module) == []


def test_the_package_is_typed_and_ships_its_marker():
    tomllib = pytest.importorskip("tomllib")
    assert (ROOT / "lodtool" / "py.typed").is_file()
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "py.typed" in config["package-data"]["lodtool"]


def test_the_interop_docstring_names_only_modules_that_exist():
    import lodtool.interop

    named = set(re.findall(r"lodtool\.interop\.(\w+)", lodtool.interop.__doc__))
    bridges = {p.stem for p in (ROOT / "lodtool" / "interop").glob("[!_]*.py")}
    assert named == bridges
