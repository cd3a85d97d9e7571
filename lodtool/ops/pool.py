"""``sequence_pool``: reduce each sequence of the last LoD level to one row.

As Paddle's ``sequence_pool`` (checked against PaddlePaddle 3.3, static graph):
the output has one row per last-level sequence, and the upper levels stay as
its LoD (a 2-level input gives a 1-level output holding the top level's
offsets; a 1-level input gives a plain 0-level tensor).  Empty sequences get
``pad_value``.  Pool types:

=========  =========================================================
sum        sum of the rows
average    sum / length
sqrt       sum / sqrt(length)
max, min   the largest / smallest value per element (``min`` is lodtool's)
first      the first row (:func:`sequence_first_step`)
last       the last row (:func:`sequence_last_step`)
=========  =========================================================

``max`` and ``min`` compare as Paddle does (start from the first row, replace a
value only by a strictly larger/smaller one), so a NaN in a sequence's first row
is kept and later NaNs are skipped.

Output dtypes (Paddle has float32/float64 kernels only; lodtool extends):

* ``sum``: bool and signed ints -> int64, unsigned ints -> uint64, floats keep theirs.
* ``average``, ``sqrt``: bool and ints -> float64, floats keep theirs.
* ``max``, ``min``, ``first``, ``last``: the input dtype.

float16 is accumulated in float32 and rounded once at the end; float32 is
accumulated in float32, row by row, as Paddle does.  Complex data is refused
except for ``first``/``last``.  ``pad_value`` must be representable in the
output dtype (``-1`` for uint8 data, or ``0.5`` for an integer sum, is an error).

Where lodtool extends Paddle: any number of LoD levels (Paddle stops at 2; all
upper levels are kept), ``min``, integer and bool data, and data with fewer
rows than sequences (Paddle refuses those; empty sequences simply get
``pad_value``).

>>> import numpy as np
>>> from lodtool import LoDTensor
>>> x = LoDTensor(np.arange(12.0).reshape(6, 2), recursive_sequence_lengths=[[2, 0, 4]])
>>> sequence_pool(x, "sum", pad_value=-1).data.tolist()
[[2.0, 4.0], [-1.0, -1.0], [28.0, 32.0]]
>>> np.round(sequence_pool(x, "sqrt").data[0], 6).tolist()
[1.414214, 2.828427]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._jit import kernel, parallel_blocks
from ..errors import LodDtypeError, LodUsageError
from ..tensor import LoDTensor
from . import _cuda
from ._backend import Crossover, get_backend
from ._util import U, as_tensor, as_words, cast_value, empty_words, need_lod, row_size, words_of

#: bound to ``numba.cuda`` in the CUDA kernels' globals when they compile (see _cuda.jit_kernels)
cuda: Any = None

OP = "sequence_pool"
POOL_TYPES = ("sum", "average", "sqrt", "max", "min", "first", "last")
SUM, AVERAGE, SQRT, MAX, MIN, FIRST, LAST = range(7)


#: work (elements) from which the Numba kernel beats the reference (docs/benchmarks.md, crossovers)
NUMBA_FROM = Crossover(cold=1 << 27, warm=1 << 14)



def pool_dtypes(dtype: Any, pool_type: str) -> tuple[np.dtype, np.dtype]:
    """``(output dtype, accumulation dtype)`` of ``pool_type`` on ``dtype`` data.

    >>> [str(d) for d in pool_dtypes(np.int8, "sum")], [str(d) for d in pool_dtypes(np.float16, "average")]
    (['int64', 'int64'], ['float16', 'float32'])
    """
    dtype = np.dtype(dtype)
    code = _code(pool_type)
    kind = dtype.kind
    if code in (FIRST, LAST):
        return dtype, dtype
    if kind == "c":
        raise LodDtypeError(f"{OP}: pool_type {pool_type!r} is not supported for complex data ({dtype}); "
                            "only first and last are")
    if code in (MAX, MIN):
        acc = np.dtype(np.float32) if dtype == np.float16 else dtype
        return dtype, acc
    if code == SUM:
        if kind == "f":
            return dtype, np.dtype(np.float32) if dtype == np.float16 else dtype
        out = np.dtype(np.uint64) if kind == "u" else np.dtype(np.int64)
        return out, out
    # average, sqrt
    if kind == "f":
        return dtype, np.dtype(np.float32) if dtype == np.float16 else dtype
    return np.dtype(np.float64), np.dtype(np.float64)


def _code(pool_type: str) -> int:
    name = str(pool_type).lower()
    if name not in POOL_TYPES:
        raise LodUsageError(f"{OP}: unknown pool_type {pool_type!r}; choose one of {', '.join(POOL_TYPES)}")
    return POOL_TYPES.index(name)


def sequence_pool(x: LoDTensor, pool_type: str = "sum", pad_value: Any = 0, *, return_index: bool = False,
                  backend: str | None = None, device: str | None = None):
    """Pool each last-level sequence of ``x`` to one row (Paddle's ``sequence_pool``).

    ``pool_type`` is one of ``sum``, ``average``, ``sqrt``, ``max``, ``min``,
    ``first``, ``last`` (any case).  Empty sequences get ``pad_value``.  The
    output keeps the upper LoD levels.  ``backend``: ``"numba"`` (default) or
    ``"numpy"`` (the reference).  ``device="cuda"`` (the default for CuPy data
    or offsets) runs on the GPU: first/last give the same bits, sum/max/min the
    CPU kernel's bits, average/sqrt the same IEEE division (see
    :func:`lodtool.ops._cuda.pool`).

    On float64 output, ``pad_value`` is rounded to float32 first, as Paddle
    stores it (a float attribute): 0.3 pads as 0.30000001192092896.
    ``return_index=True`` (``max`` and ``min``) also returns Paddle's
    ``MaxIndex``: per sequence and value, the data row the result came from
    (the first such row; int32, -1 for an empty sequence), as ``(out, index)``.

    >>> import numpy as np
    >>> from lodtool import LoDTensor
    >>> x = LoDTensor(np.arange(6.0), recursive_sequence_lengths=[[2, 1], [1, 2, 3]])
    >>> out = sequence_pool(x, "max")
    >>> out.data.tolist(), out.lod
    ([0.0, 2.0, 5.0], [[0, 2, 3]])
    """
    xt = as_tensor(x, "x")
    need_lod(xt, OP)
    code = _code(pool_type)
    if return_index and code not in (MAX, MIN):
        raise LodUsageError(f"{OP}: return_index is for max and min pooling (Paddle's MaxIndex), not {pool_type!r}")
    out_dtype, acc_dtype = pool_dtypes(xt.dtype, pool_type)
    pad_value = paddle_pad_value(pad_value, out_dtype)
    pad = cast_value(pad_value, out_dtype, f"{OP}: pad_value", xt.element_shape)
    be = get_backend((xt.data, *xt.offsets), backend, device, work=xt.data.size, crossover=NUMBA_FROM)
    names = xt.level_names[:-1] if xt.level_names and xt.lod_level > 1 else None
    index = None
    if be.name == "cupy":  # every level checked on the device; the kept levels live there too
        levels = _cuda.validate_offsets(be.xp, xt.offsets, xt.n_rows)
        data = cuda_pool(be.xp, xt.data, levels[-1], pool_type, pad_value, validated=True)
        if return_index:
            index = cuda_max_index(be.xp, xt.data, levels[-1], data, acc_dtype)
        out = LoDTensor._trusted(data, levels[:-1], names)
        return (out, index) if return_index else out
    if be.name == "numpy":
        data, index = _reference(np.asarray(xt.data), xt.offsets[-1], code, pad, out_dtype, acc_dtype,
                                 return_index)
    else:
        data, index = _pool_numba(xt.data, xt.offsets[-1], code, pad, out_dtype, acc_dtype, return_index)
    out = LoDTensor._trusted(data, xt.offsets[:-1], names)
    return (out, index) if return_index else out


def paddle_pad_value(pad_value: Any, out_dtype: np.dtype) -> Any:
    """``pad_value`` as Paddle applies it: through float32 (its attribute's type) when the output is float64.

    >>> float(paddle_pad_value(0.3, np.dtype(np.float64)))
    0.30000001192092896
    """
    if np.dtype(out_dtype) != np.float64:
        return pad_value
    try:
        value = np.asarray(pad_value)
    except (TypeError, ValueError):
        return pad_value  # cast_value explains what is wrong with it
    if value.dtype.kind not in "biuf":
        return pad_value
    with np.errstate(over="ignore"):  # beyond float32's range: inf, as Paddle's attribute holds it
        return value.astype(np.float64).astype(np.float32).astype(np.float64)


def index_dtype(n_rows: int) -> np.dtype:
    """MaxIndex's dtype: int32 as Paddle's, int64 for data of 2**31 rows or more."""
    return np.dtype(np.int32) if n_rows < 2 ** 31 else np.dtype(np.int64)


def sequence_first_step(x: LoDTensor, pad_value: Any = 0, **kwargs) -> LoDTensor:
    """The first row of each last-level sequence: ``sequence_pool(x, "first")``.

    >>> import numpy as np
    >>> from lodtool import LoDTensor
    >>> sequence_first_step(LoDTensor(np.arange(5), [[0, 2, 5]])).data.tolist()
    [0, 2]
    """
    return sequence_pool(x, "first", pad_value, **kwargs)


def sequence_last_step(x: LoDTensor, pad_value: Any = 0, **kwargs) -> LoDTensor:
    """The last row of each last-level sequence: ``sequence_pool(x, "last")``.

    >>> import numpy as np
    >>> from lodtool import LoDTensor
    >>> sequence_last_step(LoDTensor(np.arange(5), [[0, 2, 5]])).data.tolist()
    [1, 4]
    """
    return sequence_pool(x, "last", pad_value, **kwargs)


def _reference(data: np.ndarray, off: np.ndarray, code: int, pad: np.ndarray, out_dtype: np.dtype,
               acc_dtype: np.dtype, return_index: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
    """The plain NumPy implementation (the specification the kernels are tested against)."""
    n = len(off) - 1
    lens = off[1:] - off[:-1]
    full = lens > 0
    starts = off[:-1][full]
    out = np.empty((n,) + data.shape[1:], out_dtype)
    out[~full] = pad
    index = np.full((n,) + data.shape[1:], -1, index_dtype(data.shape[0])) if return_index else None
    if not starts.size:
        return out, index
    if code in (FIRST, LAST):
        out[full] = data[starts if code == FIRST else off[1:][full] - 1]
        return out, index
    acc = data.astype(acc_dtype, copy=False)
    expand = (slice(None),) + (None,) * (data.ndim - 1)
    if code in (SUM, AVERAGE, SQRT):
        with np.errstate(over="ignore", invalid="ignore"):  # inf and NaN come out as they do in the kernel
            total = np.add.reduceat(acc, starts, axis=0)
            if code == AVERAGE:
                total = total / lens[full].astype(acc_dtype)[expand]
            elif code == SQRT:
                total = total / np.sqrt(lens[full].astype(acc_dtype))[expand]
    else:
        first = acc[starts]
        if acc.dtype.kind == "f":  # NaNs after the first row never win; a NaN first row stays
            skip = np.where(np.isnan(acc), -np.inf if code == MAX else np.inf, acc)
            ufunc = np.maximum if code == MAX else np.minimum
            total = np.where(np.isnan(first), first, ufunc.reduceat(skip, starts, axis=0))
        else:
            total = (np.maximum if code == MAX else np.minimum).reduceat(acc, starts, axis=0)
    out[full] = total.astype(out_dtype, copy=False)
    if return_index:  # the first row holding the result (a NaN result came from the first row)
        seq = np.repeat(np.arange(starts.size), lens[full])
        rows = np.arange(data.shape[0])[(slice(None),) + (None,) * (data.ndim - 1)]
        hit = np.where(acc == total[seq], rows, np.iinfo(np.int64).max)
        first = np.minimum.reduceat(hit, starts, axis=0)
        index[full] = np.where(total != total, starts[expand], first)
    return out, index


def _pool_numba(data: np.ndarray, off: np.ndarray, code: int, pad: np.ndarray, out_dtype: np.dtype,
                acc_dtype: np.dtype, return_index: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
    n = len(off) - 1
    shape = (n,) + tuple(data.shape[1:])
    if code in (FIRST, LAST):
        xw, k = as_words(data)
        out, outw = empty_words(n, data, xw.dtype)
        padw = words_of(np.ascontiguousarray(pad), xw.dtype)
        if k:
            _pick_rows(n, xw, U(k), off.view(np.uint64), code == LAST, padw, outw)
        return out, None
    width = row_size(data.shape[1:])
    # one compiled kernel per 64-bit type: narrower ints widen (exactly), float16 computes in float32
    work = _kernel_dtype(data.dtype, acc_dtype)
    x2 = np.ascontiguousarray(data).reshape(data.shape[0], width).astype(work, copy=False)
    acc_dtype = work if acc_dtype.kind not in "f" else acc_dtype
    out = np.empty((n, width), acc_dtype)
    pad2 = pad.astype(acc_dtype).reshape(width)
    lens = off[1:] - off[:-1]
    if code == AVERAGE:
        scale = lens.astype(acc_dtype)
    elif code == SQRT:
        scale = np.sqrt(lens.astype(acc_dtype))
    else:
        scale = np.empty(0, acc_dtype)
    if width:
        _pool(n, x2, off.view(np.uint64), code, pad2, scale, out)
    index = None
    if return_index:
        index = np.empty((n, width), index_dtype(data.shape[0]))
        if width:
            _first_equal(n, x2, off.view(np.uint64), out, index)
        index = index.reshape(shape)
    return out.astype(out_dtype, copy=False).reshape(shape), index


def _kernel_dtype(dtype: np.dtype, acc_dtype: np.dtype) -> np.dtype:
    if acc_dtype.kind == "f":
        return acc_dtype
    return np.dtype(np.uint64) if dtype.kind == "u" else np.dtype(np.int64)


@parallel_blocks
def _pool(lo, hi, blk, x2, off, code, pad, scale, out):  # pragma: no cover - compiled by Numba
    """Reduce rows ``off[i]..off[i+1]`` of ``x2`` into ``out[i]``, in row order; codes as ``POOL_TYPES``.

    See the kernel notes in expand.py (unsigned indices, dynamic blocks).
    """
    one = U(1)
    for i in range(lo, hi):
        _pool_one(x2, off[i], off[i + one], code, pad, scale, i, out)


@kernel(inline="always")
def _pool_one(x2, a, b, code, pad, scale, i, out):  # pragma: no cover - compiled by Numba
    """Rows ``a..b`` of ``x2`` into ``out[i]``; averages divide by ``scale[i]`` in its dtype."""
    k = x2.shape[1]
    if a == b:
        for j in range(k):
            out[i, j] = pad[j]
        return
    first = a + U(1)
    if k == 1:  # a scalar accumulator: no store per row
        out[i, 0] = x2[a, 0]
        acc = out[i, 0]
        if code <= 2:
            for r in range(first, b):
                acc += x2[r, 0]
        elif code == 3:
            for r in range(first, b):
                v = x2[r, 0]
                if v > acc:  # noqa: PLR1730 (not max(): Paddle's NaN handling)
                    acc = v
        else:
            for r in range(first, b):
                v = x2[r, 0]
                if v < acc:  # noqa: PLR1730
                    acc = v
        out[i, 0] = acc
    else:
        for j in range(k):
            out[i, j] = x2[a, j]
        if code <= 2:
            for r in range(first, b):
                for j in range(k):
                    out[i, j] += x2[r, j]
        elif code == 3:
            for r in range(first, b):
                for j in range(k):
                    if x2[r, j] > out[i, j]:  # noqa: PLR1730
                        out[i, j] = x2[r, j]
        else:
            for r in range(first, b):
                for j in range(k):
                    if x2[r, j] < out[i, j]:  # noqa: PLR1730
                        out[i, j] = x2[r, j]
    if code == 1 or code == 2:
        d = scale[i]
        for j in range(k):
            out[i, j] = out[i, j] / d


@parallel_blocks
def _pick_rows(lo, hi, blk, xw, k, off, last, padw, outw):  # pragma: no cover - compiled by Numba
    """The first (or last) row of each sequence, ``k`` words each; ``padw`` for empty ones."""
    one = U(1)
    for i in range(lo, hi):
        a = off[i]
        b = off[i + one]
        dst = i * k
        if a == b:
            for j in range(k):
                outw[dst + j] = padw[j]
        else:
            src = (b - one if last else a) * k
            for j in range(k):
                outw[dst + j] = xw[src + j]


# -- the CUDA launcher (lodtool.ops._cuda holds the shared device primitives) --------------------------------
def cuda_pool(xp, data: Any, offsets: Any, pool_type: str = "sum", pad_value: Any = 0, *, validated: bool = False):
    """``sequence_pool`` on the device: one row per sequence of ``offsets`` (the last level).

    Dtypes and pad rules as :func:`lodtool.ops.sequence_pool` (``pool_dtypes``).
    ``first``/``last`` move bytes (bit-identical); the reductions run one
    thread per (sequence, column) in row order, as the CPU kernel does, and give
    its bits for sum/max/min; average and sqrt divide by the same IEEE
    ``len``/``sqrt(len)``.  One thread walks a whole sequence, so a batch of a
    few very long sequences uses little of the GPU.

    >>> import cupy as cp  # doctest: +SKIP
    >>> cuda_pool(cp, cp.arange(12.0).reshape(6, 2), [0, 2, 2, 6], "sum", -1).tolist()  # doctest: +SKIP
    [[2.0, 4.0], [-1.0, -1.0], [28.0, 32.0]]
    """
    data = _cuda.on_device(xp, data)
    code = _code(pool_type)
    out_dtype, acc_dtype = pool_dtypes(data.dtype, pool_type)
    elem = tuple(data.shape[1:])
    padv = cast_value(pad_value, out_dtype, "sequence_pool: pad_value", elem)
    off = _cuda.level_offsets(xp, offsets, int(data.shape[0]), validated)
    n = int(off.shape[0]) - 1
    if code in (FIRST, LAST):
        xw, k = _cuda.device_words(xp, data)
        out = xp.empty((n,) + elem, data.dtype)
        outw, _ = _cuda.device_words(xp, out, xw.dtype)
        _cuda.gather_rows(xp, xw, k, off, n, n, outw, mode=_cuda.MODE_FIRST if code == FIRST else _cuda.MODE_LAST,
                          padw=_cuda.pad_words(xp, padv, xw.dtype, k))
        return out
    width = row_size(elem)
    work = _kernel_dtype(data.dtype, acc_dtype)
    x2 = xp.ascontiguousarray(data.reshape(int(data.shape[0]), width).astype(work, copy=False))
    out = xp.empty((n, width), work)
    pad2 = xp.asarray(padv.astype(work).reshape(width))
    if code in (AVERAGE, SQRT):
        scale = (off[1:] - off[:-1]).astype(work)
        if code == SQRT:
            scale = xp.sqrt(scale)
    else:
        scale = xp.zeros(1, work)
    if n and width:
        _cuda.launch(xp, _cuda.compiled().pool, _cuda.grid(n * width), x2, off, n, width, code, pad2, scale, out)
    return out.astype(out_dtype, copy=False).reshape((n,) + elem)


@parallel_blocks
def _first_equal(lo, hi, blk, x2, off, out, index):  # pragma: no cover - compiled by Numba
    """``index[i, j]``: :func:`_first_row_equal` of sequence ``i``'s result ``out[i, j]`` (MaxIndex)."""
    one = U(1)
    k = x2.shape[1]
    for i in range(lo, hi):
        for j in range(k):
            index[i, j] = _first_row_equal(x2, off[i], off[i + one], j, out[i, j])


@kernel(inline="always")
def _first_row_equal(x2, a, b, j, v):  # pragma: no cover - compiled (CPU and CUDA)
    """The first row of ``a..b`` whose value ``j`` is ``v``; ``a`` for a NaN ``v`` (max and min keep a NaN first
    row), -1 for an empty sequence."""
    if a == b:
        return np.int64(-1)
    if v == v:
        for r in range(a, b):
            if x2[r, j] == v:
                return np.int64(r)
    return np.int64(a)


def _first_equal_dev(x2, off, n, w, out, index):  # pragma: no cover - CUDA kernel
    """``index[i, c]`` as :func:`_first_equal`, one thread per (sequence, column)."""
    e = np.int64(cuda.grid(1))
    stride = np.int64(cuda.gridsize(1))
    while e < n * w:
        i = e // w
        c = e - i * w
        index[i, c] = _first_row_equal(x2, off[i], off[i + 1], c, out[i, c])
        e += stride


def cuda_max_index(xp, data, off, out, acc_dtype: np.dtype):
    """MaxIndex on the device: the first row of each sequence equal to its result ``out`` (int32, -1: empty).

    Exact, because max and min pick an existing value.

    >>> import cupy as cp  # doctest: +SKIP
    >>> x, off, out = cp.array([3.0, 9.0, 9.0]), cp.array([0, 2, 2, 3]), cp.array([9.0, 0.0, 9.0])  # doctest: +SKIP
    >>> cuda_max_index(cp, x, off, out, np.dtype(np.float64)).tolist()  # doctest: +SKIP
    [1, -1, 2]
    """
    n_rows = int(data.shape[0])
    n = int(off.shape[0]) - 1
    elem = tuple(data.shape[1:])
    width = row_size(elem)
    work = _kernel_dtype(data.dtype, acc_dtype)
    x2 = xp.ascontiguousarray(data.reshape(n_rows, width).astype(work, copy=False))
    o2 = xp.ascontiguousarray(out.reshape(n, width).astype(work, copy=False))
    index = xp.empty((n, width), index_dtype(n_rows))
    if n and width:
        kern = _cuda.jit_kernels([_first_equal_dev], [_first_row_equal.py_func]).first_equal_dev
        _cuda.launch(xp, kern, _cuda.grid(n * width), x2, off, n, width, o2, index)
    return index.reshape((n,) + elem)


__all__ = ["sequence_pool", "sequence_first_step", "sequence_last_step", "pool_dtypes", "POOL_TYPES",
           "paddle_pad_value", "index_dtype", "cuda_pool", "cuda_max_index"]
