"""LoDTensor: one flat data array plus a LoD index, and nested-list conversion.

>>> t = LoDTensor(np.arange(7), recursive_sequence_lengths=[[2, 1], [2, 2, 3]])
>>> t.lod
[[0, 2, 3], [0, 2, 4, 7]]
>>> t.branch(0, 1).data.tolist()
[2, 3]
>>> from_nested([[[1, 2], [3]], [[4, 5, 6]]]).recursive_sequence_lengths
[[2, 1], [2, 1, 3]]
"""

from __future__ import annotations

import math
from typing import Any, Iterator, Sequence

import numpy as np

from . import lod as _lod
from .limits import default_max_memory
from .planner import sequence_ranges
from ._device import cupy_module
from ._device import is_device_array as _is_device_array
from ._device import to_host as _host
from .errors import LodDtypeError, LodIndexError, LodShapeError, LodUsageError, LodValidationError

#: dtype kinds a LoD tensor may hold: bool, signed/unsigned int, float, complex
NUMERIC_KINDS = "biufc"


def check_dtype(dtype: np.dtype, where: str = "data") -> np.dtype:
    """Refuse dtypes that cannot live in a flat numeric array (object, strings, records), and the extended floats.

    float128 / complex256 (``numpy.longdouble``) have no portable layout, no JSON form and no kernels: refused
    by name, as every reader and ``validate`` do.

    >>> check_dtype(np.dtype(">f4"))
    dtype('>f4')
    >>> check_dtype(np.dtype(np.longdouble))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    lodtool.errors.LodDtypeError: data has dtype float128 (numpy.longdouble, extended precision); lodtool supports ...
    """
    dtype = np.dtype(dtype)
    if dtype.kind not in NUMERIC_KINDS or dtype.fields is not None or dtype.subdtype is not None:
        raise LodDtypeError(f"{where} has dtype {dtype}; lodtool stores numeric and bool data only")
    if (dtype.kind == "f" and dtype.itemsize > 8) or (dtype.kind == "c" and dtype.itemsize > 16):
        raise LodDtypeError(f"{where} has dtype {dtype} (numpy.longdouble, extended precision); lodtool supports "
                            "floats of 16, 32 and 64 bits and complex of 64 and 128 bits")
    return dtype


#: offsets windows a handle reads one at a time before it holds its levels whole: a one-shot read (a slice, a
#: head) never reads a whole level, and a loop of reads soon stops reading windows
RESIDENT_AFTER = 16
#: offsets read per block for statistics (8 MiB of int64)
_STATS_BLOCK = 1 << 20


def bytes_per_row(dtype: Any, element_shape: Sequence[int]) -> int:
    """Bytes of one data row: the size of ``dtype`` times the values of ``element_shape`` (exact, any size).

    >>> bytes_per_row("float32", (3, 4)), bytes_per_row(np.int64, ())
    (48, 8)
    """
    return np.dtype(dtype).itemsize * math.prod(int(d) for d in element_shape)


