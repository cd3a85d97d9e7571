"""``sequence_conv`` (forward): a 1-D convolution over the time steps of each sequence.

As Paddle's ``sequence_conv`` with ``paddingTrainable=False`` (checked against
PaddlePaddle 3.3.1, static graph; ``tests/data/paddle_ops``).  For a row ``t``
of width ``M`` in a sequence spanning rows ``[a, b)`` of the last LoD level,
the context projection stacks ``context_length`` rows::

    col[t] = [x[t + s], x[t + s + 1], ..., x[t + s + L - 1]]    (s = context_start, L = context_length)

where a row outside ``[a, b)`` is zeros (sequences never see each other),
and the output is ``col @ filter``, ``filter`` of shape ``(L * M, F)``: one
row of ``F`` values per input row, with ``x``'s LoD.

Data is float16, float32 or float64 (float16 is computed in float32 and rounded
once).  The filter is cast to the data's dtype, as Paddle's parameter has it.
Where lodtool extends Paddle: any number of LoD levels (the window runs
within the last level's sequences; every level is kept), and float64 (Paddle
3.3.1's CPU kernel fails on float64 input with a dtype mismatch).  The
backward pass and a trainable padding are not provided.

>>> import numpy as np
>>> from lodtool import LoDTensor
>>> x = LoDTensor(np.arange(10.0).reshape(5, 2), [[0, 2, 5]])
>>> sequence_conv(x, np.ones((6, 1)), context_start=-1).data.ravel().tolist()
[6.0, 6.0, 22.0, 39.0, 30.0]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._device import is_device_array
from .._jit import parallel_blocks
from ..errors import LodDtypeError, LodShapeError, LodUsageError
from ..tensor import LoDTensor
from . import _cuda
from ._backend import get_backend
from ._util import U, as_tensor, need_lod, row_size

#: bound to ``numba.cuda`` in the CUDA kernels' globals when they compile (see _cuda.jit_kernels)
cuda: Any = None

OP = "sequence_conv"


def sequence_conv(x: LoDTensor, filter: Any, context_length: int | None = None, context_start: int | None = None,
                  *, backend: str | None = None, device: str | None = None) -> LoDTensor:
    """Project each row's context window through ``filter`` (Paddle's ``sequence_conv``, forward).

    ``filter``: shape ``(context_length * M, F)`` for rows of ``M`` values.
    ``context_length`` defaults to ``filter.shape[0] // M``; ``context_start``
    to ``-(context_length // 2)`` (a centred window, as Paddle's
    ``padding_start=None``).  Rows outside a sequence count as zeros.
    ``backend``: ``"numba"`` (default) or ``"numpy"`` (the reference);
    ``device="cuda"`` builds the windows on the GPU and multiplies there.

    >>> import numpy as np
    >>> from lodtool import LoDTensor
    >>> x = LoDTensor(np.array([1.0, 2.0, 3.0]), [[0, 3]])
    >>> sequence_conv(x, np.array([[1.0], [10.0]]), context_start=0).data.ravel().tolist()
    [21.0, 32.0, 3.0]
    """
    xt = as_tensor(x, "x")
    need_lod(xt, OP)
    if xt.dtype.kind != "f":
        raise LodDtypeError(f"{OP}: x has dtype {xt.dtype}; the convolution needs float data (float16/32/64)")
    width = row_size(xt.element_shape)
    w = filter if is_device_array(filter) else np.asarray(filter)
    if w.dtype.kind not in "fiu" or w.ndim != 2:
        raise LodShapeError(f"{OP}: filter must be a 2-D array of numbers (context_length * {width}, filters), "
                            f"got shape {tuple(w.shape)} of dtype {w.dtype}")
    length, start = _window(context_length, context_start, int(w.shape[0]), width)
    work = np.dtype(np.float32) if xt.dtype == np.float16 else xt.dtype
    be = get_backend((xt.data, w, *xt.offsets), backend, device)
    if be.name == "cupy":
        levels = _cuda.validate_offsets(be.xp, xt.offsets, xt.n_rows)
        data = cuda_conv(be.xp, xt.data, levels[-1], w, length, start, work)
        return LoDTensor._trusted(data.astype(xt.dtype, copy=False), levels, xt.level_names)
    data = np.ascontiguousarray(xt.data).reshape(xt.n_rows, width).astype(work, copy=False)
    w = w.astype(work, copy=False)
    if be.name == "numpy":
        col = _reference_col(data, xt.offsets[-1], length, start)
    else:
        col = _col_numba(data, xt.offsets[-1], length, start)
    out = np.matmul(col, w)
    return LoDTensor._trusted(out.astype(xt.dtype, copy=False), xt.offsets, xt.level_names)


def _window(context_length, context_start, filter_rows: int, width: int) -> tuple[int, int]:
    if context_length is None:
        if width == 0 or filter_rows % width:
            raise LodShapeError(f"{OP}: the filter has {filter_rows} rows, not a multiple of the row width {width}; "
                                "pass context_length")
        context_length = filter_rows // width
    for name, value in (("context_length", context_length), ("context_start", context_start)):
        if value is not None and (isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer))):
            raise LodUsageError(f"{OP}: {name} must be an integer, got {value!r}")
    length = int(context_length)
    if length < 1:
        raise LodUsageError(f"{OP}: context_length must be at least 1, got {length}")
    if filter_rows != length * width:
        raise LodShapeError(f"{OP}: the filter has {filter_rows} rows but context_length {length} times the row "
                            f"width {width} is {length * width}")
    start = -(length // 2) if context_start is None else int(context_start)
    return length, start


def _reference_col(data: np.ndarray, off: np.ndarray, length: int, start: int) -> np.ndarray:
    """The plain NumPy context projection ``(T, L * M)`` (the specification the kernels are tested against)."""
    t = data.shape[0]
    seq = np.repeat(np.arange(len(off) - 1), np.diff(off))
    lo, hi = off[:-1][seq], off[1:][seq]
    src = np.arange(t)[:, None] + start + np.arange(length)[None, :]
    inside = (src >= lo[:, None]) & (src < hi[:, None])
    rows = data[np.clip(src, 0, max(t - 1, 0))] if t else np.zeros((0, length) + data.shape[1:], data.dtype)
    col = np.where(inside[:, :, None], rows, np.zeros((), data.dtype))
    return col.reshape(t, length * data.shape[1])


def _col_numba(data: np.ndarray, off: np.ndarray, length: int, start: int) -> np.ndarray:
    t, m = data.shape
    col = np.empty((t, length * m), data.dtype)
    if t and m:
        _im2col(len(off) - 1, data, off.view(np.uint64), length, start, col)
    return col


@parallel_blocks
def _im2col(lo, hi, blk, data, off, length, start, col):  # pragma: no cover - compiled by Numba
    """Row ``t`` of ``col``: rows ``t+start .. t+start+length-1`` of ``t``'s sequence, zeros outside it.

    Blocks of sequences are handed out dynamically (see the kernel notes in expand.py).
    """
    one = U(1)
    m = data.shape[1]
    for i in range(lo, hi):
        a = np.int64(off[i])
        b = np.int64(off[i + one])
        for r in range(a, b):
            for j in range(length):
                src = r + start + j
                c0 = j * m
                if a <= src < b:
                    for c in range(m):
                        col[r, c0 + c] = data[src, c]
                else:
                    for c in range(m):
                        col[r, c0 + c] = 0


def _im2col_dev(data, off, seq, t, m, length, start, col):  # pragma: no cover - CUDA kernel
    """``col[r, j*m + c]``, one thread per value (coalesced writes); ``seq[r]``: row ``r``'s sequence."""
    e = np.int64(cuda.grid(1))
    stride = np.int64(cuda.gridsize(1))
    width = length * m
    while e < t * width:
        r = e // width
        q = e - r * width
        j = q // m
        c = q - j * m
        i = seq[r]
        src = r + start + j
        if off[i] <= src < off[i + 1]:
            col[r, q] = data[src, c]
        else:
            col[r, q] = 0
        e += stride


