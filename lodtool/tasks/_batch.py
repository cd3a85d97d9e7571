"""Training batches planned from a container's offsets, and read back with partial reads.

A *plan* says which sequences go into which batch.  It is made from the
sequences' lengths alone, which lodtool has in its offsets without reading any
data, so a corpus of any size is planned in seconds.  The units batched are the
sequences of one LoD ``level``; their lengths are counted in **data rows** (a
level-0 sequence of a two-level tensor is as long as all the rows of all its
sub-sequences).

Modes (:data:`MODES`):

* ``sorted``: fairseq's ``batch_by_size``.  A random permutation (from ``seed``
  alone, as fairseq draws it once), a stable sort by length, then one greedy
  pass in which a batch costs ``n * max_len`` (its padded size) and stays within
  ``max_tokens`` and ``max_sequences``; sizes are multiples of ``multiple_of``
  exactly as ``data_utils_fast.pyx`` makes them.  The batch order is shuffled
  per ``(seed, epoch)``.
* ``megabatch``: Hugging Face's ``group_by_length``.  A random permutation per
  ``(seed, epoch)``, megabatches of ``megabatch_mult`` (default
  ``min(n // (4 * batch), 50)``) batches, each sorted by length, longest first,
  and the longest sequence of all swapped to the very front, so the largest
  batch comes first (an out-of-memory error shows at once).
* ``buckets``: tf.data's ``bucket_by_sequence_length``.  ``boundaries`` split
  the lengths into buckets (``len < b[0]``, ``b[0] <= len < b[1]``, ...), each
  with its batch size (``bucket_batch_sizes``, or ``max_tokens // longest`` of
  the bucket); a bucket's batch is emitted when it fills, in stream order, and
  the partial ones at the end, by bucket.  ``pad_to_bucket_boundary`` pads to
  ``boundary - 1`` for fixed shapes.
* ``pack``: first-fit-decreasing packing of sequences into rows of
  ``max_tokens``; each row is a batch, with :meth:`BatchPlan.cu_seqlens` and
  :meth:`BatchPlan.position_ids` for variable-length attention.
* ``random``: the baseline; a random permutation per ``(seed, epoch)`` cut into
  batches of ``max_sequences`` (or greedily within ``max_tokens``).
* ``chunks``: a shuffle that reads each stored chunk about once an epoch, as
  MosaicML streaming's ``py1b`` and litdata's chunk shuffling do.  The chunks
  (``chunk_rows`` rows each: the file's own for a container) are shuffled per
  ``(seed, epoch)`` and taken ``window`` at a time; the sequences that start in
  a window's chunks are shuffled, sorted by length (ties in random order) and
  cut greedily as ``sorted`` does, and the window's batches come in random
  order.  A reader's cache then needs only a window of chunks at a time.

Across ``num_replicas`` the batches are dealt round-robin: rank ``r`` gets
batches ``r, r + R, ...``.  Every rank gets the same number of batches: with
``drop_last`` the last few batches are dropped; without it the list is padded
by repeating batches from its start, as torch's ``DistributedSampler`` repeats
samples, and :attr:`BatchPlan.repeat` marks those repeats (the batches that are
not repeats are disjoint across ranks and cover every sequence once).

This module orchestrates: the array passes of the planner are compiled
kernels in :mod:`lodtool.ops.batching`, and the data is read through the
stored tensor's ``read_offsets`` and ``read_rows``.

>>> import numpy as np
>>> plan = batch_plan(np.array([5, 1, 3, 8, 2, 2, 7, 4]), max_tokens=16, mode="sorted")
>>> sorted(len(b) for b in plan), plan.stats()["tokens"]
([2, 2, 4], 32)
>>> all(len(b) * plan.lengths[b].max() <= 16 for b in plan)
True
"""


from __future__ import annotations

import functools
import json
import lzma
import math
import os
import re
import shutil
import tokenize
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..container import checksum
from ..container._h5 import file_identity
from ..container.reader import DECODED_CACHE_BYTES, DecodedChunks, LazyTensor, words_of
from ..container.writer import chunk_rows
from ..errors import (LodDtypeError, LodExistsError, LodFileNotFoundError, LodFormatError, LodIndexError,
                      LodInputError, LodMemoryError, LodShapeError, LodUsageError,
                      LodValidationError)
from ..limits import check_memory, human_bytes, resolve_max_memory
from ..lod import find_lod_problems, level_position
from ..ops._segments import _ramp
from ..ops._util import cast_value
from ..ops.batching import (GATHER_MISMATCH, chunk_reads, compiled_gather_batches, counting_argsort,
                            first_fit_decreasing, first_short_batch, gather_batch, gather_runs, gather_shifts,
                            greedy_batch_ends, megabatch_order, plan_rng, segment_max, segment_sums, sort_by_length)
from ..planner import row_offset_windows
from ..tensor import TensorView

MODES = ("sorted", "megabatch", "buckets", "pack", "random", "chunks")
OUTPUTS = ("padded", "jagged-numpy", "varlen")
TRUNCATE = ("head", "tail")
#: version of the saved plan's layout (``.npz``)
PLAN_VERSION = 1
#: the arrays of a saved plan, beside its ``meta``
PLAN_ARRAYS = ("lengths", "indices", "offsets", "padded_lengths", "repeat")
#: the largest value a count option may take (the kernels count in int64)
INT64_MAX = int(np.iinfo(np.int64).max)
#: chunks a ``chunks`` plan shuffles sequences among, unless ``window`` says otherwise
DEFAULT_WINDOW = 16
#: a ``chunks`` plan shuffles runs of this many consecutive chunks: a sequence that runs past its chunk's end then
#: mostly finds the next chunk in its window (with single chunks, nearly every chunk is decoded twice an epoch)
CHUNK_RUN = 4
#: bytes a reader fetches per read from a sharded folder (whole chunks); from a file, one chunk
FOLDER_READ_BYTES = 1 << 20
#: bytes of rows, and of sequences (16 bytes each: a length and a cumulative one), a reader's buffers hold at least:
#: batches smaller than that are gathered several in one compiled call (each call's dispatch from Python costs
#: about what copying a few thousand tokens does)
GATHER_GROUP_BYTES = 1 << 18
#: bytes a plan and its report take per source sequence at their peak, by mode (traced at their worst, one sequence
#: a batch with clipped lengths: up to 138 for every mode's planning or its report, up to 162 for planning
#: ``buckets``; with a margin); a source of more sequences than the memory limit allows is refused
PLAN_BYTES_PER_SEQUENCE = {**dict.fromkeys(MODES, 144), "buckets": 176}
#: forks this process has gone through (``_FORKS[0]``, counted in the child): a reader's open file belongs to the
#: process that opened it
_FORKS = [0]
os.register_at_fork(after_in_child=lambda: _FORKS.__setitem__(0, _FORKS[0] + 1))
#: no mask, no positions (outputs without them), no clipped lengths (a plan that clips none)
_NO_MASK = np.zeros((0, 0), np.bool_)
_NO_POSITIONS = _NO_LENGTHS = np.zeros(0, np.int64)


# -- the source: a container or sharded folder, a stored tensor, or lengths ----------------------------
def _open_container(path, max_memory: int | None = None, token_dtype=None, eos_token_id: int | None = None):
    """A container file, a sharded folder (one logical tensor, read through its manifest) or a token dataset
    (``token_dtype``, ``eos_token_id``: what it cannot say itself, see :func:`lodtool.open`)."""
    from ._open import open as open_path

    return open_path(path, max_memory=max_memory, token_dtype=token_dtype, eos_token_id=eos_token_id)


class _OffsetsInMemory:
    """The planner's view of a stored tensor (``num_sequences``, ``read_offsets``), over offsets already read."""

    def __init__(self, offsets: list[np.ndarray]):
        self._offsets = offsets
        self.lod_level = len(offsets)

    def num_sequences(self, level: int = 0) -> int:
        return int(self._offsets[level].shape[0] - 1)

    def read_offsets(self, level: int, start: int = 0, stop: int | None = None) -> np.ndarray:
        return self._offsets[level][start:stop]


def _level_of(tensor, level: int, where: str) -> int:
    """``level`` as a position among the tensor's levels; a tensor without levels has no sequences to batch."""
    if tensor.lod_level == 0:
        raise LodInputError(f"{where}: the tensor has no LoD levels, so no sequences to batch")
    try:
        return level_position(level, tensor.lod_level)
    except LodIndexError as exc:
        raise LodIndexError(f"{where}: {exc}") from None


def sequence_rows(tensor, level: int = 0, where: str = "source") -> np.ndarray:
    """Row offsets of each sequence of ``level`` (``n + 1`` int64 values), from validated offsets only.

    ``where`` (the file's path) starts every error message.

    >>> import os, tempfile, numpy as np
    >>> from lodtool import LoDTensor
    >>> from lodtool.container.reader import open_file
    >>> from lodtool.container.writer import save
    >>> p = os.path.join(tempfile.mkdtemp(), "a.lod.h5")
    >>> save(p, LoDTensor(np.arange(7), recursive_sequence_lengths=[[2, 1], [2, 2, 3]]))
    >>> with open_file(p) as f:
    ...     sequence_rows(f.tensor(), 0).tolist(), sequence_rows(f.tensor(), 1).tolist()
    ([0, 4, 7], [0, 2, 4, 7])
    """
    level = _level_of(tensor, level, where)
    offsets = [tensor.read_offsets(k) for k in range(tensor.lod_level)]
    problems = find_lod_problems(offsets, tensor.n_rows, max_problems=1)
    if problems:  # untrusted offsets never index anything
        raise LodValidationError(f"{where}: {problems[0]}")
    count = max(int(offsets[level].shape[0]) - 1, 0)
    if count == 0:
        return np.zeros(1, dtype=np.int64)
    # the container's planner maps a level's offsets down to the data rows (one window: all in memory)
    rows = next(row_offset_windows(_OffsetsInMemory(offsets), level, count))
    return np.ascontiguousarray(rows, dtype=np.int64)


def stored_chunk_rows(tensor) -> int:
    """Rows per stored chunk of ``tensor``'s data: the file's own chunking, else what lodtool's writer would use.

    >>> import numpy as np
    >>> from lodtool import LoDTensor
    >>> stored_chunk_rows(LoDTensor(np.zeros(5, np.int32), [[0, 5]]))
    16384
    """
    rows = getattr(tensor, "chunk_rows", None)
    if rows:
        return int(rows)
    return chunk_rows(max(tensor.row_bytes, 1))


def lengths_digest(lengths: np.ndarray) -> str:
    """The fingerprint a plan keeps of its source: ``xxh3_64`` of the sequences' lengths (int64, unclipped).

    >>> lengths_digest(np.array([3, 1])) == lengths_digest(np.array([3, 1])) != lengths_digest(np.array([1, 3]))
    True
    """
    hasher = checksum.new_hasher()
    checksum.update(hasher, np.asarray(lengths, dtype=np.int64))
    return checksum.format_digest(hasher)


def _plan_bytes(count: int, mode: str) -> int:
    """Bytes the plan of ``count`` sequences in ``mode`` (and its report) takes at its peak."""
    return count * PLAN_BYTES_PER_SEQUENCE[mode]


def _check_plan_memory(count: int, mode: str, limit: int, where: str) -> None:
    check_memory(_plan_bytes(count, mode), limit, where, f"the batch plan of {count:,} sequences")


def _source_lengths(source, level: int, tensor: str | None, max_memory: int | None, reading: dict,
                    mode: str) -> tuple[np.ndarray, dict]:
    """(lengths in rows, a description) of ``source``: a container, sharded folder or token dataset (opened with
    ``reading``; refused when a plan of ``mode`` over it would not fit the memory limit), a lazy tensor or an
    array."""
    if isinstance(source, (str, os.PathLike)):
        where = os.fspath(source)
        with _open_container(source, max_memory, **reading) as f:
            t = f.tensor(tensor)
            _check_plan_memory(t.num_sequences(_level_of(t, level, where)), mode, f.max_memory, where)
            rows = sequence_rows(t, level, where)
            return np.diff(rows), {"source": where, "tensor": t.name, "chunk_rows": stored_chunk_rows(t)}
    if isinstance(source, TensorView):  # a stored tensor, a folder's, or one in memory
        return np.diff(sequence_rows(source, level)), {"tensor": getattr(source, "name", None),
                                                       "chunk_rows": stored_chunk_rows(source)}
    lengths = np.asarray(source)
    if lengths.ndim != 1 or (lengths.size and lengths.dtype.kind not in "iu"):
        raise LodUsageError(f"lengths must be a 1-d integer array, not {lengths.dtype} of shape {lengths.shape}")
    if lengths.size and lengths.dtype == np.uint64 and lengths.max() > np.iinfo(np.int64).max:
        raise LodUsageError(f"length[{int(np.argmax(lengths))}] = {int(lengths.max())} does not fit int64")
    lengths = lengths.astype(np.int64, copy=False)
    if lengths.size and lengths.min() < 0:
        raise LodUsageError(f"length[{int(np.argmin(lengths))}] = {int(lengths.min())} is negative")
    return lengths, {}