class TensorView:
    """Branches, level slices and chunks of a LoD tensor, read through ``_window`` and ``_rows``."""

    __slots__ = ()
    #: the token metadata (:class:`~lodtool.tokens.TokenInfo`) of a stored tensor that records one
    tokens = None

    def num_sequences(self, level: int = 0) -> int:
        """How many sequences ``level`` has (rows for a 0-level tensor)."""
        sizes = self.level_sizes
        if not sizes:
            return self.n_rows
        return max(sizes[self._level(level)] - 1, 0)

    def __len__(self) -> int:
        return self.num_sequences(0)

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.n_rows,) + tuple(self.element_shape)

    @property
    def row_bytes(self) -> int:
        """Bytes of one data row (its element shape's values)."""
        return bytes_per_row(self.dtype, self.element_shape)

    def _level(self, level: int) -> int:
        return _lod.level_position(level, self.lod_level)

    def _tensor(self, data, offsets, level_names=None) -> "LoDTensor":
        return LoDTensor._trusted(data, offsets, level_names, owned=True)

    # -- checked raw reads -----------------------------------------------------------------------
    def read_offsets(self, level: int, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Entries ``start..stop`` of level ``level``'s offsets as int64 (``stop=None``: to the end).

        The window is checked against the level's size; the values are as
        stored (``validate`` checks them).
        """
        level = self._level(level)
        size = self.level_sizes[level]
        stop = size if stop is None else int(stop)
        start = int(start)
        if not 0 <= start <= stop <= size:
            raise LodIndexError(f"level {level}: offsets window {start}:{stop} is outside 0:{size}")
        return _lod.as_index_array(self._window(level, start, stop), level=level)

    def read_rows(self, begin: int, end: int) -> np.ndarray:
        """Data rows ``begin..end`` as an array (no LoD)."""
        begin, end = int(begin), int(end)
        if not 0 <= begin <= end <= self.n_rows:
            raise LodIndexError(f"rows {begin}:{end} are outside 0:{self.n_rows}")
        return self._rows(begin, end)

    # -- branches and slices -----------------------------------------------------------------------
    def branch(self, *path: int):
        """The ``<i,j,...>``-slice: the sub-tree under a branch, as a LoD tensor of its own.

        Its offsets are rebased to 0 and it has ``lod_level - len(path)`` levels;
        a full path gives the rows of one sequence as a 0-level tensor.  Two
        offsets per level are read, and one run of rows.

        >>> from lodtool import from_nested
        >>> t = from_nested([[[1, 2, 3], [4, 5]], [[6]], [[7, 8], [9, 10, 11]]])
        >>> t.branch(2).lod, t.branch(2, 0).data.tolist()
        ([[0, 2, 5]], [7, 8])
        """
        levels = self._checked_levels()
        if levels and len(path) <= len(levels):  # the hot path of a training loop: no check more than needed
            found = _lod.walk_branch(path, levels)
            if found is not None:
                return self._extract_checked(len(path), found[0], found[1], levels)
        if not self.lod_level:
            raise LodIndexError("a 0-level tensor has no branches; slice its rows with numpy")
        level, begin, end = _lod.resolve_branch(path, self._window, self.level_sizes, self.n_rows)
        return self._extract(level, begin, end)

    def __getitem__(self, key):
        """``t[i]`` is ``t.branch(i)``; ``t[i, j]`` is ``t.branch(i, j)``; ``t[a:b]`` is top-level sequences a..b.

        >>> from lodtool import from_nested
        >>> t = from_nested([[1, 2], [3], [4, 5, 6]])
        >>> t[0:2].to_nested(), t[-1:].to_nested()
        ([[1, 2], [3]], [[4, 5, 6]])
        """
        if isinstance(key, slice):
            begin, end = _lod.slice_bounds(key, len(self))
            return self.slice_level(0, begin, end) if self.lod_level else self._tensor(self._rows(begin, end), ())
        path = key if isinstance(key, tuple) else (key,)
        if not all(isinstance(i, (int, np.integer)) for i in path):
            raise LodIndexError(f"index a {type(self).__name__} with integers or one slice, as t[i], t[i, j] or "
                                "t[a:b]; use slice_level for ranges of a lower level")
        return self.branch(*path)

    def slice_level(self, level: int, begin: int, end: int):
        """Sequences ``begin..end`` of ``level`` with everything under them (Paddle's ``LODSlice``).

        The result's top level is ``level``, so it has ``lod_level - level`` levels.

        >>> from lodtool import from_nested
        >>> t = from_nested([[[1, 2, 3], [4, 5]], [[6]], [[7, 8], [9, 10, 11]]])
        >>> t.slice_level(1, 1, 3).lod
        [[0, 2, 3]]
        """
        level = self._level(level)
        levels = self._checked_levels()  # validated whole offsets: sound sizes, and the windows need no check
        if not levels:
            _lod.check_level_sizes(self.level_sizes, self.n_rows)  # a level of no offsets is a broken file
        count = len(levels[level]) - 1 if levels else self.num_sequences(level)
        if not 0 <= begin <= end <= count:
            raise LodIndexError(f"level {level}: range {begin}:{end} is not a range inside 0:{count}")
        if levels:
            return self._extract_checked(level, int(begin), int(end), levels)
        return self._extract(level, int(begin), int(end))

    def head(self, k: int = 5):
        """The first ``k`` top-level sequences (rows, for a 0-level tensor)."""
        return self[:max(int(k), 0)]

    def tail(self, k: int = 5):
        """The last ``k`` top-level sequences (rows, for a 0-level tensor)."""
        n = len(self)
        return self[n - min(max(int(k), 0), n):]

    def _checked_levels(self) -> tuple | None:
        """Every level's whole offsets, validated together, where this view holds them on the host (else
        ``None``: each window read is checked on its way)."""
        return None

    def _extract_checked(self, level: int, begin: int, end: int, levels: tuple):
        offsets = []
        for o in levels[level:]:
            window = o[begin:end + 1]
            begin, end = window.item(0), window.item(-1)
            offsets.append(window - begin)  # a Python int: numpy subtracts it faster than its own scalar
        names = self.level_names
        return self._tensor(self._rows(begin, end), offsets, names[level:] if names else None)

    def _extract(self, level: int, begin: int, end: int):
        offsets, row_begin, row_end = _lod.extract_range(level, begin, end, self._window, self.level_sizes,
                                                         self.n_rows)
        names = self.level_names[level:] if self.level_names else None
        return self._tensor(self._rows(row_begin, row_end), offsets, names)

    # -- statistics ----------------------------------------------------------------------------------------
    def level_stats(self, level: int) -> dict:
        """Length statistics of one level, from its offsets alone, read in blocks: ``count`` (sequences),
        ``min``, ``median``, ``mean``, ``max`` and ``empty``.

        >>> from lodtool import from_nested
        >>> from_nested([[1, 2, 3], [], [4]]).level_stats(0)
        {'count': 3, 'min': 0, 'median': 1.0, 'mean': 1.3333333333333333, 'max': 3, 'empty': 1}
        """
        level = self._level(level)
        limit, where, what = self._stats_context()
        return _lod.length_stats(self.offset_blocks(level), limit, where, f"{what}level {level} lengths")

    def offset_blocks(self, level: int) -> Iterator[np.ndarray]:
        """Level ``level``'s offsets in consecutive blocks: what statistics read, in bounded memory."""
        size = self.level_sizes[self._level(level)]
        for a in range(0, size, _STATS_BLOCK):
            yield self.read_offsets(level, a, min(a + _STATS_BLOCK, size))

    def _stats_context(self) -> tuple[int, str, str]:
        """The memory limit, the place and the name of this tensor that statistics' errors give."""
        return default_max_memory(), repr(self), ""

    def checked_level_stats(self) -> list[dict]:
        """:meth:`level_stats` of every level, after the whole LoD is validated (statistics of a broken one would be
        nonsense)."""
        self._check_valid()
        return [self.level_stats(k) for k in range(self.lod_level)]

    def _check_valid(self) -> None:
        problems = self.validate(max_problems=1)
        if problems:
            raise self._problem_error(problems[0])

    def _problem_error(self, problem) -> LodValidationError:
        """A stored tensor's broken LoD rule, naming its file and tensor."""
        return LodValidationError(f"{self._path}: tensor {self.name!r}: {problem}")

    # -- chunks ----------------------------------------------------------------------------------------
    def iter_chunks(self, max_rows: int = 1 << 22) -> Iterator:
        """Consecutive chunks of whole top-level sequences, each a valid LoD tensor of its own.

        A chunk has at most ``max_rows`` rows unless one top-level sequence alone
        is bigger (then it is one chunk).  The LoD is validated first; each
        chunk's offsets are rebased to 0.  Concatenating the chunks gives the
        whole tensor back.
        """
        if isinstance(max_rows, bool) or not isinstance(max_rows, (int, np.integer)) or max_rows < 1:
            raise LodUsageError(f"max_rows must be a positive integer, got {max_rows!r}")
        max_rows = int(max_rows)
        if not self.lod_level:
            for start in range(0, max(self.n_rows, 1), max_rows):
                yield self._tensor(self._rows(start, min(start + max_rows, self.n_rows)), ())
            return
        self._check_valid()
        for i0, i1 in sequence_ranges(self._window, self.lod_level, self.level_sizes[0] - 1, max_rows):
            yield self.slice_level(0, i0, i1)



class TensorSource:
    """What an opened source of tensors (a container, a sharded folder, a token dataset) answers beside its
    tensors: its ``names``, ``name in f``, iteration, ``len`` and a context manager that calls ``close()``."""

    __slots__ = ()

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class LoDTensor(TensorView):
    """A tensor whose first dimension is segmented by a (possibly nested) LoD index.

    Give the index as offsets (``lod``) or as lengths
    (``recursive_sequence_lengths``), never both; neither gives a 0-level (plain)
    tensor.  The index is validated with Paddle's rules on construction.

    The data may be a CuPy array; its offsets may then be CuPy arrays too (they
    are validated on the GPU) or host arrays.  :meth:`to` moves a tensor between
    ``"cpu"`` and ``"cuda"``, and :attr:`device` says where it is.

    >>> t = LoDTensor(np.ones((6, 4), np.float32), recursive_sequence_lengths=[[3, 1, 2]])
    >>> t.lod, t.lod_level, t.shape, len(t)
    ([[0, 3, 4, 6]], 1, (6, 4), 3)
    """

    __slots__ = ("_data", "_offsets", "_level_names", "_checked", "_shared")

    def __init__(self, data: Any, lod: Sequence[Sequence[int]] | None = None,
                 recursive_sequence_lengths: Sequence[Sequence[int]] | None = None, *,
                 level_names: Sequence[str] | None = None, validate: bool = True):
        if lod is not None and recursive_sequence_lengths is not None:
            raise LodUsageError("give lod (offsets) or recursive_sequence_lengths, not both")
        on_device = _is_device_array(data)
        if not on_device:
            data = np.asarray(data)
        check_dtype(data.dtype)
        if data.ndim == 0:
            raise LodShapeError("data must have at least one dimension (its rows)")
        table = recursive_sequence_lengths if recursive_sequence_lengths is not None else lod
        keep_on_device = table is not None and on_device and any(_is_device_array(level) for level in table)
        host = [_host(level) for level in table] if table is not None else []
        shared = False
        if recursive_sequence_lengths is not None:
            offsets = _lod.lod_from_lengths(host)
        else:
            offsets = [_lod.as_index_array(level, level=k) for k, level in enumerate(host)]
            shared = [_writable_elsewhere(o, given) for o, given in zip(offsets, host)]
            if validate:  # checked now, so the tensor owns what it checked
                offsets = [o.copy() if s else o for o, s in zip(offsets, shared)]
            shared = any(shared) and not validate
        if validate:
            _lod.validate_lod(offsets, data.shape[0])
        if keep_on_device:  # checked on the host (a copy of the offsets alone), kept where the data is
            upload = cupy_module().asarray
            offsets = [upload(o) for o in offsets]
        self._data = data
        self._offsets = tuple(_read_only(o) if shared else _frozen(o) for o in offsets)
        self._level_names = _check_level_names(level_names, len(offsets))
        self._checked = bool(validate)
        self._shared = shared

    @classmethod
    def _trusted(cls, data: Any, offsets: Sequence[np.ndarray], level_names=None, *,
                 owned: bool = False) -> "LoDTensor":
        """Build from already validated parts (operators and readers use this); ``owned``: the offsets are new
        arrays nobody else holds, frozen in place instead of viewed read-only."""
        t = cls.__new__(cls)
        t._data = data
        if owned:  # frozen in place, one by one (a branch makes an array or two: a loop costs less than a map)
            for o in offsets:
                _frozen(o)
            t._offsets = tuple(offsets)
        else:
            t._offsets = tuple(map(_read_only, offsets))
        t._level_names = tuple(level_names) if level_names else None
        t._checked = True
        t._shared = False
        return t

    def checked(self) -> "LoDTensor":
        """This tensor, its LoD validated first if it was built with ``validate=False``.

        Every operator calls it on its inputs before a kernel runs, so a tensor
        built unchecked is checked at its first use and never reaches a kernel
        with a broken LoD.  One whose offsets share memory that the caller can
        still write (a zero-copy bridge with ``validate=False``) is checked at
        every use, since they could have changed since.

        >>> t = LoDTensor(np.arange(3), [[0, 2, 1, 3]], validate=False)
        >>> t.checked()
        Traceback (most recent call last):
        ...
        lodtool.errors.LodValidationError: level 0: offset[2]=1 < offset[1]=2 (offsets must not decrease)
        """
        if not self._checked:
            _lod.validate_lod([_host(o) for o in self._offsets], self.n_rows)
            self._checked = not self._shared
        return self

    # -- the index ---------------------------------------------------------------------------
    @property
    def data(self):
        """The flat data array, shape ``(rows, *element_shape)``."""
        return self._data

    @property
    def offsets(self) -> tuple[np.ndarray, ...]:
        """The LoD as a tuple of int64 offsets arrays, one per level."""
        return self._offsets

    @property
    def lod(self) -> list[list[int]]:
        """The LoD as offsets, ``list[list[int]]``, as Paddle's ``lod()``."""
        return [_tolist(o) for o in self._offsets]

    @property
    def recursive_sequence_lengths(self) -> list[list[int]]:
        """The LoD as lengths, as Paddle's ``recursive_sequence_lengths()``."""
        return [_tolist(o[1:] - o[:-1]) for o in self._offsets]

    @property
    def lod_level(self) -> int:
        return len(self._offsets)

    @property
    def level_names(self) -> tuple[str, ...] | None:
        """Optional names of the levels, e.g. ``("article", "sentence")``."""
        return self._level_names

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._data.shape)

    @property
    def dtype(self) -> np.dtype:
        return self._data.dtype

    @property
    def device(self) -> str:
        """Where the data lives: ``"cpu"`` or ``"cuda"``."""
        return "cuda" if _is_device_array(self._data) else "cpu"

    def to(self, device: str) -> "LoDTensor":
        """The same tensor with its data and offsets on ``device`` (``"cpu"`` or ``"cuda"``).

        Returns ``self`` when everything is already there.  ``"cuda"`` needs CuPy
        and a GPU (else a :class:`~lodtool.errors.LodBackendError`) and
        :mod:`lodtool.ops` imported (it brings the GPU helpers).

        >>> t = LoDTensor(np.arange(3), [[0, 1, 3]])
        >>> t.to("cpu") is t, t.device
        (True, 'cpu')
        >>> t.to("cuda").device  # doctest: +SKIP
        'cuda'
        """
        parts = (self._data,) + self._offsets
        if device == "cpu":
            if not any(_is_device_array(a) for a in parts):
                return self
            return LoDTensor._trusted(_host(self._data), tuple(_host(o) for o in self._offsets), self._level_names)
        if device == "cuda":
            if all(_is_device_array(a) for a in parts):
                return self
            upload = cupy_module().asarray
            moved = tuple(a if _is_device_array(a) else upload(a) for a in parts)
            return LoDTensor._trusted(moved[0], moved[1:], self._level_names)
        raise LodUsageError(f"unknown device {device!r}; choose cpu or cuda")

    @property
    def element_shape(self) -> tuple[int, ...]:
        """The trailing dimensions: ``()`` for scalars, ``(D,)`` for vectors, ..."""
        return tuple(self._data.shape[1:])

    @property
    def n_rows(self) -> int:
        return int(self._data.shape[0])

    @property
    def level_sizes(self) -> list[int]:
        """Entries of each level's offsets (sequences of level ``k`` + 1)."""
        return [len(o) for o in self._offsets]

    def _window(self, level: int, start: int, stop: int) -> np.ndarray:
        return _host(self._offsets[level][start:stop])

    def _rows(self, begin: int, end: int):
        return self._data[begin:end]

    def _check_valid(self) -> None:
        self.checked()

    def _checked_levels(self) -> tuple | None:
        if not self._checked or any(_is_device_array(o) for o in self._offsets):
            return None
        return self._offsets

    def lengths(self, level: int = -1) -> np.ndarray:
        """Lengths of the sequences of ``level`` as an int64 array."""
        o = self._offsets[self._level(level)]
        return o[1:] - o[:-1]

    def __array__(self, dtype=None, copy=None):
        data = self._data
        if _is_device_array(data):
            data = data.get()
        if dtype is not None:
            return data.astype(dtype, copy=bool(copy))
        return np.array(data, copy=True) if copy else data

    def __repr__(self) -> str:
        names = f", level_names={list(self._level_names)}" if self._level_names else ""
        lod = self.lod if sum(len(o) for o in self._offsets) <= 40 else f"<{self.lod_level} levels>"
        return f"LoDTensor(shape={self.shape}, dtype={self.dtype}, lod={lod}{names})"

    def equals(self, other: "LoDTensor") -> bool:
        """True if both have the same LoD, dtype, shape and data (NaNs compare equal)."""
        if not isinstance(other, LoDTensor) or self.lod_level != other.lod_level:
            return False
        if self.dtype != other.dtype or self.shape != other.shape:
            return False
        if any(not np.array_equal(_host(a), _host(b)) for a, b in zip(self._offsets, other._offsets)):
            return False
        a, b = np.asarray(self), np.asarray(other)
        return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))

    def with_level_names(self, level_names: Sequence[str] | None) -> "LoDTensor":
        """The same tensor, with other level names."""
        return LoDTensor._trusted(self._data, self._offsets, _check_level_names(level_names, self.lod_level))

    # -- nested lists ----------------------------------------------------------------------------
    def to_nested(self) -> list:
        """The tensor as nested Python lists (the inverse of :func:`from_nested`).

        >>> LoDTensor(np.arange(3), recursive_sequence_lengths=[[2, 1]]).to_nested()
        [[0, 1], [2]]
        """
        rows = np.asarray(self).tolist()
        for o in reversed(self._offsets):
            bounds = o.tolist()
            rows = [rows[bounds[i]:bounds[i + 1]] for i in range(len(bounds) - 1)]
        return rows


