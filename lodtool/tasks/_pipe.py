"""The chunk pipe, ``run(chunks, fn, sink)``: what every operator over files is a configuration of.

The chunks are validated pieces of whole top-level sequences: :func:`stored_chunks` of a container's or a
sharded folder's lazy tensor, the runs an operator plans from the offsets (expand, concat, lod_reset), or
on Dask one partition (:func:`lodtool.interop.dask.read_partition`, read through the same lazy tensor).
``fn`` is the operator on one chunk: the functions below pickle, so Dask maps the very same ones over its
partitions.  The sink is a :class:`TensorSink` (tensors of one container, written atomically) or, on Dask,
a shard per partition.  The pipe computes the next chunk on a second thread while the sink writes the last
(the kernels and libhdf5 release the GIL), sizes the chunks by their rows and the memory limit, and
returns one :class:`OpResult`.

>>> import numpy as np
>>> from lodtool.ops import sequence_reverse
>>> t = LoDTensor(np.arange(5), [[0, 2, 5]])
>>> step(sequence_reverse)(t).data.tolist()
[1, 0, 4, 3, 2]
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Sequence, TypeVar

import numpy as np

from .._device import to_host
from ..errors import LodUsageError, LodValidationError
from ..limits import STREAM_CHUNK_BYTES
from ..tensor import LoDTensor, bytes_per_row

T = TypeVar("T")

#: rows per chunk for the streaming operators
CHUNK_ROWS = 1 << 22
#: offsets entries read at a time when a streaming operator plans its chunks
OFFSET_WINDOW = 1 << 16


@dataclass
class OpResult:
    """What an operator wrote (in one process or on Dask): the output, the tensor name and its size."""

    output: str
    name: str
    rows: int
    sequences: int
    lod_level: int
    dtype: str


def chunk_rows(element_shape: Sequence[int], dtype: np.dtype, max_memory: int) -> int:
    """Rows per chunk: :data:`CHUNK_ROWS`, fewer when the rows are wide or the memory limit is tight.

    A chunk's rows are read in one piece, and the memory limit refuses any read
    above it; an eighth of the limit leaves room for the chunk's output, the
    two outputs before it that are still being written (see :func:`run`) and
    the writer's buffers beside them.

    >>> chunk_rows((), np.dtype("float32"), 1 << 30) == CHUNK_ROWS
    True
    >>> chunk_rows((1024,), np.dtype("float64"), 1 << 30)  # 64 MiB of 8 KiB rows
    8192
    """
    row_bytes = bytes_per_row(dtype, element_shape)
    budget = min(STREAM_CHUNK_BYTES, max_memory // 8)
    return max(1, min(CHUNK_ROWS, budget // max(row_bytes, 1)))


def offset_window(max_memory: int, most: int = OFFSET_WINDOW) -> int:
    """Offsets entries to read at once: ``most``, fewer under a tight memory limit."""
    return max(1, min(most, max_memory // 64))


def check_device(device: str) -> None:
    """Fail early (before reading anything) when ``device`` cannot run operators.

    The CPU needs no check here, so a small run never imports Numba (see :func:`tier`).
    """
    from ..ops import get_backend

    get_backend(None, "numpy" if device == "cpu" else None, device)


def tier(device: str, work: int, crossover) -> None:
    """Load Numba now when the whole run's ``work`` is past the operator's crossover.

    Each chunk then compares its own work with the (lower) warm crossover, so a
    large file streamed in chunks runs the kernels as a whole, and a small one
    never imports Numba (see :mod:`lodtool.ops._backend`).
    """
    from ..ops import get_backend

    if device == "cpu":
        get_backend(None, None, "cpu", work=work, crossover=crossover)


def work(t) -> int:
    """The values of a stored tensor: the size :func:`tier` compares with an operator's crossover."""
    return t.n_rows * int(np.prod(t.element_shape, dtype=np.int64))


