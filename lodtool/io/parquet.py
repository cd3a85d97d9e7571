"""Parquet: a column of nested lists in, one row group per chunk out.

Reading goes row group by row group (``pq.ParquetFile.read_row_group`` of the
one column), a few decoded at once on as many cores, so memory holds that many
row groups' column at a time, whatever the file size.  Lists are read as
``large_list`` (64-bit offsets) where the file has no stored Arrow schema that
says otherwise, so no chunk overflows 2**31 values.  The conversion is
:func:`lodtool.io.arrow.from_arrow`'s: a null is an error naming its row
(counted over the whole file).  With a memory limit, what each row group's
footer claims (:func:`row_group_claims`) is checked before anything is
decoded, and only as many row groups as fit it decode at once.

Writing: one row group per chunk, the tensor's level names in the column's
field metadata, list items non-nullable, zstd compression by default.

>>> import io, numpy as np
>>> from lodtool import LoDTensor
>>> buf = io.BytesIO()
>>> _ = write_parquet([LoDTensor(np.arange(4), [[0, 1, 4]]), LoDTensor(np.arange(2), [[0, 2]])], buf, name="ids")
>>> [c.lod for c in iter_parquet([io.BytesIO(buf.getvalue())])]
[[[0, 1, 4]], [[0, 2]]]
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any, BinaryIO, Iterable, Iterator, Sequence

from ..errors import LodInputError, LodMemoryError, LodShapeError, LodUsageError
from ..lod import counted
from .._optional import optional_import
from ..tensor import LoDTensor
from ..tokens import TokenInfo
from . import open_path, same_tokens
from ._values import concat_chunks, read_with_options
from .arrow import (_check_same, _label, _level_names, _named, _pa, _tensors, check_claim, pick_column, sink_for,
                    token_metadata, tokens_of_schema, write_batches)

#: file extensions of Parquet files
EXTENSIONS = (".parquet", ".pq")
#: the 4-byte magic that opens and closes a Parquet file
MAGIC = b"PAR1"
#: compressions ``write_parquet`` accepts (pyarrow's names)
COMPRESSIONS = ("zstd", "snappy", "gzip", "lz4", "brotli", "none")


def open_parquet(source: Any):
    """A ``pq.ParquetFile`` for a path, ``-`` or a binary stream (and its label), reading lists as ``large_list``.

    >>> import io, pyarrow as pa, pyarrow.parquet as pq
    >>> buf = io.BytesIO()
    >>> pq.write_table(pa.table({"ids": [[1], [2, 3]]}), buf, store_schema=False)  # as non-Arrow writers do
    >>> pf, label = open_parquet(io.BytesIO(buf.getvalue()))
    >>> str(pf.schema_arrow.field("ids").type), label
    ('large_list<element: int64>', '<stream>')
    """
    pf, label, _ = _open(source)
    return pf, label


def _open(source: Any):
    """:func:`open_parquet`, and a function that opens the same file again (``None`` for a stream).

    A ``ParquetFile`` must not be read from two threads at once (its read cache
    and a stream's position are shared), so each thread reading ahead opens its own.
    """
    pa = _pa()

    label = _label(source)
    again = None
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if path == "-":
            data = pa.py_buffer(sys.stdin.buffer.read())
            source, again = pa.BufferReader(data), lambda: _parquet_file(pa.BufferReader(data))
        else:
            open_path(path).close()  # a missing or unreadable file is named as such
            source, again = path, lambda: _parquet_file(path)
    try:
        return _parquet_file(source), label, again
    except MemoryError:  # pa.ArrowMemoryError too: a footer claiming more than there is
        raise LodMemoryError(f"{label}: its footer asks for more memory than there is") from None
    except (pa.ArrowException, OSError) as exc:  # any of Arrow's errors: the file is not one it can decode
        raise LodInputError(f"{label}: not a Parquet file ({str(exc).splitlines()[0]})") from None


def _parquet_file(source):
    pa = _pa()
    pq = optional_import("pyarrow.parquet", "parquet", "Parquet")

    try:
        return pq.ParquetFile(source, list_type=pa.LargeListType)
    except TypeError:  # pyarrow < 21 has no list_type
        return pq.ParquetFile(source)


def iter_parquet(sources: Sequence[Any], *, column: str | None = None,
                 max_memory: int | None = None) -> Iterator[LoDTensor]:
    """The tensor in column ``column`` of Parquet files, one chunk per row group (bounded memory).

    ``column=None`` takes the file's only column.  Several sources
    concatenate top-level sequences, in order.  Errors name the file, the row
    group, the column and the row.  Before a row group is decoded, what its
    footer claims (rows, values, uncompressed bytes) is checked against
    ``max_memory``: a few hundred bytes of dictionary and RLE runs can stand for
    billions of values.

    >>> import io, numpy as np, pyarrow as pa, pyarrow.parquet as pq
    >>> buf = io.BytesIO()
    >>> pq.write_table(pa.table({"ids": [[1, 2], [3]], "label": [0, 1]}), buf)
    >>> [c.lod for c in iter_parquet([io.BytesIO(buf.getvalue())], column="ids")]
    [[[0, 2, 3]]]
    """
    for source in sources:
        pf, label, again = _open(source)
        schema = pf.schema_arrow
        index = pick_column(schema, column, label)
        field = schema.field(index)
        names = _level_names(field)
        yield from _check_same(_row_groups(pf, again, index, field, names, label, max_memory), label, field.name)


def row_group_claims(metadata, name: str) -> list[tuple[int, int]]:
    """``(rows, bytes)``: what decoding column ``name`` allocates in each row group, by the footer's claims.

    ``metadata`` is the file's ``pq.FileMetaData`` (``ParquetFile.metadata``).

    Each leaf value decodes to its physical size plus a repetition and a
    definition level (2 bytes each), each row to a 64-bit offset, and the pages
    to their uncompressed size.  The footer is read from its own bytes
    (:class:`_Footer`): pyarrow aborts the process on a column chunk whose
    metadata it cannot parse (``RowGroupMetaData.column`` raises no Python
    exception), where its reader raises one.

    >>> import io, pyarrow as pa, pyarrow.parquet as pq
    >>> buf = io.BytesIO()
    >>> pq.write_table(pa.table({"x": [[1, 2], [3]]}), buf)
    >>> [(rows, n > 3 * 12 + 2 * 8) for rows, n in row_group_claims(pq.ParquetFile(buf).metadata, "x")]
    [(2, True)]
    """
    pa = _pa()
    out = pa.BufferOutputStream()
    metadata.write_metadata_file(out)  # PAR1, the footer's Thrift bytes, their length, PAR1
    raw = out.getvalue().to_pybytes()
    key = name.encode()
    claims = []
    for rows, chunks in _Footer(raw[4:-8]).row_groups():
        total = 8 * (rows + 1)
        for path, kind, values, size in chunks:
            if path == key:
                total += values * (_PHYSICAL_BYTES.get(kind, 8) + 4) + max(size, 0)
        claims.append((rows, total))
    return claims


#: bytes of one decoded value of each Parquet physical type (its Thrift enum; byte arrays: at least their offset)
_PHYSICAL_BYTES = {0: 1, 1: 4, 2: 8, 3: 12, 4: 4, 5: 8}


class _Footer:
    """The row group claims of a Parquet footer (Thrift compact protocol), read without building the rest.

    ``row_groups()`` gives ``(num_rows, [(top-level name, physical type,
    num_values, total_uncompressed_size), ...])`` per row group.  Malformed
    bytes raise ``IndexError`` / ``ValueError``.
    """

    STOP, TRUE, FALSE, BYTE, I16, I32, I64, DOUBLE, BINARY, LIST, SET, MAP, STRUCT = range(13)

    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def _byte(self) -> int:
        b = self.data[self.pos]
        self.pos += 1
        return b

    def _varint(self) -> int:
        value = shift = 0
        while True:
            b = self._byte()
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 63:
                raise ValueError("a Thrift varint longer than 10 bytes")

    def _int(self) -> int:
        v = self._varint()
        return (v >> 1) ^ -(v & 1)

    def _fields(self) -> Iterator[tuple[int, int]]:
        field = 0
        while True:
            head = self._byte()
            kind = head & 0x0F
            if kind == self.STOP:
                return
            field = field + (head >> 4) if head >> 4 else self._int()
            yield field, kind

    def _list(self) -> tuple[int, int]:
        head = self._byte()
        size = head >> 4 if head >> 4 != 15 else self._varint()
        return size, head & 0x0F

    def _skip(self, kind: int, in_list: bool = False) -> None:
        """Step over a value of Thrift type ``kind`` (a bool in a list takes a byte; a bool field none)."""
        if kind in (self.TRUE, self.FALSE):
            self.pos += 1 if in_list else 0
        elif kind == self.BYTE:
            self.pos += 1
        elif kind in (self.I16, self.I32, self.I64):
            self._varint()
        elif kind == self.DOUBLE:
            self.pos += 8
        elif kind == self.BINARY:
            n = self._varint()
            self.pos += n
        elif kind in (self.LIST, self.SET):
            size, inner = self._list()
            for _ in range(size):
                self._skip(inner, True)
        elif kind == self.MAP:
            size = self._varint()
            pair = self._byte() if size else 0
            for _ in range(size):
                self._skip(pair >> 4, True)
                self._skip(pair & 0x0F, True)
        elif kind == self.STRUCT:
            for _, inner in self._fields():
                self._skip(inner)
        else:
            raise ValueError(f"Thrift type {kind}")
        if self.pos > len(self.data):
            raise IndexError("past the end of the footer")

    def _structs(self, kind: int):
        if kind != self.LIST:
            self._skip(kind)
            return
        size, inner = self._list()
        for _ in range(size):
            if inner != self.STRUCT:
                raise ValueError("a list of something else than structs")
            yield

    def row_groups(self) -> list[tuple[int, list]]:
        out = []
        for field, kind in self._fields():  # FileMetaData
            if field != 4:  # row_groups
                self._skip(kind)
                continue
            for _ in self._structs(kind):
                rows, chunks = 0, []
                for f, k in self._fields():  # RowGroup
                    if f == 3 and k == self.I64:
                        rows = self._int()
                    elif f == 1:
                        for _ in self._structs(k):
                            chunks.append(self._column_chunk())
                    else:
                        self._skip(k)
                out.append((rows, chunks))
        return out

    def _column_chunk(self) -> tuple[bytes, int, int, int]:
        path, kind, values, size = b"", -1, 0, 0
        for f, k in self._fields():  # ColumnChunk
            if f != 3 or k != self.STRUCT:  # meta_data
                self._skip(k)
                continue
            for g, t in self._fields():  # ColumnMetaData
                if g == 1 and t == self.I32:
                    kind = self._int()
                elif g == 3 and t == self.LIST:
                    count, inner = self._list()
                    for i in range(count):
                        if i == 0 and inner == self.BINARY:
                            n = self._varint()
                            path = self.data[self.pos:self.pos + n]
                            self.pos += n
                        else:
                            self._skip(inner, True)
                elif g == 5 and t == self.I64:
                    values = self._int()
                elif g == 6 and t == self.I64:
                    size = self._int()
                else:
                    self._skip(t)
        return path, kind, values, size


def _row_groups(pf, again, index: int, field, names, label: str, max_memory: int | None) -> Iterator[LoDTensor]:
    pa = _pa()
    own = threading.local()  # each reading thread's own ParquetFile (see _open)
    metadata = pf.metadata

    def read(g: int):
        try:
            if again is None:
                f = pf
            else:
                f = getattr(own, "pf", None)
                if f is None:
                    f = own.pf = again()
            return f.read_row_group(g, columns=[field.name]).column(0), None
        except MemoryError:  # pa.ArrowMemoryError too: the pages claim sizes that do not fit
            return None, LodMemoryError("decoding it asks for more memory than there is (its pages claim sizes "
                                        "they may not hold)")
        except (pa.ArrowException, OSError) as exc:
            return None, LodInputError(f"cannot read it ({str(exc).splitlines()[0]})")

    largest = 1
    if max_memory is not None:  # every claim before any row group is decoded
        try:
            claims = row_group_claims(metadata, field.name)
        except (ValueError, IndexError, RecursionError, pa.ArrowException) as exc:
            raise LodInputError(f"{label}: its footer cannot be read ({str(exc).splitlines()[0]})") from None
        for g, (rows, claim) in enumerate(claims):
            check_claim(claim, max_memory, f"{label}: row group {g}, column {field.name!r}: decoding its "
                                           f"{counted(rows, 'row')}")
            largest = max(largest, claim)
    # as many row groups decode at once as fit the limit together
    most = None if max_memory is None else max(max_memory // largest, 1)

    def arrays():
        for g, (col, problem) in enumerate(_prefetched(read, pf.num_row_groups, parallel=again is not None,
                                                       most=most)):
            where = f"{label}: row group {g}, column {field.name!r}"
            if problem is not None:
                raise type(problem)(f"{where}: {problem}")
            for chunk in col.chunks:
                yield where, chunk

    yield from _tensors(arrays(), names, max_memory)


def _prefetched(read, count: int, parallel: bool = True, most: int | None = None) -> Iterator:
    """``read(0), read(1), ...`` in order, up to :func:`~lodtool._jit.thread_limit` row groups decoded at once
    (one at a time where not ``parallel``: a stream, which only one thread may read; at most ``most``: what
    fits the memory limit): one row group of one column decodes on one core."""
    from .._jit import thread_limit

    depth = min(thread_limit(), count, most or count) if parallel else 1
    if depth <= 1:
        for g in range(count):
            yield read(g)
        return
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(depth, thread_name_prefix="lodtool-parquet") as pool:
        ahead: deque = deque(pool.submit(read, g) for g in range(depth))
        try:
            for g in range(count):
                result = ahead.popleft().result()
                if g + depth < count:
                    ahead.append(pool.submit(read, g + depth))
                yield result
        finally:
            for future in ahead:  # stopped early: drop what was read ahead
                future.cancel()


def read_parquet(source: Any, *, column: str | None = None) -> LoDTensor:
    """The whole tensor of one Parquet file's column (row groups are concatenated: one copy).

    >>> import io, pyarrow as pa, pyarrow.parquet as pq
    >>> buf = io.BytesIO()
    >>> pq.write_table(pa.table({"x": [[1.5], [], [2.5, 3.5]]}), buf)
    >>> read_parquet(io.BytesIO(buf.getvalue())).lod
    [[0, 1, 1, 3]]
    """
    parts = list(iter_parquet([source], column=column))  # never empty: a file of no rows is an error
    return concat_chunks(parts)


def write_parquet(chunks: Iterable[LoDTensor], out: BinaryIO | str | os.PathLike, *, name: str = "tensor",
                  compression: str | None = "zstd", metadata: dict | None = None) -> int:
    """Write chunks as a Parquet file with one column ``name``, one row group per chunk; returns the rows.

    ``out`` is a writable binary stream or a path (use an atomic temp file, as
    ``unpack`` does).  The first chunk fixes the schema.  List items are
    written non-nullable (a LoD tensor has no missing values).  An element
    shape with a dimension of 0 is refused before anything is written: pyarrow
    cannot read such a column back.

    >>> import io, numpy as np, pyarrow.parquet as pq
    >>> buf = io.BytesIO()
    >>> write_parquet([LoDTensor(np.arange(3), [[0, 1, 3]]), LoDTensor(np.arange(2), [[0, 2]])], buf)
    3
    >>> pq.ParquetFile(io.BytesIO(buf.getvalue())).num_row_groups
    2
    """
    pa = _pa()
    pq = optional_import("pyarrow.parquet", "parquet", "Parquet")

    codec = "none" if compression in (None, "none") else compression
    if codec not in COMPRESSIONS:
        raise LodUsageError(f"unknown Parquet compression {compression!r}; choose one of {', '.join(COMPRESSIONS)}")

    def shaped(chunks):
        for chunk in chunks:
            if 0 in chunk.element_shape:
                raise LodShapeError(f"Parquet cannot hold element shape {chunk.element_shape}: a fixed-size list of "
                                    "size 0 does not read back (pyarrow's reader miscounts its values); write arrow "
                                    "or npz instead")
            yield chunk

    return write_batches(shaped(chunks), name, metadata, lambda schema: pq.ParquetWriter(
        sink_for(out), schema, compression=codec, store_schema=True), lambda writer, batch: writer.write_table(
        pa.Table.from_batches([batch]), row_group_size=max(batch.num_rows, 1)))


# -- the io registry's entry points (see lodtool.io) ------------------------------------------------
def read(fmt: str, sources: Sequence[Any], *, lod_level: int | None = None, dtype: Any = None,
         chunk_bytes: int = 0, progress=None, stats: dict | None = None,
         column: str | None = None, max_memory: int | None = None) -> Iterator[LoDTensor]:
    """The registry's reader: Parquet files, one chunk per row group (``column``: which one, ``max_memory``: the
    bound on each row group's claims).

    >>> import io, numpy as np
    >>> buf = io.BytesIO()
    >>> write("parquet", LoDTensor(np.arange(3), [[0, 1, 3]]), buf)
    >>> [c.lod for c in read("parquet", [io.BytesIO(buf.getvalue())], dtype="float32")]
    [[[0, 1, 3]]]
    """
    return read_with_options(sources, lambda source: iter_parquet([source], column=column, max_memory=max_memory),
                             _label, lod_level=lod_level, dtype=dtype, progress=progress, stats=stats)


def write(fmt: str, tensor: LoDTensor, out: BinaryIO, *, name: str = "tensor") -> None:
    """The registry's writer of a tensor in memory: a Parquet file of one column, one row group."""
    write_parquet([tensor], out, name=name)


def write_stored(fmt: str, stored: Any, chunks: Iterable[LoDTensor], out: BinaryIO) -> None:
    """The registry's streaming writer: one row group per chunk, the column named after the tensor."""
    write_parquet((_named(c, stored.level_names) for c in chunks), out, name=stored.name,
                  metadata=token_metadata(stored))


def token_info(fmt: str, sources: Sequence[Any], **_options) -> TokenInfo | None:
    """The token metadata Parquet files carry in their schema (:func:`lodtool.io.arrow.token_metadata`; the same
    in every file), read from the footer alone, for ``pack``.

    >>> import os, tempfile, numpy as np
    >>> from lodtool.io.arrow import TOKENS_KEY
    >>> p = os.path.join(tempfile.mkdtemp(), "ids.parquet")
    >>> _ = write_parquet([LoDTensor(np.arange(2), [[0, 2]])], p,
    ...                   metadata={TOKENS_KEY: TokenInfo(vocab_size=5).to_bytes()})
    >>> token_info("parquet", [p]).vocab_size
    5
    """
    pq = optional_import("pyarrow.parquet", "parquet", "Parquet")
    return same_tokens(sources, lambda path: tokens_of_schema(pq.read_schema(path), path),
                       (_pa().ArrowException,))


__all__ = ["iter_parquet", "read_parquet", "write_parquet", "open_parquet", "row_group_claims", "EXTENSIONS", "MAGIC",
           "COMPRESSIONS", "read", "write", "write_stored", "token_info"]
