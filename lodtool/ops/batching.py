"""Kernels of the batch planner (:mod:`lodtool.tasks._batch`): each Numba kernel beside its NumPy reference.

The planner works on the sequences' lengths alone.  Here are its array passes:
fairseq's greedy cut (:func:`greedy_batch_ends`), first-fit-decreasing packing
(:func:`first_fit_decreasing`), a length sort with random ties
(:func:`sort_by_length`), transformers' megabatch order
(:func:`megabatch_order`), and the small gathers between them.  Every random
draw comes from :func:`plan_rng`, so a plan is the same for the same seed on
every machine.

>>> import numpy as np
>>> greedy_batch_ends(np.array([1, 1, 2, 2, 3, 3, 3, 5]), max_tokens=6).tolist()
[3, 5, 7, 8]
"""

from __future__ import annotations

import numpy as np

from .._jit import kernel

#: lengths up to this go through the counting sort; longer ones through NumPy's sort
COUNTING_SORT_MAX = 1 << 22
#: an empty int64 array: a kernel's output or input that is not wanted
_NO_INTS = np.zeros(0, np.int64)
#: the batches of :func:`gather_batch`'s one-batch plan
_FIRST_BATCH = np.zeros(1, np.int64)
#: what :func:`gather_batch` returns for a batch that does not fit its outputs or names rows its source does not have
#: (nothing is read or written past an array)
GATHER_MISMATCH = int(np.iinfo(np.int64).min)


def plan_rng(seed: int, *keys: int) -> np.random.Generator:
    """The generator of every random draw of a plan: from ``seed`` and the draw's keys (the epoch).

    >>> plan_rng(0, 1).permutation(4).tolist() == plan_rng(0, 1).permutation(4).tolist()
    True
    """
    return np.random.default_rng([int(seed), *map(int, keys)])


def stable_argsort(values: np.ndarray, descending: bool = False) -> np.ndarray:
    """Stable argsort; small non-negative integers go through NumPy's radix sort (uint16).

    >>> stable_argsort(np.array([3, 1, 3, 2]), descending=True).tolist()
    [0, 2, 3, 1]
    """
    if values.size and values.min() >= 0 and values.max() < (1 << 16):
        keys = values.astype(np.uint16)
        if descending:
            keys = np.uint16((1 << 16) - 1) - keys
        return np.argsort(keys, kind="stable")
    return np.argsort(-values if descending else values, kind="stable")


