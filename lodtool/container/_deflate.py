"""Shuffle + deflate (+ fletcher32) chunks computed in a thread pool, for ``H5Dwrite_chunk``.

libhdf5 runs its filters on one thread, holding h5py's lock: shuffle + deflate
level 1 ran at about 150 MB/s here, slower than the disk.  The writer instead
encodes whole chunks here, on every core (the codec releases the GIL), and
hands each encoded chunk to ``write_direct_chunk`` (in the calling thread, under
h5py's lock, which h5py 3.16 takes there; the pool's
threads never call libhdf5).  The stored bytes are those
of HDF5's standard pipeline, in its order: the byte shuffle (filter 2) of the
chunk (the last one padded with the fill value, zero), its zlib stream
(deflate, filter 1), then the Fletcher-32 of those bytes as a little-endian
uint32 (filter 3).  So any HDF5 reader (h5dump, MATLAB, Julia, netCDF) decodes
them with its built-in filters.

The codec is python-isal's zlib-compatible ``isal_zlib`` where it is installed
(several times faster than zlib at levels 1-3), else the standard ``zlib``.
The Fletcher-32 of a compressed chunk is computed by :mod:`._fletcher`
(libhdf5's own function, or its Numba kernel where Numba is loaded); where
that would need Numba imported, in closed form with NumPy for small work, and
by the kernel once this process has written :data:`FLETCHER_FROM_BYTES` (a
work-size tier: small writes never import Numba).

>>> import zlib, numpy as np
>>> chunk = np.arange(4, dtype="<i4").view(np.uint8)
>>> enc = encode_chunks(chunk, chunk.nbytes, 4, level=1, fletcher32=True)[0]
>>> zlib.decompress(enc[:-4]) == shuffle(chunk, 4).tobytes()
True
>>> int.from_bytes(enc[-4:], "little") == fletcher32(enc[:-4])
True
"""

from __future__ import annotations

import os
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .._jit import kernels_pay, thread_limit
from ._fletcher import compiled_without_numba

_UNLOADED = object()
#: python-isal's ``isal_zlib``, the fast codec (an optional dependency: ``isal``), imported on first use (its import
#: costs ~40 ms, which an uncompressed write never needs); None where it is not installed (zlib then)
_isal = _UNLOADED

#: HDF5 filter ids of the pipeline this module writes
SHUFFLE, DEFLATE, FLETCHER32 = 2, 1, 3
#: uncompressed bytes of one write from which the Fletcher-32 sums run compiled (cold: Numba not imported yet;
#: warm: imported). Measured on 2-core AMD EPYC: the NumPy closed form sums ~100 MB/s of compressed chunks
#: (2/3 of the encoding time of token ids), the kernel several GB/s; Numba's import plus the cached kernel's
#: load cost ~0.4 s, what NumPy spends on ~40 MB of chunks, ~150 MB of token ids at deflate's ~25%.
FLETCHER_FROM_BYTES = (128 << 20, 256 << 10)
#: uncompressed bytes one pool task encodes (a few chunks: fewer, larger tasks cost less to hand out)
TASK_BYTES = 1 << 20

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def workers() -> int:
    """Threads that encode chunks: one per core this process may use (:func:`lodtool._jit.thread_limit`:
    ``LODTOOL_NUM_THREADS`` or ``NUMBA_NUM_THREADS`` lower it, and so does a Dask worker's thread count)."""
    return thread_limit()


