"""``slice``, ``head``, ``tail`` and ``tree``: parts of a stored tensor, read lazily from disk.

Each reads only a few offsets windows and one contiguous block of data.  The
part comes back as an :class:`Excerpt` (the part, with the stored tensor's
name and size); :func:`lodtool.tasks.export` writes it anywhere ``unpack``
writes, or to a container.
"""

from __future__ import annotations

import builtins
import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from ..errors import LodUsageError
from ..lod import parse_path, resolve_branch, slice_bounds
from ..tensor import LoDTensor


@dataclass(frozen=True)
class Excerpt:
    """A part of a stored tensor: the part itself, the stored tensor's name and its top-level sequences."""

    tensor: LoDTensor
    name: str
    total: int
    #: for a level range: the sequences taken, ``(start, stop)`` after Python's slice rules and clamping
    taken: tuple[int, int] | None = None
    #: for a level range: how many sequences the level has
    level_count: int | None = None
    #: the stored tensor's token metadata (:class:`lodtool.tokens.TokenInfo`), which a copy keeps
    tokens: Any = None


def _branch_path(branch: str | Sequence[int] | None) -> tuple[int, ...]:
    if branch is None or (isinstance(branch, str) and not branch):
        return ()
    return parse_path(branch) if isinstance(branch, str) else tuple(int(i) for i in branch)


def slice(path: str | os.PathLike, branch: str | Sequence[int] | None = None, *, name: str | None = None,
          level: int | None = None, start: int | None = None, stop: int | None = None, token_dtype: Any = None,
          eos_token_id: int | None = None) -> Excerpt:
    """The branch ``<i,j,...>`` of a stored tensor, or sequences ``start..stop`` of ``level`` (``lodtool slice``).

    ``branch`` is written ``"2,0"``, ``"<2,0>"`` or ``(2, 0)``; negative indices
    count from the end.  Give a branch or ``level`` with ``start``/``stop``,
    which follow Python's slices: ``None`` is an open end, negatives count from
    the end, and a range past the end is clamped (``taken`` says to what).
    ``token_dtype`` and ``eos_token_id`` are what a token dataset cannot say
    itself (see :func:`lodtool.open`), here and in :func:`head`, :func:`tail`
    and :func:`tree`.

    >>> import os, tempfile, numpy as np
    >>> from lodtool import LoDTensor, save
    >>> p = os.path.join(tempfile.mkdtemp(), "a.lod.h5")
    >>> save(p, LoDTensor(np.arange(1, 16), recursive_sequence_lengths=[[3, 1, 2], [3, 2, 4, 1, 2, 3]]))
    >>> slice(p, "<2>").tensor.to_nested(), slice(p, level=1, start=2, stop=4).tensor.to_nested()
    ([[11, 12], [13, 14, 15]], [[6, 7, 8, 9], [10]])
    """
    if (level is None and (start is not None or stop is not None)) or (level is not None and branch is not None):
        raise LodUsageError("give a branch, or level with start and stop")
    if level is None and branch is None:
        raise LodUsageError("give a branch (e.g. 2,0) or level with start and stop")
    with _stored(path, name, token_dtype, eos_token_id) as t:
        if level is None:
            return _excerpt(t, t.branch(*_branch_path(branch)))
        count = t.num_sequences(level)
        start, stop = slice_bounds(builtins.slice(start, stop), count)
        return _excerpt(t, t.slice_level(level, start, stop), taken=(start, stop), level_count=count)


def head(path: str | os.PathLike, count: int = 5, *, name: str | None = None, token_dtype: Any = None,
         eos_token_id: int | None = None) -> Excerpt:
    """The first ``count`` top-level sequences of a stored tensor (``lodtool head``).

    >>> import os, tempfile, numpy as np
    >>> from lodtool import LoDTensor, save
    >>> p = os.path.join(tempfile.mkdtemp(), "a.lod.h5")
    >>> save(p, LoDTensor(np.arange(6), recursive_sequence_lengths=[[1, 2, 3]]))
    >>> e = head(p, 2)
    >>> e.tensor.to_nested(), e.total
    ([[0], [1, 2]], 3)
    """
    with _stored(path, name, token_dtype, eos_token_id) as t:
        return _excerpt(t, t.head(count))