def _tolist(a) -> list[int]:
    return a.tolist() if isinstance(a, np.ndarray) else [int(x) for x in a.get()]


def _writable_elsewhere(offsets: np.ndarray, given: Any) -> bool:
    """Whether ``offsets`` shares memory that someone else can still write: the caller's array, or a writable array
    under a read-only view of it (read-only memory, an Arrow buffer or a read-only map, is nobody's to change)."""
    if isinstance(given, np.ndarray) and np.may_share_memory(offsets, given):
        base = given
        while isinstance(base, np.ndarray):
            if base.flags.writeable:
                return True
            base = base.base
    return False


def _frozen(offsets: Any) -> Any:
    """The tensor's own offsets made read-only in place (device arrays cannot be)."""
    if type(offsets) is np.ndarray:  # the common case first: a plain host array
        offsets.setflags(write=False)  # a third of the cost of going through ``flags``
    elif isinstance(offsets, np.ndarray) and offsets.flags.writeable and not _is_device_array(offsets):
        offsets.flags.writeable = False
    return offsets


def _read_only(offsets: Any) -> Any:
    """A read-only view of host offsets, so a tensor's index cannot change after it was checked."""
    if isinstance(offsets, np.ndarray) and offsets.flags.writeable and (type(offsets) is np.ndarray
                                                                       or not _is_device_array(offsets)):
        offsets = offsets.view()
        offsets.flags.writeable = False
    return offsets


