"""``sequence_pad``, ``sequence_unpad`` and ``sequence_mask``: between LoD and dense batches.

``sequence_pad`` turns the sequences of one level into a dense
``(sequences, maxlen, *element_shape)`` array plus their lengths, as Paddle's
``sequence_pad`` does for a 1-level input.  lodtool also pads the sequences of
any other level: a sequence of an upper level spans every data row under it.
A ``maxlen`` shorter than the longest sequence is an error, as in Paddle
(nothing is truncated).  ``pad_value`` is a scalar or an array of the element
shape (Paddle's per-element ``PadValue``), and must be representable in the
data's dtype.

``sequence_unpad`` is the inverse: a padded array and lengths back to a 1-level
LoD tensor.  ``sequence_mask`` builds the ``j < length`` mask; unlike Paddle its
default dtype is ``bool`` (Paddle's is int64) and it never truncates anything
but the mask itself.

>>> import numpy as np
>>> from lodtool import LoDTensor
>>> x = LoDTensor(np.arange(5), recursive_sequence_lengths=[[2, 0, 3]])
>>> padded, lengths = sequence_pad(x, pad_value=-1)
>>> padded.tolist(), lengths.tolist()
([[0, 1, -1], [-1, -1, -1], [2, 3, 4]], [2, 0, 3])
>>> sequence_unpad(padded, lengths).lod
[[0, 2, 2, 5]]
>>> sequence_mask(lengths).astype(int).tolist()
[[1, 1, 0], [0, 0, 0], [1, 1, 1]]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._device import is_device_array
from .._jit import parallel_blocks
from ..errors import LodShapeError, LodUsageError, LodValidationError
from ..lod import as_index_array, lengths_to_offsets
from ..tensor import LoDTensor, check_dtype
from . import _cuda
from ._backend import Crossover, get_backend
from ._util import U, as_tensor, as_words, cast_value, empty_words, level_index, need_lod, row_offsets, words_of

OP_PAD = "sequence_pad"
OP_UNPAD = "sequence_unpad"
OP_MASK = "sequence_mask"


#: input elements of sequence_pad from which the Numba kernel beats the reference (docs/benchmarks.md, crossovers)
PAD_NUMBA_FROM = Crossover(cold=1 << 25, warm=1 << 14)


#: padded elements of sequence_unpad from which the Numba kernel beats the reference (docs/benchmarks.md, crossovers)
UNPAD_NUMBA_FROM = Crossover(cold=1 << 27, warm=1 << 15)



def sequence_pad(x: LoDTensor, pad_value: Any = 0, maxlen: int | None = None, level: int = -1, *,
                 backend: str | None = None, device: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Pad the sequences of ``level`` into ``(padded, lengths)`` (Paddle's ``sequence_pad``).

    ``padded`` has shape ``(sequences, maxlen, *element_shape)`` and ``x``'s
    dtype; ``lengths`` is int64, counted in data rows.  ``maxlen`` defaults to
    the longest sequence; a shorter one is a :class:`~lodtool.errors.LodShapeError`.
    ``device="cuda"`` (the default for CuPy data or offsets) pads on the GPU
    and returns CuPy arrays with the same bits.

    >>> import numpy as np
    >>> from lodtool import LoDTensor
    >>> x = LoDTensor(np.arange(6), recursive_sequence_lengths=[[2, 1], [1, 2, 3]])
    >>> padded, lengths = sequence_pad(x, level=0, maxlen=4)
    >>> padded.tolist(), lengths.tolist()
    ([[0, 1, 2, 0], [3, 4, 5, 0]], [3, 3])
    """
    xt = as_tensor(x, "x")
    lvl = pad_level(xt, level)
    be = get_backend((xt.data, *xt.offsets), backend, device, work=xt.data.size, crossover=PAD_NUMBA_FROM)
    if be.name == "cupy":
        # every level is checked on the device before row_offsets indexes with them
        levels = _cuda.validate_offsets(be.xp, xt.offsets, xt.n_rows)
        roff = _cuda.row_offsets(be.xp, levels, lvl)
        maxlen = None if maxlen is None else _check_maxlen(maxlen, OP_PAD)
        return cuda_pad(be.xp, xt.data, roff, maxlen, pad_value, validated=True, level=lvl)
    roff = row_offsets(xt.offsets, lvl)
    lengths = roff[1:] - roff[:-1]
    maxlen = padded_length(maxlen, int(lengths.max()) if lengths.size else 0, lvl)
    pad = cast_value(pad_value, xt.dtype, f"{OP_PAD}: pad_value", xt.element_shape)
    if be.name == "numpy":
        return _reference(np.asarray(xt.data), lengths, maxlen, pad), lengths
    return _pad_numba(xt.data, roff, maxlen, pad), lengths


