"""``sequence_topk_avg_pooling``: the averages of the k largest values of each row of each matching matrix.

As Paddle's ``sequence_topk_avg_pooling`` (text matching models): sequence ``i``
of ``x`` holds ``channel_num`` matrices of ``row_i x col_i`` values, stored
channel by channel, row by row, where ``row_i`` and ``col_i`` are the lengths
of sequence ``i`` of ``row`` and ``column``.  For every matrix row, the values
are ranked (largest first) and, for each ``k`` of ``topks``, the sum of the
first ``k`` is divided by ``k``; where the row has fewer than ``k`` values the
missing ones count as 0 (the sum of what there is, still divided by ``k``).
The output has one row per matrix row, ``channel_num * len(topks)`` values
(channel by channel), and ``row``'s LoD; ``return_pos=True`` adds the ranked
column of each of the ``max(topks)`` places per (row, channel), ``-1`` where
there is none (Paddle's int32 ``pos`` output).

Paddle 3.3.1 no longer registers this operator, so lodtool follows its CPU
kernel and its unit test (test/sequence/test_sequence_topk_avg_pooling.py, whose
two cases are in ``tests/test_ops_topk_avg_pool.py``).  Ties rank the lower
column first, as Paddle's selection does.  Where lodtool differs on purpose:
Paddle never selects a value <= -1e7 (its "removed" marker), and a row of no
columns trips an assertion there; lodtool ranks every value (NaN last) and
gives a row of no columns zeros and ``pos`` -1.  Sums run in the data's float
dtype, rank by rank, as Paddle's (float16 in float32, rounded once; integer and
bool data give float64).

>>> import numpy as np
>>> from lodtool import LoDTensor
>>> x = LoDTensor(np.array([1.0, 5.0, 3.0, 2.0, 2.0, 8.0]), [[0, 6]])  # 1 channel, 2 rows of 3
>>> row, col = LoDTensor(np.zeros(2), [[0, 2]]), LoDTensor(np.zeros(3), [[0, 3]])
>>> sequence_topk_avg_pooling(x, row, col, topks=[1, 2]).data.tolist()
[[5.0, 4.0], [8.0, 5.0]]
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .._jit import kernel, parallel_blocks
from ..errors import LodDtypeError, LodShapeError, LodUsageError
from ..tensor import LoDTensor
from . import _cuda
from ._backend import get_backend
from ._util import U, as_tensor, need_lod, need_one_value_per_row

#: bound to ``numba.cuda`` in the CUDA kernels' globals when they compile (see _cuda.jit_kernels)
cuda: Any = None

OP = "sequence_topk_avg_pooling"


def sequence_topk_avg_pooling(x: LoDTensor, row: Any, column: Any, topks: Sequence[int], channel_num: int = 1, *,
                              return_pos: bool = False, backend: str | None = None, device: str | None = None):
    """Average the top ``k`` values of every matrix row, for each ``k`` in ``topks`` (Paddle's op).

    ``x``: one value per row (shape ``(N,)`` or ``(N, 1)``), a 1-level LoD whose
    sequence ``i`` holds ``channel_num * row_i * col_i`` values.  ``row`` and
    ``column``: LoDTensors whose level-0 lengths are ``row_i`` and ``col_i`` (their
    data is not read), or those lengths as lists.  Returns a LoDTensor, or
    ``(out, pos)`` with ``return_pos=True``.  ``backend``: ``"numba"`` (default)
    or ``"numpy"`` (the reference); ``device="cuda"``: one GPU thread per
    (matrix row, channel), the same bits.

    >>> import numpy as np
    >>> from lodtool import LoDTensor
    >>> x = LoDTensor(np.array([4.0, 1.0, 9.0, 6.0]), [[0, 4]])  # 2 channels of 1 row of 2
    >>> out, pos = sequence_topk_avg_pooling(x, [1], [2], topks=[1, 3], channel_num=2, return_pos=True)
    >>> out.data.tolist(), pos.tolist()
    ([[4.0, 1.6666666666666667, 9.0, 5.0]], [0, 1, -1, 0, 1, -1])
    """
    xt = as_tensor(x, "x")
    need_lod(xt, OP)
    need_one_value_per_row(xt.element_shape, OP)
    if xt.dtype.kind == "c":
        raise LodDtypeError(f"{OP}: x has dtype {xt.dtype}; complex values cannot be ranked")
    ks = _topks(topks)
    if isinstance(channel_num, (bool, np.bool_)) or not isinstance(channel_num, (int, np.integer)) or channel_num < 1:
        raise LodUsageError(f"{OP}: channel_num must be an integer >= 1, got {channel_num!r}")
    channels = int(channel_num)
    xoff = _cuda.to_host(xt.offsets[-1])  # sizes are checked on the host: these offsets are small
    roff = _lengths_offsets(row, "row")
    coff = _lengths_offsets(column, "column")
    n = len(xoff) - 1
    if len(roff) - 1 != n or len(coff) - 1 != n:
        raise LodShapeError(f"{OP}: x has {n} sequences, row {len(roff) - 1} and column {len(coff) - 1}; "
                            "they must be equal")
    rows, cols = np.diff(roff), np.diff(coff)
    bad = np.flatnonzero(np.diff(xoff) != channels * rows * cols)
    if bad.size:
        i = int(bad[0])
        raise LodShapeError(f"{OP}: sequence {i} of x has {int(xoff[i + 1] - xoff[i])} values, but channel_num "
                            f"{channels} x row {int(rows[i])} x column {int(cols[i])} is "
                            f"{channels * int(rows[i]) * int(cols[i])}")
    out_dtype = xt.dtype if xt.dtype.kind == "f" else np.dtype(np.float64)
    work = np.dtype(np.float32) if out_dtype == np.float16 else out_dtype
    be = get_backend((xt.data, *xt.offsets), backend, device)
    total = int(roff[-1])
    if be.name == "cupy":
        out, pos = cuda_topk_avg_pool(be.xp, xt.data, xoff, roff, coff, ks, channels, work)
        levels = (be.xp.asarray(roff),)
    else:
        data = np.asarray(xt.data).reshape(-1).astype(work, copy=False)
        if be.name == "numpy":
            out, pos = _reference(data, xoff, roff, coff, ks, channels)
        else:
            out = np.empty((total, channels * len(ks)), work)
            pos = np.empty(total * channels * int(ks.max()), np.int32)
            if total:
                _topk_avg(n, data, xoff.view(np.uint64), roff.view(np.uint64), coff.view(np.uint64), ks,
                          ks.astype(work), channels, out, pos)
        levels = (roff,)
    result = LoDTensor._trusted(out.astype(out_dtype, copy=False), levels)
    return (result, pos) if return_pos else result


def _topks(topks) -> np.ndarray:
    ks = np.asarray(topks)
    if ks.ndim != 1 or not ks.size or ks.dtype.kind not in "iu" or int(ks.min()) < 1:
        raise LodUsageError(f"{OP}: topks must be a non-empty list of integers >= 1, got {topks!r}")
    return ks.astype(np.int64)


def _lengths_offsets(t: Any, what: str) -> np.ndarray:
    if isinstance(t, LoDTensor):
        if not t.lod_level:
            raise LodShapeError(f"{OP}: {what} has no LoD; its level-0 lengths give the matrix sizes")
        return _cuda.to_host(t.offsets[0])
    from ..lod import lengths_to_offsets

    return lengths_to_offsets(t)


def _reference(data, xoff, roff, coff, ks, channels):
    """The plain NumPy implementation (the specification the kernels are tested against)."""
    max_k = int(ks.max())
    total = int(roff[-1])
    out = np.zeros((total, channels, len(ks)), data.dtype)
    pos = np.full((total, channels, max_k), -1, np.int32)
    for i in range(len(xoff) - 1):
        r, c = int(roff[i + 1] - roff[i]), int(coff[i + 1] - coff[i])
        if not r:
            continue
        m = data[xoff[i]:xoff[i + 1]].reshape(channels, r, c)
        idx = np.broadcast_to(np.arange(c), m.shape)
        order = np.lexsort((idx, -m, np.isnan(m)), axis=-1)[..., :max_k]  # largest first, ties by column, NaN last
        real = order.shape[-1]
        pos[roff[i]:roff[i + 1], :, :real] = order.transpose(1, 0, 2)
        top = np.take_along_axis(m, order, axis=-1)
        sums = np.zeros((channels, r, max_k), data.dtype)
        if real:
            sums[..., :real] = np.cumsum(top, axis=-1, dtype=data.dtype)  # rank by rank, as the kernel adds
            sums[..., real:] = sums[..., real - 1:real]
        out[roff[i]:roff[i + 1]] = (sums[..., ks - 1] / ks.astype(data.dtype)).transpose(1, 0, 2)
    return out.reshape(total, channels * len(ks)), pos.reshape(-1)


@kernel(inline="always")
def _ranks_before(va, a, vb, b):  # pragma: no cover - compiled (CPU and CUDA)
    """Whether column ``a`` (value ``va``) ranks before column ``b``: larger first, ties by column, NaN last."""
    an = va != va
    bn = vb != vb
    if an:
        return bn and a < b
    if bn:
        return True
    return va > vb or (va == vb and a < b)


@kernel
def _one_row(data, start, c, ks, kf, max_k, out, o_row, o_col, pos, p0):  # pragma: no cover - compiled (CPU and CUDA)
    """Rank ``data[start:start+c]``; ``pos[p0:p0+max_k]`` and the averages into ``out[o_row, o_col:]``."""
    prev = -1
    total = kf[0] * 0
    nk = ks.shape[0]
    for q in range(max_k):
        best = -1
        if q < c:
            for col in range(c):
                v = data[start + col]
                if prev >= 0 and not _ranks_before(data[start + prev], prev, v, col):
                    continue
                if best < 0 or _ranks_before(v, col, data[start + best], best):
                    best = col
        pos[p0 + q] = best
        if best >= 0:
            total += data[start + best]
            prev = best
        for kk in range(nk):
            if ks[kk] == q + 1:
                out[o_row, o_col + kk] = total / kf[kk]


@parallel_blocks
def _topk_avg(lo, hi, blk, data, xoff, roff, coff, ks, kf, channels, out, pos):  # pragma: no cover - compiled by Numba
    """Every (sequence, channel, row) of the matrices; blocks of sequences handed out dynamically."""
    one = U(1)
    max_k = 0
    for kk in range(ks.shape[0]):
        max_k = max(max_k, ks[kk])
    nk = ks.shape[0]
    for i in range(lo, hi):
        r0 = np.int64(roff[i])
        r = np.int64(roff[i + one]) - r0
        c = np.int64(coff[i + one] - coff[i])
        base = np.int64(xoff[i])
        for j in range(channels):
            for rr in range(r):
                _one_row(data, base + (j * r + rr) * c, c, ks, kf, max_k, out, r0 + rr, j * nk, pos,
                         ((r0 + rr) * channels + j) * max_k)


def _topk_dev(data, xoff, roff, coff, rseq, ks, kf, max_k, channels, total, out, pos):  # pragma: no cover - CUDA kernel
    """One thread per (output row, channel); ``rseq[row]``: the row's sequence."""
    e = np.int64(cuda.grid(1))
    stride = np.int64(cuda.gridsize(1))
    nk = ks.shape[0]
    while e < total * channels:
        g = e // channels
        j = e - g * channels
        i = rseq[g]
        r = roff[i + 1] - roff[i]
        c = coff[i + 1] - coff[i]
        _one_row(data, xoff[i] + (j * r + g - roff[i]) * c, c, ks, kf, max_k, out, g, j * nk, pos, e * max_k)
        e += stride


def cuda_topk_avg_pool(xp, data, xoff, roff, coff, ks, channels: int, work: np.dtype):
    """``sequence_topk_avg_pooling`` on the device: ``(out, pos)``, one thread per (matrix row, channel).

    The sizes (``xoff``, ``roff``, ``coff``: host offsets of x, row and column)
    were checked on the host; they are small next to the data.

    >>> import cupy as cp, numpy as np  # doctest: +SKIP
    >>> out, pos = cuda_topk_avg_pool(cp, cp.array([1.0, 5.0, 3.0]), np.array([0, 3]), np.array([0, 1]),
    ...                               np.array([0, 3]), np.array([1, 2]), 1, np.dtype(np.float64))  # doctest: +SKIP
    >>> out.tolist(), pos.tolist()  # doctest: +SKIP
    ([[5.0, 4.0]], [1, 2])
    """
    data = _cuda.on_device(xp, data)
    flat = xp.ascontiguousarray(data.reshape(-1).astype(work, copy=False))
    total = int(roff[-1])
    max_k = int(ks.max())
    out = xp.zeros((total, channels * len(ks)), work)
    pos = xp.empty(total * channels * max_k, np.int32)
    if total:
        droff, dxoff, dcoff, dks, dkf = (xp.asarray(a) for a in (roff, xoff, coff, ks, ks.astype(work)))
        rseq = xp.empty(total, np.int64)
        _cuda.launch(xp, _cuda.compiled().seg_ids, _cuda.grid(total), droff, len(roff) - 1, total, rseq)
        kern = _cuda.jit_kernels([_topk_dev], [_ranks_before.py_func, _one_row.py_func]).topk_dev
        _cuda.launch(xp, kern, _cuda.grid(total * channels), flat, dxoff, droff, dcoff, rseq, dks, dkf, max_k, channels,
                     total, out, pos)
    return out, pos


__all__ = ["sequence_topk_avg_pooling"]
