"""The one atomic writer of lodtool: a temp file in the target's folder, fsync, ``os.replace``.

Every file lodtool writes goes through here, so a crash, a kill or an exception
never leaves a half-written target: readers see the old file or the new one.

* The temp file sits in the target's folder (``os.replace`` is atomic only
  within one file system) and is named ``.NAME.lodtmp-<random>``: hidden, and
  never mistaken for data (see :func:`is_temp_path`).
* On a clean exit the temp file is fsynced, renamed over the target with
  ``os.replace`` and the folder is fsynced, so the rename itself is durable.
* On any exception, ``KeyboardInterrupt`` included, the temp file is removed
  and the target is untouched.
* Two writers on one target each have their own temp file; the last rename
  wins and the target is always one complete file.
* A target that exists and is not a regular file is never replaced: a
  character device (``/dev/null``, a terminal) or a FIFO, also through a
  symlink, is streamed into once the output is complete (the temp file then
  sits in the system's temp folder); anything else (a block device, a socket)
  is refused.
* A writer that reads the target before replacing it (an append, a tensor
  added to a container) passes ``lock_target=True``: it holds an exclusive
  ``flock`` on the target itself from before its copy until after its rename,
  so a second such writer waits, then starts from the first one's result.
  Nothing is lost between two appends.
* A writer holds an exclusive ``flock`` on its temp file until it is renamed or
  removed.  A process killed mid-write (``SIGKILL``, power loss) leaves its temp
  file behind, unlocked: the next write to the same target removes such
  leftovers (:func:`sweep_stale_temps`), and readers refuse temp files by name.
* While a temp file exists, ``SIGTERM`` raises ``KeyboardInterrupt`` in the
  main thread as ``SIGINT`` does (:func:`hold_sigterm`), so the temp file is
  removed instead of staying behind a killed process.
* The rename is the commit point.  ``SIGINT`` and ``SIGTERM`` that arrive
  while it runs are held back (:func:`commit_section`): once it is done they
  raise :class:`InterruptedAfterCommit` (the output holds the new content),
  and before it, ``KeyboardInterrupt`` (the output holds the old content).
* Python drops a ``KeyboardInterrupt`` raised inside a finalizer (``__del__``,
  a weakref callback: the signal landed while one ran).  A write notes the
  count of those when it starts (:func:`interrupt_mark`) and stops before its
  commit if one was dropped since (:func:`raise_if_interrupted_since`).

>>> import os, tempfile
>>> target = os.path.join(tempfile.mkdtemp(), "out.txt")
>>> with atomic_open(target) as f:
...     _ = f.write(b"hello")
>>> open(target, "rb").read()
b'hello'
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import stat
import sys
import tempfile
import threading
import time
from typing import BinaryIO, Iterator

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no locks, so no sweeping either
    fcntl = None

from .errors import LodError, LodExistsError, LodFileNotFoundError, LodUsageError

#: marks lodtool's temp files: ``.NAME.lodtmp-<random>``
TEMP_MARK = ".lodtmp-"
_MAX_BASE = 200  # keep temp names under the usual 255-byte limit
#: a leftover temp file younger than this is never swept (its writer may not have locked it yet)
SWEEP_MIN_AGE = 10.0


class InterruptedAfterCommit(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived while a write committed, and the write completed: the output holds the new content.

    A ``KeyboardInterrupt``, so whatever stops on Ctrl-C stops; a caller that
    cleans up after an interrupted write must keep what was committed (running
    the command again would add the data twice).  ``committed`` is the path
    written (the command line exits 0 naming it), ``signum`` the signal.

    >>> exc = InterruptedAfterCommit(2, "out.lod.h5")
    >>> isinstance(exc, KeyboardInterrupt), exc.committed, exc.signum
    (True, 'out.lod.h5', 2)
    """

    def __init__(self, signum: int, committed: str):
        super().__init__(f"interrupted ({signal_name(signum)}) after {committed} was committed; it is complete")
        self.signum = signum
        self.committed = committed


def signal_name(signum: int) -> str:
    """``SIGTERM`` for 15; ``signal N`` for a number that names no signal.

    >>> signal_name(2), signal_name(999)
    ('SIGINT', 'signal 999')
    """
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