def _forget_pool() -> None:
    """In a forked child: the parent's threads are gone, so the child starts a pool of its own."""
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def encoder_pool() -> ThreadPoolExecutor:
    """The threads that encode chunks (:func:`workers` of them), started on first use; the writer's direct path lays
    out its chunks in them too."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(workers(), thread_name_prefix="lodtool-deflate")
        return _pool


def codec_name(level: int) -> str:
    """Which codec encodes deflate ``level``: ``"isal"`` for 1-3 where installed, else ``"zlib"``.

    >>> codec_name(9)
    'zlib'
    """
    return "isal" if 1 <= level <= 3 and _isal_zlib() is not None else "zlib"


def _isal_zlib():
    global _isal
    if _isal is _UNLOADED:
        try:
            from isal import isal_zlib as found
        except ImportError:  # pragma: no cover - depends on the installation
            found = None
        _isal = found
    return _isal


def compress(data, level: int) -> bytes:
    """A zlib stream of ``data`` at zlib ``level`` (0-9), by :func:`codec_name`'s codec.

    >>> zlib.decompress(compress(b"abc" * 100, 1)) == b"abc" * 100
    True
    """
    if codec_name(level) == "isal":
        return _isal.compress(data, level)  # isal's levels 1-3 are its fast ones, like zlib's
    return zlib.compress(data, level)


def shuffle(chunk: np.ndarray, itemsize: int) -> np.ndarray:
    """HDF5's byte shuffle of the flat uint8 ``chunk`` (whole elements of ``itemsize`` bytes).

    >>> shuffle(np.arange(6, dtype=np.uint8), 2).tolist()
    [0, 2, 4, 1, 3, 5]
    """
    if itemsize <= 1:
        return chunk
    return np.ascontiguousarray(chunk.reshape(-1, itemsize).T).reshape(-1)


def fletcher32(data) -> int:
    """``H5_checksum_fletcher32`` of ``data`` (bytes or a flat uint8 array), in closed form.

    libhdf5 sums big-endian 16-bit words (an odd last byte as a high byte),
    ``sum1 = sum(w)`` and ``sum2 = sum of the running sum1``, folding both into
    16 bits as it goes.  A fold keeps the value modulo 65535 and keeps it
    positive, so each result is 0 for a zero sum and else ``(s - 1) % 65535 + 1``.

    >>> fletcher32(b"abcde")  # what libhdf5 stores for these bytes
    1341139399
    """
    buf = np.frombuffer(data, np.uint8) if not isinstance(data, np.ndarray) else data
    n = buf.shape[0]
    words = buf[: n - n % 2].view(">u2").astype(np.uint64)
    if n % 2:
        words = np.append(words, np.uint64(int(buf[-1]) << 8))
    m = words.shape[0]
    s1 = int(words.sum())
    weights = (np.uint64(m) - np.arange(m, dtype=np.uint64)) % np.uint64(65535)  # < 2**16: no overflow below
    if s1 == 0:  # all words zero; else both sums are positive
        return 0
    s2 = int((weights * words).sum())  # the true sum2 modulo 65535 (the weights were reduced)
    return (((s2 - 1) % 65535 + 1) << 16) | ((s1 - 1) % 65535 + 1)


def _checksum(enc: bytes, compiled: bool) -> int:
    if compiled:  # the direct path's compiled sums, GIL released: about 20x NumPy's closed form
        from ._fletcher import fletcher32_chunks

        return int(fletcher32_chunks(np.frombuffer(enc, np.uint8), len(enc))[0])
    return fletcher32(enc)


def _encode_group(flat: np.ndarray, chunk_bytes: int, itemsize: int, level: int, with_sum: bool,
                  compiled: bool) -> list[bytes]:
    count = flat.shape[0] // chunk_bytes
    grouped = flat.reshape(count, chunk_bytes // itemsize, itemsize)
    shuffled = np.ascontiguousarray(grouped.transpose(0, 2, 1)) if itemsize > 1 else grouped
    shuffled = shuffled.reshape(count, chunk_bytes)
    out = []
    for i in range(count):
        enc = compress(shuffled[i], level)
        if with_sum:
            enc += _checksum(enc, compiled).to_bytes(4, "little")
        out.append(enc)
    return out


def encode_chunks(flat: np.ndarray, chunk_bytes: int, itemsize: int, *, level: int, fletcher32: bool,
                  compiled: bool = False) -> list[bytes]:
    """The stored bytes of each ``chunk_bytes`` chunk of the flat uint8 ``flat`` (in this thread).

    A short last chunk is padded with zeros (HDF5's fill value) first.
    ``compiled`` computes the Fletcher-32 sums with :func:`._fletcher.fletcher32_chunks`.
    """
    count = -(-flat.shape[0] // chunk_bytes) if chunk_bytes else 0
    if flat.shape[0] < count * chunk_bytes:
        padded = np.zeros(count * chunk_bytes, np.uint8)
        padded[: flat.shape[0]] = flat
        flat = padded
    return _encode_group(flat, chunk_bytes, itemsize, level, fletcher32, compiled) if count else []


def write_chunks(ds, start: int, block: np.ndarray, rows: int, *, level: int, fletcher32: bool) -> None:
    """Write ``block`` at row ``start`` (a chunk boundary) of ``ds`` as whole, encoded chunks.

    Chunks are written in order while later ones are still being encoded.
    """
    chunk_bytes = rows * (block.nbytes // max(block.shape[0], 1))
    flat = block.reshape(-1).view(np.uint8)
    zeros = (0,) * (block.ndim - 1)
    # kernels_pay adds up the blocks it turns away: a long pack of small blocks pays Numba's import once
    compiled = fletcher32 and (compiled_without_numba() or kernels_pay(block.nbytes, *FLETCHER_FROM_BYTES))
    count = -(-flat.shape[0] // chunk_bytes)
    per_task = max(TASK_BYTES // chunk_bytes, 1)
    tasks = []
    pool = encoder_pool() if count > per_task and workers() > 1 else None  # one thread allowed: encode here
    for first in range(0, count, per_task):
        part = flat[first * chunk_bytes:(first + per_task) * chunk_bytes]
        if pool is None:
            tasks.append((first, encode_chunks(part, chunk_bytes, block.dtype.itemsize, level=level,
                                               fletcher32=fletcher32, compiled=compiled)))
        else:
            tasks.append((first, pool.submit(encode_chunks, part, chunk_bytes, block.dtype.itemsize, level=level,
                                             fletcher32=fletcher32, compiled=compiled)))
    dsid = ds.id
    for first, encoded in tasks:
        if not isinstance(encoded, list):
            encoded = encoded.result()
        for i, enc in enumerate(encoded):
            dsid.write_direct_chunk((start + (first + i) * rows,) + zeros, enc)  # h5py takes its lock


__all__ = ["encode_chunks", "write_chunks", "shuffle", "fletcher32", "compress", "codec_name", "workers",
           "encoder_pool"]
