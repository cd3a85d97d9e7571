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

from typing import Any, Sequence

import numpy as np

from . import lod as _lod
from ._device import is_device_array as _is_device_array
from ._device import to_host as _host
from .errors import LodBackendError, LodDtypeError, LodIndexError, LodShapeError, LodUsageError, LodValidationError

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


#: GPU helpers with ``upload(host_array)``, ``validate(levels, n_rows)`` (device int64 levels, or a
#: LodValidationError worded as lod.validate_lod) and ``lengths_to_offsets(lengths)``.  The core may import
#: neither CuPy nor the operators (ARCHITECTURE.md), so lodtool.ops._backend installs them when imported.
_device_hooks: Any = None
#: imports the module that installs the hooks; set by the ``lodtool`` package, which sits above both floors
_device_hooks_loader: Any = None


def set_device_hooks(hooks: Any = None, *, loader: Any = None) -> None:
    """Install the GPU helpers (:mod:`lodtool.ops._backend` does, on import); ``None`` removes them.

    ``loader`` is called (once) when the helpers are first needed and none are installed yet.
    """
    global _device_hooks, _device_hooks_loader
    if loader is not None:
        _device_hooks_loader = loader
    else:
        _device_hooks = hooks


def _need_device_hooks(what: str) -> Any:
    if _device_hooks is None and _device_hooks_loader is not None:
        _device_hooks_loader()
    if _device_hooks is None:
        raise LodBackendError(f"{what} needs lodtool's CUDA backend: import lodtool.ops first "
                              "(and pip install 'lodtool[gpu]')")
    return _device_hooks