#: the signals a commit holds back until it is complete
COMMIT_SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM") if hasattr(signal, n))
_signal_lock = threading.RLock()
_sigterm_holders = 0
_commit_depth = 0
_commit_entry: dict = {}  # each held signal's handler when the outermost section began: how it is delivered
_commit_restore: dict = {}  # the handlers the outermost section puts back (a hold of SIGTERM may change one)
_commit_pending: list[int] = []
_commit_target: list[str] = []  # what the outermost section commits


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _sigterm_handler():
    """SIGTERM's handler as the process has it (the one a commit section restores, while one runs)."""
    return _commit_restore.get(signal.SIGTERM, signal.SIG_IGN) if _commit_depth else signal.getsignal(signal.SIGTERM)


def _set_sigterm_handler(handler) -> None:
    if _commit_depth:
        if signal.SIGTERM in _commit_restore:
            _commit_restore[signal.SIGTERM] = handler
    elif _in_main_thread():  # a writer collected in another thread leaves it to the next hold to set
        signal.signal(signal.SIGTERM, handler)


def hold_sigterm() -> bool:
    """Until :func:`release_sigterm`, make ``SIGTERM`` raise ``KeyboardInterrupt`` (as ``SIGINT`` does).

    A process that gets ``SIGTERM`` with its default action dies at once and
    leaves its temp files; with the signal raising, the cleanup of the writes
    in progress runs first.  Only the main thread can set a handler, and a
    handler the application installed is kept: then this does nothing and
    returns ``False``.  Holds nest; pass the result to :func:`release_sigterm`.

    >>> held = hold_sigterm()
    >>> release_sigterm(held)
    """
    global _sigterm_holders
    if not hasattr(signal, "SIGTERM") or not _in_main_thread():
        return False
    with _signal_lock:
        if _sigterm_holders == 0:
            if _sigterm_handler() not in (signal.SIG_DFL, _raise_interrupt):
                return False
            _set_sigterm_handler(_raise_interrupt)
        _sigterm_holders += 1
    return True


def release_sigterm(held: bool) -> None:
    """End a :func:`hold_sigterm` (given its result); the last one restores the default action."""
    global _sigterm_holders
    if not held:
        return
    with _signal_lock:
        _sigterm_holders -= 1
        if _sigterm_holders == 0:
            _set_sigterm_handler(signal.SIG_DFL)


def _defer(signum, frame) -> None:
    _commit_pending.append(signum)


_swallowed_interrupts = 0  # KeyboardInterrupts dropped by a finalizer in the main thread
_unraisablehook_before = None  # the hook that gets every other unraisable exception
#: whether an interrupt a finalizer dropped also goes on to the hook set before (Python's "Exception ignored"
#: report); the command line, which reports an interrupt in one line of its own, turns it off
report_dropped_interrupts = True


def _note_swallowed_interrupt(unraisable) -> None:
    global _swallowed_interrupts
    if issubclass(unraisable.exc_type, KeyboardInterrupt) and _in_main_thread():
        _swallowed_interrupts += 1  # the write in progress raises it again
        if not report_dropped_interrupts:
            return
    _unraisablehook_before(unraisable)


def interrupt_mark() -> int:
    """How many interrupts a finalizer dropped so far: a write notes it as it starts.

    Python prints and drops a ``KeyboardInterrupt`` raised inside ``__del__``
    or a weakref callback (h5py's objects have both), so a Ctrl-C that lands
    there would let the write run on to its commit.  Each call makes
    ``sys.unraisablehook`` count those (each goes on to the hook that was set
    before too, unless :data:`report_dropped_interrupts` is off);
    :func:`raise_if_interrupted_since` compares.

    >>> raise_if_interrupted_since(interrupt_mark())
    """
    global _unraisablehook_before
    with _signal_lock:
        if sys.unraisablehook is not _note_swallowed_interrupt:
            _unraisablehook_before, sys.unraisablehook = sys.unraisablehook, _note_swallowed_interrupt
    return _swallowed_interrupts


def raise_if_interrupted_since(mark: int) -> None:
    """Raise ``KeyboardInterrupt`` if a finalizer dropped one since :func:`interrupt_mark` returned ``mark``."""
    if _swallowed_interrupts != mark:
        raise KeyboardInterrupt


