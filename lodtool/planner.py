"""The one chunk planner: ranges of whole top-level sequences, computed from the offsets alone.

A stored tensor is processed a chunk at a time; a chunk is a range of whole
top-level sequences, so each chunk is a valid LoD tensor of its own and the
chunks concatenate to the whole.  The planner reads offsets only (a few per
chunk, or windows of them), never the data.  Every tensor view's
:meth:`~lodtool.tensor.TensorView.iter_chunks`, the streaming operators of
:mod:`lodtool.tasks`, the Dask reader and the batch planner all cut their
work here.

* :func:`sequence_ranges`: top-level ranges with at most ``max_rows`` rows each;
* :func:`runs`: items cut into runs under a budget, for several costs at once;
* :func:`row_offset_windows` / :func:`entries_at`: where the sequences of a
  level start in the data rows, a window at a time.

>>> import numpy as np
>>> lod = [np.array([0, 3, 4, 6]), np.array([0, 3, 5, 9, 10, 12, 15])]
>>> read = lambda level, start, stop: lod[level][start:stop]
>>> list(sequence_ranges(read, 2, 3, max_rows=9))
[(0, 1), (1, 3)]
>>> list(runs([np.array([2, 2, 5, 1, 1])], 4))
[(0, 2), (2, 3), (3, 5)]
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Sequence

import numpy as np

from .lod import WindowReader


def sequence_ranges(read: WindowReader, lod_level: int, count: int, max_rows: int) -> Iterator[tuple[int, int]]:
    """Consecutive ranges ``(i0, i1)`` of the ``count`` top-level sequences of a valid LoD.

    A range holds at most ``max_rows`` data rows unless one sequence alone is
    bigger (then it is a range of its own), and at most ``max_rows`` sequences
    (empty ones hold no rows, but their offsets take memory), and never leaves
    a level below the top without an entry (such a chunk would be an invalid
    tensor), so empty sequences join their neighbours.  Two offsets per level are read per probe,
    and a range is found in O(log length) probes.
    """
    bounds = Bounds(read, lod_level)

    def filled(a: int, b: int) -> bool:
        """Whether top-level sequences a..b hold at least one entry on every level below the top."""
        ba, bb = bounds(a), bounds(b)
        return all(bb[k] > ba[k] for k in range(1, lod_level))

    n = count
    i0 = 0
    while i0 < n:
        rows0 = bounds(i0)[-1]
        # at most max_rows sequences too: empty ones add no rows, and a chunk's offsets must stay bounded
        i1 = last_true(i0 + 1, min(n, i0 + max_rows), lambda i: bounds(i)[-1] - rows0 <= max_rows)
        if not filled(i0, i1):
            i1 = min(last_true(i1, n, lambda i: not filled(i0, i)) + 1, n)
        if i1 < n and not filled(i1, n):
            i1 = n
        yield i0, i1
        i0 = i1


class Bounds:
    """``bounds(i)``: where top-level sequence ``i`` starts on every level, down to the rows (one offset read
    per level; the last few thousand answers kept).

    >>> lod = [np.array([0, 2, 3]), np.array([0, 1, 4, 6])]
    >>> Bounds(lambda level, start, stop: lod[level][start:stop], 2)(1)
    [1, 2, 4]
    """

    def __init__(self, read: WindowReader, lod_level: int):
        self.read, self.lod_level, self.cache = read, lod_level, {}

    def __call__(self, i: int) -> list[int]:
        if i not in self.cache:
            if len(self.cache) > 4096:
                self.cache.clear()
            pos = [i]
            for k in range(self.lod_level):
                pos.append(int(self.read(k, pos[-1], pos[-1] + 1)[0]))
            self.cache[i] = pos
        return self.cache[i]


def last_true(lo: int, hi: int, pred: Callable[[int], bool]) -> int:
    """The largest ``i`` in ``lo..hi`` with ``pred(i)``, for ``pred`` true up to a point (``lo`` counts as true).

    Gallops from ``lo``, then bisects: O(log distance) calls of ``pred``.

    >>> last_true(0, 100, lambda i: i * i <= 50)
    7
    """
    good, step = lo, 1
    while good < hi:
        probe = min(good + step, hi)
        if not pred(probe):
            bad = probe
            while bad - good > 1:
                mid = (good + bad) // 2
                if pred(mid):
                    good = mid
                else:
                    bad = mid
            return good
        good, step = probe, step * 2
    return good


def runs(costs: Sequence[np.ndarray], budget: int) -> Iterator[tuple[int, int]]:
    """Cut items ``0..n`` into consecutive runs ``(a, b)`` whose summed costs each stay within ``budget``.

    ``costs`` holds one array per kind of cost (rows read, rows written, ...),
    one entry per item.  A run is as long as the budget allows, and at least one
    item: an item whose cost alone is over the budget is a run of its own.

    >>> list(runs([np.array([1, 1, 1]), np.array([0, 3, 1])], 3))
    [(0, 2), (2, 3)]
    """
    ends = []
    for cost in costs:
        end = np.zeros(len(cost) + 1, np.int64)
        np.cumsum(cost, out=end[1:])
        ends.append(end)
    n, a = len(costs[0]), 0
    while a < n:
        b = min(int(np.searchsorted(end, end[a] + budget, side="right")) - 1 for end in ends)
        b = max(b, a + 1)
        yield a, b
        a = b


def row_offset_windows(t: Any, level: int, window: int) -> Iterator[np.ndarray]:
    """Where each sequence of ``level`` starts and ends in the data rows, ``window`` sequences at a time.

    ``t`` is a stored tensor (``num_sequences``, ``read_offsets``, ``lod_level``)
    whose LoD has been validated.  Each window holds ``window + 1`` entries (the
    last one has fewer), so consecutive windows share one; a level above the
    last is mapped down through the levels below it, whose offsets it indexes.
    """
    count = t.num_sequences(level)
    for start in range(0, count, window):
        offsets = t.read_offsets(level, start, min(start + window, count) + 1)
        for below in range(level + 1, t.lod_level):
            offsets = entries_at(t, below, offsets, window)
        yield offsets


def entries_at(t: Any, level: int, index: np.ndarray, window: int) -> np.ndarray:
    """``offsets[level][index]`` for a non-decreasing ``index``, reading at most ``window`` entries at a time."""
    out = np.empty_like(index)
    i = 0
    while i < len(index):
        lo = int(index[i])
        j = int(np.searchsorted(index, lo + window, side="left"))  # every index below lo + window
        part = t.read_offsets(level, lo, int(index[j - 1]) + 1)
        out[i:j] = part[index[i:j] - lo]
        i = j
    return out


__all__ = ["sequence_ranges", "Bounds", "runs", "row_offset_windows", "entries_at", "last_true"]
