"""Run a file reader in a child process, so a crash or hang in libhdf5 becomes an error.

A crafted HDF5 file can make libhdf5 itself segfault or loop.  ``run_isolated``
forks a child that does the reading and sends the result back over a pipe; the
parent turns a dead or silent child into a one-line :class:`~lodtool.errors.LodReaderCrashError`.
"""

from __future__ import annotations

import multiprocessing
import os
import traceback
from typing import Any, Callable

from ..atomic import signal_name
from ..errors import LodError, LodFormatError, LodReaderCrashError

#: address-space cap of the child, so a hostile file cannot exhaust the machine
CHILD_ADDRESS_SPACE = 16 << 30


def run_isolated(fn: Callable[..., Any], *args: Any, path: str, timeout: float = 60.0,
                 address_space: int | None = CHILD_ADDRESS_SPACE) -> Any:
    """Call ``fn(*args)`` in a forked child; return its result or re-raise its ``LodError``.

    >>> run_isolated(sum, [1, 2, 3], path="x.h5")
    6
    """
    ctx = multiprocessing.get_context("fork")
    receiver, sender = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child, args=(sender, fn, args, address_space), daemon=True)
    child.start()
    sender.close()
    try:
        if not receiver.poll(timeout):
            child.kill()
            child.join()
            raise LodReaderCrashError(f"{path}: unreadable (the HDF5 reader timed out after {timeout:g} s)")
        try:
            status, payload = receiver.recv()
        except (EOFError, OSError):
            child.join()
            died = f", {signal_name(-child.exitcode)}" if (child.exitcode or 0) < 0 else ""
            raise LodReaderCrashError(f"{path}: unreadable (the HDF5 reader crashed{died})") from None
    finally:
        receiver.close()
    child.join()
    if status == "ok":
        return payload
    if isinstance(payload, LodError):
        raise payload
    raise LodFormatError(f"{path}: unreadable ({payload})")


def _child(sender, fn, args, address_space) -> None:  # pragma: no cover - runs in the child
    import faulthandler

    faulthandler.disable()  # the parent reports a crash in one line; no dump of the child's stack
    from .filters import ISOLATION_ENV

    os.environ[ISOLATION_ENV] = "child"  # this is the isolation opted-in plugin filters ask for
    if address_space:
        try:
            import resource

            soft, hard = resource.getrlimit(resource.RLIMIT_AS)
            # only ever lower a limit: a caller's tighter cap stays in force
            limit = min([address_space, *(x for x in (soft, hard) if x != resource.RLIM_INFINITY)])
            resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
        except (ImportError, ValueError, OSError):
            pass
    try:
        result = ("ok", fn(*args))
    except LodError as exc:
        result = ("error", exc)
    except MemoryError:
        result = ("error", "the file asks for more memory than the isolation limit")
    except BaseException as exc:  # anything else is reported, never re-raised in the child
        result = ("error", f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else
                  traceback.format_exception_only(type(exc), exc)[-1].strip())
    try:
        sender.send(result)
    except Exception as exc:  # an unpicklable result
        sender.send(("error", f"cannot return the result: {exc}"))
    finally:
        sender.close()
        os._exit(0)
