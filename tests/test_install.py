"""The install a new user runs: the README's commands, the extras they pull, and what CI runs."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

tomllib = pytest.importorskip("tomllib") if sys.version_info >= (3, 11) else pytest.importorskip("tomli")


def extras() -> dict[str, list[str]]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def test_the_test_extra_pulls_no_cuda_packages():
    test = " ".join(extras()["test"]).lower()
    assert "cuda" not in test and "cupy" not in test
    assert any(dep.startswith("numba-cuda") for dep in extras()["gpu-sim"])


def test_ci_runs_the_readme_test_command_verbatim_first_then_the_simulator():
    readme_command = re.search(r"```bash\n.*\n(pip install '\.\[test\]' && pytest)\n```", (ROOT / "README.md").read_text())
    assert readme_command is not None
    commands = [line for line in (ROOT / ".ci" / "run").read_text().splitlines()
                if line.strip() and not line.lstrip().startswith("#")]
    pips = [line for line in commands if line.startswith("pip install")]
    assert pips[0] == readme_command.group(1)
    assert any("gpu-sim" in line and "test_gpu_sim" in line for line in pips[1:])


def test_the_readme_states_the_test_time_and_shell_completion():
    text = (ROOT / "README.md").read_text()
    assert re.search(r"idle 2-core machine", text)
    assert "_LODTOOL_COMPLETE=bash_source lodtool" in text


def _expanded(extra: str, table: dict[str, list[str]]) -> set[str]:
    """The requirements an extra pulls, its references to lodtool's own extras (``lodtool[a,b]``) followed."""
    found = set()
    for requirement in table[extra]:
        own = re.fullmatch(r"lodtool\[([\w,-]+)\]", requirement)
        if own:
            for name in own.group(1).split(","):
                assert name in table, f"[{extra}] names lodtool[{name}], which is no extra"
                found |= _expanded(name, table)
        else:
            found.add(requirement)
    return found


def test_the_extras_are_named_as_users_type_them_and_the_old_names_still_install():
    table = extras()
    for old, new in {"arrow": "parquet", "tf": "tensorflow", "hf": "datasets"}.items():
        assert table[old] == [f"lodtool[{new}]"]
    everything = _expanded("all", table)
    for bridge in ("awkward", "parquet", "torch", "tensorflow", "datasets", "dask", "dask-awkward", "plugins"):
        assert _expanded(bridge, table) <= everything, bridge
    assert not any("cuda" in r or "cupy" in r for r in everything)  # [gpu] stays its own choice
    assert any(r.startswith("dask-awkward") for r in _expanded("dask-awkward", table))


def test_every_extra_that_lodtool_or_its_docs_name_exists():
    import ast

    table = extras()
    named = {}
    for path in sorted((ROOT / "lodtool").rglob("*.py")):
        text = path.read_text()
        if path.name != "_optional.py":  # the helper's own text says lodtool[EXTRA]
            named.update({m: path.name for m in re.findall(r"lodtool\[([\w-]+)\]", text)})
        for node in ast.walk(ast.parse(text)):  # optional_import(module, extra, needed_by)
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "optional_import":
                extra = node.args[1]
                assert isinstance(extra, ast.Constant), f"{path.name}: name the extra literally"
                named[extra.value] = path.name
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        named.update({m: doc.name for m in re.findall(r"lodtool\[([\w,-]+)\]", doc.read_text())
                      for m in m.split(",")})
    named.update({m: "docs/interop.md" for m in re.findall(r"`\[([\w-]+)\]`", (ROOT / "docs/interop.md").read_text())})
    assert {"torch", "tensorflow", "datasets", "parquet", "awkward"} <= set(named)
    unknown = {name: where for name, where in named.items() if name not in table}
    assert not unknown, f"extras named but not in pyproject.toml: {unknown}"


def test_the_docs_say_how_to_get_torchs_cpu_build():
    cpu = "pip install torch --index-url https://download.pytorch.org/whl/cpu"
    assert cpu in (ROOT / "docs" / "interop.md").read_text()
    assert cpu in " ".join((ROOT / "lodtool" / "interop" / "torch.py").read_text().split())  # its docstring
