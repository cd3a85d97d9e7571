"""Parquet: a column of nested lists in, one row group per chunk out.

Reading goes row group by row group (``pq.ParquetFile.read_row_group`` of the
one column), a few decoded at once on as many cores, so memory holds that many
row groups' column at a time, whatever the file size.  Lists are read as
``large_list`` (64-bit offsets) where the file has no stored Arrow schema that
says otherwise, so no chunk overflows 2**31 values.  The conversion is :func:`lodtool.io.arrow.from_arrow`'s: a null is an
error naming its row (counted over the whole file).

Writing: one row group per chunk, the tensor's level names in the column's
field metadata, zstd compression by default.

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

from ..errors import LodFileNotFoundError, LodInputError, LodMemoryError, LodShapeError, LodUsageError
from ..lod import counted
from ..tensor import LoDTensor
from .arrow import (_check_same, _concat, _convert, _level_names, _named, _pa, check_claim, pick_column,
                    sink_for, to_record_batch, valid_chunks)

#: file extensions of Parquet files
EXTENSIONS = (".parquet", ".pq")
#: the 4-byte magic that opens and closes a Parquet file
MAGIC = b"PAR1"
#: compressions ``write_parquet`` accepts (pyarrow's names)
COMPRESSIONS = ("zstd", "snappy", "gzip", "lz4", "brotli", "none")


def _label(source: Any) -> str:
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source)
    name = getattr(source, "name", None)
    return name if isinstance(name, str) else "<stream>"


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
        elif not os.path.exists(path):
            raise LodFileNotFoundError(f"{path}: no such file")
        elif os.path.isdir(path):
            raise LodInputError(f"{path}: is a directory, not a file")
        else:
            source, again = path, lambda: _parquet_file(path)
    try:
        return _parquet_file(source), label, again
    except MemoryError:  # pa.ArrowMemoryError too: a footer claiming more than there is
        raise LodMemoryError(f"{label}: its footer asks for more memory than there is") from None
    except (pa.ArrowException, OSError) as exc:  # any of Arrow's errors: the file is not one it can decode
        raise LodInputError(f"{label}: not a Parquet file ({str(exc).splitlines()[0]})") from None


def _parquet_file(source):
    pa = _pa()
    import pyarrow.parquet as pq

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


def decoded_bytes(row_group, name: str) -> int:
    """What decoding column ``name`` of a row group (its ``RowGroupMetaData``) allocates, by the footer's claims.

    Each leaf value decodes to its physical size plus a repetition and a
    definition level (2 bytes each), each row to a 64-bit offset, and the pages
    to their uncompressed size.  The footer is a claim: this is checked before
    anything is decoded.

    >>> import io, pyarrow as pa, pyarrow.parquet as pq
    >>> buf = io.BytesIO()
    >>> pq.write_table(pa.table({"x": [[1, 2], [3]]}), buf)
    >>> rg = pq.ParquetFile(io.BytesIO(buf.getvalue())).metadata.row_group(0)
    >>> decoded_bytes(rg, "x") > 3 * 12 + 2 * 8
    True
    """
    total = 8 * (row_group.num_rows + 1)
    for j in range(row_group.num_columns):
        chunk = row_group.column(j)
        path = chunk.path_in_schema
        if path != name and not path.startswith(name + "."):
            continue
        width = _PHYSICAL_BYTES.get(chunk.physical_type, 8)
        total += chunk.num_values * (width + 4) + max(chunk.total_uncompressed_size, 0)
    return total


#: bytes of one decoded value of each Parquet physical type (byte arrays: at least their offset)
_PHYSICAL_BYTES = {"BOOLEAN": 1, "INT32": 4, "INT64": 8, "INT96": 12, "FLOAT": 4, "DOUBLE": 8, "BYTE_ARRAY": 8,
                   "FIXED_LEN_BYTE_ARRAY": 8}


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
    for g in range(pf.num_row_groups):  # every claim before any row group is decoded
        claim = decoded_bytes(metadata.row_group(g), field.name)
        check_claim(claim, max_memory, f"{label}: row group {g}, column {field.name!r}: decoding its "
                                       f"{counted(metadata.row_group(g).num_rows, 'row')}")
        largest = max(largest, claim)
    # as many row groups decode at once as fit the limit together
    most = None if max_memory is None else max(max_memory // largest, 1)

    def converted():
        base = 0
        for g, (col, problem) in enumerate(_prefetched(read, pf.num_row_groups, parallel=again is not None,
                                                       most=most)):
            where = f"{label}: row group {g}, column {field.name!r}"
            if problem is not None:
                raise type(problem)(f"{where}: {problem}")
            for chunk in col.chunks:
                yield where, _convert(chunk, where=where, row_base=base, validate=False, max_memory=max_memory)
                base += len(chunk)

    yield from valid_chunks(converted(), names)


def _prefetched(read, count: int, parallel: bool = True, most: int | None = None) -> Iterator:
    """``read(0), read(1), ...`` in order, up to :func:`~lodtool._jit.thread_limit` row groups decoded at once
    (one at a time where not ``parallel``: a stream, which only one thread may read; at most ``most``: what
    fits the memory limit).

    One row group of one column decodes on one core (pyarrow parallelizes over
    columns and row groups, not within one), so reading them one by one left the
    other cores idle: ``pack`` of a 124 MB zstd file (60M int64 tokens) read in
    1.0 s what ``read_table`` reads in 0.6 s here (2 cores).  Memory holds that
    many row groups instead of one.
    """
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
    return parts[0] if len(parts) == 1 else _concat(parts)


def write_parquet(chunks: Iterable[LoDTensor], out: BinaryIO | str | os.PathLike, *, name: str = "tensor",
                  compression: str | None = "zstd") -> int:
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
    import pyarrow.parquet as pq

    codec = "none" if compression in (None, "none") else compression
    if codec not in COMPRESSIONS:
        raise LodUsageError(f"unknown Parquet compression {compression!r}; choose one of {', '.join(COMPRESSIONS)}")
    writer = None
    rows = 0
    try:
        for chunk in chunks:
            if writer is None and 0 in chunk.element_shape:
                raise LodShapeError(f"Parquet cannot hold element shape {chunk.element_shape}: a fixed-size list of "
                                    "size 0 does not read back (pyarrow's reader miscounts its values); write arrow "
                                    "or npz instead")
            batch = to_record_batch(chunk, name, required=True)
            if writer is None:
                writer = pq.ParquetWriter(sink_for(out), batch.schema, compression=codec, store_schema=True)
            table = pa.Table.from_batches([batch])
            writer.write_table(table, row_group_size=max(table.num_rows, 1))
            rows += table.num_rows
        if writer is None:
            raise LodShapeError("nothing to write: no chunks")
    finally:
        if writer is not None:
            writer.close()
    return rows


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
    from ._values import read_with_options

    return read_with_options(sources, lambda source: iter_parquet([source], column=column, max_memory=max_memory),
                             _label,
                             lod_level=lod_level, dtype=dtype, progress=progress, stats=stats)


def write(fmt: str, tensor: LoDTensor, out: BinaryIO, *, name: str = "tensor") -> None:
    """The registry's writer of a tensor in memory: a Parquet file of one column, one row group."""
    write_parquet([tensor], out, name=name)


def write_stored(fmt: str, stored: Any, chunks: Iterable[LoDTensor], out: BinaryIO) -> None:
    """The registry's streaming writer: one row group per chunk, the column named after the tensor."""
    write_parquet(_named(chunks, stored.level_names), out, name=stored.name)


__all__ = ["iter_parquet", "read_parquet", "write_parquet", "open_parquet", "decoded_bytes", "EXTENSIONS", "MAGIC",
           "COMPRESSIONS", "read", "write", "write_stored"]
