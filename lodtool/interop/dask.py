"""lodtool on Dask: a stored tensor (one container, or a sharded folder) as partitions of whole sequences.

:func:`read` plans partitions from the offsets alone, with the container's one
chunk planner (:func:`lodtool.planner.sequence_ranges`), shard by
shard: each partition is a range of whole top-level sequences of one shard,
about ``partition_size`` bytes of rows.  A partition is carried by a small
picklable :class:`Partition` ``(path, name, start, stop, row)``; the task
opens the file or folder itself (h5py objects never enter the graph) through
the same lazy tensor as the one-process operators, so a shard is checked
against the manifest (its dtype, levels and counts; no symbolic link) before
its range is read with one partial read; the range's LoD is validated, and the
collection's functions run on it, all in one task.  They are the one-process
operators' own per-chunk functions (:mod:`lodtool.tasks._pipe`).

The collection, :class:`LodBag`, is lodtool's own small class over
``dask.delayed`` tasks (one per partition), not a Dask Bag or Array: a
partition is one :class:`~lodtool.LoDTensor` (a Bag would pickle Python
objects per record; an Array cannot hold a ragged index).  It offers the
operators (``pool``, ``softmax``, ``reverse``, ``expand``, ``pad``,
``pack_plan``), ``map_partitions(fn)`` for your own function on each
partition's LoDTensor, ``compute()`` (one LoDTensor), ``to_container(DIR)``
(one shard per partition, then the manifest), ``to_delayed()`` and
``to_dask_awkward()``.  Functions chained on a collection fuse into the
partition's one task, so the scheduler sees one task per partition.

Scheduling is Dask's: with a ``distributed.Client`` active (:func:`connect`
opens one within a few seconds, or refuses the address in one line), work goes to its
workers; otherwise ``compute(scheduler="processes")`` and the like work too.
Use process workers (``LocalCluster(processes=True, threads_per_worker=1)``):
h5py serializes every call inside one process.  Files are opened with HDF5
file locking off (h5py's ``locking=False``), so concurrent readers never
trip over each other's locks; each shard has exactly one writer.

>>> import os, tempfile, numpy as np
>>> from lodtool import LoDTensor, save
>>> p = os.path.join(tempfile.mkdtemp(), "x.lod.h5")
>>> save(p, LoDTensor(np.arange(6.0), recursive_sequence_lengths=[[2, 1, 3]]))
>>> bag = read(p, partition_size=16)
>>> bag.npartitions, bag.pool("sum").compute(scheduler="sync").data.tolist()
(3, [1.0, 2.0, 12.0])
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from .. import atomic, storage
from .. import lod as _lod
from .._optional import optional_import
from ..atomic import intermediate_commit
from ..errors import LodBackendError, LodShapeError, LodUsageError, LodValidationError
from ..tensor import LoDTensor, bytes_per_row

if TYPE_CHECKING:
    import dask_awkward as dak
    from dask.delayed import Delayed

    from ..container.shards import Manifest

#: the default bytes of rows per partition
DEFAULT_PARTITION_SIZE = 64 << 20


def _dask(module: str = "dask"):
    """Dask (or one of its modules, ``distributed`` too), or the error naming ``pip install 'lodtool[dask]'``."""
    return optional_import(module, "dask", "lodtool.dask")


def _tokenize(*args) -> str:
    """Dask's deterministic token of ``args``."""
    return _dask("dask.base").tokenize(*args)


@dataclass(frozen=True)
class Partition:
    """What a task needs to read its range: the stored tensor's file, sharded folder or token dataset (a URL is
    read straight from object storage, with ``storage_options``, the options in force where the plan was made),
    the tensor's name, its top-level sequences ``start..stop`` (one shard's at most), ``row``, the range's first
    data row (which Paddle's MaxIndex counts from), and what a token dataset cannot say itself (``token_dtype``,
    ``eos_token_id``: see :func:`lodtool.open`)."""

    path: str
    name: str
    start: int
    stop: int
    row: int = 0
    token_dtype: Any = None
    eos_token_id: int | None = None
    storage_options: dict = field(default_factory=dict, compare=False, repr=False)  # credentials: never shown

    def reading(self) -> dict:
        """The keyword arguments of :func:`lodtool.open` that read the partition's source."""
        return {"token_dtype": self.token_dtype, "eos_token_id": self.eos_token_id,
                "storage_options": self.storage_options}


# -- the work one task does ---------------------------------------------------------------------------------
def read_partition(part: Partition, max_memory: int | None = None) -> LoDTensor:
    """Read one partition (opened here, in the task, and checked as in one process) and validate its LoD.

    >>> import os, tempfile, numpy as np
    >>> from lodtool import save
    >>> p = os.path.join(tempfile.mkdtemp(), "x.lod.h5")
    >>> save(p, LoDTensor(np.arange(6), recursive_sequence_lengths=[[2, 1, 3]]))
    >>> read_partition(Partition(p, "tensor", 1, 3, 2)).to_nested()
    [[2], [3, 4, 5]]
    """
    from ..tasks._open import open as open_path

    with open_path(part.path, max_memory=max_memory, **part.reading()) as f:
        t = f.tensor(part.name)
        if t.lod_level:
            chunk = t.slice_level(0, part.start, part.stop)
        else:
            chunk = LoDTensor(t.read_rows(part.start, part.stop))
    _lod.validate_lod(chunk.offsets, chunk.n_rows)
    return chunk


