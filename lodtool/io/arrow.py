"""Apache Arrow: LoD tensors as nested ``large_list`` arrays (zero-copy), and Arrow IPC / Feather files.

A LoD tensor is one ``large_list`` per LoD level (int64 offsets, as lodtool's),
outermost first, over the flat data, with one ``fixed_size_list`` per element
dimension.  :func:`to_arrow` wraps the tensor's own buffers; :func:`from_arrow`
views Arrow's.  pyarrow is imported inside the functions that need it
(``pip install 'lodtool[arrow]'``).

Files: an Arrow IPC file (``.arrow``, ``.feather``: Feather v2 is the IPC file
format) or stream (``.arrows``) holds a table; one column is the tensor, one
row per top-level sequence.  :func:`iter_ipc` reads it record batch by record
batch from a memory map; :func:`write_ipc` writes one record batch per chunk.
The level names ride in the column's field metadata (``lodtool.level_names``).

>>> import numpy as np
>>> from lodtool import LoDTensor
>>> a = to_arrow(LoDTensor(np.arange(5, dtype=np.int32), [[0, 2, 3], [0, 1, 3, 5]]))
>>> str(a.type), a.to_pylist()
('large_list<item: large_list<item: int32>>', [[[0], [1, 2]], [[3, 4]]])
>>> from_arrow(a.slice(1)).lod
[[0, 1], [0, 2]]
"""

from __future__ import annotations

import json
import os
import struct
import sys
from typing import TYPE_CHECKING, Any, BinaryIO, Iterable, Iterator, Sequence

import numpy as np

from ..errors import LodDtypeError, LodError, LodInputError, LodMemoryError, LodShapeError
from .._optional import optional_import
from ..tensor import LoDTensor
from ..tokens import TokenInfo
from . import open_path, same_tokens
from ._values import concat_chunks, read_with_options

if TYPE_CHECKING:
    import pyarrow as pa

#: field metadata key holding the level names (JSON list)
LEVEL_NAMES_KEY = b"lodtool.level_names"
#: file extensions of Arrow IPC files (file format) and streams
IPC_EXTENSIONS = (".arrow", ".feather", ".ipc", ".arrows")
#: the 6-byte magic that opens (and closes) an Arrow IPC file
IPC_MAGIC = b"ARROW1"


def _pa():
    return optional_import("pyarrow", "parquet", "Arrow and Parquet")


# -- lodtool -> Arrow ---------------------------------------------------------------------------------
def _leaf_array(data: np.ndarray):
    """The flat data as an Arrow array: the same memory, except bool (Arrow packs bits: one copy)."""
    pa = _pa()
    flat = np.ascontiguousarray(data).reshape(-1)
    if flat.dtype.kind == "c":
        raise LodDtypeError(f"Arrow has no complex type ({flat.dtype}); store real and imaginary parts as an "
                            "element dimension of 2 first (data.view(float).reshape(..., 2))")
    if flat.dtype == np.bool_:
        return pa.array(flat)
    if flat.dtype.byteorder == ">" or (flat.dtype.byteorder == "=" and sys.byteorder == "big"):
        flat = flat.astype(flat.dtype.newbyteorder("<"))  # pragma: no cover - big-endian data
    return pa.Array.from_buffers(pa.from_numpy_dtype(flat.dtype.newbyteorder("=")), len(flat),
                                 [None, pa.py_buffer(flat)])


def to_arrow(t: LoDTensor, *, required: bool = False) -> pa.Array:
    """``t`` as a nested ``large_list`` Arrow array, one row per top-level sequence; zero-copy.

    The offsets and data buffers are the tensor's own memory (kept alive by the
    array).  Exceptions: bool data is bit-packed (one copy), non-contiguous
    data is made contiguous (one copy), and complex data is refused (Arrow has
    no complex type).  A 0-level tensor gives its rows (a primitive array, or
    ``fixed_size_list`` for an element shape).  ``required=True`` marks every
    list item non-nullable (``item: int64 not null``), as a LoD tensor has no
    missing value: what the file writers store, so readers such as awkward see
    no option types.

    >>> import numpy as np
    >>> from lodtool import LoDTensor
    >>> t = LoDTensor(np.arange(6, dtype=np.float32).reshape(3, 2), [[0, 1, 3]])
    >>> a = to_arrow(t)
    >>> str(a.type)
    'large_list<item: fixed_size_list<item: float>[2]>'
    >>> np.shares_memory(np.frombuffer(a.values.values.buffers()[1], np.float32), t.data)
    True
    """
    pa = _pa()
    t = t.to("cpu")
    data = np.asarray(t.data)
    arr = _leaf_array(data)
    n = data.shape[0]
    elem = data.shape[1:]
    for j in reversed(range(len(elem))):
        length = n * int(np.prod(elem[:j], dtype=np.int64))
        arr = pa.Array.from_buffers(pa.list_(_item(arr.type, required), int(elem[j])), length, [None],
                                    children=[arr])
    for offsets in reversed(t.offsets):
        offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        arr = pa.Array.from_buffers(pa.large_list(_item(arr.type, required)), len(offsets) - 1,
                                    [None, pa.py_buffer(offsets)],
                                    children=[arr])
    return arr