@contextlib.contextmanager
def commit_section(target: str | os.PathLike) -> Iterator[None]:
    """Hold ``SIGINT`` and ``SIGTERM`` back while the block commits the write of ``target`` (a rename: short).

    A signal that arrived meanwhile takes effect when the block ends: if the
    block completed, as :class:`InterruptedAfterCommit` naming the outermost
    section's ``target`` (the commit is done;
    an application's own handler is called instead, and a default ``SIGTERM``
    ends the process); if the block failed, as ``KeyboardInterrupt`` raised
    from its error.  Sections nest: the outermost one delivers.  Signals
    arrive in the main thread only; elsewhere the block runs as it is.

    >>> with commit_section("out.txt"):
    ...     committed = True
    >>> committed
    True
    """
    global _commit_depth
    if not _in_main_thread():
        yield
        return
    with _signal_lock:
        if _commit_depth == 0:
            _commit_target[:] = [os.fspath(target)]
            _commit_pending.clear()
            _commit_entry.clear()
            _commit_restore.clear()
            for signum in COMMIT_SIGNALS:
                handler = signal.getsignal(signum)
                if handler is not signal.SIG_IGN and handler is not None:
                    _commit_entry[signum] = _commit_restore[signum] = handler
                    signal.signal(signum, _defer)
        _commit_depth += 1
    try:
        yield
    except BaseException as exc:
        pending = _end_commit_section()
        if pending and not isinstance(exc, KeyboardInterrupt):
            raise KeyboardInterrupt from exc
        raise
    pending = _end_commit_section()
    if pending:
        _deliver(*pending)


def _end_commit_section() -> tuple | None:
    """Leave a :func:`commit_section`; the outermost restores the handlers and returns ``(signal, handler at
    entry, target)`` of the first signal held back."""
    global _commit_depth
    with _signal_lock:
        _commit_depth -= 1
        if _commit_depth:
            return None
        for signum, handler in _commit_restore.items():
            signal.signal(signum, handler)
        # Read only once the handlers are back: a signal held until then is in the list, and a later one is
        # handled where it arrives, not appended to a list already read.
        first = _commit_pending[0] if _commit_pending else None
        pending = None if first is None else (first, _commit_entry.get(first), _commit_target[0])
        _commit_pending.clear()
        return pending


@contextlib.contextmanager
def intermediate_commit() -> Iterator[None]:
    """Mark the writes in the block as steps of a larger write (a shard, before the manifest that names it).

    A signal held back by their commit interrupts the larger write, which is
    not committed yet: :class:`InterruptedAfterCommit` becomes a plain
    ``KeyboardInterrupt`` here.

    >>> try:
    ...     with intermediate_commit():
    ...         raise InterruptedAfterCommit(2, "part-00000.lod.h5")
    ... except KeyboardInterrupt as exc:
    ...     isinstance(exc, InterruptedAfterCommit)
    False
    """
    try:
        yield
    except InterruptedAfterCommit as exc:
        raise KeyboardInterrupt from exc


def _deliver(signum: int, handler, target: str) -> None:
    """Deliver a held-back signal after the commit of ``target``."""
    if handler in (signal.default_int_handler, _raise_interrupt):
        raise InterruptedAfterCommit(signum, target)
    if handler is signal.SIG_DFL:
        signal.raise_signal(signum)  # the default action (SIGTERM: end the process); the commit is complete
    elif callable(handler):
        handler(signum, None)


def temp_path_for(target: str | os.PathLike) -> str:
    """A fresh temp file name next to ``target`` (the file is not created).

    >>> os.path.basename(temp_path_for("/data/x.h5")).startswith(".x.h5.lodtmp-")
    True
    """
    target = os.fspath(target)
    folder, base = os.path.split(target)
    return os.path.join(folder, f".{base[:_MAX_BASE]}{TEMP_MARK}{os.urandom(6).hex()}")


def is_temp_path(path: str | os.PathLike) -> bool:
    """Whether ``path`` names one of lodtool's temp files (left behind only by a killed process).

    >>> is_temp_path("/data/.x.h5.lodtmp-0123456789ab"), is_temp_path("/data/x.h5")
    (True, False)
    """
    base = os.path.basename(os.fspath(path))
    return base.startswith(".") and TEMP_MARK in base