def tail(path: str | os.PathLike, count: int = 5, *, name: str | None = None, token_dtype: Any = None,
         eos_token_id: int | None = None) -> Excerpt:
    """The last ``count`` top-level sequences of a stored tensor (``lodtool tail``).

    >>> import os, tempfile, numpy as np
    >>> from lodtool import LoDTensor, save
    >>> p = os.path.join(tempfile.mkdtemp(), "a.lod.h5")
    >>> save(p, LoDTensor(np.arange(6), recursive_sequence_lengths=[[1, 2, 3]]))
    >>> tail(p, 1).tensor.to_nested()
    [[3, 4, 5]]
    """
    with _stored(path, name, token_dtype, eos_token_id) as t:
        return _excerpt(t, t.tail(count))


@contextmanager
def _stored(path, name: str | None, token_dtype: Any, eos_token_id: int | None) -> Iterator:
    """Tensor ``name`` of a container file, a sharded folder or a token dataset, open for the block."""
    from ._open import open as open_path

    with open_path(path, token_dtype=token_dtype, eos_token_id=eos_token_id) as f:
        yield f.tensor(name)


def _excerpt(t, part: LoDTensor, **range_taken) -> Excerpt:
    return Excerpt(part, t.name, len(t), tokens=t.tokens, **range_taken)


@dataclass(frozen=True)
class TreeView:
    """What ``lodtool tree`` draws: the lazy tensor, the branch ``path`` and its children ``begin..end`` of ``level``.

    ``level`` equals the tensor's LoD levels when the children are data rows.
    """

    tensor: Any
    path: tuple[int, ...]
    level: int
    begin: int
    end: int

    def rows(self) -> int:
        """Data rows under the branch (two offsets read per level)."""
        return self.counts()[-1]

    def counts(self) -> list[int]:
        """How many children the branch has at each level below it, the data rows last (two offsets read per
        level): what a picture of every item under it would draw.

        >>> import os, tempfile, numpy as np
        >>> from lodtool import LoDTensor, save
        >>> p = os.path.join(tempfile.mkdtemp(), "a.lod.h5")
        >>> save(p, LoDTensor(np.arange(3), [[0, 2, 3], [0, 1, 1, 3]]))
        >>> with tree(p) as view:
        ...     view.counts()
        [2, 3, 3]
        """
        t, begin, end = self.tensor, self.begin, self.end
        counts = [end - begin]
        for k in range(self.level, t.lod_level):
            begin = int(t.read_offsets(k, begin, begin + 1)[0])
            end = int(t.read_offsets(k, end, end + 1)[0])
            counts.append(end - begin)
        return counts

    def read(self) -> LoDTensor:
        """The branch as a tensor (the whole tensor for the empty path)."""
        return self.tensor.branch(*self.path) if self.path else self.tensor.read()


@contextmanager
def tree(path: str | os.PathLike, *, name: str | None = None,
         branch: str | Sequence[int] | None = None, token_dtype: Any = None,
         eos_token_id: int | None = None) -> Iterator[TreeView]:
    """Open a stored tensor for drawing the sub-tree under ``branch`` (``lodtool tree``); nothing is read yet.

    >>> import os, tempfile, numpy as np
    >>> from lodtool import LoDTensor, save
    >>> p = os.path.join(tempfile.mkdtemp(), "a.lod.h5")
    >>> save(p, LoDTensor(np.arange(6), recursive_sequence_lengths=[[1, 2, 3]]))
    >>> with tree(p, branch="2") as view:
    ...     (view.level, view.begin, view.end), view.rows(), view.read().data.tolist()
    ((1, 3, 6), 3, [3, 4, 5])
    """
    branch_path = _branch_path(branch)
    with _stored(path, name, token_dtype, eos_token_id) as t:
        if not t.lod_level and branch_path:
            raise LodUsageError("a 0-level tensor has no branches; leave out branch=...")
        if t.lod_level:
            level, begin, end = resolve_branch(branch_path, t.read_offsets, t.level_sizes, t.n_rows)
        else:
            level, begin, end = 0, 0, t.n_rows
        yield TreeView(t, branch_path, level, begin, end)


__all__ = ["slice", "head", "tail", "tree", "Excerpt", "TreeView"]