def open_tensor(path: str, name: str | None, max_memory: int | None, *, token_dtype=None,
                eos_token_id: int | None = None):
    """``(file, lazy tensor)`` of a container file, a sharded folder or a token dataset (``token_dtype`` and
    ``eos_token_id``: what a token dataset cannot say itself, see :func:`lodtool.open`)."""
    from ._open import open as open_path

    f = open_path(path, max_memory=max_memory, token_dtype=token_dtype, eos_token_id=eos_token_id)
    return f, f.tensor(name)


def require_valid(path: str, t) -> None:
    """Validate a lazy tensor's whole LoD block by block (offsets only), as a full read would."""
    problems = t.validate(max_problems=1)
    if problems:
        raise LodValidationError(f"{path}: tensor {t.name!r}: {problems[0]}")


def stored_chunks(t, max_rows: int) -> Iterator[LoDTensor]:
    """Chunks of whole top-level sequences of a lazy tensor, validated as they are read.

    A tensor of no sequences gives one empty chunk, so the operator still gives the output's type.  Every
    shard of a sharded tensor is checked against the manifest first, also one the manifest says is empty.
    """
    for i in range(getattr(t, "n_shards", 0)):
        t.shard(i)
    if not len(t):
        return iter([t.slice_level(0, 0, 0) if t.lod_level else t.head(0)])
    return t.iter_chunks(max_rows=max_rows)


def _mapped(fn: Callable, chunks: Iterable) -> Iterator:
    for chunk in chunks:
        result = fn(chunk)
        del chunk  # freed before the result waits for the writer, so the heap stays flat
        yield result


def ahead(fn: Callable, chunks: Iterable) -> Iterator:
    """``fn`` of each chunk, read and computed on a second thread one result ahead of the consumer (see
    :func:`read_ahead`: in this thread where the process may run one)."""
    return read_ahead(_mapped(fn, chunks))


def run(chunks: Iterable, fn: Callable, sink: "TensorSink", *,
        progress: Callable[[int], None] | None = None) -> OpResult:
    """``fn`` of every chunk into ``sink``: the next chunk is read and computed (:func:`ahead`) while the
    sink writes the one before; ``progress(rows)`` hears the input rows done after each chunk.

    The first error, of a read, of ``fn`` or of a write, stops the rest and discards the output.
    """
    done = 0

    def counted(chunk):
        nonlocal done
        done += getattr(chunk, "n_rows", 0)
        return chunk

    results = ahead(fn, map(counted, chunks) if progress else chunks)
    with sink, contextlib.closing(results):
        for result in results:
            sink.write(result)
            del result
            if progress:
                progress(done)
    return sink.result()


def is_folder_target(output) -> bool:
    """Whether ``output`` names a folder: a path ending in ``/``, or an existing folder."""
    output = os.fspath(output)
    return output.endswith(os.sep) or output.endswith("/") or os.path.isdir(output)


class TensorSink:
    """Results into tensors of one container, written atomically: a result is a tensor, or a tuple of tensors
    named ``names`` in order.

    Each tensor is added with the first result's dtype, row shape and levels, or with ``like``'s (any object
    with ``dtype``, ``element_shape``, ``lod_level`` and ``level_names``) before anything is written.  The
    output follows :func:`lodtool.save`'s rule: a tensor of the same name needs ``overwrite``, ``force``
    replaces the whole file.  ``tokens`` (:class:`~lodtool.tokens.TokenInfo`) is recorded with the first
    tensor: an operator that keeps the token ids passes its input's on.
    """

    def __init__(self, output, names: Sequence[str], *, compression: str | None = None, overwrite: bool = False,
                 force: bool = False, like=None, tokens=None):
        self._token_info = tokens
        if is_folder_target(output):
            raise LodUsageError(f"{os.fspath(output)}: is a folder, and this writes one container: give a file "
                                "name, or pass scheduler=... (pool, softmax, reverse and expand on Dask write a "
                                "sharded folder, one shard per partition)")
        self.output, self.names, self._like = output, list(names), like
        self._options = dict(overwrite=overwrite, force=force, **({"compression": compression} if compression else {}))
        self.rows = self.sequences = 0
        self._tensors = None
        self._writer = None

    def __enter__(self) -> "TensorSink":
        from ..container.writer import LodWriter

        self._writer = LodWriter(self.output, **self._options).__enter__()
        try:
            for name in self.names:  # refused before anything is read
                self._writer.check_name(name)
            if self._like is not None:
                self._add((self._like,))
        except BaseException as exc:
            self._writer.__exit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    def _add(self, results) -> None:
        self._tensors = [self._writer.add_tensor(n, dtype=r.dtype, element_shape=r.element_shape,
                                                 lod_level=r.lod_level, level_names=r.level_names or None,
                                                 tokens=self._token_info if i == 0 else None)
                         for i, (n, r) in enumerate(zip(self.names, results))]

    def write(self, result) -> None:
        results = result if isinstance(result, tuple) else (result,)
        if self._tensors is None:
            self._add(results)
        for tw, r in zip(self._tensors, results):
            tw.append(r)
        self.rows += results[0].shape[0]
        self.sequences += len(results[0])
        self._like = results[0]

    def __exit__(self, *exc):
        return self._writer.__exit__(*exc)

    def result(self) -> OpResult:
        return OpResult(str(self.output), self.names[0], self.rows, self.sequences, self._like.lod_level,
                        str(np.dtype(self._like.dtype)))


