"""The LoD index: offsets and lengths per level, validation, and branch resolution.

A LoD index is a list of levels; each level is an int64 offsets array.
``offsets[k][j]`` is where sequence ``j`` of level ``k`` starts in level ``k+1``
(or in the data rows, for the last level).  This module knows nothing about
data, files or kernels, so every other floor can use it (the one compiled check,
in :mod:`lodtool._monotonic`, runs only where Numba is loaded already).

>>> lengths_to_offsets([3, 1, 2]).tolist()
[0, 3, 4, 6]
>>> [o.tolist() for o in lod_from_lengths([[2, 1], [2, 2, 3]])]
[[0, 2, 3], [0, 2, 4, 7]]
>>> validate_lod(lod_from_lengths([[2, 1], [2, 2, 3]]), n_rows=7)
"""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np

from .errors import LodIndexError, LodUsageError, LodValidationError
from .limits import check_memory

OFFSET_DTYPE = np.dtype(np.int64)

#: offsets are checked in blocks of this many entries: the check stops early on
#: bad input and never allocates more than a block's worth of temporaries.
_BLOCK = 1 << 20
#: blocks at least this long use the compiled check when Numba is loaded (below, NumPy is as fast)
_KERNEL_MIN = 1 << 16
#: without Numba, offsets are compared this many entries at a time into one reused mask: the mask
#: (128 KiB) and the offsets it compares stay in the L2 cache (measured: 0.8x the speed of a read-only
#: pass, against 0.6-0.69x for 1M-entry comparisons into fresh masks)
_COMPARE_BLOCK = 1 << 17
#: without Numba, a level at least this long is compared on two threads, a half each (NumPy's
#: comparisons release the GIL; one core alone cannot keep up with memory here)
_THREADED_MIN = 1 << 22

#: reads ``offsets[level][start:stop]`` (a window of one level) from wherever the
#: index lives: memory, an HDF5 file, a device.
WindowReader = Callable[[int, int, int], np.ndarray]


def lengths_to_offsets(lengths: Sequence[int] | np.ndarray) -> np.ndarray:
    """Turn one level of lengths into offsets (``[0, l0, l0+l1, ...]``).

    >>> lengths_to_offsets([3, 2, 4]).tolist()
    [0, 3, 5, 9]
    """
    lengths = as_index_array(lengths, what="lengths")
    if lengths.size and lengths.min() < 0:
        j = int(np.argmax(lengths < 0))
        raise LodValidationError(f"length[{j}]={int(lengths[j])} is negative")
    offsets = np.empty(lengths.size + 1, dtype=OFFSET_DTYPE)
    offsets[0] = 0
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def offsets_to_lengths(offsets: Sequence[int] | np.ndarray) -> np.ndarray:
    """Turn one level of offsets into lengths.

    >>> offsets_to_lengths([0, 3, 5, 9]).tolist()
    [3, 2, 4]
    """
    offsets = as_index_array(offsets, what="offsets")
    return np.diff(offsets)


def lod_from_lengths(recursive_sequence_lengths: Iterable[Sequence[int]]) -> list[np.ndarray]:
    """Offsets for every level of a ``recursive_sequence_lengths`` table.

    >>> [o.tolist() for o in lod_from_lengths([[3, 1, 2], [3, 2, 4, 1, 2, 3]])]
    [[0, 3, 4, 6], [0, 3, 5, 9, 10, 12, 15]]
    """
    out = []
    for level, lengths in enumerate(recursive_sequence_lengths):
        try:
            out.append(lengths_to_offsets(lengths))
        except LodValidationError as exc:
            raise LodValidationError(f"level {level}: {exc}") from None
    return out


def lengths_from_lod(lod: Iterable[Sequence[int] | np.ndarray]) -> list[list[int]]:
    """``recursive_sequence_lengths`` of a LoD given as offsets.

    >>> lengths_from_lod([[0, 2, 3], [0, 2, 4, 7]])
    [[2, 1], [2, 2, 3]]
    """
    return [offsets_to_lengths(level).tolist() for level in lod]


