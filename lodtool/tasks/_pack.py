"""``pack``: ragged JSON, JSON Lines, NPY, NPZ, Parquet, Arrow or Paddle tensors into a container (``lodtool pack``).

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
import sys
import threading
from dataclasses import dataclass
from typing import BinaryIO, Callable, Iterator, Sequence, TypeVar

import numpy as np

from ..errors import LodInputError, LodUsageError
from ..tensor import LoDTensor
from .. import io as formats
from ..limits import resolve_max_memory
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
    #: the input format when it was detected from the first bytes (stdin, an unknown extension), else None
    detected_format: str | None = None
    #: data bytes saved against int64 by ``dtype="auto-int"`` (0 otherwise)
    bytes_saved: int = 0


def pack(inputs: Sequence[str | os.PathLike | BinaryIO], output: str | os.PathLike, *, format: str | None = None,
         lod_level: int | None = None, dtype=None, name: str = "tensor", level_names: Sequence[str] | None = None,
         compression: str | None = None, append: bool = False, overwrite: bool = False, force: bool = False,
         chunk_bytes: int = CHUNK_BYTES, progress: Callable[[int], None] | None = None,
         column: str | None = None, max_memory: int | None = None) -> PackResult:
    """Pack ragged input into tensor ``name`` of the container ``output``.

    ``inputs`` are paths, ``-`` (stdin) or binary streams, all of one
    ``format`` (one of :func:`lodtool.io.readable`: ``json``, ``jsonl``,
    ``npy``, ``npz``, ``parquet``, ``arrow``, ``pdtensor``; default: from the
    file extensions, else from the first bytes of stdin or of the file, see
    :func:`sniff_format`; streams need it).  Several inputs concatenate
    as top-level sequences, in order: each .npy file is one sequence, every
    other input adds its sequences.
    ``lod_level``, ``dtype`` and the value policies are those of
    :mod:`lodtool.io.json`; ``dtype=None`` infers (and promotes int64 to
    float64 when a later chunk holds floats); ``dtype="auto-int"`` stores the
    narrowest integer dtype that holds every value (unsigned when none is
    negative), widening as later chunks need it, and never losing a value.
    Into an existing container the
    tensor is added and the file's other tensors are kept; a tensor ``name``
    that is already there is refused unless ``append=True`` (add the
    sequences to it; a missing file is created) or ``overwrite=True``
    (replace it); ``force=True`` replaces the whole file.  ``chunk_bytes`` is
    how much input is parsed at a time; ``progress(n)`` is called with the bytes
    read so far.  ``column`` picks the column of a table input (parquet,
    arrow; default: its only column).  An input read whole (an NPZ archive) must fit in ``max_memory``
    (default ``min(available RAM / 2, 4 GiB)``), checked before it is inflated.  Errors are
    :class:`~lodtool.errors.LodError` subclasses and
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
    from ..atomic import refuse_output_over_input

    inputs = _as_list(inputs)
    refuse_output_over_input(output, inputs)
    fmt, detected = _input_format(inputs, format)
    if lod_level is not None and (isinstance(lod_level, bool) or int(lod_level) < 0):
        raise LodUsageError(f"lod_level must be a non-negative integer, got {lod_level!r}")
    auto_int = isinstance(dtype, str) and dtype == AUTO_INT
    target = None if auto_int else resolve_dtype(dtype)
    names = None if level_names is None else [str(n) for n in level_names]
    stats: dict = {"bytes_read": 0}
    extra = reader_options(fmt, column, max_memory)
    chunks = _read(fmt, inputs, lod_level, target, chunk_bytes, progress, stats, extra)
    from ..container.writer import PACK_REMEDY, LodWriter

    kwargs = {} if compression is None else {"compression": compression}
    rows = sequences = 0
    seen: np.dtype | None = None
    first: LoDTensor | None = None
    with LodWriter(output, append=append, overwrite=overwrite, force=force, remedy=PACK_REMEDY, **kwargs) as writer:
        writer.check_name(name)  # before any input is read
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
        if tw is None and writer.append and name in writer.existing_names:
            # appending an empty input: nothing to add (the tensor is opened, so it is checked all the same)
            tw = writer.add_tensor(name, dtype=target, lod_level=writer.stored_lod_level(name))
        elif tw is None:  # empty input: zero sequences, when the number of levels is known
            if lod_level is None:
                where = ", ".join("stdin" if isinstance(i, (str, os.PathLike)) and os.fspath(i) == "-"
                                  else os.fspath(i) if isinstance(i, (str, os.PathLike)) else "<stream>"
                                  for i in inputs)
                raise LodInputError(f"{where}: empty input, so the number of LoD levels cannot be inferred; give "
                                    "--lod-level N (and --dtype) to store zero sequences")
            if names is not None and len(names) != lod_level:
                raise LodUsageError(f"{len(names)} level name(s) given, but lod_level is {lod_level}")
            tw = writer.add_tensor(name, dtype=target if target is not None else np.float64, element_shape=(),
                                   lod_level=lod_level, level_names=names)
    if progress is not None:
        progress(stats["bytes_read"])
    levels = first.lod_level if first is not None else tw.lod_level
    out_dtype = np.dtype(tw.dtype if auto_int else target if target is not None else seen if seen is not None
                         else tw.dtype)
    saved = 0
    if auto_int:
        values = rows * int(np.prod(first.element_shape if first is not None else (), dtype=np.int64))
        saved = values * (8 - out_dtype.itemsize)
    return PackResult(os.fspath(output), name, rows, sequences, levels, out_dtype,
                      int(stats["bytes_read"]), fmt if detected else None, saved)


