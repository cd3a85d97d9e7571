"""A Numba formatter of integer and bool LoD data as JSON: nested lists written straight into a byte buffer.

The general writer builds Python lists (``to_nested``) and dumps them with
orjson; that costs more than the dump itself.  This kernel walks the offsets
and writes the same bytes orjson would (``[1,-2,[3]]``: no spaces, integers in
decimal, ``true``/``false``) into one buffer: blocks of top-level sequences are
written in parallel, each from a place its bound (the widest value's width)
leaves room for, then moved together.  Floats keep the
general path (their shortest round-trip form needs a Ryu-like algorithm).

Its kernels compile on first use (:mod:`lodtool._jit`); :mod:`.json` calls it
only above a work-size crossover.

>>> import numpy as np
>>> encode_lines(np.array([1, -20, 3]), [np.array([0, 2, 3])], ()).tobytes()
b'[1,-20]\\n[3]\\n'
"""

from __future__ import annotations

import numpy as np

from .._jit import kernel, parallel_blocks

#: the two digits of 0..99, as text
_PAIRS = np.frombuffer("".join(f"{i:02d}" for i in range(100)).encode(), np.uint8).copy()


@kernel(inline="always")
def _digits(u):  # pragma: no cover - compiled
    # a sum of independent comparisons: no loop, no branch to mispredict on mixed widths
    n = 1 + np.int64(u >= np.uint64(10)) + np.int64(u >= np.uint64(100)) + np.int64(u >= np.uint64(1000))
    n += np.int64(u >= np.uint64(10000)) + np.int64(u >= np.uint64(100000)) + np.int64(u >= np.uint64(1000000))
    n += np.int64(u >= np.uint64(10000000)) + np.int64(u >= np.uint64(100000000))
    if u >= np.uint64(1000000000):  # rare in data lodtool formats: the wide tail keeps its loop
        p = np.uint64(1000000000)
        while n < 20 and u >= p:
            n += 1
            p *= np.uint64(10)
    return n


@kernel(inline="always")
def _put_uint(buf, pos, u, pairs):  # pragma: no cover - compiled
    """Write ``u`` in decimal at ``pos``, two digits at a time; returns the end."""
    end = pos + _digits(u)
    i = end
    while u >= np.uint64(100):
        q = u // np.uint64(100)
        r = np.int64(u - q * np.uint64(100))
        i -= 2
        buf[i] = pairs[2 * r]
        buf[i + 1] = pairs[2 * r + 1]
        u = q
    if u >= np.uint64(10):
        r = np.int64(u)
        buf[i - 2] = pairs[2 * r]
        buf[i - 1] = pairs[2 * r + 1]
    else:
        buf[i - 1] = np.uint8(48 + np.int64(u))
    return end


@kernel(inline="always")
def _put_unsigned(buf, pos, u, pairs):  # pragma: no cover - compiled
    """Write ``u`` (uint64) in decimal at ``pos``; returns the end.  One and two digits (most token ids)
    take a branch each before the general digit count."""
    if u < np.uint64(10):
        buf[pos] = np.uint8(48 + np.int64(u))
        return pos + 1
    if u < np.uint64(100):
        r = np.int64(u)
        buf[pos] = pairs[2 * r]
        buf[pos + 1] = pairs[2 * r + 1]
        return pos + 2
    return _put_uint(buf, pos, u, pairs)


@kernel(inline="always")
def _put_signed(buf, pos, v, pairs):  # pragma: no cover - compiled
    if v < 0:
        buf[pos] = 45  # '-'
        return _put_unsigned(buf, pos + 1, np.uint64(-(v + 1)) + np.uint64(1), pairs)  # int64's minimum too
    return _put_unsigned(buf, pos, np.uint64(v), pairs)


@kernel(inline="always")
def _put_bool(buf, pos, b):  # pragma: no cover - compiled
    if b:
        buf[pos] = 116  # true
        buf[pos + 1] = 114
        buf[pos + 2] = 117
        buf[pos + 3] = 101
        return pos + 4
    buf[pos] = 102  # false
    buf[pos + 1] = 97
    buf[pos + 2] = 108
    buf[pos + 3] = 115
    buf[pos + 4] = 101
    return pos + 5