def _item(value_type, required: bool):
    """The item field of a list of ``value_type`` (non-nullable where ``required``)."""
    return _pa().field("item", value_type, nullable=not required)


def arrow_field(name: str, t: LoDTensor, *, required: bool = False) -> pa.Field:
    """The table field of tensor ``t`` named ``name``, its level names in the metadata.

    The field itself is never nullable; ``required=True`` marks the list items
    non-nullable too (see :func:`to_arrow`).

    >>> import numpy as np
    >>> f = arrow_field("ids", LoDTensor(np.arange(2), [[0, 2]], level_names=["doc"]))
    >>> str(f.type), f.metadata
    ('large_list<item: int64>', {b'lodtool.level_names': b'["doc"]'})
    >>> str(arrow_field("ids", LoDTensor(np.arange(2), [[0, 2]]), required=True).type)
    'large_list<item: int64 not null>'
    """
    pa = _pa()
    meta = {LEVEL_NAMES_KEY: json.dumps(list(t.level_names)).encode()} if t.level_names else None
    empty = LoDTensor._trusted(t.data[:0], [o[:1] for o in t.offsets])
    return pa.field(name, to_arrow(empty, required=required).type, nullable=False, metadata=meta)


def to_record_batch(t: LoDTensor, name: str = "tensor", *, required: bool = False) -> pa.RecordBatch:
    """A one-column record batch of ``t`` (zero-copy), its level names in the field metadata.

    ``required=True``: list items non-nullable (what lodtool's Parquet and IPC files hold).

    >>> import numpy as np
    >>> from lodtool import LoDTensor
    >>> to_record_batch(LoDTensor(np.arange(3), [[0, 1, 3]]), "ids").num_rows
    2
    """
    pa = _pa()
    return pa.RecordBatch.from_arrays([to_arrow(t, required=required)],
                                      schema=pa.schema([arrow_field(name, t, required=required)]))


# -- Arrow -> lodtool ---------------------------------------------------------------------------------
def _top_row(levels: list[np.ndarray], depth: int, index: int, row_base: int = 0) -> str:
    """``row r`` (and the branch) of entry ``index`` at ``depth`` (0: the rows of the array)."""
    path = [index]
    for off in reversed(levels[:depth]):
        seq = int(np.searchsorted(off, path[0], side="right")) - 1
        path[0] = path[0] - int(off[seq])
        path.insert(0, seq)
    path[0] += row_base
    where = f"row {path[0]}"
    if len(path) > 1:
        where += " (branch <" + ",".join(str(p) for p in path) + ">)"
    return where


def _first_null(arr) -> int:
    valid = arr.is_valid().to_numpy(zero_copy_only=False)
    return int(np.flatnonzero(~valid)[0])


def _primitive(arr, where: str) -> np.ndarray:
    pa = _pa()
    t = arr.type
    if pa.types.is_null(t):
        if len(arr):
            raise LodInputError(f"{where}: the values are all null")
        return np.empty(0, np.float64)
    if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)):
        raise LodDtypeError(f"{where}: holds {t}, not numbers; lodtool stores numeric and bool data only")
    if pa.types.is_boolean(t):
        return arr.to_numpy(zero_copy_only=False)  # Arrow packs bools in bits: one copy
    return arr.to_numpy(zero_copy_only=True)


