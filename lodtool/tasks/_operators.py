"""Operators on files: read a container, run an operator, write a container.

This is the one place where :mod:`lodtool.container` and :mod:`lodtool.ops` meet
(neither imports the other).  Every operator on a container streams, so files
larger than memory work: pool, softmax and reverse over chunks of whole
top-level sequences; expand over chunks of x's sequences (or rows) bounded by
the rows read and the rows written; pad over chunks of the padded level's
sequences, written into the NPZ as they come.  Chunks hold at most
:data:`CHUNK_ROWS` rows and :data:`CHUNK_BYTES` bytes (fewer under a tight
``max_memory``), unless one sequence alone is bigger.  Containers are written
through the atomic writer, each chunk on a second thread while the next one
is read and computed.

``device="cuda"`` runs the operator on the GPU: each chunk goes to the device,
through the CUDA kernels, and back to the host for writing.  Without CuPy or a
GPU it fails at once, before any data is read, with a one-line
:class:`~lodtool.errors.LodBackendError`.

>>> import os, tempfile, numpy as np
>>> from lodtool import LoDTensor, save, load
>>> d = tempfile.mkdtemp()
>>> save(os.path.join(d, "x.h5"), LoDTensor(np.arange(5.0), [[0, 2, 5]]))
>>> _ = pool(os.path.join(d, "x.h5"), os.path.join(d, "sum.h5"), pool_type="sum")
>>> load(os.path.join(d, "sum.h5")).data.tolist()
[1.0, 9.0]
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import numpy as np

from .._device import to_host
from .._memory import keep_large_buffers_unpooled
from ..errors import LodUsageError, LodValidationError
from ..lod import validate_lod
from ..planner import row_offset_windows, runs
from ..tensor import LoDTensor

#: rows per chunk for the streaming operators
CHUNK_ROWS = 1 << 22
#: bytes of rows a chunk reads, or writes, at most (wide rows make chunks of fewer rows)
CHUNK_BYTES = 64 << 20
#: offsets entries read at a time when a streaming operator plans its chunks
OFFSET_WINDOW = 1 << 16


@dataclass
class OpResult:
    """What an operator wrote: the output, the tensor name and its size."""

    output: str
    name: str
    rows: int
    sequences: int
    lod_level: int
    dtype: str


def _check_device(device: str) -> None:
    """Fail early (before reading anything) when ``device`` cannot run operators.

    The CPU needs no check here, so a small run never imports Numba (see :func:`_tier`).
    """
    from ..ops import get_backend

    get_backend(None, "numpy" if device == "cpu" else None, device)


def _tier(device: str, work: int, crossover) -> None:
    """Load Numba now when the whole run's ``work`` is past the operator's crossover.

    Each chunk then compares its own work with the (lower) warm crossover, so a
    large file streamed in chunks runs the kernels as a whole, and a small one
    never imports Numba (see :mod:`lodtool.ops._backend`).
    """
    from ..ops import get_backend

    if device == "cpu":
        get_backend(None, None, "cpu", work=work, crossover=crossover)


def _open_tensor(path: str, name: str | None, max_memory: int | None):
    from ..container.shards import open_path  # a container file, or a sharded folder

    f = open_path(path, max_memory=max_memory)
    return f, f.tensor(name)


def _chunk_rows(element_shape: Sequence[int], dtype: np.dtype, max_memory: int) -> int:
    """Rows per chunk: :data:`CHUNK_ROWS`, fewer when the rows are wide or the memory limit is tight.

    A chunk's rows are read in one piece, and the memory limit refuses any read
    above it; an eighth of the limit leaves room for the chunk's output, the
    two outputs before it that are still being written (see :class:`_WriteBehind`)
    and the writer's buffers beside them.

    >>> _chunk_rows((), np.dtype("float32"), 1 << 30) == CHUNK_ROWS
    True
    >>> _chunk_rows((1024,), np.dtype("float64"), 1 << 30)  # 64 MiB of 8 KiB rows
    8192
    """
    row_bytes = np.dtype(dtype).itemsize * int(np.prod(element_shape, dtype=np.int64))
    budget = min(CHUNK_BYTES, max_memory // 8)
    return max(1, min(CHUNK_ROWS, budget // max(row_bytes, 1)))


def _offset_window(max_memory: int) -> int:
    """Offsets entries to read at once: :data:`OFFSET_WINDOW`, fewer under a tight memory limit."""
    return max(1, min(OFFSET_WINDOW, max_memory // 64))


def _require_valid(path: str, t) -> None:
    """Validate a lazy tensor's whole LoD block by block (offsets only), as a full read would."""
    problems = t.validate(max_problems=1)
    if problems:
        raise LodValidationError(f"{path}: tensor {t.name!r}: {problems[0]}")