# -- the plan ------------------------------------------------------------------------------------------
@dataclass
class BatchPlan:
    """Batches as index arrays into the source's sequences: one flat array plus offsets.

    ``lengths`` holds every source sequence's length in rows (clipped to
    ``max_length`` when the plan truncates); ``padded_lengths`` the padded time
    dimension of each batch (the packed row's capacity in ``pack`` mode);
    ``repeat`` marks batches repeated to give every replica as many batches.

    >>> plan = batch_plan(np.array([3, 1, 2, 2]), max_sequences=2, mode="random", seed=1)
    >>> len(plan), plan.batch_sizes.tolist(), sorted(np.concatenate(list(plan)).tolist())
    (2, [2, 2], [0, 1, 2, 3])
    """

    mode: str
    lengths: np.ndarray
    indices: np.ndarray
    offsets: np.ndarray
    padded_lengths: np.ndarray
    repeat: np.ndarray
    options: dict = field(default_factory=dict)

    # -- access
    def __len__(self) -> int:
        return int(self.offsets.shape[0] - 1)

    def __getstate__(self) -> dict:
        # what a reader learnt of the file it last checked the plan against stays in this process
        return {k: v for k, v in self.__dict__.items() if k != "_checked_against"}

    def batch(self, i: int) -> np.ndarray:
        """Indices of batch ``i``'s sequences (a view into :attr:`indices`)."""
        return self.indices[self.offsets[i]:self.offsets[i + 1]]

    def __iter__(self) -> Iterator[np.ndarray]:
        for i in range(len(self)):
            yield self.batch(i)

    def __repr__(self) -> str:
        return (f"<BatchPlan mode={self.mode!r} batches={len(self)} sequences={self.indices.shape[0]} "
                f"of {self.lengths.shape[0]}>")

    def sequences(self, repeats: bool = False) -> np.ndarray:
        """Indices of the planned sequences, batch after batch; without the repeated batches by default.

        >>> batch_plan(np.array([4, 1, 3]), max_sequences=2, mode="random").sequences().size
        3
        """
        if repeats or not self.repeat.any():
            return self.indices
        keep = np.repeat(~self.repeat, self.batch_sizes)
        return self.indices[keep]

    @property
    def n_sequences(self) -> int:
        """Sequences of the source the plan was made for."""
        return int(self.lengths.shape[0])

    @property
    def batch_sizes(self) -> np.ndarray:
        """Sequences per batch."""
        return np.diff(self.offsets)

    @functools.cached_property
    def batch_tokens(self) -> np.ndarray:
        """Real (unpadded) rows per batch (computed once: every reader of the plan sizes its buffers by it)."""
        tokens = segment_sums(self.lengths[self.indices], self.offsets)
        tokens.flags.writeable = False
        return tokens

    @property
    def padded_shapes(self) -> np.ndarray:
        """``(batches, 2)``: each batch's padded ``(sequences, length)`` (``(1, max_tokens)`` when packed)."""
        if self.mode == "pack":
            return np.stack([np.ones(len(self), np.int64), self.padded_lengths], axis=1)
        return np.stack([self.batch_sizes, self.padded_lengths], axis=1)

    @property
    def padded_tokens(self) -> np.ndarray:
        """Rows each batch takes once padded."""
        shapes = self.padded_shapes
        return shapes[:, 0] * shapes[:, 1]

    def cu_seqlens(self, i: int) -> np.ndarray:
        """Cumulative lengths (int32, starting at 0) of batch ``i``'s sequences, for variable-length attention.

        >>> plan = batch_plan(np.array([3, 5, 2]), max_tokens=8, mode="pack")
        >>> [plan.cu_seqlens(i).tolist() for i in range(len(plan))]
        [[0, 5, 8], [0, 2]]
        """
        return np.concatenate([[0], np.cumsum(self.lengths[self.batch(i)])]).astype(np.int32)

    def position_ids(self, i: int) -> np.ndarray:
        """Position of each row of batch ``i`` within its own sequence (restarts at 0 per sequence).

        >>> batch_plan(np.array([3, 2]), max_tokens=8, mode="pack").position_ids(0).tolist()
        [0, 1, 2, 0, 1]
        """
        lens = self.lengths[self.batch(i)]
        return _ramp(lens, int(lens.sum()))

    # -- figures
    def stats(self) -> dict:
        """Batches, tokens per batch, padding waste and fill rate of the plan (repeats included).

        ``padding_waste = 1 - tokens / padded_tokens``; ``fill_rate`` is its complement; ``empty``
        counts the planned sequences of no rows.

        >>> s = batch_plan(np.array([4, 4, 2, 2]), max_sequences=2, mode="sorted").stats()
        >>> s["batches"], s["tokens"], s["padded_tokens"], s["padding_waste"]
        (2, 12, 12, 0.0)
        """
        tokens = self.batch_tokens
        padded = self.padded_tokens
        sizes = self.batch_sizes
        total, total_padded = int(tokens.sum()), int(padded.sum())
        fill = total / total_padded if total_padded else 1.0

        def summary(a):
            return {"mean": float(a.mean()) if a.size else 0.0, "min": int(a.min()) if a.size else 0,
                    "max": int(a.max()) if a.size else 0}

        return {
            "mode": self.mode, "batches": len(self), "sequences": int(sizes.sum()), "tokens": total,
            "padded_tokens": total_padded, "padding_waste": 1.0 - fill, "fill_rate": fill,
            "tokens_per_batch": summary(tokens), "padded_tokens_per_batch": summary(padded),
            "sequences_per_batch": summary(sizes), "repeats": int(self.repeat.sum()),
            "skipped": int(self.options.get("skipped", 0)),
            "empty": int(np.count_nonzero(self.lengths[self.indices] == 0)),
        }

    def histogram(self, bins: int | np.ndarray = 12) -> tuple[np.ndarray, np.ndarray]:
        """(counts, edges) of the planned sequences' lengths, on log2-spaced edges by default.

        >>> counts, edges = batch_plan(np.array([1, 2, 3, 8]), max_tokens=8).histogram(3)
        >>> counts.tolist(), edges.tolist()
        ([1, 2, 1], [1, 2, 4, 9])
        """
        lens = self.lengths[self.indices]
        if isinstance(bins, (int, np.integer)):
            bins = length_bins(lens, int(bins))
        return np.histogram(lens, bins=bins)[0], np.asarray(bins)

    def random_baseline(self) -> BatchPlan:
        """A ``random`` plan of the same sequences at the same mean batch size (its tokens per batch match).

        >>> plan = batch_plan(np.arange(1, 101), max_tokens=400, mode="sorted")
        >>> base = plan.random_baseline()
        >>> base.mode, base.stats()["padding_waste"] > plan.stats()["padding_waste"]
        ('random', True)
        """
        size = max(1, round(self.indices.shape[0] / max(len(self), 1)))
        keep = {k: self.options[k] for k in ("seed", "epoch", "max_length") if k in self.options}
        base = batch_plan(self.lengths, max_sequences=size, mode="random", **keep)
        # the same source: its level, tensor and fingerprint (not the clipped lengths')
        base.options.update({k: self.options[k] for k in ("level", "source", "tensor", "source_digest")
                             if k in self.options})
        return base

    # -- files
    def save(self, path, *, overwrite: bool = False) -> None:
        """Write the plan as an ``.npz`` (atomically: the target is complete or untouched).

        A file already at ``path`` is replaced only with ``overwrite=True``.
        """
        from ..atomic import atomic_open

        where = os.fspath(path)
        if os.path.lexists(where) and not overwrite:
            raise LodExistsError(f"{where}: exists; pass overwrite=True to replace it")
        meta = {"version": PLAN_VERSION, "mode": self.mode, "options": self.options}
        with atomic_open(where) as f:
            np.savez(f, meta=np.array(json.dumps(meta)), **{k: getattr(self, k) for k in PLAN_ARRAYS})

    @classmethod
    def load(cls, path, *, max_memory: int | None = None) -> BatchPlan:
        """Read a plan written by :meth:`save`, checking every array (a bad file is a :class:`LodFormatError`).

        Each array's size is read from its header and checked against
        ``max_memory`` (the default limit when ``None``) before anything is
        allocated.

        >>> import os, tempfile
        >>> p = os.path.join(tempfile.mkdtemp(), "plan.npz")
        >>> plan = batch_plan(np.array([3, 1, 2]), max_tokens=4)
        >>> plan.save(p)
        >>> BatchPlan.load(p).indices.tolist() == plan.indices.tolist()
        True
        """
        where = os.fspath(path)
        arrays = _read_plan_file(where, resolve_max_memory(max_memory))
        try:
            meta = json.loads(str(arrays.pop("meta")))
            version, mode, options = meta["version"], meta["mode"], meta["options"]
        except (ValueError, KeyError, TypeError, RecursionError):
            raise LodFormatError(f"{where}: not a batch plan (no readable metadata)") from None
        if version != PLAN_VERSION:
            raise LodFormatError(f"{where}: batch plan version {version!r}; this lodtool reads {PLAN_VERSION}")
        if mode not in MODES or not isinstance(options, dict):
            raise LodFormatError(f"{where}: batch plan of unknown mode {mode!r}")
        plan = cls(mode, *(arrays[k] for k in PLAN_ARRAYS), options=options)
        problem = _options_problem(options) or plan._problem()
        if problem:
            raise LodFormatError(f"{where}: damaged batch plan: {problem}")
        return plan

    @functools.cached_property
    def _checked(self) -> str | None:
        """:meth:`_problem`, found once per plan (a reader made for every epoch of the same plan checks it once;
        the gather itself never reads or writes past its arrays, whatever the plan holds)."""
        return self._problem()

    def _problem(self) -> str | None:
        for name in PLAN_ARRAYS[:-1]:
            a = getattr(self, name)
            if a.ndim != 1 or a.dtype != np.int64:
                return f"{name} must be 1-d int64, not {a.dtype} of shape {a.shape}"
        if self.repeat.ndim != 1 or self.repeat.dtype != np.bool_:
            return "repeat must be a 1-d boolean array"
        n_batches = self.offsets.shape[0] - 1
        if n_batches < 0 or self.offsets[0] != 0 or self.offsets[-1] != self.indices.shape[0]:
            return "offsets must run from 0 to the number of indices"
        if np.any(np.diff(self.offsets) < 0):
            return "offsets decrease"
        if self.padded_lengths.shape[0] != n_batches or self.repeat.shape[0] != n_batches:
            return "one padded length and one repeat flag per batch are needed"
        if self.indices.size and (self.indices.min() < 0 or self.indices.max() >= self.lengths.shape[0]):
            return "an index is outside the source's sequences"
        if self.lengths.size and self.lengths.min() < 0:
            return "a length is negative"
        if self.padded_lengths.size and self.padded_lengths.min() < 0:
            return "a padded length is negative"
        # every sum and padded size the plan and its reader compute must fit int64
        top = INT64_MAX
        if self.lengths.size and int(self.lengths.max()) > top // max(self.indices.shape[0], 1):
            return f"a length of {int(self.lengths.max()):,} rows is too large to batch"
        if n_batches and int(self.padded_lengths.max()) > top // max(int(self.batch_sizes.max()), 1):
            return f"a padded length of {int(self.padded_lengths.max()):,} rows is too large to batch"
        if self.indices.size and self.mode != "pack":
            if first_short_batch(self.lengths, self.indices, self.offsets, self.padded_lengths) >= 0:
                return "a batch is padded shorter than its longest sequence"
        return None


def _read_plan_file(where: str, limit: int) -> dict[str, np.ndarray]:
    """The arrays of a saved plan; each array's header is read, and its size checked, before it is."""
    names = ("meta", *PLAN_ARRAYS)
    try:
        with zipfile.ZipFile(where) as z:
            total = 0
            for name in names:
                with z.open(name + ".npy") as member:
                    version = np.lib.format.read_magic(member)
                    header = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                        np.lib.format.read_array_header_2_0
                    shape, _, dtype = header(member)
                if dtype.hasobject:
                    raise LodFormatError(f"{where}: {name} holds Python objects; a batch plan never does")
                total += math.prod(shape) * dtype.itemsize
            check_memory(total, limit, where, "the batch plan")
            arrays = {}
            for name in names:
                with z.open(name + ".npy") as member:
                    arrays[name] = np.lib.format.read_array(member, allow_pickle=False)
            return arrays
    except FileNotFoundError:
        raise LodFileNotFoundError(f"{where}: no such file") from None
    except LodFormatError:
        raise
    except (OSError, ValueError, KeyError, EOFError, RecursionError, zipfile.BadZipFile, zlib.error, lzma.LZMAError,
            NotImplementedError, RuntimeError, SyntaxError, tokenize.TokenError):
        # a damaged zip or .npy header, or a compression or encryption that zipfile refuses
        raise LodFormatError(f"{where}: not a batch plan (an .npz that lodtool batch wrote)") from None


