"""``pack``: ragged JSON, JSON Lines, NPY or NPZ into a lodtool container (what ``lodtool pack`` runs).

The input is read in chunks of whole top-level sequences and each chunk is
appended to the container as it comes, so memory stays bounded whatever the
input size.  Parsing runs in a second thread (the fast JSON path releases the
GIL), overlapping the writing and compression of the previous chunk.  A failed
pack leaves no output: the container is committed only when everything is in.

>>> import os, tempfile
>>> d = tempfile.mkdtemp()
>>> src = os.path.join(d, "docs.jsonl")
>>> _ = open(src, "w").write("[[1, 2], [3]]\\n[[4, 5, 6]]\\n")
>>> r = pack([src], os.path.join(d, "docs.lod.h5"), level_names=["doc", "sentence"])
>>> r.sequences, r.rows, r.lod_level, str(r.dtype)
(2, 6, 2, 'int64')
"""

from __future__ import annotations

import os
import queue
import threading
from dataclasses import dataclass
from typing import BinaryIO, Callable, Iterator, Sequence, TypeVar

import numpy as np

from ..errors import LodUsageError
from ..tensor import LoDTensor
from .. import io as formats
from ..io._values import resolve_dtype

#: ``dtype=`` for the narrowest integer dtype that holds every value (see :func:`pack`)
AUTO_INT = "auto-int"

#: the input formats ``pack`` reads
INPUT_FORMATS = formats.readable()
#: input bytes parsed at a time
CHUNK_BYTES = 64 << 20
#: parse the next chunk in a thread while the previous one is written (measured: see benchmarks/bench_ingest.py)
OVERLAP = True

T = TypeVar("T")


@dataclass(frozen=True)
class PackResult:
    """What :func:`pack` wrote (``rows`` and ``sequences`` count this call's input only, also when appending)."""

    output: str
    name: str
    rows: int
    sequences: int
    lod_level: int
    dtype: np.dtype
    bytes_read: int
    #: data bytes saved against int64 by ``dtype="auto-int"`` (0 otherwise)
    bytes_saved: int = 0


def pack(inputs: Sequence[str | os.PathLike | BinaryIO], output: str | os.PathLike, *, format: str | None = None,
         lod_level: int | None = None, dtype=None, name: str = "tensor", level_names: Sequence[str] | None = None,
         compression: str | None = None, append: bool = False, chunk_bytes: int = CHUNK_BYTES,
         progress: Callable[[int], None] | None = None) -> PackResult:
    """Pack ragged input into tensor ``name`` of the container ``output``.

    ``inputs`` are paths, ``-`` (stdin) or binary streams, all of one
    ``format`` (``json``, ``jsonl``, ``npy``, ``npz``; default: from the file
    extensions ``.json .jsonl .ndjson .npy .npz``; stdin and streams need it).
    Several inputs concatenate as top-level sequences, in order: each .npy file
    is one sequence, each JSON / JSON Lines / NPZ input adds its sequences.
    ``lod_level``, ``dtype`` and the value policies are those of
    :mod:`lodtool.io.json`; ``dtype=None`` infers (and promotes int64 to
    float64 when a later chunk holds floats); ``dtype="auto-int"`` stores the
    narrowest integer dtype that holds every value (unsigned when none is
    negative), widening as later chunks need it, and never losing a value.  ``append=True`` adds the
    sequences to an existing tensor (or creates the file).  ``chunk_bytes`` is
    how much input is parsed at a time; ``progress(n)`` is called with the bytes
    read so far.  Errors are :class:`~lodtool.errors.LodError` subclasses and
    leave ``output`` as it was.

    >>> import os, tempfile, numpy as np
    >>> from lodtool.container import load
    >>> d = tempfile.mkdtemp()
    >>> a, b = os.path.join(d, "a.npy"), os.path.join(d, "b.npy")
    >>> np.save(a, np.zeros((3, 2), np.float32)); np.save(b, np.ones((1, 2), np.float32))
    >>> r = pack([a, b], os.path.join(d, "v.lod.h5"))
    >>> load(os.path.join(d, "v.lod.h5")).lod, r.dtype
    ([[0, 3, 4]], dtype('float32'))
    """
    inputs = _as_list(inputs)
    fmt = _input_format(inputs, format)
    if lod_level is not None and (isinstance(lod_level, bool) or int(lod_level) < 0):
        raise LodUsageError(f"lod_level must be a non-negative integer, got {lod_level!r}")
    auto_int = isinstance(dtype, str) and dtype == AUTO_INT
    target = None if auto_int else resolve_dtype(dtype)
    names = None if level_names is None else [str(n) for n in level_names]
    stats: dict = {"bytes_read": 0}
    chunks = _read(fmt, inputs, lod_level, target, chunk_bytes, progress, stats)
    from ..container.writer import LodWriter

    kwargs = {} if compression is None else {"compression": compression}
    rows = sequences = 0
    seen: np.dtype | None = None
    first: LoDTensor | None = None
    with LodWriter(output, append=append, **kwargs) as writer:
        tw = None
        for chunk in (_overlapped(chunks) if OVERLAP else chunks):
            if tw is None:
                first = chunk
                chunk_names = names if names is not None else (list(chunk.level_names) if chunk.level_names else None)
                if chunk_names is not None and len(chunk_names) != chunk.lod_level:
                    raise LodUsageError(f"{len(chunk_names)} level name(s) given ({', '.join(chunk_names)}), but the "
                                        f"input has {chunk.lod_level} LoD level(s)")
                tw = writer.add_tensor(name, dtype=AUTO_INT if auto_int else target,
                                       element_shape=chunk.element_shape, lod_level=chunk.lod_level,
                                       level_names=chunk_names)
            tw.append(chunk)
            rows += chunk.n_rows
            sequences += len(chunk)
            seen = chunk.dtype if seen is None else np.result_type(seen, chunk.dtype)
    if progress is not None:
        progress(stats["bytes_read"])
    assert first is not None  # every reader raises on empty input
    out_dtype = np.dtype(tw.dtype if auto_int else target if target is not None else seen)
    saved = 0
    if auto_int:
        values = rows * int(np.prod(first.element_shape, dtype=np.int64))
        saved = values * (8 - out_dtype.itemsize)
    return PackResult(os.fspath(output), name, rows, sequences, first.lod_level, out_dtype,
                      int(stats["bytes_read"]), saved)


