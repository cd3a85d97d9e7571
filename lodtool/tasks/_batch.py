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

Across ``num_replicas`` the batches are dealt round-robin: rank ``r`` gets
batches ``r, r + R, ...``.  Every rank gets the same number of batches: with
``drop_last`` the last few batches are dropped; without it the list is padded
by repeating batches from its start, as torch's ``DistributedSampler`` repeats
samples, and :attr:`BatchPlan.repeat` marks those repeats (the batches that are
not repeats are disjoint across ranks and cover every sequence once).

>>> import numpy as np
>>> plan = batch_plan(np.array([5, 1, 3, 8, 2, 2, 7, 4]), max_tokens=16, mode="sorted")
>>> sorted(len(b) for b in plan), plan.stats()["tokens"]
([2, 2, 4], 32)
>>> all(len(b) * plan.lengths[b].max() <= 16 for b in plan)
True
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._jit import kernel
from ..planner import row_offset_windows
from ..errors import LodFormatError, LodUsageError, LodValidationError
from ..lod import find_lod_problems

MODES = ("sorted", "megabatch", "buckets", "pack", "random")
OUTPUTS = ("padded", "jagged-numpy", "varlen")
TRUNCATE = ("head", "tail")
#: version of the saved plan's layout (``.npz``)
PLAN_VERSION = 1
#: rows of data cached per reader (decoded chunks), unless ``cache_bytes`` says otherwise
DEFAULT_CACHE_BYTES = 256 << 20


# -- the one place that knows the container's reader and the kernel decorator --------------------------
def _open_container(path):
    """A container file or a sharded folder (one logical tensor, read through its manifest)."""
    from ..container.shards import open_path

    return open_path(path)


def _chunk_rows(tensor) -> int | None:
    """Rows per HDF5 chunk of a stored tensor's data (the reader decodes whole chunks)."""
    chunks = getattr(getattr(tensor, "_data", None), "chunks", None)
    return int(chunks[0]) if chunks else None


class _OffsetsInMemory:
    """The planner's view of a stored tensor (``num_sequences``, ``read_offsets``), over offsets already read."""

    def __init__(self, offsets: list[np.ndarray]):
        self._offsets = offsets
        self.lod_level = len(offsets)

    def num_sequences(self, level: int = 0) -> int:
        return int(self._offsets[level].shape[0] - 1)

    def read_offsets(self, level: int, start: int = 0, stop: int | None = None) -> np.ndarray:
        return self._offsets[level][start:stop]


def _is_lazy_tensor(obj) -> bool:
    return hasattr(obj, "read_offsets") and hasattr(obj, "read_rows") and hasattr(obj, "level_sizes")


