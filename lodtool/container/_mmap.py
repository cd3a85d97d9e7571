"""Rows of a dataset stored as plain bytes, read from a memory map of its file.

A dataset without a compression filter (no filter at all, or only
``fletcher32``: what ``--compression none`` writes) holds its rows' bytes as
they are, so a read needs no libhdf5 call: the file is mapped once per dataset
handle and a range of rows is a slice of the map.  Rows that lie in one run
(a contiguous dataset, or one chunk) come back as a read-only view, without a
copy; a range across chunks is gathered into a new array.

* Contiguous datasets are located with ``DatasetID.get_offset()``; chunked
  ones with one ``chunk_iter`` pass when the process first maps the dataset,
  which builds the table from chunk to file offset.
* A ``fletcher32`` chunk is checked the first time this process reads it,
  and never again while the file is unchanged.
* Every handle of the same dataset of the same unchanged file (device, inode,
  size and modification time; the :data:`DATASETS_KEPT` datasets mapped last)
  shares the chunk table and what was checked: a file opened again (a batch
  reader per epoch) maps without a ``chunk_iter`` pass.  It is checked by a compiled
  checksum: libhdf5's own (:func:`lodtool.container._fletcher.native`), or Numba's where Numba is loaded;
  where neither is at hand (a handle loads Numba once it has sent :data:`CHECKS_BEFORE_NUMBA` reads to
  libhdf5), by libhdf5 itself (the read falls back to it once, and the chunk counts as
  checked after libhdf5 accepted it).  A checksum that does not match also
  falls back, so libhdf5 names the damaged chunk (or accepts the swapped sums
  of old files).
* Anything else is libhdf5's: other filters, other drivers, a file open for
  writing, external storage, unwritten chunks, another byte order.
* The file is checked for a change of size or modification time before a
  read (at most every :data:`STAT_EVERY` seconds, a ``fstat`` costing a few
  times a whole random read otherwise), so a file rewritten in place under the
  map is an error, not a crash.  A file truncated in place between two checks
  can still end the process with SIGBUS, as for any memory-mapped reader;
  lodtool itself never rewrites a file in place (writes replace it), and an
  open map keeps reading the file it opened.
"""

from __future__ import annotations

import mmap
import os
import time
import weakref

import h5py
import numpy as np

from .._jit import numba_module
from ..errors import LodFormatError
from ..tensor import bytes_per_row

_FLETCHER32 = 3
#: seconds between two checks that the file has not changed under the map
STAT_EVERY = 0.01
#: reads of unchecked chunks a handle sends to libhdf5 (which checks them) before it loads Numba to check them
CHECKS_BEFORE_NUMBA = 64
#: datasets whose chunk offsets and checked chunks the process remembers after their handles close (16 bytes a
#: chunk each)
DATASETS_KEPT = 256


