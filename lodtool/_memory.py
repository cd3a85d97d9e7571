"""Keep a streaming process's memory flat: freed chunk buffers go back to the operating system.

A streaming operator allocates and frees buffers of a few MiB per chunk.
glibc serves the first ones with ``mmap`` but then raises its threshold
(up to 32 MiB) and serves later ones from the heap, where freed blocks of
changing sizes fragment it: peak RSS then grows with the file (measured:
1.12-1.29x from a 220 MB to an 880 MB input, for softmax and reverse).
Fixing the threshold keeps every large buffer in ``mmap``, returned on free.
It is a setting of the whole process, so the library never makes it: the
``lodtool`` command does, for every command but ``pack`` (whose parse buffers
come and go so fast that fresh pages for each cost it 30% of its speed).

>>> keep_large_buffers_unpooled() in (True, False)
True
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

#: mallopt's parameter number for the mmap threshold (glibc's malloc.h)
_M_MMAP_THRESHOLD = -3
#: buffers at least this large are mmapped, and unmapped when freed
MMAP_THRESHOLD = 1 << 20

_done = False


def keep_large_buffers_unpooled(threshold: int = MMAP_THRESHOLD) -> bool:
    """Ask glibc to ``mmap`` every allocation of ``threshold`` bytes or more; ``False`` where that is not glibc.

    It changes the whole process (as ``MALLOC_MMAP_THRESHOLD_`` would) and is
    done once; an explicit ``MALLOC_MMAP_THRESHOLD_`` in the environment wins.
    """
    global _done
    if _done:
        return True
    if not sys.platform.startswith("linux") or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        ok = bool(libc.mallopt(_M_MMAP_THRESHOLD, int(threshold)))
    except (OSError, AttributeError):  # not glibc (musl has no mallopt), or no libc found
        return False
    _done = ok
    return ok


__all__ = ["keep_large_buffers_unpooled", "MMAP_THRESHOLD"]