def _try_lock(fd: int) -> bool:
    """Take an exclusive lock on ``fd`` without waiting; ``False`` if another process holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:  # EWOULDBLOCK: held; ENOLCK/EINVAL: a file system without locks
        return False


def _is_token(text: str) -> bool:
    return len(text) == 12 and all(c in "0123456789abcdef" for c in text)


def sweep_stale_temps(target: str | os.PathLike, min_age: float = SWEEP_MIN_AGE) -> list[str]:
    """Remove the temp files of ``target`` left by killed writers; return their paths.

    A temp file is stale when no process holds its lock (its writer died:
    the kernel drops a dead process's locks) and it is older than ``min_age``
    seconds.  Temp files of live writers, files of other targets and anything
    on a file system without ``flock`` are left alone.

    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> leftover = os.path.join(folder, ".x.h5.lodtmp-0123456789ab")
    >>> _ = open(leftover, "wb").write(b"half a file")
    >>> [os.path.basename(p) for p in sweep_stale_temps(os.path.join(folder, "x.h5"), min_age=0)]
    ['.x.h5.lodtmp-0123456789ab']
    """
    if fcntl is None:  # pragma: no cover
        return []
    folder, base = os.path.split(os.fspath(target))
    prefix = f".{base[:_MAX_BASE]}{TEMP_MARK}"
    try:
        names = [n for n in os.listdir(folder or ".") if n.startswith(prefix) and _is_token(n[len(prefix):])]
    except OSError:
        return []
    removed = []
    now = time.time()
    for name in names:
        path = os.path.join(folder, name)
        try:  # never block on, or follow, something planted under a temp name (a FIFO, a symlink)
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
        except OSError:  # renamed or removed meanwhile
            continue
        try:
            info = os.fstat(fd)
            if stat.S_ISREG(info.st_mode) and now - info.st_mtime >= min_age and _try_lock(fd):
                os.unlink(path)
                removed.append(path)
        except OSError:
            pass
        finally:
            os.close(fd)
    return removed


def _resolve_target(target: str | os.PathLike, follow_symlinks: bool = True) -> str:
    target = os.fspath(target)
    if os.path.islink(target):
        if not follow_symlinks:
            raise LodUsageError(f"{target}: is a symbolic link; this write replaces files, never writes through a link")
        target = os.path.realpath(target)  # write through a symlink, keep the link
    if os.path.isdir(target):
        raise LodUsageError(f"{target}: is a folder; give a file name to write")
    return target


def is_stream_target(target: str | os.PathLike) -> bool:
    """Whether ``target`` exists as a character device or a FIFO (written into, never replaced).

    Anything else that exists and is not a regular file or a folder (a block
    device, a socket) is refused with :class:`~lodtool.errors.LodUsageError`.

    >>> is_stream_target(os.devnull), is_stream_target("/no/such/file")
    (True, False)
    """
    info = _stat(target)  # follows symlinks: /dev/stdout, a link to /dev/null
    if info is None:
        return False
    mode = info.st_mode
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return True
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return False
    kind = "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a regular file"
    raise LodUsageError(f"{os.fspath(target)}: is {kind}; lodtool writes regular files, character devices "
                        "and FIFOs only")


def refuse_output_over_input(output, inputs) -> None:
    """Raise :class:`~lodtool.errors.LodUsageError` if the path ``output`` is the same file as one of ``inputs``.

    For outputs that are not containers (JSON, NPZ) and for ``pack``: writing
    them would replace the input.  (A container output may name its input: the
    result is added to it atomically, see :func:`lodtool.save`.)

    >>> import os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "x.h5")
    >>> open(p, "wb").close()
    >>> refuse_output_over_input(p, [p])
    Traceback (most recent call last):
    ...
    lodtool.errors.LodUsageError: ... is the same file as the input ...
    """
    out = _stat(output)
    if out is None or not stat.S_ISREG(out.st_mode):  # a device or FIFO is written into, not replaced
        return
    for src in inputs:
        if _same_file(_stat(src), out):
            raise LodUsageError(f"{os.fspath(output)}: is the same file as the input {os.fspath(src)}; writing it "
                                "would replace the input: give another -o")


def _stat(path) -> os.stat_result | None:
    """``os.stat`` of a path (``-`` and streams are none), or ``None`` where there is nothing to stat."""
    if not isinstance(path, (str, os.PathLike)) or os.fspath(path) == "-":
        return None
    try:
        return os.stat(path)
    except OSError:
        return None


def _same_file(a: os.stat_result | None, b: os.stat_result | None) -> bool:
    return a is not None and b is not None and (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def fsync_folder(folder: str) -> None:
    """fsync a folder so that a rename inside it is durable (a no-op where unsupported)."""
    try:
        fd = os.open(folder or ".", os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. Windows
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - some file systems refuse fsync on folders
        pass
    finally:
        os.close(fd)


class AtomicPath:
    """A temp path that replaces ``target`` on :meth:`commit`, or vanishes on :meth:`discard`.

    With ``copy_existing=True`` the temp file starts as a copy of the target
    (how appends work: the original is never opened for writing).  As a context
    manager it yields the temp path and commits on a clean exit.  A target that
    is a symbolic link is written through (the link is kept), or with
    ``follow_symlinks=False`` refused; the rename replaces a name, so a link
    made meanwhile is replaced, never written through.  While the temp file
    exists, ``SIGTERM`` raises ``KeyboardInterrupt`` (:func:`hold_sigterm`), so
    it is removed; the rename runs in a :func:`commit_section`.

    >>> import os, tempfile
    >>> target = os.path.join(tempfile.mkdtemp(), "x.bin")
    >>> with AtomicPath(target) as tmp:
    ...     _ = open(tmp, "wb").write(b"new")
    >>> open(target, "rb").read()
    b'new'
    """

    def __init__(self, target: str | os.PathLike, *, copy_existing: bool = False, lock_target: bool = False,
                 follow_symlinks: bool = True):
        self.target = _resolve_target(target, follow_symlinks)
        self._follow = follow_symlinks
        self._lock_fd: int | None = None
        self._target_fd: int | None = None
        #: the target did not exist when a locking writer started: commit creates it, never replaces one
        self._create_only = False
        #: a character device or FIFO: the finished temp file is streamed into it, never renamed over it
        self.streamed = is_stream_target(self.target)
        self._tmpdir = tempfile.mkdtemp(prefix="lodtool-") if self.streamed else None
        if not self.streamed:
            sweep_stale_temps(self.target)
        self._sigterm = hold_sigterm()
        self._interrupts = interrupt_mark()
        self._open = False
        self.tmp: str | None = None
        try:  # an interrupt at any point here removes the temp file (discard knows it from the moment it exists)
            self._create()
            if lock_target and not self.streamed:
                self._lock_target()
            if copy_existing:
                self.copy_target()
        except BaseException:
            self.discard()
            raise

    def _lock_target(self) -> None:
        """Wait for an exclusive flock on the target that is still the target (none if it does not exist)."""
        if fcntl is None:  # pragma: no cover
            return
        while True:
            try:
                fd = os.open(self.target, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            except FileNotFoundError:  # nothing to start from; commit must not replace a file made meanwhile
                self._create_only = True
                return
            except OSError as exc:
                raise LodUsageError(f"{self.target}: cannot read it ({exc.strerror or exc})") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)  # waits while another writer of this target runs
            except OSError:  # a file system without locks: go on unlocked, as before
                os.close(fd)
                return
            if _same_file(_stat(self.target), os.fstat(fd)):
                self._target_fd = fd
                return
            os.close(fd)  # the previous writer renamed its result over it: lock the new file

    def copy_target(self) -> None:
        """Start the temp file as a copy of the target (how appends work: the original is never written)."""
        if self.streamed or not os.path.exists(self.target):
            return
        try:
            shutil.copyfile(self.target, self.tmp, follow_symlinks=self._follow)
        except BaseException:
            self.discard()
            raise

    def _create(self) -> None:
        """Create and lock the temp file; ``self.tmp`` names it from the moment it exists."""
        tmp = temp_path_for(self.target)  # 48 random bits: O_EXCL refuses a name taken
        if self._tmpdir is not None:
            tmp = os.path.join(self._tmpdir, os.path.basename(tmp))
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            self.tmp, self._open = tmp, True
        except FileNotFoundError:
            raise LodFileNotFoundError(f"{self.target}: the folder {os.path.dirname(self.target) or '.'!r} "
                                       "does not exist") from None
        except OSError as exc:
            raise LodUsageError(f"{self.target}: cannot write here ({exc.strerror or exc})") from None
        except BaseException:  # an interrupt as the file was made: the name is ours alone (O_EXCL)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        if fcntl is not None and _try_lock(fd):
            self._lock_fd = fd  # held until the rename or removal: "a live writer owns this file"
        else:
            os.close(fd)

    def commit(self) -> None:
        """fsync the temp file, rename it over the target, fsync the folder."""
        if not self._open:
            raise LodUsageError(f"{self.target}: this atomic write is already finished")
        if self.streamed:
            self._stream_out()
            return
        try:
            raise_if_interrupted_since(self._interrupts)
            fd = os.open(self.tmp, os.O_RDWR)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            if os.path.exists(self.target) and not os.path.islink(self.target):
                with contextlib.suppress(OSError):
                    shutil.copymode(self.target, self.tmp)
            with commit_section(self.target):  # the rename is the commit point: a signal takes effect after it, never inside
                if self._create_only:
                    self._create_target()
                else:
                    os.replace(self.tmp, self.target)
                self._open = False
                self._unlock()
                fsync_folder(os.path.dirname(self.target))
        except BaseException as exc:
            self.discard()
            if isinstance(exc, OSError) and exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC):
                raise LodUsageError(f"{self.target}: cannot write here ({exc.strerror})") from None
            raise

    def _create_target(self) -> None:
        """Give the temp file the target's name only if no file has that name (a hard link, then unlink)."""
        try:
            os.link(self.tmp, self.target)
        except FileExistsError:
            raise LodExistsError(f"{self.target}: another writer created it while this one ran; nothing was "
                                 "written (run again to add to it)") from None
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
                raise
            os.replace(self.tmp, self.target)  # a file system without hard links: as before
            return
        os.unlink(self.tmp)

    def _stream_out(self) -> None:
        """Copy the finished temp file into the device or FIFO (opened without O_CREAT or O_TRUNC)."""
        try:
            fd = os.open(self.target, os.O_WRONLY)
            with open(self.tmp, "rb") as src, os.fdopen(fd, "wb") as out:
                copy_to_stream(src, out)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise LodUsageError(f"{self.target}: cannot write here ({exc.strerror or exc})") from None
        finally:
            self.discard()

    def discard(self) -> None:
        """Remove the temp file; the target is untouched (or already replaced, after :meth:`commit`)."""
        if self._open:
            self._open = False
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.tmp)
        self._unlock()
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)

    def _unlock(self) -> None:
        release_sigterm(self._sigterm)
        self._sigterm = False
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._lock_fd)
            self._lock_fd = None
        if self._target_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._target_fd)
            self._target_fd = None

    def __del__(self) -> None:  # dropped uncommitted (an interrupt between its creation and its owner's cleanup)
        with contextlib.suppress(Exception):
            if self._open:
                self.discard()

    def __enter__(self) -> str:
        return self.tmp

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.discard()


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike, *, copy_existing: bool = False,
                follow_symlinks: bool = True) -> Iterator[str]:
    """Yield a temp path next to ``target``; on a clean exit it replaces ``target``.

    A symbolic link is written through, or with ``follow_symlinks=False`` refused (see :class:`AtomicPath`).

    On any exception (``KeyboardInterrupt`` included) the temp file is removed
    and ``target`` keeps its old contents.

    >>> import os, tempfile
    >>> target = os.path.join(tempfile.mkdtemp(), "x.txt")
    >>> with atomic_path(target) as tmp:
    ...     _ = open(tmp, "w").write("one")
    >>> try:
    ...     with atomic_path(target) as tmp:
    ...         _ = open(tmp, "w").write("half")
    ...         raise RuntimeError("boom")
    ... except RuntimeError:
    ...     pass
    >>> open(target).read(), sorted(os.listdir(os.path.dirname(target)))
    ('one', ['x.txt'])
    """
    with _naming_the_output(os.fspath(target)), \
            AtomicPath(target, copy_existing=copy_existing, follow_symlinks=follow_symlinks) as tmp:
        yield tmp