class _WriteBehind:
    """Runs writes on a second thread, one at a time and in order, so writing a chunk overlaps reading and
    computing the next (the kernels and libhdf5's reads and writes release the GIL).

    At most one write waits while another runs.  The first write that fails stops the rest; its error
    is raised by the next :meth:`put` or on leaving the block, which always waits for the thread.  When
    the block fails, writes still waiting are dropped (the output is discarded anyway).
    """

    _STOP = object()

    def __init__(self):
        import queue
        import threading

        self._queue = queue.Queue(maxsize=1)
        self._error: BaseException | None = None
        self._dropping = False
        self._thread = threading.Thread(target=self._work, name="lodtool-write-behind", daemon=True)

    def __enter__(self) -> "_WriteBehind":
        self._thread.start()
        return self

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is self._STOP:
                return
            if self._error is None and not self._dropping:
                write, arg = item
                try:
                    write(arg)
                except BaseException as exc:  # handed to the caller's thread
                    self._error = exc
            del item

    def put(self, write: Callable, arg) -> None:
        if self._error is not None:
            raise self._error
        self._queue.put((write, arg))

    def __exit__(self, exc_type, exc, tb) -> None:
        self._dropping = exc_type is not None
        self._queue.put(self._STOP)
        self._thread.join()
        if exc_type is None and self._error is not None:
            raise self._error


def _stream(path: str, output: str, name: str | None, out_name: str | None, fn: Callable[[LoDTensor], LoDTensor],
            *, compression: str | None, max_memory: int | None, chunk_rows: int | None = None,
            second: str | None = None, overwrite: bool = False, force: bool = False, device: str = "cpu",
            crossover=None) -> OpResult:
    """Apply ``fn`` to each chunk of whole top-level sequences and append the results.

    With ``second`` (a tensor name), ``fn`` returns two tensors per chunk; the
    second goes to tensor ``{output name}_{second}`` of the same file.  ``crossover``
    (an operator's work-size tiers) decides up front whether the kernels pay for the whole file.
    """
    from ..container.writer import LodWriter

    keep_large_buffers_unpooled()  # flat memory however long the file (see lodtool._memory)

    f, t = _open_tensor(path, name, max_memory)
    with f:
        if crossover is not None:
            _tier(device, t.n_rows * int(np.prod(t.element_shape, dtype=np.int64)), crossover)
        chunk_rows = chunk_rows or _chunk_rows(t.element_shape, t.dtype, f.max_memory)
        name_out = out_name or t.name
        writer_kwargs = {"compression": compression} if compression else {}
        rows = seqs = 0
        with LodWriter(output, overwrite=overwrite, force=force, **writer_kwargs) as w:
            w.check_name(name_out)
            tw = None
            with _WriteBehind() as behind:
                tw2 = None

                def add(result):
                    names = result.level_names if result.level_names else None
                    return w.add_tensor(name_out if tw is None else f"{name_out}_{second}", dtype=result.dtype,
                                        element_shape=result.element_shape, lod_level=result.lod_level,
                                        level_names=names)

                for chunk in t.iter_chunks(max_rows=chunk_rows):
                    result = fn(chunk)
                    del chunk
                    if second is not None:
                        result, extra = result
                    if tw is None:
                        tw = add(result)
                        if second is not None:
                            tw2 = add(extra)
                    behind.put(tw.append, result)
                    if second is not None:
                        behind.put(tw2.append, extra)
                    rows += result.shape[0]
                    seqs += len(result)
                    last = result
                    del result
                if tw is None:  # zero top-level sequences: the operator on the empty tensor gives the output
                    last = fn(t.slice_level(0, 0, 0) if t.lod_level else t.head(0))
                    if second is not None:
                        last, extra = last
                    tw = add(last)
                    behind.put(tw.append, last)
                    if second is not None:
                        behind.put(add(extra).append, extra)
        return OpResult(str(output), name_out, rows, seqs, last.lod_level, str(last.dtype))


