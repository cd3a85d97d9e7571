"""Operators on files: each a short configuration of the chunk pipe (:func:`lodtool.tasks._pipe.run`).

This is the one place where :mod:`lodtool.container` and :mod:`lodtool.ops` meet (neither imports the
other).  Every operator streams, so files larger than memory work: pool, softmax, reverse, erase,
enumerate, reshape and seq_slice over chunks of whole top-level sequences; expand over x's sequences (or
rows), bounded by the rows read and written; pad over the padded level's sequences, written into the NPZ
as they come; concat over the same range of top-level sequences of every input; lod_reset builds and
checks the new LoD from the offsets alone, then copies the rows.  ``device="cuda"`` runs each chunk
through the CUDA kernels (without CuPy or a GPU it fails at once, before any data is read);
``scheduler=`` runs pool, softmax, reverse, expand, pad and pack_plan on Dask, which maps the same
per-chunk functions over partitions of whole top-level sequences.

>>> import os, tempfile, numpy as np
>>> from lodtool import LoDTensor, save, load
>>> d = tempfile.mkdtemp()
>>> save(os.path.join(d, "x.h5"), LoDTensor(np.arange(5.0), [[0, 2, 5]]))
>>> _ = pool(os.path.join(d, "x.h5"), os.path.join(d, "sum.h5"), pool_type="sum")
>>> load(os.path.join(d, "sum.h5")).data.tolist()
[1.0, 9.0]
"""

from __future__ import annotations

import builtins
import contextlib
import itertools
import os
import shutil
import tempfile
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from ..errors import LodError, LodIndexError, LodShapeError, LodUsageError
from ..lod import extract_range, memory_reader
from ..planner import Bounds, row_offset_windows, runs, sequence_ranges
from ..tensor import LoDTensor
from ._pipe import (OpResult, PoolIndex, TensorSink, ahead, check_device, check_truncate, chunk_rows, expand_by,
                    is_folder_target, lod_stand_in, offset_window, open_tensor, pad_rows, plan_of, require_valid,
                    run, step, stored_chunks, tier, work)

_I64 = np.dtype(np.int64)


# -- the two routes ---------------------------------------------------------------------------------------------
def _chunkwise(path: str, output: str, make_fn: Callable, crossover, label: str, *, name: str | None,
               out_name: str | None, compression: str | None, max_memory: int | None, device: str,
               overwrite: bool, force: bool, scheduler: str | None, workers: int | None, partition_size,
               progress, suffixes: Sequence[str] = (), keeps_ids: bool = False, token_dtype: Any = None,
               eos_token_id: int | None = None) -> OpResult:
    """An operator on each chunk of whole top-level sequences: ``make_fn(the tensor's rows)``, configured once, in
    one process or (``label``) mapped over the partitions on a Dask ``scheduler``."""
    if scheduler:
        with _on_dask(path, name, scheduler=scheduler, workers=workers, partition_size=partition_size,
                      max_memory=max_memory, device=device, output=output, token_dtype=token_dtype,
                      eos_token_id=eos_token_id) as (bag, kwargs):
            return _written_on_dask(bag._map(make_fn(bag._n_rows), label), output, kwargs, out_name=out_name,
                                    compression=compression, max_memory=max_memory, overwrite=overwrite,
                                    force=force, progress=progress)
    check_device(device)
    return _stream(path, output, name, out_name, lambda f, t: make_fn(t.n_rows), crossover, compression=compression,
                   max_memory=max_memory, overwrite=overwrite, force=force, device=device, suffixes=suffixes,
                   progress=progress, keeps_ids=keeps_ids, token_dtype=token_dtype, eos_token_id=eos_token_id)


def _stream(path: str, output: str, name: str | None, out_name: str | None, make_fn: Callable, crossover=None, *,
            compression: str | None, max_memory: int | None, overwrite: bool, force: bool, device: str = "cpu",
            suffixes: Sequence[str] = (), progress: Callable[[int, int], None] | None = None,
            keeps_ids: bool = False, token_dtype: Any = None, eos_token_id: int | None = None) -> OpResult:
    """``make_fn(file, lazy tensor)`` (the operator on one chunk) over chunks of whole top-level sequences.

    Its results go to tensor ``out_name`` (the input's name by default); a result of more tensors puts the
    others in ``{out_name}_{suffix}``.  An operator that ``keeps_ids`` (it moves or drops rows, never changes
    a value) keeps the input's token metadata.  ``crossover`` (the operator's work-size tiers) decides up front
    whether the kernels pay for the whole file.
    """
    f, t = open_tensor(path, name, max_memory, token_dtype=token_dtype, eos_token_id=eos_token_id)
    with f:
        fn = make_fn(f, t)
        if crossover is not None:
            tier(device, work(t), crossover)
        name_out = out_name or t.name
        sink = TensorSink(output, [name_out] + [f"{name_out}_{s}" for s in suffixes], compression=compression,
                          overwrite=overwrite, force=force, tokens=t.tokens if keeps_ids else None)
        chunks = stored_chunks(t, chunk_rows(t.element_shape, t.dtype, f.max_memory))
        rows_done = None if progress is None else (lambda done: progress(done, t.n_rows))
        return run(chunks, fn, sink, progress=rows_done)


@contextlib.contextmanager
def _on_dask(path, name, *, scheduler: str, workers: int | None, partition_size, max_memory: int | None,
             device: str, output=None, token_dtype: Any = None, eos_token_id: int | None = None):
    """``(collection, compute keyword arguments)`` of a stored tensor on a Dask scheduler, held for the block.

    Bad workers, a missing Dask and a device other than the CPU are refused before anything is read; a
    failed job into a folder leaves none of its shards.
    """
    from ._shards import _no_stray_shards, dask_scheduler

    if device != "cpu":
        raise LodUsageError("a Dask scheduler runs the CPU kernels: pass device='cpu'")
    cluster = dask_scheduler(scheduler, workers)
    from ..interop.dask import DEFAULT_PARTITION_SIZE, read

    bag = read(path, name, partition_size=DEFAULT_PARTITION_SIZE if partition_size is None else partition_size,
               max_memory=max_memory, token_dtype=token_dtype, eos_token_id=eos_token_id)
    folder = output is not None and is_folder_target(output)
    with _no_stray_shards(output if folder else None), cluster as kwargs:
        yield bag, kwargs


