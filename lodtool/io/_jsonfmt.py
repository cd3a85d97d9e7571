"""A Numba formatter of integer and bool LoD data as JSON: nested lists written straight into a byte buffer.

The general writer builds Python lists (``to_nested``) and dumps them with
orjson; that costs more than the dump itself.  This kernel walks the offsets
and writes the same bytes orjson would (``[1,-2,[3]]``: no spaces, integers in
decimal, ``true``/``false``) into one preallocated buffer.  Floats keep the
general path (their shortest round-trip form needs a Ryu-like algorithm).

Its kernels compile on first use (:mod:`lodtool._jit`); :mod:`.json` calls it
only above a work-size crossover.

>>> import numpy as np
>>> encode_lines(np.array([1, -20, 3]), [np.array([0, 2, 3])], ()).tobytes()
b'[1,-20]\\n[3]\\n'
"""

from __future__ import annotations

import numpy as np

from .._jit import kernel

#: the widest decimal form of one value of each dtype, with its sign (bools: ``false``)
_WIDTH = {"b": 5, "i1": 4, "i2": 6, "i4": 11, "i8": 20, "u1": 3, "u2": 5, "u4": 10, "u8": 20}


def supported(dtype: np.dtype) -> bool:
    """Whether this formatter writes ``dtype`` (integers and bools).

    >>> supported(np.dtype("int32")), supported(np.dtype("float64"))
    (True, False)
    """
    return dtype.kind in "biu"


@kernel
def _write_int(buf, pos, v):  # pragma: no cover - compiled
    if v < 0:
        buf[pos] = 45  # '-'
        pos += 1
        u = np.uint64(-(v + 1)) + np.uint64(1)  # int64's minimum too
    else:
        u = np.uint64(v)
    n = 1
    t = u
    while t >= np.uint64(10):
        t //= np.uint64(10)
        n += 1
    end = pos + n
    for j in range(n):
        buf[end - 1 - j] = 48 + np.uint8(u % np.uint64(10))
        u //= np.uint64(10)
    return end


@kernel
def _write_uint(buf, pos, u):  # pragma: no cover - compiled
    n = 1
    t = u
    while t >= np.uint64(10):
        t //= np.uint64(10)
        n += 1
    end = pos + n
    for j in range(n):
        buf[end - 1 - j] = 48 + np.uint8(u % np.uint64(10))
        u //= np.uint64(10)
    return end


@kernel
def _encode(values, kind, offs, lstart, nlev, first_seq, last_seq, sep, buf):  # pragma: no cover - compiled
    """Write top-level sequences ``first_seq..last_seq`` into ``buf``, each followed by ``sep``; returns the end.

    ``offs[lstart[k]:lstart[k+1]]`` are the offsets of level ``k``; the last
    level's offsets index ``values``.  ``kind``: 0 signed, 1 unsigned, 2 bool.
    """
    pos = 0
    idx = np.empty(nlev, np.int64)
    start = np.empty(nlev, np.int64)
    end = np.empty(nlev, np.int64)
    for i in range(first_seq, last_seq):
        k = 0
        start[0] = offs[lstart[0] + i]
        idx[0] = start[0]
        end[0] = offs[lstart[0] + i + 1]
        buf[pos] = 91  # '['
        pos += 1
        while k >= 0:
            if k == nlev - 1:
                for r in range(idx[k], end[k]):
                    if r > idx[k]:
                        buf[pos] = 44  # ','
                        pos += 1
                    if kind == 0:
                        pos = _write_int(buf, pos, np.int64(values[r]))
                    elif kind == 1:
                        pos = _write_uint(buf, pos, np.uint64(values[r]))
                    elif values[r]:
                        buf[pos] = 116
                        buf[pos + 1] = 114
                        buf[pos + 2] = 117
                        buf[pos + 3] = 101
                        pos += 4
                    else:
                        buf[pos] = 102
                        buf[pos + 1] = 97
                        buf[pos + 2] = 108
                        buf[pos + 3] = 115
                        buf[pos + 4] = 101
                        pos += 5
                idx[k] = end[k]
            if idx[k] < end[k]:
                if idx[k] > start[k]:
                    buf[pos] = 44
                    pos += 1
                child = idx[k]
                k += 1
                start[k] = offs[lstart[k] + child]
                idx[k] = start[k]
                end[k] = offs[lstart[k] + child + 1]
                buf[pos] = 91
                pos += 1
            else:
                buf[pos] = 93  # ']'
                pos += 1
                k -= 1
                if k >= 0:
                    idx[k] += 1
        buf[pos] = sep
        pos += 1
    return pos


def _levels(n_rows: int, offsets, element_shape) -> list[np.ndarray]:
    """The LoD offsets, then one uniform level per element dimension, each indexing the next."""
    levels = [np.asarray(o, np.int64) for o in offsets]
    count = n_rows
    for d in element_shape:
        levels.append(np.arange(count + 1, dtype=np.int64) * int(d))
        count *= int(d)
    return levels


def encode_lines(data: np.ndarray, offsets, element_shape, sep: int = 10) -> np.ndarray:
    """The JSON text of each top-level sequence, each followed by ``sep`` (a newline), as one uint8 array."""
    levels = _levels(data.shape[0], offsets, tuple(element_shape))
    flat = np.ascontiguousarray(data).reshape(-1)
    kind = 2 if flat.dtype.kind == "b" else 1 if flat.dtype.kind == "u" else 0
    if kind == 2:
        flat = flat.view(np.uint8)
    key = "b" if kind == 2 else flat.dtype.str[1:]
    n_lists = sum(int(lv.shape[0]) - 1 for lv in levels)
    size = flat.shape[0] * (_WIDTH[key] + 1) + 3 * n_lists + 2
    buf = np.empty(size, np.uint8)
    lstart = np.zeros(len(levels) + 1, np.int64)
    lstart[1:] = np.cumsum([lv.shape[0] for lv in levels])
    offs = np.concatenate(levels) if levels else np.zeros(1, np.int64)
    n_top = int(levels[0].shape[0]) - 1
    end = _encode(flat, kind, offs, lstart, len(levels), 0, n_top, np.uint8(sep), buf)
    return buf[:end]


__all__ = ["encode_lines", "supported"]