@kernel(inline="always")
def _values_run(values, first, last, kind, buf, pos, pairs):  # pragma: no cover - compiled
    """Write ``values[first:last]`` comma-separated from ``pos``; returns the end.  One loop per kind, each
    value followed by a comma, the last one taken back: no test per value but the value's own."""
    if first == last:
        return pos
    if kind == 2:
        for r in range(first, last):
            pos = _put_bool(buf, pos, values[r])
            buf[pos] = 44  # ','
            pos += 1
    elif kind == 1:
        for r in range(first, last):
            pos = _put_unsigned(buf, pos, np.uint64(values[r]), pairs)
            buf[pos] = 44
            pos += 1
    else:
        for r in range(first, last):
            pos = _put_signed(buf, pos, np.int64(values[r]), pairs)
            buf[pos] = 44
            pos += 1
    return pos - 1


@kernel
def _sequences(values, kind, offs, lstart, nlev, first_seq, last_seq, sep, buf, pos,
               pairs):  # pragma: no cover - compiled
    """Write top-level sequences ``first_seq..last_seq`` from ``pos``, each followed by ``sep``; returns the end.

    ``offs[lstart[k]:lstart[k+1]]`` are the offsets of level ``k``; the last
    level's offsets index ``values``.  ``kind``: 0 signed, 1 unsigned, 2 bool.
    """
    idx = np.empty(nlev, np.int64)
    start = np.empty(nlev, np.int64)
    end = np.empty(nlev, np.int64)
    last = nlev - 1
    for i in range(first_seq, last_seq):
        k = 0
        start[0] = offs[lstart[0] + i]
        idx[0] = start[0]
        end[0] = offs[lstart[0] + i + 1]
        buf[pos] = 91  # '['
        pos += 1
        while k >= 0:
            if k == last:
                pos = _values_run(values, idx[k], end[k], kind, buf, pos, pairs)
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


@parallel_blocks
def _write_blocks(lo, hi, blk, values, kind, offs, lstart, nlev, bounds, sep, buf, starts, ends,
                  pairs):  # pragma: no cover - compiled
    for b in range(lo, hi):
        ends[b] = _sequences(values, kind, offs, lstart, nlev, bounds[b], bounds[b + 1], sep, buf, starts[b], pairs)


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
    else:  # widened (exactly): three compiled signatures in all, not one per integer dtype
        flat = flat.astype(np.uint64 if kind == 1 else np.int64, copy=False)
    lstart = np.zeros(len(levels) + 1, np.int64)
    lstart[1:] = np.cumsum([lv.shape[0] for lv in levels])
    offs = np.concatenate(levels)
    n_top = int(levels[0].shape[0]) - 1
    # blocks of whole top-level sequences, written in parallel, each from a place that its bound leaves room
    # for; then moved together.  One pass over the values (measuring first cost as much as writing).
    n_blocks = max(1, min(n_top, 64, 1 + flat.shape[0] // 16384))
    bounds = np.linspace(0, n_top, n_blocks + 1).astype(np.int64)
    room = _block_bounds(flat, kind, levels, bounds)
    starts = np.zeros(n_blocks + 1, np.int64)
    np.cumsum(room, out=starts[1:])
    buf = np.empty(int(starts[-1]), np.uint8)
    ends = np.empty(n_blocks, np.int64)
    _write_blocks(n_blocks, flat, kind, offs, lstart, len(levels), bounds, np.uint8(sep), buf, starts, ends, _PAIRS,
                  nblocks=n_blocks)  # one item a block: the blocks are the bounds' own
    size = 0
    for b in range(n_blocks):  # leftwards, in order: a block never lands on one not yet moved
        n = int(ends[b] - starts[b])
        if size != starts[b]:
            buf[size:size + n] = buf[starts[b]:ends[b]]
        size += n
    return buf[:size]


def _block_bounds(flat: np.ndarray, kind: int, levels: list[np.ndarray], bounds: np.ndarray) -> np.ndarray:
    """Bytes each block's text can take at most: its values at the widest value's width, plus a comma
    each, and two brackets, a comma and a separator for every sequence of every level."""
    if kind == 2:
        width = 5  # false
    elif flat.shape[0]:
        width = max(len(str(int(flat.max()))), len(str(int(flat.min()))))  # the minus sign included
    else:
        width = 1
    index = bounds
    sequences = np.zeros(bounds.shape[0] - 1, np.int64)
    for level in levels:
        sequences += np.diff(index)
        index = level[index]
    return np.diff(index) * (width + 1) + sequences * 4 + 8


__all__ = ["encode_lines"]