def _written_on_dask(bag, output, kwargs: dict, *, out_name: str | None, compression: str | None,
                     max_memory: int | None, overwrite: bool, force: bool, progress) -> OpResult:
    """A collection's partitions written as the shards of a folder (``output`` ends in ``/`` or is a folder),
    or merged into one container; ``overwrite`` and ``force`` are the one-process rule."""
    from ..container.shards import merge_into
    from ..container.writer import LodWriter
    from ._shards import _refuse_replacing, _summary

    output, name = os.fspath(output), out_name or bag.name
    if is_folder_target(output):
        _refuse_replacing(output, overwrite=overwrite, force=force, can_append=False)
        manifest = bag.to_container(output, name=name, compression=compression, progress=progress, **kwargs)
    else:
        with LodWriter(output, overwrite=overwrite, force=force,
                       **({"compression": compression} if compression else {})) as w:
            for n in bag._output_names(name):  # refused before anything is computed, as in one process
                w.check_name(n)
            staging = tempfile.mkdtemp(prefix=".lodtool-shards-", dir=os.path.dirname(os.path.abspath(output)))
            try:
                manifest = bag.to_container(staging, name=name, compression=compression, progress=progress,
                                            **kwargs)
                merge_into(staging, w, max_memory=max_memory)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
    info = _summary(output, manifest)
    return OpResult(output, info["name"], info["rows"], info["sequences"], info["lod_level"], info["dtype"])


# -- over chunks of whole top-level sequences -------------------------------------------------------------------
def pool(path: str, output: str, *, pool_type: str = "sum", name: str | None = None,
         out_name: str | None = None, pad_value: float = 0.0, compression: str | None = None,
         max_memory: int | None = None, device: str = "cpu", index: bool = False, overwrite: bool = False,
         force: bool = False, scheduler: str | None = None, workers: int | None = None,
         partition_size: int | str | None = None, progress: Callable[[int, int], None] | None = None,
         token_dtype: Any = None, eos_token_id: int | None = None) -> OpResult:
    """``sequence_pool`` over a container, a sharded folder or a token dataset, streamed by top-level sequences.

    ``index=True`` (``max``/``min``) also writes Paddle's ``MaxIndex``, the data
    row each value came from (-1 for an empty sequence), as tensor
    ``{name}_index`` with the same LoD.

    The output follows :func:`lodtool.save`'s rule: into an existing container
    the tensor is added, a tensor of the same name needs ``overwrite=True``,
    ``force=True`` replaces the whole file.  ``token_dtype`` and ``eos_token_id`` are what a token dataset
    cannot say itself (see :func:`lodtool.open`; every input of an operator is read with them).  So do the
    other operators.

    With ``scheduler`` (``"processes"``, ``"threads"`` or an address; ``workers``
    for the local ones) the partitions of about ``partition_size`` bytes run on
    Dask: an ``output`` ending in ``/`` (or a folder) gets one shard per
    partition, a file name one container; ``progress(done, total)`` counts
    partitions there, and rows read in one process.  So do softmax, reverse and expand.

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

    def make_fn(n_rows):  # the index's dtype holds the whole file's rows: int32 as Paddle's, int64 past 2**31
        if index:
            return PoolIndex(pool_type, pad_value, index_dtype(n_rows), device)
        return step(sequence_pool, pool_type, pad_value=pad_value, device=device)

    return _chunkwise(path, output, make_fn, NUMBA_FROM, "pool", name=name, out_name=out_name,
                      compression=compression, max_memory=max_memory, device=device, overwrite=overwrite, force=force,
                      scheduler=scheduler, workers=workers, partition_size=partition_size, progress=progress,
                      suffixes=("index",) if index else (), token_dtype=token_dtype, eos_token_id=eos_token_id)


def softmax(path: str, output: str, *, name: str | None = None, out_name: str | None = None,
            compression: str | None = None, max_memory: int | None = None, device: str = "cpu",
            overwrite: bool = False, force: bool = False, scheduler: str | None = None, workers: int | None = None,
            partition_size: int | str | None = None, progress: Callable[[int, int], None] | None = None,
            token_dtype: Any = None, eos_token_id: int | None = None) -> OpResult:
    """``sequence_softmax`` over a container, streamed by top-level sequences (on Dask as :func:`pool`).

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

    return _chunkwise(path, output, lambda n_rows: step(sequence_softmax, device=device), NUMBA_FROM, "softmax",
                      name=name, out_name=out_name, compression=compression, max_memory=max_memory, device=device,
                      overwrite=overwrite, force=force, scheduler=scheduler, workers=workers,
                      partition_size=partition_size, progress=progress, token_dtype=token_dtype,
                      eos_token_id=eos_token_id)


def reverse(path: str, output: str, *, name: str | None = None, out_name: str | None = None,
            compression: str | None = None, max_memory: int | None = None, device: str = "cpu",
            overwrite: bool = False, force: bool = False, scheduler: str | None = None, workers: int | None = None,
            partition_size: int | str | None = None, progress: Callable[[int, int], None] | None = None,
            token_dtype: Any = None, eos_token_id: int | None = None) -> OpResult:
    """``sequence_reverse`` over a container, streamed by top-level sequences (on Dask as :func:`pool`).

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

    return _chunkwise(path, output, lambda n_rows: step(sequence_reverse, device=device), NUMBA_FROM, "reverse",
                      name=name, out_name=out_name, compression=compression, max_memory=max_memory, device=device,
                      overwrite=overwrite, force=force, scheduler=scheduler, workers=workers,
                      partition_size=partition_size, progress=progress, keeps_ids=True, token_dtype=token_dtype,
                      eos_token_id=eos_token_id)


def _stand_in(t) -> LoDTensor:
    """A one-sequence tensor of ``t``'s dtype and row shape (no data read): what an operator checks first."""
    levels = [np.array([0, 1], _I64) for _ in range(t.lod_level - 1)] + [np.zeros(2, _I64)] * bool(t.lod_level)
    return LoDTensor(np.zeros((0,) + tuple(t.element_shape), t.dtype), levels)


