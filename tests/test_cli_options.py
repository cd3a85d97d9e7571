"""Shared CLI options: required arguments and options are enforced by click, whatever its version."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from lodtool.cli.main import COMMANDS, cli


def _required(command: click.Command) -> list[click.Parameter]:
    return [p for p in command.params if p.required]


def _invocation(params: list[click.Parameter], left_out: click.Parameter) -> list[str]:
    """Arguments that give every required parameter but ``left_out`` a (never read) value."""
    args: list[str] = []
    for p in params:
        if p is left_out:
            continue
        if isinstance(p, click.Option):
            args += [p.opts[0], "never-read.lod.h5"]
        else:
            args.append("never-read.lod.h5")
    return args


CASES = [(name, p.name) for name in sorted(COMMANDS)
         for p in _required(cli.get_command(None, name))]


def test_the_commands_that_write_require_an_output():
    required_outputs = {name for name, param in CASES if param == "output"}
    assert {"pack", "pool", "softmax", "reverse", "expand", "pad", "unpad"} <= required_outputs


@pytest.mark.parametrize(("command", "param_name"), CASES)
def test_leaving_out_a_required_parameter_is_a_usage_error(command, param_name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cmd = cli.get_command(None, command)
    params = _required(cmd)
    (left_out,) = [p for p in params if p.name == param_name]
    result = CliRunner().invoke(cli, [command, *_invocation(params, left_out)])
    assert result.exit_code == 2, result.output
    assert "Missing" in result.output and "internal error" not in result.output
    assert list(tmp_path.iterdir()) == []