def _convert(arr, *, where: str = "arrow array", row_base: int = 0, validate: bool = True,
             max_memory: int | None = None) -> LoDTensor:
    """``arr`` as a LoD tensor: validated before any value is read (list views' ranges too), a gather held to
    ``max_memory``."""
    pa = _pa()
    if isinstance(arr, pa.ExtensionArray):
        ext_shape = tuple(arr.type.shape) if isinstance(arr.type, pa.FixedShapeTensorType) else None
        if ext_shape is not None and arr.type.permutation not in (None, list(range(len(ext_shape)))):
            raise LodShapeError(f"{where}: a fixed_shape_tensor with a permutation; make it C-ordered first")
        arr = arr.storage
    else:
        ext_shape = None
    try:  # lengths, buffer sizes, first and last offsets: what a file (IPC trusts it) may get wrong
        arr.validate()
    except pa.ArrowInvalid as exc:
        raise LodInputError(f"{where}: {str(exc).splitlines()[0]}") from None
    levels: list[np.ndarray] = []
    shape: list[int] = []
    node = arr
    while True:
        t = node.type
        if node.null_count:
            index = _first_null(node) // int(np.prod(shape, dtype=np.int64) or 1)
            raise LodInputError(f"{where}: {_top_row(levels, len(levels), index, row_base)} is null (at depth "
                                f"{len(levels) + len(shape)}); a LoD tensor has no missing values: fill or drop "
                                "them first")
        if pa.types.is_list(t) or pa.types.is_large_list(t):  # never under a shape: see _has_var_list
            offsets = node.offsets.to_numpy()  # honours the slice (arrow#37733: .values does not)
            if offsets.dtype != np.int64:
                offsets = offsets.astype(np.int64)
            start, stop = int(offsets[0]), int(offsets[-1])
            if start:
                offsets = offsets - start
            levels.append(offsets)
            node = node.values.slice(start, stop - start)
        elif pa.types.is_fixed_size_list(t):
            size = t.list_size
            values = node.values.slice(node.offset * size, len(node) * size)
            if _has_var_list(t.value_type):  # a fixed size above a variable one: a level of equal lengths
                levels.append(np.arange(len(node) + 1, dtype=np.int64) * size)
            else:
                shape.append(size)
            node = values
        elif pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
            if shape:  # a fixed-size list over list views
                raise LodShapeError(f"{where}: a variable-length list under a fixed-size list ({arr.type})")
            starts = node.offsets.to_numpy().astype(np.int64)
            sizes = node.sizes.to_numpy().astype(np.int64)
            _check_list_bounds(starts, sizes, len(node.values), levels, row_base, where)
            offsets = np.zeros(len(sizes) + 1, np.int64)
            np.cumsum(sizes, out=offsets[1:])
            levels.append(offsets)
            if len(sizes) and np.array_equal(starts[1:], starts[:-1] + sizes[:-1]):
                node = node.values.slice(int(starts[0]), int(offsets[-1]))  # in order: a view
            else:  # out of order or overlapping views: gather the values (one copy)
                check_claim(int(offsets[-1]) * (_INDEX_BYTES + _value_bytes(node.values.type)), max_memory,
                            f"{where}: gathering the list views' {int(offsets[-1]):,} values")
                gather = np.repeat(starts - offsets[:-1], sizes) + np.arange(offsets[-1])
                node = node.values.take(pa.array(gather))
        else:
            break
    data = _primitive(node, where)
    rows = int(levels[-1][-1]) if levels else len(arr)
    if shape:
        data = data.reshape((rows, *shape))
    if ext_shape is not None:
        data = data.reshape((rows, *ext_shape))
    if validate:
        return LoDTensor(data, lod=levels)
    return LoDTensor._trusted(data, levels)


#: bytes of one gather index (int64)
_INDEX_BYTES = 8


def check_claim(nbytes: int, max_memory: int | None, what: str) -> None:
    """Refuse (:class:`~lodtool.errors.LodMemoryError`) an allocation a file asks for above ``max_memory``.

    ``what`` names the file, the position and the allocation; ``None``: no limit.

    >>> check_claim(1 << 40, 1 << 30, "x.parquet: row group 0")
    Traceback (most recent call last):
    ...
    lodtool.errors.LodMemoryError: x.parquet: row group 0 needs 1,099,511,627,776 bytes, above the memory limit of ...
    """
    if max_memory is not None and nbytes > max_memory:
        raise LodMemoryError(f"{what} needs {nbytes:,} bytes, above the memory limit of {max_memory:,} "
                             "(raise it with max_memory=...)")