def _on_stand_in(op: Callable, *args):
    """A check that runs ``op(stand-in, *args)`` on :func:`_stand_in` (no data read), naming the file."""
    return lambda where, t, _memory: _named(where, lambda: op(_stand_in(t), *args, backend="numpy"))


def _named(where: str, call):
    """``call()``; a lodtool error it raises names the file and tensor."""
    try:
        return call()
    except LodError as exc:
        raise type(exc)(f"{where}: {exc}") from None


def _checked_stream(path, output, name, out_name, check, fn, *, device: str, validate: bool = True,
                    **options) -> OpResult:
    """The operator ``fn`` on each chunk on ``device``, after ``check(where, lazy tensor, memory limit)`` refused
    what it refuses, ``where`` (``"path: tensor 'name'"``) naming the file and tensor; the LoD is validated first
    unless ``validate=False`` (for checks that read no offsets)."""
    check_device(device)

    def make_fn(f, t):
        if validate:
            require_valid(f.path, t)
        check(f"{f.path}: tensor {t.name!r}", t, f.max_memory)
        return fn

    return _stream(path, output, name, out_name, make_fn, device=device, **options)


def erase(path: str, output: str, *, tokens: Any, name: str | None = None, out_name: str | None = None,
          compression: str | None = None, max_memory: int | None = None, device: str = "cpu",
          overwrite: bool = False, force: bool = False, token_dtype: Any = None,
          eos_token_id: int | None = None) -> OpResult:
    """``sequence_erase`` over a container: drop the rows whose token id is in ``tokens``, streamed.

    >>> import os, tempfile, numpy as np
    >>> from lodtool import LoDTensor, save, load
    >>> d = tempfile.mkdtemp()
    >>> save(os.path.join(d, "x.h5"), LoDTensor(np.array([0, 5, 0, 7]), [[0, 2, 4]]))
    >>> erase(os.path.join(d, "x.h5"), os.path.join(d, "y.h5"), tokens=[0]).rows
    2
    """
    from ..ops import sequence_erase
    from ..ops.erase import erase_tokens

    erase_tokens(tokens, np.int64)  # bad tokens fail before the file is opened
    return _checked_stream(path, output, name, out_name, _on_stand_in(sequence_erase, tokens),
                           step(sequence_erase, tokens, device=device), device=device, validate=False,
                           compression=compression, max_memory=max_memory, overwrite=overwrite, force=force,
                           keeps_ids=True, token_dtype=token_dtype, eos_token_id=eos_token_id)


def enumerate(path: str, output: str, *, win_size: int, pad_value: Any = 0, name: str | None = None,
              out_name: str | None = None, compression: str | None = None, max_memory: int | None = None,
              device: str = "cpu", overwrite: bool = False, force: bool = False, token_dtype: Any = None,
              eos_token_id: int | None = None) -> OpResult:
    """``sequence_enumerate`` over a container: the ``win_size``-row window at every row, streamed.

    >>> import os, tempfile, numpy as np
    >>> from lodtool import LoDTensor, save, load
    >>> d = tempfile.mkdtemp()
    >>> save(os.path.join(d, "x.h5"), LoDTensor(np.array([1, 2, 3, 4]), [[0, 3, 4]]))
    >>> _ = enumerate(os.path.join(d, "x.h5"), os.path.join(d, "y.h5"), win_size=2, pad_value=-1)
    >>> load(os.path.join(d, "y.h5")).data.tolist()
    [[1, 2], [2, 3], [3, -1], [4, -1]]
    """
    from ..ops import sequence_enumerate

    return _checked_stream(path, output, name, out_name, _on_stand_in(sequence_enumerate, win_size, pad_value),
                           step(sequence_enumerate, win_size, pad_value, device=device), device=device, validate=False,
                           compression=compression, max_memory=max_memory, overwrite=overwrite, force=force,
                           token_dtype=token_dtype, eos_token_id=eos_token_id)


def reshape(path: str, output: str, *, new_dim: int, name: str | None = None, out_name: str | None = None,
            compression: str | None = None, max_memory: int | None = None, device: str = "cpu",
            overwrite: bool = False, force: bool = False, token_dtype: Any = None,
            eos_token_id: int | None = None) -> OpResult:
    """``sequence_reshape`` over a container: rows of width ``new_dim``, streamed.

    >>> import os, tempfile, numpy as np
    >>> from lodtool import LoDTensor, save, load
    >>> d = tempfile.mkdtemp()
    >>> save(os.path.join(d, "x.h5"), LoDTensor(np.arange(12).reshape(6, 2), [[0, 2, 6]]))
    >>> _ = reshape(os.path.join(d, "x.h5"), os.path.join(d, "y.h5"), new_dim=4)
    >>> load(os.path.join(d, "y.h5")).lod
    [[0, 1, 3]]
    """
    from ..ops import sequence_reshape

    def check(where, t, memory):
        _on_stand_in(sequence_reshape, new_dim)(where, t, memory)
        width = int(np.prod(t.element_shape, dtype=np.int64))
        if width == new_dim:
            return
        # every sequence must fill whole rows
        for start, lens in _level_lengths(t, t.lod_level - 1, offset_window(memory)):
            bad = np.flatnonzero(lens * width % new_dim)
            if len(bad):
                i, n = int(bad[0]), int(lens[int(bad[0])])
                raise LodShapeError(f"{where}: sequence_reshape: sequence {start + i} of the last level has {n} "
                                    f"rows of {width} values = {n * width} values, which do not fill whole rows "
                                    f"of new_dim={new_dim}; as in Paddle, every sequence's length * width must "
                                    "divide by new_dim")

    return _checked_stream(path, output, name, out_name, check, step(sequence_reshape, new_dim, device=device),
                           device=device, compression=compression, max_memory=max_memory, overwrite=overwrite,
                           force=force, token_dtype=token_dtype, eos_token_id=eos_token_id)


