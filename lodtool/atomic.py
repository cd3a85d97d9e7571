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
import stat
import tempfile
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


def _resolve_target(target: str | os.PathLike) -> str:
    target = os.fspath(target)
    if os.path.islink(target):  # write through a symlink, keep the link
        target = os.path.realpath(target)
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
    try:
        mode = os.stat(os.fspath(target)).st_mode  # follows symlinks: /dev/stdout, a link to /dev/null
    except OSError:
        return False
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
    if not isinstance(output, (str, os.PathLike)) or os.fspath(output) == "-":
        return
    try:
        out = os.stat(output)
    except OSError:
        return
    if not stat.S_ISREG(out.st_mode):  # a device or FIFO is written into, not replaced
        return
    for src in inputs:
        if not isinstance(src, (str, os.PathLike)) or os.fspath(src) == "-":
            continue
        try:
            info = os.stat(src)
        except OSError:
            continue
        if (info.st_dev, info.st_ino) == (out.st_dev, out.st_ino):
            raise LodUsageError(f"{os.fspath(output)}: is the same file as the input {os.fspath(src)}; writing it "
                                "would replace the input: give another -o")


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
    manager it yields the temp path and commits on a clean exit.

    >>> import os, tempfile
    >>> target = os.path.join(tempfile.mkdtemp(), "x.bin")
    >>> with AtomicPath(target) as tmp:
    ...     _ = open(tmp, "wb").write(b"new")
    >>> open(target, "rb").read()
    b'new'
    """

    def __init__(self, target: str | os.PathLike, *, copy_existing: bool = False, lock_target: bool = False):
        self.target = _resolve_target(target)
        self._lock_fd: int | None = None
        self._target_fd: int | None = None
        #: the target did not exist when a locking writer started: commit creates it, never replaces one
        self._create_only = False
        #: a character device or FIFO: the finished temp file is streamed into it, never renamed over it
        self.streamed = is_stream_target(self.target)
        self._tmpdir = tempfile.mkdtemp(prefix="lodtool-") if self.streamed else None
        if not self.streamed:
            sweep_stale_temps(self.target)
        self.tmp = self._create()
        self._open = True
        if lock_target and not self.streamed:
            try:
                self._lock_target()
            except BaseException:
                self.discard()
                raise
        if copy_existing:
            self.copy_target()

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
            held = os.fstat(fd)
            try:
                now = os.stat(self.target)
            except FileNotFoundError:
                now = None
            if now is not None and (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
                self._target_fd = fd
                return
            os.close(fd)  # the previous writer renamed its result over it: lock the new file

    def copy_target(self) -> None:
        """Start the temp file as a copy of the target (how appends work: the original is never written)."""
        if self.streamed or not os.path.exists(self.target):
            return
        try:
            shutil.copyfile(self.target, self.tmp)
        except BaseException:
            self.discard()
            raise

    def _create(self) -> str:
        for _ in range(100):
            tmp = temp_path_for(self.target)
            if self._tmpdir is not None:
                tmp = os.path.join(self._tmpdir, os.path.basename(tmp))
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            except FileExistsError:  # pragma: no cover - 48 random bits collided
                continue
            except FileNotFoundError:
                raise LodFileNotFoundError(f"{self.target}: the folder {os.path.dirname(self.target) or '.'!r} "
                                           "does not exist") from None
            except OSError as exc:
                raise LodUsageError(f"{self.target}: cannot write here ({exc.strerror or exc})") from None
            if fcntl is not None and _try_lock(fd):
                self._lock_fd = fd  # held until the rename or removal: "a live writer owns this file"
            else:
                os.close(fd)
            return tmp
        raise LodUsageError(f"{self.target}: cannot create a temp file next to it")  # pragma: no cover

    def commit(self) -> None:
        """fsync the temp file, rename it over the target, fsync the folder."""
        if not self._open:
            raise LodUsageError(f"{self.target}: this atomic write is already finished")
        if self.streamed:
            self._stream_out()
            return
        try:
            fd = os.open(self.tmp, os.O_RDWR)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            if self._create_only:
                self._create_target()
            else:
                if os.path.exists(self.target):
                    with contextlib.suppress(OSError):
                        shutil.copymode(self.target, self.tmp)
                os.replace(self.tmp, self.target)
        except BaseException as exc:
            self.discard()
            if isinstance(exc, OSError) and exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC):
                raise LodUsageError(f"{self.target}: cannot write here ({exc.strerror})") from None
            raise
        self._open = False
        self._unlock()
        fsync_folder(os.path.dirname(self.target))

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
                shutil.copyfileobj(src, out, 1 << 20)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise LodUsageError(f"{self.target}: cannot write here ({exc.strerror or exc})") from None
        finally:
            self.discard()

    def discard(self) -> None:
        """Remove the temp file; the target is untouched."""
        self._open = False
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.tmp)
        self._unlock()
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._lock_fd)
            self._lock_fd = None
        if self._target_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._target_fd)
            self._target_fd = None

    def __enter__(self) -> str:
        return self.tmp

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.discard()


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike, *, copy_existing: bool = False) -> Iterator[str]:
    """Yield a temp path next to ``target``; on a clean exit it replaces ``target``.

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
    with _naming_the_output(os.fspath(target)), AtomicPath(target, copy_existing=copy_existing) as tmp:
        yield tmp


def is_stream(target) -> bool:
    """Whether ``target`` is a writable binary stream rather than a path.

    >>> import io
    >>> is_stream(io.BytesIO()), is_stream("x.h5")
    (True, False)
    """
    return hasattr(target, "write") and not isinstance(target, (str, bytes, os.PathLike))


@contextlib.contextmanager
def atomic_open(target: str | os.PathLike | BinaryIO, mode: str = "wb") -> Iterator[BinaryIO]:
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
    with atomic_path(target) as tmp, open(tmp, mode) as f:
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


def copy_to_stream(src: BinaryIO, stream: BinaryIO, bufsize: int = 1 << 20) -> None:
    """Copy an open binary file to a stream and flush it."""
    shutil.copyfileobj(src, stream, bufsize)
    with contextlib.suppress(AttributeError, OSError, ValueError):
        stream.flush()


__all__ = ["AtomicPath", "atomic_path", "atomic_open", "temp_path_for", "is_temp_path", "is_stream", "is_stream_target",
           "refuse_output_over_input",
           "fsync_folder", "copy_to_stream", "sweep_stale_temps", "TEMP_MARK"]