def is_stream(target) -> bool:
    """Whether ``target`` is a writable binary stream rather than a path.

    >>> import io
    >>> is_stream(io.BytesIO()), is_stream("x.h5")
    (True, False)
    """
    return hasattr(target, "write") and not isinstance(target, (str, bytes, os.PathLike))


@contextlib.contextmanager
def atomic_open(target: str | os.PathLike | BinaryIO, mode: str = "wb", *,
                follow_symlinks: bool = True) -> Iterator[BinaryIO]:
    """An open binary file whose contents reach ``target`` only on a clean exit.

    ``target`` is a path (written atomically) or a writable binary stream such
    as ``sys.stdout.buffer``: the output is spooled to an anonymous temp file and
    copied to the stream only on success, so a failure writes nothing there.

    >>> import io
    >>> buf = io.BytesIO()
    >>> with atomic_open(buf) as f:
    ...     _ = f.write(b"abc")
    >>> buf.getvalue()
    b'abc'
    """
    if mode not in ("wb", "w+b", "wb+"):
        raise LodUsageError(f"atomic_open writes binary files; mode {mode!r} is not supported")
    if is_stream(target):
        with _naming_the_output("a temporary file spooling the output"), \
                tempfile.TemporaryFile(prefix="lodtool-") as spool:
            yield spool
            spool.seek(0)
            copy_to_stream(spool, target)
        return
    with atomic_path(target, follow_symlinks=follow_symlinks) as tmp, open(tmp, mode) as f:
        yield f