def seq_slice(path: str, output: str, *, offset: Any, length: Any, clip: bool = False, name: str | None = None,
              out_name: str | None = None, compression: str | None = None, max_memory: int | None = None,
              device: str = "cpu", overwrite: bool = False, force: bool = False, token_dtype: Any = None,
              eos_token_id: int | None = None) -> OpResult:
    """``sequence_slice`` over a container: rows ``offset .. offset+length`` of every last-level sequence, streamed.

    ``offset`` and ``length`` are each an integer (the same for every
    sequence) or one integer per last-level sequence.  As in Paddle, a slice
    that runs past its sequence's end is an error; ``clip=True`` (lodtool's)
    shortens it to the rows there are instead (an offset past the end gives an
    empty sequence), so ``offset=0, length=5, clip=True`` keeps the first 5
    rows of each sequence.

    >>> import os, tempfile, numpy as np
    >>> from lodtool import LoDTensor, save, load
    >>> d = tempfile.mkdtemp()
    >>> save(os.path.join(d, "x.h5"), LoDTensor(np.arange(6), [[0, 4, 5, 6]]))
    >>> _ = seq_slice(os.path.join(d, "x.h5"), os.path.join(d, "y.h5"), offset=0, length=2, clip=True)
    >>> load(os.path.join(d, "y.h5")).to_nested()
    [[0, 1], [4], [5]]
    """
    from ..ops import sequence_slice

    ranges = {}

    def check(where, t, memory):  # every slice checked from the offsets first
        if not t.lod_level:
            raise LodShapeError(f"{where}: has no LoD; sequence_slice needs at least one level")
        count = t.num_sequences(t.lod_level - 1)
        ranges["offset"], ranges["length"] = (_named(where, lambda: _per_sequence(v, what, count))
                                              for what, v in (("offset", offset), ("length", length)))
        for start, seq in _level_lengths(t, t.lod_level - 1, offset_window(memory)):
            off, ln = ranges["offset"](start, start + len(seq)), ranges["length"](start, start + len(seq))
            for what, values in (("offset", off), ("length", ln)):
                if len(values) and values.min() < 0:
                    i = int(np.argmax(values < 0))
                    raise LodIndexError(f"{where}: sequence_slice: {what}[{start + i}]={int(values[i])} is negative")
            past = np.flatnonzero(off + ln > seq) if not clip else ()
            if len(past):
                i = int(past[0])
                o, m, n = int(off[i]), int(ln[i]), int(seq[i])
                raise LodIndexError(f"{where}: sequence_slice: sequence {start + i} has {n} rows, but offset {o} + "
                                    f"length {m} = {o + m} runs past its end (clip=True shortens such slices)")

    done = [0]

    def one(chunk: LoDTensor) -> LoDTensor:
        a = done[0]
        done[0] = b = a + chunk.num_sequences(chunk.lod_level - 1)
        off, ln = ranges["offset"](a, b), ranges["length"](a, b)
        if clip:
            seq = chunk.lengths(-1)
            off = np.clip(off, 0, seq)
            ln = np.clip(ln, 0, seq - off)
        return sequence_slice(chunk, off, ln, device=device).to("cpu")

    return _checked_stream(path, output, name, out_name, check, one, device=device, compression=compression,
                           max_memory=max_memory, overwrite=overwrite, force=force, keeps_ids=True,
                           token_dtype=token_dtype, eos_token_id=eos_token_id)


def _level_lengths(t, level: int, window: int) -> Iterator[tuple[int, np.ndarray]]:
    """``(index of the first, lengths)`` of ``level``'s sequences (in entries of the level below, or rows),
    ``window`` at a time."""
    count = t.num_sequences(level)
    for start in range(0, count, window):
        offsets = t.read_offsets(level, start, min(start + window, count) + 1)
        yield start, offsets[1:] - offsets[:-1]


def _per_sequence(value: Any, what: str, count: int):
    """``value`` (an integer, or one per sequence) as a function of a range of sequences."""
    arr = np.asarray(value)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.dtype.kind not in "iu" or arr.ndim > 1:
        raise LodUsageError(f"sequence_slice: {what} must be an integer or one integer per sequence, got "
                            f"{arr.dtype} of shape {arr.shape}")
    if arr.ndim == 0:
        v = int(arr)
        return lambda a, b: np.full(b - a, v, _I64)
    if len(arr) != count:
        raise LodShapeError(f"sequence_slice: {what} has {len(arr)} entries but the tensor has {count} last-level "
                            "sequences; as in Paddle, it needs one per sequence")
    arr = arr.astype(_I64, copy=False)
    return lambda a, b: arr[a:b]