def reader_options(fmt: str, column: str | None, max_memory: int | None) -> dict:
    """The extra options of format ``fmt``'s reader: ``column`` (table formats only) and ``max_memory``.

    >>> reader_options("parquet", "tokens", None)
    {'column': 'tokens'}
    >>> reader_options("jsonl", "tokens", None)
    Traceback (most recent call last):
    lodtool.errors.LodUsageError: column applies to table inputs (parquet, arrow), not jsonl
    """
    extra = {} if column is None else {"column": column}
    unknown = sorted(set(extra) - set(formats.get(fmt).options))
    if unknown:
        raise LodUsageError(f"{', '.join(unknown)} applies to table inputs (parquet, arrow), not {fmt}")
    if "max_memory" in formats.get(fmt).options:  # an input read whole is checked before it is inflated
        extra["max_memory"] = resolve_max_memory(max_memory)
    return extra


def _as_list(inputs) -> list:
    if isinstance(inputs, (str, bytes, os.PathLike)) or hasattr(inputs, "read"):
        inputs = [inputs]
    inputs = list(inputs)
    if not inputs:
        raise LodUsageError("no input given")
    if sum(1 for i in inputs if isinstance(i, (str, os.PathLike)) and os.fspath(i) == "-") > 1:
        raise LodUsageError("stdin (-) can be read only once")
    return inputs


#: the leading bytes of an HDF5 file (a container, which pack does not read)
HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
#: how much of an input :func:`sniff_format` looks at
SNIFF_BYTES = 1 << 16


def sniff_format(head: bytes) -> str | None:
    """The format of an input from its first bytes: npy, npz, hdf5, json, jsonl, or None.

    JSON and JSON Lines both start with ``[``: a second value on a later
    line makes it JSON Lines, one value (or one longer than ``head``) JSON.

    >>> sniff_format(b"[[1, 2], [3]]"), sniff_format(b"[1, 2]\\n[3]\\n"), sniff_format(b"\\x93NUMPY\\x01")
    ('json', 'jsonl', 'npy')
    """
    if head.startswith(HDF5_MAGIC):
        return "hdf5"
    binary = formats.format_of_bytes(head)
    if binary is not None:
        return binary.name
    text = head.removeprefix(b"\xef\xbb\xbf").lstrip()
    if not text.startswith(b"["):
        return None
    end = _end_of_first_value(text)
    if end is None:
        return "json"
    return "jsonl" if text[end:].lstrip().startswith(b"[") else "json"