def as_index_array(values, *, what: str = "offsets", level: int | None = None) -> np.ndarray:
    """Coerce one level of offsets or lengths to a 1-D int64 array.

    Integers of any width are accepted; floats, bools, objects and any rank
    other than 1 are refused, since a silently truncated offset is a wrong index.
    """
    where = f"level {level}: " if level is not None else ""
    if isinstance(values, np.ndarray):
        arr = values
    else:
        try:
            arr = np.asarray(values)
        except (ValueError, TypeError) as exc:
            raise LodValidationError(f"{where}{what} are not a flat list of integers ({exc})") from None
        if arr.size == 0 and arr.ndim == 1:
            arr = arr.astype(OFFSET_DTYPE)
    if arr.ndim != 1:
        raise LodValidationError(f"{where}{what} must be 1-D, got shape {arr.shape}")
    if arr.dtype.kind not in "iu":
        raise LodValidationError(f"{where}{what} must be integers, got dtype {arr.dtype}")
    if arr.dtype.kind == "u" and arr.dtype.itemsize == 8 and arr.size and arr.max() > np.iinfo(np.int64).max:
        raise LodValidationError(f"{where}{what} do not fit in int64")
    return arr.astype(OFFSET_DTYPE, copy=False)


@dataclass(frozen=True)
class LodProblem:
    """One broken rule of a LoD index; ``index`` is the offending offset's position."""

    level: int
    index: int | None
    message: str

    def __str__(self) -> str:
        return f"level {self.level}: {self.message}"


class LevelChecker:
    """Checks one offsets level fed in blocks, in order (memory, file or stream).

    It enforces the per-level rules: at least ``min_offsets`` offsets (1 by
    lodtool's rule, where ``[0]`` is a level of zero sequences; 2 by Paddle's),
    the first is 0 and the offsets never decrease.  Blocks let a file be checked
    without holding a whole level and let the check stop at the first problem.
    """

    def __init__(self, level: int, max_problems: int = 1, min_offsets: int = 1):
        self.level = level
        self.max_problems = max_problems
        self.min_offsets = min_offsets
        self.problems: list[LodProblem] = []
        self.extra_problems = 0
        self.count = 0
        self.first: int | None = None
        self.last: int | None = None

    def _add(self, index: int | None, message: str) -> None:
        if len(self.problems) < self.max_problems:
            self.problems.append(LodProblem(self.level, index, message))
        else:
            self.extra_problems += 1

    @property
    def full(self) -> bool:
        return len(self.problems) >= self.max_problems

    def feed(self, block: np.ndarray) -> None:
        if block.size == 0:
            return
        if self.first is None:
            self.first = int(block[0])
            if self.first != 0:
                self._add(0, f"offset[0]={self.first} (the first offset must be 0)")
        start = self.count
        if self.last is not None and block[0] < self.last:
            self._add(start, f"offset[{start}]={int(block[0])} < offset[{start - 1}]={self.last} "
                             "(offsets must not decrease)")
        if block.size > 1 and _may_decrease(block):
            self._report_decreases(block, start)
        self.count += block.size
        self.last = int(block[-1])

    def _report_decreases(self, block: np.ndarray, start: int) -> None:
        """Record where ``block`` decreases, a :data:`_BLOCK` at a time (bounded temporaries)."""
        for a in range(0, block.size - 1, _BLOCK):
            b = min(a + _BLOCK, block.size - 1)
            bad = np.flatnonzero(block[a + 1:b + 1] < block[a:b])
            room = max(self.max_problems - len(self.problems), 0)
            for j in bad[:room] + a:
                j = int(j)
                self._add(start + j + 1, f"offset[{start + j + 1}]={int(block[j + 1])} < "
                                         f"offset[{start + j}]={int(block[j])} (offsets must not decrease)")
            self.extra_problems += max(0, bad.size - room)
            if self.full and self.max_problems == 1:  # validate_lod: the first problem is all it reports
                return

    def finish(self) -> None:
        if self.count < self.min_offsets:
            self._add(None, _too_few(self.count, self.min_offsets))


