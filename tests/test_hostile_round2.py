"""Hostile files, round 2 (issue 13): files lodtool never wrote, built here with h5py's own API.

Each class of attack is one test class, with a fixture that builds the hostile
file from tiny real data.  Commands run in process through click's runner where
the fix makes them fail fast; where the old behaviour was a hang, a crash or a
memory blow-up, the run is a real process with a timeout and an address-space
limit, so a regression fails the test instead of killing the suite.
"""

from __future__ import annotations

import os
import subprocess
import sys

import h5py
import numpy as np
import pytest
import xxhash
from click.testing import CliRunner

from lodtool import LoDTensor
from lodtool.cli.main import cli
from lodtool.format.container import save

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def digest(values: np.ndarray) -> str:
    """The checksum attribute lodtool would record for ``values``."""
    return "xxh3_64:" + xxhash.xxh3_64_hexdigest(np.ascontiguousarray(values).tobytes())


def replace_dataset(path: str, member: str, values: np.ndarray | None = None, **create) -> None:
    """Swap ``member`` for a dataset made with ``create_dataset(**create)``; record a checksum of ``values``."""
    with h5py.File(path, "r+") as f:
        del f[member]
        parent, _, name = member.rpartition("/")
        ds = f[parent].create_dataset(name, **create)
        if values is not None:
            ds.attrs["checksum"] = digest(values)


def run_cli(*args: str, input: str | None = None):
    return CliRunner().invoke(cli, list(args), input=input)


def run_process(args: list[str], timeout: float = 20.0, address_space: int | None = None,
                cwd: str | None = None) -> subprocess.CompletedProcess:
    """``python -m lodtool ARGS`` as a real process, optionally under an address-space limit."""
    preexec = None
    if address_space is not None:
        import resource

        def preexec():
            resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "lodtool", *args], capture_output=True, text=True,
                          timeout=timeout, preexec_fn=preexec, env=env, cwd=cwd)


