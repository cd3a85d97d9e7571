"""``sequence_scatter``: add each sequence of updates into one row of ``x``, at the given columns.

As Paddle's ``sequence_scatter``: ``ids`` and ``updates`` share a 1-level LoD of
``n`` sequences, and ``x`` has ``n`` rows.  For every position ``j`` of sequence
``i``::

    out[i].flat[ids[j]] += updates[j]

in order (repeated ids accumulate).  The output has ``x``'s shape, dtype and
LoD; ``x`` itself is not changed.  Each row of ``x`` is indexed flat: ids count
over all ``prod(x.shape[1:])`` values of the row.

Paddle 3.3.1 no longer registers this operator (``Operator "sequence_scatter"
has not been registered``), so lodtool follows its kernel and its documented
example and unit tests (test/sequence/test_sequence_scatter_op.py, empty
sequences included).  Where lodtool differs on purpose:

* ids outside ``[0, row size)`` are a :class:`~lodtool.errors.LodIndexError`
  naming the position (Paddle writes out of bounds);
* ``x`` must have exactly one row per sequence (Paddle only checks "not more
  sequences than rows");
* integer, float and complex data (Paddle: float32/float64/int32/int64); integer
  sums wrap as in C; float16 adds in float32 and rounds once per value at the end.
  ``updates`` are cast to ``x``'s dtype (within one kind: float64 updates of
  float32 data round to float32, as a Paddle feed would; floats into ints are refused).
* ``ids`` and ``updates`` may have more LoD levels; the last level is used.

Paddle's documented example:

>>> import numpy as np
>>> from lodtool import LoDTensor
>>> x = np.ones((3, 6))
>>> ids = LoDTensor(np.array([0, 1, 2, 5, 4, 3, 2, 1, 3, 2, 5, 4]), [[0, 3, 8, 12]])
>>> updates = np.array([.3, .3, .4, .1, .2, .3, .4, .0, .2, .3, .1, .4])
>>> sequence_scatter(x, ids, updates).data.round(6).tolist()
[[1.3, 1.3, 1.4, 1.0, 1.0, 1.0], [1.0, 1.0, 1.4, 1.3, 1.2, 1.1], [1.0, 1.0, 1.3, 1.2, 1.4, 1.1]]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._jit import parallel_blocks
from ..errors import LodDtypeError, LodIndexError, LodShapeError
from ..tensor import LoDTensor
from . import _cuda
from ._backend import get_backend
from ._util import U, as_tensor, need_lod, row_size

#: bound to ``numba.cuda`` in the CUDA kernels' globals when they compile (see _cuda.jit_kernels)
cuda: Any = None

OP = "sequence_scatter"


def sequence_scatter(x: Any, ids: LoDTensor, updates: Any, *, backend: str | None = None,
                     device: str | None = None) -> LoDTensor:
    """Scatter-add ``updates`` into ``x``: sequence ``i`` of ``ids`` addresses row ``i`` (Paddle's op).

    ``x``: an array or a :class:`~lodtool.LoDTensor` with one row per sequence
    of ``ids``.  ``ids``: integer LoDTensor of shape ``(K,)`` or ``(K, 1)``.
    ``updates``: ``K`` values (an array, or a LoDTensor with ``ids``' LoD).
    ``backend``: ``"numba"`` (default) or ``"numpy"`` (the reference);
    ``device="cuda"`` runs one GPU thread per sequence, in order (the CPU's bits).

    >>> import numpy as np
    >>> from lodtool import LoDTensor
    >>> ids = LoDTensor(np.array([1, 1, 0]), [[0, 2, 2, 3]])
    >>> sequence_scatter(np.zeros((3, 2)), ids, [5.0, 1.0, 7.0]).data.tolist()
    [[0.0, 6.0], [0.0, 0.0], [7.0, 0.0]]
    """
    xt = as_tensor(x, "x")
    it = as_tensor(ids, "ids")
    need_lod(it, OP, "ids")
    off = it.offsets[-1]
    idx = _flat_column(it.data, "ids")
    upd = _updates(updates, it, len(idx))
    if idx.dtype.kind not in "iu":
        raise LodDtypeError(f"{OP}: ids must be integers, got dtype {idx.dtype}")
    dtype = xt.dtype
    if dtype.kind == "b":
        raise LodDtypeError(f"{OP}: x has dtype bool; scatter adds values, so it needs numbers")
    if not np.can_cast(upd.dtype, dtype, "same_kind"):
        raise LodDtypeError(f"{OP}: updates of dtype {upd.dtype} cannot be added to x of dtype {dtype} "
                            "(a different kind of number); cast one of them first")
    n = len(off) - 1
    if xt.n_rows != n:
        raise LodShapeError(f"{OP}: x has {xt.n_rows} rows but ids has {n} sequences; sequence i scatters into "
                            "row i, so they must be equal")
    width = row_size(xt.element_shape)
    be = get_backend((xt.data, it.data, upd, off), backend, device)
    xp = be.xp
    if be.name != "cupy":
        _check_ids(np.asarray(idx), width)
    if be.name == "cupy":
        data = cuda_scatter(xp, xt.data, off, idx, upd, width)
    elif be.name == "numpy":
        data = _reference(np.asarray(xt.data), off, np.asarray(idx), np.asarray(upd))
    else:
        data = _scatter_numba(np.asarray(xt.data), off, np.asarray(idx), np.asarray(upd))
    return LoDTensor._trusted(data, xt.offsets, xt.level_names)


def _flat_column(a, what: str):
    if a.ndim == 2 and a.shape[1] == 1:
        return a[:, 0]
    if a.ndim != 1:
        raise LodShapeError(f"{OP}: {what} must have shape (K,) or (K, 1), got {tuple(a.shape)}")
    return a


def _updates(updates: Any, it: LoDTensor, count: int):
    ut = as_tensor(updates, "updates")
    if ut.lod_level and ut.lod != it.lod:
        raise LodShapeError(f"{OP}: updates' LoD {ut.lod} differs from ids' LoD {it.lod}; they must be equal")
    upd = _flat_column(ut.data, "updates")
    if upd.shape[0] != count:
        raise LodShapeError(f"{OP}: {upd.shape[0]} updates for {count} ids; there must be one update per id")
    return upd


def _check_ids(idx: np.ndarray, width: int) -> None:
    if not idx.size:
        return
    bad = np.flatnonzero((idx < 0) | (idx >= width)) if idx.dtype.kind == "i" else np.flatnonzero(idx >= width)
    if bad.size:
        j = int(bad[0])
        raise LodIndexError(f"{OP}: ids[{j}]={int(idx[j])} is outside the row of x, which has {width} values "
                            f"(0..{width - 1})")


def _work_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype the sums run in: ints widen to 64 bits (wrapping alike), float16 to float32."""
    if dtype.kind == "i":
        return np.dtype(np.int64)
    if dtype.kind == "u":
        return np.dtype(np.uint64)
    return np.dtype(np.float32) if dtype == np.float16 else dtype


def _reference(data: np.ndarray, off: np.ndarray, idx: np.ndarray, upd: np.ndarray) -> np.ndarray:
    """The plain NumPy implementation (the specification the kernels are tested against)."""
    work = _work_dtype(data.dtype)
    n = data.shape[0]
    out = data.reshape(n, row_size(data.shape[1:])).astype(work)
    rows = np.repeat(np.arange(n), np.diff(off))
    with np.errstate(all="ignore"):
        np.add.at(out, (rows, idx.astype(np.int64)), upd.astype(work))  # unbuffered: in order, repeats add up
        return out.astype(data.dtype).reshape(data.shape)


def _scatter_numba(data: np.ndarray, off: np.ndarray, idx: np.ndarray, upd: np.ndarray) -> np.ndarray:
    work = _work_dtype(data.dtype)
    n = data.shape[0]
    out = data.reshape(n, row_size(data.shape[1:])).astype(work)
    if idx.size and out.shape[1]:
        _scatter(len(off) - 1, out, off.view(np.uint64),
                 np.ascontiguousarray(idx).astype(np.int64, copy=False).view(np.uint64),
                 np.ascontiguousarray(upd).astype(work, copy=False))
    with np.errstate(all="ignore"):
        return out.astype(data.dtype, copy=False).reshape(data.shape)


@parallel_blocks
def _scatter(lo, hi, blk, out, off, idx, upd):  # pragma: no cover - compiled by Numba
    """Sequence ``i`` adds into row ``i`` only, so sequences run in parallel without races.

    Blocks of sequences are handed out dynamically (see the kernel notes in expand.py).
    """
    one = U(1)
    for i in range(lo, hi):
        for j in range(off[i], off[i + one]):
            out[i, idx[j]] += upd[j]


def _scatter_dev(out, off, n, idx, upd):  # pragma: no cover - CUDA kernel
    """One thread per sequence, adding in order (the CPU kernel's bits)."""
    i = np.int64(cuda.grid(1))
    stride = np.int64(cuda.gridsize(1))
    while i < n:
        for j in range(off[i], off[i + 1]):
            out[i, idx[j]] += upd[j]
        i += stride


def cuda_scatter(xp, data, off, idx, upd, width: int):
    """``sequence_scatter`` on the device: ``data`` with ``upd[j]`` added at ``ids[j]`` of row ``seq(j)``.

    ``off`` are the ids' offsets and ``width`` the values per row; the offsets
    and the ids' range are checked on the device first (a bad id is a
    :class:`~lodtool.errors.LodIndexError`).  One thread per sequence, adding in
    order: the CPU kernel's bits.

    >>> import cupy as cp  # doctest: +SKIP
    >>> ids, updates = cp.array([1, 1, 0]), cp.array([5.0, 1.0, 7.0])  # doctest: +SKIP
    >>> cuda_scatter(cp, cp.zeros((2, 2)), [0, 2, 3], ids, updates, 2).tolist()  # doctest: +SKIP
    [[0.0, 6.0], [7.0, 0.0]]
    """
    data = _cuda.on_device(xp, data)
    n = int(data.shape[0])
    (doff,) = _cuda.validate_offsets(xp, [off], None)
    didx = _cuda.as_offsets(xp, idx, what="ids")
    k = int(didx.shape[0])
    if k:
        j = min(_cuda.first_outside(xp, didx, 0, width - 1))
        if j < k:
            value = _cuda.scalars(xp, didx[j:j + 1])[0]
            raise LodIndexError(f"{OP}: ids[{j}]={value} is outside the row of x, which has {width} values "
                                f"(0..{width - 1})")
    work = _work_dtype(data.dtype)
    out = xp.ascontiguousarray(data.reshape(n, width).astype(work))
    dupd = xp.ascontiguousarray(_cuda.on_device(xp, upd).astype(work))
    if k and width:
        kern = _cuda.jit_kernels([_scatter_dev]).scatter_dev
        _cuda.launch(xp, kern, _cuda.grid(n), out, doff, n, didx, dupd)
    return out.astype(data.dtype, copy=False).reshape(data.shape)


__all__ = ["sequence_scatter"]
