"""Copying runs of rows ("segments") from one array into another, on every backend.

Several operators (``sequence_concat``, ``sequence_slice``) move whole runs of
rows: segment ``i`` is ``length[i]`` rows read from row ``src_start[i]`` and
written from row ``dst_start[i]``.  This module holds that one primitive: the
rows it reads (:func:`segment_rows`, the NumPy reference's gather), a Numba
kernel (bytes moved as words, see :func:`lodtool.ops._util.as_words`) and the
CUDA gather of :mod:`lodtool.ops._cuda`, so each operator only computes its
segment table.

>>> import numpy as np
>>> segment_rows([7, 0], [2, 3]).tolist()
[7, 8, 0, 1, 2]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._jit import parallel_blocks
from ._util import U, as_words, words_of

_I64 = np.dtype(np.int64)


def copy_segments(src: np.ndarray, src_start: Any, dst_start: Any, length: Any, out: np.ndarray) -> None:
    """``out[dst_start[i]:+length[i]] = src[src_start[i]:+length[i]]`` for every ``i`` (host arrays).

    ``src`` and ``out`` have the same dtype and element shape; ``out`` is
    C-contiguous.  Segments must lie inside both arrays and must not overlap in
    ``out`` (the callers build them so; nothing else checks).

    >>> out = np.zeros((3, 2), np.float32)
    >>> copy_segments(np.ones((4, 2), np.float32), [1], [1], [2], out)
    >>> out[:, 0].tolist()
    [0.0, 1.0, 1.0]
    """
    src_start = np.asarray(src_start, _I64)
    dst_start = np.asarray(dst_start, _I64)
    length = np.asarray(length, _I64)
    srcw, k = as_words(src)
    outw = words_of(out, srcw.dtype) if k else None
    if k and len(length):
        _copy(len(length), srcw, U(k), src_start.view(np.uint64), dst_start.view(np.uint64), length.view(np.uint64),
              outw)


def segment_rows(start: Any, length: Any) -> np.ndarray:
    """Rows ``start[i] .. start[i] + length[i]`` of every segment ``i``, end to end (int64, on the host)."""
    length = np.asarray(length, _I64)
    at = np.zeros(len(length) + 1, _I64)
    np.cumsum(length, out=at[1:])
    return np.repeat(np.asarray(start, _I64) - at[:-1], length) + np.arange(at[-1], dtype=_I64)


def _ramp(length: np.ndarray, total: int) -> np.ndarray:
    """``0, 1, .., length[0]-1, 0, 1, .., length[1]-1, ..`` (``total`` values)."""
    return segment_rows(np.zeros(len(length), _I64), length)


def gather_segments_cuda(xp, src: Any, src_start: Any, seg_offsets: Any, n_out: int, out: Any) -> None:
    """On the device: output rows ``seg_offsets[i]..seg_offsets[i+1]`` from ``src`` rows ``src_start[i]..``.

    The segments tile the output in order (``seg_offsets`` starts at 0, never
    decreases and ends at ``n_out``), as the tiled gather of
    :mod:`lodtool.ops._cuda` needs; ``out`` is a fresh C-contiguous device array.
    """
    from . import _cuda

    srcw, k = _cuda.device_words(xp, src)
    outw, _ = _cuda.device_words(xp, out, srcw.dtype)
    nseg = int(seg_offsets.shape[0]) - 1
    _cuda.gather_rows(xp, srcw, k, seg_offsets, nseg, n_out, outw, mode=_cuda.MODE_BASE,
                       base=xp.ascontiguousarray(src_start.astype(_I64, copy=False)))


@parallel_blocks
def _copy(lo, hi, blk, xw, k, src_start, dst_start, length, outw):  # pragma: no cover - compiled
    """Segment ``i``: ``length[i]`` rows of ``k`` words from ``src_start[i]`` to ``dst_start[i]``."""
    for i in range(lo, hi):
        span = length[i] * k
        src = src_start[i] * k
        dst = dst_start[i] * k
        for j in range(span):
            outw[dst + j] = xw[src + j]


__all__ = ["copy_segments", "gather_segments_cuda", "segment_rows"]