def one_line_error(result) -> str:
    """The single stderr line of a failed run (asserting there is exactly one)."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("lodtool: error: "), result.stderr
    return lines[0]


# every command that reads a tensor's values or offsets, as argument lists after the file name
READERS = {
    "unpack": ["unpack", "{f}", "--to", "json", "-o", "-"],
    "head": ["head", "{f}", "--to", "json", "-o", "-"],
    "tail": ["tail", "{f}", "--to", "json", "-o", "-"],
    "slice": ["slice", "{f}", "0", "--to", "json", "-o", "-"],
    "tree": ["tree", "{f}"],
    "inspect": ["inspect", "{f}"],
    "pad": ["pad", "{f}", "-o", "{out}.npz"],
    "pool": ["pool", "{f}", "-o", "{out}.h5"],
    "reverse": ["reverse", "{f}", "-o", "{out}.h5"],
    "pack-plan": ["pack-plan", "{f}"],
}


def reader_args(command: str, path: str, out: str) -> list[str]:
    return [a.format(f=path, out=out) for a in READERS[command]]


# -- 1. external raw storage and virtual datasets ------------------------------------------------------------------
SECRET = b"TOPSECRETKEY1234"


@pytest.fixture
def secret(tmp_path) -> str:
    p = tmp_path / "secret.bin"
    p.write_bytes(SECRET)
    return str(p)


def external_container(folder, secret: str, member: str) -> str:
    """A valid-looking container whose ``member`` keeps its bytes in the local file ``secret``."""
    path = str(folder / f"external-{member.replace('/', '-')}.lod.h5")
    if member.endswith("data"):
        save(path, LoDTensor(np.zeros(16, dtype=np.uint8), [[0, 6, 16]]))
        values = np.frombuffer(SECRET, dtype=np.uint8)
        replace_dataset(path, member, values, shape=(16,), dtype="u1", external=[(secret, 0, 16)])
    else:  # offsets [0, x, 16] whose middle entry is the secret's bytes
        save(path, LoDTensor(np.zeros(16, dtype=np.uint8), [[0, 6, 16]]))
        values = np.frombuffer(SECRET, dtype="<i8")
        replace_dataset(path, member, values, shape=(2,), dtype="<i8", external=[(secret, 0, 16)])
    return path


class TestExternalStorage:
    """Issue 13.1: a dataset whose raw bytes live in another local file is refused before any byte is read."""

    @pytest.mark.parametrize("command", sorted(READERS))
    def test_no_reader_prints_or_uses_the_other_file(self, tmp_path, secret, command):
        path = external_container(tmp_path, secret, "tensor/data")
        result = run_cli(*reader_args(command, path, str(tmp_path / "out")))
        assert result.exit_code == 1, result.output
        assert "TOPSECRET" not in result.output and "84, 79, 80" not in result.output
        assert "external storage" in one_line_error(result)
        assert not any(p.name.startswith("out") for p in tmp_path.iterdir())

    def test_external_offsets_leak_nothing_into_messages(self, tmp_path, secret):
        path = external_container(tmp_path, secret, "tensor/lod/0")
        for command in ("head", "tree", "unpack", "inspect"):
            result = run_cli(*reader_args(command, path, str(tmp_path / "out")))
            assert result.exit_code == 1
            line = one_line_error(result)
            assert "external storage" in line and str(int.from_bytes(SECRET[:8], "little")) not in line

    @pytest.mark.parametrize("member", ["tensor/data", "tensor/lod/0"])
    def test_validate_and_verify_refuse_it(self, tmp_path, secret, member):
        path = external_container(tmp_path, secret, member)
        validate = run_cli("validate", path)
        assert validate.exit_code == 1 and "external storage" in validate.output
        verify = run_cli("verify", path)
        # verify's exit 2 is "unreadable", its 1 "a mismatch": either way never ok, and it says why
        assert verify.exit_code in (1, 2) and "external storage" in verify.output + verify.stderr

    def test_a_fifo_or_an_endless_device_is_never_opened(self, tmp_path):
        fifo = str(tmp_path / "fifo")
        os.mkfifo(fifo)
        path = str(tmp_path / "fifo.lod.h5")
        save(path, LoDTensor(np.zeros(16, dtype=np.uint8), [[0, 6, 16]]))
        replace_dataset(path, "tensor/data", np.zeros(16, np.uint8), shape=(16,), dtype="u1",
                        external=[(fifo, 0, 16)])
        huge = str(tmp_path / "zero.lod.h5")
        save(huge, LoDTensor(np.zeros(16, dtype=np.uint8), [[0, 6, 16]]))
        replace_dataset(huge, "tensor/data", None, shape=(1 << 40,), dtype="u1",
                        external=[("/dev/zero", 0, 1 << 40)])
        for args in (["verify", path], ["head", path], ["validate", huge], ["verify", huge]):
            proc = run_process(args, timeout=30)
            assert proc.returncode in (1, 2) and "external storage" in proc.stdout + proc.stderr, (args, proc)

    def test_virtual_datasets_are_refused(self, tmp_path):
        source = str(tmp_path / "source.h5")
        with h5py.File(source, "w") as f:
            f["x"] = np.arange(16, dtype=np.uint8)
        path = str(tmp_path / "vds.lod.h5")
        save(path, LoDTensor(np.zeros(16, dtype=np.uint8), [[0, 6, 16]]))
        layout = h5py.VirtualLayout(shape=(16,), dtype="u1")
        layout[:] = h5py.VirtualSource(source, "x", shape=(16,))
        with h5py.File(path, "r+") as f:
            del f["tensor/data"]
            f["tensor"].create_virtual_dataset("data", layout)
        for args in (["head", path], ["validate", path], ["verify", path]):
            result = run_cli(*args)
            assert result.exit_code in (1, 2) and "virtual dataset" in result.output + result.stderr, args
