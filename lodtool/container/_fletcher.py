"""HDF5's Fletcher-32 chunk checksum, computed here for direct chunk writes and mapped reads.

libhdf5's filter pipeline runs on one thread and copies each chunk, which made
it most of the cost of an uncompressed ``pack``.  For datasets whose only filter
is fletcher32, the writer instead computes the checksum here (with the GIL
released so the parse thread keeps running) and hands each finished chunk to
``H5Dwrite_chunk``.  The stored bytes are exactly what the filter writes: the
chunk, then the checksum as a little-endian uint32; any HDF5 reader verifies
them as usual.

This is ``H5_checksum_fletcher32`` from libhdf5's ``H5checksum.c``: 16-bit
big-endian words, sums folded every 360 words, an odd last byte as a high byte.
Two implementations give the same sums: libhdf5's own function, called through
``ctypes`` from the library h5py loaded (about 2.5 GB/s, nothing to import;
:func:`native`), and a Numba kernel (about 5 GB/s, after Numba's ~0.4 s
load).  The kernel runs where Numba is loaded already or libhdf5's function
cannot be found (a platform without ``/proc/self/maps``, a library that does not
export it); libhdf5's function everywhere else.

>>> import numpy as np
>>> fletcher32_chunks(np.frombuffer(b"abcde", np.uint8), 5).tolist()  # what libhdf5 stores for these bytes
[1341139399]
"""

from __future__ import annotations

import ctypes
import os

import numpy as np
from .._jit import kernel, numba_loaded

#: (bytes, the sum libhdf5 stores) the function found in libhdf5 must give before it is used: an odd length, and
#: more than one 360-word block of every byte value
_KNOWN_SUMS = ((b"abcde", 1341139399), (bytes(range(256)) * 4, 353763583))
_UNSEARCHED = object()
_native = _UNSEARCHED


@kernel
def _fletcher32(words, tail, start, nwords, odd):  # pragma: no cover - compiled
    # Each 360-word block in closed form (sum1 += sum(w); sum2 += n*sum1 + n*sum(w) - sum(j*w_j)):
    # two plain reductions that vectorise, and the same integers as libhdf5's loop,
    # which was sized so that none of its sums overflow.
    sum1 = np.uint32(0)
    sum2 = np.uint32(0)
    pos = start
    left = nwords
    while left > 0:
        block = min(left, 360)
        s1 = np.uint32(0)
        sj = np.uint32(0)
        chunk = words[pos:pos + block]
        for j in range(block):
            x = np.uint32(chunk[j])
            w = ((x & np.uint32(0xFF)) << np.uint32(8)) | (x >> np.uint32(8))  # big-endian 16-bit word
            s1 += w
            sj += np.uint32(j) * w
        # sum over j of (block - j) * w_j, in uint32 like libhdf5 (mod 2**32 the same integers)
        sum2 += np.uint32(block) * sum1 + np.uint32(block) * s1 - sj
        sum1 += s1
        pos += block
        left -= block
        sum1 = (sum1 & np.uint32(0xFFFF)) + (sum1 >> np.uint32(16))
        sum2 = (sum2 & np.uint32(0xFFFF)) + (sum2 >> np.uint32(16))
    if odd:
        sum1 += np.uint32(tail) << np.uint32(8)
        sum2 += sum1
        sum1 = (sum1 & np.uint32(0xFFFF)) + (sum1 >> np.uint32(16))
        sum2 = (sum2 & np.uint32(0xFFFF)) + (sum2 >> np.uint32(16))
    sum1 = (sum1 & np.uint32(0xFFFF)) + (sum1 >> np.uint32(16))
    sum2 = (sum2 & np.uint32(0xFFFF)) + (sum2 >> np.uint32(16))
    return (sum2 << np.uint32(16)) | sum1


@kernel
def _fletcher32_each(data, words, chunk_bytes, out):  # pragma: no cover - compiled
    for i in range(out.shape[0]):
        start = i * chunk_bytes
        nbytes = min(chunk_bytes, data.shape[0] - start)
        odd = nbytes % 2
        tail = data[start + nbytes - 1] if odd else np.uint8(0)
        if start % 2 == 0:
            out[i] = _fletcher32(words, tail, start // 2, nbytes // 2, odd)
        else:  # an odd chunk size: re-align this chunk's words
            aligned = data[start:start + nbytes - odd].copy().view(np.uint16)
            out[i] = _fletcher32(aligned, tail, 0, nbytes // 2, odd)


def _loaded_libhdf5() -> str | None:
    """The path of the libhdf5 this process has loaded (h5py's), from ``/proc/self/maps``; None elsewhere."""
    import h5py  # noqa: F401 - its extension modules load libhdf5

    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rstrip("\n").partition("/")[2]
                name = os.path.basename(path)
                if name.startswith("libhdf5") and "_hl" not in name and ".so" in name:
                    return "/" + path
    except OSError:  # not Linux
        return None
    return None


def native():
    """libhdf5's own ``H5_checksum_fletcher32(buffer, size)`` through ``ctypes`` (it releases the GIL), once it
    gave the known sums; None where it cannot be found (the Numba kernel is used then).

    >>> fn = native()
    >>> fn is None or fn(b"abcde", 5) == 1341139399
    True
    """
    global _native
    if _native is _UNSEARCHED:
        _native = None
        path = _loaded_libhdf5()
        try:
            fn = ctypes.CDLL(path).H5_checksum_fletcher32 if path else None
        except (OSError, AttributeError):
            fn = None
        if fn is not None:
            fn.restype, fn.argtypes = ctypes.c_uint32, [ctypes.c_void_p, ctypes.c_size_t]
            if all(fn(data, len(data)) == value for data, value in _KNOWN_SUMS):
                _native = fn
    return _native


def compiled_without_numba() -> bool:
    """Whether the sums run compiled in this process without importing Numba (libhdf5's function, or Numba
    loaded already)."""
    return numba_loaded() or native() is not None


def fletcher32_chunks(data: np.ndarray, chunk_bytes: int) -> np.ndarray:
    """The Fletcher-32 of each ``chunk_bytes`` slice of the flat uint8 buffer ``data`` (uint32; the last slice
    may be shorter), by libhdf5's function, or by the Numba kernel where Numba is loaded or that is not found."""
    count = -(-data.shape[0] // chunk_bytes) if chunk_bytes else 0
    out = np.empty(count, np.uint32)
    if not count:
        return out
    fn = None if numba_loaded() else native()
    if fn is not None:
        data = np.ascontiguousarray(data)
        base, size = data.ctypes.data, data.shape[0]
        for i in range(count):
            start = i * chunk_bytes
            out[i] = fn(base + start, min(chunk_bytes, size - start))
        return out
    words = data[: data.shape[0] // 2 * 2].view(np.uint16)
    _fletcher32_each(data, words, np.int64(chunk_bytes), out)
    return out