def _value_bytes(t) -> int:
    """Bytes of one entry of type ``t`` once converted (nested variable lists count their offset)."""
    pa = _pa()
    if pa.types.is_fixed_size_list(t):
        return t.list_size * _value_bytes(t.value_type)
    if pa.types.is_boolean(t):
        return 1
    try:
        return max(t.bit_width // 8, 1)
    except ValueError:  # a nested list or view: its offset (its own values are counted when gathered)
        return _INDEX_BYTES


def _check_list_bounds(starts: np.ndarray, sizes: np.ndarray, size: int, levels: list[np.ndarray], row_base: int,
                       where: str) -> None:
    """Each list view (``starts[i]``, ``sizes[i]``) must lie within the ``size`` values below it."""
    if not len(sizes):
        return
    negative = (starts < 0) | (sizes < 0)
    bad = negative | (~negative & (sizes > size - np.maximum(starts, 0)))
    if bad.any():
        k = int(np.argmax(bad))
        raise LodInputError(f"{where}: {_top_row(levels, len(levels), k, row_base)}: its list view starts at "
                            f"{int(starts[k]):,} and holds {int(sizes[k]):,} values, outside the {size:,} values "
                            f"below it (at depth {len(levels)})")


def _has_var_list(t) -> bool:
    pa = _pa()
    while True:
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            return True
        if not pa.types.is_fixed_size_list(t):
            return False
        t = t.value_type


def from_arrow(arr: Any, *, validate: bool = True) -> LoDTensor:
    """A LoD tensor from a nested list Arrow array (``list``, ``large_list``, ``fixed_size_list``).

    Each variable-length list level is a LoD level; ``fixed_size_list`` levels
    below the last one become the element shape.  Zero-copy for
    ``large_list`` arrays whose offsets start at 0 (what :func:`to_arrow` and
    unsliced files give): the data and offsets are views of Arrow's buffers.
    A sliced array copies its offsets only (rebased to 0; ``.values`` ignores
    the slice, arrow#37733, so the values are sliced by the offsets), 32-bit
    ``list`` offsets are widened (one copy of the offsets), bool data is
    unpacked from bits (one copy).  A ``ChunkedArray`` of one chunk is
    zero-copy; several chunks are concatenated (one copy; iterate
    ``arr.chunks`` to avoid it).  ``list_view`` arrays are read too (a view
    when their lists lie in order, else one gather).  A null anywhere is an
    error naming its row.  Before any value is read the array passes Arrow's
    own (constant-time) validation and every list view is checked to lie
    within its values: an array from a file may claim anything.

    >>> import pyarrow as pa
    >>> t = from_arrow(pa.array([[[1, 2], [3]], [[4]]], pa.large_list(pa.large_list(pa.int64()))))
    >>> t.lod, t.data.tolist()
    ([[0, 2, 3], [0, 2, 3, 4]], [1, 2, 3, 4])
    >>> from_arrow(pa.array([[1], None]))
    Traceback (most recent call last):
    ...
    lodtool.errors.LodInputError: arrow array: row 1 is null (at depth 0); a LoD tensor has no missing values: ...
    """
    pa = _pa()
    if isinstance(arr, pa.ChunkedArray):
        parts = [_convert(chunk, where=f"arrow array (chunk {k})", row_base=sum(len(c) for c in arr.chunks[:k]),
                          validate=False) for k, chunk in enumerate(arr.chunks) if len(chunk)]
        if not parts:
            return _convert(pa.array([], type=arr.type), where="arrow array (no rows)", validate=validate)
        t = concat_chunks(parts)
        if validate:
            t = LoDTensor(t.data, lod=t.offsets)
        return t
    if isinstance(arr, (pa.Table, pa.RecordBatch)):
        if arr.num_columns != 1:
            raise LodShapeError(f"a table of {arr.num_columns} columns: pass one column (table['name'])")
        names = _level_names(arr.schema.field(0))
        return _named(from_arrow(arr.column(0), validate=validate), names)
    if not isinstance(arr, pa.Array):
        arr = pa.array(arr)
    return _convert(arr, validate=validate)


def _named(t: LoDTensor, names) -> LoDTensor:
    """``t`` with the level names ``names`` where they fit its levels, else as it is."""
    return t.with_level_names(names) if names and len(names) == t.lod_level else t


def _level_names(field) -> list[str] | None:
    meta = field.metadata or {}
    raw = meta.get(LEVEL_NAMES_KEY)
    if raw is None:
        return None
    try:
        names = json.loads(raw)
    except ValueError:
        return None
    return [str(n) for n in names] if isinstance(names, list) else None


# -- tables in files: shared by IPC and Parquet ---------------------------------------------------------
def pick_column(schema, column: str | None, label: str) -> int:
    """The index of ``column`` in ``schema`` (``None``: the only column), or a one-line error.

    >>> import pyarrow as pa
    >>> pick_column(pa.schema([("a", pa.int8()), ("b", pa.int8())]), "b", "x.parquet")
    1
    """
    try:
        names = list(schema.names)
    except UnicodeDecodeError:
        raise LodInputError(f"{label}: a column name is not UTF-8 text (a damaged schema)") from None
    if column is None:
        if len(names) == 1:
            return 0
        raise LodInputError(f"{label}: has {len(names)} columns ({', '.join(names[:10])}"
                            f"{', ...' if len(names) > 10 else ''}); choose one with column=...")
    if column not in names:
        raise LodInputError(f"{label}: has no column {column!r} (columns: {', '.join(names[:10])}"
                            f"{', ...' if len(names) > 10 else ''})")
    return names.index(column)


def _tensors(arrays: Iterable, names, max_memory: int | None = None) -> Iterator[LoDTensor]:
    """Validated chunks of ``(where, arrow array)`` pairs; errors name the place and the row, counted over all."""
    def converted():
        base = 0
        for where, arr in arrays:
            yield where, _convert(arr, where=where, row_base=base, validate=False, max_memory=max_memory)
            base += len(arr)

    return valid_chunks(converted(), names)


def valid_chunks(parts: Iterable[tuple[str, LoDTensor]], names=None) -> Iterator[LoDTensor]:
    """Validated chunks from ``(where, unvalidated chunk)`` pairs.

    A chunk with nothing under some level (say one top-level sequence with no
    sentences) has no valid LoD of its own, so it is carried into the next one;
    errors name where the (first) chunk came from.

    >>> import numpy as np
    >>> hollow = LoDTensor._trusted(np.arange(0), [np.array([0, 0]), np.array([0])])  # a document, no sentence
    >>> full = LoDTensor(np.arange(2), [[0, 1], [0, 2]])
    >>> [c.lod for c in valid_chunks([("batch 0", hollow), ("batch 1", full)])]
    [[[0, 0, 1], [0, 2]]]
    """
    pending: list[LoDTensor] = []
    where = ""
    for here, t in parts:
        if not len(t) and t.lod_level:
            continue
        if not pending:
            where = here
        pending.append(t)
        if any(len(o) < 2 for o in t.offsets[1:]):
            continue
        yield _validated(pending, where, names)
        pending = []
    if pending:
        yield _validated(pending, where, names)


def _validated(parts: list[LoDTensor], where: str, names) -> LoDTensor:
    from ..lod import validate_lod

    t = concat_chunks(parts)
    try:
        validate_lod(list(t.offsets), t.n_rows)
    except LodError as exc:
        raise type(exc)(f"{where}: {exc}") from None
    return _named(t, names)


def _label(source: Any) -> str:
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source)
    name = getattr(source, "name", None)
    return name if isinstance(name, str) else "<stream>"


