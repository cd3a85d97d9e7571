"""One test per bug the hostile suites found, so each stays fixed without a fuzzing run."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
import zipfile

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from lodtool import LoDTensor
from lodtool.cli.main import cli
from lodtool.errors import LodFormatError, LodInputError, LodValidationError
from lodtool.atomic import AtomicPath, sweep_stale_temps
from lodtool.container import inspect_file, load, open_file, save, validate_file, verify_file
from lodtool.io.npy import iter_npy, read_npz
from lodtool.tasks import unpack

ARTICLES = [[3, 1, 2], [3, 2, 4, 1, 2, 3]]


@pytest.fixture
def path(tmp_path) -> str:
    p = str(tmp_path / "a.lod.h5")
    save(p, LoDTensor(np.arange(1, 16), recursive_sequence_lengths=ARTICLES))
    return p


def rewrite(path: str, member: str, values) -> None:
    """Replace a dataset's values in place (its checksum no longer matches)."""
    with h5py.File(path, "r+") as f:
        f[member][...] = values


def test_inspect_refuses_an_invalid_lod_instead_of_showing_nonsense(path):
    rewrite(path, "tensor/lod/1", [0, 3, 5, 9, 1, 12, 15])  # negative lengths
    with pytest.raises(LodValidationError, match=r"level 1: offset\[4\]=1 < offset\[3\]=9"):
        inspect_file(path)
    rewrite(path, "tensor/lod/1", [0, 3, 5, 9, 10, 12, 2**62])  # a last offset past the rows
    with pytest.raises(LodValidationError, match="the data has 15 rows"):
        inspect_file(path)


def test_offsets_beside_a_zero_level_tensor_are_a_lying_lod_level(path):
    with h5py.File(path, "r+") as f:
        f["tensor"].attrs["lod_level"] = 0  # the LoD would be silently dropped
    with pytest.raises(LodFormatError, match="'lod_level' is 0 but the tensor has a 'lod' member"):
        load(path)
    assert not validate_file(path).ok


@pytest.mark.parametrize("member, values, read, message", [
    ("tensor/lod/0", [1, 3, 4, 6], lambda t: t.head(3), r"offset\[0\]=1 \(the first offset must be 0\)"),
    ("tensor/lod/1", [0, 3, 5, 9, 10, 12, 14], lambda t: t.tail(1), "but the data has 15 rows"),
])
def test_partial_reads_check_the_ends_of_a_level(path, member, values, read, message):
    rewrite(path, member, values)
    with open_file(path) as f:
        with pytest.raises(LodValidationError, match=message):
            read(f.tensor())


def test_partial_reads_refuse_a_lone_offset_that_contradicts_the_level_below(path, tmp_path):
    with h5py.File(path, "r+") as f:
        del f["tensor/lod/0"]
        f["tensor/lod"].create_dataset("0", data=np.array([0]), maxshape=(None,), chunks=(8,))
    with open_file(path) as f:
        with pytest.raises(LodValidationError, match="level 0: offset.0.=0 but level 1 has 6 sequences"):
            f.tensor().head(2)  # [0] is zero sequences, a value; but not over a level of 6
    result = CliRunner().invoke(cli, ["tree", path])
    assert result.exit_code == 1 and "but level 1 has 6 sequences" in result.stderr


def test_verify_reports_a_missing_dataset(path):
    with h5py.File(path, "r+") as f:
        del f["tensor/lod/1"]
    assert [(m.dataset, m.error) for m in verify_file(path)] == [("/tensor/lod/1", "missing, or not a dataset")]


def test_a_data_size_that_is_not_stored_is_reported_and_never_read(tmp_path):
    p = str(tmp_path / "plain.lod.h5")
    save(p, LoDTensor(np.ones((40, 3), np.float32)))
    with h5py.File(p, "r+") as f:
        f["tensor/data"].resize(1 << 40, axis=0)  # a 0-level tensor: no LoD to disagree with
    assert any("the data claims shape" in pr.message for pr in validate_file(p).problems)
    start = time.monotonic()
    with pytest.raises(LodFormatError, match="the data claims shape"):
        unpack(p, io.BytesIO(), to="jsonl")
    assert time.monotonic() - start < 5  # it used to read zeros, 4M rows at a time, for ever


