"""``lodtool unpack``: a one-line summary on stderr, and the progress bar wired to the task."""

from __future__ import annotations

import contextlib
import json

import numpy as np
import pytest
from click.testing import CliRunner

from lodtool import LoDTensor, save
from lodtool.cli import _render
from lodtool.cli.main import cli


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.fixture
def stored(tmp_path):
    save(tmp_path / "a.lod.h5", LoDTensor(np.arange(5), [[0, 2, 5]]))
    return tmp_path


def test_unpack_to_a_file_says_what_it_wrote(stored):
    result = run("unpack", stored / "a.lod.h5", "-o", stored / "a.json")
    assert result.exit_code == 0 and result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert "unpacked 2 sequences, 5 rows" in line and str(stored / "a.json") in line and "json" in line
    assert json.loads((stored / "a.json").read_text()) == [[0, 1], [2, 3, 4]]
    assert run("unpack", stored / "a.lod.h5", "-o", stored / "b.json", "-q").stderr == ""


def test_unpack_to_stdout_keeps_the_summary_off_the_data(stored):
    result = run("unpack", stored / "a.lod.h5", "--to", "jsonl")
    assert result.exit_code == 0 and result.stdout == "[0,1]\n[2,3,4]\n"
    assert "unpacked 2 sequences" in result.stderr and "stdout" in result.stderr


def test_unpack_drives_a_progress_bar(stored, monkeypatch):
    seen = []

    @contextlib.contextmanager
    def recording(total, description, enabled):
        seen.append((description, enabled))
        yield lambda n, total=None: seen.append((n, total))

    monkeypatch.setattr(_render, "progress", recording)
    assert run("unpack", stored / "a.lod.h5", "-o", stored / "a.json").exit_code == 0
    assert seen[0] == ("unpacking", True) and seen[-1] == (40, 40)
    seen.clear()
    run("unpack", stored / "a.lod.h5", "-o", stored / "b.json", "-q")
    assert seen[0] == ("unpacking", False)