def _check_same(tensors: Iterator[LoDTensor], label: str, column: str = "") -> Iterator[LoDTensor]:
    """The chunks of one file, checked to agree with its first one; a file of no rows is an error."""
    first = None
    for t in tensors:
        if first is None:
            first = (t.lod_level, t.dtype, t.element_shape)
        elif (t.lod_level, t.dtype, t.element_shape) != first:
            raise LodInputError(f"{label}: a later batch holds {t.lod_level} level(s) of {t.dtype} with element "
                                f"shape {t.element_shape}, the first {first[0]} of {first[1]} with {first[2]}")
        yield t
    if first is None:
        raise LodInputError(f"{label}: empty input (column {column!r} has no rows)")


class _Sink:
    """A write-only view of the caller's stream for pyarrow: it never closes the stream, and counts position."""

    def __init__(self, out):
        self._out = out
        self._pos = 0
        self.closed = False

    def write(self, data) -> int:
        n = self._out.write(data)
        n = len(memoryview(data)) if n is None else n
        self._pos += n
        return n

    def flush(self) -> None:
        flush = getattr(self._out, "flush", None)
        if flush is not None:
            flush()

    def tell(self) -> int:
        return self._pos

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def close(self) -> None:
        self.flush()
        self.closed = True


def sink_for(out):
    """A pyarrow output stream writing into ``out`` (a path, a NativeFile or any binary stream).

    The caller's stream is never closed by pyarrow.

    >>> import io
    >>> buf = io.BytesIO()
    >>> sink = sink_for(buf)
    >>> _ = sink.write(b"abc"); sink.close()
    >>> buf.getvalue(), buf.closed
    (b'abc', False)
    """
    pa = _pa()
    if isinstance(out, (str, os.PathLike, pa.NativeFile)):
        return out
    return pa.PythonFile(_Sink(out), mode="w")


