"""``sequence_erase``: drop the given token ids from every sequence.

As Paddle's ``sequence_erase`` (the op is gone from PaddlePaddle 3.3.1, so it is
checked against Paddle's kernel source, its documented example and the cases
of its unit test, see ``tests/test_ops_erase.py``): every row whose value is
one of ``tokens`` is removed, the last LoD level's offsets shrink to match, and
the levels above are kept (their sequence counts do not change).  Sequences
may become empty.

``x`` holds one integer per row: shape ``(N,)`` or ``(N, 1)`` (Paddle's); the
output keeps the input's row shape and dtype.  ``tokens`` are integers; a token
the dtype cannot hold (``-1`` in ``uint8`` data, say) matches nothing.

Where lodtool differs from Paddle: every integer dtype is accepted (Paddle has
int32 and int64 kernels), and tokens may be any integers (Paddle's attribute
is int32).

>>> import numpy as np
>>> from lodtool import LoDTensor
>>> x = LoDTensor(np.array([2, 2, 6, 1, 3, 9, 6, 1, 0, 1]), [[0, 3, 6, 10]])
>>> out = sequence_erase(x, [2, 3, 5])
>>> out.data.tolist(), out.lod
([6, 1, 9, 6, 1, 0, 1], [[0, 1, 3, 7]])
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._jit import kernel, parallel_blocks
from ..errors import LodDtypeError
from ..lod import lengths_to_offsets
from ..tensor import LoDTensor
from . import _cuda
from ._backend import get_backend
from ._util import U, as_tensor, need_lod, need_one_value_per_row

OP = "sequence_erase"
_I64 = np.dtype(np.int64)
#: up to this many tokens, a row is compared with each in turn; more are looked up or binary-searched
_LINEAR_TOKENS = 8
#: tokens spanning fewer values than this are looked up in a table of flags
_TABLE_SPAN = 1 << 20


def sequence_erase(x: LoDTensor, tokens: Any, *, backend: str | None = None, device: str | None = None) -> LoDTensor:
    """Remove every row whose value is in ``tokens`` (Paddle's ``sequence_erase``).

    ``x``: integer token ids, one per row (shape ``(N,)`` or ``(N, 1)``), with a
    LoD.  ``tokens``: an integer or a list/array of them.  ``backend``:
    ``"numba"`` (default) or ``"numpy"`` (the reference).  ``device="cuda"``
    (the default for CuPy inputs) runs on the GPU.  Raises
    :class:`~lodtool.errors.LodDtypeError` for non-integer data or tokens and
    :class:`~lodtool.errors.LodShapeError` for rows of more than one value.

    >>> import numpy as np
    >>> from lodtool import LoDTensor
    >>> x = LoDTensor(np.array([[1], [0], [0], [2]], np.int32), recursive_sequence_lengths=[[2, 2]])
    >>> out = sequence_erase(x, 0)
    >>> out.data.ravel().tolist(), out.recursive_sequence_lengths
    ([1, 2], [[1, 1]])
    """
    xt = as_tensor(x, "x")
    need_lod(xt, OP)
    if xt.dtype.kind not in "iu":
        raise LodDtypeError(f"{OP}: x must hold integer token ids, got dtype {xt.dtype} (Paddle: int32 or int64)")
    need_one_value_per_row(xt.element_shape, OP, "token id")
    toks = erase_tokens(tokens, xt.dtype)
    be = get_backend((xt.data, *xt.offsets), backend, device)
    if be.name == "cupy":
        return cuda_erase(be.xp, xt, toks)
    off = xt.offsets[-1]
    flat = np.ascontiguousarray(xt.data).reshape(-1)
    if be.name == "numpy":
        data, out_off = _reference(flat, off, toks)
    else:
        lens = np.empty(len(off) - 1, _I64)
        uoff = off.view(np.uint64)
        table = _lookup_table(toks)
        _count_kept(len(lens), flat, uoff, toks, table, lens)
        out_off = lengths_to_offsets(lens)
        data = np.empty(int(out_off[-1]), flat.dtype)
        _copy_kept(len(lens), flat, uoff, toks, table, out_off.view(np.uint64), data)
    data = data.reshape((len(data),) + xt.element_shape)
    return LoDTensor._trusted(data, xt.offsets[:-1] + (out_off,), xt.level_names)


def erase_tokens(tokens: Any, dtype: Any) -> np.ndarray:
    """``tokens`` as a sorted array of ``dtype`` without duplicates, leaving out those ``dtype`` cannot hold.

    >>> erase_tokens([5, -1, 300, 5, 2], np.uint8).tolist()
    [2, 5]
    """
    dtype = np.dtype(dtype)
    arr = np.asarray(tokens)
    if arr.dtype == object or (arr.size and arr.dtype.kind not in "iu"):
        raise LodDtypeError(f"{OP}: tokens must be integers, got {tokens!r}")
    info = np.iinfo(dtype)
    held = [v for v in arr.reshape(-1).tolist() if info.min <= v <= info.max]
    return np.unique(np.array(held, dtype))


def _lookup_table(toks: np.ndarray) -> np.ndarray:
    """A flag per value from the smallest token to the largest, when they span few values (a lookup beats
    comparing a row with each token, even with three tokens)."""
    if not len(toks) or int(toks[-1]) - int(toks[0]) >= _TABLE_SPAN:
        return np.zeros(0, np.bool_)
    table = np.zeros(int(toks[-1]) - int(toks[0]) + 1, np.bool_)
    table[np.array([int(t) - int(toks[0]) for t in toks.tolist()], np.int64)] = True
    return table


def _reference(flat: np.ndarray, off: np.ndarray, toks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The plain NumPy specification: a mask of the rows kept, and the kept count before each offset."""
    keep = ~np.isin(flat, toks)
    kept_before = np.zeros(len(flat) + 1, _I64)
    np.cumsum(keep, out=kept_before[1:])
    return flat[keep], kept_before[off]


def cuda_erase(xp, xt: LoDTensor, toks: np.ndarray) -> LoDTensor:
    """On the GPU with CuPy's own kernels: the mask, its running count at the offsets, the kept rows."""
    levels = _cuda.validate_offsets(xp, xt.offsets, xt.n_rows)
    data = _cuda.on_device(xp, xt.data)
    flat = xp.ascontiguousarray(data).reshape(-1)
    keep = ~xp.isin(flat, xp.asarray(toks))
    kept_before = xp.zeros(int(flat.shape[0]) + 1, _I64)
    if flat.shape[0]:
        xp.cumsum(keep, out=kept_before[1:])
    out_off = kept_before[levels[-1]]
    out = flat[keep]
    out = out.reshape((int(out.shape[0]),) + xt.element_shape)
    return LoDTensor._trusted(out, tuple(levels[:-1]) + (out_off,), xt.level_names)


@kernel(inline="always")
def _is_token(v, toks, table):  # pragma: no cover - compiled by Numba
    """Whether ``v`` is in the sorted ``toks``: looked up in ``table`` (a flag per value from ``toks[0]`` to
    ``toks[-1]``) when it is given, else compared with each token when few, else a binary search."""
    m = toks.shape[0]
    if table.shape[0]:
        if v < toks[0] or v > toks[m - 1]:
            return False
        return table[U(v - toks[0])]
    if m <= 8:  # _LINEAR_TOKENS
        for t in range(m):
            if toks[t] == v:
                return True
        return False
    if v < toks[0] or v > toks[m - 1]:
        return False
    lo = 0
    hi = m
    while lo < hi:
        mid = (lo + hi) >> 1
        if toks[mid] < v:
            lo = mid + 1
        else:
            hi = mid
    return toks[lo] == v


@parallel_blocks
def _count_kept(lo, hi, blk, flat, off, toks, table, lens):  # pragma: no cover - compiled by Numba
    """``lens[i]``: the rows of sequence ``i`` that are not tokens (see the kernel notes in expand.py)."""
    one = U(1)
    for i in range(lo, hi):
        kept = 0
        for r in range(off[i], off[i + one]):
            if not _is_token(flat[r], toks, table):
                kept += 1
        lens[i] = kept


@parallel_blocks
def _copy_kept(lo, hi, blk, flat, off, toks, table, out_off, out):  # pragma: no cover - compiled by Numba
    """The rows of sequence ``i`` that are not tokens, in order, from ``out[out_off[i]]``."""
    one = U(1)
    for i in range(lo, hi):
        dst = out_off[i]
        for r in range(off[i], off[i + one]):
            v = flat[r]
            if not _is_token(v, toks, table):
                out[dst] = v
                dst += one


__all__ = ["erase_tokens", "sequence_erase"]