def _may_decrease(block: np.ndarray) -> bool:
    """Whether some offset of ``block`` is below the one before it.

    Compiled (:mod:`lodtool._monotonic`) where Numba is loaded already, else
    NumPy in cache-sized pieces (:data:`_COMPARE_BLOCK`); a long block is
    split in two halves, checked on two threads (both checks release the GIL).
    """
    n = block.size - 1
    compiled = (block.size >= _KERNEL_MIN and "numba" in sys.modules and block.dtype == OFFSET_DTYPE
                and block.flags.c_contiguous)
    if not compiled and n <= _COMPARE_BLOCK:
        return bool((block[1:] < block[:-1]).any())
    check = _find_decrease_compiled if compiled else _find_decrease
    found = [False]
    if n < _THREADED_MIN or (os.cpu_count() or 1) < 2:
        check(block, 0, n, found)
        return found[0]
    half = n // 2
    helper = threading.Thread(target=check, args=(block, half, n, found), daemon=True)
    helper.start()
    try:
        check(block, 0, half, found)
    finally:
        helper.join()
    return found[0]


def _find_decrease(block: np.ndarray, lo: int, hi: int, found: list[bool]) -> None:
    """Set ``found[0]`` if ``block`` decreases between entries ``lo`` and ``hi``; stop once it is set."""
    mask = np.empty(min(_COMPARE_BLOCK, hi - lo), np.bool_)
    for start in range(lo, hi, _COMPARE_BLOCK):
        if found[0]:
            return
        stop = min(start + _COMPARE_BLOCK, hi)
        part = mask[:stop - start]
        np.less(block[start + 1:stop + 1], block[start:stop], out=part)
        if part.any():
            found[0] = True
            return


def _find_decrease_compiled(block: np.ndarray, lo: int, hi: int, found: list[bool]) -> None:
    """:func:`_find_decrease` with the compiled check (contiguous int64 offsets)."""
    from ._monotonic import first_decrease

    if first_decrease(block[lo:hi + 1]) >= 0:
        found[0] = True


def _too_few(count: int, least: int) -> str:
    if least <= 1:
        return f"has {count} offsets; a level needs at least the offset 0 (zero sequences)"
    return f"has {count} offset(s); a level needs at least 2 (one sequence)"


def find_lod_problems(levels: Sequence[Iterable[np.ndarray]] | Sequence[np.ndarray], n_rows: int,
                      *, level_sizes: Sequence[int] | None = None, max_problems: int = 20,
                      paddle: bool = False) -> list[LodProblem]:
    """Every broken rule of a LoD index, up to ``max_problems`` per level.

    ``levels[k]`` is either a whole int64 offsets array or an iterable of its
    blocks (for reading files block by block).  ``level_sizes`` gives each level's
    length when blocks are passed.  ``paddle=True`` checks Paddle's rule, which
    refuses levels of zero sequences (see :func:`paddle_valid`).

    >>> [str(p) for p in find_lod_problems([np.array([0, 2, 1])], n_rows=1)]
    ['level 0: offset[2]=1 < offset[1]=2 (offsets must not decrease)']
    """
    problems: list[LodProblem] = []
    ends: list[int | None] = []
    counts: list[int] = []
    for level, source in enumerate(levels):
        checker = LevelChecker(level, max_problems, 2 if paddle else 1)
        if isinstance(source, np.ndarray):  # int64 as it is: one block (the checks bound their own temporaries)
            blocks = [source] if source.dtype == OFFSET_DTYPE else \
                (source[a:a + _BLOCK] for a in range(0, max(len(source), 1), _BLOCK))
        else:
            blocks = source
        for block in blocks:
            checker.feed(as_index_array(block, level=level))
            if checker.full and max_problems == 1:
                break
        else:
            checker.finish()
        problems.extend(checker.problems)
        if checker.extra_problems:
            problems.append(LodProblem(level, None, f"... and {checker.extra_problems} more problem(s)"))
        ends.append(checker.last)
        counts.append(level_sizes[level] if level_sizes is not None else checker.count)
    return problems + cross_level_problems(ends, counts, n_rows)


