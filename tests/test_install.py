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
