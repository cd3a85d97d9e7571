"""Small helpers shared by the operators: input coercion, byte-word views, value casts.

Data-movement kernels (expand, pad, unpad, reverse, packing) never look at
values, only at bytes.  :func:`as_words` views each row as ``k`` unsigned
words of the widest size that divides the row and the data's alignment, so one
compiled kernel serves every dtype and element shape, and a float32 row of 16
values moves as 8 ``uint64`` words.

>>> import numpy as np
>>> w, k = as_words(np.zeros((5, 16), np.float32))
>>> w.dtype, w.shape, k
(dtype('uint64'), (40,), 8)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import lod as _lod
from .._device import is_device_array
from ..errors import LodDtypeError, LodIndexError, LodShapeError
from ..tensor import LoDTensor, check_dtype

_WORDS = (np.dtype(np.uint64), np.dtype(np.uint32), np.dtype(np.uint16), np.dtype(np.uint8))


#: unsigned 64-bit scalars for kernel index arithmetic (see the kernel notes in expand.py)
U = np.uint64


def as_tensor(x: Any, what: str = "x") -> LoDTensor:
    """A :class:`LoDTensor`, checked (one built with ``validate=False`` is validated here, before any kernel);
    an array (or anything array-like) as a 0-level tensor."""
    if isinstance(x, LoDTensor):
        return x.checked()
    if is_device_array(x):
        data = x
    else:
        try:
            data = np.asarray(x)
        except (ValueError, TypeError) as exc:
            raise LodShapeError(f"{what} is not a LoDTensor or an array ({exc})") from None
    check_dtype(data.dtype, what)
    if data.ndim == 0:
        raise LodShapeError(f"{what} must have at least one dimension (its rows)")
    return LoDTensor._trusted(data, ())


def need_lod(t: LoDTensor, op: str, what: str = "x") -> None:
    if not t.lod_level:
        raise LodShapeError(f"{op}: {what} has no LoD (0 levels); it needs at least one LoD level")


def level_index(t: LoDTensor, level: int, op: str) -> int:
    """``level`` as a non-negative index into ``t``'s levels (negative counts from the last)."""
    try:
        return _lod.level_position(level, t.lod_level)
    except LodIndexError as exc:
        raise LodIndexError(f"{op}: {exc}") from None


def row_offsets(offsets, level: int) -> np.ndarray:
    """Data-row offsets of the sequences of ``level`` (each spans every row under it).

    >>> row_offsets((np.array([0, 2, 3]), np.array([0, 2, 4, 7])), 0).tolist()
    [0, 4, 7]
    """
    o = offsets[level]
    for below in offsets[level + 1:]:
        o = below[o]
    return o


def row_size(shape) -> int:
    size = 1
    for d in shape:
        size *= int(d)
    return size


def need_one_value_per_row(element_shape, op: str, value: str = "value", why: str = "") -> None:
    """Refuse rows of more than one ``value``: ``op`` takes data of shape ``(N,)`` or ``(N, 1)``.

    >>> need_one_value_per_row((2,), "sequence_enumerate")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    lodtool.errors.LodShapeError: sequence_enumerate: each row must hold one value (...), but rows have shape (2,)
    """
    if row_size(element_shape) != 1:
        raise LodShapeError(f"{op}: each row must hold one {value} (shape (N,) or (N, 1)), but rows have shape "
                            f"{tuple(element_shape)}{why}")


def word_dtype(row_bytes: int, address: int) -> np.dtype:
    for w in _WORDS:
        if row_bytes % w.itemsize == 0 and address % w.itemsize == 0:
            return w
    return _WORDS[-1]  # pragma: no cover - uint8 always fits


def as_words(data: np.ndarray, w: np.dtype | None = None) -> tuple[np.ndarray, int]:
    """``(words, k)``: C-contiguous ``data`` as a flat unsigned array, ``k`` words per row.

    ``w`` forces the word dtype (it must divide the row size); by default the
    widest that divides the row and the data's alignment.  Rows of zero bytes
    give ``k = 0``.  Non-contiguous input is copied first.
    """
    data = np.ascontiguousarray(data)
    row_bytes = data.dtype.itemsize * row_size(data.shape[1:])
    if w is None:
        w = word_dtype(row_bytes, data.ctypes.data) if row_bytes else _WORDS[-1]
    return words_of(data, w), row_bytes // w.itemsize


def empty_words(rows: int, like: np.ndarray, w: np.dtype, element_shape=None) -> tuple[np.ndarray, np.ndarray]:
    """A fresh ``(rows, *element_shape)`` array of ``like``'s dtype and its view as ``w`` words."""
    shape = (rows,) + tuple(like.shape[1:] if element_shape is None else element_shape)
    out = np.empty(shape, like.dtype)
    return out, words_of(out, w)


def words_of(data: np.ndarray, w: np.dtype) -> np.ndarray:
    """A flat view of C-contiguous ``data`` as words of dtype ``w``."""
    flat = data.reshape(-1).view(np.uint8)
    return flat.view(w) if w.itemsize > 1 else flat


def cast_value(value: Any, dtype: np.dtype, what: str, shape=()) -> np.ndarray:
    """``value`` as an array of ``dtype`` broadcast to ``shape``, refusing lossy casts.

    Floats take any number (NaN included); integers and bools only values they
    hold exactly (``0.5`` or ``-1`` into ``uint8`` is a :class:`LodDtypeError`).

    >>> cast_value(-1, np.dtype(np.int8), "pad_value").tolist()
    -1
    """
    dtype = np.dtype(dtype)
    try:
        src = np.asarray(value)
    except (ValueError, TypeError) as exc:
        raise LodDtypeError(f"{what} {value!r} is not a number ({exc})") from None
    if src.dtype.kind not in "biufc":
        raise LodDtypeError(f"{what} {value!r} is not a number")
    try:
        src = np.broadcast_to(src, shape)
    except ValueError:
        raise LodShapeError(f"{what} has shape {src.shape}, which does not fit the element shape {tuple(shape)}") \
            from None
    if src.dtype.kind == "c" and dtype.kind != "c":
        if np.any(src.imag != 0):
            raise LodDtypeError(f"{what} {value!r} has an imaginary part; {dtype} cannot hold it")
        src = src.real
    if dtype.kind not in "fc" and not _exact(src, dtype):
        raise LodDtypeError(f"{what} {value!r} cannot be stored as {dtype} without changing it")
    with np.errstate(all="ignore"):
        out = src.astype(dtype)
    return np.array(out, order="C")


def _exact(src: np.ndarray, dtype: np.dtype) -> bool:
    """Whether every value of ``src`` is held exactly by the integer or bool ``dtype``."""
    if src.size == 0:
        return True
    if src.dtype.kind == "f":
        if not np.all(np.isfinite(src)) or np.any(src != np.floor(src)):
            return False
    lo, hi = (0, 1) if dtype.kind == "b" else (int(np.iinfo(dtype).min), int(np.iinfo(dtype).max))
    return int(src.min()) >= lo and int(src.max()) <= hi


__all__ = ["U", "as_tensor", "need_lod", "level_index", "row_offsets", "as_words", "empty_words", "words_of",
           "cast_value", "word_dtype", "row_size"]
