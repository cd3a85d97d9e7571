"""Dataset checksums: xxh3_64 of each dataset's full contents, streamed in row order.

The digest of a dataset is ``xxh3_64`` of the little-endian bytes of its
values in row-major (C) order, exactly what

    xxhash.xxh3_64_hexdigest(numpy.ascontiguousarray(ds[...]).tobytes())

gives for the little-endian dtypes lodtool writes.  It is stored on the
dataset as the attribute ``checksum = "xxh3_64:<16 hex digits>"``.  Writers feed
the hasher the blocks they write, in order, so no second pass is needed.

>>> import numpy as np
>>> h = new_hasher()
>>> update(h, np.arange(3, dtype="<i8"))
>>> format_digest(h)
'xxh3_64:...'
"""

from __future__ import annotations

import numpy as np
import xxhash

from ..errors import LodFormatError
from ..tensor import bytes_per_row
from .spec import CHECKSUM_ALGORITHM

#: rows are read for hashing in blocks of about this many bytes (a multiple of the chunk rows)
HASH_BLOCK = 8 << 20


def new_hasher():
    """A fresh streaming hasher of :data:`CHECKSUM_ALGORITHM`."""
    return xxhash.xxh3_64()


def little_endian(arr: np.ndarray) -> np.ndarray:
    """``arr`` as a C-contiguous array of little-endian (or byte-order-free) values."""
    if arr.dtype.byteorder == ">" or (arr.dtype.byteorder == "=" and np.little_endian is False):
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    return np.ascontiguousarray(arr)


def update(hasher, arr: np.ndarray) -> None:
    """Feed the bytes of ``arr`` (little-endian, row-major) to ``hasher``."""
    arr = little_endian(arr)
    if arr.size:
        hasher.update(arr.reshape(-1).view(np.uint8))


def format_digest(hasher) -> str:
    """``"xxh3_64:<hex>"`` of a hasher's current state."""
    return f"{CHECKSUM_ALGORITHM}:{hasher.hexdigest()}"


def parse_digest(text: str, where: str) -> str:
    """Check a stored ``"xxh3_64:<hex>"`` value; return it normalized.

    >>> parse_digest("xxh3_64:00000000000000ff", "x.h5:/a/data")
    'xxh3_64:00000000000000ff'
    """
    algorithm, _, digest = text.partition(":")
    if algorithm != CHECKSUM_ALGORITHM:
        raise LodFormatError(f"{where}: checksum algorithm {algorithm!r} is not supported "
                             f"(this lodtool verifies {CHECKSUM_ALGORITHM})")
    if len(digest) != 16 or any(c not in "0123456789abcdef" for c in digest.lower()):
        raise LodFormatError(f"{where}: malformed checksum {text!r}")
    return f"{algorithm}:{digest.lower()}"


def block_rows(dataset, block_bytes: int = HASH_BLOCK) -> int:
    """Rows per read when streaming ``dataset``: about ``block_bytes``, whole chunks where chunked."""
    row_bytes = max(bytes_per_row(dataset.dtype, dataset.shape[1:]), 1)
    rows = max(block_bytes // row_bytes, 1)
    chunks = dataset.chunks
    if chunks:
        from ._h5 import rows_per_read  # at most MAX_CHUNKS_PER_READ chunks per read, whatever the layout

        rows = min(max(rows // chunks[0], 1) * chunks[0], rows_per_read(dataset))
    return rows


def hash_dataset(dataset, hasher=None, block_bytes: int = HASH_BLOCK, max_memory: int | None = None):
    """Stream every row of an h5py dataset through a hasher (a new one if not given); return it.

    Rows are read as every reader reads them (:func:`lodtool.container._h5.read_rows`): no chunk may decode
    to more than ``max_memory`` bytes (``None``: the default limit).
    """
    hasher = hasher or new_hasher()
    n = dataset.shape[0] if dataset.ndim else 1
    if dataset.ndim == 0:
        update(hasher, np.asarray(dataset[()]))
        return hasher
    from ._h5 import read_rows

    step = block_rows(dataset, block_bytes)
    for start in range(0, n, step):
        update(hasher, read_rows(dataset, start, min(start + step, n), max_memory))
    return hasher


__all__ = ["new_hasher", "update", "format_digest", "parse_digest", "hash_dataset", "little_endian",
           "HASH_BLOCK"]