# -- over runs planned from the offsets ------------------------------------------------------------------------
def expand(x: str, y: str, output: str, *, x_name: str | None = None, y_name: str | None = None,
           ref_level: int = -1, out_name: str | None = None, compression: str | None = None,
           max_memory: int | None = None, device: str = "cpu", overwrite: bool = False, force: bool = False,
           scheduler: str | None = None, workers: int | None = None, partition_size: int | str | None = None,
           progress: Callable[[int, int], None] | None = None, token_dtype: Any = None,
           eos_token_id: int | None = None) -> OpResult:
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
    from ..ops.expand import NUMBA_FROM, expand_level

    reading = {"token_dtype": token_dtype, "eos_token_id": eos_token_id}
    if scheduler:
        with _on_dask(x, x_name, scheduler=scheduler, workers=workers, partition_size=partition_size,
                      max_memory=max_memory, device=device, output=output, **reading) as (bag, kwargs):
            return _written_on_dask(bag.expand(y, y_name, ref_level), output, kwargs, out_name=out_name,
                                    compression=compression, max_memory=max_memory, overwrite=overwrite,
                                    force=force, progress=progress)
    check_device(device)
    fy, ty = open_tensor(y, y_name, max_memory, **reading)
    with fy:
        require_valid(fy.path, ty)
        fx, tx = open_tensor(x, x_name, max_memory, **reading)
        with fx:
            require_valid(fx.path, tx)
            level = expand_level(tx, ty, ref_level)
            tier(device, max(tx.n_rows, ty.n_rows) * int(np.prod(tx.element_shape, dtype=np.int64)), NUMBA_FROM)
            parts = _expand_runs(tx, ty, level, chunk_rows(tx.element_shape, tx.dtype, fx.max_memory),
                                 offset_window(min(fx.max_memory, fy.max_memory)))
            sink = TensorSink(output, [out_name or tx.name], compression=compression, overwrite=overwrite,
                              force=force, like=tx, tokens=tx.tokens)
            return run(parts, lambda part: expand_by(*part, device=device), sink)


def _expand_runs(tx, ty, level: int, max_rows: int, window: int) -> Iterator[tuple[LoDTensor, np.ndarray]]:
    """``(x's sequences, their reference offsets from 0)`` in runs to expand, on the host.

    Sequence ``i`` of x has ``len_i`` rows (1 without a LoD) and is copied
    ``rep_i`` times: a run of sequences reads the sum of ``len_i`` rows and
    writes the sum of ``len_i * rep_i`` rows in the sum of ``rep_i`` sequences.
    The rows read and written together (both are in memory at once), and the
    sequences written, stay within ``max_rows``.  Runs without copies write
    nothing and are not read.
    """
    has_lod = tx.lod_level == 1
    count = ty.num_sequences(level)
    for start in range(0, count, window):
        stop = min(start + window, count)
        ref = ty.read_offsets(level, start, stop + 1)
        reps = ref[1:] - ref[:-1]
        xoff = tx.read_offsets(0, start, stop + 1) if has_lod else np.arange(start, stop + 1, dtype=np.int64)
        lens = xoff[1:] - xoff[:-1]
        for a, b in runs([lens * (reps + 1), reps], max_rows):
            if ref[b] == ref[a]:
                continue
            xs = LoDTensor(tx.read_rows(xoff[a], xoff[b]), [xoff[a:b + 1] - xoff[a]] if has_lod else None,
                           level_names=tx.level_names if has_lod else None, validate=False)
            for part in _copy_parts(ref[a:b + 1] - ref[a], int(lens[a]), max_rows):
                yield xs, part
            del xs  # before the next run is read


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


def concat(paths: Sequence[str], output: str, *, names: Sequence[str | None] | None = None,
           out_name: str | None = None, compression: str | None = None, max_memory: int | None = None,
           device: str = "cpu", overwrite: bool = False, force: bool = False, token_dtype: Any = None,
           eos_token_id: int | None = None) -> OpResult:
    """``sequence_concat`` of the tensors of two or more containers, streamed by ranges of top-level sequences.

    ``names`` picks each file's tensor (``None``: its only one).  The output
    keeps the first input's tensor name unless ``out_name`` is given.

    >>> import os, tempfile, numpy as np
    >>> from lodtool import LoDTensor, save, load
    >>> d = tempfile.mkdtemp()
    >>> save(os.path.join(d, "a.h5"), LoDTensor(np.array([1, 2, 3]), [[0, 1, 3]]))
    >>> save(os.path.join(d, "b.h5"), LoDTensor(np.array([7, 8]), [[0, 2, 2]]))
    >>> _ = concat([os.path.join(d, "a.h5"), os.path.join(d, "b.h5")], os.path.join(d, "c.h5"))
    >>> load(os.path.join(d, "c.h5")).to_nested()
    [[1, 7, 8], [2, 3]]
    """
    from ..container.shards import TensorSpec
    from ..ops import sequence_concat
    from ..ops.concat import check_concat

    check_device(device)
    names = list(names) if names is not None else [None] * len(paths)
    if len(names) != len(paths):
        raise LodUsageError(f"concat: {len(names)} tensor names for {len(paths)} files")
    with contextlib.ExitStack() as stack:
        opened = []
        for p, n in zip(paths, names):  # each held by the stack as soon as it is open
            f, t = open_tensor(p, n, max_memory, token_dtype=token_dtype, eos_token_id=eos_token_id)
            opened.append((stack.enter_context(f), t))
            require_valid(f.path, t)
        ts = [t for _, t in opened]
        try:
            check_concat(ts)
        except LodError as exc:  # which file is which input
            files = ", ".join(f"xs[{j}] = {f.path}:{t.name}" for j, (f, t) in builtins.enumerate(opened))
            raise type(exc)(f"{exc} ({files})") from None
        memory = min(f.max_memory for f, _ in opened)
        first = ts[0]
        kept = first.level_names if all(t.level_names == first.level_names for t in ts) else None
        bounds = [Bounds(t.read_offsets, t.lod_level) for t in ts]
        ranges = _filled(_concat_ranges(ts, chunk_rows(first.element_shape, first.dtype, memory),
                                        offset_window(memory)),
                         lambda a, b: all(sum(bd(b)[k] - bd(a)[k] for bd in bounds) > 0
                                          for k in range(1, first.lod_level)))
        tokens = first.tokens if all(t.tokens == first.tokens for t in ts) else None
        sink = TensorSink(output, [out_name or first.name], compression=compression, overwrite=overwrite,
                          force=force, like=TensorSpec(first.dtype, first.element_shape, first.lod_level, kept),
                          tokens=tokens)
        return run(([_read_range(t, a, b) for t in ts] for a, b in ranges),
                   step(sequence_concat, device=device), sink)


