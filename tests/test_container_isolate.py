"""``--isolate``: a reader that crashes, hangs or blows up in its child process becomes a one-line error."""

from __future__ import annotations

import ctypes
import json
import resource
import time

import numpy as np
import pytest
from click.testing import CliRunner

from lodtool import LoDTensor, save
from lodtool.cli.main import cli
from lodtool.errors import LodFormatError, LodValidationError
from lodtool.tasks import _check as checks
from lodtool.container.isolate import run_isolated


def segfault(*_):
    ctypes.string_at(0)


def hang(*_):
    time.sleep(3600)


def allocate(*_):
    return bytearray(64 << 30)


def raise_lod_error(*_):
    raise LodValidationError("level 0: offset[1]=-1 is negative")


def child_address_space(*_):
    return resource.getrlimit(resource.RLIMIT_AS)[0]


def test_crash_hang_and_errors_in_the_child():
    with pytest.raises(LodFormatError, match=r"^x\.h5: unreadable \(the HDF5 reader crashed, SIGSEGV\)$"):
        run_isolated(segfault, path="x.h5")
    with pytest.raises(LodFormatError, match=r"^x\.h5: unreadable \(the HDF5 reader timed out after 0\.5 s\)$"):
        run_isolated(hang, path="x.h5", timeout=0.5)
    with pytest.raises(LodFormatError, match="more memory than the isolation limit"):
        run_isolated(allocate, path="x.h5", address_space=2 << 30)
    with pytest.raises(LodValidationError, match="is negative"):  # lodtool's own errors come back as they are
        run_isolated(raise_lod_error, path="x.h5")


def test_a_crash_is_one_line_even_under_faulthandler(capfd):
    import faulthandler

    faulthandler.enable()  # as `python -X faulthandler` (and pytest) do: the child must not dump its stack
    with pytest.raises(LodFormatError, match="crashed, SIGSEGV"):
        run_isolated(segfault, path="x.h5")
    assert "Fatal Python error" not in capfd.readouterr().err


def test_the_child_never_raises_a_tighter_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    assert run_isolated(child_address_space, path="x.h5", address_space=1 << 40) <= \
        (soft if soft != resource.RLIM_INFINITY else 1 << 40)
    assert run_isolated(child_address_space, path="x.h5", address_space=3 << 30) == 3 << 30


@pytest.mark.parametrize("command, fn", [("validate", "_validate_one"), ("verify", "_verify_one")])
def test_a_crashing_reader_is_exit_1_with_one_line(tmp_path, monkeypatch, command, fn):
    path = str(tmp_path / "x.lod.h5")
    save(path, LoDTensor(np.arange(3), [[0, 3]]))
    monkeypatch.setattr(checks, fn, segfault)
    result = CliRunner().invoke(cli, [command, "--isolate", path])
    assert result.exit_code == 1
    assert "unreadable (the HDF5 reader crashed, SIGSEGV)" in result.stdout
    report = json.loads(CliRunner().invoke(cli, [command, "--isolate", "--json", path]).stdout)
    assert report[0]["ok"] is False


def test_inspect_isolated_crash_and_hang(tmp_path, monkeypatch):
    path = str(tmp_path / "x.lod.h5")
    save(path, LoDTensor(np.arange(3), [[0, 3]]))
    monkeypatch.setattr("lodtool.container.checks.inspect_file", segfault)
    result = CliRunner().invoke(cli, ["inspect", "--isolate", path])
    assert result.exit_code == 1
    assert result.stderr.strip() == f"lodtool: error: {path}: unreadable (the HDF5 reader crashed, SIGSEGV)"
    monkeypatch.setattr("lodtool.container.checks.inspect_file", hang)
    result = CliRunner().invoke(cli, ["inspect", "--isolate", "--timeout", "0.5", path])
    assert result.exit_code == 1 and "timed out after 0.5 s" in result.stderr