# -- Arrow IPC / Feather --------------------------------------------------------------------------------
def _open_ipc(source: Any, max_memory: int | None = None):
    """A record batch reader for an IPC file or stream (memory-mapped where it is a path).

    With ``max_memory``, what each batch's compressed buffers say they inflate to
    is checked against it before the batch is decoded.
    """
    pa = _pa()
    label = _label(source)
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if path == "-":
            source = pa.BufferReader(sys.stdin.buffer.read())
        else:
            open_path(path).close()  # a missing or unreadable file is named as such
            source = pa.memory_map(path, "r")
    elif not isinstance(source, pa.NativeFile):
        source = pa.BufferReader(source.read())
    head = source.read(6)
    source.seek(0)
    try:
        claims = None if max_memory is None else _inflated_sizes(source, head == IPC_MAGIC)
        if head == IPC_MAGIC:
            reader = pa.ipc.open_file(source)
            count = reader.num_record_batches
            batch_at = lambda k: reader.get_batch(k) if k < count else None  # noqa: E731
            return _decoded(batch_at, label, claims, max_memory), reader.schema, label
        stream = pa.ipc.open_stream(source)
        stream_batches = iter(stream)
        return _decoded(lambda k: next(stream_batches, None), label, claims, max_memory), stream.schema, label
    except MemoryError:  # pa.ArrowMemoryError too
        raise LodMemoryError(f"{label}: its schema asks for more memory than there is") from None
    except (pa.ArrowException, OSError) as exc:  # any of Arrow's errors: the file is not one it can decode
        raise LodInputError(f"{label}: not an Arrow IPC file or stream ({str(exc).splitlines()[0]})") from None


def _decoded(batch_at, label: str, claims: list[int] | None = None, max_memory: int | None = None) -> Iterator:
    """``batch_at(0), batch_at(1), ...`` until ``None``; a batch that cannot be decoded is a one-line error naming it.

    Decoding allocates what the batch's buffers claim (a compressed buffer states
    its size): ``claims[k]`` (see :func:`_inflated_sizes`) is checked against
    ``max_memory`` first, and a claim too large for memory is a
    :class:`~lodtool.errors.LodMemoryError` all the same.
    """
    pa = _pa()
    k = 0
    while True:
        if claims is not None and k < len(claims):
            check_claim(claims[k], max_memory, f"{label}: record batch {k}: inflating its compressed buffers")
        try:
            batch = batch_at(k)
        except MemoryError:  # pa.ArrowMemoryError too
            raise LodMemoryError(f"{label}: record batch {k}: decoding it asks for more memory than there is (its "
                                 "buffers claim sizes they may not hold)") from None
        except (pa.ArrowException, OSError) as exc:
            raise LodInputError(f"{label}: record batch {k}: cannot decode it ({str(exc).splitlines()[0]})") from None
        if batch is None:
            return
        yield batch
        k += 1


class _Flatbuffer:
    """Just enough of a flatbuffers reader for Arrow's IPC metadata: tables, their fields, vectors (bounds-checked:
    ``struct.error`` past the end)."""

    def __init__(self, data: bytes):
        self.data = data

    def scalar(self, fmt: str, at: int) -> int:
        return struct.unpack_from(fmt, self.data, at)[0]

    def root(self) -> int:
        return self.scalar("<I", 0)

    def field(self, table: int, i: int) -> int | None:
        """Where field ``i`` of the table at ``table`` is stored, or ``None`` (absent: its default)."""
        vtable = table - self.scalar("<i", table)
        if 4 + 2 * i >= self.scalar("<H", vtable):
            return None
        offset = self.scalar("<H", vtable + 4 + 2 * i)
        return table + offset if offset else None

    def ref(self, table: int, i: int) -> int | None:
        """Where the table or vector that field ``i`` points to starts, or ``None``."""
        at = self.field(table, i)
        return None if at is None else at + self.scalar("<I", at)


#: Arrow's MessageHeader union tag of a RecordBatch
_RECORD_BATCH = 3


def _inflated(metadata: bytes, body) -> int:
    """The bytes a record batch message's compressed buffers say they inflate to (0: not compressed).

    Each compressed buffer starts with its inflated length (int64, -1: stored as
    it is); Arrow allocates that before it decompresses.
    """
    fb = _Flatbuffer(metadata)
    message = fb.root()
    kind = fb.field(message, 1)
    batch = fb.ref(message, 2)
    if kind is None or fb.scalar("<B", kind) != _RECORD_BATCH or batch is None or fb.ref(batch, 3) is None:
        return 0
    buffers = fb.ref(batch, 2)
    total = 0
    for j in range(fb.scalar("<I", buffers) if buffers is not None else 0):
        offset, length = struct.unpack_from("<qq", metadata, buffers + 4 + 16 * j)
        if length >= 8 and 0 <= offset <= body.size - 8:
            total += max(struct.unpack_from("<q", body, offset)[0], 0)
    return total


