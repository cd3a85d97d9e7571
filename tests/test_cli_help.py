"""Every command has help text with an example; global options work; start-up stays light."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from lodtool.cli.main import COMMANDS, cli


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_has_help_with_an_example(command):
    result = CliRunner().invoke(cli, [command, "--help"])
    assert result.exit_code == 0, result.output
    assert "Example" in result.output
    assert f"lodtool {command}" in result.output


def test_group_help_lists_every_command():
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    for command in COMMANDS:
        assert command in result.output


def test_version():
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0 and result.output.startswith("lodtool ")


def test_unknown_command_is_a_usage_error():
    result = CliRunner().invoke(cli, ["frobnicate"])
    assert result.exit_code == 2


@pytest.mark.parametrize("command", ["inspect", "validate", "slice", "tree", "unpack", "verify"])
def test_light_commands_do_not_import_numba(command):
    # these commands read offsets and small windows; numba costs ~0.5 s at start-up
    code = ("import sys; from lodtool.cli.main import cli; cli.get_command(None, %r); "
            "import lodtool.container.reader; "
            "print('numba' in sys.modules, 'rich' in sys.modules)" % command)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "False", f"{command} imports numba"


def test_cli_reference_is_current():
    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "docs" / "gen_cli_reference.py"
    spec = importlib.util.spec_from_file_location("gen_cli_reference", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.TARGET.read_text() == module.render(), "run python docs/gen_cli_reference.py"


_PROBE = ("import sys, atexit\n"
          "atexit.register(lambda: sys.stderr.write('\\n@modules=' + ','.join(sorted(sys.modules)) + '\\n'))\n"
          "sys.argv = ['lodtool'] + sys.argv[1:]\n"
          "from lodtool.cli.main import main\n"
          "main()\n")
#: what a command that only reads offsets and writes to a pipe must not load (each costs milliseconds in a
#: shell loop): the kernels, the writer, the checksum library, the isolating child, the package metadata
_HEAVY = ("numba", "lodtool.container.writer", "xxhash", "multiprocessing", "importlib.metadata")


def _modules_loaded(args: list[str], cwd) -> set[str]:
    proc = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stderr.splitlines() if x.startswith("@modules="))
    return set(line.removeprefix("@modules=").split(","))


@pytest.mark.parametrize("args, rich_allowed", [
    (["inspect", "t.lod.h5"], True),  # draws a table
    (["validate", "t.lod.h5"], False),  # plain lines into a pipe
    (["slice", "t.lod.h5", "1", "--to", "jsonl"], False),
    (["inspect", "t.lod.h5", "--json"], False),
])
def test_reading_commands_load_only_what_they_use(tmp_path, args, rich_allowed):
    import numpy as np

    import lodtool

    lodtool.save(str(tmp_path / "t.lod.h5"), lodtool.LoDTensor(np.arange(6), [[0, 2, 6]]))
    loaded = _modules_loaded(args, tmp_path)
    assert not loaded & set(_HEAVY), f"{args[0]} loads {sorted(loaded & set(_HEAVY))}"
    assert rich_allowed or "rich" not in loaded


def test_validate_in_a_pipe_prints_whole_plain_lines(tmp_path):
    import h5py
    import numpy as np

    import lodtool

    path = tmp_path / ("a-long-file-name-[red]-" + "x" * 80 + ".lod.h5")
    lodtool.save(str(path), lodtool.LoDTensor(np.arange(6), [[0, 2, 6]]))
    with h5py.File(path, "r+") as f:  # break the LoD: offsets that decrease
        name = next(iter(f))
        f[name]["lod"]["0"][1] = 9
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert lines[0] == f"invalid {path}: 1 problem(s)"  # no wrapping at 80 columns, "[red]" kept as text
    assert lines[1].startswith(f"  {path}: ") and "offset" in lines[1]


def test_inspect_into_a_pipe_keeps_each_report_line_whole(tmp_path, monkeypatch):
    import numpy as np

    import lodtool
    from lodtool.cli import _render

    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(_render, "_console", None)  # a fresh console, made for CliRunner's non-terminal output
    name = "token_ids_of_every_sentence_of_every_document"  # makes the tensor's line longer than 80 columns
    lodtool.save(str(tmp_path / "t.lod.h5"), {name: lodtool.LoDTensor(np.arange(6), [[0, 2, 6]])})
    result = CliRunner().invoke(cli, ["inspect", str(tmp_path / "t.lod.h5")])
    assert result.exit_code == 0, result.output
    line = next(x for x in result.output.splitlines() if x.startswith(name))
    assert len(line) > 80 and "compression" in line and "stored" in line  # not wrapped at 80 columns
