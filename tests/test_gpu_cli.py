"""``--device cuda`` where CuPy is missing: every operator command fails with one line, before reading data.

(With CuPy and a GPU, ``tests/test_gpu.py`` checks that ``--device cuda`` writes what
``--device cpu`` writes; the simulator run of ``tests/test_gpu_sim.py`` does the same
on a stand-in device.)
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from lodtool.cli.main import cli
from lodtool import _device

SAMPLES = Path(__file__).resolve().parent.parent / "sample_data"


@pytest.fixture
def no_cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # "import cupy" fails, as where it is not installed
    monkeypatch.setattr(_device, "_cupy_module", None)


@pytest.fixture
def files(tmp_path):
    run = CliRunner().invoke
    a, npz = tmp_path / "a.h5", tmp_path / "pad.npz"
    assert run(cli, ["pack", str(SAMPLES / "articles.json"), "-o", str(a)]).exit_code == 0
    assert run(cli, ["pad", str(a), "-o", str(npz)]).exit_code == 0
    return {"FILE": a, "NPZ": npz}


COMMANDS = [
    ["pool", "FILE", "-o", "OUT"],
    ["softmax", "FILE", "-o", "OUT"],
    ["reverse", "FILE", "-o", "OUT"],
    ["expand", "FILE", "FILE", "-o", "OUT"],
    ["pad", "FILE", "-o", "OUT"],
    ["unpad", "NPZ", "-o", "OUT"],
    ["pack-plan", "FILE", "--json"],
]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: a[0])
def test_device_cuda_without_cupy_is_one_line(no_cupy, files, tmp_path, args):
    out = tmp_path / "out"
    argv = [str(files.get(a, out if a == "OUT" else a)) for a in args] + ["--device", "cuda"]
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 1, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == ["lodtool: error: --device cuda needs CuPy: pip install 'lodtool[gpu]'"], result.output
    assert result.stdout == "" and not out.exists()


def test_unknown_device_is_a_usage_error(files):
    result = CliRunner().invoke(cli, ["reverse", str(files["FILE"]), "-o", "x.h5", "--device", "tpu"])
    assert result.exit_code == 2 and "--device" in result.output