def cross_level_problems(ends: Sequence[int | None], sizes: Sequence[int], n_rows: int) -> list[LodProblem]:
    """The rules across levels: each level ends at the number of sequences below it, the last at the rows.

    ``ends[k]`` is the last offset of level ``k`` (``None`` if unknown) and
    ``sizes[k]`` the number of its offsets.

    >>> [str(p) for p in cross_level_problems([6, 6], [4, 7], n_rows=5)]
    ['level 1: offset[6]=6 but the data has 5 rows (the last offset must equal it)']
    >>> [str(p) for p in cross_level_problems([4, 6], [4, 7], n_rows=6)]
    ['level 0: offset[3]=4 but level 1 has 6 sequences (the last offset must equal it)']
    """
    problems = []
    for level, end in enumerate(ends):
        if end is None:
            continue
        size = sizes[level]
        if level + 1 < len(ends):
            below = sizes[level + 1] - 1
            if end != below:
                problems.append(LodProblem(level, size - 1,
                                           f"offset[{size - 1}]={end} but level {level + 1} has "
                                           f"{counted(below, 'sequence')} (the last offset must equal it)"))
        elif end != n_rows:
            problems.append(LodProblem(level, size - 1, f"offset[{size - 1}]={end} but the data has "
                                                        f"{counted(n_rows, 'row')} (the last offset must equal it)"))
    return problems


def validate_lod(levels: Sequence[np.ndarray], n_rows: int) -> None:
    """Raise :class:`LodValidationError` for the first broken rule of a LoD index.

    lodtool's rules: every level has at least 1 offset and starts at 0, offsets
    never decrease (empty sequences are fine), each level ends at the number of
    sequences of the level below, and the last one at the data rows.  A level
    of offsets ``[0]`` holds zero sequences: an empty batch is a value.  Paddle
    also asks for at least 2 offsets per level (one sequence); check that rule
    with :func:`check_paddle_lod` or :func:`paddle_valid`.

    >>> validate_lod([np.array([0])], n_rows=0)  # zero sequences

    >>> validate_lod([np.array([0, 3, 5, 10, 9])], n_rows=9)
    Traceback (most recent call last):
    ...
    lodtool.errors.LodValidationError: level 0: offset[4]=9 < offset[3]=10 (offsets must not decrease)
    """
    problems = find_lod_problems(levels, n_rows, max_problems=1)
    if problems:
        raise LodValidationError(str(problems[0]))


def check_paddle_lod(levels: Sequence[np.ndarray], n_rows: int) -> None:
    """Raise :class:`LodValidationError` unless Paddle accepts the LoD (its ``CheckLoD``, unchanged).

    Paddle's rules are lodtool's plus one: every level holds at least one
    sequence (2 offsets).  Paddle's operators do produce levels of zero
    sequences, but ``set_lod`` and a saved tensor with one are refused, so an
    export to Paddle must check this first.

    >>> check_paddle_lod([np.array([0])], n_rows=0)
    Traceback (most recent call last):
    ...
    lodtool.errors.LodValidationError: level 0: has 1 offset(s); a level needs at least 2 (one sequence)
    """
    problems = find_lod_problems(levels, n_rows, max_problems=1, paddle=True)
    if problems:
        raise LodValidationError(str(problems[0]))


def paddle_valid(levels: Sequence[np.ndarray], n_rows: int) -> bool:
    """Whether Paddle would accept this LoD (see :func:`check_paddle_lod`).

    >>> paddle_valid([np.array([0, 2, 3])], 3), paddle_valid([np.array([0])], 0)
    (True, False)
    """
    return not find_lod_problems(levels, n_rows, max_problems=1, paddle=True)


def format_path(path: Sequence[int]) -> str:
    """``<2,0>`` for the path ``(2, 0)``."""
    return "<" + ",".join(str(int(i)) for i in path) + ">"


def parse_path(text: str) -> tuple[int, ...]:
    """Parse ``2``, ``2,0``, ``<2,0>`` or ``<>`` (the root) into a tuple of ints.

    >>> parse_path("<2, -1>")
    (2, -1)
    """
    body = text.strip()
    if body.startswith("<") and body.endswith(">"):
        body = body[1:-1]
    body = body.strip()
    if not body:
        return ()
    try:
        return tuple(int(part) for part in body.split(","))
    except ValueError:
        raise LodUsageError(f"bad branch path {text!r}: write it as 2, 2,0 or <2,0>") from None