def _is_int(value, low: int) -> bool:
    """Whether ``value`` is an integer (not a bool) from ``low`` to :data:`INT64_MAX`."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool) and low <= value <= INT64_MAX


#: the options a saved plan may hold, each with the check its value must pass
_OPTION_CHECKS = {
    "level": lambda v: _is_int(v, -INT64_MAX), "seed": lambda v: _is_int(v, 0), "epoch": lambda v: _is_int(v, 0),
    "num_replicas": lambda v: _is_int(v, 1), "rank": lambda v: _is_int(v, 0), "multiple_of": lambda v: _is_int(v, 1),
    "skipped": lambda v: _is_int(v, 0), "window": lambda v: _is_int(v, 1), "chunk_rows": lambda v: _is_int(v, 1),
    **{k: (lambda v: v is None or _is_int(v, 1)) for k in ("max_tokens", "max_sequences", "max_length",
                                                           "megabatch_mult")},
    **{k: (lambda v: isinstance(v, bool)) for k in ("drop_last", "shuffle", "pad_to_bucket_boundary")},
    **{k: (lambda v: v is None or isinstance(v, str)) for k in ("source", "tensor", "source_digest")},
    **{k: (lambda v: v is None or (isinstance(v, list) and all(_is_int(b, 1) for b in v)))
       for k in ("boundaries", "bucket_batch_sizes")},
}


def _options_problem(options: dict) -> str | None:
    for key, value in options.items():
        check = _OPTION_CHECKS.get(key)
        if check is None:
            return f"unknown option {str(key)[:40]!r}"
        if not check(value):
            return f"option {key} has a value of the wrong type or range ({type(value).__name__})"
    return None


def length_bins(lengths: np.ndarray, bins: int = 12) -> np.ndarray:
    """Log2-spaced histogram edges (integers, deduplicated) covering ``lengths``.

    >>> length_bins(np.array([1, 100]), 4).tolist()
    [1, 3, 10, 32, 101]
    """
    lo = max(int(lengths.min()) if lengths.size else 1, 1)
    hi = max(int(lengths.max()) if lengths.size else 1, lo) + 1
    edges = np.unique(np.round(np.geomspace(lo, hi, bins + 1)).astype(np.int64))
    if lengths.size and lengths.min() == 0:
        edges = np.concatenate([[0], edges])
    return edges


# -- planning ------------------------------------------------------------------------------------------
def _check_int(name: str, value, low: int, optional: bool = False) -> None:
    if optional and value is None:
        return
    if not _is_int(value, low):
        kind = "a positive" if low > 0 else "a non-negative" if low == 0 else "an"
        raise LodUsageError(f"{name}=... must be {kind} integer (at most {INT64_MAX:,}), not {value!r}")


def _check_usage(mode, max_tokens, max_sequences, multiple_of, boundaries, bucket_batch_sizes, num_replicas,
                 rank, max_length, oversize, seed, epoch, megabatch_mult, level) -> None:
    if mode not in MODES:
        raise LodUsageError(f"mode {mode!r} is not one of {', '.join(MODES)}")
    for name, value in (("max_tokens", max_tokens), ("max_sequences", max_sequences), ("max_length", max_length),
                        ("megabatch_mult", megabatch_mult)):
        _check_int(name, value, 1, optional=True)
    for name, value, low in (("multiple_of", multiple_of, 1), ("num_replicas", num_replicas, 1),
                             ("seed", seed, 0), ("epoch", epoch, 0), ("level", level, -INT64_MAX)):
        _check_int(name, value, low)
    for name, values in (("boundaries", boundaries), ("bucket_batch_sizes", bucket_batch_sizes)):
        if values is not None:
            if not isinstance(values, (list, tuple, np.ndarray)):
                raise LodUsageError(f"{name}=... must be a list of integers")
            for value in values:
                _check_int(name, value, 1)
    if max_sequences is not None and max_sequences % multiple_of:
        raise LodUsageError(f"max_sequences={max_sequences} is not a multiple of multiple_of={multiple_of}")
    if not isinstance(rank, (int, np.integer)) or not 0 <= rank < num_replicas:
        raise LodUsageError(f"rank=... must be in 0..{num_replicas - 1}, not {rank!r}")
    if oversize not in ("error", "skip"):
        raise LodUsageError(f"oversize=... must be 'error' or 'skip', not {oversize!r}")
    if mode == "pack":
        if max_tokens is None:
            raise LodUsageError("mode 'pack' needs max_tokens=... (the packed row's length)")
        if max_sequences is not None or multiple_of != 1:
            raise LodUsageError("mode 'pack' packs rows by tokens only: max_sequences=... and multiple_of=... do not "
                                "apply")
    elif mode == "buckets":
        if boundaries is None:
            raise LodUsageError("mode 'buckets' needs boundaries=... (increasing lengths that split the buckets)")
        if bucket_batch_sizes is None and max_tokens is None and max_sequences is None:
            raise LodUsageError("mode 'buckets' needs bucket_batch_sizes=..., max_tokens=... or max_sequences=...")
    elif max_tokens is None and max_sequences is None:
        raise LodUsageError(f"mode {mode!r} needs max_tokens=... or max_sequences=...")
    if mode != "buckets" and (boundaries is not None or bucket_batch_sizes is not None):
        raise LodUsageError("boundaries=... and bucket_batch_sizes=... apply to mode 'buckets' only")


def batch_plan(source, level: int = 0, max_tokens: int | None = None, max_sequences: int | None = None,
               mode: str = "sorted", seed: int = 0, epoch: int = 0, num_replicas: int = 1, rank: int = 0,
               multiple_of: int = 1, drop_last: bool = False, *, tensor: str | None = None,
               max_length: int | None = None, oversize: str = "error", megabatch_mult: int | None = None,
               boundaries=None, bucket_batch_sizes=None, pad_to_bucket_boundary: bool = False,
               shuffle: bool = True, window: int | None = None, chunk_rows: int | None = None,
               max_memory: int | None = None, token_dtype=None, eos_token_id: int | None = None) -> BatchPlan:
    """Plan training batches over the sequences of ``level`` (lengths in data rows), from offsets alone.

    ``source`` is a container path, a sharded folder or a token dataset (only
    its offsets are read, and validated; a folder's shards are one logical
    tensor; ``token_dtype`` and ``eos_token_id`` are what a token dataset
    cannot say itself, see :func:`lodtool.open`), a tensor
    (``lodtool.open(p).tensor()``, or a :class:`~lodtool.LoDTensor`), or an
    array of lengths.
    ``tensor`` names the tensor of a container that holds several; a plan of
    more sequences than ``max_memory`` allows (the default limit when ``None``)
    is refused before any offsets are read.  The modes
    are described in the module's docstring; ``max_tokens`` bounds a batch's
    *padded* size (``sequences * longest``) or a packed row, ``max_sequences``
    its sequences, and ``multiple_of`` makes batch sizes multiples (fairseq's
    rule: a batch smaller than ``multiple_of`` is allowed only when a limit
    forces it, and the last batch may be smaller).

    ``max_length`` clips every length (the reader truncates those sequences);
    a sequence longer than ``max_tokens`` is an error, or dropped with
    ``oversize="skip"`` (counted in ``stats()["skipped"]``).
    ``shuffle=False`` (``buckets`` only) keeps the file's order as the stream,
    as tf.data does when no shuffle comes before it.  ``window`` (``chunks``
    only; default :data:`DEFAULT_WINDOW`) is the number of chunks whose
    sequences are shuffled together, ``chunk_rows`` the rows of a stored chunk
    (read from a container; needed with an array of lengths).  ``drop_last`` drops an
    incomplete last batch (with ``max_sequences`` alone: one smaller than it;
    with ``max_tokens``: one that is not a multiple of ``multiple_of``, as
    fairseq's ``batch_by_size`` does; ``buckets``: every bucket's partial batch,
    as tf.data's ``drop_remainder``) and the batches that would make the
    replicas uneven; without it such a batch is kept, and the replicas are
    evened out by repeats.

    The same ``(seed, epoch)`` gives the same plan on every machine.  The plan
    keeps a fingerprint of the source's lengths (``options["source_digest"]``),
    so that it is never read against another source.

    >>> import numpy as np
    >>> lengths = np.array([7, 2, 9, 3, 3, 8, 1, 5])
    >>> plans = [batch_plan(lengths, max_tokens=16, num_replicas=2, rank=r) for r in (0, 1)]
    >>> len(plans[0]) == len(plans[1])
    True
    >>> sorted(np.concatenate([p.sequences() for p in plans]).tolist())
    [0, 1, 2, 3, 4, 5, 6, 7]
    >>> packed = batch_plan(lengths, max_tokens=16, mode="pack")
    >>> len(packed), packed.stats()["tokens"], packed.stats()["padded_tokens"]
    (3, 38, 48)
    """
    _check_usage(mode, max_tokens, max_sequences, multiple_of, boundaries, bucket_batch_sizes, num_replicas,
                 rank, max_length, oversize, seed, epoch, megabatch_mult, level)
    if not shuffle and mode != "buckets":
        raise LodUsageError("shuffle=False applies to mode 'buckets' only (the other modes define their own order)")
    _check_int("window", window, 1, optional=True)
    _check_int("chunk_rows", chunk_rows, 1, optional=True)
    if window is not None and mode != "chunks":
        raise LodUsageError("window=... applies to mode 'chunks' only")
    lengths, about = _source_lengths(source, level, tensor, max_memory,
                                     {"token_dtype": token_dtype, "eos_token_id": eos_token_id}, mode)
    about["source_digest"] = lengths_digest(lengths)
    if chunk_rows is not None:
        about["chunk_rows"] = int(chunk_rows)
    if mode == "chunks" and "chunk_rows" not in about:
        raise LodUsageError("mode 'chunks' needs chunk_rows=... with an array of lengths (a container gives its own)")
    chunk_of = None
    if mode == "chunks":  # the stored chunk each sequence starts in (before any clipping: where its rows are)
        chunk_of = (np.cumsum(lengths) - lengths) // about["chunk_rows"]
    if max_length is not None:
        lengths = np.minimum(lengths, max_length)
    options = {"level": int(level), "max_tokens": max_tokens, "max_sequences": max_sequences, "seed": int(seed),
               "epoch": int(epoch), "num_replicas": int(num_replicas), "rank": int(rank),
               "multiple_of": int(multiple_of), "drop_last": bool(drop_last), "max_length": max_length, **about}

    keep = np.arange(lengths.shape[0], dtype=np.int64)
    if max_tokens is not None and mode != "buckets" and lengths.size and lengths.max() > max_tokens:
        too_long = lengths > max_tokens
        if oversize == "error":
            first = int(np.argmax(too_long))
            raise _oversize_error(about.get("source"), first, int(lengths[first]), int(too_long.sum()), max_tokens)
        keep = keep[~too_long]
        options["skipped"] = int(too_long.sum())

    planner = {"sorted": _plan_sorted, "megabatch": _plan_megabatch, "random": _plan_random,
               "pack": _plan_pack, "buckets": _plan_buckets, "chunks": _plan_chunks}[mode]
    kwargs: dict[str, Any] = {"multiple_of": multiple_of, "drop_last": drop_last}
    if mode == "chunks":
        kwargs.update(chunk_of=chunk_of, window=window or DEFAULT_WINDOW)
        options["window"] = window or DEFAULT_WINDOW
    if mode == "megabatch":
        kwargs["megabatch_mult"] = megabatch_mult
        options["megabatch_mult"] = megabatch_mult
    if mode == "buckets":
        kwargs.update(boundaries=boundaries, bucket_batch_sizes=bucket_batch_sizes,
                      pad_to_bucket_boundary=pad_to_bucket_boundary, shuffle=shuffle)
        options.update(shuffle=bool(shuffle), boundaries=[int(b) for b in boundaries],
                       pad_to_bucket_boundary=bool(pad_to_bucket_boundary),
                       bucket_batch_sizes=None if bucket_batch_sizes is None else [int(b) for b in bucket_batch_sizes])
    order, ends, padded, batch_order = planner(lengths, keep, max_tokens, max_sequences, seed, epoch, **kwargs)

    # one global list of batches, in epoch order; then dealt to the replicas
    n_batches = ends.shape[0]
    starts = np.concatenate([[0], ends[:-1]]).astype(np.int64) if n_batches else ends
    repeat = np.zeros(n_batches, dtype=bool)
    if num_replicas > 1 and n_batches % num_replicas:
        if drop_last:
            batch_order = batch_order[:n_batches - n_batches % num_replicas]
            repeat = repeat[:batch_order.shape[0]]
        else:  # DistributedSampler's rule: repeat from the start until the count divides evenly
            extra = num_replicas - n_batches % num_replicas
            batch_order = np.concatenate([batch_order, np.resize(batch_order, extra)])
            repeat = np.concatenate([repeat, np.ones(extra, bool)])
    if num_replicas > 1:
        batch_order, repeat = batch_order[rank::num_replicas], repeat[rank::num_replicas]
    sizes = (ends - starts)[batch_order]
    offsets = np.zeros(sizes.shape[0] + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    indices = gather_runs(order, starts[batch_order], sizes)
    return BatchPlan(mode, lengths, indices, offsets, np.ascontiguousarray(padded[batch_order], dtype=np.int64),
                     repeat, options)


def _oversize_error(source: str | None, first: int, length: int, count: int, max_tokens: int) -> LodInputError:
    where = f"{source}: " if source is not None else ""
    return LodInputError(f"{where}sequence {first} has {length} rows, more than max_tokens={max_tokens} ({count} "
                         "such); raise max_tokens=..., set max_length=..., or skip them (oversize='skip')")


def _permuted(keep: np.ndarray, n_all: int, rng: np.random.Generator) -> np.ndarray:
    if keep.shape[0] == n_all:  # nothing skipped: keep is 0..n-1
        return rng.permutation(n_all)
    return keep[rng.permutation(keep.shape[0])]


def _incomplete(last: int, max_tokens, max_sequences, multiple_of) -> bool:
    """Whether a last batch of ``last`` sequences is one ``drop_last`` drops."""
    if max_tokens is None:
        return last < max_sequences
    return multiple_of > 1 and last % multiple_of != 0


def _drop_incomplete(ends: np.ndarray, max_tokens, max_sequences, multiple_of, drop_last) -> np.ndarray:
    if not drop_last or not ends.size:
        return ends
    last = int(ends[-1] - (ends[-2] if ends.size > 1 else 0))
    return ends[:-1] if _incomplete(last, max_tokens, max_sequences, multiple_of) else ends


def _cut(ordered_lengths, max_tokens, max_sequences, multiple_of, drop_last, segment_ends=None):
    ends = greedy_batch_ends(ordered_lengths, max_tokens or 0, max_sequences or 0, multiple_of, segment_ends)
    ends = _drop_incomplete(ends, max_tokens, max_sequences, multiple_of, drop_last)
    padded = segment_max(ordered_lengths, np.concatenate([[0], ends]).astype(np.int64))
    return ends, padded


def _plan_sorted(lengths, keep, max_tokens, max_sequences, seed, epoch, *, multiple_of, drop_last):
    # fairseq: the tie-breaking permutation is drawn once from the seed; the batches are shuffled per epoch
    order, ordered = sort_by_length(lengths, keep, seed)
    ends, padded = _cut(ordered, max_tokens, max_sequences, multiple_of, drop_last)
    return order, ends, padded, plan_rng(seed, epoch).permutation(ends.shape[0])


def _plan_random(lengths, keep, max_tokens, max_sequences, seed, epoch, *, multiple_of, drop_last):
    order = _permuted(keep, lengths.shape[0], plan_rng(seed, epoch))
    ends, padded = _cut(lengths[order], max_tokens, max_sequences, multiple_of, drop_last)
    return order, ends, padded, np.arange(ends.shape[0])


def _plan_megabatch(lengths, keep, max_tokens, max_sequences, seed, epoch, *, multiple_of, drop_last,
                    megabatch_mult):
    n = keep.shape[0]
    shuffled = _permuted(keep, lengths.shape[0], plan_rng(seed, epoch))
    if max_sequences is not None:
        batch = max_sequences
    else:  # a token budget only: the batch size it gives sequences of the mean length
        batch = max(1, max_tokens // max(1, math.ceil(float(lengths[keep].mean()) if n else 1)))
    if megabatch_mult is None:
        megabatch_mult = max(min(n // (batch * 4), 50), 1)  # transformers' default
    size = megabatch_mult * batch
    order, seg_ends = megabatch_order(lengths, shuffled, size)
    ends, padded = _cut(lengths[order], max_tokens, max_sequences, multiple_of, drop_last, seg_ends)
    return order, ends, padded, np.arange(ends.shape[0])


def _plan_chunks(lengths, keep, max_tokens, max_sequences, seed, epoch, *, multiple_of, drop_last, chunk_of, window):
    # py1b: the chunks in random order, a window of them at a time; inside a window the sequences in random order,
    # then sorted by length (the padding of sorted), cut, and the window's batches in random order
    rng = plan_rng(seed, epoch)
    run_of = chunk_of[keep] // CHUNK_RUN
    n_runs = int(run_of.max()) + 1 if run_of.size else 0
    place = np.empty(n_runs, np.int64)
    place[rng.permutation(n_runs)] = np.arange(n_runs, dtype=np.int64)
    window_of = place[run_of] // max(window // CHUNK_RUN, 1)
    shuffled = rng.permutation(keep.shape[0])
    by_window = shuffled[np.lexsort((lengths[keep][shuffled], window_of[shuffled]))]  # stable: ties stay shuffled
    order, windows = keep[by_window], window_of[by_window]
    segment_ends = np.flatnonzero(np.diff(windows)) + 1
    segment_ends = np.concatenate([segment_ends, [order.shape[0]]]).astype(np.int64) if order.size else segment_ends
    ends, padded = _cut(lengths[order], max_tokens, max_sequences, multiple_of, drop_last, segment_ends)
    batch_window = windows[ends - 1] if ends.size else ends
    batch_order = np.lexsort((rng.random(ends.shape[0]), batch_window))
    return order, ends, padded, batch_order


def _plan_pack(lengths, keep, max_tokens, max_sequences, seed, epoch, *, multiple_of, drop_last):
    order, ordered = sort_by_length(lengths, keep, seed, descending=True)  # ties in random order
    bin_of, n_bins = first_fit_decreasing(ordered, max_tokens)
    order = order[counting_argsort(bin_of, n_bins)]
    ends = np.cumsum(np.bincount(bin_of, minlength=n_bins)).astype(np.int64)
    padded = np.full(ends.shape[0], max_tokens, dtype=np.int64)
    return order, ends, padded, plan_rng(seed, epoch).permutation(ends.shape[0])


def _bucket_bounds(boundaries) -> np.ndarray:
    bounds = np.array(boundaries, dtype=np.int64).reshape(-1)
    if not bounds.size or np.any(np.diff(bounds) <= 0):
        raise LodUsageError(f"boundaries=... must be increasing positive lengths, not {list(boundaries)!r}")
    return bounds


def _bucket_sizes(bounds: np.ndarray, count: int, longest: int, max_tokens, max_sequences, multiple_of,
                  bucket_batch_sizes, pad_to_bucket_boundary) -> np.ndarray:
    """Each bucket's batch size, for ``count`` sequences whose longest has ``longest`` rows: ``bucket_batch_sizes``,
    or the token budget over the bucket's longest possible sequence, within ``max_sequences``, in multiples of
    ``multiple_of``; refuses a sequence past the last boundary with ``pad_to_bucket_boundary``."""
    n_buckets = bounds.shape[0] + 1
    if pad_to_bucket_boundary and count and longest >= bounds[-1]:
        raise LodInputError(f"pad_to_bucket_boundary=True needs every length below the last boundary "
                            f"({int(bounds[-1])}); a sequence has {longest} rows")
    if bucket_batch_sizes is not None:
        sizes = np.array(bucket_batch_sizes, dtype=np.int64).reshape(-1)
        if sizes.shape != (n_buckets,):
            raise LodUsageError(f"bucket_batch_sizes=... needs {n_buckets} sizes (one more than the boundaries)")
        return sizes
    # the token budget over each bucket's longest possible sequence
    top = np.concatenate([bounds - 1, [max(longest if count else 1, int(bounds[-1]))]])
    sizes = np.full(n_buckets, np.iinfo(np.int64).max, dtype=np.int64)
    if max_tokens is not None:
        sizes = np.maximum(max_tokens // np.maximum(top, 1), 1)
    if max_sequences is not None:
        sizes = np.minimum(sizes, max_sequences)
    if multiple_of > 1:
        sizes = np.maximum(sizes // multiple_of * multiple_of, np.minimum(sizes, multiple_of))
    return sizes


def _plan_buckets(lengths, keep, max_tokens, max_sequences, seed, epoch, *, multiple_of, drop_last, boundaries,
                  bucket_batch_sizes, pad_to_bucket_boundary, shuffle):
    bounds = _bucket_bounds(boundaries)
    n_buckets = bounds.shape[0] + 1
    stream = _permuted(keep, lengths.shape[0], plan_rng(seed, epoch)) if shuffle else keep
    lens = lengths[stream]
    bucket = np.searchsorted(bounds, lens, side="right")
    sizes = _bucket_sizes(bounds, lens.shape[0], int(lens.max(initial=0)), max_tokens, max_sequences, multiple_of,
                          bucket_batch_sizes, pad_to_bucket_boundary)
    n = stream.shape[0]
    by_bucket = counting_argsort(bucket, n_buckets)  # stream positions, grouped by bucket, in stream order
    counts = np.bincount(bucket, minlength=n_buckets)
    first = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    # the batches of each bucket, in (bucket, k) order: their starts, sizes and the stream position that fills them
    per_bucket = -(-counts // sizes)
    batch_bucket = np.repeat(np.arange(n_buckets), per_bucket)
    k = _ramp(per_bucket, int(per_bucket.sum()))
    b_start = first[batch_bucket] + k * sizes[batch_bucket]
    b_size = np.minimum(sizes[batch_bucket], first[batch_bucket] + counts[batch_bucket] - b_start)
    full = b_size == sizes[batch_bucket]
    # a full batch is emitted when its last element arrives; the partial ones at the end, by bucket
    close = np.where(full, by_bucket[np.maximum(b_start + b_size - 1, 0)], n + batch_bucket) if b_start.size \
        else b_start
    if drop_last:
        b_start, b_size, batch_bucket, close = b_start[full], b_size[full], batch_bucket[full], close[full]
    emit = np.argsort(close, kind="stable")
    positions = gather_runs(by_bucket, b_start[emit], b_size[emit])
    order = stream[positions]
    ends = np.cumsum(b_size[emit]).astype(np.int64)
    if pad_to_bucket_boundary:
        padded = (bounds - 1)[batch_bucket[emit]] if ends.size else np.zeros(0, np.int64)
    else:
        padded = segment_max(lengths[order], np.concatenate([[0], ends]).astype(np.int64))
    return order, ends, padded, np.arange(ends.shape[0])


def as_plan(plan=None, source=None, *, tensor: str | None = None, max_memory: int | None = None, token_dtype=None,
            eos_token_id: int | None = None, **plan_options) -> BatchPlan:
    """A :class:`BatchPlan`: ``plan`` itself, the saved plan at path ``plan``, or one made from the options.

    Without a plan, :func:`batch_plan` plans ``source`` (its ``tensor``) with
    ``plan_options``; a plan given with options is refused.  ``max_memory``
    bounds what a saved plan's arrays, or the planning, may take; ``token_dtype``
    and ``eos_token_id`` read a token dataset ``source`` (they are no plan options).

    >>> as_plan(None, np.array([2, 3]), max_sequences=1).batch_sizes.tolist()
    [1, 1]
    """
    if plan is not None and plan_options:
        raise LodUsageError(f"give a plan or plan options, not both ({', '.join(sorted(plan_options))})")
    if isinstance(plan, BatchPlan):
        return plan
    if plan is not None:
        return BatchPlan.load(plan, max_memory=max_memory)
    return batch_plan(source, tensor=tensor, max_memory=max_memory, token_dtype=token_dtype,
                      eos_token_id=eos_token_id, **plan_options)


# -- reading batches -----------------------------------------------------------------------------------
class _MappedChunks:
    """A memory-mapped tensor's chunks as :func:`~lodtool.ops.batching.gather_batch` reads them, straight from the
    map: a chunk's checksum is checked (through the tensor's own read) the first time a batch touches it."""

    def __init__(self, tensor, mapped, table: tuple):
        self.tensor = tensor
        self.words, self.table, self.chunk_rows = table
        self.check_unchanged = mapped.check_unchanged
        self._mapped = mapped

    def pending(self) -> bool:
        """Whether a chunk's checksum is still unchecked."""
        return self._mapped.unchecked > 0

    def prepare(self, chunks: np.ndarray) -> None:
        cr, n = self.chunk_rows, self.tensor.n_rows
        for c in chunks[self.table[chunks] < 0].tolist():
            self.tensor.read_rows(c * cr, min((c + 1) * cr, n))  # checks the chunk, or libhdf5 refuses it