def test_append_to_a_plugin_compressed_file_in_a_fresh_process(tmp_path):
    pytest.importorskip("hdf5plugin")
    src = tmp_path / "x.jsonl"
    src.write_text("[[1.5, 2], [3]]\n[[4]]\n")
    target = str(tmp_path / "z.lod.h5")
    for extra in (["--compression", "zstd"], ["--append"]):  # each in a new interpreter: nothing preloaded
        proc = subprocess.run([sys.executable, "-m", "lodtool", "pack", str(src), "-o", target, *extra],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    assert load(target).to_nested() == [[[1.5, 2.0], [3.0]], [[4.0]]] * 2


def test_unpack_writes_nothing_when_the_tensor_cannot_be_read(path):
    rewrite(path, "tensor/lod/1", [0, 3, 5, 9, 1, 12, 15])
    out = io.BytesIO()
    with pytest.raises(LodValidationError):
        unpack(path, out, to="json")
    assert out.getvalue() == b""


def test_readers_refuse_temp_files_and_writers_sweep_dead_ones(path, tmp_path):
    leftover = tmp_path / ".a.lod.h5.lodtmp-0123456789ab"
    leftover.write_bytes(open(path, "rb").read())  # a complete copy, still not data
    with pytest.raises(LodFormatError, match="temp file of an unfinished lodtool write"):
        open_file(str(leftover))
    old = time.time() - 60
    os.utime(leftover, (old, old))
    save(path, LoDTensor(np.arange(3), [[0, 3]]), force=True)  # the next write to the target sweeps it
    assert sorted(os.listdir(tmp_path)) == ["a.lod.h5"]
    assert sweep_stale_temps(path) == []


def test_a_live_writer_keeps_its_temp_file_locked(tmp_path):
    target = str(tmp_path / "x.lod.h5")
    writer = AtomicPath(target)
    old = time.time() - 60
    os.utime(writer.tmp, (old, old))
    assert sweep_stale_temps(target) == [] and os.path.exists(writer.tmp)
    writer.discard()


def npy_bytes(array) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


def test_a_damaged_npy_header_is_an_input_error(tmp_path):
    blob = npy_bytes(np.arange(4)).replace(b"'descr'", b"('descr'")  # numpy's tokenizer: "EOF in statement"
    p = tmp_path / "a.npy"
    p.write_bytes(blob)
    with pytest.raises(LodInputError, match="a.npy: not a readable .npy file"):
        list(iter_npy([str(p)]))


def test_an_npy_header_claiming_more_than_the_file_holds(tmp_path):
    p = tmp_path / "a.npy"
    p.write_bytes(npy_bytes(np.arange(100))[:-8])
    with pytest.raises(LodInputError, match=r"claims shape \(100,\) of int64 \(800 bytes\) but only 792 bytes"):
        list(iter_npy([str(p)]))


def test_npz_members_that_are_not_arrays_or_claim_too_much(tmp_path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("data.npy", b"not an array")
    with pytest.raises(LodInputError, match="member 'data' is not a .npy array"):
        read_npz(io.BytesIO(buf.getvalue()))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("data.npy", npy_bytes(np.arange(5)).replace(b"'shape': (5,)", b"'shape': (9999999999,)"))
    with pytest.raises(LodInputError, match=r"array 'data': the header claims shape \(9999999999,\)"):
        read_npz(io.BytesIO(buf.getvalue()))


def test_library_warnings_stay_off_the_command_line(tmp_path, monkeypatch):
    import warnings

    import lodtool.container.checks as container

    real = container.spooled_inspection  # what inspect prints from

    def noisy(*args):
        warnings.warn("a library warning", UserWarning)
        return real(*args)

    p = str(tmp_path / "a.lod.h5")
    save(p, LoDTensor(np.arange(3), [[0, 3]]))
    monkeypatch.setattr(container, "spooled_inspection", noisy)
    for verbose, expected in (([], []), (["-v"], ["a library warning"])):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = CliRunner().invoke(cli, [*verbose, "inspect", "--json", p])
        assert result.exit_code == 0 and result.stderr == ""
        assert [str(w.message) for w in caught] == expected