def memory_reader(levels: Sequence[np.ndarray]) -> WindowReader:
    """A :data:`WindowReader` over offsets held in memory."""
    return lambda level, start, stop: levels[level][start:stop]


def resolve_branch(path: Sequence[int], read: WindowReader, level_sizes: Sequence[int],
                   n_rows: int | None = None) -> tuple[int, int, int]:
    """Resolve a branch ``<i,j,...>`` to ``(level, begin, end)``.

    The branch's children are entries ``begin..end`` of ``level`` (data rows when
    ``level == len(level_sizes)``).  Only two offsets per path step are read.
    Negative indices count from the end of their parent sequence.

    >>> lod = lod_from_lengths([[3, 1, 2], [3, 2, 4, 1, 2, 3]])
    >>> resolve_branch((2, 0), memory_reader(lod), [len(o) for o in lod])
    (2, 10, 12)
    """
    n_levels = len(level_sizes)
    check_level_sizes(level_sizes, n_rows)
    if len(path) > n_levels:
        raise LodIndexError(f"branch {format_path(path)} has {len(path)} indices but the tensor has "
                            f"{n_levels} LoD level(s)")
    begin, end = 0, level_sizes[0] - 1 if n_levels else 0
    for depth, index in enumerate(path):
        count = end - begin
        i = int(index) + count if index < 0 else int(index)
        if not 0 <= i < count:
            where = "the top level" if depth == 0 else f"branch {format_path(path[:depth])}"
            valid = f"valid: {-count}..{count - 1}" if count else "it is empty"
            raise LodIndexError(f"level {depth}: index {int(index)} is out of range for {where}, which has "
                                f"{counted(count, 'sequence')} ({valid})")
        window = _checked_window(read, depth, begin + i, begin + i + 2, level_sizes, n_rows)
        begin, end = int(window[0]), int(window[1])
    return len(path), begin, end


def walk_branch(path: Sequence[int], levels: Sequence[np.ndarray]) -> tuple[int, int] | None:
    """``(begin, end)`` of branch ``path``'s children in validated whole ``levels``, or ``None`` for any path
    :func:`resolve_branch` must refuse (it then names what is wrong).

    >>> walk_branch((2, 0), lod_from_lengths([[3, 1, 2], [3, 2, 4, 1, 2, 3]]))
    (10, 12)
    """
    begin, end = 0, len(levels[0]) - 1
    depth = 0
    for index in path:
        if type(index) is not int:  # the exact type first: a training loop's index costs one comparison
            if not isinstance(index, (int, np.integer)):
                return None
            index = int(index)
        count = end - begin
        if index < 0:
            index += count
        if not 0 <= index < count:
            return None
        o = levels[depth]
        depth += 1
        begin, end = o.item(begin + index), o.item(begin + index + 1)
    return begin, end


def extract_range(level: int, begin: int, end: int, read: WindowReader,
                  level_sizes: Sequence[int], n_rows: int | None = None) -> tuple[list[np.ndarray], int, int]:
    """Offsets (rebased to 0) of entries ``begin..end`` of ``level`` and everything under them.

    Returns ``(offsets_per_level, row_begin, row_end)``; the result has
    ``len(level_sizes) - level`` levels.  Each window read is checked, so a
    corrupt file cannot send the caller outside the next level.

    >>> lod = lod_from_lengths([[3, 1, 2], [3, 2, 4, 1, 2, 3]])
    >>> levels, r0, r1 = extract_range(1, 4, 6, memory_reader(lod), [len(o) for o in lod])
    >>> [o.tolist() for o in levels], r0, r1
    ([[0, 2, 5]], 10, 15)
    """
    check_level_sizes(level_sizes, n_rows)
    out = []
    for k in range(level, len(level_sizes)):
        window = _checked_window(read, k, begin, end + 1, level_sizes, n_rows)
        out.append(window - window[0])
        begin, end = int(window[0]), int(window[-1])
    return out, begin, end