def _check_level_names(level_names, lod_level: int):
    if level_names is None:
        return None
    names = tuple(str(n) for n in level_names)
    if len(names) != lod_level:
        raise LodShapeError(f"{len(names)} level name(s) given for a tensor with {lod_level} LoD level(s)")
    return names


def from_nested(obj: Any, lod_level: int | None = None, dtype: Any = None, *,
                level_names: Sequence[str] | None = None) -> LoDTensor:
    """Build a LoD tensor from nested Python lists.

    The outer list is the batch: its items are the level-0 sequences.  Without
    ``lod_level`` every list level is a LoD level and the scalars are the
    elements.  With ``lod_level=N``, lists nested deeper than N levels become the
    element shape, which must be uniform.  Nesting depth is walked without
    recursion, so very deep input gives an error, not a crashed interpreter.

    >>> t = from_nested([[[1.0, 2.0], [3.0, 4.0]], [[5.0, 6.0]]], lod_level=1)
    >>> t.lod, t.element_shape
    ([[0, 2, 3]], (2,))
    >>> from_nested([1, 2, 3]).lod_level
    0

    A list of NumPy arrays (one per sequence, e.g. per-utterance feature
    matrices) is one LoD level over their rows:

    >>> t = from_nested([np.ones((3, 4)), np.zeros((1, 4))])
    >>> t.lod, t.element_shape
    ([[0, 3, 4]], (4,))
    """
    if not isinstance(obj, (list, tuple)):
        raise LodShapeError(f"expected a list of sequences, got {type(obj).__name__}")
    if obj and lod_level in (None, 1) and all(isinstance(a, np.ndarray) and a.ndim >= 1 for a in obj):
        return _from_arrays(obj, dtype, level_names)
    if lod_level is not None and lod_level < 0:
        raise LodUsageError(f"lod_level must be >= 0, got {lod_level}")
    if lod_level == 0:
        lengths: list[list[int]] = []
        elements: list = list(obj)
    else:
        lengths, elements = _flatten(obj, lod_level)
    data = _elements_to_array(elements, dtype, obj, lengths)
    offsets = [_lod.lengths_to_offsets(level) for level in lengths]
    _lod.validate_lod(offsets, data.shape[0])
    return LoDTensor._trusted(data, offsets, _check_level_names(level_names, len(offsets)))


