"""Hostile Arrow IPC, Parquet and Paddle files, built from tiny valid ones with pyarrow and raw byte patches.

pyarrow validates what it builds, so a file with offsets out of range is a
valid file whose int64 values are then swapped in place (:func:`patched_ints`);
a Parquet footer that lies is one whose varints are swapped and whose length is
written again (:func:`parquet_claiming_rows`).  ``tests/test_io_*.py`` and the
fuzzing suite ``tests/test_hostile_round3_io.py`` use them.
"""

from __future__ import annotations

import io
import struct
from typing import Sequence

import numpy as np


def ipc_bytes(arr, *, name: str = "t", compression: str | None = None, stream: bool = False) -> bytes:
    """An Arrow IPC file (or stream) of one column ``name`` holding ``arr``."""
    import pyarrow as pa

    batch = pa.RecordBatch.from_arrays([arr], names=[name])
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with (pa.ipc.new_stream if stream else pa.ipc.new_file)(sink, batch.schema, options=options) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def patched_ints(blob: bytes, old: Sequence[int], new: Sequence[int]) -> bytes:
    """``blob`` with the one run of int64 values ``old`` replaced by ``new`` (as many values)."""
    before, after = np.asarray(old, "<i8").tobytes(), np.asarray(new, "<i8").tobytes()
    assert len(before) == len(after) and blob.count(before) == 1, blob.count(before)
    return blob.replace(before, after)


#: the values under the hostile lists: distinctive, so their bytes never match an offsets buffer
VALUES = np.arange(1000, 1010, dtype=np.int64)


def list_file(offsets: Sequence[int], *, compression: str | None = None) -> bytes:
    """An IPC file of one ``large_list<int64>`` column over :data:`VALUES`, its offsets replaced by ``offsets``."""
    import pyarrow as pa

    valid = [0, 3, 7]
    arr = pa.LargeListArray.from_arrays(pa.array(valid, pa.int64()), pa.array(VALUES[:7]))
    return patched_ints(ipc_bytes(arr, compression=compression), valid, offsets)


def list_view_file(starts: Sequence[int], sizes: Sequence[int]) -> bytes:
    """An IPC file of one ``large_list_view<int64>`` column of two views over :data:`VALUES`."""
    import pyarrow as pa

    arr = pa.LargeListViewArray.from_arrays(pa.array([0, 3], pa.int64()), pa.array([3, 4], pa.int64()),
                                            pa.array(VALUES))
    blob = patched_ints(ipc_bytes(arr), [3, 4], [-77, -78])  # sizes first: [0, 3] also starts the sizes
    blob = patched_ints(blob, [0, 3], starts)
    return patched_ints(blob, [-77, -78], sizes)


def lz4_claiming(size: int, *, stream: bool = False) -> bytes:
    """An LZ4-compressed IPC file whose values buffer claims to inflate to ``size`` bytes (it holds 8,000)."""
    import pyarrow as pa

    arr = pa.LargeListArray.from_arrays(pa.array([0, 300, 1000], pa.int64()), pa.array(np.full(1000, 7, np.int64)))
    blob = ipc_bytes(arr, compression="lz4", stream=stream)
    return patched_ints(blob, [8000], [size])


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        if not n:
            return bytes(out + bytes([byte]))
        out.append(byte | 0x80)


def _zigzag(n: int) -> bytes:
    return _varint((n << 1) ^ (n >> 63))


def parquet_claiming_rows(rows: int) -> bytes:
    """A Parquet file of 77,777 empty lists whose footer claims ``rows`` rows (and as many values)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    real = 77_777
    arr = pa.LargeListArray.from_arrays(pa.array(np.zeros(real + 1, np.int64)), pa.array([], pa.int64()))
    buf = io.BytesIO()
    pq.write_table(pa.table({"t": arr}), buf, store_schema=False)
    blob = buf.getvalue()
    size = struct.unpack("<i", blob[-8:-4])[0]
    footer = blob[-8 - size:-8]
    assert footer.count(_zigzag(real)) >= 2  # the file's and the row group's row count
    footer = footer.replace(_zigzag(real), _zigzag(rows))
    return blob[:-8 - size] + footer + struct.pack("<i", len(footer)) + b"PAR1"


def pdtensor_bytes(dims: Sequence[int], *, dtype: str = "float32", lod: Sequence[Sequence[int]] = (),
                   data: bytes = b"") -> bytes:
    """A Paddle tensor file with any header (a valid one, or one with absurd dims)."""
    from lodtool.io.pdtensor import tensor_desc

    out = struct.pack("<IQ", 0, len(lod))
    for level in lod:
        out += struct.pack("<Q", 8 * len(level)) + np.asarray(level, "<u8").tobytes()
    desc = tensor_desc(np.dtype(dtype), dims)
    return out + struct.pack("<Ii", 0, len(desc)) + desc + data