def _read_range(t, a: int, b: int) -> LoDTensor:
    """Top-level sequences ``a..b`` of a validated lazy tensor, every level rebased to 0 (empty levels allowed, which
    a view's ``slice_level`` refuses at a level's end)."""
    levels, lo, hi = extract_range(0, a, b, t.read_offsets, t.level_sizes, t.n_rows)
    return LoDTensor(t.read_rows(lo, hi), levels, level_names=t.level_names, validate=False)


def _concat_ranges(ts, max_rows: int, window: int):
    """Ranges of top-level sequences whose rows, summed over all inputs, stay within ``max_rows``."""
    start = 0
    for windows in zip(*(row_offset_windows(t, 0, window) for t in ts)):
        size = np.zeros(len(windows[0]) - 1, _I64)
        for roff in windows:
            size += roff[1:] - roff[:-1]
        for a, b in runs([size], max_rows):
            yield start + a, start + b
        start += len(windows[0]) - 1


def _filled(ranges, filled):
    """The ranges, each joined with the next ones until ``filled(a, b)`` (every level below the top holds an
    entry, so the chunk is a valid tensor); a last unfilled range joins the one before it."""
    ready = pending = None
    for a, b in ranges:
        if pending is not None:
            a = pending
        if filled(a, b):
            if ready is not None:
                yield ready
            ready, pending = (a, b), None
        else:
            pending = a
            last = b
    if pending is not None:
        ready = (ready[0], last) if ready is not None else (pending, last)
    if ready is not None:
        yield ready


def read_lod_only(lazy) -> LoDTensor:
    """A tensor with the file's (validated) LoD and a zero-cost stand-in for its data (never read)."""
    from ..lod import validate_lod

    offsets = [lazy.read_offsets(level) for level in range(lazy.lod_level)]
    validate_lod(offsets, lazy.n_rows)
    return lod_stand_in(offsets, lazy.n_rows, lazy.element_shape, lazy.dtype, lazy.level_names)


def lod_reset(path: str, output: str, *, target_lod: Any = None, like: str | None = None,
              like_name: str | None = None, append: bool = False, name: str | None = None,
              out_name: str | None = None, compression: str | None = None, max_memory: int | None = None,
              overwrite: bool = False, force: bool = False, token_dtype: Any = None,
              eos_token_id: int | None = None) -> OpResult:
    """``lod_reset`` / ``lod_append`` of a container's tensor: the same rows under a new LoD, streamed.

    The new level is ``target_lod`` (offsets), or the LoD of the tensor
    ``like_name`` of the container ``like`` (all its levels, as Paddle's ``Y``;
    ``append`` is then ignored, as in Paddle).  ``append=True`` adds the level
    below the tensor's own.  The new LoD is built and checked from the offsets
    alone (exactly :func:`lodtool.ops.lod_reset`), then the rows are copied a
    chunk of the new top-level sequences at a time.

    >>> import os, tempfile, numpy as np
    >>> from lodtool import LoDTensor, save, load
    >>> d = tempfile.mkdtemp()
    >>> save(os.path.join(d, "x.h5"), LoDTensor(np.arange(10.0), [[0, 3, 5, 10]]))
    >>> _ = lod_reset(os.path.join(d, "x.h5"), os.path.join(d, "y.h5"), target_lod=[0, 7, 10])
    >>> load(os.path.join(d, "y.h5")).lod
    [[0, 7, 10]]
    """
    from ..ops import lod_reset as reset

    if (target_lod is None) == (like is None):
        raise LodUsageError("lod_reset: give the new level as target_lod or as like (a container), not both")
    reading = {"token_dtype": token_dtype, "eos_token_id": eos_token_id}
    f, t = open_tensor(path, name, max_memory, **reading)
    with f:
        stand_in = read_lod_only(t)
        if like is not None:
            fy, ty = open_tensor(like, like_name, max_memory, **reading)
            with fy:
                y = read_lod_only(ty)
            if not y.lod_level:
                raise LodShapeError(f"{fy.path}: tensor {ty.name!r} has no LoD to take")
            new = _named(f"{f.path}: tensor {t.name!r} (like {fy.path}: tensor {ty.name!r})",
                         lambda: reset(stand_in, y, append=append))
        else:
            new = _named(f"{f.path}: tensor {t.name!r}",
                         lambda: reset(stand_in, target_lod=np.asarray(target_lod), append=append))
        sink = TensorSink(output, [out_name or t.name], compression=compression, overwrite=overwrite,
                          force=force, like=new, tokens=t.tokens)
        return run(_chunks_of(new.offsets, chunk_rows(t.element_shape, t.dtype, f.max_memory)),
                   lambda part: LoDTensor(t.read_rows(*part[1]), part[0], validate=False), sink)


def _chunks_of(levels, max_rows: int):
    """``(rebased levels, (first row, end row))`` of the chunk planner's ranges of an in-memory LoD's top level."""
    read, sizes = memory_reader(levels), [len(o) for o in levels]
    for a, b in sequence_ranges(read, len(levels), sizes[0] - 1, max_rows):
        rebased, lo, hi = extract_range(0, a, b, read, sizes)
        yield tuple(rebased), (lo, hi)