# -- what the pipe maps over chunks, and Dask over partitions (picklable) -------------------------------------
@dataclass(frozen=True)
class Step:
    """``fn(chunk, *args, **kwargs)``, its result brought to the host (a GPU result is copied back)."""

    fn: Callable
    args: tuple = ()
    kwargs: tuple = ()

    def __call__(self, chunk):
        out = self.fn(chunk, *self.args, **dict(self.kwargs))
        if isinstance(out, LoDTensor):
            return out.to("cpu")
        return tuple(o.to("cpu") for o in out) if isinstance(out, tuple) else out


def step(fn: Callable, *args, **kwargs) -> Step:
    """``fn`` with its arguments, as a function of one chunk."""
    return Step(fn, args, tuple(kwargs.items()))


@dataclass
class PoolIndex:
    """``sequence_pool`` with Paddle's MaxIndex: ``(pooled, index)``, the index counted in the stored tensor's
    rows; ``row`` is the stored row of the next chunk's first row (each call moves it on).

    >>> t = LoDTensor(np.array([3.0, 1, 5, 2, 9]), [[0, 2, 5]])
    >>> [x.data.tolist() for x in PoolIndex("max", 0.0, np.int32, row=10)(t)]
    [[3.0, 9.0], [10, 14]]
    """

    pool_type: str
    pad_value: float
    dtype: np.dtype
    device: str = "cpu"
    row: int = 0

    def __post_init__(self):
        if str(self.pool_type).lower() not in ("max", "min"):
            raise LodUsageError(f"the index (Paddle's MaxIndex) is for max and min pooling, not {self.pool_type!r}")

    def __call__(self, chunk: LoDTensor) -> tuple[LoDTensor, LoDTensor]:
        from ..ops import sequence_pool

        out, idx = sequence_pool(chunk, self.pool_type, pad_value=self.pad_value, return_index=True,
                                 device=self.device)
        idx = np.asarray(to_host(idx)).astype(self.dtype)
        idx[idx >= 0] += self.row
        self.row += chunk.n_rows
        out = out.to("cpu")
        return out, LoDTensor._trusted(idx, out.offsets, out.level_names)


def expand_by(xs: LoDTensor, ref: np.ndarray, device: str = "cpu") -> LoDTensor:
    """``sequence_expand`` of ``xs`` by the reference offsets ``ref`` (from 0); y's data is never needed.

    >>> expand_by(LoDTensor(np.array([1, 2]), None), np.array([0, 2, 3])).data.tolist()
    [1, 1, 2]
    """
    from ..ops import sequence_expand

    y = LoDTensor._trusted(np.broadcast_to(np.zeros(1, np.int8), (int(ref[-1]),)), (ref,))
    return sequence_expand(xs, y, device=device).to("cpu")