def _chunks_of(tensor, budget_bytes: int, limit: int, where: str):
    """Where a reader gathers ``tensor``'s rows from: its memory map where it has one, else its file's cache of
    decoded chunks (a folder's: a cache of the reader's own, of whole chunks, about FOLDER_READ_BYTES a read)."""
    if isinstance(tensor, LazyTensor):
        mapped = tensor.mapped_rows()
        if mapped is not None:
            return _MappedChunks(tensor, mapped, mapped.chunk_table())
        return tensor.decoded_chunks(budget_bytes)
    row_bytes = max(tensor.row_bytes, 1)
    block = chunk_rows(row_bytes)
    block *= max(FOLDER_READ_BYTES // (block * row_bytes), 1)
    return DecodedChunks(tensor.read_rows, tensor.n_rows, tensor.dtype, tensor.element_shape, block, budget_bytes,
                         limit, where)


def _touched_scratch(sequences: int, rows: int, chunk_rows: int) -> np.ndarray:
    """Room for every chunk one gather of ``sequences`` sequences and ``rows`` rows touches, at most: the chunks
    of its rows, and two more a sequence (where one starts and ends inside a chunk)."""
    return np.empty(2 * sequences + rows // chunk_rows + 2, np.int64)


def _gather_ready(chunks, touched: np.ndarray, gather) -> int:
    """``gather(check)``, a call of the compiled gather, again after preparing (checking or decoding) the chunks it
    lists missing in ``touched``, until it gathers (or refuses) its batches; what it returned last."""
    chunks.check_unchanged()
    while True:
        got = gather(chunks.pending())
        if got >= 0 or got == GATHER_MISMATCH:
            return got
        chunks.prepare(np.unique(touched[:-got]))


class SequenceGather:
    """Sequences of a stored tensor gathered into a new array in one compiled pass a call (the items of a map-style
    dataset's batch): from the file's memory map where it has one, else through a cache of decoded chunks of
    ``cache_bytes``.  ``rows`` are the sequences' row offsets (:func:`sequence_rows`).

    >>> import os, tempfile, lodtool
    >>> p = os.path.join(tempfile.mkdtemp(), "c.lod.h5")
    >>> lodtool.save(p, lodtool.LoDTensor(np.arange(1, 8), recursive_sequence_lengths=[[3, 1, 3]]))
    >>> with lodtool.open(p) as f:
    ...     t = f.tensor()
    ...     values, offsets = SequenceGather(t, sequence_rows(t), p).read(np.array([2, 0]))
    >>> values.tolist(), offsets.tolist()
    ([5, 6, 7, 1, 2, 3], [0, 3, 6])
    """

    def __init__(self, tensor, rows: np.ndarray, where: str, cache_bytes: int = DECODED_CACHE_BYTES,
                 max_memory: int | None = None):
        self.where, self.name, self.rows = where, tensor.name, rows
        self.chunks = _chunks_of(tensor, cache_bytes, resolve_max_memory(max_memory), where)
        self.dtype, self.element_shape = tensor.dtype, tensor.element_shape
        self.word = self.chunks.words.dtype.itemsize
        self.row_words = tensor.dtype.itemsize // self.word * math.prod(tensor.element_shape)

    def read(self, seqs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(values, offsets)``: the rows of sequences ``seqs`` (int64, each one of ``rows``') one after another
        in a new array, and where each starts there (int64, from 0, one more than ``seqs``)."""
        rows, chunks = self.rows, self.chunks
        n = seqs.shape[0]
        total = int((rows[seqs + 1] - rows[seqs]).sum())
        values = np.empty((total,) + self.element_shape, self.dtype)
        words, lengths, cu = words_of(values, self.word), np.empty(n, np.int64), np.empty(n + 1, np.int64)
        touched = _touched_scratch(n, total, chunks.chunk_rows)
        got = _gather_ready(chunks, touched, lambda check: gather_batch(
            chunks.words, chunks.table, self.word, chunks.chunk_rows, self.row_words, seqs, rows, _NO_LENGTHS, False,
            0, words, lengths, cu, _NO_POSITIONS, _NO_MASK.reshape(-1), touched, check))
        if got == GATHER_MISMATCH:  # only where the offsets are not the tensor's
            raise LodInputError(f"{self.where}: sequences {seqs.tolist()} of tensor {self.name!r} are not in its rows")
        return values, cu


@dataclass(eq=False)
class _OpenSource:
    """A reader's open container: the tensor, the row offsets of its sequences, the plan's lengths where it
    clips them (else empty), whether the head is dropped, the pad value in the tensor's dtype, where rows are
    gathered from, each batch's padded width (empty unless padded), tokens, rows in the output and sequences, the
    scratch of the chunks a batch touches and of the longest sequences, a row's shape, items and words, the rows
    and sequences the reused buffers hold, and the output buffers (reused from batch to batch, each sized once
    for the plan's largest batch, or several batches where they are small: :data:`GATHER_GROUP_BYTES`)."""

    file: Any
    tensor: Any
    rows: np.ndarray
    clipped: np.ndarray
    head: bool
    pad: np.ndarray
    chunks: Any
    capacity: dict[str, int]
    widths: np.ndarray
    tokens: np.ndarray
    batch_rows: np.ndarray
    batch_sizes: np.ndarray
    touched: np.ndarray
    longest: np.ndarray
    element_shape: tuple
    items: int
    row_words: int
    gather: Any
    shifts: tuple
    room: tuple[int, int]
    buffers: dict[str, np.ndarray] = field(default_factory=dict)
    forks: int = field(default_factory=lambda: _FORKS[0])


def _check_plan_fits(plan: BatchPlan, full: np.ndarray, where: str, name: str) -> None:
    """Refuse a plan made for another source: the sequence count, the lengths and the fingerprint must agree.

    A plan saved without a fingerprint (before lodtool kept one) is read when its lengths are the source's.
    """
    level = plan.options.get("level", 0)
    if full.shape[0] != plan.n_sequences:
        raise LodInputError(f"{where}: the plan is for {plan.n_sequences:,} sequences; tensor {name!r} has "
                            f"{full.shape[0]:,} at level {level}")
    max_length = plan.options.get("max_length")
    digest = plan.options.get("source_digest")
    # unclipped lengths that are the source's own say all the fingerprint says
    if not np.array_equal(plan.lengths, full if max_length is None else np.minimum(full, max_length)) or \
            (max_length is not None and digest is not None and digest != lengths_digest(full)):
        raise LodInputError(f"{where}: the plan was made for another source: the lengths of tensor {name!r}'s "
                            f"sequences at level {level} are not the ones it was planned from")


def _padded_widths(plan: BatchPlan) -> np.ndarray:
    """Rows of each padded batch: its padded length (a packed row's capacity: its longest sequence)."""
    return segment_max(plan.lengths[plan.indices], plan.offsets) if plan.mode == "pack" else plan.padded_lengths


def _buffer_capacity(plan: BatchPlan, output: str, element_shape: tuple, batch_rows: np.ndarray,
                     room_rows: int = 0, room_sequences: int = 0) -> dict[str, int]:
    """Elements of each output buffer for the plan's largest batch (Python integers: a damaged size never wraps),
    from each batch's rows in the output ``batch_rows`` (padded or not), or for ``room_rows`` rows and
    ``room_sequences`` sequences where those are more."""
    sizes = plan.batch_sizes
    if not sizes.size:
        return {}
    max_b = max(int(sizes.max()), room_sequences)
    rows = max(int(batch_rows.max()), room_rows)  # within int64: the plan was checked
    return {"values": math.prod(element_shape) * rows, "mask": rows if output == "padded" else 0, "lengths": max_b,
            "offsets": max_b + 1, "cu_seqlens": max_b + 1, "position_ids": rows if output == "varlen" else 0}


def _buffer_bytes(capacity: dict[str, int], itemsize: int) -> int:
    return itemsize * capacity.get("values", 0) + capacity.get("mask", 0) + 4 * capacity.get("cu_seqlens", 0) + \
        8 * sum(capacity.get(k, 0) for k in ("lengths", "offsets", "position_ids"))


class BatchReader:
    """Reads a plan's batches from a container into buffers it reuses; opens the file on first use.

    The offsets are read (and validated) once, and checked against the plan
    (a plan made for another source is refused).  Batches are gathered by a
    compiled pass (:func:`~lodtool.ops.batching.gather_batches`) into output
    buffers sized once for the plan's largest batch (their size is checked
    against the memory limit first), or for several batches where they are
    small (:data:`GATHER_GROUP_BYTES`, within the limit): then one pass gathers
    as many as the buffers hold.  **A batch is valid until the next one is
    read**; copy what you keep.  Data stored without compression is gathered
    straight from the file's memory map (each fletcher32 chunk checked the first
    time the process reads it); compressed data is read in whole HDF5 chunks,
    only those that hold a batch's sequences, consecutive ones in one read, and
    kept in a cache of decoded chunks of ``cache_bytes`` (a corpus that fits is
    read from disk once).

    ``output``: ``"padded"`` (``values [B, T, ...]``, ``mask [B, T]``,
    ``lengths``), ``"jagged-numpy"`` (flat ``values`` and int64 ``offsets``) or
    ``"varlen"`` (flat ``values``, int32 ``cu_seqlens``, ``position_ids``,
    ``max_seqlen``).  Every batch also has ``indices`` (the source sequences),
    ``batch`` (its number in the plan) and ``repeat``.  Sequences the plan
    clipped to ``max_length`` are truncated: ``truncate="tail"`` (the default)
    drops their end, ``"head"`` their start.  An empty sequence is a row of
    padding (``mask`` all false) or a zero-length segment.

    ``reuse_buffers=False`` allocates fresh arrays for every batch instead (for
    batches kept past the next read, or to measure what the reuse saves).
    ``max_memory`` is the file's memory limit (the default one when ``None``);
    ``token_dtype`` and ``eos_token_id`` read a token dataset (see :func:`lodtool.open`).

    The reader holds an open h5py file; it is never pickled (a copy sent to
    another process opens the file again there, on first use), and a forked
    child opens its own instead of reading through the parent's.
    """

    def __init__(self, path, plan: BatchPlan, *, output: str = "padded", truncate: str | None = None,
                 pad_value=0, tensor: str | None = None, cache_bytes: int = DECODED_CACHE_BYTES,
                 reuse_buffers: bool = True, max_memory: int | None = None, token_dtype=None,
                 eos_token_id: int | None = None):
        if output not in OUTPUTS:
            raise LodUsageError(f"output {output!r} is not one of {', '.join(OUTPUTS)}")
        if truncate is not None and truncate not in TRUNCATE:
            raise LodUsageError(f"truncate must be 'head' or 'tail', not {truncate!r}")
        if not isinstance(cache_bytes, (int, np.integer)) or cache_bytes < 0:
            raise LodUsageError(f"cache_bytes must be a non-negative integer, not {cache_bytes!r}")
        problem = plan._checked
        if problem:
            raise LodUsageError(f"a damaged batch plan: {problem}")
        self.path = os.fspath(path)
        self.plan = plan
        self.output = output
        self.truncate = truncate or "tail"
        self.pad_value = pad_value
        self.tensor_name = tensor if tensor is not None else plan.options.get("tensor")
        self.cache_bytes = int(cache_bytes)
        self.reuse_buffers = bool(reuse_buffers)
        self.max_memory = max_memory
        self.reading = {"token_dtype": token_dtype, "eos_token_id": eos_token_id}
        self._source: _OpenSource | None = None

    # pickling (DataLoader workers, multiprocessing) carries the settings, never the open file
    def __getstate__(self) -> dict:
        return {**self.__dict__, "_source": None}

    def close(self) -> None:
        """Close the file (a later read opens it again)."""
        if self._source is not None:
            self._source.file.close()
            self._source = None

    def __enter__(self) -> BatchReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __len__(self) -> int:
        return len(self.plan)

    def open(self) -> None:
        """Open the file and check the plan against it (the first read does this by itself)."""
        self._opened()

    def _opened(self) -> _OpenSource:
        if self._source is not None and self._source.forks == _FORKS[0]:
            return self._source
        # a forked child (a DataLoader worker) never reads through its parent's HDF5 handle: it opens its own
        self._source = None
        f = _open_container(self.path, self.max_memory, **self.reading)
        try:
            self._source = self._open_source(f)
        except BaseException:
            f.close()
            raise
        return self._source

    def _open_source(self, f) -> _OpenSource:
        t = f.tensor(self.tensor_name)
        level = self.plan.options.get("level", 0)
        identity = file_identity(f.h5) if isinstance(t, LazyTensor) else None
        known = (*identity, t.name, level) if identity is not None else None
        checked = self.plan.__dict__.get("_checked_against")
        if known is not None and checked is not None and checked[0] == known:
            rows = checked[1]  # the same unchanged file, read with this plan before (an earlier epoch's reader)
        else:
            rows = sequence_rows(t, level, self.path)
            _check_plan_fits(self.plan, np.diff(rows), self.path, t.name)
            rows.flags.writeable = False
            if known is not None:  # the plan remembers the last file it was checked against, and its row offsets
                self.plan.__dict__["_checked_against"] = (known, rows)
        try:  # the operators' rule: an integer dtype takes only the values it holds exactly
            pad = cast_value(self.pad_value, t.dtype, "pad value")
        except (LodDtypeError, LodShapeError):
            raise LodUsageError(f"{self.path}: pad value {self.pad_value!r} does not fit tensor {t.name!r} "
                                f"({t.dtype})") from None
        plan = self.plan
        padded = self.output == "padded"
        sizes = plan.batch_sizes
        widths = np.ascontiguousarray(_padded_widths(plan), np.int64) if padded else _NO_LENGTHS
        tokens = plan.batch_tokens
        batch_rows = sizes * widths if padded else tokens
        capacity = _buffer_capacity(plan, self.output, t.element_shape, batch_rows)
        itemsize = t.dtype.itemsize
        check_memory(_buffer_bytes(capacity, itemsize), f.max_memory, self.path,
                     "the buffers of the plan's largest batch")
        row_bytes = max(t.row_bytes, 1)
        room = (int(batch_rows.max(initial=0)), int(sizes.max(initial=0)))  # rows and sequences the buffers hold
        grouped_room = (max(room[0], GATHER_GROUP_BYTES // row_bytes), max(room[1], GATHER_GROUP_BYTES // 16))
        grouped = _buffer_capacity(plan, self.output, t.element_shape, batch_rows, *grouped_room)
        if self.reuse_buffers and _buffer_bytes(grouped, itemsize) <= f.max_memory:
            capacity, room = grouped, grouped_room
        chunks = _chunks_of(t, self.cache_bytes, f.max_memory, self.path)
        touched = _touched_scratch(room[1], room[0], chunks.chunk_rows)
        items = math.prod(t.element_shape)
        word = chunks.words.dtype.itemsize
        clipped = plan.lengths if plan.options.get("max_length") is not None else _NO_LENGTHS
        return _OpenSource(f, t, rows, clipped, self.truncate == "head", pad, chunks, capacity, widths, tokens,
                           batch_rows, sizes, touched, np.zeros(capacity.get("lengths", 0) + 1, np.int64),
                           t.element_shape, items, itemsize // word * items, compiled_gather_batches(),
                           gather_shifts(word, chunks.chunk_rows), room)

    def _buffers(self, source: _OpenSource, n_seq: int, width: int, total: int) -> dict[str, np.ndarray]:
        """Flat output arrays for a batch of ``n_seq`` sequences (``width`` rows each, padded) or ``total`` rows:
        the reused ones (sized once, for the plan's largest batch), or new ones of the batch's size."""
        if self.reuse_buffers:
            if not source.buffers:  # made on the first batch
                capacity = source.capacity
                source.buffers = self._new_buffers(source, capacity.get("lengths", 0), capacity.get("mask", 0),
                                                   capacity.get("position_ids", 0), capacity.get("values", 0))
            return source.buffers
        rows = n_seq * width if self.output == "padded" else total
        return self._new_buffers(source, n_seq, n_seq * width, total, rows * source.items)

    def _new_buffers(self, source: _OpenSource, n_seq: int, padded: int, total: int, items: int) -> dict:
        output = self.output
        values = np.empty(max(items, 1), source.tensor.dtype)
        return {"values": values, "words": words_of(values, source.chunks.words.dtype.itemsize),
                "lengths": np.empty(n_seq, np.int64),
                "cu": np.empty(n_seq + 1, np.int32 if output == "varlen" else np.int64),
                "positions": np.empty(total, np.int64) if output == "varlen" else _NO_POSITIONS,
                "mask": np.empty(padded, np.bool_) if output == "padded" else _NO_MASK.reshape(-1)}

    def read(self, i: int) -> dict:
        """Batch ``i`` of the plan (arrays valid until the next read)."""
        return next(self._gathered((i,)))

    def _batch_ids(self, batch_ids) -> np.ndarray:
        """``batch_ids`` as int64 batch numbers from 0, each checked to be the plan's."""
        n_batches = len(self.plan)
        if isinstance(batch_ids, range):
            ids = np.arange(batch_ids.start, batch_ids.stop, batch_ids.step, dtype=np.int64)
        else:
            ids = np.asarray(batch_ids if isinstance(batch_ids, np.ndarray) else list(batch_ids)).reshape(-1)
        if ids.size and ids.dtype.kind not in "iu":
            raise LodUsageError(f"batch numbers must be integers, not {ids.dtype}")
        outside = (ids < -n_batches) | (ids >= n_batches)
        if outside.any():
            raise LodUsageError(f"batch {ids[np.argmax(outside)]} is outside the plan's {n_batches} batches")
        return ids.astype(np.int64) % max(n_batches, 1)

    def _gathered(self, batch_ids) -> Iterator[dict]:
        """The batches ``batch_ids``, gathered in compiled passes, several batches a pass where they fit the reused
        buffers and every chunk is ready; what stays the same from batch to batch is looked up once."""
        source = self._opened()
        ids = self._batch_ids(batch_ids)
        plan = self.plan
        offsets, indices, repeat, tokens, widths = plan.offsets, plan.indices, plan.repeat, source.tokens, source.widths
        batch_rows, batch_sizes = source.batch_rows, source.batch_sizes
        output = self.output
        padded, jagged = output == "padded", output == "jagged-numpy"
        reuse = self.reuse_buffers
        chunks, gather, row_words, items, elem = source.chunks, source.gather, source.row_words, source.items, \
            source.element_shape
        rows, clipped, head, touched, longest = source.rows, source.clipped, source.head, source.touched, source.longest
        word_shift, chunk_rows, chunk_shift = source.shifts
        # the rows and the cumulative lengths' entries (one more than sequences) of the batches, in reading order
        room_rows, room_entries = source.room[0], source.room[1] + 1
        ends_rows, ends_entries = np.cumsum(batch_rows[ids]), np.cumsum(batch_sizes[ids] + 1)
        j, n_ids = 0, ids.shape[0]
        alone_until = 0  # batches read one at a time, to name the one a grouped gather refused
        # a map's chunks, once checked, stay so; a cache of decoded chunks may evict one a batch before needed
        together = reuse and isinstance(chunks, _MappedChunks)
        while j < n_ids:
            end = j + 1
            if together and j >= alone_until:
                before_rows = ends_rows.item(j - 1) if j else 0
                before_entries = ends_entries.item(j - 1) if j else 0
                end = max(min(int(ends_rows.searchsorted(before_rows + room_rows, "right")),
                              int(ends_entries.searchsorted(before_entries + room_entries, "right"))), end)
            group = ids[j:end]
            if reuse:
                buf = source.buffers or self._buffers(source, 0, 0, 0)
            else:
                i = group.item(0)
                n_seq = batch_sizes.item(i)
                buf = self._buffers(source, n_seq, widths.item(i) if padded else 0, tokens.item(i))
            all_values, all_lengths, cu, positions, mask = buf["values"], buf["lengths"], buf["cu"], \
                buf["positions"], buf["mask"]
            if padded:
                all_values[:(ends_rows.item(end - 1) - (ends_rows.item(j - 1) if j else 0)) * items].fill(source.pad)
            got = _gather_ready(chunks, touched, lambda check: gather(
                chunks.words, chunks.table, word_shift, chunk_rows, chunk_shift, row_words, group, offsets, indices,
                tokens, widths, rows, clipped, head, buf["words"], all_lengths, cu, positions, mask, touched, check,
                longest))
            if got == GATHER_MISMATCH:  # a batch holds other rows than its plan counts: read again, to name it
                if end - j > 1:
                    alone_until = end
                    continue
                raise self._changed_plan(group.item(0), source)
            at = done = 0
            for k in range(end - j):
                i = group.item(k)
                first = offsets.item(i)
                n_seq = offsets.item(i + 1) - first
                n_rows = batch_rows.item(i)
                values = all_values[at * items:(at + n_rows) * items]
                if padded or elem:
                    values = values.reshape(((n_seq, widths.item(i)) if padded else (n_rows,)) + elem)
                lengths = all_lengths[done:done + n_seq]
                base = done + k  # the batch's cumulative lengths start here
                if jagged:
                    yield {"indices": indices[first:first + n_seq], "batch": i, "repeat": repeat.item(i),
                           "values": values, "lengths": lengths, "offsets": cu[base:base + n_seq + 1]}
                elif padded:
                    yield {"indices": indices[first:first + n_seq], "batch": i, "repeat": repeat.item(i),
                           "values": values, "lengths": lengths, "mask": mask[at:at + n_rows].reshape(values.shape[:2])}
                else:
                    yield {"indices": indices[first:first + n_seq], "batch": i, "repeat": repeat.item(i),
                           "values": values, "lengths": lengths, "cu_seqlens": cu[base:base + n_seq + 1],
                           "position_ids": positions[at:at + n_rows], "max_seqlen": longest.item(k)}
                at += n_rows
                done += n_seq
            j = end

    def _changed_plan(self, i: int, source: _OpenSource) -> LodInputError:
        """A batch whose rows are not the ones its plan counts: the plan was changed after it was checked against
        the file (the gather reads and writes nothing past its arrays)."""
        return LodInputError(f"{self.path}: batch {i} of the plan holds other rows than the plan counts for it: "
                             f"the plan no longer matches tensor {source.tensor.name!r} (changed after it was "
                             "checked?)")

    def __iter__(self) -> Iterator[dict]:
        return self._gathered(range(len(self.plan)))

    def iter_batches(self, batch_ids) -> Iterator[dict]:
        """The batches ``batch_ids`` of the plan, in that order (for splitting a plan among workers)."""
        return self._gathered(batch_ids)


def batches(path, plan=None, *, output: str = "padded", truncate: str | None = None, pad_value=0,
            tensor: str | None = None, cache_bytes: int = DECODED_CACHE_BYTES, max_memory: int | None = None,
            token_dtype=None, eos_token_id: int | None = None, **plan_options) -> Iterator[dict]:
    """NumPy batches of a container for any framework: padded + mask, jagged, or varlen (flat + cu_seqlens).

    ``plan`` is a :class:`BatchPlan`, the path of a saved one, or ``None`` with
    the options of :func:`batch_plan` (``max_tokens=...``, ``mode=...``).  Each
    batch is a dict of arrays read with partial reads into buffers reused from
    batch to batch: **a yielded batch is valid until the next one**; copy what
    you keep.  See :class:`BatchReader` for the outputs, and for ``max_memory``, ``token_dtype`` and
    ``eos_token_id``.

    >>> import os, tempfile, numpy as np
    >>> from lodtool import LoDTensor
    >>> from lodtool.container.writer import save
    >>> p = os.path.join(tempfile.mkdtemp(), "c.lod.h5")
    >>> save(p, LoDTensor(np.arange(1, 10), recursive_sequence_lengths=[[3, 1, 4, 1]]))
    >>> for b in batches(p, max_sequences=2, mode="sorted"):
    ...     print(b["values"].tolist(), b["lengths"].tolist())
    [[9], [4]] [1, 1]
    [[1, 2, 3, 0], [5, 6, 7, 8]] [3, 4]
    >>> b = next(batches(p, max_tokens=8, mode="pack", output="varlen"))
    >>> b["values"].tolist(), b["cu_seqlens"].tolist(), b["position_ids"].tolist()
    ([5, 6, 7, 8, 1, 2, 3, 9], [0, 4, 7, 8], [0, 1, 2, 3, 0, 1, 2, 0])
    """
    reading = {"token_dtype": token_dtype, "eos_token_id": eos_token_id}
    plan = as_plan(plan, path, tensor=tensor, max_memory=max_memory, **reading, **plan_options)
    reader = BatchReader(path, plan, output=output, truncate=truncate, pad_value=pad_value, tensor=tensor,
                         cache_bytes=cache_bytes, max_memory=max_memory, **reading)
    with reader:
        yield from reader


def plan_report(plan: BatchPlan, bins: int = 12, *, cache_chunks: int | None = None,
                rows: np.ndarray | None = None, chunk_rows: int | None = None) -> dict:
    """The plan's figures beside ``random``'s at the same mean batch size, and the length histogram; with
    ``cache_chunks``, also :func:`chunk_locality` (``"chunks"``) where the plan knows its source's chunks.

    >>> r = plan_report(batch_plan(np.arange(1, 200), max_tokens=512))
    >>> sorted(r), r["plan"]["padding_waste"] < r["random"]["padding_waste"]
    (['histogram', 'plan', 'random'], True)
    """
    counts, edges = plan.histogram(bins)
    report = {"plan": plan.stats(), "random": plan.random_baseline().stats(),
              "histogram": {"edges": edges.tolist(), "counts": counts.tolist()}}
    locality = chunk_locality(plan, cache_chunks, rows, chunk_rows) if cache_chunks else None
    if locality is not None:
        report["chunks"] = locality
    return report


#: why a streamed report has no random baseline and no chunk reads
STREAMED_NOTE = ("streamed from length counts: the random baseline and the chunk reads need every sequence's place "
                 "in a random order (the whole plan), so they are not computed")


def streamed_report(source, *, bins: int = 12, tensor: str | None = None, max_memory: int | None = None,
                    token_dtype=None, eos_token_id: int | None = None, **plan_options) -> dict:
    """:func:`plan_report`'s ``plan`` figures and histogram for a ``sorted`` plan, or a ``buckets`` plan in the
    file's order (``shuffle=False``), in memory bounded by the distinct lengths (never by the sequences).

    ``source`` is a container, sharded folder or token dataset; its offsets
    are validated and read in windows.  For ``sorted``, the lengths are
    counted (:class:`~lodtool.ops.batching.LengthCounts`) and fairseq's greedy
    cut over the lengths sorted is run over those counts
    (:func:`~lodtool.ops.batching.greedy_run_figures`).  For ``buckets``, each
    window's sequences join their bucket's open batch, and every batch is
    counted as it fills (a second pass, after one that finds the longest
    sequence, which sizes the buckets' batches).  Either way the figures equal
    ``batch_plan(source, ...).stats()`` exactly.  The other modes, and a plan
    dealt to replicas, need the whole plan (:func:`streams`): they raise
    :class:`~lodtool.errors.LodUsageError`.  ``"random"`` is ``None`` and
    ``"streamed"`` says why (:data:`STREAMED_NOTE`).

    >>> import os, tempfile, numpy as np, lodtool
    >>> p = os.path.join(tempfile.mkdtemp(), "c.lod.h5")
    >>> lodtool.save(p, lodtool.LoDTensor(np.arange(10), recursive_sequence_lengths=[[3, 1, 4, 2]]))
    >>> r = streamed_report(p, max_tokens=6)
    >>> r["plan"] == batch_plan(p, max_tokens=6).stats(), r["random"]
    (True, None)
    >>> options = dict(mode="buckets", boundaries=[2, 4], max_sequences=2, shuffle=False)
    >>> streamed_report(p, **options)["plan"] == batch_plan(p, **options).stats()
    True
    """
    from ..ops.batching import LENGTH_COUNTS_BYTES
    from ._pipe import offset_window, require_valid

    if not isinstance(source, (str, os.PathLike)):
        raise LodUsageError("streamed_report reads a path (a container, sharded folder or token dataset); lengths "
                            "already in memory are reported by plan_report(batch_plan(...))")
    o = _plan_arguments(source, plan_options)
    where = os.fspath(source)
    if not streams(o):
        what, why = _whole_plan(o)
        raise LodUsageError(f"{where}: the figures of {what} need the whole plan ({why}); only mode 'sorted' on one "
                            "replica streams (and mode 'buckets' with shuffle=False)")
    max_length = o["max_length"]
    with _open_container(source, max_memory, token_dtype=token_dtype, eos_token_id=eos_token_id) as f:
        t = f.tensor(tensor)
        level = _level_of(t, o["level"], where)
        window = offset_window(f.max_memory)
        check_memory(LENGTH_COUNTS_BYTES + 4 * 8 * window, f.max_memory, where, "the length counts of the report")
        require_valid(where, t)

        def windows() -> Iterator[np.ndarray]:  # the sequences' lengths, clipped, a window at a time
            for rows in row_offset_windows(t, level, window):
                lengths = np.diff(rows)
                yield lengths if max_length is None else np.minimum(lengths, max_length)

        stats, (values, n) = _streamed_sorted(windows(), o, where) if o["mode"] == "sorted" else \
            _streamed_buckets(windows, o)
    edges = length_bins(values, bins)
    return {"plan": stats, "random": None, "histogram": {"edges": edges.tolist(),
                                                          "counts": _run_histogram(values, n, edges).tolist()},
            "streamed": STREAMED_NOTE}


def streams(options: dict) -> bool:
    """Whether the report of a plan with ``options`` (every argument of :func:`batch_plan`) streams
    (:func:`streamed_report`): mode ``sorted``, or ``buckets`` in the file's order, on one replica.

    >>> streams({"mode": "buckets", "shuffle": False, "num_replicas": 1}), streams({"mode": "random",
    ...                                                                              "num_replicas": 1})
    (True, False)
    """
    return options["num_replicas"] == 1 and (options["mode"] == "sorted" or (
        options["mode"] == "buckets" and not options.get("shuffle", True)))


def _whole_plan(options: dict) -> tuple[str, str]:
    """What a plan with ``options`` that does not :func:`stream <streams>` is, and why its figures need the whole
    plan."""
    if options["num_replicas"] > 1:
        return "a plan dealt to replicas", "its batches are dealt in a random order"
    if options["mode"] == "pack":
        return "mode 'pack'", "first-fit packing keeps every row open until the last sequence"
    return f"mode {options['mode']!r}", "its order is one random permutation of every sequence"


def _streamed_sorted(windows, o: dict, where: str) -> tuple[dict, tuple[np.ndarray, np.ndarray]]:
    """A ``sorted`` plan's stats, and the runs ``(lengths, counts)`` of its sequences, from ``windows`` of the
    lengths (clipped)."""
    from ..ops.batching import LengthCounts, greedy_run_figures

    max_tokens = o["max_tokens"]
    counts, skipped = LengthCounts(), 0
    first_long = long_length = None
    done = 0
    for lengths in windows:
        in_window = lengths.shape[0]
        if max_tokens is not None:
            too_long = lengths > max_tokens
            if too_long.any():
                if first_long is None:
                    first_long = done + int(np.argmax(too_long))
                    long_length = int(lengths[first_long - done])
                skipped += int(too_long.sum())
                lengths = lengths[~too_long]
        counts.add(lengths)
        done += in_window
    if first_long is not None and o["oversize"] == "error":
        raise _oversize_error(where, first_long, long_length, skipped, max_tokens)
    values, n = counts.runs()
    fig = greedy_run_figures(values, n, max_tokens, o["max_sequences"], o["multiple_of"])
    keep_last = bool(n.sum()) and not (o["drop_last"] and _incomplete(fig["last_sequences"], max_tokens,
                                                                       o["max_sequences"], o["multiple_of"]))
    return _run_stats(fig, keep_last, values, n, skipped), _without_longest(values, n, 0 if keep_last else
                                                                            fig["last_sequences"])


def _streamed_buckets(windows, o: dict) -> tuple[dict, tuple[np.ndarray, np.ndarray]]:
    """A ``buckets`` plan's stats in the file's order, and the runs ``(lengths, counts)`` of its sequences, from
    ``windows()`` (a fresh iterator of the lengths, clipped, a window at a time, per call; read twice)."""
    from ..ops.batching import LengthCounts

    bounds = _bucket_bounds(o["boundaries"])
    n_buckets = bounds.shape[0] + 1
    count = longest = 0
    for lengths in windows():
        count += lengths.shape[0]
        longest = max(longest, int(lengths.max(initial=0)))
    sizes = _bucket_sizes(bounds, count, longest, o["max_tokens"], o["max_sequences"], o["multiple_of"],
                          o["bucket_batch_sizes"], o["pad_to_bucket_boundary"])
    widths = bounds - 1 if o["pad_to_bucket_boundary"] else None
    figures = _BatchFigures()
    counts = LengthCounts()
    # each bucket's open batch: its sequences, rows and longest, and the runs of its lengths (counted once kept)
    open_n, open_tokens, open_longest = [0] * n_buckets, [0] * n_buckets, [0] * n_buckets
    open_runs = [LengthCounts(dense=0) for _ in range(n_buckets)]
    for lengths in windows():
        bucket = np.searchsorted(bounds, lengths, side="right")
        grouped = lengths[counting_argsort(bucket, n_buckets)]  # by bucket, each in stream order
        ends = np.cumsum(np.bincount(bucket, minlength=n_buckets))
        for b in np.flatnonzero(np.diff(ends, prepend=0)).tolist():
            part, size = grouped[(ends[b - 1] if b else 0):ends[b]], int(sizes[b])
            if open_n[b] + part.shape[0] < size:  # the open batch does not fill yet
                open_n[b] += part.shape[0]
                open_tokens[b] += int(part.sum())
                open_longest[b] = max(open_longest[b], int(part.max()))
                open_runs[b].add(part)
                continue
            first = size - open_n[b]  # the sequences that fill the open batch
            full = (part.shape[0] - first) // size
            cut = first + full * size
            blocks = part[first:cut].reshape(full, size)
            tokens = np.concatenate([[open_tokens[b] + int(part[:first].sum())], blocks.sum(axis=1)])
            most = np.concatenate([[max(open_longest[b], int(part[:first].max(initial=0)))], blocks.max(axis=1)])
            figures.add(tokens, size * (most if widths is None else widths[b]), size)
            counts.add_runs(*open_runs[b].runs())
            counts.add(part[:cut])
            tail = part[cut:]
            open_n[b], open_tokens[b], open_longest[b] = tail.shape[0], int(tail.sum()), int(tail.max(initial=0))
            open_runs[b] = LengthCounts(dense=0)
            open_runs[b].add(tail)
    if not o["drop_last"]:  # the partial batches, by bucket
        for b in range(n_buckets):
            if open_n[b]:
                figures.add(np.array([open_tokens[b]]), open_n[b] * (open_longest[b] if widths is None
                                                                     else widths[b]), open_n[b])
                counts.add_runs(*open_runs[b].runs())
    values, n = counts.runs()
    return figures.stats("buckets", _empty_runs(values, n)), (values, n)


def _plan_arguments(source, plan_options: dict) -> dict:
    """Every argument of :func:`batch_plan` (``plan_options`` over its defaults), checked as it checks them."""
    import inspect

    bound = inspect.signature(batch_plan).bind(source, **plan_options)
    bound.apply_defaults()
    o = bound.arguments
    _check_usage(o["mode"], o["max_tokens"], o["max_sequences"], o["multiple_of"], o["boundaries"],
                 o["bucket_batch_sizes"], o["num_replicas"], o["rank"], o["max_length"], o["oversize"], o["seed"],
                 o["epoch"], o["megabatch_mult"], o["level"])
    return o


def _run_stats(fig: dict, keep_last: bool, values: np.ndarray, n: np.ndarray, skipped: int) -> dict:
    """:meth:`BatchPlan.stats` of a ``sorted`` plan from :func:`greedy_run_figures`' figures."""
    figures = _BatchFigures()
    figures.batches = fig["batches"]
    for key in _BatchFigures.KEYS:
        figures.totals[key] = fig[key]
        if fig["batches"]:
            figures.lows[key], figures.highs[key] = fig["min_" + key], fig["max_" + key]
    if keep_last:
        figures.add(np.array([fig["last_tokens"]]), np.array([fig["last_padded"]]), fig["last_sequences"])
    # the empty ones sort first
    return figures.stats("sorted", min(_empty_runs(values, n), figures.totals["sequences"]), skipped)


def _empty_runs(values: np.ndarray, n: np.ndarray) -> int:
    """How many empty sequences the runs of :meth:`LengthCounts.runs` hold (lengths ascending: theirs is first)."""
    return int(n[0]) if values.size and values[0] == 0 else 0


class _BatchFigures:
    """Totals, least and most of the rows, padded rows and sequences of batches counted a run at a time: a streamed
    plan's :meth:`BatchPlan.stats`."""

    KEYS = ("tokens", "padded", "sequences")

    def __init__(self):
        self.batches = 0
        self.totals = dict.fromkeys(self.KEYS, 0)
        self.lows: dict[str, int] = {}
        self.highs: dict[str, int] = {}

    def add(self, tokens: np.ndarray, padded, sequences) -> None:
        """Batches of ``tokens`` rows each, ``padded`` padded rows and ``sequences`` sequences (arrays or one
        figure for all)."""
        k = tokens.shape[0]
        for key, a in zip(self.KEYS, (tokens, padded, sequences)):
            a = np.broadcast_to(np.asarray(a, np.int64), (k,))
            self.totals[key] += int(a.sum())
            lo, hi = int(a.min()), int(a.max())
            self.lows[key] = min(self.lows.get(key, lo), lo)
            self.highs[key] = max(self.highs.get(key, hi), hi)
        self.batches += k

    def stats(self, mode: str, empty: int, skipped: int = 0) -> dict:
        batches, totals = self.batches, self.totals

        def summary(key):
            return {"mean": totals[key] / batches if batches else 0.0, "min": self.lows.get(key, 0),
                    "max": self.highs.get(key, 0)}

        fill = totals["tokens"] / totals["padded"] if totals["padded"] else 1.0
        return {
            "mode": mode, "batches": batches, "sequences": totals["sequences"], "tokens": totals["tokens"],
            "padded_tokens": totals["padded"], "padding_waste": 1.0 - fill, "fill_rate": fill,
            "tokens_per_batch": summary("tokens"), "padded_tokens_per_batch": summary("padded"),
            "sequences_per_batch": summary("sequences"), "repeats": 0, "skipped": skipped, "empty": empty,
        }


def _without_longest(values: np.ndarray, n: np.ndarray, drop: int) -> tuple[np.ndarray, np.ndarray]:
    """The runs ``(values, n)`` less their ``drop`` longest lengths."""
    n = n.copy()
    k = n.shape[0] - 1
    while drop and k >= 0:
        take = min(drop, int(n[k]))
        n[k] -= take
        drop -= take
        k -= 1
    keep = n > 0
    return values[keep], n[keep]


def _run_histogram(values: np.ndarray, n: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """``np.histogram(np.repeat(values, n), edges)[0]`` without the repeat."""
    bin_of = np.searchsorted(edges, values, side="right") - 1
    bin_of[values == edges[-1]] = edges.shape[0] - 2  # NumPy's last bin is closed
    inside = (bin_of >= 0) & (bin_of < edges.shape[0] - 1)
    return np.bincount(bin_of[inside], weights=n[inside], minlength=edges.shape[0] - 1).astype(np.int64)


def chunk_locality(plan: BatchPlan, cache_chunks: int, rows: np.ndarray | None = None,
                   chunk_rows: int | None = None) -> dict | None:
    """How a reader with a cache of ``cache_chunks`` decoded chunks reads the plan, beside a true shuffle.

    A true shuffle is the plan's sequences in a random order, cut into the
    same batch sizes.  ``decodes`` counts the chunks decoded in an epoch
    (``decodes_per_chunk``: per stored chunk), ``chunks_per_batch`` the chunks
    a batch draws from on average, and ``mixing`` is that figure over the true
    shuffle's: 1 is as mixed as a true shuffle, lower means batches drawn from
    fewer places in the file.  ``rows`` are the row offsets of the source's
    sequences (needed when the plan clips lengths; else they follow from them).
    ``chunk_rows`` defaults to the plan's own (``options["chunk_rows"]``);
    ``None`` when neither says how the source is chunked.

    >>> plan = batch_plan(np.full(4000, 10), max_tokens=100, mode="chunks", chunk_rows=1000, window=8)
    >>> c = chunk_locality(plan, cache_chunks=16)
    >>> c["decodes_per_chunk"] <= 2 < c["shuffled"]["decodes_per_chunk"], c["mixing"] < 1
    (True, True)
    """
    chunk_rows = chunk_rows or plan.options.get("chunk_rows")
    if chunk_rows is None or (rows is None and plan.options.get("max_length") is not None):
        return None
    if rows is None:
        rows = np.concatenate([[0], np.cumsum(plan.lengths)])
    first = rows[:-1] // chunk_rows
    last = np.maximum(rows[1:] - 1, rows[:-1]) // chunk_rows - (rows[1:] == rows[:-1])  # an empty one: no chunk
    n_chunks = -(-int(rows[-1]) // chunk_rows)
    seqs = plan.indices
    shuffled = seqs[plan_rng(plan.options.get("seed", 0), plan.options.get("epoch", 0), 1).permutation(seqs.shape[0])]
    out = {}
    for key, order in (("plan", seqs), ("shuffled", shuffled)):
        decodes, touched = chunk_reads(first[order], last[order], plan.offsets, n_chunks, cache_chunks)
        out[key] = {"decodes": decodes, "decodes_per_chunk": decodes / max(n_chunks, 1),
                    "chunks_per_batch": touched / max(len(plan), 1)}
    plan_figures = out.pop("plan")
    mixing = plan_figures["chunks_per_batch"] / out["shuffled"]["chunks_per_batch"] \
        if out["shuffled"]["chunks_per_batch"] else 1.0
    return {"chunk_rows": int(chunk_rows), "chunks": n_chunks, "cache_chunks": int(cache_chunks), **plan_figures,
            "mixing": mixing, "shuffled": out["shuffled"]}


#: the name of each batch file :func:`write_batches` writes
BATCH_FILE = re.compile(r"batch_[0-9]+\.npz")


def write_batches(path, plan, out_dir, *, output: str = "padded", truncate: str | None = None, pad_value=0,
                  tensor: str | None = None, progress=None, overwrite: bool = False,
                  max_memory: int | None = None, token_dtype=None, eos_token_id: int | None = None) -> dict:
    """Write every batch of ``plan`` as ``out_dir/batch_NNNNNN.npz``, for file-fed trainers.

    Each NPZ holds the arrays :func:`batches` yields (``values``, ``mask``,
    ``lengths``, ``indices``, ... by ``output``) plus ``batch`` and ``repeat``.
    ``progress(n)`` is called after each file with the bytes written so far.
    A folder that holds batch files already is written into only with
    ``overwrite=True``, and then its old batch files are all replaced: the new
    ones are written aside first, so a failure leaves the old ones as they were.

    >>> import os, tempfile, numpy as np, lodtool
    >>> d = tempfile.mkdtemp()
    >>> p = os.path.join(d, "c.lod.h5")
    >>> lodtool.save(p, lodtool.LoDTensor(np.arange(6), recursive_sequence_lengths=[[2, 4]]))
    >>> write_batches(p, batch_plan(p, max_sequences=1), os.path.join(d, "out"))["files"]
    2
    >>> sorted(np.load(os.path.join(d, "out", "batch_000000.npz")))
    ['batch', 'indices', 'lengths', 'mask', 'repeat', 'values']
    """
    from ..atomic import atomic_open, fsync_folder, temp_path_for

    plan = as_plan(plan, max_memory=max_memory)
    out_dir = os.fspath(out_dir)
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise LodUsageError(f"{out_dir}: exists and is not a folder")
    earlier = sorted(n for n in os.listdir(out_dir) if BATCH_FILE.fullmatch(n)) if os.path.isdir(out_dir) else []
    if earlier and not overwrite:
        raise LodExistsError(f"{out_dir}: holds {len(earlier):,} batch file(s) already; pass overwrite=True to "
                             "replace them all")
    width = max(6, len(str(max(len(plan) - 1, 0))))
    written = nbytes = 0
    with BatchReader(path, plan, output=output, truncate=truncate, pad_value=pad_value, tensor=tensor,
                     max_memory=max_memory, token_dtype=token_dtype, eos_token_id=eos_token_id) as reader:
        reader.open()  # a plan made for another file fails here, before the folder is made
        os.makedirs(out_dir, exist_ok=True)
        staging = temp_path_for(os.path.join(out_dir, "batches"))
        os.mkdir(staging)
        try:
            names = []
            for b in reader:
                names.append(f"batch_{b['batch']:0{width}d}.npz")
                with atomic_open(os.path.join(staging, names[-1])) as f:
                    np.savez(f, **{k: np.asarray(v) for k, v in b.items()})
                nbytes += os.path.getsize(os.path.join(staging, names[-1]))
                written += 1
                if progress is not None:
                    progress(nbytes)
            for name in earlier:
                os.remove(os.path.join(out_dir, name))
            for name in names:
                os.replace(os.path.join(staging, name), os.path.join(out_dir, name))
            fsync_folder(out_dir)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return {"directory": out_dir, "files": written, "bytes": nbytes, "output": output}


@dataclass
class BatchResult:
    """What :func:`batch` did: the plan (``None`` when only a streamed report was asked for, see
    :func:`streamed_report`), where it was saved, the batches written, the report."""

    plan: BatchPlan | None
    saved: str | None = None
    written: dict | None = None
    report: dict | None = None


def batch(path, plan=None, *, tensor: str | None = None, save_to=None, write_to=None, layout: str = "padded",
          truncate: str | None = None, pad_value=0, report: bool = False, progress=None, overwrite: bool = False,
          max_memory: int | None = None, token_dtype=None, eos_token_id: int | None = None,
          **plan_options) -> BatchResult:
    """``lodtool batch``: plan a container's training batches (or load a plan), then save, report or write them.

    ``plan`` is a :class:`BatchPlan`, a saved plan's path, or ``None`` with the
    options of :func:`batch_plan`.  ``save_to`` writes the plan (``.npz``);
    ``write_to`` writes each batch as an NPZ into that folder
    (:func:`write_batches`, ``layout`` as ``output`` there, padded with
    ``pad_value``); either replaces what is there only with ``overwrite=True``.
    ``report=True`` adds :func:`plan_report`'s figures (a report alone of a
    ``sorted`` plan too large for the memory limit is streamed instead, see
    :func:`streamed_report`; the result's ``plan`` is then ``None``); ``max_memory`` bounds
    the planning and the reading (the default limit when ``None``); ``token_dtype``
    and ``eos_token_id`` read a token dataset ``path`` (see :func:`lodtool.open`).

    >>> import os, tempfile, numpy as np, lodtool
    >>> d = tempfile.mkdtemp()
    >>> p = os.path.join(d, "c.lod.h5")
    >>> lodtool.save(p, lodtool.LoDTensor(np.arange(10), recursive_sequence_lengths=[[3, 1, 4, 2]]))
    >>> r = batch(p, max_tokens=6, save_to=os.path.join(d, "plan.npz"), report=True)
    >>> len(r.plan), r.report["plan"]["tokens"], os.path.exists(r.saved)
    (3, 10, True)
    """
    reading = {"token_dtype": token_dtype, "eos_token_id": eos_token_id}
    if report and plan is None and save_to is None and write_to is None and \
            not _plan_fits(path, tensor, max_memory, reading, plan_options):
        return BatchResult(None, report=streamed_report(path, tensor=tensor, max_memory=max_memory, **reading,
                                                        **plan_options))
    plan = as_plan(plan, path, tensor=tensor, max_memory=max_memory, **reading, **plan_options)
    result = BatchResult(plan)
    if save_to is not None:
        plan.save(save_to, overwrite=overwrite)
        result.saved = os.fspath(save_to)
    if write_to is not None:
        result.written = write_batches(path, plan, write_to, output=layout, truncate=truncate, pad_value=pad_value,
                                       tensor=tensor, progress=progress, overwrite=overwrite, max_memory=max_memory,
                                       **reading)
    if report:
        result.report = plan_report(plan, **_report_chunks(path, plan, tensor, max_memory, reading))
    return result


def _plan_fits(path, tensor: str | None, max_memory: int | None, reading: dict, plan_options: dict) -> bool:
    """Whether the plan of ``path`` fits the memory limit (:func:`_check_plan_memory`); when it does not, a plan
    whose report cannot stream (:func:`streams`) is refused, naming its mode, why, and the alternatives."""
    o = _plan_arguments(path, plan_options)
    mode = o["mode"]
    with _open_container(path, max_memory, **reading) as f:
        t = f.tensor(tensor)
        where = os.fspath(path)
        count = t.num_sequences(_level_of(t, o["level"], where))
        if _plan_bytes(count, mode) <= f.max_memory:
            return True
        if not streams(o):
            what, why = _whole_plan(o)
            raise LodMemoryError(f"{where}: the report of {what} needs its whole plan of {count:,} sequences "
                                 f"({human_bytes(_plan_bytes(count, mode))}: {why}), above the memory limit of "
                                 f"{human_bytes(f.max_memory)}; raise it with max_memory=..., or report mode 'sorted' "
                                 "(or 'buckets' with shuffle=False) on one replica, which streams")
    return False


def _report_chunks(path, plan: BatchPlan, tensor: str | None, max_memory: int | None, reading: dict) -> dict:
    """:func:`plan_report`'s ``cache_chunks`` and ``rows`` for a plan of the container at ``path`` (a token
    dataset opened with ``reading``): a reader's default cache, in the file's chunks.  A plan too large for its
    report within the memory limit (one loaded from a file) is refused first."""
    with _open_container(path, max_memory, **reading) as f:
        _check_plan_memory(plan.n_sequences, plan.mode, f.max_memory, os.fspath(path))
        t = f.tensor(tensor if tensor is not None else plan.options.get("tensor"))
        row_bytes = max(t.row_bytes, 1)
        chunk = plan.options.get("chunk_rows") or stored_chunk_rows(t)
        rows = sequence_rows(t, plan.options.get("level", 0), os.fspath(path)) \
            if plan.options.get("max_length") is not None else None
    return {"cache_chunks": max(DECODED_CACHE_BYTES // (chunk * row_bytes), 1), "rows": rows, "chunk_rows": chunk}


__all__ = ["MODES", "OUTPUTS", "batch", "BatchResult", "plan_report", "streamed_report", "streams",
           "chunk_locality", "stored_chunk_rows", "SequenceGather",
           "write_batches", "BatchPlan", "BatchReader", "batch_plan", "batches", "as_plan", "sequence_rows",
           "lengths_digest", "length_bins"]
