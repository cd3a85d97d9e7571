"""``sequence_enumerate``: the n-gram window starting at every row, padded past the sequence's end.

As Paddle's ``sequence_enumerate`` (the op is gone from PaddlePaddle 3.3.1, so
it is checked against Paddle's kernel source, its documented example and the
cases of its unit test, see ``tests/test_ops_enumerate.py``): output row ``r``
holds rows ``r, r+1, .., r+win_size-1`` of ``r``'s sequence, and ``pad_value``
where the window runs past the sequence's end.  The output has shape
``(N, win_size)``, ``x``'s dtype, and ``x``'s LoD.  ``x`` holds one value per
row (shape ``(N,)`` or ``(N, 1)``), and ``win_size`` is at least 2, as in Paddle.

Where lodtool differs from Paddle:

* windows stay inside the sequences of the last LoD level, and every level is
  kept (Paddle reads the first level, which is the last one for the one-level
  tensors it accepts);
* every numeric dtype and bool are accepted (Paddle: int32 and int64);
  ``pad_value`` must be representable in the dtype (Paddle casts its int).

>>> import numpy as np
>>> from lodtool import LoDTensor
>>> x = LoDTensor(np.array([[1], [2], [3], [4], [5]]), [[0, 3, 5]])
>>> out = sequence_enumerate(x, win_size=2)
>>> out.data.tolist(), out.lod
([[1, 2], [2, 3], [3, 0], [4, 5], [5, 0]], [[0, 3, 5]])
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._jit import parallel_blocks
from ..errors import LodUsageError
from ..tensor import LoDTensor
from . import _cuda
from ._backend import get_backend
from ._util import U, as_tensor, as_words, cast_value, need_lod, need_one_value_per_row, words_of

OP = "sequence_enumerate"
_I64 = np.dtype(np.int64)


def sequence_enumerate(x: LoDTensor, win_size: int, pad_value: Any = 0, *, backend: str | None = None,
                       device: str | None = None) -> LoDTensor:
    """The window of ``win_size`` rows starting at each row, inside its sequence (Paddle's ``sequence_enumerate``).

    ``x``: one value per row (shape ``(N,)`` or ``(N, 1)``) with a LoD.
    ``backend``: ``"numba"`` (default) or ``"numpy"`` (the reference).
    ``device="cuda"`` (the default for CuPy inputs) runs on the GPU.  Raises
    :class:`~lodtool.errors.LodUsageError` for ``win_size < 2``,
    :class:`~lodtool.errors.LodShapeError` for rows of several values, and
    :class:`~lodtool.errors.LodDtypeError` for a ``pad_value`` the dtype cannot hold.

    >>> import numpy as np
    >>> from lodtool import LoDTensor
    >>> x = LoDTensor(np.arange(1, 6), recursive_sequence_lengths=[[4, 1]])
    >>> sequence_enumerate(x, 3, pad_value=-1).data.tolist()
    [[1, 2, 3], [2, 3, 4], [3, 4, -1], [4, -1, -1], [5, -1, -1]]
    """
    xt = as_tensor(x, "x")
    need_lod(xt, OP)
    if isinstance(win_size, (bool, np.bool_)) or not isinstance(win_size, (int, np.integer)) or win_size < 2:
        raise LodUsageError(f"{OP}: win_size must be an integer >= 2 (as in Paddle), got {win_size!r}")
    win = int(win_size)
    need_one_value_per_row(xt.element_shape, OP)
    pad = cast_value(pad_value, xt.dtype, f"{OP}: pad_value")
    be = get_backend((xt.data, *xt.offsets), backend, device)
    if be.name == "cupy":
        return cuda_enumerate(be.xp, xt, win, pad)
    flat = np.ascontiguousarray(xt.data).reshape(-1)
    off = xt.offsets[-1]
    if be.name == "numpy":
        out = _reference(flat, off, win, pad)
    else:
        out = np.empty((len(flat), win), flat.dtype)
        xw, k = as_words(flat.reshape(-1, 1))
        if len(flat):
            _windows(len(off) - 1, xw, U(k), off.view(np.uint64), U(win), words_of(pad.reshape(1), xw.dtype),
                     words_of(out, xw.dtype))
    return LoDTensor._trusted(out, xt.offsets, xt.level_names)


def _reference(flat: np.ndarray, off: np.ndarray, win: int, pad: np.ndarray) -> np.ndarray:
    """The plain NumPy specification: ``out[r, t] = flat[r + t]`` while ``r + t`` is before the sequence's end."""
    n = len(flat)
    end = np.repeat(off[1:], off[1:] - off[:-1])
    index = np.arange(n, dtype=_I64)[:, None] + np.arange(win, dtype=_I64)[None, :]
    inside = index < end[:, None]
    values = flat[np.minimum(index, max(n - 1, 0))] if n else np.empty((0, win), flat.dtype)
    return np.where(inside, values, pad)


def cuda_enumerate(xp, xt: LoDTensor, win: int, pad: np.ndarray) -> LoDTensor:
    """On the GPU with CuPy's own kernels: each row's sequence end by a search in the offsets, then the windows."""
    levels = _cuda.validate_offsets(xp, xt.offsets, xt.n_rows)
    data = _cuda.on_device(xp, xt.data)
    flat = xp.ascontiguousarray(data).reshape(-1)
    n = int(flat.shape[0])
    off = levels[-1]
    if n == 0:
        return LoDTensor._trusted(xp.empty((0, win), flat.dtype), levels, xt.level_names)
    rows = xp.arange(n, dtype=_I64)
    end = off[xp.searchsorted(off, rows, side="right")]
    index = rows[:, None] + xp.arange(win, dtype=_I64)[None, :]
    values = flat[xp.minimum(index, n - 1)]
    out = xp.where(index < end[:, None], values, xp.asarray(pad))
    return LoDTensor._trusted(out.astype(flat.dtype, copy=False), levels, xt.level_names)


@parallel_blocks
def _windows(lo, hi, blk, xw, k, off, win, padw, outw):  # pragma: no cover - compiled by Numba
    """Row ``r`` of sequence ``[a, b)``: ``win`` values from ``r``, then ``padw`` from ``b`` on (``k`` words a value)."""
    one = U(1)
    span = win * k
    for i in range(lo, hi):
        b = off[i + one]
        for r in range(off[i], b):
            dst = r * span
            src = r * k
            if r + win <= b:  # the whole window inside: one straight copy
                for j in range(span):
                    outw[dst + j] = xw[src + j]
            else:
                inside = (b - r) * k
                for j in range(inside):
                    outw[dst + j] = xw[src + j]
                for j in range(inside, span):
                    outw[dst + j] = padw[j % k]


__all__ = ["sequence_enumerate"]
