"""The atomic writer: all or nothing, no stray temp files, concurrent writers and readers."""

from __future__ import annotations

import io
import multiprocessing
import os
import stat

import numpy as np
import pytest

from lodtool import LoDTensor
from lodtool.errors import LodFileNotFoundError, LodUsageError
from lodtool.atomic import AtomicPath, atomic_open, atomic_path, is_temp_path, temp_path_for
from lodtool.container import LodWriter, load, save, validate_file


@pytest.fixture
def target(tmp_path) -> str:
    return str(tmp_path / "out.bin")


def listing(path: str) -> list[str]:
    return sorted(os.listdir(os.path.dirname(path)))


def test_commit_replaces_target(target):
    open(target, "wb").write(b"old")
    with atomic_path(target) as tmp:
        assert os.path.dirname(tmp) == os.path.dirname(target)
        assert is_temp_path(tmp) and os.path.basename(tmp).startswith(".out.bin.lodtmp-")
        open(tmp, "wb").write(b"new")
        assert open(target, "rb").read() == b"old"  # nothing visible before the commit
    assert open(target, "rb").read() == b"new"
    assert listing(target) == ["out.bin"]


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt, SystemExit])
def test_exception_keeps_old_file_and_removes_temp(target, error):
    open(target, "wb").write(b"old")
    with pytest.raises(error):
        with atomic_path(target) as tmp:
            open(tmp, "wb").write(b"half")
            raise error()
    assert open(target, "rb").read() == b"old"
    assert listing(target) == ["out.bin"]


def test_exception_on_new_target_leaves_nothing(target):
    with pytest.raises(ValueError):
        with atomic_open(target) as f:
            f.write(b"x")
            raise ValueError
    assert listing(target) == []


def test_temp_names():
    a, b = temp_path_for("/d/x.h5"), temp_path_for("/d/x.h5")
    assert a != b and is_temp_path(a) and not is_temp_path("/d/x.h5") and not is_temp_path("/d/.hidden")
    assert len(os.path.basename(temp_path_for("/d/" + "n" * 250))) < 255


def test_keeps_mode_of_replaced_file(target):
    open(target, "wb").write(b"old")
    os.chmod(target, 0o640)
    with atomic_open(target) as f:
        f.write(b"new")
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o640


def test_writes_through_symlink(tmp_path):
    real = tmp_path / "real.bin"
    real.write_bytes(b"old")
    link = tmp_path / "link.bin"
    link.symlink_to(real)
    with atomic_open(str(link)) as f:
        f.write(b"new")
    assert link.is_symlink() and real.read_bytes() == b"new"


def test_bad_targets(tmp_path):
    with pytest.raises(LodFileNotFoundError, match="does not exist"):
        AtomicPath(str(tmp_path / "missing" / "x.h5"))
    with pytest.raises(LodUsageError, match="is a folder"):
        AtomicPath(str(tmp_path))
    with pytest.raises(LodUsageError, match="binary"):
        with atomic_open(str(tmp_path / "x"), mode="w"):
            pass


def test_commit_twice_is_refused(target):
    a = AtomicPath(target)
    a.commit()
    with pytest.raises(LodUsageError):
        a.commit()


def test_stream_target_gets_all_or_nothing():
    buf = io.BytesIO()
    with atomic_open(buf) as f:
        f.write(b"abc")
    assert buf.getvalue() == b"abc"
    buf = io.BytesIO()
    with pytest.raises(RuntimeError):
        with atomic_open(buf) as f:
            f.write(b"partial")
            raise RuntimeError
    assert buf.getvalue() == b""


def test_container_writer_keeps_old_file_on_error(tmp_path):
    path = str(tmp_path / "x.lod.h5")
    t = LoDTensor(np.arange(3), [[0, 3]])
    save(path, t)
    before = open(path, "rb").read()
    with pytest.raises(RuntimeError):
        with LodWriter(path, overwrite=True) as w:
            w.write("tensor", LoDTensor(np.arange(10), [[0, 10]]))
            raise RuntimeError("boom")
    assert open(path, "rb").read() == before
    assert os.listdir(tmp_path) == ["x.lod.h5"]


# -- concurrency --------------------------------------------------------------------------------------------
def _writer(path: str, value: int, rounds: int) -> None:
    for _ in range(rounds):
        save(path, LoDTensor(np.full(5000, value, dtype=np.int64), [[0, 2500, 5000]]), force=True)


def _bytes_writer(path: str, value: int, rounds: int) -> None:
    for _ in range(rounds):
        with atomic_open(path) as f:
            f.write(bytes([value]) * 200_000)


def test_concurrent_byte_writers_and_reader(target):
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_bytes_writer, args=(target, v, 30)) for v in (1, 2)]
    for p in procs:
        p.start()
    seen = set()
    while any(p.is_alive() for p in procs):
        try:
            data = open(target, "rb").read()
        except FileNotFoundError:
            continue
        assert len(data) == 200_000 and len(set(data)) == 1  # never a mix, never partial
        seen.add(data[0])
    for p in procs:
        p.join()
        assert p.exitcode == 0
    assert not [n for n in listing(target) if is_temp_path(n)]


def test_concurrent_container_writers(tmp_path):
    path = str(tmp_path / "c.lod.h5")
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(path, v, 8)) for v in (1, 2)]
    for p in procs:
        p.start()
    checks = 0
    while any(p.is_alive() for p in procs):
        if os.path.exists(path):
            t = load(path)  # whichever file is there is complete and valid
            assert len(set(t.data.tolist())) == 1 and t.lod == [[0, 2500, 5000]]
            checks += 1
    for p in procs:
        p.join()
        assert p.exitcode == 0
    assert validate_file(path).ok
    assert os.listdir(tmp_path) == ["c.lod.h5"]


@pytest.mark.parametrize("to_stream", [False, True])
def test_a_write_that_fails_unnamed_names_the_output(tmp_path, to_stream):
    import errno
    import io

    target = io.BytesIO() if to_stream else tmp_path / "out.jsonl"
    with pytest.raises(OSError) as caught:
        with atomic_open(target) as f:
            f.write(b"partial")
            raise OSError(errno.ENOSPC, "No space left on device")  # what a full disk raises
    assert caught.value.errno == errno.ENOSPC
    if to_stream:
        assert "temporary" in caught.value.filename and target.getvalue() == b""
    else:
        assert caught.value.filename == str(target) and not target.exists()
        assert list(tmp_path.iterdir()) == []  # no temp file left either