def pool(path: str, output: str, *, pool_type: str = "sum", name: str | None = None,
         out_name: str | None = None, pad_value: float = 0.0, compression: str | None = None,
         max_memory: int | None = None, device: str = "cpu", index: bool = False, overwrite: bool = False,
         force: bool = False) -> OpResult:
    """``sequence_pool`` over a container, streamed by top-level sequences.

    ``index=True`` (``max``/``min``) also writes Paddle's ``MaxIndex``, the data
    row each value came from (-1 for an empty sequence), as tensor
    ``{name}_index`` with the same LoD.

    The output follows :func:`lodtool.save`'s rule: into an existing container
    the tensor is added, a tensor of the same name needs ``overwrite=True``,
    ``force=True`` replaces the whole file.  So do the other operators.

    >>> import os, tempfile, numpy as np
    >>> from lodtool import LoDTensor, save, load
    >>> d = tempfile.mkdtemp()
    >>> save(os.path.join(d, "x.h5"), LoDTensor(np.arange(5.0), [[0, 2, 5]]))
    >>> r = pool(os.path.join(d, "x.h5"), os.path.join(d, "avg.h5"), pool_type="average")
    >>> load(os.path.join(d, "avg.h5")).data.tolist(), r.sequences
    ([0.5, 3.0], 2)
    >>> _ = pool(os.path.join(d, "x.h5"), os.path.join(d, "max.h5"), pool_type="max", index=True)
    >>> load(os.path.join(d, "max.h5"), "tensor_index").data.tolist()
    [1, 4]
    """
    from ..ops import sequence_pool
    from ..ops.pool import NUMBA_FROM, index_dtype

    _check_device(device)
    if not index:
        return _stream(path, output, name, out_name,
                       lambda c: sequence_pool(c, pool_type, pad_value=pad_value, device=device).to("cpu"),
                       compression=compression, max_memory=max_memory, overwrite=overwrite, force=force,
                       device=device, crossover=NUMBA_FROM)
    if str(pool_type).lower() not in ("max", "min"):
        raise LodUsageError(f"the index (Paddle's MaxIndex) is for max and min pooling, not {pool_type!r}")
    rows_before = [0]  # chunk indices count from the chunk's first row; the file's count from its first
    dtype = []

    def run(chunk):
        if not dtype:  # one dtype for the whole file: int32 as Paddle's, int64 past 2**31 rows
            f, t = _open_tensor(path, name, max_memory)
            with f:
                dtype.append(index_dtype(t.n_rows))
        out, idx = sequence_pool(chunk, pool_type, pad_value=pad_value, return_index=True, device=device)
        idx = np.asarray(to_host(idx)).astype(dtype[0])
        idx[idx >= 0] += rows_before[0]
        rows_before[0] += chunk.n_rows
        out = out.to("cpu")
        return out, LoDTensor._trusted(idx, out.offsets, out.level_names)

    return _stream(path, output, name, out_name, run, compression=compression, max_memory=max_memory,
                   second="index", overwrite=overwrite, force=force, device=device,
                   crossover=NUMBA_FROM)


def softmax(path: str, output: str, *, name: str | None = None, out_name: str | None = None,
            compression: str | None = None, max_memory: int | None = None, device: str = "cpu",
            overwrite: bool = False, force: bool = False) -> OpResult:
    """``sequence_softmax`` over a container, streamed by top-level sequences.

    >>> import os, tempfile, numpy as np
    >>> from lodtool import LoDTensor, save, load
    >>> d = tempfile.mkdtemp()
    >>> save(os.path.join(d, "x.h5"), LoDTensor(np.zeros(3), [[0, 1, 3]]))
    >>> _ = softmax(os.path.join(d, "x.h5"), os.path.join(d, "p.h5"))
    >>> load(os.path.join(d, "p.h5")).data.tolist()
    [1.0, 0.5, 0.5]
    """
    from ..ops import sequence_softmax
    from ..ops.softmax import NUMBA_FROM

    _check_device(device)
    return _stream(path, output, name, out_name, lambda c: sequence_softmax(c, device=device).to("cpu"),
                   compression=compression, max_memory=max_memory, overwrite=overwrite, force=force, device=device,
                   crossover=NUMBA_FROM)