def check_level_sizes(level_sizes: Sequence[int], n_rows: int | None = None) -> None:
    """What the sizes alone show, checked before any window is read.

    Every level has at least 1 offset, and a level of zero sequences (the one
    offset 0) has zero sequences (or rows) below it.

    >>> check_level_sizes([4, 0])
    Traceback (most recent call last):
    ...
    lodtool.errors.LodValidationError: level 1: has 0 offsets; a level needs at least the offset 0 (zero sequences)
    """
    for level, size in enumerate(level_sizes):
        if size < 1:
            raise LodValidationError(f"level {level}: {_too_few(size, 1)}")
    for level, size in enumerate(level_sizes):  # a level of zero sequences ([0]) has nothing below it
        if size != 1:
            continue
        if level + 1 < len(level_sizes) and level_sizes[level + 1] != 1:
            raise LodValidationError(f"level {level}: offset[0]=0 but level {level + 1} has "
                                     f"{level_sizes[level + 1] - 1} sequences (the last offset must equal it)")
        if level + 1 == len(level_sizes) and n_rows:
            raise LodValidationError(f"level {level}: offset[0]=0 but the data has {n_rows} rows "
                                     "(the last offset must equal it)")


def _checked_window(read: WindowReader, level: int, start: int, stop: int, level_sizes: Sequence[int],
                    n_rows: int | None = None) -> np.ndarray:
    if not 0 <= start < stop <= level_sizes[level]:
        raise LodIndexError(f"level {level}: offsets window {start}:{stop} is outside 0:{level_sizes[level]}")
    window = as_index_array(read(level, start, stop), level=level)
    if window.size != stop - start:
        raise LodValidationError(f"level {level}: read {window.size} offsets, expected {stop - start}")
    limit = level_sizes[level + 1] - 1 if level + 1 < len(level_sizes) else n_rows
    if start == 0 and window[0] != 0:
        raise LodValidationError(f"level {level}: offset[0]={int(window[0])} (the first offset must be 0)")
    if window[0] < 0:
        raise LodValidationError(f"level {level}: offset[{start}]={int(window[0])} is negative")
    if window.size > 1 and (window[1:] < window[:-1]).any():
        j = int(np.argmax(window[1:] < window[:-1]))
        raise LodValidationError(f"level {level}: offset[{start + j + 1}]={int(window[j + 1])} < "
                                 f"offset[{start + j}]={int(window[j])} (offsets must not decrease)")
    if limit is not None and window[-1] > limit:
        below = f"{counted(limit, 'sequence')} of level {level + 1}" if level + 1 < len(level_sizes) else \
            f"{counted(limit, 'data row')}"
        raise LodValidationError(f"level {level}: offset[{stop - 1}]={int(window[-1])} is past the {below}")
    if limit is not None and stop == level_sizes[level] and window[-1] != limit:
        below = f"level {level + 1} has {counted(limit, 'sequence')}" if level + 1 < len(level_sizes) else \
            f"the data has {counted(limit, 'row')}"
        raise LodValidationError(f"level {level}: offset[{stop - 1}]={int(window[-1])} but {below} "
                                 "(the last offset must equal it)")
    return window


#: exact medians by counting lengths up to this value; longer lengths fall back to sorting
_COUNT_LIMIT = 1 << 20