@contextlib.contextmanager
def _naming_the_output(name: str) -> Iterator[None]:
    """A write that fails without a file name (a full disk: ``[Errno 28]``) names the output it was for."""
    try:
        yield
    except OSError as exc:
        if exc.filename is not None or exc.errno is None or isinstance(exc, (LodError, BrokenPipeError)):
            raise
        try:
            named = type(exc)(exc.errno, exc.strerror, name)
        except TypeError:  # an OSError subclass with another signature: as it came
            raise exc from None
        raise named from None


def publish(local: str | os.PathLike, url: str, storage_options=None) -> None:
    """Put the finished local file ``local`` in object storage as ``url``, whole or not at all.

    An object store (:data:`lodtool.storage.WHOLE_OBJECT_PROTOCOLS`) shows an
    object only once its single PUT, or its multipart upload, completes, and
    an upload that fails is aborted: a failure, a kill or a lost connection
    leaves nothing under ``url`` (an object already there stays as it was).
    Any other file system gets a temp name beside ``url`` (named as
    :func:`temp_path_for` names them) moved over it at the end.  The upload
    runs in a :func:`commit_section`: ``SIGINT``/``SIGTERM`` wait until it is
    done or has failed.

    >>> import tempfile
    >>> src = os.path.join(tempfile.mkdtemp(), "x.bin")
    >>> _ = open(src, "wb").write(b"whole")
    >>> publish(src, "memory://lodtool-doc/x.bin")
    >>> from lodtool import storage
    >>> storage.read_bytes("memory://lodtool-doc/x.bin", 100)
    b'whole'
    """
    from . import storage

    given = storage.current_options() if storage_options is None else storage_options
    fs, path = storage.filesystem(url, given)
    with commit_section(storage.redact(url)), storage.translate(url, "cannot write it", given):
        if storage.protocol(url) in storage.WHOLE_OBJECT_PROTOCOLS:
            fs.put_file(os.fspath(local), path)
        else:
            tmp = temp_path_for(path)
            try:
                fs.put_file(os.fspath(local), tmp)
                fs.mv(tmp, path)
            except BaseException:
                with contextlib.suppress(Exception):
                    fs.rm_file(tmp)
                raise
    with contextlib.suppress(Exception):
        fs.invalidate_cache(path)