def reverse(path: str, output: str, *, name: str | None = None, out_name: str | None = None,
            compression: str | None = None, max_memory: int | None = None, device: str = "cpu",
            overwrite: bool = False, force: bool = False) -> OpResult:
    """``sequence_reverse`` over a container, streamed by top-level sequences.

    >>> import os, tempfile, numpy as np
    >>> from lodtool import LoDTensor, save, load
    >>> d = tempfile.mkdtemp()
    >>> save(os.path.join(d, "x.h5"), LoDTensor(np.arange(5), [[0, 2, 5]]))
    >>> _ = reverse(os.path.join(d, "x.h5"), os.path.join(d, "r.h5"))
    >>> load(os.path.join(d, "r.h5")).data.tolist()
    [1, 0, 4, 3, 2]
    """
    from ..ops import sequence_reverse
    from ..ops.reverse import NUMBA_FROM

    _check_device(device)
    return _stream(path, output, name, out_name, lambda c: sequence_reverse(c, device=device).to("cpu"),
                   compression=compression, max_memory=max_memory, overwrite=overwrite, force=force, device=device,
                   crossover=NUMBA_FROM)


def read_lod_only(lazy) -> LoDTensor:
    """A tensor with the file's LoD and a zero-cost stand-in for its data (never read).

    ``sequence_expand`` reads only y's LoD; the stand-in is a broadcast view of
    one element, so no data is read or allocated.
    """
    offsets = [lazy.read_offsets(level) for level in range(lazy.lod_level)]
    validate_lod(offsets, lazy.n_rows)
    stand_in = np.broadcast_to(np.zeros((1,) + tuple(lazy.element_shape), lazy.dtype),
                               (lazy.n_rows,) + tuple(lazy.element_shape))
    return LoDTensor._trusted(stand_in, offsets, lazy.level_names)


def expand(x: str, y: str, output: str, *, x_name: str | None = None, y_name: str | None = None,
           ref_level: int = -1, out_name: str | None = None, compression: str | None = None,
           max_memory: int | None = None, device: str = "cpu", overwrite: bool = False,
           force: bool = False) -> OpResult:
    """``sequence_expand`` of tensor ``x`` by the LoD of tensor ``y``, streamed (y's data is never read).

    x's sequences (its rows, without a LoD) go through the operator in runs
    bounded by the rows read and written and the sequences written, each with
    the matching window of y's reference level rebased to 0; a sequence repeated
    more often than a chunk holds goes a part of its copies at a time.  The
    output is exactly ``sequence_expand(x, y, ref_level)``.

    >>> import os, tempfile, numpy as np
    >>> from lodtool import LoDTensor, save, load
    >>> d = tempfile.mkdtemp()
    >>> save(os.path.join(d, "x.h5"), LoDTensor(np.array([1.1, 2.2, 3.3, 4.4]), [[0, 1, 4]]))
    >>> save(os.path.join(d, "y.h5"), LoDTensor(np.zeros(6), recursive_sequence_lengths=[[1, 3], [1, 2, 1, 2]]))
    >>> r = expand(os.path.join(d, "x.h5"), os.path.join(d, "y.h5"), os.path.join(d, "out.h5"), ref_level=0)
    >>> out = load(os.path.join(d, "out.h5"))
    >>> out.data.tolist(), out.lod, r.sequences
    ([1.1, 2.2, 3.3, 4.4, 2.2, 3.3, 4.4, 2.2, 3.3, 4.4], [[0, 1, 4, 7, 10]], 4)
    """
    from ..container.writer import LodWriter
    from ..ops.expand import NUMBA_FROM as EXPAND_FROM, expand_level

    _check_device(device)
    fy, ty = _open_tensor(y, y_name, max_memory)
    with fy:
        _require_valid(fy.path, ty)
        fx, tx = _open_tensor(x, x_name, max_memory)
        with fx:
            _require_valid(fx.path, tx)
            level = expand_level(tx, ty, ref_level)
            _tier(device, max(tx.n_rows, ty.n_rows) * int(np.prod(tx.element_shape, dtype=np.int64)), EXPAND_FROM)
            name_out = out_name or tx.name
            max_rows = _chunk_rows(tx.element_shape, tx.dtype, fx.max_memory)
            window = _offset_window(min(fx.max_memory, fy.max_memory))
            writer_kwargs = {"compression": compression} if compression else {}
            rows = seqs = 0
            with LodWriter(output, overwrite=overwrite, force=force, **writer_kwargs) as w:
                tw = w.add_tensor(name_out, dtype=tx.dtype, element_shape=tx.element_shape,
                                  lod_level=tx.lod_level, level_names=tx.level_names)
                with _WriteBehind() as behind:
                    for chunk in _expanded_chunks(tx, ty, level, max_rows, window, device):
                        behind.put(tw.append, chunk)
                        rows += chunk.shape[0]
                        seqs += len(chunk)
                        del chunk  # freed once written, so the heap stays flat
    return OpResult(str(output), name_out, rows, seqs, tx.lod_level, str(tx.dtype))