class LoDTensor:
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

    __slots__ = ("_data", "_offsets", "_level_names")

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
        if table is not None and on_device and any(_is_device_array(level) for level in table):
            offsets = _device_offsets(table, recursive_sequence_lengths is not None, data.shape[0], validate)
        else:
            if table is not None:  # host data and device offsets: the data decides where the tensor lives
                table = [_host(level) for level in table]
            if recursive_sequence_lengths is not None:
                offsets = _lod.lod_from_lengths(table)
            elif lod is not None:
                offsets = [_lod.as_index_array(level, level=k) for k, level in enumerate(table)]
            else:
                offsets = []
            if validate:
                _lod.validate_lod(offsets, data.shape[0])
        self._data = data
        self._offsets = tuple(offsets)
        self._level_names = _check_level_names(level_names, len(offsets))

    @classmethod
    def _trusted(cls, data: Any, offsets: Sequence[np.ndarray], level_names=None) -> "LoDTensor":
        """Build from already validated parts (operators and readers use this)."""
        t = cls.__new__(cls)
        t._data = data
        t._offsets = tuple(offsets)
        t._level_names = tuple(level_names) if level_names else None
        return t

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
            upload = _need_device_hooks("LoDTensor.to('cuda')").upload
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

    def num_sequences(self, level: int = 0) -> int:
        """How many sequences ``level`` has (rows for a 0-level tensor)."""
        if not self._offsets:
            return self.n_rows
        return len(self._offsets[self._level(level)]) - 1

    def lengths(self, level: int = -1) -> np.ndarray:
        """Lengths of the sequences of ``level`` as an int64 array."""
        o = self._offsets[self._level(level)]
        return o[1:] - o[:-1]

    def __len__(self) -> int:
        return self.num_sequences(0)

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

    def _level(self, level: int) -> int:
        n = self.lod_level
        if not -n <= level < n:
            raise LodIndexError(f"level {level} is out of range for a tensor with {n} LoD level(s)")
        return level + n if level < 0 else level

    # -- branches and slices ------------------------------------------------------------------
    def branch(self, *path: int) -> "LoDTensor":
        """The ``<i,j,...>``-slice: the sub-tree under a branch, as a LoD tensor of its own.

        Its offsets are rebased to 0 and it has ``lod_level - len(path)`` levels;
        a full path gives the rows of one sequence as a 0-level tensor.

        >>> t = from_nested([[[1, 2, 3], [4, 5]], [[6]], [[7, 8], [9, 10, 11]]])
        >>> t.branch(2).lod, t.branch(2, 0).data.tolist()
        ([[0, 2, 5]], [7, 8])
        """
        if not self._offsets:
            raise LodIndexError("a 0-level tensor has no branches; slice its rows with numpy")
        sizes = [len(o) for o in self._offsets]
        read = self._reader()
        level, begin, end = _lod.resolve_branch(path, read, sizes, self.n_rows)
        return self._extract(level, begin, end, read, sizes)

    def __getitem__(self, key) -> "LoDTensor":
        """``t[i]`` is ``t.branch(i)``; ``t[i, j]`` is ``t.branch(i, j)``; ``t[a:b]`` is top-level sequences a..b.

        >>> t = from_nested([[1, 2], [3], [4, 5, 6]])
        >>> t[0:2].to_nested(), t[-1:].to_nested()
        ([[1, 2], [3]], [[4, 5, 6]])
        """
        if isinstance(key, slice):
            begin, end = _lod.slice_bounds(key, len(self))
            return self.slice_level(0, begin, end) if self._offsets else LoDTensor._trusted(self._data[begin:end], ())
        path = key if isinstance(key, tuple) else (key,)
        if not all(isinstance(i, (int, np.integer)) for i in path):
            raise LodIndexError("index a LoDTensor with integers or one slice, as t[i], t[i, j] or t[a:b]; "
                                "use slice_level for ranges of a lower level")
        return self.branch(*path)

    def slice_level(self, level: int, begin: int, end: int) -> "LoDTensor":
        """Sequences ``begin..end`` of ``level`` with everything under them (Paddle's ``LODSlice``).

        The result's top level is ``level``, so it has ``lod_level - level`` levels.

        >>> t = from_nested([[[1, 2, 3], [4, 5]], [[6]], [[7, 8], [9, 10, 11]]])
        >>> t.slice_level(1, 1, 3).lod
        [[0, 2, 3]]
        """
        level = self._level(level)
        count = self.num_sequences(level)
        if not 0 <= begin <= end <= count:
            raise LodIndexError(f"level {level}: range {begin}:{end} is not a range inside 0:{count}")
        sizes = [len(o) for o in self._offsets]
        return self._extract(level, begin, end, self._reader(), sizes)

    def head(self, k: int = 5) -> "LoDTensor":
        """The first ``k`` top-level sequences (rows, for a 0-level tensor)."""
        n = len(self)
        k = max(0, min(int(k), n))
        return self.slice_level(0, 0, k) if self._offsets else LoDTensor._trusted(self._data[:k], ())

    def tail(self, k: int = 5) -> "LoDTensor":
        """The last ``k`` top-level sequences (rows, for a 0-level tensor)."""
        n = len(self)
        k = max(0, min(int(k), n))
        return self.slice_level(0, n - k, n) if self._offsets else LoDTensor._trusted(self._data[n - k:], ())

    def _reader(self) -> _lod.WindowReader:
        """Windows of the offsets, on the host (a device level's window is copied back)."""
        if not any(_is_device_array(o) for o in self._offsets):
            return _lod.memory_reader(self._offsets)
        return lambda level, start, stop: _host(self._offsets[level][start:stop])

    def _extract(self, level, begin, end, read, sizes) -> "LoDTensor":
        offsets, row_begin, row_end = _lod.extract_range(level, begin, end, read, sizes, self.n_rows)
        names = self._level_names[level:] if self._level_names else None
        return LoDTensor._trusted(self._data[row_begin:row_end], offsets, names)

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


def _device_offsets(table, as_lengths: bool, n_rows: int, validate: bool) -> list:
    """Offsets for device data from levels given on the device (some may be host ones), checked there."""
    hooks = _need_device_hooks("a LoDTensor with offsets on the GPU")
    if as_lengths:
        offsets = []
        for k, lengths in enumerate(table):
            try:
                offsets.append(hooks.lengths_to_offsets(lengths))
            except LodValidationError as exc:
                raise LodValidationError(f"level {k}: {exc}") from None
    else:
        offsets = list(table)
    if validate:
        return list(hooks.validate(offsets, n_rows))
    return [o.astype(np.int64, copy=False) if _is_device_array(o) else _lod.as_index_array(o, level=k)
            for k, o in enumerate(offsets)]


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
    if lod_level is not None and lod_level > 0 and lengths and len(lengths[-1]) and data.shape[0] != offsets[-1][-1]:
        raise LodShapeError("element count does not match the LoD")  # pragma: no cover - guarded by _flatten
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
    n_levels = leaf_depth - 1
    if len(lengths) > n_levels:  # pragma: no cover - rejected above
        raise LodShapeError("inconsistent nesting depth")
    while len(lengths) < n_levels:
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
    if elements and data.ndim == 0:  # pragma: no cover - np.array of a list is never 0-d
        raise LodShapeError("elements must form an array")
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


__all__ = ["LoDTensor", "from_nested", "check_dtype", "set_device_hooks", "LodValidationError"]
