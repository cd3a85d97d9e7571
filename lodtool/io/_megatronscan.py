"""One pass over a Megatron/fairseq ``.idx``: are its arrays consistent?

:func:`lodtool.io.megatron.index_problems` asks this first; only an index
that fails it pays for the passes that name each violation.  One read of each
array checks every O(n) rule at once: lengths not negative, each pointer the
previous one plus its sequence's bytes (the first one 0), and
``document_indices`` starting at 0 and never decreasing.  Compiled where
Numba pays (:func:`lodtool._jit.kernels_pay`), else NumPy over cache-sized
blocks into reused buffers (the reference the kernel is tested against).

>>> import numpy as np
>>> lengths, pointers = np.array([2, 3], np.int32), np.array([0, 8], np.int64)
>>> arrays_consistent(lengths, pointers, np.array([0, 1, 2], np.int64), 4)
True
>>> arrays_consistent(lengths, np.array([0, 6], np.int64), np.array([0, 2], np.int64), 4)
False
"""

from __future__ import annotations

import ctypes
import functools

import numpy as np
from .._jit import kernel, kernels_pay

#: entries per block: a block is checked with one vectorised read, and the scan stops after the first bad one
_BLOCK = 1 << 14
#: entries per NumPy block: its scratch buffers stay in cache
_NUMPY_BLOCK = 1 << 17
#: (cold, warm) entries from which the kernel pays (:func:`lodtool._jit.kernels_pay`). Measured on 2-core AMD
#: EPYC: NumPy checks ~4 ns an entry, the kernel under 1; Numba's import plus the cached kernel's load cost
#: ~0.4 s, what NumPy spends on ~100M entries
SCAN_FROM = (100_000_000, 1 << 12)


@kernel
def _consistent(lengths, pointers, docs, itemsize):  # pragma: no cover - compiled
    n = lengths.shape[0]
    if n and pointers[0] != 0:
        return False
    for start in range(0, n, _BLOCK):
        stop = min(start + _BLOCK, n)
        ln = lengths[start:stop]
        bad = False
        for j in range(stop - start):  # indices from 0: the loop vectorises
            bad |= ln[j] < 0
        chained = min(stop, n - 1) - start
        if chained > 0:
            here = pointers[start:start + chained]
            nxt = pointers[start + 1:start + 1 + chained]
            for j in range(chained):
                bad |= nxt[j] != here[j] + np.int64(ln[j]) * itemsize
        if bad:
            return False
    d = docs.shape[0]
    if d and docs[0] != 0:
        return False
    for start in range(0, d - 1, _BLOCK):
        stop = min(start + _BLOCK, d - 1)
        head = docs[start:stop]
        nxt = docs[start + 1:stop + 1]
        bad = False
        for j in range(stop - start):
            bad |= nxt[j] < head[j]
        if bad:
            return False
    return True


@functools.cache
def _memcmp():
    """libc's ``memcmp`` through ``ctypes`` (it releases the GIL), or None where no C library is found."""
    try:
        fn = ctypes.CDLL(None).memcmp
    except (OSError, AttributeError):  # not a POSIX C library
        return None
    fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    return fn


def _chained_numpy(lengths: np.ndarray, pointers: np.ndarray, itemsize: int) -> bool:
    """``lengths`` not negative, and each pointer the one before plus its sequence's bytes: per block, the lengths
    widened (read unsigned) and scaled, the pointers added, and the sums compared with the next pointers byte for
    byte (``memcmp``, where the pointers are in this machine's byte order; else NumPy).

    Chained from 0 by lengths read unsigned, a negative length (2**31 or
    more unsigned) would put the last pointer at ``itemsize * 2**31`` or past
    it (no sum wraps below 2**28 sequences), so below that bound the chain
    rules negative lengths out and only the last length's sign is read; above
    it every block's lengths are checked too.
    """
    n = lengths.shape[0]
    if not n:
        return True
    if int(lengths[n - 1]) < 0:
        return False
    signs = not (n < 1 << 28 and 0 <= int(pointers[n - 1]) < itemsize << 31)
    unsigned = lengths.view(lengths.dtype.str.replace("i", "u"))
    expected = np.empty(min(n, _NUMPY_BLOCK), np.int64)
    same = _memcmp() if pointers.dtype.isnative and pointers.flags.c_contiguous else None
    mask = np.empty(expected.shape[0], np.bool_) if same is None else None
    shift = itemsize.bit_length() - 1 if itemsize & (itemsize - 1) == 0 else None
    for start in range(0, n - 1, _NUMPY_BLOCK):
        chained = min(start + _NUMPY_BLOCK, n - 1) - start
        e = expected[:chained]
        np.copyto(e, unsigned[start:start + chained])
        if signs and int(lengths[start:start + chained].min()) < 0:  # read from the cache after the copy
            return False
        if shift is not None:
            e <<= shift
        else:
            e *= itemsize
        e += pointers[start:start + chained]
        following = pointers[start + 1:start + 1 + chained]
        if same is not None:
            if same(e.ctypes.data, following.ctypes.data, chained * 8):
                return False
        elif not np.equal(e, following, out=mask[:chained]).all():
            return False
    return True


def _consistent_numpy(lengths: np.ndarray, pointers: np.ndarray, docs: np.ndarray, itemsize: int) -> bool:
    n = lengths.shape[0]
    if n and int(pointers[0]) != 0:
        return False
    return _chained_numpy(lengths, pointers, itemsize) and _docs_ordered(docs)


def _docs_ordered(docs: np.ndarray) -> bool:
    """``docs`` starting at 0 (when not empty) and never decreasing."""
    d = docs.shape[0]
    if d and int(docs[0]) != 0:
        return False
    mask = np.empty(max(min(d, _NUMPY_BLOCK), 1), np.bool_)
    for start in range(0, d - 1, _NUMPY_BLOCK):
        stop = min(start + _NUMPY_BLOCK, d - 1)
        if np.less(docs[start + 1:stop + 1], docs[start:stop], out=mask[:stop - start]).any():
            return False
    return True


def arrays_consistent(lengths: np.ndarray, pointers: np.ndarray, docs: np.ndarray | None, itemsize: int, *,
                      compiled: bool | None = None) -> bool:
    """Whether int32 ``lengths``, int64 ``pointers`` and int64 ``docs`` (None for fairseq) break none of the O(n)
    rules of an MMIDIDX index (``docs``' last entry and the ``.bin`` size are the caller's O(1) checks).

    ``compiled`` picks the kernel (True) or NumPy (False); None: the kernel where
    :data:`SCAN_FROM` says it pays.
    """
    docs = np.empty(0, np.int64) if docs is None else np.asarray(docs)
    lengths, pointers = np.asarray(lengths), np.asarray(pointers)
    if compiled is None:
        compiled = kernels_pay(lengths.shape[0] + docs.shape[0], *SCAN_FROM)
    if compiled:
        return bool(_consistent(lengths, pointers, docs, np.int64(itemsize)))
    return _consistent_numpy(lengths, pointers, docs, itemsize)