#: a staging prefix whose writer cannot be checked (another machine) is swept once nothing was put in it for this long
STAGING_MIN_AGE = 3600.0
#: the object in a staging prefix naming its writer (host and process), put there first
STAGING_OWNER = "lodtool-writer.json"


def _staging_parent(folder: str) -> tuple[str, str] | None:
    """``(parent URL, folder name)`` of a folder URL, or ``None`` for the root of a bucket (it has no parent)."""
    from . import storage

    base = folder.rstrip("/")
    parent, _, name = base.rpartition("/")
    _, path = storage.filesystem(base)
    return (parent, name) if "/" in path.strip("/") else None


def staging_for(folder: str) -> str:
    """A fresh staging prefix for a folder in object storage: what a writer puts there stays out of the folder
    until its commit copies it in (:func:`copy_object`) and :func:`remove_staging` removes the rest.

    The prefix sits beside the folder, named as :func:`temp_path_for` names
    temp files (``.NAME.lodtmp-<random>``; inside the folder where the folder
    is a bucket's root), and first gets :data:`STAGING_OWNER`, naming this host
    and process, so a later write can tell one left by a killed process
    (:func:`sweep_stale_staging`).

    >>> staged = staging_for("memory://lodtool-doc/corpus")
    >>> staged.startswith("memory://lodtool-doc/.corpus.lodtmp-")
    True
    >>> remove_staging(staged)
    """
    import json
    import socket

    from . import storage

    where = _staging_parent(folder)
    staging = temp_path_for(folder.rstrip("/")) if where else storage.join(folder, TEMP_MARK + os.urandom(6).hex())
    owner = json.dumps({"host": socket.gethostname(), "pid": os.getpid()}).encode()
    with tempfile.TemporaryDirectory(prefix="lodtool-") as tmp:
        with open(os.path.join(tmp, STAGING_OWNER), "wb") as f:
            f.write(owner)
        publish(os.path.join(tmp, STAGING_OWNER), storage.join(staging, STAGING_OWNER))
    return staging


def copy_object(src: str, dst: str) -> None:
    """Copy the object ``src`` to ``dst`` in the same store, inside it (S3's server-side copy: no byte comes
    through this process), whole or not at all.

    >>> import tempfile
    >>> src = os.path.join(tempfile.mkdtemp(), "x.bin")
    >>> _ = open(src, "wb").write(b"shard")
    >>> publish(src, "memory://lodtool-doc/staged/x.bin")
    >>> copy_object("memory://lodtool-doc/staged/x.bin", "memory://lodtool-doc/folder/x.bin")
    >>> from lodtool import storage
    >>> storage.read_bytes("memory://lodtool-doc/folder/x.bin", 100)
    b'shard'
    """
    from . import storage

    given = storage.current_options()
    fs, src_path = storage.filesystem(src, given)
    _, dst_path = storage.filesystem(dst, given)
    with commit_section(storage.redact(dst)), storage.translate(dst, "cannot write it", given):
        fs.copy(src_path, dst_path)
    with contextlib.suppress(Exception):
        fs.invalidate_cache(dst_path)