def _from_arrays(arrays: Sequence[np.ndarray], dtype: Any, level_names) -> LoDTensor:
    """One sequence per array, its rows the elements (their trailing shapes must agree)."""
    shape = arrays[0].shape[1:]
    for i, a in enumerate(arrays):
        if a.shape[1:] != shape:
            raise LodShapeError(f"array {i} (branch <{i}>) has rows of shape {a.shape[1:]}, but array 0 has rows of "
                                f"shape {shape}; the rows of every sequence must have one shape")
    data = np.concatenate(arrays) if dtype is None else np.concatenate(arrays).astype(dtype)
    check_dtype(data.dtype)
    offsets = [_lod.lengths_to_offsets([a.shape[0] for a in arrays])]
    _lod.validate_lod(offsets, data.shape[0])
    return LoDTensor._trusted(data, offsets, _check_level_names(level_names, 1))


def _flatten(obj: Sequence, lod_level: int | None) -> tuple[list[list[int]], list]:
    """Lengths per level and the flat element list, by an explicit-stack walk.

    A list at depth ``d >= 1`` is a sequence of level ``d - 1``; the items of the
    lists at the deepest LoD depth are the elements.
    """
    lengths: list[list[int]] = []
    elements: list = []
    leaf_depth = None if lod_level is None else lod_level + 1  # depth of the elements
    max_list_depth = 0
    # frames of (sequence, next index); path indices are the frames' positions
    stack: list[list] = [[obj, 0]]
    while stack:
        frame = stack[-1]
        seq, i = frame
        depth = len(stack)  # depth of seq's items
        if i >= len(seq):
            stack.pop()
            continue
        item = seq[i]
        frame[1] = i + 1
        is_list = isinstance(item, (list, tuple))
        if leaf_depth is not None and depth == leaf_depth:
            elements.append(item)
            continue
        if not is_list:
            if leaf_depth is None and max_list_depth < depth:
                leaf_depth = depth
                elements.append(item)
                continue
            raise LodShapeError(f"inconsistent nesting at {_path_of(stack)}: found {item!r} at depth {depth}, "
                                f"but lists nest {max(max_list_depth, (leaf_depth or 1) - 1)} deep elsewhere")
        # a list at `depth` is a sequence of level depth-1
        if leaf_depth is not None and depth >= leaf_depth:
            raise LodShapeError(f"inconsistent nesting at {_path_of(stack)}: found a list at depth {depth}, "
                                f"but elements are at depth {leaf_depth}")
        while len(lengths) < depth:
            lengths.append([])
        lengths[depth - 1].append(len(item))
        max_list_depth = max(max_list_depth, depth)
        if leaf_depth is not None and depth + 1 == leaf_depth:
            # fast path: the items of this list are elements
            elements.extend(item)
            continue
        stack.append([item, 0])
    if leaf_depth is None:
        leaf_depth = max_list_depth + 1
    while len(lengths) < leaf_depth - 1:
        lengths.append([])
    _check_counts(lengths, len(obj))
    return lengths, elements


