"""SIGINT and SIGTERM at the commit point: every path holds the old content or the new one, and the process knows which.

Each test runs a write in a child process whose ``os.replace`` / ``os.link`` /
``os.fsync`` sends the process a signal right after the real call on a chosen
file, so the signal lands exactly at a commit step (the rename of a file, of a
folder's manifest, of a shard), not at a random moment.  The child prints
what it saw: ``committed PATH`` (``InterruptedAfterCommit``), ``interrupted``
(``KeyboardInterrupt``) or ``done``; the test checks the disk says the same.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from lodtool import LoDTensor, load, save
from lodtool.atomic import (InterruptedAfterCommit, commit_section, hold_sigterm, intermediate_commit, is_temp_path,
                            release_sigterm)
from lodtool.container.shards import (MANIFEST_NAME, ShardWriter, concat_tensors, read_manifest, shard_name,
                                      validate_sharded)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = """
import os, signal, sys
from lodtool import atomic, load
from lodtool.container.shards import ShardWriter
from lodtool.container.writer import LodWriter

hook, name, signame, what, target, source = sys.argv[1:7]
real = getattr(os, hook)
fired = []

def hooked(*args, **kwargs):
    out = real(*args, **kwargs)
    if hook == "fsync":
        hit = True
    elif hook == "open":  # os.open(path, ...): a temp file of the target being made
        hit = os.path.basename(os.fspath(args[0])).startswith(name) and ".lodtmp-" in os.fspath(args[0])
    else:  # os.replace / os.link(src, dst): the rename onto the target
        hit = os.path.basename(os.fspath(args[1])) == name
    if hit and not fired:
        fired.append(1)
        os.kill(os.getpid(), getattr(signal, signame))
    return out

setattr(os, hook, hooked)
try:
    if what == "dask-append":  # source: a JSON Lines file, packed twice, one shard each
        from lodtool.interop import dask
        dask.pack([source, source], target, append=True, dtype="int32", compute_kwargs={"scheduler": "sync"})
        t = None
    else:
        t = load(source)
    if t is None:
        pass
    elif what == "file-append":
        with LodWriter(target, append=True) as w:
            w.write("tensor", t)
    elif what == "file-new":
        with LodWriter(target) as w:
            w.write("tensor", t)
    else:
        with ShardWriter(target, shard_size=256, append=what == "folder-append") as w:
            w.write(t)
    print("done" if fired else "not fired")
except atomic.InterruptedAfterCommit as exc:
    print("committed", os.path.basename(exc.committed))
except KeyboardInterrupt:
    print("interrupted")
