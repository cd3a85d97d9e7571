"""Reading whole stored chunks straight from the file, for datasets stored as plain bytes.

libhdf5 reads an uncompressed chunked dataset at about 1.6 GB/s here (its
per-chunk bookkeeping and its Fletcher-32 loop), where the page cache gives
8 GB/s.  A dataset whose chunks are its rows' bytes as they are (no filter,
or only ``fletcher32``, which lodtool's ``--compression none`` writes) is read
here instead: one ``preadv`` per run of adjacent chunks, straight into the
result, with each chunk's stored checksum landing in a side array and checked
by the compiled Fletcher-32 (:mod:`._fletcher`, 10 GB/s).

Anything unusual takes libhdf5's path, which gives the usual result or error:
a checksum that does not match (libhdf5 also accepts the byte-swapped sums of
old files, and names the chunk when neither matches), a chunk not written yet
(the fill value), a chunk of another size, a short read, a file opened for
writing (libhdf5 may hold what is not on disk yet), a driver without a file
descriptor.  Partial chunks at either end of a read, and the dataset's last
chunk, are read by libhdf5 too.

The chunk index is read once per dataset handle (``H5Dchunk_iter``, about
1.5 µs a chunk; a lookup by offset costs 60), and only once the reads through
libhdf5 have covered a sixteenth of the dataset's chunks: a few short reads of
a large file never pay for an index they do not use.
"""

from __future__ import annotations

import itertools
import os

import h5py
import numpy as np

from .._jit import numba_loaded

_FLETCHER32 = 3
#: bytes of one read from which a checksummed dataset is read here, where Numba is loaded already (by an
#: operator, the JSON formatter, pack).  The direct read saves ~0.4 ns a byte over libhdf5 (2-core AMD EPYC:
#: 320 MB in 0.07 s against 0.20 s), but it never loads Numba itself: that costs ~0.4 s and ~120 MB of RSS,
#: which made a plain ``unpack`` of a 2 GB file peak at twice the memory of a 0.5 GB one.  Unchecked datasets
#: need no kernel.
FLETCHER_FROM_BYTES = 1 << 20
#: a read is taken here from this many whole chunks (fewer: libhdf5's per-read cost is already small)
MIN_CHUNKS = 16
#: the chunk index is read once libhdf5 has read this fraction of the dataset's chunks through the handle
_SCAN_FRACTION = 16
try:
    _IOV_MAX = max(int(os.sysconf("SC_IOV_MAX")), 2)
except (AttributeError, ValueError, OSError):  # pragma: no cover - not POSIX
    _IOV_MAX = 16


