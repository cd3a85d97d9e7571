"""The operators of issue 17 over containers: concat, seq_slice, erase, enumerate, reshape, lod_reset.

They sit beside :mod:`lodtool.tasks._operators` (whose helpers they use) rather
than in it, because the verb ``enumerate`` would shadow the builtin there.
Chunks come from :mod:`lodtool.planner`.

Each streams, so files larger than memory work:

* ``erase``, ``enumerate``, ``reshape`` and ``seq_slice`` are local to each
  last-level sequence: they run over chunks of whole top-level sequences, as
  ``pool`` does;
* ``concat`` reads the same range of top-level sequences from every input at
  a time (the ranges bounded by the rows read from all of them together);
* ``lod_reset`` builds the new LoD from the offsets alone (the inputs' data is
  never read for it), checks it, then copies the rows a chunk of the new
  top-level sequences at a time.

Outputs are written through the atomic writer (nothing is left behind when a
check fails half-way), each chunk on a second thread while the next one is read
and computed.  ``device="cuda"`` runs each chunk's operator on the GPU.

>>> import os, tempfile, numpy as np
>>> from lodtool import LoDTensor, save, load
>>> d = tempfile.mkdtemp()
>>> save(os.path.join(d, "ids.h5"), LoDTensor(np.array([2, 2, 6, 1, 3, 9]), [[0, 3, 6]]))
>>> _ = erase(os.path.join(d, "ids.h5"), os.path.join(d, "out.h5"), tokens=[2, 3])
>>> load(os.path.join(d, "out.h5")).to_nested()
[[6], [1, 9]]
"""

from __future__ import annotations

import builtins
import contextlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..planner import row_offset_windows, runs, sequence_ranges
from ..errors import LodError, LodIndexError, LodShapeError, LodUsageError
from ..tensor import LoDTensor
from ._operators import (
    OpResult,
    _check_device,
    _chunk_rows,
    _offset_window,
    _open_tensor,
    _require_valid,
    _stream,
    _WriteBehind,
    read_lod_only,
)

_I64 = np.dtype(np.int64)


def _cpu(t: LoDTensor) -> LoDTensor:
    return t.to("cpu")


def erase(path: str, output: str, *, tokens: Any, name: str | None = None, out_name: str | None = None,
          compression: str | None = None, max_memory: int | None = None, device: str = "cpu",
        overwrite: bool = False, force: bool = False) -> OpResult:
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

    _check_device(device)
    erase_tokens(tokens, np.int64)  # bad tokens fail before the file is opened
    with _opened(path, name, max_memory, validate=False) as (where, t, _):  # what the operator refuses, first
        _preflight(where, lambda: sequence_erase(_stand_in(t), tokens, backend="numpy"))
    return _stream(path, output, name, out_name, lambda c: _cpu(sequence_erase(c, tokens, device=device)),
                   compression=compression, max_memory=max_memory,
                   overwrite=overwrite, force=force)


def enumerate(path: str, output: str, *, win_size: int, pad_value: Any = 0, name: str | None = None,
              out_name: str | None = None, compression: str | None = None, max_memory: int | None = None,
              device: str = "cpu",
        overwrite: bool = False, force: bool = False) -> OpResult:
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

    _check_device(device)
    with _opened(path, name, max_memory, validate=False) as (where, t, _):
        _preflight(where, lambda: sequence_enumerate(_stand_in(t), win_size, pad_value, backend="numpy"))
    return _stream(path, output, name, out_name,
                   lambda c: _cpu(sequence_enumerate(c, win_size, pad_value, device=device)),
                   compression=compression, max_memory=max_memory,
                   overwrite=overwrite, force=force)


def reshape(path: str, output: str, *, new_dim: int, name: str | None = None, out_name: str | None = None,
            compression: str | None = None, max_memory: int | None = None, device: str = "cpu",
        overwrite: bool = False, force: bool = False) -> OpResult:
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

    _check_device(device)
    with _opened(path, name, max_memory) as (where, t, memory):
        _preflight(where, lambda: sequence_reshape(_stand_in(t), new_dim, backend="numpy"))
        width = int(np.prod(t.element_shape, dtype=np.int64))
        if width != new_dim:  # every sequence must fill whole rows: checked from the offsets, a window at a time
            for start, lens in _last_lengths(t, _offset_window(memory)):
                bad = np.flatnonzero(lens * width % new_dim)
                if len(bad):
                    i = int(bad[0])
                    n = int(lens[i])
                    raise LodShapeError(f"{where}: sequence_reshape: sequence {start + i} of the last level has {n} "
                                        f"rows of {width} values = {n * width} values, which do not fill whole "
                                        f"rows of new_dim={new_dim}; as in Paddle, every sequence's length * width "
                                        "must divide by new_dim")
    return _stream(path, output, name, out_name, lambda c: _cpu(sequence_reshape(c, new_dim, device=device)),
                   compression=compression, max_memory=max_memory,
                   overwrite=overwrite, force=force)