def pad_level(x: Any, level: int = -1) -> int:
    """The index of the level whose sequences ``sequence_pad(x, level=level)`` pads, with its errors.

    ``x`` needs only ``lod_level`` (a :class:`~lodtool.LoDTensor`, or a file's
    lazy tensor, checked before any data is read).

    >>> import numpy as np
    >>> from lodtool import LoDTensor
    >>> pad_level(LoDTensor(np.arange(3), [[0, 1, 3], [0, 1, 2, 3]]), -1)
    1
    """
    need_lod(x, OP_PAD)
    return level_index(x, level, OP_PAD)


def padded_length(maxlen: int | None, longest: int, level: int) -> int:
    """The padded length ``sequence_pad`` uses: ``maxlen``, or ``longest`` for ``None``.

    A ``maxlen`` shorter than the longest sequence (``longest`` rows, of
    ``level``) is a :class:`~lodtool.errors.LodShapeError`, as in Paddle.

    >>> padded_length(None, 4, 0), padded_length(6, 4, 0)
    (4, 6)
    """
    if maxlen is None:
        return longest
    maxlen = _check_maxlen(maxlen, OP_PAD)
    if maxlen < longest:
        raise LodShapeError(f"{OP_PAD}: maxlen {maxlen} is shorter than the longest sequence ({longest} rows) "
                            f"of level {level}; as in Paddle, it must be at least the longest length "
                            "(pass truncate=... to cut longer sequences)")
    return maxlen


def _check_maxlen(maxlen: Any, op: str) -> int:
    if isinstance(maxlen, (bool, np.bool_)) or not isinstance(maxlen, (int, np.integer)):
        raise LodUsageError(f"{op}: maxlen must be an integer or None, got {maxlen!r}")
    if maxlen < 0:
        raise LodUsageError(f"{op}: maxlen must be >= 0, got {maxlen}")
    return int(maxlen)


def _reference(data: np.ndarray, lengths: np.ndarray, maxlen: int, pad: np.ndarray) -> np.ndarray:
    """The plain NumPy implementation of ``sequence_pad`` (rows are taken in order)."""
    out = np.empty((len(lengths), maxlen) + data.shape[1:], data.dtype)
    out[...] = pad
    mask = np.arange(maxlen) < lengths[:, None]
    out[mask] = data  # the sequences of any level cover every row, in order
    return out


def _pad_numba(data: np.ndarray, roff: np.ndarray, maxlen: int, pad: np.ndarray) -> np.ndarray:
    n = len(roff) - 1
    xw, k = as_words(data)
    out, outw = empty_words(n * maxlen, data, xw.dtype)
    out = out.reshape((n, maxlen) + data.shape[1:])
    padw = words_of(np.ascontiguousarray(pad), xw.dtype)
    uniform = bool((padw == padw[0]).all()) if padw.size else True  # 0 and most pad values: one fill
    if k and maxlen:
        _pad(n, xw, U(k), roff.view(np.uint64), U(maxlen), padw, uniform, outw)
    return out