def _inflated_sizes(source, is_file: bool) -> list[int] | None:
    """What each record batch of an IPC file or stream inflates to, in batch order; ``None`` where the metadata
    cannot be walked (the reader then says why).

    A file's batches are where its footer says; a stream's follow one another.
    """
    pa = _pa()
    whole = source.read_buffer()
    source.seek(0)
    try:
        if is_file:
            fb = _Flatbuffer(whole.slice(max(whole.size - 10, 0)).to_pybytes())
            length = fb.scalar("<i", 0)
            fb = _Flatbuffer(whole.slice(max(whole.size - 10 - length, 0), length).to_pybytes())
            blocks = fb.ref(fb.root(), 3)  # Footer.recordBatches: Block {offset, metaDataLength, bodyLength}
            spans = [struct.unpack_from("<qi4xq", fb.data, blocks + 4 + 24 * j)
                     for j in range(fb.scalar("<I", blocks) if blocks is not None else 0)]
            messages = (pa.ipc.read_message(pa.BufferReader(whole.slice(at, meta + body))) for at, meta, body in spans)
        else:
            messages = (m for m in pa.ipc.MessageReader.open_stream(pa.BufferReader(whole)) if m.type == "record batch")
        return [_inflated(m.metadata.to_pybytes(), m.body) for m in messages]
    except (struct.error, ValueError, IndexError, EOFError, OSError, pa.ArrowException):
        return None


def iter_ipc(sources: Sequence[Any], *, column: str | None = None,
             max_memory: int | None = None) -> Iterator[LoDTensor]:
    """The tensor in column ``column`` of Arrow IPC files / streams, one chunk per record batch.

    Files are memory-mapped, so a chunk's data is a view of the map (nothing
    is read before it is needed).  Several sources concatenate top-level
    sequences, in order.  ``max_memory`` bounds what each batch's compressed
    buffers say they inflate to (checked before it is decoded) and what its
    conversion allocates (the gather of out-of-order list views).

    >>> import io, numpy as np
    >>> from lodtool import LoDTensor
    >>> buf = io.BytesIO()
    >>> _ = write_ipc([LoDTensor(np.arange(3), [[0, 1, 3]]), LoDTensor(np.arange(2), [[0, 2]])], buf, name="ids")
    >>> [c.lod for c in iter_ipc([io.BytesIO(buf.getvalue())])]
    [[[0, 1, 3]], [[0, 2]]]
    """
    pa = _pa()
    for source in sources:
        batches, schema, label = _open_ipc(source, max_memory)
        index = pick_column(schema, column, label)
        try:
            name = schema.names[index]
            arrays = ((f"{label}: record batch {k}, column {name!r}", b.column(index)) for k, b in enumerate(batches))
            yield from _check_same(_tensors(arrays, _level_names(schema.field(index)), max_memory), label, name)
        except MemoryError:  # the CLI's own message (pa.ArrowMemoryError is an ArrowException too)
            raise
        except pa.ArrowException as exc:
            raise LodInputError(f"{label}: {str(exc).splitlines()[0]}") from None


def read_ipc(source: Any, *, column: str | None = None) -> LoDTensor:
    """The whole tensor of one IPC file's column (several record batches are concatenated: one copy).

    >>> import io, numpy as np
    >>> buf = io.BytesIO()
    >>> _ = write_ipc([LoDTensor(np.arange(2), [[0, 2]]), LoDTensor(np.arange(1), [[0, 1]])], buf)
    >>> read_ipc(io.BytesIO(buf.getvalue())).lod
    [[0, 2, 3]]
    """
    parts = list(iter_ipc([source], column=column))  # never empty: a file of no rows is an error
    return concat_chunks(parts)


def write_ipc(chunks: Iterable[LoDTensor], out: BinaryIO, *, name: str = "tensor", stream: bool = False,
              metadata: dict | None = None) -> int:
    """Write chunks as an Arrow IPC file (``stream=True``: the streaming format), one record batch per chunk.

    The first chunk fixes the schema; returns the number of rows (top-level
    sequences) written.  ``out`` is a writable binary stream (use an atomic
    temp file for a path, as ``unpack`` does).  ``metadata`` goes into the
    schema's metadata (:func:`token_metadata`).

    >>> import io, numpy as np, pyarrow as pa
    >>> buf = io.BytesIO()
    >>> write_ipc([LoDTensor(np.arange(3.0), [[0, 1, 3]])], buf, name="x")
    2
    >>> pa.ipc.open_file(pa.BufferReader(buf.getvalue())).read_all().column("x").to_pylist()
    [[0.0], [1.0, 2.0]]
    """
    pa = _pa()
    new = pa.ipc.new_stream if stream else pa.ipc.new_file
    return write_batches(chunks, name, metadata, lambda schema: new(sink_for(out), schema),
                         lambda writer, batch: writer.write_batch(batch))