def seq_slice(path: str, output: str, *, offset: Any, length: Any, clip: bool = False, name: str | None = None,
              out_name: str | None = None, compression: str | None = None, max_memory: int | None = None,
              device: str = "cpu",
        overwrite: bool = False, force: bool = False) -> OpResult:
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

    _check_device(device)
    with _opened(path, name, max_memory) as (where, t, memory):  # every slice checked from the offsets first
        if not t.lod_level:
            raise LodShapeError(f"{where}: has no LoD; sequence_slice needs at least one level")
        count = t.num_sequences(t.lod_level - 1)
        try:
            offsets = _per_sequence(offset, "offset", count)
            lengths = _per_sequence(length, "length", count)
        except LodError as exc:
            raise type(exc)(f"{where}: {exc}") from None
        for start, seq in _last_lengths(t, _offset_window(memory)):
            off, ln = offsets(start, start + len(seq)), lengths(start, start + len(seq))
            for what, values in (("offset", off), ("length", ln)):
                if len(values) and values.min() < 0:
                    i = int(np.argmax(values < 0))
                    raise LodIndexError(f"{where}: sequence_slice: {what}[{start + i}]={int(values[i])} is negative")
            past = np.flatnonzero(off + ln > seq) if not clip else ()
            if len(past):
                i = int(past[0])
                o, m, n = int(off[i]), int(ln[i]), int(seq[i])
                raise LodIndexError(f"{where}: sequence_slice: sequence {start + i} has {n} rows, but offset {o} + "
                                    f"length {m} = {o + m} runs past its end (clip=True, --clip, shortens such slices)")
    done = [0]

    def one(chunk: LoDTensor) -> LoDTensor:
        a = done[0]
        b = a + chunk.num_sequences(chunk.lod_level - 1)
        done[0] = b
        off, ln = offsets(a, b), lengths(a, b)
        if clip:
            seq = chunk.lengths(-1)
            off = np.clip(off, 0, seq)
            ln = np.clip(ln, 0, seq - off)
        return _cpu(sequence_slice(chunk, off, ln, device=device))

    return _stream(path, output, name, out_name, one, compression=compression, max_memory=max_memory,
                   overwrite=overwrite, force=force)


@contextlib.contextmanager
def _opened(path: str, name: str | None, max_memory: int | None, validate: bool = True):
    """``(where, lazy tensor, memory limit)``, ``where`` being ``"path: tensor 'name'"`` for messages; the LoD is
    validated first unless ``validate=False`` (for checks that read no offsets)."""
    f, t = _open_tensor(path, name, max_memory)
    with f:
        if validate:
            _require_valid(f.path, t)
        yield f"{f.path}: tensor {t.name!r}", t, f.max_memory


def _stand_in(t) -> LoDTensor:
    """A one-sequence tensor of ``t``'s dtype and row shape (no data read): what an operator checks first."""
    return LoDTensor._trusted(np.zeros((0,) + tuple(t.element_shape), t.dtype),
                              tuple(np.zeros(2, _I64) for _ in range(t.lod_level)))


def _named(where: str, call):
    """``call()``; a lodtool error it raises names the file and tensor."""
    try:
        return call()
    except LodError as exc:
        raise type(exc)(f"{where}: {exc}") from None


def _preflight(where: str, check) -> None:
    """Run ``check`` (an operator on a stand-in) for what it refuses; its error names the file and tensor."""
    _named(where, check)


def _last_lengths(t, window: int):
    """``(index of the first, lengths)`` of the last level's sequences, ``window`` at a time."""
    start = 0
    for roff in row_offset_windows(t, t.lod_level - 1, window):
        yield start, roff[1:] - roff[:-1]
        start += len(roff) - 1


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


def concat(paths: Sequence[str], output: str, *, names: Sequence[str | None] | None = None,
           out_name: str | None = None, compression: str | None = None, max_memory: int | None = None,
           device: str = "cpu",
        overwrite: bool = False, force: bool = False) -> OpResult:
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
    from ..container.writer import LodWriter
    from ..ops import sequence_concat
    from ..ops.concat import check_concat

    _check_device(device)
    names = list(names) if names is not None else [None] * len(paths)
    if len(names) != len(paths):
        raise LodUsageError(f"concat: {len(names)} tensor names for {len(paths)} files")
    with contextlib.ExitStack() as stack:
        opened = []
        for p, n in zip(paths, names):
            f, t = _open_tensor(p, n, max_memory)
            stack.enter_context(f)
            opened.append((f, t))
        for f, t in opened:
            _require_valid(f.path, t)
        ts = [t for _, t in opened]
        try:
            check_concat(ts)
        except LodError as exc:  # which file is which input
            files = ", ".join(f"xs[{j}] = {f.path}:{t.name}" for j, (f, t) in builtins.enumerate(opened))
            raise type(exc)(f"{exc} ({files})") from None
        memory = min(f.max_memory for f, _ in opened)
        max_rows = _chunk_rows(ts[0].element_shape, ts[0].dtype, memory)
        window = _offset_window(memory)
        first = ts[0]
        names_kept = first.level_names if all(t.level_names == first.level_names for t in ts) else None
        name_out = out_name or first.name
        writer_kwargs = {"compression": compression} if compression else {}
        rows = seqs = 0
        with LodWriter(output, overwrite=overwrite, force=force, **writer_kwargs) as w:
            tw = w.add_tensor(name_out, dtype=first.dtype, element_shape=first.element_shape,
                              lod_level=first.lod_level, level_names=names_kept)
            with _WriteBehind() as behind:
                bounds = [_Bounds(t.lod_level, t.read_offsets) for t in ts]
                for a, b in _filled(_concat_ranges(ts, max_rows, window), lambda a, b: all(
                        sum(bd(b)[k] - bd(a)[k] for bd in bounds) > 0 for k in range(1, first.lod_level))):
                    parts = [_read_range(t, a, b) for t in ts]
                    chunk = _cpu(sequence_concat(parts, device=device))
                    del parts
                    behind.put(tw.append, chunk)
                    rows += chunk.shape[0]
                    seqs += len(chunk)
                    del chunk
    return OpResult(str(output), name_out, rows, seqs, first.lod_level, str(first.dtype))


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