class LengthStats:
    """Length statistics of a level fed as blocks of its offsets: what :func:`length_stats` returns.

    Blocks are consecutive windows (a block's first entry follows the last
    one's) until :meth:`restart`, after which the next block begins offsets of
    their own (a shard's).  Memory is bounded by the blocks: lengths are
    counted, and gathered only when one is negative or past ``2**20``.

    >>> stats = LengthStats(1 << 20, "x", "level 0")
    >>> stats.add(np.array([0, 3, 3])); stats.restart(); stats.add(np.array([0, 1, 6]))
    >>> stats.result()
    {'count': 4, 'min': 0, 'median': 2.0, 'mean': 2.25, 'max': 5, 'empty': 1}
    """

    def __init__(self, limit: int, path: str, what: str):
        self.limit, self.path, self.what = limit, path, what
        self.count = self.total = self.empty = 0
        self.lo = self.hi = None
        self.histogram = np.zeros(0, dtype=np.int64)
        self.gathered: list[np.ndarray] | None = None
        self.last: int | None = None

    def restart(self) -> None:
        """The next block starts offsets of its own: no length spans it and the block before."""
        self.last = None

    def add(self, block: np.ndarray) -> None:
        """Count the lengths of the next window of offsets."""
        if self.last is not None:
            block = np.concatenate(([self.last], block))
        if block.size < 2:
            self.last = int(block[-1]) if block.size else self.last
            return
        lengths = block[1:] - block[:-1]
        self.last = int(block[-1])
        self.count += lengths.size
        self.total += int(lengths.sum())
        self.empty += int(np.count_nonzero(lengths == 0))
        bmin, bmax = int(lengths.min()), int(lengths.max())
        self.lo = bmin if self.lo is None else min(self.lo, bmin)
        self.hi = bmax if self.hi is None else max(self.hi, bmax)
        if self.gathered is None and (bmin < 0 or bmax >= _COUNT_LIMIT):
            self.gathered = []
            if self.histogram.size:  # replay the counts gathered so far as values
                self.gathered.append(np.repeat(np.arange(self.histogram.size, dtype=np.int64), self.histogram))
            self.histogram = np.zeros(0, dtype=np.int64)
        if self.gathered is not None:
            check_memory(8 * self.count, self.limit, self.path, self.what)
            self.gathered.append(lengths)
            return
        counts = np.bincount(lengths)
        if counts.size > self.histogram.size:
            counts[: self.histogram.size] += self.histogram
            self.histogram = counts
        else:
            self.histogram[: counts.size] += counts

    def result(self) -> dict:
        """``count``, ``min``, ``median``, ``mean``, ``max`` and ``empty`` (``None`` statistics: no sequences)."""
        count = self.count
        if not count:
            return {"count": 0, "min": None, "median": None, "mean": None, "max": None, "empty": 0}
        if self.gathered is not None:
            median = float(np.median(np.concatenate(self.gathered)))
        else:
            cumulative = np.cumsum(self.histogram)
            lo_mid = int(np.searchsorted(cumulative, (count - 1) // 2, side="right"))
            hi_mid = int(np.searchsorted(cumulative, count // 2, side="right"))
            median = (lo_mid + hi_mid) / 2
        return {"count": count, "min": self.lo, "median": float(median), "mean": self.total / count,
                "max": self.hi, "empty": self.empty}


def length_stats(blocks: Iterator[np.ndarray], limit: int, path: str, what: str) -> dict:
    """:class:`LengthStats` of a level given as consecutive blocks of its offsets.

    >>> length_stats(iter([np.array([0, 3, 3]), np.array([4, 9])]), 1 << 20, "x.h5", "level 0")
    {'count': 4, 'min': 0, 'median': 2.0, 'mean': 2.25, 'max': 5, 'empty': 1}
    """
    stats = LengthStats(limit, path, what)
    for block in blocks:
        stats.add(block)
    return stats.result()


def slice_bounds(key: slice, count: int) -> tuple[int, int]:
    """``(begin, end)`` of a Python slice over ``count`` sequences (step 1; empty is ``(b, b)``: zero sequences).

    >>> slice_bounds(slice(0, 2), 5), slice_bounds(slice(-2, None), 5), slice_bounds(slice(3, 99), 5)
    ((0, 2), (3, 5), (3, 5))
    >>> slice_bounds(slice(7, 9), 5)
    (5, 5)
    """
    if key.step not in (None, 1):
        raise LodIndexError(f"a slice of top-level sequences takes no step (got {key.step!r})")
    begin, end, _ = key.indices(count)
    return begin, max(begin, end)


def counted(n: int, noun: str) -> str:
    """``1 sequence``, ``2 sequences``, ``1,200 rows``: how every message counts things.

    >>> counted(1, "LoD level"), counted(3, "sequence"), counted(1200, "row")
    ('1 LoD level', '3 sequences', '1,200 rows')
    """
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def level_position(level: int, n_levels: int) -> int:
    """The 0-based position of ``level`` (negative counts from the last) among ``n_levels`` LoD levels.

    >>> level_position(-1, 3), level_position(1, 3)
    (2, 1)
    """
    if not isinstance(level, (int, np.integer)) or not -n_levels <= level < n_levels:
        raise LodIndexError(f"level {level} is out of range for a tensor with {n_levels} LoD level(s)")
    return int(level) + n_levels if level < 0 else int(level)