class _Chain:
    """The functions a collection applies to each partition, in order (one object, so Dask does not unpack it)."""

    def __init__(self, fns: tuple = ()):
        self.fns = tuple(fns)

    def __add__(self, fn: Callable) -> "_Chain":
        return _Chain(self.fns + (fn,))

    def __len__(self) -> int:
        return len(self.fns)

    def __iter__(self):
        return iter(self.fns)

    def __dask_tokenize__(self):
        return _tokenize(self.fns)


def _run(part: Partition, fns: _Chain, max_memory: int | None):
    """Read a partition and apply the chain of functions (``None`` stands for "no sequences left")."""
    t = read_partition(part, max_memory)
    for fn in fns:
        if t is None:
            return None
        t = fn(t)
    return t


def _lod_of(part: Partition, fns: _Chain, max_memory: int | None):
    t = _run(part, fns, max_memory)
    return None if t is None else ([np.asarray(o) for o in t.offsets], t.n_rows, t.element_shape, t.dtype)


def _level_rows(part: Partition, fns: _Chain, max_memory: int | None, level: int):
    """``(rows, row offsets of the level's sequences, the level as an index)`` of a partition, or ``None``."""
    from ..ops._util import row_offsets
    from ..ops.pad import pad_level

    t = _run(part, fns, max_memory)
    if t is None:
        return None
    lvl = pad_level(t, level)
    return np.asarray(t.data), np.asarray(row_offsets(t.offsets, lvl), np.int64), lvl


def _longest(part: Partition, fns: _Chain, max_memory: int | None, level: int) -> tuple[int, int | None]:
    """The longest sequence of ``level`` in a partition (0 when it holds none), and ``level`` as an index."""
    got = _level_rows(part, fns, max_memory, level)
    if got is None:
        return 0, None
    _, roff, lvl = got
    return (int((roff[1:] - roff[:-1]).max()) if len(roff) > 1 else 0), lvl


def _pad(part: Partition, fns: _Chain, max_memory: int | None, pad_value, maxlen: int, level: int,
         truncate: str | None = None):
    """``(padded, lengths)`` of a partition, padded (and truncated) by the one-process ``pad``'s own function."""
    from ..tasks._pipe import pad_rows

    got = _level_rows(part, fns, max_memory, level)
    if got is None:
        return None
    rows, roff, _ = got
    lengths = roff[1:] - roff[:-1]
    padded = pad_rows(rows[roff[0]:roff[-1]], roff - roff[0], maxlen, pad_value, truncate)
    return padded, lengths if truncate is None else np.minimum(lengths, maxlen)


def _pool_index(part: Partition, max_memory: int | None, pool_index):
    """``(pooled, index)`` of a partition read as stored, the index counted from the partition's stored row."""
    return replace(pool_index, row=part.row)(read_partition(part, max_memory))


def _expand_partition(part: Partition, max_memory: int | None, y_path: str, y_name: str | None, level: int):
    """``sequence_expand`` of a partition of x by the matching window of y's reference level (``None``: no
    copies, the partition writes nothing)."""
    from ..tasks._open import open as open_path
    from ..tasks._pipe import expand_by

    t = read_partition(part, max_memory)
    count = len(t) if t.lod_level else t.n_rows
    with open_path(y_path, max_memory=max_memory, **part.reading()) as f:
        ref = f.tensor(y_name).read_offsets(level, part.start, part.start + count + 1)
    ref = ref - ref[0]
    _lod.validate_lod([ref], int(ref[-1]))
    return expand_by(t, ref) if ref[-1] else None


