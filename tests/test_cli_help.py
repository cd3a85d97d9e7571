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
            "import lodtool.format.container; "
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
