"""HDF5's Fletcher-32 chunk checksum, computed by a Numba kernel for direct chunk writes.

libhdf5 computes the fletcher32 filter at about 350 MB/s on one thread, which made
it most of the cost of an uncompressed ``pack``.  For datasets whose only filter
is fletcher32, the writer instead computes the checksum here (several GB/s, with
the GIL released so the parse thread keeps running) and hands each finished
chunk to ``H5Dwrite_chunk``.  The stored bytes are exactly what the filter
writes: the chunk, then the checksum as a little-endian uint32; any HDF5 reader
verifies them as usual.

This is ``H5_checksum_fletcher32`` from libhdf5's ``H5checksum.c``: 16-bit
big-endian words, sums folded every 360 words, an odd last byte as a high byte.

Its kernels compile on first use (:mod:`lodtool._jit`); :mod:`.writer` imports it only
for datasets that take the direct path.

>>> import numpy as np
>>> fletcher32_chunks(np.frombuffer(b"abcde", np.uint8), 5).tolist()  # what libhdf5 stores for these bytes
[1341139399]
"""

from __future__ import annotations

import numpy as np
from .._jit import kernel


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


def fletcher32_chunks(data: np.ndarray, chunk_bytes: int) -> np.ndarray:
    """The Fletcher-32 of each ``chunk_bytes`` slice of the flat uint8 buffer ``data`` (uint32)."""
    count = -(-data.shape[0] // chunk_bytes) if chunk_bytes else 0
    out = np.empty(count, np.uint32)
    if count:
        words = data[: data.shape[0] // 2 * 2].view(np.uint16)
        _fletcher32_each(data, words, np.int64(chunk_bytes), out)
    return out