def _expanded_chunks(tx, ty, level: int, max_rows: int, window: int, device: str) -> Iterator[LoDTensor]:
    """``sequence_expand`` of x's sequences (or rows) by y's ``level``, chunk by chunk, on the host.

    Sequence ``i`` of x has ``len_i`` rows (1 without a LoD) and is copied
    ``rep_i`` times: a run of sequences reads the sum of ``len_i`` rows and
    writes the sum of ``len_i * rep_i`` rows in the sum of ``rep_i`` sequences.
    The rows read and written together (both are in memory at once), and the
    sequences written, stay within ``max_rows``.  Runs without copies write
    nothing and are not read.
    """
    from ..ops import sequence_expand

    has_lod = tx.lod_level == 1
    count = ty.num_sequences(level)
    for start in range(0, count, window):
        stop = min(start + window, count)
        ref = ty.read_offsets(level, start, stop + 1)
        reps = ref[1:] - ref[:-1]
        xoff = tx.read_offsets(0, start, stop + 1) if has_lod else np.arange(start, stop + 1, dtype=np.int64)
        lens = xoff[1:] - xoff[:-1]
        for a, b in runs([lens * (reps + 1), reps], max_rows):
            copies = int(ref[b] - ref[a])
            if not copies:
                continue
            rows = tx.read_rows(xoff[a], xoff[b])
            xs = LoDTensor._trusted(rows, (xoff[a:b + 1] - xoff[a],) if has_lod else (), tx.level_names)
            for part in _copy_parts(ref[a:b + 1] - ref[a], int(lens[a]), max_rows):
                y_part = LoDTensor._trusted(np.broadcast_to(np.zeros(1, np.int8), (int(part[-1]),)), (part,))
                yield sequence_expand(xs, y_part, device=device).to("cpu")
            del rows, xs  # before the next run is read


