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


def test_unpack_to_megatron_writes_a_prefix_and_names_its_files(stored):
    result = run("unpack", stored / "a.lod.h5", "--to", "megatron", "-o", stored / "corpus")
    assert result.exit_code == 0, result.output
    assert f"as megatron to {stored / 'corpus.bin'} + {stored / 'corpus.idx'}" in result.stderr
    result = run("unpack", stored / "corpus", "--to", "jsonl")
    assert result.exit_code == 0 and result.stdout == "[[0,1]]\n[[2,3,4]]\n"  # each sequence its own document


def test_unpack_to_a_format_of_several_files_from_the_extension(stored):
    save(stored / "u.lod.h5", LoDTensor(np.arange(5, dtype=np.uint16), [[0, 2, 5]]))
    assert run("unpack", stored / "u.lod.h5", "-o", stored / "x.ds").exit_code == 0
    assert sorted(p.name for p in stored.iterdir() if p.name.startswith("x.")) == ["x.ds", "x.ds.index"]


def test_unpack_of_a_deeper_lod_names_level(stored):
    save(stored / "d.lod.h5", LoDTensor(np.arange(4, dtype=np.uint16), [[0, 1, 2], [0, 1, 2], [0, 2, 4]]))
    result = run("unpack", stored / "d.lod.h5", "--to", "megatron", "-o", stored / "c")
    assert result.exit_code == 2 and "megatron stores 2; choose the level whose sequences it keeps with --level " \
                                      "(0..2)" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (stored / "c.bin").exists()
    assert run("unpack", stored / "d.lod.h5", "--to", "megatron", "-o", stored / "c", "--level", "2").exit_code == 0
    result = run("unpack", stored / "d.lod.h5", "--to", "json", "--level", "1")
    assert result.exit_code == 2 and "--level applies to writing megatron, fairseq, datatrove or dolma, not json" \
        in result.stderr


def test_unpack_to_megatron_on_stdout_asks_for_a_prefix(stored):
    result = run("unpack", stored / "a.lod.h5", "--to", "megatron")
    assert result.exit_code == 2 and "give an output path prefix, not a stream" in result.stderr
    assert result.stdout == ""