def _check_counts(lengths: list[list[int]], n_top: int) -> None:
    # every list seen must sit at a depth with lists below it; an empty level
    # under non-empty sequences means a list was found where an element should be.
    expected = n_top
    for level, lens in enumerate(lengths):
        if len(lens) != expected:
            raise LodShapeError(f"inconsistent nesting depth at level {level}: {len(lens)} sequences "
                                f"where {expected} are expected")
        expected = sum(lens)


def _path_of(stack: list[list]) -> str:
    return _lod.format_path([frame[1] - 1 for frame in stack])


def _elements_to_array(elements: list, dtype, obj, lengths) -> np.ndarray:
    for e in elements[:1]:
        if isinstance(e, (str, bytes)) or e is None:
            raise LodDtypeError(f"element {e!r} is not a number")
    try:
        data = np.array(elements, dtype=dtype) if elements else np.empty((0,), dtype=dtype or np.float64)
    except (ValueError, TypeError, OverflowError) as exc:
        raise _explain_bad_elements(elements, lengths, dtype, exc) from None
    if data.dtype.kind not in NUMERIC_KINDS:
        raise _explain_bad_elements(elements, lengths, dtype, None)
    return data


def _explain_bad_elements(elements, lengths, dtype, exc) -> Exception:
    """Find the first element that breaks the array, and name its position."""
    first_shape = np.shape(elements[0]) if elements else ()
    for k, e in enumerate(elements):
        if e is None or isinstance(e, (str, bytes, dict)):
            return LodDtypeError(f"element {k} ({_element_path(k, lengths)}) is {e!r}, not a number")
        try:
            shape = np.shape(e)
        except ValueError:
            shape = None
        if shape != first_shape:
            return LodShapeError(f"element {k} ({_element_path(k, lengths)}) has shape {shape}, but element 0 "
                                 f"has shape {first_shape}; elements must be uniform")
    if exc is not None:
        return LodDtypeError(f"elements cannot be stored as {dtype or 'a numeric array'}: {exc}")
    return LodDtypeError("elements are not numeric")