# -- planning -----------------------------------------------------------------------------------------------
def _partition_rows(spec, partition_size: int | str) -> int:
    from ..limits import parse_size

    size = parse_size(partition_size, "partition size")
    row_bytes = bytes_per_row(spec.dtype, spec.element_shape)
    return max(1, size // max(row_bytes, 1))


def plan(path: str | os.PathLike, name: str | None = None, *, partition_size: int | str = DEFAULT_PARTITION_SIZE,
         max_memory: int | None = None, token_dtype: Any = None,
         eos_token_id: int | None = None) -> tuple[list[Partition], Any]:
    """The partitions of a stored tensor (file, sharded folder or token dataset) and its spec, from the offsets
    alone.

    >>> import os, tempfile, numpy as np
    >>> from lodtool import save
    >>> p = os.path.join(tempfile.mkdtemp(), "x.lod.h5")
    >>> save(p, LoDTensor(np.arange(6), recursive_sequence_lengths=[[2, 1, 3]]))
    >>> [(q.start, q.stop, q.row) for q in plan(p, partition_size=24)[0]]
    [(0, 2, 0), (2, 3, 3)]
    """
    parts, spec, _ = _plan(path, name, partition_size, max_memory, token_dtype, eos_token_id)
    return parts, spec


def _plan(path, name, partition_size, max_memory, token_dtype, eos_token_id) -> tuple[list[Partition], Any, int]:
    """:func:`plan`, and the tensor's row count.  Every shard is opened, so checked against the manifest (a
    shard the manifest says is empty too)."""
    from ..planner import Bounds, sequence_ranges
    from ..container.shards import TensorSpec
    from ..tasks._open import open as open_path

    path = storage.absolute(path)  # workers may run elsewhere, in another folder
    parts: list[Partition] = []
    with open_path(path, max_memory=max_memory, token_dtype=token_dtype, eos_token_id=eos_token_id) as f:
        t = f.tensor(name)
        spec = TensorSpec.of(t)
        max_rows = _partition_rows(spec, partition_size)
        sharded = hasattr(t, "shard_ranges")
        rows_before = 0  # the rows of the shards before this one (a shard without sequences holds no rows)
        for i, (_, first, stop) in enumerate(t.shard_ranges() if sharded else [(path, 0, len(t))]):
            s = t.shard(i)[1] if sharded else t
            bounds = Bounds(s.read_offsets, s.lod_level)
            for a, b in sequence_ranges(s.read_offsets, s.lod_level, stop - first, max_rows):
                parts.append(Partition(path, t.name, first + a, first + b, rows_before + bounds(a)[-1], token_dtype,
                                       eos_token_id, dict(storage.current_options())))
            rows_before += s.n_rows
        return parts, spec, t.n_rows


def read(path: str | os.PathLike, name: str | None = None, *,
         partition_size: int | str = DEFAULT_PARTITION_SIZE, max_memory: int | None = None, token_dtype: Any = None,
         eos_token_id: int | None = None) -> "LodBag":
    """A stored tensor (a container file, a sharded folder or a token dataset, read with ``token_dtype`` and
    ``eos_token_id`` as :func:`lodtool.open` reads it) as a Dask collection of whole-sequence partitions.

    ``partition_size`` is the bytes of rows per partition (an int or text such
    as ``"64MB"``); one top-level sequence bigger than that is a partition of
    its own.  Nothing but offsets is read here.

    >>> import os, tempfile, numpy as np
    >>> from lodtool import save
    >>> p = os.path.join(tempfile.mkdtemp(), "x.lod.h5")
    >>> save(p, LoDTensor(np.arange(6), recursive_sequence_lengths=[[2, 1, 3]]))
    >>> read(p, partition_size=16).reverse().compute(scheduler="sync").to_nested()
    [[1, 0], [2], [5, 4, 3]]
    """
    parts, spec, n_rows = _plan(path, name, partition_size, max_memory, token_dtype, eos_token_id)
    return LodBag(parts, spec=spec, max_memory=max_memory, label="read", n_rows=n_rows)


# -- running ------------------------------------------------------------------------------------------------
def _compute(items: list, progress: Callable[[int, int], None] | None, kwargs: dict) -> list:
    """``dask.compute`` of ``items`` (each one partition's task); ``progress(done, total)`` as they finish."""
    dask = _dask()

    total = len(items)
    if progress is None:
        return list(dask.compute(*items, **kwargs))
    client = None if kwargs.get("scheduler") else _active_client()
    if client is not None:
        as_completed = _dask("distributed").as_completed

        futures = client.compute(items, **kwargs)
        progress(0, total)
        for done, _ in enumerate(as_completed(futures), 1):
            progress(done, total)
        return client.gather(futures)
    Callback = _dask("dask.callbacks").Callback

    names = {item.key for item in items}
    done = [0]

    def posttask(key, result, dsk, state, worker_id):
        if key in names:
            done[0] += 1
            progress(done[0], total)

    progress(0, total)
    with Callback(posttask=posttask):
        return list(dask.compute(*items, **kwargs))


def _active_client():
    try:
        get_client = _dask("distributed").get_client
    except LodBackendError:  # pragma: no cover - dask without distributed
        return None
    try:
        return get_client()
    except ValueError:
        return None


class LodBag:
    """Partitions of whole top-level sequences of one stored tensor, each computed by one Dask task.

    Made by :func:`read`.  Methods that transform return a new collection
    (nothing runs until ``compute``, ``to_container`` or ``to_delayed``).
    Keyword arguments of ``compute`` and ``to_container`` go to
    ``dask.compute`` (``scheduler=``, ...); ``progress(done, total)`` is
    called as partitions finish.
    """

    def __init__(self, parts: Sequence[Partition], *, spec=None, fns=(), max_memory: int | None = None,
                 label: str = "read", n_rows: int | None = None):
        self.partitions = list(parts)
        self.spec = spec
        self._fns = fns if isinstance(fns, _Chain) else _Chain(fns)
        self._max_memory = max_memory
        self._label = label
        self._n_rows = n_rows  # the stored tensor's rows (known for a collection made by read)

    @property
    def npartitions(self) -> int:
        return len(self.partitions)

    @property
    def name(self) -> str | None:
        """The stored tensor's name."""
        return self.partitions[0].name if self.partitions else None

    def __repr__(self) -> str:
        return f"<LodBag {self._label} npartitions={self.npartitions} steps={len(self._fns)}>"

    def _then(self, fn: Callable, label: str) -> "LodBag":
        return LodBag(self.partitions, fns=self._fns + fn, max_memory=self._max_memory, label=label)

    def map_partitions(self, fn: Callable[..., LoDTensor], *args, **kwargs) -> "LodBag":
        """Apply ``fn(partition, *args, **kwargs)`` to each partition's LoDTensor; it must return a LoDTensor.

        >>> import os, tempfile, numpy as np
        >>> from lodtool import save
        >>> p = os.path.join(tempfile.mkdtemp(), "x.lod.h5")
        >>> save(p, LoDTensor(np.arange(4), [[0, 1, 4]]))
        >>> double = lambda t: LoDTensor(t.data * 2, t.lod)
        >>> read(p, partition_size=8).map_partitions(double).compute(scheduler="sync").data.tolist()
        [0, 2, 4, 6]
        """
        from ..tasks._pipe import step

        return self._then(step(fn, *args, **kwargs), getattr(fn, "__name__", "map"))

    # the operators, partition by partition (each partition holds whole top-level sequences)
    def pool(self, pool_type: str = "sum", pad_value: float = 0.0, return_index: bool = False) -> "LodBag":
        """``sequence_pool`` of each partition (as ``lodtool pool``).

        ``return_index=True`` (``max``/``min``, on a collection read straight
        from storage) also gives Paddle's MaxIndex, as ``lodtool pool --index``:
        the stored row each value came from, counted in the whole tensor (-1
        for an empty sequence), int32 (int64 from 2**31 rows).  ``compute()``
        then returns ``(pooled, index)`` and ``to_container`` writes both, the
        index as tensor ``{name}_index``; nothing can be chained after it.

        >>> import os, tempfile, numpy as np
        >>> from lodtool import save
        >>> p = os.path.join(tempfile.mkdtemp(), "x.lod.h5")
        >>> save(p, LoDTensor(np.array([3.0, 1, 5, 2, 9]), [[0, 2, 5]]))
        >>> out, idx = read(p, partition_size=16).pool("max", return_index=True).compute(scheduler="sync")
        >>> out.data.tolist(), idx.data.tolist()
        ([3.0, 9.0], [0, 4])
        """
        from ..ops import sequence_pool
        from ..ops.pool import index_dtype
        from ..tasks._pipe import PoolIndex, step

        if not return_index:
            return self._map(step(sequence_pool, pool_type, pad_value=pad_value), "pool")
        return self._map(PoolIndex(pool_type, pad_value, index_dtype(self._n_rows or 0)), "pool")

    def _map(self, fn: Callable, label: str) -> "LodBag":
        """The one-process operators' configured chunk function ``fn`` (:mod:`lodtool.tasks._pipe`) on each
        partition; a ``PoolIndex`` counts its index from each partition's stored row."""
        from ..tasks._pipe import PoolIndex

        if not isinstance(fn, PoolIndex):
            return self._then(fn, label)
        if self._fns or self._n_rows is None:
            raise LodUsageError("the pooling index counts stored rows: call pool(..., return_index=True) on "
                                "read(...), before other operators")
        return _TaskBag(self.partitions, spec=self.spec, max_memory=self._max_memory, label=label,
                        n_rows=self._n_rows, task=(_pool_index, fn), names=("", "_index"),
                        what="pooled tensor and its index (pool(return_index=True))")

    def softmax(self) -> "LodBag":
        """``sequence_softmax`` of each partition (as ``lodtool softmax``)."""
        from ..ops import sequence_softmax
        from ..tasks._pipe import step

        return self._map(step(sequence_softmax), "softmax")

    def reverse(self) -> "LodBag":
        """``sequence_reverse`` of each partition (as ``lodtool reverse``)."""
        from ..ops import sequence_reverse
        from ..tasks._pipe import step

        return self._map(step(sequence_reverse), "reverse")

    def expand(self, y: str | os.PathLike, y_name: str | None = None, ref_level: int = -1) -> "LodBag":
        """``sequence_expand`` of this tensor (x) by the LoD of the stored tensor ``y`` (its data is never read).

        Each partition of x reads only the matching window of y's reference
        level.  x must be read straight from storage (no functions before).
        """
        from ..tasks._open import open as open_path
        from ..ops.expand import expand_level

        if self._fns:
            raise LodUsageError("expand needs x as stored: call it on read(...) before other operators")
        y = storage.absolute(y)
        reading = self.partitions[0].reading() if self.partitions else {}  # y is read as x is
        with open_path(y, max_memory=self._max_memory, **reading) as f:
            ty = f.tensor(y_name)
            y_name = ty.name
            if ty.lod_level == 0:
                raise LodShapeError("sequence_expand: y has no LoD; expanding needs y's LoD at ref_level")
            # the shape checks of sequence_expand, from sizes alone (x's count from the plan)
            count = sum(p.stop - p.start for p in self.partitions)
            sizes = SimpleNamespace(lod_level=self.spec.lod_level, n_rows=count, num_sequences=lambda level=0: count)
            level = expand_level(sizes, ty, ref_level)
        return _TaskBag(self.partitions, spec=self.spec, max_memory=self._max_memory, label="expand",
                        task=(_expand_partition, y, y_name, level), what="expanded tensor")

    def pad(self, pad_value: Any = 0, maxlen: int | None = None, level: int = -1,
            truncate: str | None = None) -> "PaddedBag":
        """``sequence_pad`` of each partition to one common ``maxlen`` (the longest, when ``None``).

        ``truncate="head"`` or ``"tail"`` (with ``maxlen``) keeps that end of
        each longer sequence, as ``lodtool pad --truncate``; ``lengths`` are the
        kept lengths.  Without it a longer sequence is an error, as in Paddle.

        >>> import os, tempfile, numpy as np
        >>> from lodtool import save
        >>> p = os.path.join(tempfile.mkdtemp(), "x.lod.h5")
        >>> save(p, LoDTensor(np.arange(5), [[0, 4, 5]]))
        >>> r = read(p, partition_size=8).pad(maxlen=2, truncate="tail").compute(scheduler="sync")
        >>> r["padded"].tolist(), r["lengths"].tolist()
        ([[2, 3], [4, 0]], [2, 1])
        """
        from ..tasks._pipe import check_truncate

        check_truncate(truncate, maxlen)
        return PaddedBag(self, pad_value, maxlen, level, truncate)

    def pack_plan(self, level: int = -1) -> Delayed:
        """The RNN packing plan of ``level`` as a ``dask.delayed`` value: the partitions' offsets are read in
        parallel, then the plan is made once from the whole LoD (call ``.compute()``)."""
        dask = _dask()

        lods = [dask.delayed(_lod_of, pure=True)(p, self._fns, self._max_memory,
                                                 dask_key_name=(f"lodtool-lod-{self._token()}", i))
                for i, p in enumerate(self.partitions)]
        where = self.partitions[0].path if self.partitions else "the tensor"
        return dask.delayed(_plan_from_lods, pure=True)(lods, level, self._max_memory, where)

    # running
    def _token(self) -> str:
        return _tokenize(self.partitions, self._fns, self._max_memory, type(self).__name__)

    def _task(self, part: Partition) -> tuple:
        """``(function, *arguments)`` of the one task that computes ``part``."""
        return (_run, part, self._fns, self._max_memory)

    def _output_names(self, name: str) -> tuple[str, ...]:
        """The tensor names a partition's result is written as (its task gives one tensor per name)."""
        return (name,)

    def to_delayed(self) -> list:
        """One ``dask.delayed`` value per partition (a LoDTensor, or ``None`` when a partition has no sequences
        left, as in an ``expand`` by zero copies)."""
        dask = _dask()

        token = self._token()
        out = []
        for i, part in enumerate(self.partitions):
            fn, *args = self._task(part)
            out.append(dask.delayed(fn, pure=True)(*args, dask_key_name=(f"lodtool-{self._label}-{token}", i)))
        return out

    def compute(self, *, progress: Callable[[int, int], None] | None = None, **kwargs) -> LoDTensor:
        """Run every partition and join the results into one LoDTensor (in memory)."""
        from ..container.shards import concat_tensors

        results = [r for r in _compute(self.to_delayed(), progress, kwargs) if r is not None]
        if results:
            return concat_tensors(results)
        spec = self.spec if not self._fns else _spec_after(self)
        empty = tuple(np.zeros(1, np.int64) for _ in range(spec.lod_level))
        try:  # zero sequences, where the LoD rules allow them
            _lod.validate_lod(empty, 0)
        except LodValidationError as exc:
            raise LodUsageError(f"the result holds no sequences ({exc})") from None
        return LoDTensor(np.zeros((0,) + tuple(spec.element_shape), spec.dtype), empty, level_names=spec.level_names)

    def to_container(self, folder: str | os.PathLike, *, name: str | None = None, compression: str | None = None,
                     append: bool = False, progress: Callable[[int, int], None] | None = None,
                     **kwargs) -> Manifest:
        """Write each partition as one shard of the sharded folder ``folder`` (in parallel), then the manifest.

        Shards get fresh numbers after any already in the folder, so a reader
        of the previous manifest is never disturbed; without ``append`` the new
        manifest replaces the old one and the old shards are removed after it.
        A failure removes the new shards and leaves the old manifest.  Returns
        the :class:`~lodtool.container.shards.Manifest`.
        """
        dask = _dask()

        from ..container.shards import commit_manifest, shard_name

        folder = storage.absolute(folder)  # a URL: workers upload to a staging prefix, the commit copies them in
        name = name or self.name or "tensor"
        token = self._token()
        writing = dict(storage.current_options())  # the options in force here reach the workers that upload

        def tasks(base: int, root: str):
            paths = [storage.join(root, shard_name(base + i)) for i in range(self.npartitions)]
            return [dask.delayed(_write_result, pure=True)(_Thunk(*self._task(part)), path, self._output_names(name),
                                                           compression, {**part.storage_options, **writing},
                                                           dask_key_name=(f"lodtool-shard-{token}", i))
                    for i, (part, path) in enumerate(zip(self.partitions, paths))], paths

        def commit(results, staging: str | None):
            written = [r for r in results if r is not None]
            if not written:
                raise LodUsageError("the result holds no sequences; nothing was written")
            specs = written[0][1]
            for info, s in written:
                if s != specs:
                    raise LodUsageError(f"{folder}: partitions came out with different dtypes or shapes "
                                        f"({specs} and {s}); give the operator a fixed dtype")
            return commit_manifest(folder, specs, [info for info, _ in written], append=append, staging=staging)

        return _shard_job(folder, append, tasks, commit, progress, kwargs)

    def to_dask_awkward(self) -> dak.Array:
        """The partitions as a ``dask_awkward.Array`` (``dask_awkward.from_map``), each partition one awkward
        array of nested lists.  Its type comes from a ``mock()`` of the tensor's spec, so no partition is read
        to learn it.  Needs dask-awkward."""
        dak = optional_import("dask_awkward", "dask-awkward", "to_dask_awkward")

        if self._fns and self.spec is None:
            spec = _spec_after(self)
        else:
            spec = self.spec
        reader = _AwkwardPartitions(spec, self._fns, self._max_memory)
        return dak.from_map(reader, self.partitions, label=f"lodtool-{self._label}")


class _Thunk:
    """A partition's task as one opaque object (Dask would run a bare ``(function, ...)`` tuple itself)."""

    def __init__(self, fn: Callable, *args):
        self.fn, self.args = fn, args

    def __call__(self):
        return self.fn(*self.args)

    def __dask_tokenize__(self):
        return _tokenize(self.fn, self.args)


def _write_result(task: _Thunk, path: str, names: tuple[str, ...], compression: str | None,
                  storage_options: dict | None = None):
    """Run a partition's task, then write its result as one shard; return the manifest entry and the specs.

    The task gives one LoDTensor, or a tuple of them (one per name in ``names``); a shard in object storage is
    uploaded whole with ``storage_options``."""
    from ..container.shards import TensorSpec, write_shard

    t = task()
    if t is None:
        return None
    tensors = dict(zip(names, t if isinstance(t, tuple) else (t,), strict=True))
    with storage.options(storage_options):
        info = write_shard(path, tensors, compression=compression)
    return info, {n: TensorSpec.of(x) for n, x in tensors.items()}


class _TaskBag(LodBag):
    """A collection whose task reads its partition itself, ``task(partition, max_memory, *args)`` (pool's index,
    expand); its result is written as ``names`` (one tensor each), and nothing chains after it."""

    def __init__(self, parts, *, task: tuple, names: tuple = ("",), what: str, **kwargs):
        super().__init__(parts, **kwargs)
        self._task_args, self._names, self._what = task, names, what

    def _then(self, fn, label) -> LodBag:
        raise LodUsageError(f"write or compute the {self._what} first; chaining after it is not supported")

    def _token(self) -> str:
        return _tokenize(super()._token(), self._task_args)

    def _task(self, part: Partition) -> tuple:
        fn, *args = self._task_args
        return (fn, part, self._max_memory, *args)

    def _output_names(self, name: str) -> tuple[str, ...]:
        return tuple(name + suffix for suffix in self._names)

    def compute(self, *, progress: Callable[[int, int], None] | None = None, **kwargs):
        """The whole result in memory: one LoDTensor, or a tuple of them (``(pooled, index)``)."""
        from ..container.shards import concat_tensors

        if len(self._names) == 1:
            return super().compute(progress=progress, **kwargs)
        results = _compute(self.to_delayed(), progress, kwargs)
        if not results:
            raise LodUsageError("the tensor holds no sequences to pool")
        return tuple(concat_tensors(list(parts)) for parts in zip(*results))

    def to_dask_awkward(self) -> dak.Array:
        if len(self._names) > 1:
            raise LodUsageError("pool(return_index=True) gives two tensors; compute them or write them with "
                                "to_container")
        return super().to_dask_awkward()


def _plan_from_lods(lods: list, level: int, max_memory: int | None, where: str):
    """One packing plan from the partitions' offsets, stitched into the whole LoD (as the one-process plan)."""
    from ..limits import resolve_max_memory
    from ..tasks._pipe import lod_stand_in, plan_of

    max_memory = resolve_max_memory(max_memory)

    lods = [x for x in lods if x is not None]
    if not lods:
        raise LodUsageError("the tensor holds no sequences to plan")
    offsets_list, rows, shape, dtype = [x[0] for x in lods], sum(x[1] for x in lods), lods[0][2], lods[0][3]
    levels = []
    for k in range(len(offsets_list[0])):
        pieces, base = [np.zeros(1, np.int64)], 0
        for offs in offsets_list:
            pieces.append(offs[k][1:] + base)
            base += int(offs[k][-1])
        levels.append(np.concatenate(pieces))
    return plan_of(lod_stand_in(levels, rows, shape, dtype), level, max_memory, where)


class PaddedBag:
    """``sequence_pad`` over the partitions of a :class:`LodBag`: ``compute()`` gives ``padded``, ``lengths`` and
    ``mask`` (as ``lodtool pad`` writes them), ``to_npz(path)`` writes them."""

    def __init__(self, bag: LodBag, pad_value, maxlen: int | None, level: int, truncate: str | None = None):
        self.bag, self.pad_value, self.maxlen, self.level = bag, pad_value, maxlen, level
        self.truncate = truncate

    def _maxlen(self, kwargs) -> int:
        dask = _dask()

        from ..ops.pad import padded_length

        # the longest sequence, from each partition's offsets (checked against a given maxlen too, as in Paddle)
        longest = [dask.delayed(_longest, pure=True)(p, self.bag._fns, self.bag._max_memory, self.level)
                   for p in self.bag.partitions]
        results = _compute(longest, None, kwargs)
        found = max((n for n, _ in results), default=0)
        level = next((lvl for _, lvl in results if lvl is not None), self.level)  # as the error names it
        if self.truncate is not None:  # longer sequences are cut to maxlen
            found = min(found, self.maxlen)
        return padded_length(self.maxlen, found, level)

    def compute(self, *, progress: Callable[[int, int], None] | None = None, **kwargs) -> dict:
        """``{"padded", "lengths", "mask"}`` of the whole tensor (in memory)."""
        dask = _dask()

        from ..ops import sequence_mask

        maxlen = self._maxlen(kwargs)
        items = [dask.delayed(_pad, pure=True)(p, self.bag._fns, self.bag._max_memory, self.pad_value, maxlen,
                                               self.level, self.truncate) for p in self.bag.partitions]
        results = [r for r in _compute(items, progress, kwargs) if r is not None]
        if not results:
            raise LodUsageError("the tensor holds no sequences to pad")
        padded = np.concatenate([r[0] for r in results])
        lengths = np.concatenate([r[1] for r in results])
        return {"padded": padded, "lengths": lengths, "mask": sequence_mask(lengths, maxlen)}

    def to_npz(self, output, **kwargs) -> dict:
        """Compute, then write ``padded``, ``lengths`` and ``mask`` into an NPZ (atomically); return its summary."""
        from ..io.npy import write_npz_members

        arrays = self.compute(**kwargs)
        write_npz_members(output, [(k, a.shape, a.dtype, iter([a])) for k, a in arrays.items()])
        return {"output": os.fspath(output) if isinstance(output, (str, os.PathLike)) else "-",
                "shape": list(arrays["padded"].shape), "sequences": int(arrays["lengths"].shape[0]),
                "maxlen": int(arrays["padded"].shape[1])}


# -- dask-awkward -------------------------------------------------------------------------------------------
def _awkward_form(spec):
    ak = optional_import("awkward", "awkward", "lodtool.dask\'s awkward partitions")

    primitive = ak.types.numpytype.dtype_to_primitive(np.dtype(spec.dtype))
    form = ak.forms.NumpyForm(primitive, inner_shape=tuple(spec.element_shape))
    for _ in range(spec.lod_level):
        form = ak.forms.ListOffsetForm("i64", form)
    return form


def _to_awkward(t: LoDTensor):
    ak = optional_import("awkward", "awkward", "lodtool.dask\'s awkward partitions")

    content = ak.contents.NumpyArray(np.ascontiguousarray(t.data))
    for offsets in reversed(t.offsets):
        content = ak.contents.ListOffsetArray(ak.index.Index64(np.asarray(offsets, np.int64)), content)
    return ak.Array(content)


class _AwkwardPartitions:
    """dask-awkward's io function: reads a partition as an awkward array; ``mock()`` answers the type."""

    def __init__(self, spec, fns: _Chain, max_memory: int | None):
        self.spec, self.fns, self.max_memory = spec, fns, max_memory

    def __call__(self, part: Partition):
        return _to_awkward(_run(part, self.fns, self.max_memory))

    def mock(self):
        typetracer_from_form = optional_import("awkward.typetracer", "awkward",
                                              "to_dask_awkward").typetracer_from_form

        return typetracer_from_form(_awkward_form(self.spec))


def _spec_after(bag: LodBag):
    """The spec of a chain's output, from running it on a one-row stand-in of the stored spec (no data read)."""
    from ..container.shards import TensorSpec

    spec = bag.spec
    if spec is None:
        raise LodUsageError("the collection's type is unknown; read it with lodtool.dask.read")
    t = LoDTensor(np.zeros((1,) + tuple(spec.element_shape), spec.dtype),
                  [np.array([0, 1], np.int64) for _ in range(spec.lod_level)], level_names=spec.level_names)
    for fn in bag._fns:
        t = fn(t)
    return TensorSpec.of(t)


# -- schedulers -----------------------------------------------------------------------------------------------
#: seconds to wait for a scheduler at an address (``LODTOOL_SCHEDULER_TIMEOUT`` overrides it)
CONNECT_TIMEOUT = 5.0
#: the most bytes a scheduler's first message (its handshake: a few hundred) may claim
HANDSHAKE_BYTES = 1 << 20


def connect(address: str, timeout: float | None = None) -> "distributed.Client":
    """A ``distributed.Client`` of the scheduler at ``address``, or a one-line
    :class:`~lodtool.errors.LodUsageError` within about ``timeout`` seconds.

    Refused: an unknown scheme, what is not an address, nothing listening, a
    listener that says nothing, and one whose first message is not a small Dask
    handshake (it is checked on a connection of our own before Dask reads it,
    so a claimed frame of 2**40 bytes is never allocated).

    >>> connect("nosuch://x")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    lodtool.errors.LodUsageError: 'nosuch://x' is not a Dask scheduler address (unknown address scheme 'nosuch' ...)
    """
    if timeout is None:
        timeout = float(os.environ.get("LODTOOL_SCHEDULER_TIMEOUT", CONNECT_TIMEOUT))
    Client = _dask("distributed").Client
    comm = _dask("distributed.comm")
    parse_address, parse_host_port = comm.parse_address, comm.parse_host_port
    get_backend = _dask("distributed.comm.registry").get_backend

    try:
        scheme, location = parse_address(address)
        get_backend(scheme)
        host_port = parse_host_port(location) if scheme == "tcp" else None
    except ValueError as exc:
        raise LodUsageError(f"{address!r} is not a Dask scheduler address ({exc})") from None
    if host_port is not None:
        _check_handshake(address, host_port, timeout)
    try:
        return Client(address, timeout=f"{timeout}s")
    except Exception as exc:  # noqa: BLE001 - whatever a remote end makes Dask raise is one line here
        raise LodUsageError(f"cannot use the Dask scheduler at {address} ({type(exc).__name__}: {exc})") from None


def _check_handshake(address: str, host_port: tuple, timeout: float) -> None:
    """Read a TCP scheduler's first message (Dask's frames: a byte count, then the frames' lengths) and refuse
    one that is silent, garbled or larger than :data:`HANDSHAKE_BYTES`."""
    import socket
    import struct

    unpack_frames = _dask("distributed.protocol.utils").unpack_frames

    try:
        with socket.create_connection(host_port, timeout=timeout) as sock, sock.makefile("rb") as stream:
            (size,) = struct.unpack("Q", stream.read(8))  # a short read (closed early) is no Dask handshake either
            if size <= HANDSHAKE_BYTES:
                _, missing = unpack_frames(stream.read(size), partial=True)
                size += sum(missing)
    except socket.timeout:
        raise LodUsageError(f"{address}: no Dask scheduler answered within {timeout:g} s") from None
    except OSError as exc:
        raise LodUsageError(f"cannot reach the Dask scheduler at {address} ({exc.strerror or exc})") from None
    except (struct.error, AssertionError, ValueError):
        size = HANDSHAKE_BYTES + 1  # frames that do not add up: not Dask's
    if size > HANDSHAKE_BYTES:
        raise LodUsageError(f"{address}: not a Dask scheduler (its first message is not a Dask handshake)")


# -- parallel pack ------------------------------------------------------------------------------------------
def _pack_one(source: str, path: str, options: dict):
    from ..container.reader import open_file
    from ..container.shards import TensorSpec, describe_shard
    from ..tasks import pack as pack_task

    with intermediate_commit():  # a shard's commit is not the folder's: an interrupt here is a plain one
        pack_task([source], path, **options)
    with open_file(path) as f:
        spec = TensorSpec.of(f.tensor(options.get("name", "tensor")))
    return describe_shard(path), spec


def pack(inputs: Sequence[str | os.PathLike], folder: str | os.PathLike, *, append: bool = False,
         progress: Callable[[int, int], None] | None = None, compute_kwargs: dict | None = None,
         **options) -> Manifest:
    """Pack many input files in parallel, one shard each (on the Dask workers), then write the manifest.

    ``options`` are :func:`lodtool.tasks.pack`'s (``format``, ``lod_level``,
    ``dtype``, ``name``, ``level_names``, ``compression``).  Every shard must
    come out with the same dtype and shape: give ``dtype`` when the inputs
    could infer different ones.  Returns the manifest.

    >>> import os, tempfile
    >>> d = tempfile.mkdtemp()
    >>> for i in range(3):
    ...     _ = open(os.path.join(d, f"{i}.jsonl"), "w").write("[1, 2]\\n[3]\\n" * (i + 1))
    >>> m = pack([os.path.join(d, f"{i}.jsonl") for i in range(3)], os.path.join(d, "out"),
    ...          compute_kwargs={"scheduler": "sync"})
    >>> [s.tensors["tensor"].sequences for s in m.shards]
    [2, 4, 6]
    """
    dask = _dask()

    from ..container.shards import commit_manifest, shard_name

    sources = [os.fspath(s) for s in inputs]
    if not sources:
        raise LodUsageError("no input given")
    if any(s == "-" for s in sources):
        raise LodUsageError("a parallel pack reads files, not stdin")
    sources = [os.path.abspath(s) for s in sources]  # workers may run elsewhere, in another folder
    folder = os.path.abspath(os.fspath(folder))

    def tasks(base: int, root: str):
        paths = [os.path.join(root, shard_name(base + i)) for i in range(len(sources))]
        return [dask.delayed(_pack_one, pure=False)(s, p, options, dask_key_name=(f"lodtool-pack-{base}", i))
                for i, (s, p) in enumerate(zip(sources, paths))], paths

    def commit(results, staging: str | None):
        spec = results[0][1]
        for (info, s), src in zip(results, sources):
            if s != spec:
                raise LodUsageError(f"{src}: packs as {s.dtype} {list(s.element_shape)} with {s.lod_level} "
                                    f"level(s), but {sources[0]} as {spec.dtype} {list(spec.element_shape)} with "
                                    f"{spec.lod_level}; give dtype=... (and lod_level=...) so every shard agrees")
        return commit_manifest(folder, {options.get("name", "tensor"): spec}, [info for info, _ in results],
                               append=append, staging=staging)

    return _shard_job(folder, append, tasks, commit, progress, dict(compute_kwargs or {}))


def _shard_job(folder: str, append: bool, tasks: Callable, commit: Callable, progress, kwargs: dict) -> Manifest:
    """``tasks(first new shard number, where the shards go)`` (``(Dask items, their shard paths)``) computed, then
    ``commit(results, staging)`` writes the manifest.  In object storage the shards go to a staging prefix
    (:func:`lodtool.atomic.staging_for`) that the commit copies in, so nothing appears in the folder before it; a
    failure removes the new shards (and the folder, where the job made it)."""
    from ..container.shards import next_shard_index, prepare_folder, remove_uncommitted_shards

    created = not storage.is_url(folder) and not os.path.exists(folder)
    prepare_folder(folder, append=append)
    staging = atomic.staging_for(folder) if storage.is_url(folder) else None
    items, paths = tasks(next_shard_index(folder), staging or folder)
    try:
        return commit(_compute(items, progress, kwargs), staging)
    except BaseException:
        if staging is not None:  # a commit cut short may have copied some in: those no manifest names go too
            atomic.remove_staging(staging)
            paths = [storage.join(folder, os.path.basename(p)) for p in paths]
        remove_uncommitted_shards(folder, paths, created=created)
        raise


__all__ = ["read", "plan", "pack", "connect", "read_partition", "Partition", "LodBag", "PaddedBag",
           "DEFAULT_PARTITION_SIZE"]