def cuda_conv(xp, data, off, w, length: int, start: int, work: np.dtype):
    """``sequence_conv`` on the device: the windows by one kernel, then one matrix product (cuBLAS on CuPy).

    ``off`` are the validated offsets of the last level; ``w`` the filter,
    ``length`` and ``start`` the window; ``work`` the dtype the product runs in.

    >>> import cupy as cp, numpy as np  # doctest: +SKIP
    >>> out = cuda_conv(cp, cp.array([[1.0], [2.0], [3.0]]), cp.array([0, 3]), np.array([[1.0], [10.0]]), 2, 0,
    ...                 np.dtype(np.float64))  # doctest: +SKIP
    >>> out.ravel().tolist()  # doctest: +SKIP
    [21.0, 32.0, 3.0]
    """
    data = _cuda.on_device(xp, data)
    t = int(data.shape[0])
    m = row_size(data.shape[1:])
    x2 = xp.ascontiguousarray(data.reshape(t, m).astype(work, copy=False))
    dw = _cuda.on_device(xp, w).astype(work, copy=False)
    col = xp.empty((t, length * m), work)
    if t and m:
        n = int(off.shape[0]) - 1
        seq = xp.empty(t, np.int64)
        _cuda.launch(xp, _cuda.compiled().seg_ids, _cuda.grid(t), off, n, t, seq)
        kern = _cuda.jit_kernels([_im2col_dev]).im2col_dev
        _cuda.launch(xp, kern, _cuda.grid(t * length * m), x2, off, seq, t, m, length, start, col)
    return xp.matmul(col, dw)


__all__ = ["sequence_conv"]
