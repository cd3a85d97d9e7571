"""The floors of ARCHITECTURE.md, checked on the source, and the CLI's mirror of lodtool.tasks.

core (the top-level modules) <- container | io | ops <- tasks | interop <- cli.  Each floor imports only
from the floors below it (and itself); container, io and ops never import each other; no module imports
another in a cycle (imports inside functions count too).
"""

from __future__ import annotations

import ast
import inspect as pyinspect
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

PACKAGE = Path(__file__).resolve().parent.parent / "lodtool"
#: floor -> the floors it may import from (besides its own)
ALLOWED = {
    "core": set(),
    "container": {"core"},
    "io": {"core"},
    "ops": {"core"},
    "tasks": {"core", "container", "io", "ops", "interop"},
    "interop": {"core", "container", "io", "ops", "tasks"},
    "cli": {"core", "container", "io", "ops", "tasks", "interop"},
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """Absolute module names a file imports anywhere in it (relative imports resolved)."""
    tree = ast.parse(path.read_text())
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rsplit(".", 1)[0]
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
    return sorted(p for p in (PACKAGE / sub).rglob("*.py") if "__pycache__" not in p.parts)


MODULES = {module_name(p): p for p in files()}


def _module_of(name: str) -> str | None:
    parts = name.split(".")
    for k in range(len(parts), 0, -1):
        if ".".join(parts[:k]) in MODULES:
            return ".".join(parts[:k])
    return None


def lodtool_modules(path: Path) -> set[str]:
    """The lodtool modules (files) a file imports anywhere in it: ``from pkg import sub`` counts as ``pkg.sub``."""
    tree = ast.parse(path.read_text())
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(_module_of(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = ".".join(base[: len(base) - (node.level - 1)] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                out.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else _module_of(base))
    return out - {module, None}


def floor_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1 or (len(parts) == 2 and parts[1] not in {"container", "io", "ops", "tasks", "interop",
                                                                     "cli"}):
        return "core"
    return parts[1]


@pytest.mark.parametrize("path", files(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_floors(path):
    module = module_name(path)
    floor = floor_of(module)
    if module in ("lodtool", "lodtool.__main__", "lodtool.dask"):
        return  # the public API, the entry point, and the documented path of the Dask bridge
    allowed = ALLOWED[floor] | {floor}
    wrong = {m for m in lodtool_modules(path) if floor_of(m) not in allowed}
    assert not wrong, f"{module} ({floor}) imports {sorted(wrong)} from a floor above or beside it"


def test_no_import_cycles():
    graph = {m: lodtool_modules(p) for m, p in MODULES.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycle = stack[stack.index(n):] + [n]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


@pytest.mark.parametrize("path", files(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_only_the_device_module_imports_cupy(path):
    if path.relative_to(PACKAGE).as_posix() == "_device.py":
        return
    assert not any(name == "cupy" or name.startswith("cupy.") for name in imports_of(path)), \
        f"{path} imports cupy; only lodtool/_device.py may"


@pytest.mark.parametrize("path", files(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_only_the_jit_module_imports_numba_for_the_cpu(path):
    allowed = {"_jit.py", "ops/_cuda.py"}  # _cuda imports numba.cuda, the GPU target
    if path.relative_to(PACKAGE).as_posix() in allowed:
        return
    names = imports_of(path)
    numba = {n for n in names if n == "numba" or n.startswith("numba.")} - {"numba.types"}
    if "numba.types" in names:  # an intrinsic's typing function reads numba.types (see lodtool._jit.intrinsic)
        numba.discard("numba")
    assert not numba, f"{path} imports numba; kernels come from lodtool._jit"


#: the rooms that may define compiled kernels: the operators (and the batch planner's, in ops/batching), and the
#: few format kernels below them (the JSON scanner and formatter, HDF5's Fletcher-32, the offsets check); tasks/,
#: interop/ and cli/ only orchestrate
KERNEL_ROOMS = ("ops/", "_jit.py", "_monotonic.py", "io/_jsonscan.py", "io/_jsonfmt.py", "io/_megatronscan.py",
                "container/_fletcher.py")


def _decorators(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for dec in node.decorator_list:
                target = dec.func if isinstance(dec, ast.Call) else dec
                names.add(target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", ""))
    return names


@pytest.mark.parametrize("path", files(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_kernels_live_in_the_kernel_rooms(path):
    room = path.relative_to(PACKAGE).as_posix()
    if room.startswith(KERNEL_ROOMS):
        return
    assert not _decorators(path) & {"kernel", "intrinsic", "njit", "jit"}, \
        f"{room} defines a compiled kernel; kernels live in {', '.join(KERNEL_ROOMS)}"


#: the rooms that may build a tensor from parts they validated themselves (LoDTensor._trusted): the view and the
#: tensor, the readers of validated files and formats, the operators' outputs, and the pipe's per-chunk steps over
#: validated stored chunks; everything else builds tensors through the public constructor (checked, or checked at
#: an operator's entry) or gets them from those rooms
TRUSTED_BUILDERS = ("tensor.py", "ops/", "container/", "io/", "tasks/_pipe.py")


@pytest.mark.parametrize("path", files(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_only_the_rooms_that_validate_build_trusted_tensors(path):
    room = path.relative_to(PACKAGE).as_posix()
    if room.startswith(TRUSTED_BUILDERS):
        return
    used = [n.lineno for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Attribute)
            and n.attr == "_trusted"]
    assert not used, f"{room} builds unchecked tensors (LoDTensor._trusted, line {used[0]}); use LoDTensor(...)"


def test_no_operator_is_written_twice():
    """Each operator's per-chunk work is the pipe's ``step`` of the lodtool.ops function, on both routes: the Dask
    bridge and the CLI hand an operator to ``step`` and never call one themselves."""
    import lodtool.ops as ops

    # the operators over LoD tensors (sequence_mask makes a mask from lengths: it is not one)
    names = {n for n in ops.__all__ if n.startswith(("sequence_", "lod_", "pack_plan", "im2sequence"))} - {
        "sequence_mask"}
    for room in ("interop/dask.py", "cli/ops.py", "cli/sequence.py"):
        tree = ast.parse((PACKAGE / room).read_text())
        handed = {id(arg) for node in ast.walk(tree) if isinstance(node, ast.Call)
                  and getattr(node.func, "id", getattr(node.func, "attr", None)) == "step" for arg in node.args}
        called = [f"{n.func.id} (line {n.lineno})" for n in ast.walk(tree) if isinstance(n, ast.Call)
                  and isinstance(n.func, ast.Name) and n.func.id in names and id(n.func) not in handed]
        assert not called, f"{room} calls {called} itself; run it through the pipe (tasks._pipe.step)"
    assert not (PACKAGE / "tasks" / "_sequence_ops.py").exists()


# -- the CLI mirrors lodtool.tasks -------------------------------------------------------------------------
#: CLI command -> the lodtool.tasks function it is one call of
COMMAND_TASKS = {
    "pack": "pack", "unpack": "unpack", "validate": "validate", "inspect": "inspect", "verify": "verify",
    "slice": "slice", "head": "head", "tail": "tail", "tree": "tree", "expand": "expand", "pool": "pool",
    "softmax": "softmax", "pad": "pad", "unpad": "unpad", "reverse": "reverse", "pack-plan": "pack_plan_stream",
    "batch": "batch",
    "shard": "shard", "merge": "merge",
}
COMMAND_TASKS.update({"concat": "concat", "seq-slice": "seq_slice", "erase": "erase", "enumerate": "enumerate",
                      "reshape": "reshape", "lod-reset": "lod_reset"})


def test_every_command_has_a_tasks_function():
    from lodtool.cli.main import COMMANDS

    assert set(COMMAND_TASKS) == set(COMMANDS)


@pytest.mark.parametrize("command", sorted(COMMAND_TASKS))
def test_the_tasks_function_is_public_and_documented(command):
    import lodtool.tasks as tasks

    name = COMMAND_TASKS[command]
    assert name in tasks.__all__
    doc = pyinspect.getdoc(getattr(tasks, name)) or ""
    assert doc and ">>>" in doc, f"lodtool.tasks.{name} needs a docstring with an example"


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    from lodtool import LoDTensor, save

    d = tmp_path_factory.mktemp("mirror")
    save(d / "x.lod.h5", LoDTensor(np.arange(5.0), [[0, 2, 5]]))
    (d / "x.jsonl").write_text("[1, 2]\n[3]\n")
    np.savez(d / "p.npz", padded=np.zeros((2, 2)), lengths=np.array([1, 2]))
    return d


def _args(command: str, d: Path) -> list[str]:
    h5, out = str(d / "x.lod.h5"), str(d / "out.lod.h5")
    return {
        "pack": [str(d / "x.jsonl"), "-o", out], "unpack": [h5], "validate": [h5], "inspect": [h5],
        "verify": [h5], "slice": [h5, "0"], "head": [h5, "--to", "jsonl"], "tail": [h5, "--to", "jsonl"],
        "tree": [h5], "expand": [h5, h5, "-o", out], "pool": [h5, "-o", out], "softmax": [h5, "-o", out],
        "reverse": [h5, "-o", out], "pad": [h5, "-o", str(d / "out.npz")], "unpad": [str(d / "p.npz"), "-o", out],
        "pack-plan": [h5],
        **_sequence_args(h5, out),
        "batch": [h5, "--max-tokens", "4"],
        "shard": [h5, "-o", str(d / "shards")], "merge": [str(d / "shards"), "-o", out],
    }[command]


def _sequence_args(h5: str, out: str) -> dict[str, list[str]]:
    return {"concat": [h5, h5, "-o", out], "seq-slice": [h5, "--offset", "0", "--length", "1", "-o", out],
            "erase": [h5, "--tokens", "1", "-o", out], "enumerate": [h5, "--win-size", "2", "-o", out],
            "reshape": [h5, "--new-dim", "1", "-o", out], "lod-reset": [h5, "--target-lod", "0,5", "-o", out]}


@pytest.mark.parametrize("command", sorted(COMMAND_TASKS))
def test_each_command_is_one_call_of_its_tasks_function(command, inputs, monkeypatch):
    import lodtool.tasks as tasks
    from lodtool.cli.main import cli
    from lodtool.errors import LodError

    class Called(LodError):
        exit_code = 7

    calls = []

    def record(*args, **kwargs):
        calls.append(COMMAND_TASKS[command])
        raise Called("called")

    monkeypatch.setattr(tasks, COMMAND_TASKS[command], record)
    result = CliRunner().invoke(cli, [command, *_args(command, inputs)])
    assert (result.exit_code, calls) == (7, [COMMAND_TASKS[command]]), result.output