class _Bounds:
    """``bounds(i)``: where top-level sequence ``i`` starts on every level, down to the rows (a few offsets read
    per call, the last thousands kept)."""

    def __init__(self, lod_level: int, read):
        self.lod_level, self.read, self.cache = lod_level, read, {}

    def __call__(self, i: int) -> list[int]:
        if i not in self.cache:
            if len(self.cache) > 4096:
                self.cache.clear()
            pos = [i]
            for k in range(self.lod_level):
                pos.append(int(self.read(k, pos[-1], pos[-1] + 1)[0]))
            self.cache[i] = pos
        return self.cache[i]


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


def _read_range(t, a: int, b: int) -> LoDTensor:
    """Top-level sequences ``a..b`` of a validated lazy tensor, every level rebased to 0 (empty levels allowed)."""
    levels = []
    lo, hi = a, b
    for k in range(t.lod_level):
        off = t.read_offsets(k, lo, hi + 1)
        levels.append(off - off[0])
        lo, hi = int(off[0]), int(off[-1])
    return LoDTensor._trusted(t.read_rows(lo, hi), levels, t.level_names)


def lod_reset(path: str, output: str, *, target_lod: Any = None, like: str | None = None,
              like_name: str | None = None, append: bool = False, name: str | None = None,
              out_name: str | None = None, compression: str | None = None,
              max_memory: int | None = None,
        overwrite: bool = False, force: bool = False) -> OpResult:
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
    from ..container.writer import LodWriter
    from ..ops import lod_reset as reset

    if (target_lod is None) == (like is None):
        raise LodUsageError("lod_reset: give the new level as target_lod or as like (a container), not both")
    f, t = _open_tensor(path, name, max_memory)
    with f:
        stand_in = read_lod_only(t)
        if like is not None:
            fy, ty = _open_tensor(like, like_name, max_memory)
            with fy:
                y = read_lod_only(ty)
            if not y.lod_level:
                raise LodShapeError(f"{fy.path}: tensor {ty.name!r} has no LoD to take")
            new = _named(f"{f.path}: tensor {t.name!r} (like {fy.path}: tensor {ty.name!r})",
                         lambda: reset(stand_in, y, append=append))
        else:
            new = _named(f"{f.path}: tensor {t.name!r}",
                         lambda: reset(stand_in, target_lod=np.asarray(target_lod), append=append))
        levels = new.offsets
        max_rows = _chunk_rows(t.element_shape, t.dtype, f.max_memory)
        name_out = out_name or t.name
        writer_kwargs = {"compression": compression} if compression else {}
        rows = 0
        with LodWriter(output, overwrite=overwrite, force=force, **writer_kwargs) as w:
            tw = w.add_tensor(name_out, dtype=t.dtype, element_shape=t.element_shape, lod_level=len(levels),
                              level_names=new.level_names)
            with _WriteBehind() as behind:
                for lv, (r0, r1) in _chunks_of(levels, max_rows):
                    chunk = LoDTensor._trusted(t.read_rows(r0, r1), lv)
                    behind.put(tw.append, chunk)
                    rows += chunk.shape[0]
                    del chunk
    return OpResult(str(output), name_out, rows, len(levels[0]) - 1, len(levels), str(t.dtype))


def _chunks_of(levels, max_rows: int):
    """``(rebased levels, (first row, end row))`` of the chunk planner's ranges of an in-memory LoD's top level."""
    def read(level: int, start: int, stop: int) -> np.ndarray:
        return levels[level][start:stop]

    for a, b in sequence_ranges(read, len(levels), len(levels[0]) - 1, max_rows):
        out, lo, hi = [], a, b
        for off in levels:
            part = off[lo:hi + 1]
            out.append(part - part[0])
            lo, hi = int(part[0]), int(part[-1])
        yield tuple(out), (lo, hi)


__all__ = ["concat", "enumerate", "erase", "lod_reset", "reshape", "seq_slice"]