def _as_list(inputs) -> list:
    if isinstance(inputs, (str, bytes, os.PathLike)) or hasattr(inputs, "read"):
        inputs = [inputs]
    inputs = list(inputs)
    if not inputs:
        raise LodUsageError("no input given")
    if sum(1 for i in inputs if isinstance(i, (str, os.PathLike)) and os.fspath(i) == "-") > 1:
        raise LodUsageError("stdin (-) can be read only once")
    return inputs


def _input_format(inputs: list, format: str | None) -> str:
    if format is not None:
        if format not in INPUT_FORMATS:
            raise LodUsageError(f"unknown input format {format!r}; choose one of {', '.join(INPUT_FORMATS)}")
        return format
    found = {}
    for src in inputs:
        if not isinstance(src, (str, os.PathLike)) or os.fspath(src) == "-":
            raise LodUsageError(f"reading stdin or a stream needs format= ({_either(INPUT_FORMATS)})")
        fmt = formats.format_of_path(src)
        if fmt is None:
            raise LodUsageError(f"{os.fspath(src)}: cannot tell the format from the extension "
                                f"({' '.join(formats.extensions())}); pass format=")
        found.setdefault(fmt.name, os.fspath(src))
    if len(found) > 1:
        a, b = list(found.items())[:2]
        raise LodUsageError(f"inputs mix formats ({a[1]} is {a[0]}, {b[1]} is {b[0]}); pack one format at a time")
    return next(iter(found))


def _either(names: Sequence[str]) -> str:
    return f"{', '.join(names[:-1])} or {names[-1]}" if len(names) > 1 else names[0]


def _read(fmt: str, inputs: list, lod_level, target, chunk_bytes: int, progress, stats: dict) -> Iterator[LoDTensor]:
    return formats.get(fmt).read(inputs, lod_level=lod_level, dtype=target, chunk_bytes=chunk_bytes,
                                 progress=progress, stats=stats)


def _overlapped(items: Iterator[T], depth: int = 1) -> Iterator[T]:
    """``items``, produced in a worker thread up to ``depth`` ahead of the consumer.

    Exceptions of the producer are raised in the consumer; when the consumer
    stops early (or fails), the producer stops at its next item.
    """
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    end = object()

    def put(entry) -> bool:
        while not stop.is_set():
            try:
                q.put(entry, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put((True, item)):
                    return
            put((True, end))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            put((False, exc))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    worker = threading.Thread(target=produce, name="lodtool-pack-reader", daemon=True)
    worker.start()
    try:
        while True:
            ok, item = q.get()
            if not ok:
                raise item
            if item is end:
                return
            yield item
    finally:
        stop.set()
        while worker.is_alive():
            try:
                q.get(timeout=0.05)
            except queue.Empty:
                pass
        worker.join()


__all__ = ["pack", "PackResult", "INPUT_FORMATS", "AUTO_INT"]