def segment_sums(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Sum of each segment ``values[offsets[i]:offsets[i + 1]]`` (int64).

    >>> segment_sums(np.array([1, 2, 3]), np.array([0, 2, 2, 3])).tolist()
    [3, 0, 3]
    """
    cum = np.concatenate([[0], np.cumsum(values, dtype=np.int64)])
    return cum[offsets[1:]] - cum[offsets[:-1]]


def segment_max(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Largest value of each segment (0 for an empty one); values past the last offset belong to none.

    >>> segment_max(np.array([1, 5, 3]), np.array([0, 2, 2, 3])).tolist()
    [5, 0, 3]
    >>> segment_max(np.array([1, 5, 3]), np.array([0, 1])).tolist()
    [1]
    """
    out = np.zeros(offsets.shape[0] - 1, np.int64)
    nonempty = offsets[1:] > offsets[:-1]
    if values.size and offsets.shape[0] > 1:  # reduceat runs its last segment to the array's end: cut it there
        out[nonempty] = np.maximum.reduceat(values[:offsets[-1]], offsets[:-1][nonempty])
    return out


def _first_short_batch_reference(lengths, indices, offsets, padded):
    """:func:`first_short_batch` in NumPy."""
    short = np.flatnonzero(padded < segment_max(lengths[indices], offsets))
    return int(short[0]) if short.size else -1


@kernel
def _first_short_batch_impl(lengths, indices, offsets, padded):
    for b in range(offsets.shape[0] - 1):
        longest = 0
        for j in range(offsets[b], offsets[b + 1]):
            v = lengths[indices[j]]
            if v > longest:
                longest = v
        if padded[b] < longest:
            return b
    return -1


def first_short_batch(lengths, indices, offsets, padded) -> int:
    """The first batch padded to fewer rows than its longest sequence has, or -1 where there is none.

    Batch ``b`` is sequences ``indices[offsets[b]:offsets[b + 1]]`` of
    ``lengths``, padded to ``padded[b]`` rows; the offsets must run from 0 to
    the number of indices, and the indices lie inside ``lengths`` (the caller
    checks both).  One compiled pass, without an array the size of the indices.

    >>> first_short_batch(np.array([3, 1, 4]), np.array([1, 0, 2]), np.array([0, 2, 3]), np.array([3, 3]))
    1
    """
    arrays = [np.ascontiguousarray(a, np.int64) for a in (lengths, indices, offsets, padded)]  # one compiled version
    return int(_first_short_batch_impl(*arrays))


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


#: lengths below this are counted in a dense array (512 KiB); longer ones in a sorted sparse table
DENSE_LENGTHS = 1 << 16
#: bytes :class:`LengthCounts` takes with no long lengths: its dense table and one block's counts beside it
LENGTH_COUNTS_BYTES = 2 * DENSE_LENGTHS * 8


class LengthCounts:
    """How many sequences have each length, fed a block of lengths (or of runs) at a time (memory: the distinct
    lengths).  Lengths below ``dense`` are counted in a table of that many counts, the others in a sorted sparse one
    (``dense=0``: a small count of few lengths).

    >>> c = LengthCounts()
    >>> c.add(np.array([3, 0, 3])); c.add(np.array([1 << 20, 0])); c.add_runs(np.array([3, 9]), np.array([1, 2]))
    >>> [a.tolist() for a in c.runs()]
    [[0, 3, 9, 1048576], [2, 3, 2, 1]]
    """

    def __init__(self, dense: int = DENSE_LENGTHS):
        self._dense = np.zeros(dense, np.int64)
        self._values = np.zeros(0, np.int64)
        self._counts = np.zeros(0, np.int64)

    def add(self, lengths: np.ndarray) -> None:
        lengths = np.asarray(lengths, np.int64)
        dense = self._dense.shape[0]
        long = lengths >= dense
        if dense:
            self._dense += np.bincount(lengths[~long], minlength=dense)
        if long.any():
            self._add_sparse(lengths[long], np.ones(int(long.sum()), np.int64))

    def add_runs(self, values: np.ndarray, counts: np.ndarray) -> None:
        """Add ``counts[k]`` sequences of length ``values[k]`` (distinct lengths, as :meth:`runs` gives them)."""
        long = values >= self._dense.shape[0]
        self._dense[values[~long]] += counts[~long]
        if long.any():
            self._add_sparse(values[long], counts[long])

    def _add_sparse(self, values: np.ndarray, counts: np.ndarray) -> None:
        values, inverse = np.unique(np.concatenate([self._values, values]), return_inverse=True)
        self._counts = np.bincount(inverse, weights=np.concatenate([self._counts, counts])).astype(np.int64)
        self._values = values  # the counts exact below 2**53

    def runs(self) -> tuple[np.ndarray, np.ndarray]:
        """(lengths ascending, their counts), counts all positive."""
        short = np.flatnonzero(self._dense)
        return np.concatenate([short, self._values]), np.concatenate([self._dense[short], self._counts])


#: the figures :func:`greedy_run_figures` gives, in the order of its result
RUN_FIGURES = ("batches", "tokens", "padded", "sequences", "min_tokens", "max_tokens", "min_padded", "max_padded",
               "min_sequences", "max_sequences", "last_sequences", "last_tokens", "last_padded")


def _greedy_run_figures_reference(values, counts, max_tokens, max_sequences, multiple):
    """:func:`greedy_run_figures` by expanding the runs and cutting them with :func:`greedy_batch_ends`."""
    lengths = np.repeat(np.asarray(values, np.int64), np.asarray(counts, np.int64))
    ends = greedy_batch_ends(lengths, max_tokens, max_sequences, multiple)
    offsets = np.concatenate([[0], ends]).astype(np.int64)
    sizes = np.diff(offsets)
    tokens, padded = segment_sums(lengths, offsets), segment_max(lengths, offsets) * sizes
    head = slice(0, max(ends.shape[0] - 1, 0))
    out = [ends.shape[0] - 1 if ends.size else 0]
    out += [int(a[head].sum()) for a in (tokens, padded, sizes)]
    for a in (tokens, padded, sizes):
        out += [int(a[head].min()), int(a[head].max())] if ends.shape[0] > 1 else [0, 0]
    out += [int(sizes[-1]), int(tokens[-1]), int(padded[-1])] if ends.size else [0, 0, 0]
    return np.array(out, np.int64)


#: the figures array's slots after :data:`RUN_FIGURES`: where the last closed batch ends, and the lengths' sum there
_LAST_END, _LAST_PREFIX = len(RUN_FIGURES), len(RUN_FIGURES) + 1


@kernel(inline="always")
def _fold_batch(out, tokens, padded, sequences):
    # one closed batch into the figures out[0..9] (RUN_FIGURES' order): count, sums, then (min, max) pairs
    out[0] += 1
    out[1] += tokens
    out[2] += padded
    out[3] += sequences
    k = 4
    for value in (tokens, padded, sequences):
        out[k] = min(out[k], value)
        out[k + 1] = max(out[k + 1], value)
        k += 2


@kernel(inline="always")
def _close_batch(ends, n, figures, end, end_prefix, end_value):
    # batch n ends at `end` (the lengths before it sum to end_prefix, its last is end_value): its end into `ends`,
    # and into the figures the batch before it, folded, while this one is kept apart as the last
    if ends.shape[0]:
        ends[n] = end
    if figures.shape[0]:
        if n:
            _fold_batch(figures, figures[11], figures[12], figures[10])
        sequences = end - figures[_LAST_END]
        figures[10] = sequences
        figures[11] = end_prefix - figures[_LAST_PREFIX]
        figures[12] = end_value * sequences  # lengths ascending: a batch's last is its longest
        figures[_LAST_END] = end
        figures[_LAST_PREFIX] = end_prefix
    return n + 1


@kernel
def _greedy_impl(values, counts, segment_ends, max_tokens, max_sequences, multiple, ends, figures):
    # fairseq's greedy pass (see _greedy_ends_reference) over lengths given as runs: values[r] counts[r] times
    # (counts empty: each once), cut at the positions segment_ends; each batch's end goes into `ends` and, where
    # `figures` is not empty, its figures (RUN_FIGURES, then _LAST_END and _LAST_PREFIX) are folded there
    if figures.shape[0]:
        figures[:] = 0
        figures[4] = figures[6] = figures[8] = np.iinfo(np.int64).max  # the minima, until a batch closes
    n_out = 0
    pos = prefix = prev_v = v = 0
    r = left = 0
    for s in range(segment_ends.shape[0]):
        seg_start = pos
        seg_end = segment_ends[s]
        batch_start = batch_end = pos
        end_prefix = prefix
        end_value = batch_max = tail_max = 0
        while pos < seg_end:
            if counts.shape[0]:
                while left == 0:
                    v = values[r]
                    left = counts[r]
                    r += 1
                left -= 1
            else:
                v = values[pos]
            if v > tail_max:
                tail_max = v
            count = pos + 1 - batch_start
            new_max = batch_max if batch_max > tail_max else tail_max
            overflow = (max_sequences > 0 and count > max_sequences) or \
                (max_tokens > 0 and count * new_max > max_tokens)
            if overflow:
                if max_tokens > 0 and tail_max * (pos + 1 - batch_end) > max_tokens:
                    n_out = _close_batch(ends, n_out, figures, batch_end, end_prefix, end_value)
                    batch_end = pos
                    end_prefix = prefix
                    end_value = prev_v
                    tail_max = v
                n_out = _close_batch(ends, n_out, figures, batch_end, end_prefix, end_value)
                batch_start = batch_end
                new_max = tail_max
            count = pos + 1 - batch_start
            prefix += v
            if overflow or count < multiple or count % multiple == 0:
                batch_end = pos + 1
                end_prefix = prefix
                end_value = v
                batch_max = new_max
                tail_max = 0
            prev_v = v
            pos += 1
        if pos > seg_start:  # the segment's end: the running batch, then the tail after it
            n_out = _close_batch(ends, n_out, figures, batch_end, end_prefix, end_value)
            if batch_end != pos:
                n_out = _close_batch(ends, n_out, figures, pos, prefix, prev_v)
    if figures.shape[0] and figures[0] == 0:  # no batch folded: no minima
        figures[4] = figures[6] = figures[8] = 0
    return n_out


def greedy_run_figures(values, counts, max_tokens=0, max_sequences=0, multiple=1) -> dict:
    """The figures of :func:`greedy_batch_ends` over lengths given as runs, without the lengths in memory.

    ``values`` ascending, ``counts[k]`` sequences of length ``values[k]`` (a
    histogram: the lengths of a ``sorted`` plan).  The figures
    (:data:`RUN_FIGURES`) are the count, sums, minima and maxima of each
    batch's tokens, padded tokens (sequences times its longest) and sequences over every batch
    but the last, and the last batch apart, so that a caller can drop it.
    Memory is constant in the number of sequences.

    >>> f = greedy_run_figures(np.array([1, 2, 3, 5]), np.array([2, 2, 3, 1]), max_tokens=6)
    >>> f["batches"], f["sequences"], f["last_sequences"], f["last_padded"]
    (3, 7, 1, 5)
    """
    values = np.ascontiguousarray(values, np.int64)
    counts = np.ascontiguousarray(counts, np.int64)
    out = np.zeros(len(RUN_FIGURES) + 2, np.int64)
    if values.size:
        _greedy_impl(values, counts, np.array([counts.sum()], np.int64), int(max_tokens or 0),
                     int(max_sequences or 0), int(multiple), _NO_INTS, out)
    return dict(zip(RUN_FIGURES, out.tolist()))


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


def _gather_overflows(sizes_wanted, row_items, width, values, sizes, cu, positions, mask) -> bool:
    """Whether a batch of sequences of ``sizes_wanted`` rows overflows :func:`gather_batch`'s outputs."""
    n_seq, total = len(sizes_wanted), sum(sizes_wanted)
    if n_seq > sizes.shape[0] or n_seq >= cu.shape[0]:
        return True
    if width:
        return max(sizes_wanted, default=0) > width or n_seq * width * row_items > values.shape[0] or \
            n_seq * width > mask.shape[0]
    return total * row_items > values.shape[0] or (positions.shape[0] > 0 and total > positions.shape[0])


def _gather_batch_reference(src, table, word, chunk_rows, row_items, seqs, rows, lengths, head, width, values, sizes,
                            cu, positions, mask, chunks, check=True):
    """:func:`gather_batch` in NumPy: the same arguments, outputs and return value."""
    spans = []
    n_sources = rows.shape[0] - 1
    if lengths.shape[0] and lengths.shape[0] != n_sources:
        return GATHER_MISMATCH
    for s in seqs.tolist():
        if not 0 <= s < n_sources:
            return GATHER_MISMATCH
        stored = int(rows[s + 1] - rows[s])
        n = int(lengths[s]) if lengths.shape[0] else stored
        if not 0 <= n <= stored:
            return GATHER_MISMATCH
        spans.append((int(rows[s]) + (stored - n if head else 0), n))
    touched = []
    for r, n in spans:
        if n:
            for c in range(r // chunk_rows, (r + n - 1) // chunk_rows + 1):
                if not touched or touched[-1] != c:
                    touched.append(c)
    if check and any(table[c] < 0 for c in touched):
        touched = touched[:chunks.shape[0]]
        chunks[:len(touched)] = touched
        return -len(touched)
    if _gather_overflows([n for _, n in spans], row_items, width, values, sizes, cu, positions, mask):
        return GATHER_MISMATCH
    pos = longest = 0
    cu[0] = 0
    for k, (r, n) in enumerate(spans):
        at = np.arange(r, r + n, dtype=np.int64)
        at = table[at // chunk_rows] // word + (at % chunk_rows) * row_items
        items = (at[:, None] + np.arange(row_items)).reshape(-1)
        base = (k * width if width else pos) * row_items
        values[base:base + items.size] = src[items]
        if width:
            mask[k * width:(k + 1) * width] = np.arange(width) < n
        if positions.shape[0]:
            positions[pos:pos + n] = np.arange(n)
        sizes[k] = n
        pos += n
        cu[k + 1] = pos
        longest = max(longest, n)
    return longest


def _gather_batches_reference(src, table, word, chunk_rows, row_items, batches, offsets, indices, tokens, widths,
                              rows, lengths, head, values, sizes, cu, positions, mask, chunks, check, longest):
    """:func:`gather_batches` in NumPy, each batch through :func:`_gather_batch_reference`: the same arguments,
    outputs and return value."""
    n_batches, n_sources = offsets.shape[0] - 1, rows.shape[0] - 1
    if batches.shape[0] > longest.shape[0] or (lengths.shape[0] and lengths.shape[0] != n_sources):
        return GATHER_MISMATCH
    spans = []
    for b in batches.tolist():
        if not 0 <= b < n_batches or not 0 <= offsets[b] <= offsets[b + 1] <= indices.shape[0] or \
                (widths.shape[0] and b >= widths.shape[0]) or (tokens.shape[0] and b >= tokens.shape[0]):
            return GATHER_MISMATCH
        seqs = indices[offsets[b]:offsets[b + 1]]
        if any(not 0 <= s < n_sources for s in seqs.tolist()):
            return GATHER_MISMATCH
        spans.append((b, seqs))
    every = np.concatenate([seqs for _, seqs in spans]) if spans else _NO_INTS
    got = _gather_batch_reference(src, table, word, chunk_rows, row_items, every, rows, lengths, head, 0, values[:0],
                                  sizes[:0], cu[:0], positions[:0], mask[:0], chunks, check) if check else 0
    if got < 0 and got != GATHER_MISMATCH:  # a chunk not ready: nothing written
        return got
    at = s = 0
    for j, (b, seqs) in enumerate(spans):
        n_seq = seqs.shape[0]
        padded = widths.shape[0] > 0
        width = int(widths[b]) if padded else 0
        used = lengths[seqs] if lengths.shape[0] else rows[seqs + 1] - rows[seqs]
        if (padded and width == 0 and used.any()) or (positions.shape[0] and at >= positions.shape[0] and used.any()):
            return GATHER_MISMATCH  # what the single batch's gather would take for no mask, or no positions
        got = _gather_batch_reference(src, table, word, chunk_rows, row_items, seqs, rows, lengths, head, width,
                                      values[at * row_items:], sizes[s:], cu[s + j:],
                                      positions[at:] if positions.shape[0] else positions,
                                      mask[at:] if padded else mask, chunks, False)
        if got < 0 or (tokens.shape[0] and cu[s + j + n_seq] != tokens[b]):
            return GATHER_MISMATCH
        longest[j] = got
        at += n_seq * width if padded else int(cu[s + j + n_seq])
        s += n_seq
    return batches.shape[0]


@kernel
def _gather_batches_impl(src, table, word_shift, chunk_rows, chunk_shift, row_items, batches, offsets, indices, tokens,
                         widths, rows, lengths, head, values, sizes, cu, positions, mask, chunks, check, longest):
    # shifts instead of divisions where the sizes are powers of two (chunk_shift < 0: they are not)
    clipped = lengths.shape[0] > 0
    padded = widths.shape[0] > 0
    n_sources = rows.shape[0] - 1
    n_batches = offsets.shape[0] - 1
    if batches.shape[0] > longest.shape[0] or (clipped and lengths.shape[0] != n_sources):
        return GATHER_MISMATCH
    # every batch a batch of the plan; with check, every chunk its sequences touch ready, before anything is written
    n_chunks = 0
    missing = False
    for j in range(batches.shape[0]):
        b = batches[j]
        if b < 0 or b >= n_batches or (padded and b >= widths.shape[0]) or (tokens.shape[0] and b >= tokens.shape[0]):
            return GATHER_MISMATCH
        first, last = offsets[b], offsets[b + 1]
        if first < 0 or last < first or last > indices.shape[0]:
            return GATHER_MISMATCH
        for k in range(first, last if check else first):
            s = indices[k]
            if s < 0 or s >= n_sources:
                return GATHER_MISMATCH
            r = rows[s]
            n = lengths[s] if clipped else rows[s + 1] - r
            if n < 0 or n > rows[s + 1] - r:
                return GATHER_MISMATCH
            if n == 0:
                continue
            if head:
                r = rows[s + 1] - n
            for c in range(r // chunk_rows, (r + n - 1) // chunk_rows + 1):
                if n_chunks == 0 or chunks[n_chunks - 1] != c:
                    if n_chunks < chunks.shape[0]:
                        chunks[n_chunks] = c
                        n_chunks += 1
                    if table[c] < 0:
                        missing = True
    if missing:
        return -n_chunks
    at = 0  # rows written before this batch
    done = 0  # sequences written before this batch
    for j in range(batches.shape[0]):
        b = batches[j]
        first = offsets[b]
        n_seq = offsets[b + 1] - first
        width = widths[b] if padded else 0
        # the bounds of the outputs, checked before anything is written: rows a sequence may take (padded: the
        # width; flat: what is left of the values and positions), and sequences
        base = done + j  # the batch's cumulative lengths start here
        if done + n_seq > sizes.shape[0] or base + n_seq >= cu.shape[0]:
            return GATHER_MISMATCH
        room = values.shape[0] // row_items - at
        if padded:
            if n_seq * width > min(room, mask.shape[0] - at):
                return GATHER_MISMATCH
        elif positions.shape[0] and positions.shape[0] - at < room:
            room = positions.shape[0] - at
        pos = 0
        top = 0
        cu[base] = 0
        for k in range(n_seq):
            s = indices[first + k]
            if s < 0 or s >= n_sources:
                return GATHER_MISMATCH
            r = rows[s]
            n = lengths[s] if clipped else rows[s + 1] - r
            if n < 0 or n > rows[s + 1] - r or n > (width if padded else room - pos):
                return GATHER_MISMATCH
            if head:
                r = rows[s + 1] - n
            end = r + n
            o = (at + (k * width if padded else pos)) * row_items
            while r < end:
                c = r >> chunk_shift if chunk_shift >= 0 else r // chunk_rows
                stop = min(end, (c + 1) * chunk_rows)
                a = (table[c] >> word_shift) + (r - c * chunk_rows) * row_items
                m = (stop - r) * row_items
                values[o:o + m] = src[a:a + m]
                o += m
                r = stop
            sizes[done + k] = n
            pos += n
            cu[base + k + 1] = pos
            if n > top:
                top = n
        if tokens.shape[0] and pos != tokens[b]:
            return GATHER_MISMATCH
        # positions and mask in passes of their own: inside the copy loop they keep it from being vectorized
        if positions.shape[0]:
            for k in range(n_seq):
                a = at + cu[base + k]
                for t in range(sizes[done + k]):
                    positions[a + t] = t
        if padded:
            for k in range(n_seq):
                n = sizes[done + k]
                for t in range(width):
                    mask[at + k * width + t] = t < n
        longest[j] = top
        at += n_seq * width if padded else pos
        done += n_seq
    return batches.shape[0]


def gather_batch(src, table, word: int, chunk_rows: int, row_items: int, seqs, rows, lengths, head: bool, width: int,
                 values, sizes, cu, positions, mask, chunks, check: bool = True) -> int:
    """Gather a batch's sequences from rows stored in chunks, in one compiled pass (:func:`gather_batches` of one
    batch).

    ``src`` is flat storage (a file's memory map or a cache of decoded chunks)
    as words of ``word`` bytes, ``row_items`` words a row; chunk ``c`` starts
    at byte ``table[c]`` (negative: the chunk is not ready), so row ``r`` is at
    word ``table[r // chunk_rows] // word + (r % chunk_rows) * row_items``.
    Sequence ``s`` of ``seqs`` is rows ``rows[s]..rows[s + 1]``, clipped to
    ``lengths[s]`` rows where ``lengths`` is not empty (``head``: its last
    rows).  With ``width=0`` the sequences are written one after another into
    ``values``, else each into a row of ``width`` rows (what is not written is
    left as it is) and ``mask`` marks the real rows; ``sizes`` gets each
    length, ``cu`` their cumulative sum from 0, ``positions`` (when not empty)
    each row's place in its sequence.  Returns the longest length, or ``-n``
    when a chunk is not ready: then ``chunks[:n]`` lists the chunks the batch
    touches (repeats possible) and nothing is written.  ``check=False`` skips
    that look at the table, for a caller that knows every chunk is ready.
    A batch that names a sequence ``rows`` does not have (or clips one to
    more rows than it has), or does not fit the outputs (more sequences than
    ``sizes``, a sequence longer than ``width``, more rows than ``values`` or
    ``positions`` hold: a plan that is not the source's) returns
    :data:`GATHER_MISMATCH`; nothing is read or written past an array's end.

    >>> src, table = np.arange(10, 16), np.array([32, 0, 16])  # chunks of 2 rows, stored out of order
    >>> out, sizes, cu, none = np.zeros(4, np.int64), np.zeros(2, np.int64), np.zeros(3, np.int64), np.zeros(0, int)
    >>> gather_batch(src, table, 8, 2, 1, np.array([1, 0]), np.array([0, 1, 4]), none, False, 0, out, sizes, cu,
    ...              none, np.zeros(0, bool), np.zeros(8, np.int64))
    3
    >>> out.tolist(), cu.tolist()
    ([15, 10, 11, 14], [0, 3, 4])
    """
    longest = np.zeros(1, np.int64)
    got = gather_batches(src, table, word, chunk_rows, row_items, _FIRST_BATCH,
                         np.array([0, seqs.shape[0]], np.int64), seqs, _NO_INTS,
                         np.array([width], np.int64) if width else _NO_INTS, rows, lengths, head, values, sizes, cu,
                         positions, mask, chunks, check, longest)
    return int(longest[0]) if got > 0 else got


def gather_batches(src, table, word: int, chunk_rows: int, row_items: int, batches, offsets, indices, tokens, widths,
                   rows, lengths, head: bool, values, sizes, cu, positions, mask, chunks, check: bool,
                   longest) -> int:
    """Gather several batches of a plan in one compiled pass, one after another in the outputs; the batch
    reader's kernel (one call per run of batches costs one dispatch from Python, not one per batch).

    Batch ``b`` of ``batches`` is the sequences ``indices[offsets[b]:offsets[b + 1]]``,
    gathered as :func:`gather_batch` gathers them (``src``, ``table``,
    ``word``, ``chunk_rows``, ``row_items``, ``rows``, ``lengths``, ``head``
    and ``chunks`` alike), padded to ``widths[b]`` rows each where ``widths``
    is not empty, else flat.  Each batch's outputs follow the previous one's:
    its rows (``values``, and ``positions`` or ``mask``) after the rows of
    those before it, its ``sizes`` after theirs, its ``cu`` (from 0, one more
    entry than sequences) after theirs; ``longest[j]`` is the longest length
    of the ``j``-th.  Where ``tokens`` is not empty, a batch must hold
    ``tokens[b]`` rows.  Returns the number of batches, ``-n`` when a chunk
    is not ready (``check``: the chunks of every batch are looked at first;
    ``chunks[:n]`` lists them and nothing is written), or
    :data:`GATHER_MISMATCH` for a batch that is not the plan's, a sequence the
    source does not have, or outputs too small; nothing is read or written
    past an array's end (the batches before the one refused may be written).

    >>> src, none = np.arange(10, 16), np.zeros(0, np.int64)
    >>> out, sizes, cu = np.zeros(6, np.int64), np.zeros(3, np.int64), np.zeros(5, np.int64)
    >>> gather_batches(src, np.array([0]), 8, 8, 1, np.array([1, 0]), np.array([0, 1, 3]), np.array([2, 0, 1]),
    ...                none, none, np.array([0, 1, 4, 6]), none, False, out, sizes, cu, none, np.zeros(0, bool),
    ...                np.zeros(8, np.int64), False, np.zeros(2, np.int64))
    2
    >>> out.tolist(), sizes.tolist(), cu.tolist()
    ([10, 11, 12, 13, 14, 15], [1, 3, 2], [0, 1, 4, 0, 2])
    """
    return _gather_batches_impl(src, table, *gather_shifts(word, chunk_rows), row_items, batches, offsets, indices,
                                tokens, widths, rows, lengths, head, values, sizes, cu, positions, mask, chunks, check,
                                longest)


def gather_shifts(word: int, chunk_rows: int) -> tuple[int, int, int]:
    """``(word_shift, chunk_rows, chunk_shift)``: the arguments of :func:`compiled_gather_batches` that stand for
    ``word, chunk_rows`` (a shift is -1 where the size is not a power of two).

    >>> gather_shifts(4, 16384), gather_shifts(8, 3)
    ((2, 16384, 14), (3, 3, -1))
    """
    return word.bit_length() - 1, chunk_rows, chunk_rows.bit_length() - 1 if chunk_rows & (chunk_rows - 1) == 0 else -1


def compiled_gather_batches():
    """:func:`gather_batches`' compiled kernel itself (Numba's dispatcher, compiled on first call), for a loop that
    calls it once per run of batches: the same arguments, with ``word, chunk_rows`` given as :func:`gather_shifts`'s
    three."""
    return _gather_batches_impl.dispatcher


def _chunk_reads_reference(first, last, batch_offsets, n_chunks, slots):
    """:func:`chunk_reads` in plain Python."""
    cached: dict[int, int] = {}  # chunk -> its slot
    owner = [-1] * slots
    next_slot = decodes = distinct = 0
    for b in range(len(batch_offsets) - 1):
        need = []
        for k in range(batch_offsets[b], batch_offsets[b + 1]):
            for c in range(first[k], last[k] + 1):
                if c not in need:
                    need.append(c)
        distinct += len(need)
        pinned = set(need)
        for c in need:
            if c in cached:
                continue
            decodes += 1
            for _ in range(slots):  # first in, first out, never a chunk this batch needs
                s = next_slot
                next_slot = (next_slot + 1) % slots
                if owner[s] < 0 or owner[s] not in pinned:
                    if owner[s] >= 0:
                        del cached[owner[s]]
                    owner[s] = c
                    cached[c] = s
                    break
    return decodes, distinct


@kernel
def _chunk_reads_impl(first, last, batch_offsets, n_chunks, slots):
    slot_of = np.full(n_chunks, -1, np.int64)
    stamp = np.full(n_chunks, -1, np.int64)
    owner = np.full(slots, -1, np.int64)
    need = np.empty(0, np.int64)
    next_slot = 0
    decodes = 0
    distinct = 0
    for b in range(batch_offsets.shape[0] - 1):
        n_need = 0
        for k in range(batch_offsets[b], batch_offsets[b + 1]):
            for c in range(first[k], last[k] + 1):
                if stamp[c] != b:
                    stamp[c] = b
                    if n_need == need.shape[0]:
                        grown = np.empty(2 * n_need + 16, np.int64)
                        grown[:n_need] = need[:n_need]
                        need = grown
                    need[n_need] = c
                    n_need += 1
        distinct += n_need
        for j in range(n_need):
            c = need[j]
            if slot_of[c] >= 0:
                continue
            decodes += 1
            for _ in range(slots):
                s = next_slot
                next_slot = (next_slot + 1) % slots
                old = owner[s]
                if old < 0 or stamp[old] != b:
                    if old >= 0:
                        slot_of[old] = -1
                    owner[s] = c
                    slot_of[c] = s
                    break
    return decodes, distinct


def chunk_reads(first, last, batch_offsets, n_chunks: int, slots: int) -> tuple[int, int]:
    """(chunks decoded, chunks each batch touches, summed) when batches read sequences of chunks
    ``first[k]..last[k]`` through a first-in-first-out cache of ``slots`` chunks that never evicts a chunk the
    batch being read needs (the batch reader's cache); sequence ``k`` of batch ``b`` is at
    ``batch_offsets[b] <= k < batch_offsets[b + 1]``.

    >>> chunk_reads(np.array([0, 1, 0, 2]), np.array([0, 1, 0, 2]), np.array([0, 2, 4]), 3, 2)
    (3, 4)
    """
    if not batch_offsets.shape[0] > 1 or n_chunks == 0:
        return 0, 0
    decodes, distinct = _chunk_reads_impl(np.ascontiguousarray(first, np.int64), np.ascontiguousarray(last, np.int64),
                                          np.ascontiguousarray(batch_offsets, np.int64), int(n_chunks),
                                          max(int(slots), 1))
    return int(decodes), int(distinct)


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
        order = keep[plan_rng(seed).permutation(keep.shape[0])]
        order = order[stable_argsort(lengths[order], descending)]
        return order, lengths[order]
    order = np.empty(keep.shape[0], np.int64)
    lens = np.empty(keep.shape[0], np.int64)
    kernel_seed = int(plan_rng(seed).integers(0, 2 ** 31 - 1))
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
    count = _greedy_impl(lengths, _NO_INTS, segs, int(max_tokens or 0), int(max_sequences or 0), int(multiple), out,
                         _NO_INTS)
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


__all__ = ["COUNTING_SORT_MAX", "plan_rng", "stable_argsort", "segment_sums", "segment_max", "sort_by_length",
           "counting_argsort", "gather_runs", "gather_batch", "gather_batches", "GATHER_MISMATCH",
           "gather_shifts", "compiled_gather_batches", "chunk_reads",
           "greedy_batch_ends", "first_fit_decreasing", "megabatch_order", "first_short_batch"]