class MappedRows:
    """The rows of one dataset handle, read from a read-only map of its file."""

    def __init__(self, ds: h5py.Dataset, fd: int, stat: os.stat_result, addresses: np.ndarray | None, base: int,
                 chunk_rows: int, checks: _Checks | None):
        self._path = os.fsdecode(h5py.h5f.get_name(ds.id))
        self._fd = fd
        self._stamp = (stat.st_size, stat.st_mtime_ns)
        self._stamped_at = time.monotonic()
        # the map is unmapped with the last array viewing it; the descriptor (ours, a dup) goes with this object
        self._bytes = np.frombuffer(mmap.mmap(fd, 0, access=mmap.ACCESS_READ), np.uint8)
        weakref.finalize(self, os.close, fd)
        self.dtype = ds.dtype
        self._n_rows = int(ds.shape[0])
        self._row_shape = tuple(ds.shape[1:])
        self._row_bytes = bytes_per_row(ds.dtype, self._row_shape)
        self._addresses = addresses
        # each run's first byte, as Python ints (a cheaper lookup): the chunks', or the one of a contiguous dataset
        self._starts = addresses.tolist() if addresses is not None else [base]
        itemsize = ds.dtype.itemsize
        starts = base if addresses is None else int(np.bitwise_or.reduce(addresses))
        aligned = starts % itemsize == 0
        # the gather's word: the largest power of two up to 8 bytes that divides the item size and every start (a
        # fletcher32 chunk's 4-byte sum puts the next chunk 4 bytes off an 8-byte boundary)
        self._word = min(itemsize & -itemsize, 8, starts & -starts if starts else 8)
        # the whole map as the dtype's items, where every run starts on an item boundary: a read is one slice of
        # it, from each run's first item (a row is a whole number of items)
        self._items = self._bytes[:self._bytes.size // itemsize * itemsize].view(ds.dtype) if aligned else None
        self._item_starts = [a // itemsize for a in self._starts] if aligned else None
        self._row_items = self._row_bytes // itemsize
        self._chunk_rows = chunk_rows or max(int(ds.shape[0]), 1)  # a contiguous dataset is one run of every row
        self._sent_to_libhdf5 = 0
        # each chunk's first byte in the file, -1 while its checksum is unchecked (the table chunk_table gives)
        self._checks = checks
        if addresses is None:
            self._table = np.array([base], np.int64)
        else:
            self._table = addresses if checks is None else checks.table
        self._words = None

    def rows(self, start: int, stop: int) -> np.ndarray | None:
        """Rows ``start..stop`` from the map, or ``None`` where libhdf5 must read them (an unchecked chunk)."""
        if time.monotonic() - self._stamped_at > STAT_EVERY:  # the common case without a call: a read costs ~1 µs
            self.check_unchanged()
        rows = self._chunk_rows
        first, last = start // rows, (stop - 1) // rows
        checks = self._checks
        if checks is not None and checks.unchecked and (self._table.item(first) < 0 if first == last else (
                self._table[first:last + 1] < 0).any()) and not self._check(first, last):
            return None
        if first == last:  # one run: a read-only view
            items = self._items
            if items is not None:
                row_items = self._row_items
                at = self._item_starts[first] + (start - first * rows) * row_items
                items = items[at:at + (stop - start) * row_items]
            else:
                at = self._starts[first] + (start - first * rows) * self._row_bytes
                items = self._bytes[at:at + (stop - start) * self._row_bytes].view(self.dtype)
            return items.reshape((-1,) + self._row_shape) if self._row_shape else items
        rb = self._row_bytes
        out = np.empty((stop - start,) + self._row_shape, self.dtype)
        flat = out.reshape(-1).view(np.uint8)
        pos = 0
        for c in range(first, last + 1):
            lo, hi = max(start, c * rows), min(stop, (c + 1) * rows)
            a = self._starts[c] + (lo - c * rows) * rb
            n = (hi - lo) * rb
            flat[pos:pos + n] = self._bytes[a:a + n]
            pos += n
        return out

    def stored_runs(self) -> list[tuple[int, np.ndarray]]:
        """Every row's bytes as stored, in row order and unchecked: ``(file offset, read-only view)`` of each chunk
        (its fletcher32 sum left out, the last one cut to the rows), or of the whole of a contiguous dataset.  For
        a copy of the data that checks the dataset's digest itself (see :meth:`fileno`)."""
        self.check_unchanged()
        total = self._n_rows * self._row_bytes
        if self._addresses is None:
            base = self._starts[0]
            return [(base, self._bytes[base:base + total])]
        size = self._chunk_rows * self._row_bytes
        return [(a, self._bytes[a:a + min(size, total - i * size)]) for i, a in enumerate(self._starts)]

    def fileno(self) -> int:
        """The descriptor of the mapped file (open while this object lives), for copies the kernel makes."""
        return self._fd

    def check_unchanged(self) -> None:
        """Raise :class:`~lodtool.errors.LodFormatError` if the file's size or modification time changed (checked
        at most every :data:`STAT_EVERY` seconds)."""
        now = time.monotonic()
        if now - self._stamped_at > STAT_EVERY:
            stat = os.fstat(self._fd)
            if (stat.st_size, stat.st_mtime_ns) != self._stamp:
                raise LodFormatError(f"{self._path}: the file changed on disk while it was open; open it again")
            self._stamped_at = now

    @property
    def unchecked(self) -> int:
        """Chunks whose checksum this process has not checked yet."""
        return self._checks.unchecked if self._checks is not None else 0

    def chunk_table(self) -> tuple[np.ndarray, np.ndarray, int]:
        """``(words, table, chunk_rows)`` for a compiled gather (:func:`lodtool.ops.batching.gather_batch`).

        ``words`` is the whole map as unsigned integers of the largest size (up
        to 8 bytes) that divides the item size and every chunk's offset
        (read-only); ``table[c]`` is the file offset of chunk ``c``'s
        first row, or -1 while its checksum is unchecked (read its rows through
        :meth:`rows` first, which checks it); a contiguous dataset is one chunk.
        The table is updated in place as chunks are checked.  Call
        :meth:`check_unchanged` before each gather.
        """
        if self._words is None:
            word = self._word
            self._words = self._bytes[:self._bytes.size // word * word].view(f"u{word}")
        return self._words, self._table, self._chunk_rows

    def checked_by_libhdf5(self, start: int, stop: int) -> None:
        """libhdf5 read rows ``start..stop`` (and so checked their chunks): they need no check here again."""
        if self._checks is not None and self._checks.unchecked and stop > start:
            first, last = start // self._chunk_rows, (stop - 1) // self._chunk_rows + 1
            self._checks.unchecked -= int(np.count_nonzero(self._table[first:last] < 0))
            self._table[first:last] = self._addresses[first:last]

    def _check(self, first: int, last: int) -> bool:
        """Check chunks ``first..last`` not checked yet, with a compiled Fletcher-32 (libhdf5's own, or Numba's
        where Numba is loaded); where neither is at hand, a handle that has sent :data:`CHECKS_BEFORE_NUMBA`
        reads to libhdf5 for their check loads Numba (a loop of reads soon pays for it; a one-shot read never
        does)."""
        from ._fletcher import compiled_without_numba, fletcher32_chunks

        if not compiled_without_numba():
            self._sent_to_libhdf5 += 1
            if self._sent_to_libhdf5 <= CHECKS_BEFORE_NUMBA:
                return False
            numba_module()

        size = self._chunk_rows * self._row_bytes
        for c in np.flatnonzero(self._table[first:last + 1] < 0) + first:
            a = int(self._addresses[c])
            stored = self._bytes[a + size:a + size + 4].view("<u4")[0]
            if fletcher32_chunks(self._bytes[a:a + size], size)[0] != stored:
                return False
            self._table[c] = a
            self._checks.unchecked -= 1
        return True


class _Checks:
    """The fletcher32 chunks of one dataset of one unchanged file that this process has checked: ``table[c]`` is
    chunk ``c``'s file offset once checked, -1 before."""

    __slots__ = ("table", "unchecked")

    def __init__(self, n_chunks: int):
        self.table = np.full(n_chunks, -1, np.int64)
        self.unchecked = n_chunks


class _Known:
    """What this process has learnt of one chunked dataset of one unchanged file, shared by every handle that maps
    it: each chunk's file offset and, for fletcher32 chunks, which ones it has checked."""

    __slots__ = ("addresses", "checks")

    def __init__(self, addresses: np.ndarray, checks: _Checks | None):
        self.addresses, self.checks = addresses, checks


#: the datasets mapped most recently (the most recent last), by (device, inode, size, modification time, the
#: dataset's address in the file): a file opened again, unchanged, is neither indexed nor checked again
_KNOWN: dict[tuple, _Known] = {}


def _known(ds: h5py.Dataset, fd: int, stat: os.stat_result, checked: bool) -> _Known:
    key = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, int(h5py.h5o.get_info(ds.id).addr))
    known = _KNOWN.pop(key, None)
    if known is None:
        addresses = _chunk_addresses(ds, fd, checked, stat.st_size)
        known = _Known(addresses, _Checks(len(addresses)) if checked else None)
    _KNOWN[key] = known
    while len(_KNOWN) > DATASETS_KEPT:
        del _KNOWN[next(iter(_KNOWN))]
    return known


def mapping(ds: h5py.Dataset) -> MappedRows | None:
    """The handle's map, or ``None`` when its rows are not plain bytes in a mappable file (remembered)."""
    cached = ds.__dict__.get("_lodtool_map", False)
    if cached is not False:
        return cached
    try:
        found = _map(ds)
    except (AttributeError, OSError, RuntimeError, ValueError, TypeError, KeyError):
        found = None  # an unusual handle: libhdf5 reads it
    ds.__dict__["_lodtool_map"] = found
    return found


def _map(ds: h5py.Dataset) -> MappedRows | None:
    dtype = ds.dtype
    if not dtype.isnative or dtype.kind not in "biufc" or ds.shape[0] == 0:
        return None
    plist = ds.id.get_create_plist()
    if plist.get_external_count():
        return None
    codes = [int(plist.get_filter(i)[0]) for i in range(plist.get_nfilters())]
    if codes not in ([], [_FLETCHER32]):
        return None
    # the file's intent and driver from its id: ds.file would build an h5py File object per dataset
    fid = h5py.h5i.get_file_id(ds.id)
    if fid.get_intent() != h5py.h5f.ACC_RDONLY or fid.get_access_plist().get_driver() != h5py.h5fd.SEC2:
        return None
    fd = os.dup(int(fid.get_vfd_handle()))
    try:
        stat = os.fstat(fd)
        if ds.chunks is None:
            base = ds.id.get_offset()
            if base is None or int(ds.id.get_storage_size()) != ds.nbytes or base + ds.nbytes > stat.st_size:
                raise ValueError("not allocated whole")
            return MappedRows(ds, fd, stat, None, int(base), 0, None)
        if tuple(ds.chunks[1:]) != tuple(ds.shape[1:]):
            raise ValueError("chunks split the rows")
        known = _known(ds, fd, stat, bool(codes))
        return MappedRows(ds, fd, stat, known.addresses, 0, int(ds.chunks[0]), known.checks)
    except BaseException:
        os.close(fd)
        raise


def _chunk_addresses(ds: h5py.Dataset, fd: int, checked: bool, file_size: int) -> np.ndarray:
    """File offset of each chunk, from one ``chunk_iter`` pass; every chunk must be written and plain."""
    rows = int(ds.chunks[0])
    row_bytes = bytes_per_row(ds.dtype, ds.shape[1:])
    stored = rows * row_bytes + (4 if checked else 0)
    addresses = np.full(-(-int(ds.shape[0]) // rows), -1, np.int64)

    def visit(info) -> None:
        if int(info.size) == stored and not info.filter_mask:
            addresses[int(info.chunk_offset[0]) // rows] = int(info.byte_offset)

    ds.id.chunk_iter(visit)
    if (addresses < 0).any() or int(addresses.max()) + stored > file_size:
        raise ValueError("a chunk is unwritten, filtered or outside the file")
    # the index's offsets are where libhdf5 reads: compare one chunk's bytes (a user block would shift them)
    head = os.pread(fd, min(64, rows * row_bytes), int(addresses[0]))
    if ds.id.read_direct_chunk((0,) * len(ds.shape))[1][:len(head)] != head:
        raise ValueError("chunk offsets do not match the file")
    return addresses


__all__ = ["MappedRows", "mapping"]