def _element_path(k: int, lengths: list[list[int]]) -> str:
    """The branch ``<i,j,...,e>`` of flat element ``k``."""
    path = []
    index = k
    for lens in reversed(lengths):
        offsets = _lod.lengths_to_offsets(lens)
        seq = int(np.searchsorted(offsets, index, side="right") - 1)
        path.append(index - int(offsets[seq]))
        index = seq
    path.append(index)
    return "branch " + _lod.format_path(list(reversed(path)))


def concat_tensors(parts: Sequence[LoDTensor], level_names=None) -> LoDTensor:
    """Join tensors of one dtype, element shape and LoD level, sequence after sequence (level names: the first's,
    or ``level_names``).

    >>> a = LoDTensor(np.arange(3), [[0, 1, 3]])
    >>> b = LoDTensor(np.arange(3, 5), [[0, 2]])
    >>> concat_tensors([a, b]).lod
    [[0, 1, 3, 5]]
    """
    parts = list(parts)
    if not parts:
        raise LodUsageError("concat_tensors: no tensors given")
    if len(parts) == 1:
        return parts[0] if level_names is None else parts[0].with_level_names(level_names)
    data = np.concatenate([np.asarray(p.data) for p in parts])
    offsets = []
    for k in range(parts[0].lod_level):
        pieces, base = [np.zeros(1, np.int64)], 0
        for p in parts:
            o = np.asarray(p.offsets[k], np.int64)
            pieces.append(o[1:] + base)
            base += int(o[-1])
        offsets.append(np.concatenate(pieces))
    names = level_names if level_names is not None else parts[0].level_names
    return LoDTensor._trusted(data, offsets, names)


__all__ = ["bytes_per_row", "TensorView", "TensorSource", "LoDTensor", "from_nested", "concat_tensors", "check_dtype",
           "LodValidationError"]