def _end_of_first_value(text: bytes) -> int | None:
    depth, in_string, escaped = 0, False, False
    for i, byte in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte == 0x5B:
            depth += 1
        elif byte == 0x5D:
            depth -= 1
            if depth == 0:
                return i + 1
    return None


def _peek_stdin(n: int) -> bytes:
    try:
        stream = sys.stdin.buffer
        if hasattr(stream, "peek"):  # a pipe or file: what is peeked stays for the reader
            return stream.peek(n)[:n]
        if stream.seekable():  # a test's BytesIO
            pos = stream.tell()
            head = stream.read(n)
            stream.seek(pos)
            return head
    except (OSError, ValueError, AttributeError):  # no stdin, or one that cannot be peeked
        pass
    return b""


def _sniff(src) -> str:
    label = "stdin" if os.fspath(src) == "-" else os.fspath(src)
    if os.fspath(src) == "-":
        head = _peek_stdin(SNIFF_BYTES)
    else:
        try:
            with open(src, "rb") as f:
                head = f.read(SNIFF_BYTES)
        except OSError:
            head = b""
    fmt = sniff_format(head)
    if fmt == "hdf5":
        raise LodUsageError(f"{label} is an HDF5 file, not JSON / JSON Lines / NPY / NPZ: a lodtool container is "
                            "packed already (read it with unpack, slice or head)")
    if fmt is None:
        extensions = "" if label == "stdin" else f" or the extension ({' '.join(formats.extensions())})"
        raise LodUsageError(f"{label}: cannot tell the format from the first bytes{extensions}; "
                            f"give --format ({_either(INPUT_FORMATS)})")
    return fmt


def _input_format(inputs: list, format: str | None) -> tuple[str, bool]:
    """The inputs' format and whether it was detected from their first bytes."""
    if format is not None:
        if format not in INPUT_FORMATS:
            raise LodUsageError(f"unknown input format {format!r}; choose one of {', '.join(INPUT_FORMATS)}")
        return format, False
    found = {}
    detected = False
    for src in inputs:
        if not isinstance(src, (str, os.PathLike)):
            raise LodUsageError(f"reading a stream needs format= ({_either(INPUT_FORMATS)})")
        by_name = formats.format_of_path(src) if os.fspath(src) != "-" else None
        if by_name is not None:
            fmt = by_name.name
        else:
            fmt, detected = _sniff(src), True
        found.setdefault(fmt, os.fspath(src))
    if len(found) > 1:
        a, b = list(found.items())[:2]
        raise LodUsageError(f"inputs mix formats ({a[1]} is {a[0]}, {b[1]} is {b[0]}); pack one format at a time")
    return next(iter(found)), detected


def _either(names: Sequence[str]) -> str:
    return f"{', '.join(names[:-1])} or {names[-1]}" if len(names) > 1 else names[0]


def _read(fmt: str, inputs: list, lod_level, target, chunk_bytes: int, progress, stats: dict,
          extra: dict | None = None) -> Iterator[LoDTensor]:
    return formats.get(fmt).read(inputs, lod_level=lod_level, dtype=target, chunk_bytes=chunk_bytes,
                                 progress=progress, stats=stats, **(extra or {}))


def _overlapped(items: Iterator[T], depth: int = 1) -> Iterator[T]:
    """``items``, produced in a worker thread up to ``depth`` ahead of the consumer.

    Exceptions of the producer are raised in the consumer; when the consumer
    stops early (or fails), the producer stops at its next item.  Where this
    process may run one thread (:func:`lodtool._jit.thread_limit`: a Dask
    worker's share, ``LODTOOL_NUM_THREADS=1``), the items come in this thread.
    """
    from .._jit import thread_limit

    if thread_limit() <= 1:
        return iter(items)
    return _in_a_thread(items, depth)


def _in_a_thread(items: Iterator[T], depth: int) -> Iterator[T]:
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