@parallel_blocks
def _pad(lo, hi, blk, xw, k, roff, maxlen, padw, uniform, outw):  # pragma: no cover - compiled by Numba
    """Rows ``roff[i]..roff[i+1]`` to ``out[i, :len]``; ``padw`` (``k`` words) after them.

    One-word rows: the block's whole output gets the pad value first (one long
    vectorised loop, which leaves those lines in cache), then the rows are
    copied over it; short per-sequence tail loops cost about twice as much.
    Wider rows whose pad words are all the same (``uniform``: a pad value of 0,
    say) get their tail in one flat loop instead of a loop per padded row.
    See the kernel notes in expand.py (unsigned indices, dynamic blocks).
    """
    one = U(1)
    width = maxlen * k
    if k == one:
        v = padw[0]
        for j in range(lo * width, hi * width):
            outw[j] = v
        for i in range(lo, hi):
            a = roff[i]
            dst = i * width
            for j in range(roff[i + one] - a):
                outw[dst + j] = xw[a + j]
    else:
        for i in range(lo, hi):
            a = roff[i]
            m = (roff[i + one] - a) * k
            src = a * k
            dst = i * width
            for j in range(m):
                outw[dst + j] = xw[src + j]
            rest = dst + m
            if uniform:
                v = padw[0]
                for j in range(width - m):
                    outw[rest + j] = v
            else:
                for t in range((width - m) // k):
                    for j in range(k):
                        outw[rest + j] = padw[j]
                    rest += k


def sequence_unpad(padded: Any, lengths: Any, *, backend: str | None = None,
                   device: str | None = None) -> LoDTensor:
    """The first ``lengths[i]`` rows of each ``padded[i]``, as a 1-level LoD tensor (Paddle's ``sequence_unpad``).

    ``padded`` has shape ``(sequences, maxlen, *element_shape)``; ``lengths``
    holds one integer per sequence (shape ``(n,)`` or ``(n, 1)``).  With CuPy
    arrays (or ``device="cuda"``) it runs on the GPU, lengths checked there.

    >>> import numpy as np
    >>> t = sequence_unpad(np.arange(12).reshape(3, 4), [2, 0, 3])
    >>> t.data.tolist(), t.lod
    ([0, 1, 8, 9, 10], [[0, 2, 2, 5]])
    """
    data = padded if is_device_array(padded) else np.asarray(padded)
    check_dtype(data.dtype, "padded")
    if data.ndim < 2:
        raise LodShapeError(f"{OP_UNPAD}: padded must have shape (sequences, maxlen, ...), got {data.shape}")
    be = get_backend((data, lengths), backend, device, work=data.size, crossover=UNPAD_NUMBA_FROM)
    if be.name == "cupy":
        out, off = cuda_unpad(be.xp, data, lengths)
        return LoDTensor._trusted(out, (off,))
    lens = np.asarray(lengths)
    if lens.size == 0:
        lens = lens.astype(np.int64)
    if lens.ndim == 2 and lens.shape[1] == 1:
        lens = lens[:, 0]
    lens = as_index_array(lens, what="lengths")
    n, maxlen = data.shape[:2]
    if len(lens) != n:
        raise LodShapeError(f"{OP_UNPAD}: {len(lens)} lengths for {n} padded sequences")
    if lens.size and lens.min() < 0:
        j = int(np.argmin(lens))
        raise LodValidationError(f"{OP_UNPAD}: lengths[{j}]={int(lens[j])} is negative")
    if lens.size and lens.max() > maxlen:
        j = int(np.argmax(lens))
        raise LodShapeError(f"{OP_UNPAD}: lengths[{j}]={int(lens[j])} is longer than the padded length {maxlen}")
    off = lengths_to_offsets(lens)
    if be.name == "numpy":
        out = _unpad_reference(data, lens, maxlen)
    else:
        out = _unpad_numba(data, off, maxlen)
    return LoDTensor._trusted(out, (off,))


def _unpad_reference(data: np.ndarray, lens: np.ndarray, maxlen: int) -> np.ndarray:
    """The plain NumPy implementation of ``sequence_unpad``."""
    return data[np.arange(maxlen) < lens[:, None]]


def _unpad_numba(data: np.ndarray, off: np.ndarray, maxlen: int) -> np.ndarray:
    element_shape = data.shape[2:]
    rows = data.reshape((data.shape[0] * maxlen,) + element_shape)
    xw, k = as_words(rows)
    out, outw = empty_words(int(off[-1]), rows, xw.dtype)
    if k:
        _unpad(len(off) - 1, xw, U(k), off.view(np.uint64), U(maxlen), outw)
    return out


@parallel_blocks
def _unpad(lo, hi, blk, xw, k, off, maxlen, outw):  # pragma: no cover - compiled by Numba
    """``padded[i, :len_i]`` (``k`` words a row) to output rows ``off[i]..off[i+1]``."""
    one = U(1)
    width = maxlen * k
    for i in range(lo, hi):
        a = off[i]
        m = (off[i + one] - a) * k
        src = i * width
        dst = a * k
        for j in range(m):
            outw[dst + j] = xw[src + j]


def _maxlen_scalar(maxlen: Any) -> Any:
    """A one-element integer array (host or device) as its integer; anything else as it is."""
    if maxlen is None or isinstance(maxlen, (int, np.integer, bool, np.bool_)):
        return maxlen
    if is_device_array(maxlen) or isinstance(maxlen, (np.ndarray, list, tuple)):
        arr = np.asarray(_cuda.to_host(maxlen))
        if arr.size != 1 or arr.dtype.kind not in "iu":
            raise LodUsageError(f"{OP_MASK}: maxlen must be an integer or a one-element integer array, got "
                                f"shape {arr.shape} of dtype {arr.dtype}")
        return arr.reshape(-1)[0]
    return maxlen


def sequence_mask(lengths: Any, maxlen: int | None = None, dtype: Any = bool, *,
                  device: str | None = None) -> np.ndarray:
    """``mask[..., j] = j < lengths[...]`` with ``maxlen`` columns (Paddle's ``sequence_mask``).

    ``maxlen`` defaults to the longest length; a shorter one truncates the mask,
    as in Paddle.  It may also be a one-element integer array (NumPy or CuPy),
    as Paddle takes a tensor.  Negative lengths are a
    :class:`~lodtool.errors.LodValidationError`.  CuPy lengths (or
    ``device="cuda"``) give a CuPy mask.

    >>> sequence_mask([1, 3], dtype="int64").tolist()
    [[1, 0, 0], [1, 1, 1]]
    >>> sequence_mask([1, 3], maxlen=np.array([2])).tolist()
    [[True, False], [True, True]]
    """
    maxlen = _maxlen_scalar(maxlen)
    if device is not None or is_device_array(lengths):
        be = get_backend(lengths, "numpy" if device == "cpu" else None, device)  # no Numba for a mask
        if be.name == "cupy":
            maxlen = None if maxlen is None else _check_maxlen(maxlen, OP_MASK)
            return cuda_mask(be.xp, lengths, maxlen, dtype)
    lens = np.asarray(lengths)
    if lens.dtype.kind not in "iu":
        if lens.size == 0:
            lens = lens.astype(np.int64)
        else:
            raise LodValidationError(f"{OP_MASK}: lengths must be integers, got dtype {lens.dtype}")
    if lens.size and lens.min() < 0:
        raise LodValidationError(f"{OP_MASK}: lengths must not be negative (found {int(lens.min())})")
    if maxlen is None:
        maxlen = int(lens.max()) if lens.size else 0
    else:
        maxlen = _check_maxlen(maxlen, OP_MASK)
    dtype = check_dtype(dtype, "dtype")
    mask = np.arange(maxlen) < lens[..., None]
    return mask if dtype == np.bool_ else mask.astype(dtype)



# -- the CUDA launchers (lodtool.ops._cuda holds the shared device primitives) -------------------------------
def cuda_pad(xp, data: Any, row_offsets: Any, maxlen: int | None = None, pad_value: Any = 0, *,
             validated: bool = False, level: int | None = None):
    """``sequence_pad`` on the device: ``(padded, lengths)``, padded ``(n, maxlen, *element_shape)``.

    ``row_offsets`` are the data-row offsets of the padded level (the last
    level, or :func:`row_offsets` of an upper one).  ``pad_value`` is a scalar
    or an array of the element shape, representable in the data's dtype.
    ``maxlen`` defaults to the longest sequence; a shorter one is a
    :class:`LodShapeError` (naming ``level`` when given).  Bit-identical to
    ``lodtool.ops.sequence_pad``.

    >>> import cupy as cp  # doctest: +SKIP
    >>> padded, lengths = cuda_pad(cp, cp.arange(5), [0, 2, 2, 5], pad_value=-1)  # doctest: +SKIP
    >>> padded.tolist(), lengths.tolist()  # doctest: +SKIP
    ([[0, 1, -1], [-1, -1, -1], [2, 3, 4]], [2, 0, 3])
    """
    data = _cuda.on_device(xp, data)
    roff = _cuda.level_offsets(xp, row_offsets, int(data.shape[0]), validated)
    n = int(roff.shape[0]) - 1
    lengths = roff[1:] - roff[:-1]
    longest = int(_cuda.to_host(lengths.max())) if n else 0
    if maxlen is None:
        maxlen = longest
    else:
        if isinstance(maxlen, (bool, np.bool_)) or not isinstance(maxlen, (int, np.integer)) or maxlen < 0:
            raise LodUsageError(f"sequence_pad: maxlen must be an integer >= 0 or None, got {maxlen!r}")
        maxlen = int(maxlen)
        if maxlen < longest:
            where = "" if level is None else f" of level {level}"
            raise LodShapeError(f"sequence_pad: maxlen {maxlen} is shorter than the longest sequence ({longest} "
                                f"rows){where}; as in Paddle, it must be at least the longest length")
    elem = tuple(data.shape[1:])
    padv = cast_value(pad_value, data.dtype, "sequence_pad: pad_value", elem)
    xw, k = _cuda.device_words(xp, data)
    out = xp.empty((n, maxlen) + elem, data.dtype)
    outw, _ = _cuda.device_words(xp, out, xw.dtype)
    _cuda.gather_rows(xp, xw, k, roff, n, n * maxlen, outw, mode=_cuda.MODE_PAD, p=maxlen,
                      padw=_cuda.pad_words(xp, padv, xw.dtype, k))
    return out, lengths


def cuda_unpad(xp, padded: Any, lengths: Any):
    """``sequence_unpad`` on the device: ``(data, offsets)`` from ``padded`` ``(n, maxlen, ...)`` and lengths.

    ``lengths`` (host or device, shape ``(n,)`` or ``(n, 1)``) are checked on
    the device: a negative one is a :class:`LodValidationError`, one longer
    than ``maxlen`` a :class:`LodShapeError`.

    >>> import cupy as cp  # doctest: +SKIP
    >>> data, off = cuda_unpad(cp, cp.arange(12).reshape(3, 4), [2, 0, 3])  # doctest: +SKIP
    >>> data.tolist(), off.tolist()  # doctest: +SKIP
    ([0, 1, 8, 9, 10], [0, 2, 2, 5])
    """
    padded = _cuda.on_device(xp, padded)
    if padded.ndim < 2:
        raise LodShapeError(f"sequence_unpad: padded must have shape (sequences, maxlen, ...), got {padded.shape}")
    if not is_device_array(lengths):
        lengths = np.asarray(lengths)
        if lengths.size == 0:
            lengths = lengths.astype(np.int64)
    if lengths.ndim == 2 and lengths.shape[1] == 1:
        lengths = lengths[:, 0]
    lens = _cuda.as_offsets(xp, lengths, what="lengths")
    n, maxlen = int(padded.shape[0]), int(padded.shape[1])
    if int(lens.shape[0]) != n:
        raise LodShapeError(f"sequence_unpad: {int(lens.shape[0])} lengths for {n} padded sequences")
    neg, over = _cuda.first_outside(xp, lens, 0, maxlen)
    if neg < n:
        value = _cuda.scalars(xp, lens[neg:neg + 1])[0]
        raise LodValidationError(f"sequence_unpad: lengths[{neg}]={value} is negative")
    if over < n:
        raise LodShapeError(f"sequence_unpad: lengths[{over}]={_cuda.scalars(xp, lens[over:over + 1])[0]} is longer "
                            f"than the padded length {maxlen}")
    off = xp.zeros(n + 1, _cuda.I64)
    xp.cumsum(lens, out=off[1:])
    total = _cuda.scalars(xp, off[-1:])[0]
    elem = tuple(padded.shape[2:])
    rows = xp.ascontiguousarray(padded).reshape((n * maxlen,) + elem)
    xw, k = _cuda.device_words(xp, rows)
    out = xp.empty((total,) + elem, padded.dtype)
    outw, _ = _cuda.device_words(xp, out, xw.dtype)
    _cuda.gather_rows(xp, xw, k, off, n, total, outw, mode=_cuda.MODE_STRIDE, p=maxlen)
    return out, off


def cuda_mask(xp, lengths: Any, maxlen: int | None = None, dtype: Any = bool):
    """``sequence_mask`` on the device: ``mask[..., j] = j < lengths[...]``.

    >>> import cupy as cp  # doctest: +SKIP
    >>> cuda_mask(cp, cp.array([1, 3]), dtype="int64").tolist()  # doctest: +SKIP
    [[1, 0, 0], [1, 1, 1]]
    """
    lens = lengths if is_device_array(lengths) else xp.asarray(np.asarray(lengths))
    if lens.dtype.kind not in "iu":
        if lens.size:
            raise LodValidationError(f"sequence_mask: lengths must be integers, got dtype {lens.dtype}")
        lens = lens.astype(_cuda.I64)
    lo = int(_cuda.to_host(lens.min())) if lens.size else 0
    if lo < 0:
        raise LodValidationError(f"sequence_mask: lengths must not be negative (found {lo})")
    if maxlen is None:
        maxlen = int(_cuda.to_host(lens.max())) if lens.size else 0
    elif isinstance(maxlen, (bool, np.bool_)) or not isinstance(maxlen, (int, np.integer)) or maxlen < 0:
        raise LodUsageError(f"sequence_mask: maxlen must be an integer >= 0 or None, got {maxlen!r}")
    out = xp.arange(int(maxlen), dtype=_cuda.I64) < lens[..., None]
    dtype = check_dtype(dtype, "dtype")
    return out if dtype == np.bool_ else out.astype(dtype)


__all__ = ["sequence_pad", "sequence_unpad", "sequence_mask", "pad_level", "padded_length", "cuda_pad", "cuda_unpad",
           "cuda_mask"]