# -- lengths from offsets ------------------------------------------------------------------------------
def sequence_rows(tensor, level: int = 0) -> np.ndarray:
    """Row offsets of each sequence of ``level`` (``n + 1`` int64 values), from validated offsets only.

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
    n_levels = tensor.lod_level
    where = getattr(tensor, "_path", "source")
    if n_levels == 0:
        raise LodUsageError(f"{where}: tensor {tensor.name!r} has no LoD levels, so no sequences to batch")
    if not isinstance(level, (int, np.integer)) or not -n_levels <= level < n_levels:
        raise LodUsageError(f"{where}: level {level} is out of range for a tensor with {n_levels} LoD level(s)")
    level = int(level) % n_levels
    offsets = [tensor.read_offsets(k) for k in range(n_levels)]
    problems = find_lod_problems(offsets, tensor.n_rows, max_problems=1)
    if problems:  # untrusted offsets never index anything
        raise LodValidationError(f"{where}: tensor {tensor.name!r}: {problems[0]}")
    count = max(int(offsets[level].shape[0]) - 1, 0)
    if count == 0:
        return np.zeros(1, dtype=np.int64)
    # the container's planner maps a level's offsets down to the data rows (one window: all in memory)
    rows = next(row_offset_windows(_OffsetsInMemory(offsets), level, count))
    return np.ascontiguousarray(rows, dtype=np.int64)


def _source_lengths(source, level: int, tensor: str | None) -> tuple[np.ndarray, dict]:
    """(lengths in rows, a description) of ``source``: a container or sharded folder, a lazy tensor or an array."""
    if isinstance(source, (str, os.PathLike)):
        with _open_container(source) as f:
            t = f.tensor(tensor)
            rows = sequence_rows(t, level)
            return np.diff(rows), {"source": os.fspath(source), "tensor": t.name}
    if _is_lazy_tensor(source):
        return np.diff(sequence_rows(source, level)), {"tensor": source.name}
    lengths = np.asarray(source)
    if lengths.ndim != 1 or (lengths.size and lengths.dtype.kind not in "iu"):
        raise LodUsageError(f"lengths must be a 1-d integer array, not {lengths.dtype} of shape {lengths.shape}")
    lengths = lengths.astype(np.int64, copy=False)
    if lengths.size and lengths.min() < 0:
        raise LodUsageError(f"length[{int(np.argmin(lengths))}] = {int(lengths.min())} is negative")
    return lengths, {}


# -- kernels -------------------------------------------------------------------------------------------
def _greedy_ends_reference(lengths, segment_ends, max_tokens, max_sequences, multiple):
    """Batch ends of fairseq's greedy pass (``batch_by_size_vec``), run on each segment; plain Python.

    Within a segment the pass keeps a *running batch* ``[start, end)`` and a
    *tail* ``[end, pos]``.  The tail joins the batch whenever the two together
    have a size below ``multiple`` or a multiple of it; when they would break a
    limit the batch is closed and the tail starts the next one (if the tail alone
    breaks the token limit, it is closed too, without ``pos``).
    """
    out = []
    seg_start = 0
    for seg_end in segment_ends:
        batch_start = batch_end = seg_start
        batch_max = tail_max = 0
        for pos in range(seg_start, seg_end):
            tail_max = max(tail_max, lengths[pos])
            count = pos + 1 - batch_start
            new_max = max(batch_max, tail_max)
            overflow = (0 < max_sequences < count) or (0 < max_tokens < count * new_max)
            if overflow:
                if 0 < max_tokens < tail_max * (pos + 1 - batch_end):
                    out.append(batch_end)
                    batch_end = pos
                    tail_max = lengths[pos]
                out.append(batch_end)
                batch_start = batch_end
                new_max = tail_max
            count = pos + 1 - batch_start
            if overflow or count < multiple or count % multiple == 0:
                batch_end = pos + 1
                batch_max = new_max
                tail_max = 0
        if seg_end > seg_start:
            out.append(batch_end)
            if batch_end != seg_end:
                out.append(seg_end)
        seg_start = seg_end
    return np.array(out, dtype=np.int64)


@kernel
def _greedy_ends_impl(lengths, segment_ends, max_tokens, max_sequences, multiple, out):
    n_out = 0
    seg_start = 0
    for s in range(segment_ends.shape[0]):
        seg_end = segment_ends[s]
        batch_start = seg_start
        batch_end = seg_start
        batch_max = 0
        tail_max = 0
        for pos in range(seg_start, seg_end):
            v = lengths[pos]
            if v > tail_max:
                tail_max = v
            count = pos + 1 - batch_start
            new_max = batch_max if batch_max > tail_max else tail_max
            overflow = (max_sequences > 0 and count > max_sequences) or \
                (max_tokens > 0 and count * new_max > max_tokens)
            if overflow:
                if max_tokens > 0 and tail_max * (pos + 1 - batch_end) > max_tokens:
                    out[n_out] = batch_end
                    n_out += 1
                    batch_end = pos
                    tail_max = v
                out[n_out] = batch_end
                n_out += 1
                batch_start = batch_end
                new_max = tail_max
            count = pos + 1 - batch_start
            if overflow or count < multiple or count % multiple == 0:
                batch_end = pos + 1
                batch_max = new_max
                tail_max = 0
        if seg_end > seg_start:
            out[n_out] = batch_end
            n_out += 1
            if batch_end != seg_end:
                out[n_out] = seg_end
                n_out += 1
        seg_start = seg_end
    return n_out


def _ffd_reference(lengths_desc, capacity):
    """Bin of each item under first-fit decreasing (items already sorted, longest first); plain Python."""
    room: list[int] = []
    out = np.empty(len(lengths_desc), dtype=np.int64)
    for i, need in enumerate(lengths_desc):
        for b, r in enumerate(room):
            if r >= need:
                room[b] -= need
                out[i] = b
                break
        else:
            room.append(capacity - need)
            out[i] = len(room) - 1
    return out


@kernel
def _ffd_impl(lengths_desc, capacity, tree, bin_of):
    # tree: a max-tree over the bins' free room (leaves at [size, 2 * size)), so the first bin
    # with room for an item is found in log2(bins) steps: O(n log n) for the whole packing
    size = tree.shape[0] // 2
    for j in range(size, 2 * size):
        tree[j] = capacity
    for j in range(size - 1, 0, -1):
        tree[j] = tree[2 * j] if tree[2 * j] > tree[2 * j + 1] else tree[2 * j + 1]
    used = 0
    for i in range(lengths_desc.shape[0]):
        need = lengths_desc[i]
        node = 1
        while node < size:
            node = 2 * node if tree[2 * node] >= need else 2 * node + 1
        b = node - size
        bin_of[i] = b
        if b >= used:
            used = b + 1
        tree[node] -= need
        node //= 2
        while node >= 1:
            left = tree[2 * node]
            right = tree[2 * node + 1]
            best = left if left > right else right
            if tree[node] == best:  # the maxima above do not change either
                break
            tree[node] = best
            node //= 2
    return used


@kernel
def _shuffled_counting_sort_impl(lengths, keep, n_keys, seed, descending, order_out, sorted_out):
    # a stable counting sort of ``keep`` by length, then a shuffle inside each length: the same
    # distribution as fairseq's "random permutation, then stable sort", in O(n) sequential passes
    counts = np.zeros(n_keys + 1, dtype=np.int64)
    for i in range(keep.shape[0]):
        counts[lengths[keep[i]]] += 1
    start = np.empty(n_keys + 1, dtype=np.int64)
    total = 0
    for k in range(n_keys + 1):
        key = n_keys - k if descending else k
        start[key] = total
        total += counts[key]
    group_start = start.copy()
    for i in range(keep.shape[0]):
        item = keep[i]
        v = lengths[item]
        order_out[start[v]] = item
        sorted_out[start[v]] = v
        start[v] += 1
    state = np.uint64(seed)
    for key in range(n_keys + 1):
        lo = group_start[key]
        m = counts[key]
        for j in range(m - 1, 0, -1):  # Fisher-Yates within the group, drawing from splitmix64
            state += np.uint64(0x9E3779B97F4A7C15)
            z = state
            z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            z = z ^ (z >> np.uint64(31))
            r = np.int64(((z >> np.uint64(32)) * np.uint64(j + 1)) >> np.uint64(32))  # Lemire's range reduction
            tmp = order_out[lo + j]
            order_out[lo + j] = order_out[lo + r]
            order_out[lo + r] = tmp


@kernel
def _counting_argsort_impl(keys, n_keys, out):
    counts = np.zeros(n_keys + 1, dtype=np.int64)
    for i in range(keys.shape[0]):
        counts[keys[i] + 1] += 1
    for k in range(n_keys):
        counts[k + 1] += counts[k]
    for i in range(keys.shape[0]):
        k = keys[i]
        out[counts[k]] = i
        counts[k] += 1


@kernel
def _gather_runs_impl(src, starts, sizes, out):
    pos = 0
    for b in range(starts.shape[0]):
        s = starts[b]
        for j in range(sizes[b]):
            out[pos + j] = src[s + j]
        pos += sizes[b]


@kernel
def _sort_segments_desc_impl(values, items, segment_ends, out):
    # within each segment, items by value, largest first, ties in their given order
    lo = 0
    for s in range(segment_ends.shape[0]):
        hi = segment_ends[s]
        idx = np.argsort(-values[lo:hi], kind="mergesort")
        for j in range(hi - lo):
            out[lo + j] = items[lo + idx[j]]
        lo = hi


#: lengths up to this go through the counting sort; longer ones through NumPy's sort
COUNTING_SORT_MAX = 1 << 22


def sort_by_length(lengths: np.ndarray, keep: np.ndarray, seed: int, descending: bool = False):
    """(items of ``keep`` sorted by length, their lengths): random order among equal lengths, from ``seed``.

    >>> order, lens = sort_by_length(np.array([3, 1, 3, 2]), np.arange(4), seed=0)
    >>> lens.tolist(), sorted(order[2:].tolist()), order[:2].tolist()
    ([1, 2, 3, 3], [0, 2], [1, 3])
    """
    keep = np.ascontiguousarray(keep, dtype=np.int64)
    sub = lengths[keep] if keep.shape[0] != lengths.shape[0] else lengths
    top = int(sub.max()) if sub.size else 0
    if top > COUNTING_SORT_MAX:
        order = keep[_rng(seed).permutation(keep.shape[0])]
        order = order[_stable_argsort(lengths[order], descending)]
        return order, lengths[order]
    order = np.empty(keep.shape[0], np.int64)
    lens = np.empty(keep.shape[0], np.int64)
    kernel_seed = int(_rng(seed).integers(0, 2 ** 31 - 1))
    _shuffled_counting_sort_impl(np.ascontiguousarray(lengths, np.int64), keep, top, kernel_seed, bool(descending),
                                 order, lens)
    return order, lens


def counting_argsort(keys: np.ndarray, n_keys: int) -> np.ndarray:
    """Stable argsort of integer keys in ``0..n_keys-1`` (O(n)).

    >>> counting_argsort(np.array([2, 0, 2, 1]), 3).tolist()
    [1, 3, 0, 2]
    """
    out = np.empty(keys.shape[0], np.int64)
    if keys.size:
        _counting_argsort_impl(np.ascontiguousarray(keys, np.int64), int(n_keys), out)
    return out


def gather_runs(src: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """``concatenate([src[s:s + n] for s, n in zip(starts, sizes)])`` in one pass.

    >>> gather_runs(np.arange(10), np.array([7, 0]), np.array([2, 3])).tolist()
    [7, 8, 0, 1, 2]
    """
    out = np.empty(int(sizes.sum()), dtype=src.dtype)
    if out.size:
        _gather_runs_impl(src, np.ascontiguousarray(starts, np.int64), np.ascontiguousarray(sizes, np.int64),
                                 out)
    return out


def greedy_batch_ends(lengths, max_tokens=0, max_sequences=0, multiple=1, segment_ends=None) -> np.ndarray:
    """Ends of the batches fairseq's greedy pass cuts from ``lengths`` (in the order given).

    ``0`` means no limit.  ``segment_ends`` forces cuts (megabatches); by
    default the whole array is one segment.

    >>> greedy_batch_ends(np.array([1, 1, 2, 2, 3, 3, 3, 5]), max_tokens=6).tolist()
    [3, 5, 7, 8]
    >>> greedy_batch_ends(np.array([1] * 7), max_sequences=8, multiple=4).tolist()
    [4, 7]
    """
    lengths = np.ascontiguousarray(lengths, dtype=np.int64)
    n = lengths.shape[0]
    segs = np.array([n], np.int64) if segment_ends is None else np.ascontiguousarray(segment_ends, np.int64)
    out = np.empty(n + segs.shape[0] + 1, dtype=np.int64)
    if n == 0:
        return out[:0]
    count = _greedy_ends_impl(lengths, segs, int(max_tokens or 0), int(max_sequences or 0), int(multiple), out)
    return out[:count].copy()


def first_fit_decreasing(lengths_desc, capacity: int) -> tuple[np.ndarray, int]:
    """(bin of each item, number of bins) for items sorted longest first, each at most ``capacity``.

    >>> first_fit_decreasing(np.array([6, 5, 4, 3, 2]), 8)
    (array([0, 1, 2, 1, 0]), 3)
    """
    lengths_desc = np.ascontiguousarray(lengths_desc, dtype=np.int64)
    n = lengths_desc.shape[0]
    if n == 0:
        return np.zeros(0, np.int64), 0
    total = int(lengths_desc.sum())
    # first fit leaves at most one bin half empty or less, so it never opens more than 2 * total / capacity + 1
    bound = min(n, 2 * total // max(capacity, 1) + 2)
    size = 1 << max(int(bound - 1).bit_length(), 0)
    tree = np.empty(2 * size, dtype=np.int32 if capacity < 2 ** 31 else np.int64)
    bin_of = np.empty(n, dtype=np.int64)
    used = _ffd_impl(lengths_desc.astype(tree.dtype), tree.dtype.type(capacity), tree, bin_of)
    return bin_of, int(used)


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

    @property
    def batch_tokens(self) -> np.ndarray:
        """Real (unpadded) rows per batch."""
        return _segment_sums(self.lengths[self.indices], self.offsets)

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
        return _positions(lens, np.concatenate([[0], np.cumsum(lens)]))

    # -- figures
    def stats(self) -> dict:
        """Batches, tokens per batch, padding waste and fill rate of the plan (repeats included).

        ``padding_waste = 1 - tokens / padded_tokens``; ``fill_rate`` is its complement.

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
        return batch_plan(self.lengths, max_sequences=size, mode="random", **keep)

    # -- files
    def save(self, path) -> None:
        """Write the plan as an ``.npz`` (atomically: the target is complete or untouched)."""
        from ..atomic import atomic_open

        meta = {"version": PLAN_VERSION, "mode": self.mode, "options": self.options}
        with atomic_open(path) as f:
            np.savez(f, meta=np.array(json.dumps(meta)), lengths=self.lengths, indices=self.indices,
                     offsets=self.offsets, padded_lengths=self.padded_lengths, repeat=self.repeat)

    @classmethod
    def load(cls, path) -> BatchPlan:
        """Read a plan written by :meth:`save`, checking every array (a bad file is a :class:`LodFormatError`).

        >>> import os, tempfile
        >>> p = os.path.join(tempfile.mkdtemp(), "plan.npz")
        >>> plan = batch_plan(np.array([3, 1, 2]), max_tokens=4)
        >>> plan.save(p)
        >>> BatchPlan.load(p).indices.tolist() == plan.indices.tolist()
        True
        """
        where = os.fspath(path)
        try:
            with np.load(where, allow_pickle=False) as z:
                arrays = {k: z[k] for k in ("meta", "lengths", "indices", "offsets", "padded_lengths", "repeat")}
        except FileNotFoundError:
            from ..errors import LodFileNotFoundError

            raise LodFileNotFoundError(f"{where}: no such file") from None
        except (OSError, ValueError, KeyError, EOFError):
            raise LodFormatError(f"{where}: not a batch plan (an .npz that lodtool batch wrote)") from None
        try:
            meta = json.loads(str(arrays.pop("meta")))
            version, mode, options = meta["version"], meta["mode"], meta["options"]
        except (ValueError, KeyError, TypeError):
            raise LodFormatError(f"{where}: not a batch plan (no readable metadata)") from None
        if version != PLAN_VERSION:
            raise LodFormatError(f"{where}: batch plan version {version!r}; this lodtool reads {PLAN_VERSION}")
        if mode not in MODES or not isinstance(options, dict):
            raise LodFormatError(f"{where}: batch plan of unknown mode {mode!r}")
        plan = cls(mode, *(arrays[k] for k in ("lengths", "indices", "offsets", "padded_lengths", "repeat")),
                   options=options)
        problem = plan._problem()
        if problem:
            raise LodFormatError(f"{where}: damaged batch plan: {problem}")
        return plan

    def _problem(self) -> str | None:
        arrays = {"lengths": self.lengths, "indices": self.indices, "offsets": self.offsets,
                  "padded_lengths": self.padded_lengths}
        for name, a in arrays.items():
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
        if self.indices.size and self.mode != "pack":
            if np.any(self.padded_lengths < _segment_max(self.lengths[self.indices], self.offsets)):
                return "a batch is padded shorter than its longest sequence"
        return None