def truncated(rows: np.ndarray, roff: np.ndarray, maxlen: int, keep: str) -> LoDTensor:
    """The sequences of ``rows`` (row offsets ``roff``, from 0) cut to ``maxlen`` rows: their head or their tail.

    >>> truncated(np.arange(6), np.array([0, 4, 6]), 3, "tail").to_nested()
    [[1, 2, 3], [4, 5]]
    """
    lens = roff[1:] - roff[:-1]
    kept = np.minimum(lens, maxlen)
    starts = roff[:-1] if keep == "head" else roff[1:] - kept
    ends = np.cumsum(kept)
    index = np.arange(int(ends[-1]) if len(ends) else 0) - np.repeat(ends - kept, kept) + np.repeat(starts, kept)
    return LoDTensor._trusted(rows[index], (np.concatenate([[0], ends]).astype(np.int64),))


def pad_rows(rows: np.ndarray, roff: np.ndarray, maxlen: int, pad_value, truncate: str | None = None,
             device: str = "cpu") -> np.ndarray:
    """``sequence_pad`` of the sequences at row offsets ``roff`` (from 0) of ``rows``, on the host; with
    ``truncate`` (``"head"``/``"tail"``) each longer than ``maxlen`` keeps that end.

    >>> pad_rows(np.arange(5), np.array([0, 4, 5]), 2, -1, "tail").tolist()
    [[2, 3], [4, -1]]
    """
    from ..ops import sequence_pad

    chunk = truncated(rows, roff, maxlen, truncate) if truncate else LoDTensor._trusted(rows, (roff,))
    return to_host(sequence_pad(chunk, pad_value=pad_value, maxlen=maxlen, device=device)[0])


def check_truncate(truncate: str | None, maxlen: int | None) -> None:
    """What ``pad``'s ``truncate`` refuses, before anything is read."""
    if truncate not in (None, "head", "tail"):
        raise LodUsageError(f"truncate must be 'head' or 'tail', got {truncate!r}")
    if truncate is not None and maxlen is None:
        raise LodUsageError("truncating needs maxlen=... to truncate to")


def plan_of(lod_only: LoDTensor, level: int, max_memory: int, where: str, device: str = "cpu"):
    """The packing plan of ``level`` of a tensor whose data is a stand-in (the plan reads its offsets only).

    The plan has one batch size per step of the longest sequence (and counting-sort scratch as long): a file
    claiming one sequence of 2**40 empty rows is refused, not allocated.
    """
    from ..limits import check_memory
    from ..ops import pack_plan

    if not lod_only.lod_level:
        raise LodUsageError("a 0-level tensor has no sequences to plan")
    if -lod_only.lod_level <= level < lod_only.lod_level:
        offsets = lod_only.offsets[level]
        longest = int((offsets[1:] - offsets[:-1]).max()) if len(offsets) > 1 else 0  # offsets [0]: none
        check_memory(16 * (longest + 1), max_memory, where, f"the plan of a sequence of {longest:,} steps")
    return pack_plan(lod_only, level=level, device=device).to("cpu")


def lod_stand_in(offsets: Sequence[np.ndarray], n_rows: int, element_shape, dtype, level_names=None) -> LoDTensor:
    """A tensor with these (validated) offsets and a zero-cost stand-in for its data (a broadcast view of one
    element: nothing read or allocated), for what reads the LoD only."""
    stand_in = np.broadcast_to(np.zeros((1,) + tuple(element_shape), dtype), (n_rows,) + tuple(element_shape))
    return LoDTensor._trusted(stand_in, tuple(offsets), level_names)


def read_ahead(items: Iterator[T], depth: int = 1) -> Iterator[T]:
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

    worker = threading.Thread(target=produce, name="lodtool-read-ahead", daemon=True)
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


__all__ = ["run", "ahead", "read_ahead", "OpResult", "TensorSink", "stored_chunks", "Step", "step", "PoolIndex",
           "expand_by", "pad_rows", "truncated", "plan_of", "lod_stand_in", "chunk_rows", "offset_window", "CHUNK_ROWS",
           "OFFSET_WINDOW"]