def remove_staging(staging: str) -> None:
    """Delete a staging prefix and everything in it (best effort: a leftover is swept by a later write).

    >>> from lodtool import storage
    >>> staged = staging_for("memory://lodtool-doc/out")
    >>> storage.exists(storage.join(staged, STAGING_OWNER))
    True
    >>> remove_staging(staged)
    >>> storage.exists(storage.join(staged, STAGING_OWNER))
    False
    """
    from . import storage

    fs, path = storage.filesystem(staging)
    with contextlib.suppress(Exception):
        fs.rm(path.rstrip("/"), recursive=True)
    with contextlib.suppress(Exception):
        fs.invalidate_cache(path)


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):  # another user's process, or not a pid at all
        return True
    return True


def _staging_is_stale(staging: str, min_age: float) -> bool:
    """Whether a staging prefix was left by a writer that is gone: its owner is a process of this host that no
    longer runs, or (a writer elsewhere) nothing was put in it for ``min_age`` seconds."""
    import json
    import socket

    from . import storage

    fs, path = storage.filesystem(staging)
    try:
        owner = json.loads(storage.read_bytes(storage.join(staging, STAGING_OWNER), 4096))
        if owner.get("host") == socket.gethostname() and isinstance(owner.get("pid"), int):
            return not _process_alive(owner["pid"])
    except (LodError, ValueError, AttributeError):  # no owner (its upload never finished), or not ours
        pass
    with contextlib.suppress(Exception):
        entries = fs.ls(path.rstrip("/"), detail=True, refresh=True)
        times = []
        for entry in entries:
            when = entry.get("LastModified") or entry.get("mtime") or entry.get("created")
            if hasattr(when, "timestamp"):
                times.append(when.timestamp())
            elif isinstance(when, (int, float)):
                times.append(float(when))
        return bool(times) and time.time() - max(times) >= min_age
    return False


def sweep_stale_staging(folder: str, min_age: float = STAGING_MIN_AGE) -> list[str]:
    """Remove the staging prefixes (:func:`staging_for`) of the folder ``folder`` in object storage that killed
    writers left; return the names of the objects that were staged in them (a writer killed while its commit
    copied them may have left some under the folder: the caller removes those that no commit names).

    A writer of this host is gone when its process no longer runs; one of
    another host, once nothing was put in its prefix for ``min_age`` seconds.

    >>> staged = staging_for("memory://lodtool-doc/sweep")
    >>> sweep_stale_staging("memory://lodtool-doc/sweep", min_age=0)  # this process's own: it is running
    []
    >>> remove_staging(staged)
    """
    from . import storage

    where = _staging_parent(folder)
    parent, name = where if where else (folder.rstrip("/"), "")
    mark = f".{name[:_MAX_BASE]}{TEMP_MARK}" if where else TEMP_MARK
    staged: list[str] = []
    for entry in storage.list_names(parent):
        if not (entry.startswith(mark) and _is_token(entry[len(mark):])):
            continue
        staging = storage.join(parent, entry)
        if _staging_is_stale(staging, min_age):
            staged += [n for n in storage.list_names(staging) if n != STAGING_OWNER]
            remove_staging(staging)
    return staged


def copy_to_stream(src: BinaryIO, stream: BinaryIO, bufsize: int = 1 << 20) -> None:
    """Copy an open binary file to a stream and flush it."""
    shutil.copyfileobj(src, stream, bufsize)
    with contextlib.suppress(AttributeError, OSError, ValueError):
        stream.flush()


__all__ = ["AtomicPath", "atomic_path", "commit_section", "intermediate_commit", "hold_sigterm", "release_sigterm",
           "interrupt_mark", "raise_if_interrupted_since",
           "InterruptedAfterCommit", "COMMIT_SIGNALS", "atomic_open", "temp_path_for", "is_temp_path", "is_stream", "is_stream_target",
           "refuse_output_over_input",
           "fsync_folder", "copy_to_stream", "sweep_stale_temps", "TEMP_MARK", "publish", "staging_for", "copy_object",
           "remove_staging", "sweep_stale_staging", "STAGING_MIN_AGE"]