# -- into an NPZ, from an NPZ, and plans ----------------------------------------------------------------------
def pad(path: str, output, *, name: str | None = None, pad_value: float = 0, maxlen: int | None = None,
        level: int = -1, max_memory: int | None = None, device: str = "cpu", truncate: str | None = None,
        scheduler: str | None = None, workers: int | None = None, partition_size: int | str | None = None,
        progress: Callable[[int, int], None] | None = None, token_dtype: Any = None,
        eos_token_id: int | None = None) -> dict:
    """``sequence_pad`` of a container's tensor into an NPZ of ``padded``, ``lengths`` and ``mask``, streamed.

    The lengths come from the offsets alone (and with them ``maxlen``, when
    not given); then each member of the archive is written in blocks: the
    padded rows of a run of sequences at a time (bounded by the rows read and
    padded), then the lengths, then the mask.  The arrays are
    exactly ``sequence_pad``'s and ``sequence_mask``'s.  ``output`` is a path,
    written atomically, or a binary stream (a pipe too), written as the blocks come.
    A sequence longer than ``maxlen`` is an error, as in Paddle, unless
    ``truncate`` is ``"head"`` (keep its first ``maxlen`` rows) or ``"tail"``
    (keep its last); ``lengths`` are then the kept lengths.  ``scheduler`` pads
    the partitions on Dask, as :func:`pool` does.

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
    from ..atomic import refuse_output_over_input
    from ..limits import check_memory
    from ..io.npy import write_npz_members
    from ..ops import sequence_mask
    from ..ops.pad import PAD_NUMBA_FROM, pad_level, padded_length

    check_truncate(truncate, maxlen)
    reading = {"token_dtype": token_dtype, "eos_token_id": eos_token_id}
    if scheduler:
        with _on_dask(path, name, scheduler=scheduler, workers=workers, partition_size=partition_size,
                      max_memory=max_memory, device=device, **reading) as (bag, kwargs):
            return bag.pad(pad_value, maxlen, level, truncate).to_npz(output, progress=progress, **kwargs)
    check_device(device)
    refuse_output_over_input(output, [path])
    f, t = open_tensor(path, name, max_memory, **reading)
    with f:
        require_valid(f.path, t)
        tier(device, work(t), PAD_NUMBA_FROM)
        lvl = pad_level(t, level)
        window = offset_window(f.max_memory)
        count = t.num_sequences(lvl)

        def lengths() -> Iterator[np.ndarray]:
            for roff in row_offset_windows(t, lvl, window):
                lens = roff[1:] - roff[:-1]
                yield lens if truncate is None else np.minimum(lens, maxlen)

        longest = max((int(block.max()) for block in lengths() if block.size), default=0)
        maxlen = padded_length(maxlen, longest, lvl)
        # one padded sequence (its rows and its mask row, a byte per step) is the least a chunk holds; zero-width
        # rows make it 0 bytes of data, so the steps count
        row_bytes = t.row_bytes
        check_memory(maxlen * (row_bytes + 1), f.max_memory, f.path, f"one sequence padded to {maxlen:,} steps")
        max_rows = chunk_rows(t.element_shape, t.dtype, f.max_memory)
        mask_rows = max(1, max_rows // max(maxlen, 1))  # no more sequences than a padded chunk, at a byte each

        def mask() -> Iterator[np.ndarray]:
            for block in lengths():
                for a in range(0, len(block), mask_rows):
                    yield sequence_mask(block[a:a + mask_rows], maxlen)

        def runs_to_pad():  # the rows read and the padded rows of a run, in memory at once, within max_rows
            for roff in row_offset_windows(t, lvl, window):
                for a, b in runs([roff[1:] - roff[:-1] + maxlen], max_rows):
                    yield t.read_rows(roff[a], roff[b]), roff[a:b + 1] - roff[a]

        padded = ahead(lambda part: pad_rows(*part, maxlen, pad_value, truncate, device), runs_to_pad())
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
    from ..limits import resolve_max_memory
    from ..io.npy import load_npz_arrays
    from ..ops import sequence_unpad

    check_device(device)
    refuse_output_over_input(output, [npz])
    sink = TensorSink(output, [name], compression=compression, overwrite=overwrite, force=force)
    arrays = load_npz_arrays(npz, required=("padded", "lengths"),
                             max_memory=resolve_max_memory(max_memory) // 2)  # padded + its copy
    return run([arrays], lambda a: sequence_unpad(a["padded"], a["lengths"], device=device).to("cpu"), sink)


def pack_plan(path: str, *, name: str | None = None, level: int = -1, max_memory: int | None = None,
              device: str = "cpu", scheduler: str | None = None, workers: int | None = None,
              partition_size: int | str | None = None, token_dtype: Any = None, eos_token_id: int | None = None):
    """The RNN packing plan of a level, from the offsets alone (its arrays on the host).

    ``scheduler`` reads the partitions' offsets in parallel on Dask, then makes the plan once.

    >>> import os, tempfile, numpy as np
    >>> from lodtool import LoDTensor, save
    >>> p = os.path.join(tempfile.mkdtemp(), "x.h5")
    >>> save(p, LoDTensor(np.arange(6), recursive_sequence_lengths=[[1, 3, 2]]))
    >>> pack_plan(p).batch_sizes.tolist()
    [3, 2, 1]
    """
    reading = {"token_dtype": token_dtype, "eos_token_id": eos_token_id}
    if scheduler:
        with _on_dask(path, name, scheduler=scheduler, workers=workers, partition_size=partition_size,
                      max_memory=max_memory, device=device, **reading) as (bag, kwargs):
            return bag.pack_plan(level).compute(**kwargs)
    check_device(device)
    f, t = open_tensor(path, name, max_memory, **reading)
    with f:
        lod_only = read_lod_only(t)
    return plan_of(lod_only, level, f.max_memory, f.path, device)


#: plan positions gathered in memory per pass of :meth:`StreamedPlan.sorted_indices` (the passes over the offsets
#: are ``sequences / this``: one for any level of up to 16 million sequences)
PLAN_BLOCK = 1 << 24
#: offsets entries read at a time by a streamed plan
PLAN_WINDOW = 1 << 20


class StreamedPlan:
    """The packing plan of one level of a stored tensor (:func:`pack_plan_stream`), as pieces read and made
    from the offsets window by window: its memory is bounded by the longest sequence and
    :data:`PLAN_BLOCK`, not by how many sequences the level holds.

    ``num_sequences``, ``num_steps`` (the longest sequence's length) and ``total_steps`` are known on open;
    :meth:`arrays` gives each of :class:`lodtool.ops.PackPlan`'s arrays as an iterator of pieces, in order.
    """

    def __init__(self, t, level: int, max_memory: int, where: str):
        from ..limits import check_memory
        from ..ops.pack_plan import count_lengths, first_positions

        self._t, self._level = t, level
        self._window = offset_window(max_memory, PLAN_WINDOW)
        self._block = max(self._window, min(PLAN_BLOCK, max_memory // 32))
        self.num_sequences = t.level_sizes[level] - 1
        histogram = np.zeros(1, np.int64)
        for lengths in self.lengths():
            longest = int(lengths.max(initial=0))
            if longest >= len(histogram):  # the histogram, the next positions and the batch sizes: 24 B a step
                check_memory(24 * (longest + 1), max_memory, where, f"the plan of a sequence of {longest:,} steps")
                histogram = np.concatenate([histogram, np.zeros(longest + 1 - len(histogram), np.int64)])
            count_lengths(lengths, histogram)
        self._starts = first_positions(histogram)
        self.num_steps = len(histogram) - 1
        self.total_steps = int(np.dot(histogram, np.arange(len(histogram), dtype=np.int64)))

    def lengths(self) -> Iterator[np.ndarray]:
        """Each sequence's length (time steps), in input order."""
        return (lengths for _, lengths in _level_lengths(self._t, self._level, self._window))

    def _positions(self) -> Iterator[tuple[int, np.ndarray]]:
        from ..ops.pack_plan import place_by_length

        next_position = self._starts.copy()
        start = 0
        for lengths in self.lengths():
            yield start, place_by_length(lengths, next_position)
            start += len(lengths)

    def unsorted_indices(self) -> Iterator[np.ndarray]:
        """Each sequence's place in the plan's order, in input order."""
        return (positions for _, positions in self._positions())

    def sorted_indices(self) -> Iterator[np.ndarray]:
        """The sequences by decreasing length (ties in input order): one pass over the offsets per
        :data:`PLAN_BLOCK` places."""
        for first in range(0, self.num_sequences, self._block):
            block = np.empty(min(self._block, self.num_sequences - first), np.int64)
            for start, positions in self._positions():
                inside = np.flatnonzero((positions >= first) & (positions < first + len(block)))
                block[positions[inside] - first] = inside + start
            yield block

    def batch_sizes(self) -> Iterator[np.ndarray]:
        """How many sequences each time step holds (one piece: a step each)."""
        yield self._starts[:-1]

    def arrays(self) -> dict[str, Iterator[np.ndarray]]:
        """:class:`lodtool.ops.PackPlan`'s arrays by name, each as its pieces."""
        return {"sorted_indices": self.sorted_indices(), "unsorted_indices": self.unsorted_indices(),
                "lengths": self.lengths(), "batch_sizes": self.batch_sizes()}


class _WholePlan:
    """A :class:`lodtool.ops.PackPlan` made whole (on Dask or a GPU), answering as a :class:`StreamedPlan`."""

    def __init__(self, plan):
        self._plan = plan
        self.num_sequences, self.num_steps = len(plan.lengths), len(plan.batch_sizes)
        self.total_steps = int(plan.lengths.sum())

    def arrays(self) -> dict[str, Iterator[np.ndarray]]:
        return {key: iter([getattr(self._plan, key)])
                for key in ("sorted_indices", "unsorted_indices", "lengths", "batch_sizes")}


@contextlib.contextmanager
def pack_plan_stream(path: str, *, name: str | None = None, level: int = -1, max_memory: int | None = None,
                     device: str = "cpu", scheduler: str | None = None, workers: int | None = None,
                     partition_size: int | str | None = None, token_dtype: Any = None,
                     eos_token_id: int | None = None) -> Iterator[StreamedPlan]:
    """:func:`pack_plan` of a stored tensor made and given piece by piece (``lodtool pack-plan``): on the CPU
    in memory bounded by the longest sequence, for a level of more sequences than the plan's arrays would hold
    in memory; the whole LoD is validated on open.  With ``device="cuda"`` or a ``scheduler`` the plan is
    made whole by :func:`pack_plan` and given as one piece per array.

    >>> import os, tempfile, numpy as np
    >>> from lodtool import LoDTensor, save
    >>> p = os.path.join(tempfile.mkdtemp(), "x.h5")
    >>> save(p, LoDTensor(np.arange(6), recursive_sequence_lengths=[[1, 3, 2]]))
    >>> with pack_plan_stream(p) as plan:
    ...     plan.num_sequences, [piece.tolist() for piece in plan.sorted_indices()]
    (3, [[1, 2, 0]])
    """
    from ..lod import level_position

    reading = {"token_dtype": token_dtype, "eos_token_id": eos_token_id}
    if scheduler or device != "cpu":
        yield _WholePlan(pack_plan(path, name=name, level=level, max_memory=max_memory, device=device,
                                   scheduler=scheduler, workers=workers, partition_size=partition_size, **reading))
        return
    f, t = open_tensor(path, name, max_memory, **reading)
    with f:
        if not t.lod_level:
            raise LodUsageError("a 0-level tensor has no sequences to plan")
        require_valid(f.path, t)
        yield StreamedPlan(t, level_position(level, t.lod_level), f.max_memory, f.path)


__all__ = ["pool", "softmax", "reverse", "expand", "pad", "unpad", "pack_plan", "pack_plan_stream", "StreamedPlan",
           "concat", "seq_slice", "erase",
           "enumerate", "reshape", "lod_reset", "OpResult"]
