"""The value policy every reader shares: which dtypes lodtool stores, and casts that never lose a value.

JSON, NPY and NPZ (and every later format) read values the same way: an
explicit ``dtype`` must hold each value exactly (:func:`cast_values`), and
chunks of one input concatenate with promotion (:func:`concat_chunks`).

>>> resolve_dtype("float32"), cast_values(np.array([1, 2]), np.dtype("int8")).tolist()
(dtype('float32'), [1, 2])
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import numpy as np

from ..errors import LodDtypeError, LodInputError, LodShapeError, LodUsageError
from ..tensor import LoDTensor, check_dtype, concat_tensors


def resolve_dtype(dtype: Any) -> np.dtype | None:
    """``dtype`` as a numpy dtype lodtool can store, or None (infer).

    >>> resolve_dtype("int32"), resolve_dtype(None)
    (dtype('int32'), None)
    """
    if dtype is None:
        return None
    try:
        dt = np.dtype(dtype)
    except (TypeError, ValueError):
        raise LodUsageError(f"unknown dtype {dtype!r}; use a numeric numpy dtype such as int32, int64, float32 "
                            "or bool") from None
    return check_dtype(dt, "the requested dtype")


def cast_values(data: np.ndarray, dtype: np.dtype | None, where: Callable[[int], str] = lambda row: "") -> np.ndarray:
    """``data`` as ``dtype``, refusing values the dtype cannot hold.

    ``where(row)`` names the position of a data row for the error message.

    >>> cast_values(np.array([1, 2]), np.dtype("uint8")).dtype
    dtype('uint8')
    >>> cast_values(np.array([1, 300]), np.dtype("uint8"))
    Traceback (most recent call last):
    ...
    lodtool.errors.LodInputError: value 300 does not fit in uint8
    """
    if dtype is None or data.dtype == dtype:
        return data
    src, dst = data.dtype, np.dtype(dtype)
    flat = data.reshape(-1)
    bad = None
    reason = ""
    if dst.kind == "b":
        if src.kind != "b":
            bad = (flat != 0) & (flat != 1)
            reason = "is neither 0 nor 1, so it is no bool"
    elif dst.kind in "iu":
        info = np.iinfo(dst)
        if src.kind in "iu":
            bad = (flat < info.min) | (flat > info.max)
            reason = f"does not fit in {dst}"
        elif src.kind == "f":
            with np.errstate(invalid="ignore"):
                bad = ~np.isfinite(flat) | (flat != np.trunc(flat)) | (flat < float(info.min)) | \
                    (flat >= float(info.max) + 1.0)
            reason = f"is not a whole number that fits in {dst}"
        elif src.kind == "c":
            bad = np.ones(flat.shape, dtype=bool)
            reason = f"is complex, which {dst} cannot hold"
    elif dst.kind == "f" and src.kind == "c":
        bad = flat.imag != 0
        reason = f"is complex, which {dst} cannot hold"
    if bad is not None and bad.any():
        k = int(np.argmax(bad))
        raise _value_error(flat[k], k, data, where, reason)
    with np.errstate(over="ignore", invalid="ignore"):
        out = data.real.astype(dst) if (src.kind == "c" and dst.kind != "c") else data.astype(dst)
    if dst.kind in "fc" and src.kind in "iufc":
        out_flat = out.reshape(-1)
        over = np.isinf(out_flat) & np.isfinite(flat)
        if over.any():
            k = int(np.argmax(over))
            raise _value_error(flat[k], k, data, where, f"overflows {dst}")
    return out


def _value_error(value, k: int, data: np.ndarray, where: Callable[[int], str], reason: str) -> LodInputError:
    per_row = max(int(np.prod(data.shape[1:], dtype=np.int64)), 1)
    place = where(k // per_row)
    text = repr(value.item() if hasattr(value, "item") else value)
    return LodInputError(f"{place}value {text} {reason}")


def concat_chunks(chunks: Iterable[LoDTensor]) -> LoDTensor:
    """Concatenate chunks of whole top-level sequences into one tensor (dtypes promote).

    >>> from lodtool import LoDTensor
    >>> a = LoDTensor(np.array([1, 2]), [[0, 2]])
    >>> b = LoDTensor(np.array([3.5]), [[0, 1, 1]])
    >>> t = concat_chunks([a, b])
    >>> t.lod, t.data.tolist()
    ([[0, 2, 3, 3]], [1.0, 2.0, 3.5])
    """
    chunks = list(chunks)
    if not chunks:
        raise LodInputError("no sequences to concatenate")
    if len(chunks) == 1:
        return chunks[0]
    first = chunks[0]
    for c in chunks[1:]:
        if c.lod_level != first.lod_level or c.element_shape != first.element_shape:
            raise LodShapeError(f"chunks differ: {c.lod_level} LoD levels and element shape {c.element_shape} "
                                f"after {first.lod_level} and {first.element_shape}")
    dtype = _promote([np.asarray(c).dtype for c in chunks if c.n_rows] or [first.dtype])
    return concat_tensors([c if c.dtype == dtype else LoDTensor._trusted(np.asarray(c).astype(dtype), c.offsets,
                                                                         c.level_names) for c in chunks])


def _promote(dtypes: list[np.dtype]) -> np.dtype:
    out = dtypes[0]
    for dt in dtypes[1:]:
        if dt == out:
            continue
        if {dt.kind, out.kind} <= {"i", "u"} and np.result_type(dt, out).kind == "f":
            raise LodDtypeError(f"chunks of {out} and {dt} have no common integer dtype; pass dtype=")
        out = np.result_type(out, dt)
    return out


def read_with_options(sources, read_one: Callable, label_of: Callable, *, lod_level: int | None = None,
                      dtype: Any = None, progress: Callable[[int], None] | None = None,
                      stats: dict | None = None):
    """The chunks ``read_one(source)`` yields for each source, with the registry's common options applied.

    For formats that state their own LoD (Parquet, Arrow, Paddle's files):
    ``lod_level`` must agree with it, ``dtype`` casts with :func:`cast_values`,
    ``stats["bytes_read"]`` counts the chunks' bytes and ``progress`` hears it.

    >>> from lodtool import LoDTensor
    >>> chunks = read_with_options(["a"], lambda s: [LoDTensor(np.arange(2), [[0, 2]])], str, dtype="int8")
    >>> [str(c.dtype) for c in chunks]
    ['int8']
    """
    target = resolve_dtype(dtype)
    stats = {} if stats is None else stats
    stats["bytes_read"] = 0
    for source in sources:
        label = label_of(source)
        for chunk in read_one(source):
            if lod_level is not None and chunk.lod_level != lod_level:
                raise LodInputError(f"{label}: holds {chunk.lod_level} LoD level(s), not the {lod_level} asked "
                                    "for (the file states its own)")
            stats["bytes_read"] += chunk.data.nbytes + 8 * sum(len(o) for o in chunk.offsets)
            if progress is not None:
                progress(stats["bytes_read"])
            if target is not None and target != chunk.dtype:
                data = cast_values(chunk.data, target, lambda row, label=label: f"{label}: ")
                chunk = LoDTensor._trusted(data, chunk.offsets, chunk.level_names)
            yield chunk


__all__ = ["resolve_dtype", "cast_values", "concat_chunks", "read_with_options"]
