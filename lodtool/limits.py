"""The memory limit that guards every allocation a file asks for.

Sizes read from a file are claims, not facts: a crafted file can claim a
billion rows.  Before any read that allocates, the container checks the claimed
size against a limit: ``max_memory=`` when given, else :func:`default_max_memory`,
``min(available memory / 2, 4 GiB)``.  Available memory is ``MemAvailable`` of
``/proc/meminfo``, capped by the cgroup (container) limit where there is one.

>>> check_memory(1 << 20, 1 << 30, "x.h5", "tensor 'a'")
>>> check_memory(8 << 30, 1 << 30, "x.h5", "tensor 'a'")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
lodtool.errors.LodMemoryError: x.h5: reading tensor 'a' needs 8.0 GiB, above the memory limit of 1.0 GiB ...
"""

from __future__ import annotations

import math
import os

import numpy as np

from .errors import LodMemoryError, LodUsageError

#: the default limit never exceeds this
DEFAULT_CAP = 4 << 30
#: bytes of input, or of rows, that one streaming step handles at a time: a reader's chunk, an
#: operator's chunk, a shard's copy (the unit of every bounded-memory pass)
STREAM_CHUNK_BYTES = 64 << 20


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def available_memory() -> int | None:
    """Bytes of memory available to this process now, or ``None`` if unknown."""
    avail = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    if avail is None:
        try:
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
            avail = None
    limit = _read_int("/sys/fs/cgroup/memory.max")
    if limit is not None:
        used = _read_int("/sys/fs/cgroup/memory.current") or 0
        room = max(limit - used, 0)
        avail = room if avail is None else min(avail, room)
    return avail


def default_max_memory() -> int:
    """``min(available memory / 2, 4 GiB)`` (4 GiB where the available memory is unknown).

    >>> 0 < default_max_memory() <= 4 << 30
    True
    """
    avail = available_memory()
    if avail is None:
        return DEFAULT_CAP
    return max(min(avail // 2, DEFAULT_CAP), 1 << 20)


def resolve_max_memory(max_memory: int | None) -> int:
    """The limit to use: ``max_memory`` if given (must be positive), else the default.

    >>> resolve_max_memory(1000)
    1000
    """
    if max_memory is None:
        return default_max_memory()
    if isinstance(max_memory, bool) or not isinstance(max_memory, int) or max_memory <= 0:
        raise LodUsageError(f"max_memory must be a positive number of bytes, got {max_memory!r}")
    return int(max_memory)


def human_bytes(n: int) -> str:
    """``1536`` -> ``'1.5 KiB'``.

    >>> human_bytes(3 << 30)
    '3.0 GiB'
    """
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024:
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} PiB"


def parse_size(size: int | str, what: str = "size") -> int:
    """A positive number of bytes from an integer or from text such as ``"512M"``, ``"1GB"``, ``"64KiB"``
    (units are powers of 1024); anything else is a :class:`LodUsageError` that names ``what``.

    >>> parse_size("1GB"), parse_size("256M"), parse_size("1.5KiB"), parse_size(4096)
    (1073741824, 268435456, 1536, 4096)
    >>> parse_size("lots", "shard size")
    Traceback (most recent call last):
    ...
    lodtool.errors.LodUsageError: bad shard size 'lots': write it as 512M, 2G or a number of bytes
    """
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}
    value = None
    if isinstance(size, (int, np.integer)) and not isinstance(size, (bool, np.bool_)):
        value = int(size)
    elif isinstance(size, str):
        body = size.strip().upper().removesuffix("B").removesuffix("I")
        unit = body[-1:] if body[-1:] in units else ""
        try:
            number = float(body[: len(body) - len(unit)])
        except ValueError:
            number = math.nan
        if math.isfinite(number):
            value = int(number * units[unit])
    if value is None:
        raise LodUsageError(f"bad {what} {size!r}: write it as 512M, 2G or a number of bytes")
    if value <= 0:
        raise LodUsageError(f"bad {what} {size!r}: must be positive")
    return value


def check_memory(nbytes: int, limit: int, path: str, what: str) -> None:
    """Raise :class:`LodMemoryError` if reading ``what`` would allocate more than ``limit`` bytes."""
    if nbytes > limit:
        raise LodMemoryError(f"{path}: reading {what} needs {human_bytes(nbytes)}, above the memory limit of "
                             f"{human_bytes(limit)} (raise it with max_memory=...)")


__all__ = ["available_memory", "default_max_memory", "resolve_max_memory", "check_memory", "human_bytes",
           "parse_size", "DEFAULT_CAP"]