def _copy_parts(ref: np.ndarray, length: int, max_rows: int) -> Iterator[np.ndarray]:
    """The reference offsets of a run, or for a run of one sequence, its copies a chunk's worth at a time.

    A part of the copies of a sequence of ``length`` rows holds, with the
    sequence itself, at most ``max_rows`` rows (and at least one copy).

    >>> [p.tolist() for p in _copy_parts(np.array([0, 5]), 2, 6)]
    [[0, 2], [0, 2], [0, 1]]
    >>> [p.tolist() for p in _copy_parts(np.array([0, 1, 3]), 2, 6)]
    [[0, 1, 3]]
    """
    copies = int(ref[-1])
    if len(ref) > 2 or copies <= 1:
        yield ref
        return
    per = max(1, min((max_rows - length) // max(length, 1), max_rows))
    for done in range(0, copies, per):
        yield np.array([0, min(per, copies - done)], np.int64)


def pad(path: str, output, *, name: str | None = None, pad_value: float = 0, maxlen: int | None = None,
        level: int = -1, max_memory: int | None = None, device: str = "cpu", truncate: str | None = None) -> dict:
    """``sequence_pad`` of a container's tensor into an NPZ of ``padded``, ``lengths`` and ``mask``, streamed.

    The lengths come from the offsets alone (and with them ``maxlen``, when
    not given); then each member of the archive is written in blocks: the
    padded rows of a run of sequences at a time (bounded by the rows read and
    padded), then the lengths, then the mask.  The arrays are
    exactly ``sequence_pad``'s and ``sequence_mask``'s.  ``output`` is a path,
    written atomically, or a binary stream (a pipe too), written as the blocks come.
    A sequence longer than ``maxlen`` is an error, as in Paddle, unless
    ``truncate`` is ``"head"`` (keep its first ``maxlen`` rows) or ``"tail"``
    (keep its last); ``lengths`` are then the kept lengths.

    >>> import io, os, tempfile, numpy as np
    >>> from lodtool import LoDTensor, save
    >>> p = os.path.join(tempfile.mkdtemp(), "x.h5")
    >>> save(p, LoDTensor(np.arange(5), recursive_sequence_lengths=[[2, 0, 3]]))
    >>> buf = io.BytesIO()
    >>> pad(p, buf, pad_value=-1)["shape"]
    [3, 3]
    >>> arrays = np.load(io.BytesIO(buf.getvalue()))
    >>> arrays["padded"].tolist(), arrays["lengths"].tolist(), arrays["mask"].sum(axis=1).tolist()
    ([[0, 1, -1], [-1, -1, -1], [2, 3, 4]], [2, 0, 3], [2, 0, 3])
    """
    from ..container.limits import check_memory
    from ..io.npy import write_npz_members
    from ..ops import sequence_mask
    from ..ops.pad import PAD_NUMBA_FROM, pad_level, padded_length

    from ..atomic import refuse_output_over_input

    _check_device(device)
    if truncate not in (None, "head", "tail"):
        raise LodUsageError(f"truncate must be 'head' or 'tail', got {truncate!r}")
    if truncate is not None and maxlen is None:
        raise LodUsageError("truncating needs a maxlen (--maxlen) to truncate to")
    refuse_output_over_input(output, [path])
    f, t = _open_tensor(path, name, max_memory)
    with f:
        _require_valid(f.path, t)
        _tier(device, t.n_rows * int(np.prod(t.element_shape, dtype=np.int64)), PAD_NUMBA_FROM)
        lvl = pad_level(t, level)
        window = _offset_window(f.max_memory)
        count = t.num_sequences(lvl)

        def lengths() -> Iterator[np.ndarray]:
            for roff in row_offset_windows(t, lvl, window):
                lens = roff[1:] - roff[:-1]
                yield lens if truncate is None else np.minimum(lens, maxlen)

        longest = max((int(block.max()) for block in lengths() if block.size), default=0)
        maxlen = padded_length(maxlen, longest, lvl)
        # one padded sequence (its rows and its mask row, a byte per step) is the least a chunk holds; zero-width
        # rows make it 0 bytes of data, so the steps count
        row_bytes = t.dtype.itemsize * int(np.prod(t.element_shape, dtype=np.int64))
        check_memory(maxlen * (row_bytes + 1), f.max_memory, f.path, f"one sequence padded to {maxlen:,} steps")
        max_rows = _chunk_rows(t.element_shape, t.dtype, f.max_memory)
        mask_rows = max(1, max_rows // max(maxlen, 1))  # no more sequences than a padded chunk, at a byte each

        def mask() -> Iterator[np.ndarray]:
            for block in lengths():
                for a in range(0, len(block), mask_rows):
                    yield sequence_mask(block[a:a + mask_rows], maxlen)

        padded = _padded_blocks(t, lvl, maxlen, pad_value, max_rows, window, device, truncate)
        # the first block before anything is written: a pad_value the dtype cannot hold, a device or a read that
        # fails, fails with nothing written (a stream gets no partial archive)
        first = next(padded, None)
        if first is None:  # zero sequences: an empty padded array of the right shape
            first = np.zeros((0, maxlen) + tuple(t.element_shape), t.dtype)
        shape = (count, maxlen) + tuple(t.element_shape)
        write_npz_members(output, [("padded", shape, t.dtype, itertools.chain([first], padded)),
                                   ("lengths", (count,), np.int64, lengths()),
                                   ("mask", (count, maxlen), np.bool_, mask())])
    return {"output": str(output) if isinstance(output, (str, os.PathLike)) else "-",
            "shape": list(shape), "sequences": count, "maxlen": maxlen}


def _truncated(rows: np.ndarray, roff: np.ndarray, maxlen: int, keep: str) -> LoDTensor:
    """The sequences of ``rows`` (row offsets ``roff``, from 0) cut to ``maxlen`` rows: their head or their tail.

    >>> _truncated(np.arange(6), np.array([0, 4, 6]), 3, "tail").to_nested()
    [[1, 2, 3], [4, 5]]
    """
    lens = roff[1:] - roff[:-1]
    kept = np.minimum(lens, maxlen)
    starts = roff[:-1] if keep == "head" else roff[1:] - kept
    ends = np.cumsum(kept)
    index = np.arange(int(ends[-1]) if len(ends) else 0) - np.repeat(ends - kept, kept) + np.repeat(starts, kept)
    return LoDTensor._trusted(rows[index], (np.concatenate([[0], ends]).astype(np.int64),))


def _padded_blocks(t, level: int, maxlen: int, pad_value, max_rows: int, window: int,
                   device: str, truncate: str | None = None) -> Iterator[np.ndarray]:
    """``sequence_pad`` of ``level``'s sequences, a run at a time (its rows read and padded rows within ``max_rows``)."""
    from ..ops import sequence_pad

    for roff in row_offset_windows(t, level, window):
        lens = roff[1:] - roff[:-1]
        for a, b in runs([lens + maxlen], max_rows):  # the rows read and the padded rows, in memory at once
            if truncate is not None:
                chunk = _truncated(t.read_rows(roff[a], roff[b]), roff[a:b + 1] - roff[a], maxlen, truncate)
            else:
                chunk = LoDTensor._trusted(t.read_rows(roff[a], roff[b]), (roff[a:b + 1] - roff[a],))
            padded = to_host(sequence_pad(chunk, pad_value=pad_value, maxlen=maxlen, device=device)[0])
            del chunk  # one chunk's buffers at a time: freed before the next are made, so the heap stays flat
            yield padded
            del padded


def unpad(npz: str, output: str, *, name: str = "tensor", compression: str | None = None,
          device: str = "cpu", max_memory: int | None = None, overwrite: bool = False,
          force: bool = False) -> OpResult:
    """``sequence_unpad`` of an NPZ holding ``padded`` and ``lengths`` into a container.

    The archive's declared sizes (and the unpadded copy, at most as big as ``padded``) must fit in
    ``max_memory`` before anything is inflated.

    >>> import os, tempfile, numpy as np
    >>> from lodtool import load
    >>> d = tempfile.mkdtemp()
    >>> np.savez(os.path.join(d, "p.npz"), padded=np.array([[1, 2, 0], [3, 0, 0]]), lengths=np.array([2, 1]))
    >>> _ = unpad(os.path.join(d, "p.npz"), os.path.join(d, "u.h5"))
    >>> load(os.path.join(d, "u.h5")).to_nested()
    [[1, 2], [3]]
    """
    from ..atomic import refuse_output_over_input
    from ..container.writer import save
    from ..io.npy import load_npz_arrays
    from ..ops import sequence_unpad

    _check_device(device)
    from ..container.limits import resolve_max_memory

    refuse_output_over_input(output, [npz])
    limit = resolve_max_memory(max_memory)
    arrays = load_npz_arrays(npz, required=("padded", "lengths"), max_memory=limit // 2)  # padded + its copy
    result = sequence_unpad(arrays["padded"], arrays["lengths"], device=device).to("cpu")
    kwargs = {"compression": compression} if compression else {}
    save(output, {name: result}, overwrite=overwrite, force=force, **kwargs)
    return OpResult(str(output), name, result.shape[0], len(result), result.lod_level, str(result.dtype))


def pack_plan(path: str, *, name: str | None = None, level: int = -1, max_memory: int | None = None,
              device: str = "cpu"):
    """The RNN packing plan of a level, from the offsets alone (its arrays on the host).

    >>> import os, tempfile, numpy as np
    >>> from lodtool import LoDTensor, save
    >>> p = os.path.join(tempfile.mkdtemp(), "x.h5")
    >>> save(p, LoDTensor(np.arange(6), recursive_sequence_lengths=[[1, 3, 2]]))
    >>> pack_plan(p).batch_sizes.tolist()
    [3, 2, 1]
    """
    from ..container.limits import check_memory
    from ..ops import pack_plan as plan_of

    _check_device(device)
    f, t = _open_tensor(path, name, max_memory)
    with f:
        lod_only = read_lod_only(t)
    if not lod_only.lod_level:
        raise LodUsageError("a 0-level tensor has no sequences to plan")
    if -lod_only.lod_level <= level < lod_only.lod_level:
        # the plan has one batch size per step of the longest sequence (and counting-sort scratch as long):
        # a file claiming one sequence of 2**40 empty rows must be refused, not allocated
        offsets = lod_only.offsets[level]
        longest = int((offsets[1:] - offsets[:-1]).max()) if len(offsets) > 1 else 0  # offsets [0]: none
        check_memory(16 * (longest + 1), f.max_memory, f.path, f"the plan of a sequence of {longest:,} steps")
    return plan_of(lod_only, level=level, device=device).to("cpu")