"""


def _tensor(n_docs: int, seed: int) -> LoDTensor:
    rng = np.random.default_rng(seed)
    docs = rng.integers(1, 4, n_docs)
    sents = rng.integers(1, 5, int(docs.sum()))
    return LoDTensor(rng.integers(0, 1000, int(sents.sum())).astype("int32"),
                     recursive_sequence_lengths=[docs.tolist(), sents.tolist()])


def run_child(hook: str, name: str, signame: str, what: str, target, source) -> tuple[str, int]:
    proc = subprocess.run([sys.executable, "-c", CHILD, hook, name, signame, what, str(target), str(source)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": ROOT})
    return proc.stdout.strip(), proc.returncode


@pytest.fixture
def data(tmp_path):
    old, new = _tensor(30, 1), _tensor(30, 2)
    save(tmp_path / "new.lod.h5", new)
    return tmp_path, old, new


def _no_temp_files(folder) -> bool:
    return not any(is_temp_path(n) for n in os.listdir(folder))


def _folder(path, t) -> list[str]:
    with ShardWriter(path, shard_size=256) as w:
        w.write(t)
    return sorted(os.listdir(path))


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_a_signal_at_a_folders_manifest_rename_keeps_the_appended_shards(data, signame):
    tmp, old, new = data
    folder = tmp / "shards"
    _folder(folder, old)
    said, code = run_child("replace", MANIFEST_NAME, signame, "folder-append", folder, tmp / "new.lod.h5")
    assert (said, code) == ("committed shards", 0)  # the folder is what was committed, not its manifest file
    assert validate_sharded(folder).ok
    assert load(folder).equals(concat_tensors([old, new]))
    named = {s.file for s in read_manifest(folder).shards}
    assert sorted(os.listdir(folder)) == sorted(named | {MANIFEST_NAME})


def test_a_signal_at_a_new_folders_manifest_rename_leaves_the_complete_folder(data):
    tmp, _, new = data
    said, _ = run_child("replace", MANIFEST_NAME, "SIGINT", "folder-new", tmp / "shards", tmp / "new.lod.h5")
    assert said == "committed shards"
    assert validate_sharded(tmp / "shards").ok and load(tmp / "shards").equals(new)


def test_a_signal_at_a_dask_packs_manifest_rename_keeps_the_folder_readable(data):
    tmp, old, _ = data
    folder = tmp / "shards"
    _folder(folder, old)
    (tmp / "in.jsonl").write_text("[[1, 2], [3]]\n[[4]]\n")
    said, _ = run_child("replace", MANIFEST_NAME, "SIGINT", "dask-append", folder, tmp / "in.jsonl")
    assert said == "committed shards"
    assert validate_sharded(folder).ok and len(load(folder)) == len(old) + 4


@pytest.mark.parametrize("what", ["folder-append", "folder-new"])
@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_a_signal_at_a_shards_rename_leaves_the_old_folder_and_no_new_shard(data, what, signame):
    tmp, old, _ = data
    folder = tmp / "shards"
    before = _folder(folder, old) if what == "folder-append" else None
    second_new = shard_name(len(before) if before else 1)  # the second shard this write makes (old ones: len - 1)
    said, _ = run_child("link", second_new, signame, what, folder, tmp / "new.lod.h5")
    assert said == "interrupted"  # a shard is not the folder's commit: the write did not happen
    if before is None:
        assert not folder.exists()
    else:
        assert sorted(os.listdir(folder)) == before and load(folder).equals(old)


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_a_signal_at_a_files_rename_is_reported_as_committed(data, signame):
    tmp, old, new = data
    target = tmp / "t.lod.h5"
    save(target, old)
    said, code = run_child("replace", "t.lod.h5", signame, "file-append", target, tmp / "new.lod.h5")
    assert (said, code) == ("committed t.lod.h5", 0)
    assert load(target).equals(concat_tensors([old, new]))
    assert _no_temp_files(tmp)


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_a_signal_before_a_files_rename_keeps_the_old_file_and_removes_the_temp_file(data, signame):
    tmp, old, _ = data
    target = tmp / "t.lod.h5"
    save(target, old)
    before = target.read_bytes()
    said, code = run_child("fsync", "", signame, "file-append", target, tmp / "new.lod.h5")
    assert (said, code) == ("interrupted", 0)  # SIGTERM too: it ran the cleanup instead of killing the process
    assert target.read_bytes() == before
    assert _no_temp_files(tmp)


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_a_signal_as_the_temp_file_is_made_removes_it(data, signame):
    tmp, old, _ = data
    target = tmp / "t.lod.h5"
    save(target, old)
    before = target.read_bytes()
    said, code = run_child("open", ".t.lod.h5", signame, "file-append", target, tmp / "new.lod.h5")
    assert (said, code) == ("interrupted", 0)
    assert target.read_bytes() == before and _no_temp_files(tmp)


def test_a_signal_before_a_new_files_rename_leaves_nothing(data):
    tmp, _, _ = data
    said, _ = run_child("fsync", "", "SIGTERM", "file-new", tmp / "t.lod.h5", tmp / "new.lod.h5")
    assert said == "interrupted"
    assert sorted(os.listdir(tmp)) == ["new.lod.h5"]


# -- the pieces, in this process ----------------------------------------------------------------------------------
def test_commit_section_holds_a_signal_until_its_end_then_reports_the_commit():
    done = []
    with pytest.raises(InterruptedAfterCommit) as caught:
        with commit_section("out.bin"):
            os.kill(os.getpid(), signal.SIGINT)
            done.append("renamed")  # still runs: the signal waits for the section's end
    assert done == ["renamed"] and caught.value.signum == signal.SIGINT and caught.value.committed == "out.bin"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_commit_section_that_fails_reports_an_interrupt_and_nests():
    with pytest.raises(KeyboardInterrupt) as caught:
        with commit_section("out.bin"):
            with commit_section("out.bin"):  # the inner section delivers nothing: the outer one does
                os.kill(os.getpid(), signal.SIGINT)
            raise OSError("the rename failed")
    assert not isinstance(caught.value, InterruptedAfterCommit)
    assert isinstance(caught.value.__cause__, OSError)


def test_commit_section_delivers_a_signal_that_lands_as_its_handlers_go_back(monkeypatch):
    # The signal arrives while the section's own handler is still in place, at the last moment: it must not be
    # added to a list of held signals that was already read, and so lost.
    real = signal.signal

    def signal_lands_first(signum, handler):
        monkeypatch.setattr(signal, "signal", real)
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):  # the held-back handler runs between bytecodes
            pass
        return real(signum, handler)

    with pytest.raises(InterruptedAfterCommit) as caught:
        with commit_section("out.bin"):
            monkeypatch.setattr(signal, "signal", signal_lands_first)
    assert caught.value.committed == "out.bin"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_commit_section_calls_an_applications_own_handler_after_the_commit():
    seen = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
    try:
        with commit_section("out.bin"):
            os.kill(os.getpid(), signal.SIGINT)
            assert seen == []
        assert seen == [signal.SIGINT]
    finally:
        signal.signal(signal.SIGINT, previous)


def test_hold_sigterm_nests_and_leaves_an_applications_handler_alone():
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    a, b = hold_sigterm(), hold_sigterm()
    assert a and b
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):  # the handler runs between bytecodes
            pass
    release_sigterm(b)
    assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    release_sigterm(a)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    mine = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        assert hold_sigterm() is False
    finally:
        signal.signal(signal.SIGTERM, mine)


def test_intermediate_commit_turns_a_committed_step_into_an_interrupt():
    with pytest.raises(KeyboardInterrupt) as caught:
        with intermediate_commit():
            raise InterruptedAfterCommit(signal.SIGTERM, "part-00000.lod.h5")
    assert type(caught.value) is KeyboardInterrupt


def test_a_writer_released_in_another_thread_leaves_sigterm_to_the_next_hold():
    import threading

    held = hold_sigterm()
    thread = threading.Thread(target=release_sigterm, args=(held,))
    thread.start()
    thread.join()  # no handler can be set from there: SIGTERM still raises, and nothing failed
    again = hold_sigterm()
    assert again
    release_sigterm(again)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


# -- a Ctrl-C that lands inside a finalizer ----------------------------------------------------------------------
class _RaisesInFinalizer:
    def __del__(self):
        raise KeyboardInterrupt  # what the SIGINT handler does when the signal lands while a finalizer runs


def _drop_an_interrupt_in_a_finalizer() -> None:
    _RaisesInFinalizer()  # collected at once: Python prints and drops what __del__ raised


@pytest.fixture
def quiet_drops(monkeypatch):
    """As the command line runs: a dropped interrupt is counted, not reported (no warning in the test run)."""
    from lodtool import atomic

    monkeypatch.setattr(atomic, "report_dropped_interrupts", False)


def test_an_interrupt_a_finalizer_dropped_stops_a_file_write_before_its_commit(tmp_path, quiet_drops):
    from lodtool.container.writer import LodWriter

    target = tmp_path / "t.lod.h5"
    save(str(target), _tensor(5, 1))
    with pytest.raises(KeyboardInterrupt):
        with LodWriter(str(target), force=True) as w:
            tw = w.add_tensor("x", dtype=np.int32, lod_level=2)
            tw.append(_tensor(3, 2))
            _drop_an_interrupt_in_a_finalizer()
            tw.append(_tensor(3, 3))  # the next piece stops the write
    assert load(str(target)).equals(_tensor(5, 1)) and os.listdir(tmp_path) == ["t.lod.h5"]


def test_an_interrupt_a_finalizer_dropped_stops_a_sharded_write(tmp_path, quiet_drops):
    folder = tmp_path / "f"
    with pytest.raises(KeyboardInterrupt):
        with ShardWriter(str(folder), shard_size="1KB") as w:
            w.write(_tensor(40, 1))
            _drop_an_interrupt_in_a_finalizer()
            w.write(_tensor(40, 2))
    assert not folder.exists()


def test_an_interrupt_a_finalizer_dropped_before_the_last_piece_stops_the_commit(tmp_path, quiet_drops):
    from lodtool.atomic import AtomicPath

    target = tmp_path / "out.bin"
    path = AtomicPath(str(target))
    with open(path.tmp, "wb") as f:
        f.write(b"new")
    _drop_an_interrupt_in_a_finalizer()
    with pytest.raises(KeyboardInterrupt):
        path.commit()
    assert os.listdir(tmp_path) == []


def test_a_dropped_interrupt_is_reported_as_python_would_unless_the_cli_runs(monkeypatch, tmp_path):
    from lodtool import atomic

    seen = []
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: seen.append(unraisable.exc_type))
    mark = atomic.interrupt_mark()
    _drop_an_interrupt_in_a_finalizer()
    assert seen == [KeyboardInterrupt]  # a library keeps Python's report
    monkeypatch.setattr(atomic, "report_dropped_interrupts", False)
    _drop_an_interrupt_in_a_finalizer()
    assert seen == [KeyboardInterrupt]  # the command line's: counted only
    with pytest.raises(KeyboardInterrupt):
        atomic.raise_if_interrupted_since(mark)


def test_other_exceptions_in_finalizers_go_to_the_hook_set_before(monkeypatch):
    from lodtool.atomic import interrupt_mark, raise_if_interrupted_since

    seen = []
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: seen.append(unraisable.exc_type))
    mark = interrupt_mark()

    class RaisesOSError:
        def __del__(self):
            raise OSError("closing failed")

    RaisesOSError()
    raise_if_interrupted_since(mark)  # no interrupt was dropped
    assert seen == [OSError]