def write_batches(chunks: Iterable[LoDTensor], name: str, metadata: dict | None, new_writer, write, *,
                  required: bool = True) -> int:
    """Each chunk as a record batch of one column ``name`` (``required``: list items non-nullable), written by
    ``write(writer, batch)`` to the writer ``new_writer(schema)`` made for the first one (``metadata`` in its
    schema), which is closed at the end; returns the rows.  No chunk at all is an error.

    >>> import io, pyarrow as pa
    >>> buf = io.BytesIO()
    >>> write_batches([LoDTensor(np.arange(2), [[0, 2]])], "x", None, lambda s: pa.ipc.new_stream(sink_for(buf), s),
    ...               lambda w, b: w.write_batch(b))
    1
    """
    writer = None
    rows = 0
    try:
        for chunk in chunks:
            batch = to_record_batch(chunk, name, required=required)
            if writer is None:
                writer = new_writer(batch.schema.with_metadata(metadata) if metadata else batch.schema)
            write(writer, batch)
            rows += batch.num_rows
        if writer is None:
            raise LodShapeError("nothing to write: no chunks")
    finally:
        if writer is not None:
            writer.close()
    return rows


# -- token metadata in the schema ------------------------------------------------------------------------
#: schema metadata key holding a tensor's token metadata (:meth:`lodtool.tokens.TokenInfo.to_bytes`)
TOKENS_KEY = b"lodtool.tokens"


def token_metadata(stored: Any) -> dict | None:
    """The schema metadata that carries a stored tensor's token metadata (None where it has none).

    >>> token_metadata(LoDTensor(np.arange(2), [[0, 2]])) is None
    True
    """
    info = stored.tokens
    return None if info is None else {TOKENS_KEY: info.to_bytes()}


def tokens_of_schema(schema, label: str) -> TokenInfo | None:
    """The token metadata a schema carries (:func:`token_metadata`), or None."""
    raw = (schema.metadata or {}).get(TOKENS_KEY)
    return None if raw is None else TokenInfo.from_bytes(raw, label)


def token_info(fmt: str, sources: Sequence[Any], **_options) -> TokenInfo | None:
    """The token metadata Arrow IPC files carry in their schema (the same in every file), for ``pack``; only
    files named by path are looked at.

    >>> import os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "ids.arrow")
    >>> with open(p, "wb") as f:
    ...     _ = write_ipc([LoDTensor(np.arange(2), [[0, 2]])], f, metadata={TOKENS_KEY: TokenInfo(vocab_size=5).to_bytes()})
    >>> token_info("arrow", [p]).vocab_size
    5
    """
    pa = _pa()

    def schema_of(path: str):
        with pa.memory_map(path, "r") as source:
            head = source.read(6)
            source.seek(0)
            return (pa.ipc.open_file(source) if head == IPC_MAGIC else pa.ipc.open_stream(source)).schema

    return same_tokens(sources, lambda path: tokens_of_schema(schema_of(path), path), (pa.ArrowException,))


# -- the io registry's entry points (see lodtool.io) ------------------------------------------------
def read(fmt: str, sources: Sequence[Any], *, lod_level: int | None = None, dtype: Any = None,
         chunk_bytes: int = 0, progress=None, stats: dict | None = None,
         column: str | None = None, max_memory: int | None = None) -> Iterator[LoDTensor]:
    """The registry's reader: Arrow IPC files or streams, one chunk per record batch (``column``: which one).

    >>> import io, numpy as np
    >>> buf = io.BytesIO()
    >>> write("arrow", LoDTensor(np.arange(3), [[0, 1, 3]]), buf)
    >>> [c.lod for c in read("arrow", [io.BytesIO(buf.getvalue())])]
    [[[0, 1, 3]]]
    """
    return read_with_options(sources, lambda source: iter_ipc([source], column=column, max_memory=max_memory),
                             _label, lod_level=lod_level, dtype=dtype, progress=progress, stats=stats)


def write(fmt: str, tensor: LoDTensor, out: BinaryIO, *, name: str = "tensor") -> None:
    """The registry's writer of a tensor in memory: an Arrow IPC file of one column."""
    write_ipc([tensor], out, name=name)


def write_stored(fmt: str, stored: Any, chunks: Iterable[LoDTensor], out: BinaryIO) -> None:
    """The registry's streaming writer: one record batch per chunk, the column named after the tensor."""
    write_ipc((_named(c, stored.level_names) for c in chunks), out, name=stored.name, metadata=token_metadata(stored))


__all__ = ["to_arrow", "from_arrow", "to_record_batch", "arrow_field", "iter_ipc", "read_ipc", "write_ipc",
           "pick_column", "valid_chunks", "check_claim", "sink_for", "write_batches", "read", "write", "write_stored",
           "LEVEL_NAMES_KEY", "IPC_EXTENSIONS", "IPC_MAGIC", "TOKENS_KEY", "token_metadata", "tokens_of_schema",
           "token_info"]