class _Plan:
    """What one dataset handle needs to read its chunks directly: the file, the layout, the chunk index."""

    def __init__(self, ds: h5py.Dataset, fd: int, checked: bool):
        self.fd = fd
        self.checked = checked
        self.rows = int(ds.chunks[0])
        self.row_bytes = ds.dtype.itemsize * int(np.prod(ds.shape[1:], dtype=np.int64))
        self.chunk_bytes = self.rows * self.row_bytes
        self.stored = self.chunk_bytes + (4 if checked else 0)
        self.n_chunks = -(-int(ds.shape[0]) // self.rows)
        self.whole_rows = int(ds.shape[0]) - int(ds.shape[0]) % self.rows  # rows before the last, partial chunk
        self.read_by_libhdf5 = 0
        self.addresses: np.ndarray | None = None  # file offset of each chunk; -1: not written, or not plain

    def index(self, ds: h5py.Dataset) -> None:
        addresses = np.full(self.n_chunks, -1, np.int64)
        stored, rows = self.stored, self.rows

        def visit(info) -> None:
            if int(info.size) == stored and not info.filter_mask:
                addresses[int(info.chunk_offset[0]) // rows] = int(info.byte_offset)

        try:
            ds.id.chunk_iter(visit)
            written = np.flatnonzero(addresses >= 0)
            if written.size:  # the index's addresses are where libhdf5 reads (a user block would shift them)
                k = int(written[0])
                head = os.pread(self.fd, min(64, self.chunk_bytes), int(addresses[k]))
                if ds.id.read_direct_chunk((k * rows,) + (0,) * (len(ds.shape) - 1))[1][:len(head)] != head:
                    written = None
        except (AttributeError, OSError, RuntimeError, ValueError, KeyError):  # an HDF5 without H5Dchunk_iter
            written = None
        if written is None:
            self.n_chunks = 0  # never again for this handle
            return
        self.addresses = addresses


def _plan(ds: h5py.Dataset) -> _Plan | None:
    """The handle's direct-read plan, or ``None`` when its chunks are not plain bytes (remembered on the handle)."""
    cached = ds.__dict__.get("_lodtool_direct", False)
    if cached is not False:
        return cached
    plan = None
    try:
        plist = ds.id.get_create_plist()
        codes = [int(plist.get_filter(i)[0]) for i in range(plist.get_nfilters())]
        plain_rows = ds.chunks is not None and tuple(ds.chunks[1:]) == tuple(ds.shape[1:])
        if (plain_rows and codes in ([], [_FLETCHER32]) and ds.dtype.isnative and ds.dtype.kind in "biufc"
                and ds.file.mode == "r" and ds.file.driver == "sec2"):
            plan = _Plan(ds, int(ds.file.id.get_vfd_handle()), bool(codes))
    except (AttributeError, OSError, RuntimeError, ValueError, TypeError):  # an unusual handle: libhdf5's path
        plan = None
    ds.__dict__["_lodtool_direct"] = plan
    return plan


def may_apply(ds: h5py.Dataset) -> bool:
    """Whether ``ds``'s chunks are plain bytes this module can read (checked once per handle): the caller then
    allocates the result first, and reads into it either way (never a second array of the same size)."""
    return _plan(ds) is not None


def read_whole_chunks(ds: h5py.Dataset, start: int, stop: int, out: np.ndarray) -> bool:
    """Fill ``out`` (C-contiguous, native order) with rows ``start..stop`` of ``ds`` reading its whole chunks
    directly; ``False`` (``out`` partly written) where this path does not apply and libhdf5 must read."""
    plan = _plan(ds)
    if plan is None or not out.flags.c_contiguous:
        return False
    rows = plan.rows
    first = -(-start // rows)  # the whole chunks inside the read
    last = min(stop, plan.whole_rows) // rows
    if last - first < MIN_CHUNKS:
        return False
    nbytes = (last - first) * plan.chunk_bytes
    if plan.checked and not (numba_loaded() and nbytes >= FLETCHER_FROM_BYTES):
        return False  # before the index: a read that cannot be checked here never pays for one
    if plan.addresses is None:
        plan.read_by_libhdf5 += last - first
        if plan.n_chunks == 0 or plan.read_by_libhdf5 * _SCAN_FRACTION < plan.n_chunks:
            return False
        plan.index(ds)
        if plan.addresses is None:
            return False
    addresses = plan.addresses[first:last]
    if (addresses < 0).any():
        return False
    flat = out.reshape(-1).view(np.uint8)
    body = flat[(first * rows - start) * plan.row_bytes:][:nbytes]
    sums = np.empty(last - first, "<u4") if plan.checked else None
    if not _preadv_chunks(plan, addresses, memoryview(body), sums):
        return False
    if plan.checked:
        from ._fletcher import fletcher32_chunks

        if not np.array_equal(fletcher32_chunks(body, plan.chunk_bytes), sums):
            return False  # libhdf5 reads it again: it accepts old files' swapped sums, and names a damaged chunk
    head_stop = min(first * rows, stop)
    if head_stop > start:
        ds.read_direct(out, np.s_[start:head_stop], np.s_[0:head_stop - start])
    tail = last * rows
    if stop > tail:
        ds.read_direct(out, np.s_[tail:stop], np.s_[tail - start:stop - start])
    return True


def _preadv_chunks(plan: _Plan, addresses: np.ndarray, body: memoryview, sums: np.ndarray | None) -> bool:
    """Read chunk ``i``'s bytes into ``body[i * chunk_bytes:]`` (and its checksum into ``sums[i]``), one
    ``preadv`` per run of chunks stored one after another; ``False`` on a short read."""
    size, stored = plan.chunk_bytes, plan.stored
    per_call = _IOV_MAX // 2 if sums is not None else _IOV_MAX
    sum_bytes = memoryview(sums.view(np.uint8)) if sums is not None else None
    # runs: chunks whose file offsets follow each other, cut where the next chunk is elsewhere
    breaks = np.flatnonzero(np.diff(addresses) != stored) + 1
    edges = [0, *breaks.tolist(), addresses.shape[0]]
    for a, b in itertools.pairwise(edges):
        for lo in range(a, b, per_call):
            hi = min(lo + per_call, b)
            if sums is None:
                buffers = [body[lo * size:hi * size]]
            else:
                buffers = []
                for i in range(lo, hi):
                    buffers.append(body[i * size:(i + 1) * size])
                    buffers.append(sum_bytes[4 * i:4 * i + 4])
            want = (hi - lo) * stored
            try:
                got = os.preadv(plan.fd, buffers, int(addresses[lo]))
            except OSError:
                return False
            if got != want:
                return False
    return True


__all__ = ["FLETCHER_FROM_BYTES", "may_apply", "read_whole_chunks"]