def _segment_sums(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    cum = np.concatenate([[0], np.cumsum(values, dtype=np.int64)])
    return cum[offsets[1:]] - cum[offsets[:-1]]


def _segment_max(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    out = np.zeros(offsets.shape[0] - 1, np.int64)
    nonempty = offsets[1:] > offsets[:-1]
    if values.size:
        out[nonempty] = np.maximum.reduceat(values, offsets[:-1][nonempty])
    return out


def _positions(lengths: np.ndarray, cu: np.ndarray) -> np.ndarray:
    total = int(cu[-1])
    return np.arange(total, dtype=np.int64) - np.repeat(cu[:-1], lengths)


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
def _rng(seed: int, *keys: int) -> np.random.Generator:
    return np.random.default_rng([int(seed), *map(int, keys)])


def _stable_argsort(values: np.ndarray, descending: bool = False) -> np.ndarray:
    """Stable argsort; small non-negative integers go through NumPy's radix sort (uint16)."""
    if values.size and values.min() >= 0 and values.max() < (1 << 16):
        keys = values.astype(np.uint16)
        if descending:
            keys = np.uint16((1 << 16) - 1) - keys
        return np.argsort(keys, kind="stable")
    return np.argsort(-values if descending else values, kind="stable")


def _check_usage(mode, max_tokens, max_sequences, multiple_of, boundaries, bucket_batch_sizes, num_replicas,
                 rank, max_length, oversize) -> None:
    if mode not in MODES:
        raise LodUsageError(f"mode {mode!r} is not one of {', '.join(MODES)}")
    for name, value in (("max_tokens", max_tokens), ("max_sequences", max_sequences), ("max_length", max_length)):
        if value is not None and (not isinstance(value, (int, np.integer)) or value < 1):
            raise LodUsageError(f"{name} must be a positive integer, not {value!r}")
    if not isinstance(multiple_of, (int, np.integer)) or multiple_of < 1:
        raise LodUsageError(f"multiple_of must be a positive integer, not {multiple_of!r}")
    if max_sequences is not None and max_sequences % multiple_of:
        raise LodUsageError(f"max_sequences={max_sequences} is not a multiple of multiple_of={multiple_of}")
    if not isinstance(num_replicas, (int, np.integer)) or num_replicas < 1:
        raise LodUsageError(f"num_replicas must be a positive integer, not {num_replicas!r}")
    if not isinstance(rank, (int, np.integer)) or not 0 <= rank < num_replicas:
        raise LodUsageError(f"rank must be in 0..{num_replicas - 1}, not {rank!r}")
    if oversize not in ("error", "skip"):
        raise LodUsageError(f"oversize must be 'error' or 'skip', not {oversize!r}")
    if mode == "pack":
        if max_tokens is None:
            raise LodUsageError("mode 'pack' needs max_tokens (the packed row's length)")
        if max_sequences is not None or multiple_of != 1:
            raise LodUsageError("mode 'pack' packs rows by tokens only: max_sequences and multiple_of do not apply")
    elif mode == "buckets":
        if boundaries is None:
            raise LodUsageError("mode 'buckets' needs boundaries (increasing lengths that split the buckets)")
        if bucket_batch_sizes is None and max_tokens is None and max_sequences is None:
            raise LodUsageError("mode 'buckets' needs bucket_batch_sizes, max_tokens or max_sequences")
    elif max_tokens is None and max_sequences is None:
        raise LodUsageError(f"mode {mode!r} needs max_tokens or max_sequences")
    if mode != "buckets" and (boundaries is not None or bucket_batch_sizes is not None):
        raise LodUsageError("boundaries and bucket_batch_sizes apply to mode 'buckets' only")


def batch_plan(source, level: int = 0, max_tokens: int | None = None, max_sequences: int | None = None,
               mode: str = "sorted", seed: int = 0, epoch: int = 0, num_replicas: int = 1, rank: int = 0,
               multiple_of: int = 1, drop_last: bool = False, *, tensor: str | None = None,
               max_length: int | None = None, oversize: str = "error", megabatch_mult: int | None = None,
               boundaries=None, bucket_batch_sizes=None, pad_to_bucket_boundary: bool = False,
               shuffle: bool = True) -> BatchPlan:
    """Plan training batches over the sequences of ``level`` (lengths in data rows), from offsets alone.

    ``source`` is a container path or a sharded folder (only its offsets are
    read, and validated; a folder's shards are one logical tensor), an open lazy tensor (``lodtool.open(p).tensor()``), or an array of lengths.
    ``tensor`` names the tensor of a container that holds several.  The modes
    are described in the module's docstring; ``max_tokens`` bounds a batch's
    *padded* size (``sequences * longest``) or a packed row, ``max_sequences``
    its sequences, and ``multiple_of`` makes batch sizes multiples (fairseq's
    rule: a batch smaller than ``multiple_of`` is allowed only when a limit
    forces it, and the last batch may be smaller).

    ``max_length`` clips every length (the reader truncates those sequences);
    a sequence longer than ``max_tokens`` is an error, or dropped with
    ``oversize="skip"`` (counted in ``stats()["skipped"]``).
    ``shuffle=False`` (``buckets`` only) keeps the file's order as the stream,
    as tf.data does when no shuffle comes before it.  ``drop_last`` drops an
    incomplete last batch (with ``max_sequences`` alone: one smaller than it;
    with ``max_tokens``: one that is not a multiple of ``multiple_of``, as
    fairseq's ``batch_by_size`` does; ``buckets``: every bucket's partial batch,
    as tf.data's ``drop_remainder``) and the batches that would make the
    replicas uneven; without it such a batch is kept, and the replicas are
    evened out by repeats.

    The same ``(seed, epoch)`` gives the same plan on every machine.

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
                 rank, max_length, oversize)
    if not shuffle and mode != "buckets":
        raise LodUsageError("shuffle=False applies to mode 'buckets' only (the other modes define their own order)")
    lengths, about = _source_lengths(source, level, tensor)
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
            where = f"{about['source']}: " if "source" in about else ""
            raise LodUsageError(f"{where}sequence {first} has {int(lengths[first])} rows, more than "
                                f"max_tokens={max_tokens} ({int(too_long.sum())} such); raise max_tokens, set "
                                "max_length, or skip them")
        keep = keep[~too_long]
        options["skipped"] = int(too_long.sum())

    planner = {"sorted": _plan_sorted, "megabatch": _plan_megabatch, "random": _plan_random,
               "pack": _plan_pack, "buckets": _plan_buckets}[mode]
    kwargs: dict[str, Any] = {"multiple_of": multiple_of, "drop_last": drop_last}
    if mode == "megabatch":
        kwargs["megabatch_mult"] = megabatch_mult
        options["megabatch_mult"] = megabatch_mult
    if mode == "buckets":
        kwargs.update(boundaries=boundaries, bucket_batch_sizes=bucket_batch_sizes,
                      pad_to_bucket_boundary=pad_to_bucket_boundary, shuffle=shuffle)
        options.update(shuffle=bool(shuffle), boundaries=[int(b) for b in boundaries], pad_to_bucket_boundary=bool(pad_to_bucket_boundary),
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


def _permuted(keep: np.ndarray, n_all: int, rng: np.random.Generator) -> np.ndarray:
    if keep.shape[0] == n_all:  # nothing skipped: keep is 0..n-1
        return rng.permutation(n_all)
    return keep[rng.permutation(keep.shape[0])]


def _drop_incomplete(ends: np.ndarray, max_tokens, max_sequences, multiple_of, drop_last) -> np.ndarray:
    if not drop_last or not ends.size:
        return ends
    last = int(ends[-1] - (ends[-2] if ends.size > 1 else 0))
    fixed = max_tokens is None
    if (fixed and last < max_sequences) or (not fixed and multiple_of > 1 and last % multiple_of):
        return ends[:-1]
    return ends


def _cut(ordered_lengths, max_tokens, max_sequences, multiple_of, drop_last, segment_ends=None):
    ends = greedy_batch_ends(ordered_lengths, max_tokens or 0, max_sequences or 0, multiple_of, segment_ends)
    ends = _drop_incomplete(ends, max_tokens, max_sequences, multiple_of, drop_last)
    padded = _segment_max(ordered_lengths, np.concatenate([[0], ends]).astype(np.int64))
    return ends, padded


def _plan_sorted(lengths, keep, max_tokens, max_sequences, seed, epoch, *, multiple_of, drop_last):
    # fairseq: the tie-breaking permutation is drawn once from the seed; the batches are shuffled per epoch
    order, ordered = sort_by_length(lengths, keep, seed)
    ends, padded = _cut(ordered, max_tokens, max_sequences, multiple_of, drop_last)
    return order, ends, padded, _rng(seed, epoch).permutation(ends.shape[0])


def _plan_random(lengths, keep, max_tokens, max_sequences, seed, epoch, *, multiple_of, drop_last):
    order = _permuted(keep, lengths.shape[0], _rng(seed, epoch))
    ends, padded = _cut(lengths[order], max_tokens, max_sequences, multiple_of, drop_last)
    return order, ends, padded, np.arange(ends.shape[0])


def _plan_megabatch(lengths, keep, max_tokens, max_sequences, seed, epoch, *, multiple_of, drop_last,
                    megabatch_mult):
    n = keep.shape[0]
    shuffled = _permuted(keep, lengths.shape[0], _rng(seed, epoch))
    if max_sequences is not None:
        batch = max_sequences
    else:  # a token budget only: the batch size it gives sequences of the mean length
        batch = max(1, max_tokens // max(1, math.ceil(float(lengths[keep].mean()) if n else 1)))
    if megabatch_mult is None:
        megabatch_mult = max(min(n // (batch * 4), 50), 1)  # transformers' default
    elif not isinstance(megabatch_mult, (int, np.integer)) or megabatch_mult < 1:
        raise LodUsageError(f"megabatch_mult must be a positive integer, not {megabatch_mult!r}")
    size = megabatch_mult * batch
    order, seg_ends = megabatch_order(lengths, shuffled, size)
    ends, padded = _cut(lengths[order], max_tokens, max_sequences, multiple_of, drop_last, seg_ends)
    return order, ends, padded, np.arange(ends.shape[0])


def megabatch_order(lengths: np.ndarray, shuffled: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """transformers' ``get_length_grouped_indices`` after its permutation: (order, megabatch ends).

    ``shuffled`` (the permuted indices) is cut into megabatches of ``size``; each
    is sorted by length, longest first (ties keep their order); then the first
    element of the first megabatch trades places with the first element of the
    megabatch that holds the longest sequence, which so lands in the first batch.

    >>> order, ends = megabatch_order(np.array([1, 5, 2, 9, 3, 4]), np.array([0, 1, 2, 3, 4, 5]), 3)
    >>> order.tolist(), ends.tolist()
    ([3, 2, 0, 1, 5, 4], [3, 6])
    """
    shuffled = np.ascontiguousarray(shuffled, dtype=np.int64)
    n = shuffled.shape[0]
    seg_ends = np.minimum(np.arange(size, n + size, size, dtype=np.int64), n)
    order = np.empty(n, np.int64)
    if n:
        _sort_segments_desc_impl(np.ascontiguousarray(lengths[shuffled], dtype=np.int64), shuffled, seg_ends, order)
        heads = np.concatenate([[0], seg_ends[:-1]])
        longest = int(np.argmax(lengths[order[heads]]))  # the first of the maxima, as torch.argmax
        order[0], order[heads[longest]] = order[heads[longest]], order[0]
    return order, seg_ends


def _plan_pack(lengths, keep, max_tokens, max_sequences, seed, epoch, *, multiple_of, drop_last):
    order, ordered = sort_by_length(lengths, keep, seed, descending=True)  # ties in random order
    bin_of, n_bins = first_fit_decreasing(ordered, max_tokens)
    order = order[counting_argsort(bin_of, n_bins)]
    ends = np.cumsum(np.bincount(bin_of, minlength=n_bins)).astype(np.int64)
    padded = np.full(ends.shape[0], max_tokens, dtype=np.int64)
    return order, ends, padded, _rng(seed, epoch).permutation(ends.shape[0])


def _plan_buckets(lengths, keep, max_tokens, max_sequences, seed, epoch, *, multiple_of, drop_last, boundaries,
                  bucket_batch_sizes, pad_to_bucket_boundary, shuffle):
    bounds = np.asarray(boundaries, dtype=np.int64) if len(boundaries) else np.zeros(0, np.int64)
    if bounds.ndim != 1 or not bounds.size or np.any(bounds < 1) or np.any(np.diff(bounds) <= 0):
        raise LodUsageError(f"boundaries must be increasing positive lengths, not {list(boundaries)!r}")
    n_buckets = bounds.shape[0] + 1
    stream = _permuted(keep, lengths.shape[0], _rng(seed, epoch)) if shuffle else keep
    lens = lengths[stream]
    bucket = np.searchsorted(bounds, lens, side="right")
    longest_in_data = int(lens.max()) if lens.size else 1
    if pad_to_bucket_boundary and lens.size and longest_in_data >= bounds[-1]:
        raise LodUsageError(f"pad_to_bucket_boundary needs every length below the last boundary ({int(bounds[-1])}); "
                            f"a sequence has {longest_in_data} rows")
    if bucket_batch_sizes is not None:
        sizes = np.asarray(bucket_batch_sizes, dtype=np.int64)
        if sizes.shape != (n_buckets,) or np.any(sizes < 1):
            raise LodUsageError(f"bucket_batch_sizes needs {n_buckets} positive sizes (one more than the boundaries)")
    else:  # the token budget over each bucket's longest possible sequence
        top = np.concatenate([bounds - 1, [max(longest_in_data, int(bounds[-1]))]])
        sizes = np.full(n_buckets, np.iinfo(np.int64).max, dtype=np.int64)
        if max_tokens is not None:
            sizes = np.maximum(max_tokens // np.maximum(top, 1), 1)
        if max_sequences is not None:
            sizes = np.minimum(sizes, max_sequences)
        if multiple_of > 1:
            sizes = np.maximum(sizes // multiple_of * multiple_of, np.minimum(sizes, multiple_of))
    n = stream.shape[0]
    by_bucket = counting_argsort(bucket, n_buckets)  # stream positions, grouped by bucket, in stream order
    counts = np.bincount(bucket, minlength=n_buckets)
    first = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    # the batches of each bucket, in (bucket, k) order: their starts, sizes and the stream position that fills them
    per_bucket = -(-counts // sizes)
    batch_bucket = np.repeat(np.arange(n_buckets), per_bucket)
    k = _positions(per_bucket, np.concatenate([[0], np.cumsum(per_bucket)]))
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
        padded = _segment_max(lengths[order], np.concatenate([[0], ends]).astype(np.int64))
    return order, ends, padded, np.arange(ends.shape[0])


def as_plan(plan=None, source=None, **plan_options) -> BatchPlan:
    """A :class:`BatchPlan` from a plan, a saved plan's path, or the options of :func:`batch_plan`.

    >>> as_plan(None, np.array([2, 3]), max_sequences=1).batch_sizes.tolist()
    [1, 1]
    """
    if isinstance(plan, BatchPlan):
        if plan_options:
            raise LodUsageError(f"give a plan or plan options, not both ({', '.join(sorted(plan_options))})")
        return plan
    if plan is not None:
        if plan_options:
            raise LodUsageError(f"give a plan or plan options, not both ({', '.join(sorted(plan_options))})")
        return BatchPlan.load(plan)
    return batch_plan(source, **plan_options)


# -- reading batches -----------------------------------------------------------------------------------
class BatchReader:
    """Reads a plan's batches from a container into buffers it reuses; opens the file on first use.

    The offsets are read (and validated) once.  Data is read in whole HDF5
    chunks, only those that hold a batch's sequences, consecutive ones in one
    read, and kept in a cache of decoded chunks of ``cache_bytes`` (a corpus that
    fits is read from disk once).  Each batch is gathered from there into output
    buffers sized once for the plan's largest batch: **a batch is valid until the
    next one is read**; copy what you keep.

    ``output``: ``"padded"`` (``values [B, T, ...]``, ``mask [B, T]``,
    ``lengths``), ``"jagged-numpy"`` (flat ``values`` and int64 ``offsets``) or
    ``"varlen"`` (flat ``values``, int32 ``cu_seqlens``, ``position_ids``,
    ``max_seqlen``).  Every batch also has ``indices`` (the source sequences),
    ``batch`` (its number in the plan) and ``repeat``.  Sequences the plan
    clipped to ``max_length`` are truncated: ``truncate="tail"`` (the default)
    drops their end, ``"head"`` their start.

    ``reuse_buffers=False`` allocates fresh arrays for every batch instead (for
    batches kept past the next read, or to measure what the reuse saves).

    The reader holds an open h5py file; it is never pickled (a copy sent to
    another process opens the file again there, on first use), and a forked
    child opens its own instead of reading through the parent's.
    """

    def __init__(self, path, plan: BatchPlan, *, output: str = "padded", truncate: str | None = None,
                 pad_value=0, tensor: str | None = None, cache_bytes: int = DEFAULT_CACHE_BYTES,
                 reuse_buffers: bool = True):
        if output not in OUTPUTS:
            raise LodUsageError(f"output {output!r} is not one of {', '.join(OUTPUTS)}")
        if truncate is not None and truncate not in TRUNCATE:
            raise LodUsageError(f"truncate must be 'head' or 'tail', not {truncate!r}")
        if not isinstance(cache_bytes, (int, np.integer)) or cache_bytes < 0:
            raise LodUsageError(f"cache_bytes must be a non-negative integer, not {cache_bytes!r}")
        self.path = os.fspath(path)
        self.plan = plan
        self.output = output
        self.truncate = truncate or "tail"
        self.pad_value = pad_value
        self.tensor_name = tensor if tensor is not None else plan.options.get("tensor")
        self.cache_bytes = int(cache_bytes)
        self.reuse_buffers = bool(reuse_buffers)
        self._file = None

    # pickling (DataLoader workers, multiprocessing) carries the settings, never the open file
    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_file"] = None
        for key in [k for k in state if k.startswith("_c_")]:
            del state[key]
        return state

    def close(self) -> None:
        """Close the file (a later read opens it again)."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> BatchReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __len__(self) -> int:
        return len(self.plan)

    def _open(self) -> None:
        f = _open_container(self.path)
        try:
            t = f.tensor(self.tensor_name)
            rows = sequence_rows(t, self.plan.options.get("level", 0))
            if rows.shape[0] - 1 != self.plan.n_sequences:
                raise LodUsageError(f"{self.path}: the plan is for {self.plan.n_sequences:,} sequences; tensor "
                                    f"{t.name!r} has {rows.shape[0] - 1:,} at level {self.plan.options.get('level', 0)}")
            full = np.diff(rows)
            if np.any(self.plan.lengths > full):
                bad = int(np.argmax(self.plan.lengths > full))
                raise LodUsageError(f"{self.path}: the plan's sequence {bad} has {int(self.plan.lengths[bad])} rows; "
                                    f"the file's has {int(full[bad])} (a plan made for another file?)")
        except BaseException:
            f.close()
            raise
        try:  # a pad value the data's dtype cannot hold would be changed silently
            pad = np.asarray(self.pad_value, dtype=t.dtype)
            exact = pad.ndim == 0 and pad.item() == self.pad_value
        except (OverflowError, ValueError, TypeError):
            exact = False
        if not exact:
            f.close()
            raise LodUsageError(f"{self.path}: pad value {self.pad_value!r} does not fit tensor {t.name!r} ({t.dtype})")
        self._c_tensor = t
        self._c_starts = rows[:-1]
        self._c_full = full
        self._c_elem = t.element_shape
        self._c_dtype = t.dtype
        n_rows = t.n_rows
        row_bytes = max(t.dtype.itemsize * int(np.prod(t.element_shape, dtype=np.int64)), 1)
        block = _chunk_rows(t) or max(1, (1 << 20) // row_bytes)
        n_blocks = -(-n_rows // block) if n_rows else 0
        self._c_block = block
        self._c_n_rows = n_rows
        self._c_slot_of = np.full(max(n_blocks, 1), -1, dtype=np.int64)
        plan = self.plan
        sizes = plan.batch_sizes
        tokens = plan.batch_tokens
        self._c_n_blocks = n_blocks
        self._c_slots = max(min(n_blocks, self.cache_bytes // (block * row_bytes)), 1)  # grows if a batch needs more
        self._c_block_of_slot = np.full(self._c_slots, -1, dtype=np.int64)
        self._c_next_slot = 0
        self._c_cache = None  # allocated on the first read
        max_b = int(sizes.max()) if sizes.size else 0
        max_padded = int((sizes * np.maximum(plan.padded_lengths, 0)).max()) if sizes.size else 0
        if plan.mode == "pack":  # padded output pads to the longest sequence of each row
            max_padded = int((sizes * _segment_max(plan.lengths[plan.indices], plan.offsets)).max()) if sizes.size \
                else 0
        max_tokens = int(tokens.max()) if tokens.size else 0
        elem = int(np.prod(self._c_elem, dtype=np.int64))
        # buffers sized once, for the plan's largest batch
        self._c_capacity = {"values": elem * (max_padded if self.output == "padded" else max_tokens),
                            "mask": max_padded, "lengths": max_b, "offsets": max_b + 1, "cu_seqlens": max_b + 1,
                            "position_ids": max_tokens}
        self._c_out: dict[str, np.ndarray] = {}
        self._c_pid = os.getpid()
        self._file = f

    def _buffer(self, name: str, shape: tuple, dtype) -> np.ndarray:
        size = int(np.prod(shape, dtype=np.int64))
        if not self.reuse_buffers:
            return np.empty(shape, dtype=dtype)
        buf = self._c_out.get(name)
        if buf is None or buf.shape[0] < size or buf.dtype != np.dtype(dtype):
            buf = self._c_out[name] = np.empty(max(size, self._c_capacity.get(name, 0), 1), dtype=dtype)
        return buf[:size].reshape(shape)

    def _ensure_blocks(self, blocks: np.ndarray) -> None:
        slot_of = self._c_slot_of
        missing = blocks[slot_of[blocks] < 0]
        if not missing.size:
            return
        block, t = self._c_block, self._c_tensor
        if blocks.shape[0] > self._c_slots:  # one batch needs more chunks than the cache holds: grow it
            grown = min(max(blocks.shape[0], 2 * self._c_slots), self._c_n_blocks)
            self._c_block_of_slot = np.concatenate([self._c_block_of_slot,
                                                    np.full(grown - self._c_slots, -1, dtype=np.int64)])
            if self._c_cache is not None:
                cache = np.empty((grown * block,) + self._c_elem, dtype=self._c_dtype)
                cache[:self._c_cache.shape[0]] = self._c_cache
                self._c_cache = cache
            self._c_slots = grown
        if self._c_cache is None:
            self._c_cache = np.empty((self._c_slots * block,) + self._c_elem, dtype=self._c_dtype)
        pinned = set(blocks.tolist())
        slots = []
        taken: set[int] = set()
        for _ in range(missing.shape[0]):  # FIFO over the slots, never evicting a block this batch needs
            while True:
                s = self._c_next_slot
                self._c_next_slot = (s + 1) % self._c_slots
                old = int(self._c_block_of_slot[s])
                if s not in taken and (old < 0 or old not in pinned):
                    break
            taken.add(s)
            if old >= 0:
                slot_of[old] = -1
            slots.append(s)
        slots = np.array(slots, dtype=np.int64)
        # consecutive missing blocks are read in one call (one hyperslab)
        breaks = np.flatnonzero(np.diff(missing) != 1) + 1
        for run_blocks, run_slots in zip(np.split(missing, breaks), np.split(slots, breaks)):
            begin = int(run_blocks[0]) * block
            end = min((int(run_blocks[-1]) + 1) * block, self._c_n_rows)
            rows = t.read_rows(begin, end)
            for k, (b, s) in enumerate(zip(run_blocks.tolist(), run_slots.tolist())):
                part = rows[k * block:(k + 1) * block]
                self._c_cache[s * block:s * block + part.shape[0]] = part
                slot_of[b] = s
                self._c_block_of_slot[s] = b

    def read(self, i: int) -> dict:
        """Batch ``i`` of the plan (arrays valid until the next read)."""
        if self._file is None or self._c_pid != os.getpid():
            # a forked child (a DataLoader worker) never reads through its parent's HDF5 handle: it opens its own
            self._file = None
            self._open()
        plan = self.plan
        if not -len(plan) <= i < len(plan):
            raise LodUsageError(f"batch {i} is outside the plan's {len(plan)} batches")
        i = int(i) % len(plan)
        seqs = plan.batch(i)
        lens = plan.lengths[seqs]
        starts = self._c_starts[seqs]
        if self.truncate == "head":
            starts = starts + (self._c_full[seqs] - lens)
        n_seq = seqs.shape[0]
        cu = np.zeros(n_seq + 1, dtype=np.int64)
        np.cumsum(lens, out=cu[1:])
        total = int(cu[-1])
        seq_of = np.repeat(np.arange(n_seq, dtype=np.int64), lens)
        pos = np.arange(total, dtype=np.int64) - cu[:-1][seq_of]
        rows = starts[seq_of] + pos
        block = self._c_block
        if total:
            first, last = starts // block, (starts + np.maximum(lens, 1) - 1) // block
            spans = np.where(lens > 0, last - first + 1, 0)
            all_blocks = np.repeat(first, spans) + _positions(spans, np.concatenate([[0], np.cumsum(spans)]))
            self._ensure_blocks(np.unique(all_blocks))
            src = self._c_slot_of[rows // block] * block + rows % block
        else:
            src = rows
        out = {"indices": seqs, "batch": i, "repeat": bool(plan.repeat[i])}
        elem = self._c_elem
        if self.output == "padded":
            width = int(lens.max()) if n_seq else 0
            if plan.mode != "pack":
                width = max(width, int(plan.padded_lengths[i]))
            values = self._buffer("values", (n_seq, width) + elem, self._c_dtype)
            values.fill(self.pad_value)
            if total:
                flat = values.reshape((n_seq * width,) + elem)
                flat[seq_of * width + pos] = self._c_cache[src]
            mask = self._buffer("mask", (n_seq, width), np.bool_)
            np.less(np.arange(width)[None, :], lens[:, None], out=mask)
            lengths = self._buffer("lengths", (n_seq,), np.int64)
            lengths[:] = lens
            out.update(values=values, mask=mask, lengths=lengths)
            return out
        values = self._buffer("values", (total,) + elem, self._c_dtype)
        if total:
            np.take(self._c_cache, src, axis=0, out=values)
        lengths = self._buffer("lengths", (n_seq,), np.int64)
        lengths[:] = lens
        out.update(values=values, lengths=lengths)
        if self.output == "jagged-numpy":
            offsets = self._buffer("offsets", (n_seq + 1,), np.int64)
            offsets[:] = cu
            out["offsets"] = offsets
            return out
        cu32 = self._buffer("cu_seqlens", (n_seq + 1,), np.int32)
        cu32[:] = cu
        position_ids = self._buffer("position_ids", (total,), np.int64)
        position_ids[:] = pos
        out.update(cu_seqlens=cu32, position_ids=position_ids, max_seqlen=int(lens.max()) if n_seq else 0)
        return out

    def __iter__(self) -> Iterator[dict]:
        for i in range(len(self.plan)):
            yield self.read(i)

    def iter_batches(self, batch_ids) -> Iterator[dict]:
        """The batches ``batch_ids`` of the plan, in that order (for splitting a plan among workers)."""
        for i in batch_ids:
            yield self.read(int(i))


def batches(path, plan=None, *, output: str = "padded", truncate: str | None = None, pad_value=0,
            tensor: str | None = None, cache_bytes: int = DEFAULT_CACHE_BYTES, **plan_options) -> Iterator[dict]:
    """NumPy batches of a container for any framework: padded + mask, jagged, or varlen (flat + cu_seqlens).

    ``plan`` is a :class:`BatchPlan`, the path of a saved one, or ``None`` with
    the options of :func:`batch_plan` (``max_tokens=...``, ``mode=...``).  Each
    batch is a dict of arrays read with partial reads into buffers reused from
    batch to batch: **a yielded batch is valid until the next one**; copy what
    you keep.  See :class:`BatchReader` for the outputs.

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
    if not isinstance(plan, BatchPlan):
        plan = as_plan(plan, path, tensor=tensor, **plan_options) if plan is None else as_plan(plan, **plan_options)
    reader = BatchReader(path, plan, output=output, truncate=truncate, pad_value=pad_value, tensor=tensor,
                         cache_bytes=cache_bytes)
    with reader:
        yield from reader


def plan_report(plan: BatchPlan, bins: int = 12) -> dict:
    """The plan's figures beside ``random``'s at the same mean batch size, and the length histogram.

    >>> r = plan_report(batch_plan(np.arange(1, 200), max_tokens=512))
    >>> sorted(r), r["plan"]["padding_waste"] < r["random"]["padding_waste"]
    (['histogram', 'plan', 'random'], True)
    """
    counts, edges = plan.histogram(bins)
    return {"plan": plan.stats(), "random": plan.random_baseline().stats(),
            "histogram": {"edges": edges.tolist(), "counts": counts.tolist()}}


def write_batches(path, plan, out_dir, *, output: str = "padded", truncate: str | None = None, pad_value=0,
                  tensor: str | None = None, progress=None) -> dict:
    """Write every batch of ``plan`` as ``out_dir/batch_NNNNNN.npz`` (each file atomically), for file-fed trainers.

    Each NPZ holds the arrays :func:`batches` yields (``values``, ``mask``,
    ``lengths``, ``indices``, ... by ``output``) plus ``batch`` and ``repeat``.
    ``progress(n)`` is called after each file with the bytes written so far.

    >>> import os, tempfile, numpy as np, lodtool
    >>> d = tempfile.mkdtemp()
    >>> p = os.path.join(d, "c.lod.h5")
    >>> lodtool.save(p, lodtool.LoDTensor(np.arange(6), recursive_sequence_lengths=[[2, 4]]))
    >>> write_batches(p, batch_plan(p, max_sequences=1), os.path.join(d, "out"))["files"]
    2
    >>> sorted(np.load(os.path.join(d, "out", "batch_000000.npz")))
    ['batch', 'indices', 'lengths', 'mask', 'repeat', 'values']
    """
    from ..atomic import atomic_open

    plan = as_plan(plan)
    out_dir = os.fspath(out_dir)
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise LodUsageError(f"{out_dir}: exists and is not a folder")
    width = max(6, len(str(max(len(plan) - 1, 0))))
    written = 0
    nbytes = 0
    reader = BatchReader(path, plan, output=output, truncate=truncate, pad_value=pad_value, tensor=tensor)
    with reader:
        reader._open()  # a plan made for another file fails here, before the folder is made
        os.makedirs(out_dir, exist_ok=True)
        for b in reader:
            target = os.path.join(out_dir, f"batch_{b['batch']:0{width}d}.npz")
            arrays = {k: (np.asarray(v) if not isinstance(v, np.ndarray) else v) for k, v in b.items()}
            with atomic_open(target) as f:
                np.savez(f, **arrays)
            nbytes += os.path.getsize(target)
            written += 1
            if progress is not None:
                progress(nbytes)
    return {"directory": out_dir, "files": written, "bytes": nbytes, "output": output}


@dataclass
class BatchResult:
    """What :func:`batch` did: the plan, where it was saved, the batches written, the report."""

    plan: BatchPlan
    saved: str | None = None
    written: dict | None = None
    report: dict | None = None


def batch(path, plan=None, *, tensor: str | None = None, save_to=None, write_to=None, layout: str = "padded",
          truncate: str | None = None, pad_value=0, report: bool = False, progress=None,
          **plan_options) -> BatchResult:
    """``lodtool batch``: plan a container's training batches (or load a plan), then save, report or write them.

    ``plan`` is a :class:`BatchPlan`, a saved plan's path, or ``None`` with the
    options of :func:`batch_plan`.  ``save_to`` writes the plan (``.npz``);
    ``write_to`` writes each batch as an NPZ into that folder
    (:func:`write_batches`, ``layout`` as ``output`` there, padded with
    ``pad_value``); ``report=True``
    adds :func:`plan_report`'s figures.

    >>> import os, tempfile, numpy as np, lodtool
    >>> d = tempfile.mkdtemp()
    >>> p = os.path.join(d, "c.lod.h5")
    >>> lodtool.save(p, lodtool.LoDTensor(np.arange(10), recursive_sequence_lengths=[[3, 1, 4, 2]]))
    >>> r = batch(p, max_tokens=6, save_to=os.path.join(d, "plan.npz"), report=True)
    >>> len(r.plan), r.report["plan"]["tokens"], os.path.exists(r.saved)
    (3, 10, True)
    """
    if plan is None:
        plan = batch_plan(path, tensor=tensor, **plan_options)
    else:
        plan = as_plan(plan, **plan_options)
    result = BatchResult(plan)
    if save_to is not None:
        plan.save(save_to)
        result.saved = os.fspath(save_to)
    if write_to is not None:
        result.written = write_batches(path, plan, write_to, output=layout, truncate=truncate, pad_value=pad_value,
                                       tensor=tensor, progress=progress)
    if report:
        result.report = plan_report(plan)
    return result


__all__ = ["MODES", "OUTPUTS", "batch", "BatchResult", "plan_report", "write_batches", "BatchPlan", "BatchReader", "batch_plan", "batches", "as_plan", "sequence_rows",
           "greedy_batch_ends", "first_fit_decreasing", "length_bins"]
