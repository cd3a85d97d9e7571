"""Writing containers: streamed, chunked, compressed, checksummed and appendable, committed atomically.

A :class:`LodWriter` writes into a temp file next to the target (see
:mod:`.atomic`) and renames it over the target only when the ``with`` block
ends cleanly.  An append starts from a copy of the existing file, so the
original is never opened for writing and a killed append leaves it intact.

Each tensor's datasets are resizable and chunked (about 64 KiB per chunk); rows
are buffered up to whole chunks, so every chunk is compressed once, and the
bytes written are fed to the dataset's checksum as they go.

>>> import os, tempfile, numpy as np
>>> from lodtool import LoDTensor
>>> from lodtool.container import load
>>> path = os.path.join(tempfile.mkdtemp(), "s.lod.h5")
>>> with LodWriter(path) as w:
...     tw = w.add_tensor("x", dtype=None, element_shape=(), lod_level=1)
...     tw.append(LoDTensor(np.arange(3), [[0, 2, 3]]))
...     tw.append(LoDTensor(np.arange(2), [[0, 2]]))
>>> load(path).lod
[[0, 2, 3, 5]]
"""

from __future__ import annotations

import collections
import contextlib
import os
import shutil
import stat
import tempfile
from typing import Any, Callable, Mapping, Sequence

import h5py
import numpy as np
import xxhash

from .. import lod as _lod
from .._device import to_host
from .._jit import kernels_pay
from ..errors import (LodChecksumError, LodDtypeError, LodExistsError, LodFormatError, LodShapeError,
                      LodUsageError, LodValidationError)
from ..tensor import LoDTensor, bytes_per_row, check_dtype
from . import checksum, filters, spec
from ._h5 import (CHUNK_SLACK_BYTES, H5_ERRORS, MAX_CHUNKS_PER_READ, create_h5, hard_member, layout_for, link_count,
                  open_h5, read_rows, same_object, storage_gap, translate)
from ._writeback import WRITEBACK_BYTES, start_writeback
from .. import storage
from ..atomic import AtomicPath, copy_to_stream, interrupt_mark, is_stream, publish, raise_if_interrupted_since
from .reader import describe_tensor, read_token_info, tensor_names
from ..tokens import TokenInfo

#: target bytes per chunk of data: a branch read decodes whole chunks, so small chunks keep it
#: near the branch's own bytes; measured, 64 KiB also read and wrote faster than 1 MiB
STORAGE_CHUNK_BYTES = 64 << 10
#: target bytes per chunk of uncompressed data that is read from a memory map (``pack`` of a token dataset with
#: ``compression="none"``): a mapped read is a slice whatever the chunk, so the chunk size costs a branch read
#: nothing once its chunk is checked; a sixteenth of the chunks (calls to libhdf5, copies) to write and unpack
MAPPED_CHUNK_BYTES = 1 << 20
#: target bytes per chunk of offsets: a branch reads two windows per level, at most 2 chunks each
OFFSETS_CHUNK_BYTES = 16 << 10
#: smallest chunk for a dataset whose final size is known and small (keeps later appends efficient)
MIN_CHUNK_BYTES = 16 << 10

#: smallest write that computes fletcher32 itself and writes chunks directly (below it, libhdf5's filter costs
#: less than laying the chunks out here, or than importing Numba where its kernel would compute the sums)
DIRECT_MIN_BYTES = 4 << 20
#: where libhdf5's own checksum function cannot be called (see :mod:`._fletcher`): bytes a writer expects to
#: write from which the direct path's Numba kernel pays while Numba is not imported
#: (:func:`lodtool._jit.kernels_pay`; ``expected_bytes`` of :class:`LodWriter`). Measured on 2-core AMD EPYC, a
#: warm uncompressed pack: libhdf5's filter costs ~0.5 ms a MB more than the direct path, and Numba's import plus
#: the cached kernels' load ~0.4 s, so below ~800 MB libhdf5 is faster in a fresh process
DIRECT_FROM_BYTES = 768 << 20
#: bytes of stored chunks the direct path lays out at a time (in reused buffers, one per group in flight)
STAGE_BYTES = 4 << 20
#: groups of chunks the direct path lays out ahead of the one libhdf5 is given, at most (their buffers included)
STAGED_GROUPS = 4
#: smallest chunk the direct path hands to libhdf5 from the block itself (:func:`_write_in_place`): below it, asking
#: libhdf5 for each chunk's address costs more than staging a copy (docs/format.md)
IN_PLACE_FROM_BYTES = 256 << 10
#: chunks of a dataset from which the direct path stages every chunk again: libhdf5 finds a chunk's address by
#: walking the dataset's chunks, so each lookup grows with the chunks written (docs/format.md)
IN_PLACE_UNTIL_CHUNKS = 2048

#: what ``dtype=`` means "take the dtype of the chunks" (promoting when later chunks need more)
AUTO = "auto"
#: what ``dtype=`` means "the narrowest integer dtype that holds every value so far" (widening as needed)
AUTO_INT = "auto-int"

_UNSIGNED = tuple(np.dtype(t) for t in ("<u1", "<u2", "<u4", "<u8"))
_SIGNED = tuple(np.dtype(t) for t in ("<i1", "<i2", "<i4", "<i8"))


def narrowest_int(lo: int, hi: int) -> np.dtype:
    """The narrowest integer dtype holding every integer in ``lo..hi`` (unsigned when ``lo >= 0``).

    >>> narrowest_int(0, 255), narrowest_int(-1, 255), narrowest_int(0, 70000), narrowest_int(-2**40, 3)
    (dtype('uint8'), dtype('int16'), dtype('uint32'), dtype('int64'))
    """
    for dt in (_UNSIGNED if lo >= 0 else _SIGNED):
        info = np.iinfo(dt)
        if info.min <= lo and hi <= info.max:
            return dt
    raise LodDtypeError(f"no integer dtype holds both {lo} and {hi}")


def _created_by() -> str:
    from .._version import __version__

    return f"lodtool {__version__}"


def storage_dtype(dtype: Any, where: str = "data") -> np.dtype:
    """The dtype lodtool stores for ``dtype``: checked numeric, little-endian.

    >>> storage_dtype(">i4")
    dtype('int32')
    """
    dt = check_dtype(np.dtype(dtype), where)
    return np.dtype(dt.newbyteorder("<").str) if dt.byteorder not in "|" else dt


def chunk_rows(row_bytes: int, total: int | None = None, target: int | None = None) -> int:
    """Rows per chunk: about ``target`` bytes (:data:`STORAGE_CHUNK_BYTES`); less for a small dataset of known size.

    >>> chunk_rows(8), chunk_rows(8, total=100), chunk_rows(64 << 20)
    (8192, 2048, 1)
    """
    row_bytes = max(row_bytes, 1)
    rows = max((target or STORAGE_CHUNK_BYTES) // row_bytes, 1)
    if total is not None:
        rows = min(rows, max(total, min(MIN_CHUNK_BYTES, target or STORAGE_CHUNK_BYTES) // row_bytes, 1))
    return rows


def _chunk_tail(tail: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """Chunk extent of the element dimensions: whole, unless one row is above the chunk target; a row then spans
    at most :data:`MAX_CHUNKS_PER_READ` chunks (what a reader reads at a time), so huge rows get larger chunks."""
    dims = [max(d, 1) for d in tail]
    row_bytes = int(np.prod(dims, dtype=np.int64)) * itemsize
    target = max(STORAGE_CHUNK_BYTES, -(-row_bytes // MAX_CHUNKS_PER_READ))
    if target > CHUNK_SLACK_BYTES:
        raise LodShapeError(f"rows of {row_bytes:,} bytes (element shape {tail}) are larger than a container "
                            f"stores: at most {MAX_CHUNKS_PER_READ * CHUNK_SLACK_BYTES:,} bytes a row")
    while dims and int(np.prod(dims, dtype=np.int64)) * itemsize > target and max(dims) > 1:
        i = int(np.argmax(dims))
        dims[i] = (dims[i] + 1) // 2
    return tuple(dims)


def _host(a) -> np.ndarray:
    return a if isinstance(a, np.ndarray) else np.asarray(to_host(a))


class _Column:
    """One resizable dataset written in whole chunks, with its streamed checksum."""

    def __init__(self, group: h5py.Group, name: str, dtype: np.dtype, tail: tuple[int, ...], options: dict,
                 fletcher32: bool, *, dataset: h5py.Dataset | None = None, target: int | None = None,
                 direct: bool = True):
        self.group, self.name, self.dtype, self.tail = group, name, np.dtype(dtype), tuple(tail)
        self.options, self.fletcher32 = options, fletcher32
        self.ds = dataset
        self.hasher = checksum.new_hasher()
        self.pending: list[np.ndarray] = []
        self.n_pending = 0
        self.written = int(dataset.shape[0]) if dataset is not None else 0
        self.target = target
        self.direct: bool | None = None if direct else False  # None: decided at the first large write
        self.deflate: tuple[int, bool] | bool | None = None  # (level, fletcher32) once known to encode in parallel
        self.unqueued = 0  # bytes written since this column last started the file's write-back
        self.staging: list[np.ndarray] | None = None  # the direct path's buffers of stored chunks, reused
        self.rows = int(dataset.chunks[0]) if dataset is not None and dataset.chunks else \
            chunk_rows(self.row_bytes, target=target)

    @property
    def row_bytes(self) -> int:
        """Bytes of one row (the dtype may still widen: see ``TensorWriter._promote``)."""
        return bytes_per_row(self.dtype, self.tail)

    @property
    def size(self) -> int:
        return self.written + self.n_pending

    def _create(self, final: bool) -> None:
        rows = self.rows
        if final:  # everything is known: a small dataset gets a small chunk
            rows = min(rows, chunk_rows(self.row_bytes, self.n_pending, self.target))
            self.rows = rows
        maxshape = (None,) + tuple(None if d == 0 else d for d in self.tail)
        chunks = (rows,) + _chunk_tail(self.tail, self.dtype.itemsize)
        self.ds = self.group.create_dataset(self.name, shape=(0,) + self.tail, maxshape=maxshape, dtype=self.dtype,
                                            chunks=chunks, fletcher32=self.fletcher32, **self.options)

    def extend(self, arr: np.ndarray) -> None:
        if arr.shape[0] == 0:
            return
        self.n_pending += int(arr.shape[0])
        if self.n_pending >= self.rows:
            self.pending.append(arr)
            self.flush(final=False)  # writes whole chunks, copies the remainder
        else:
            self.pending.append(np.array(arr))  # own what is kept: the caller may reuse its buffers

    def flush(self, final: bool) -> None:
        if self.ds is None:
            if not final and self.n_pending < self.rows:
                return
            self._create(final)
        if final:
            k = self.n_pending
        else:
            k = (self.size // self.rows) * self.rows - self.written
        if k <= 0:
            return
        self.ds.resize(self.written + k, axis=0)
        last = self.pending[-1]
        head = self.n_pending - last.shape[0]  # rows held from earlier calls: less than one chunk
        if head and k > self.rows:
            # one chunk made of the held rows and the head of the new block; the rest written from the block
            need = self.rows - head
            blocks = [np.concatenate(self.pending[:-1] + [last[:need]]), last[need:need + k - self.rows]]
            rest = last[need + k - self.rows:]
        else:
            whole = last if not head else np.concatenate(self.pending)
            blocks, rest = [whole[:k]], whole[k:]
        direct = self._direct_ok(k * self.row_bytes)
        for block in blocks:
            self._write(np.ascontiguousarray(block, dtype=self.dtype), direct)
        self.pending = [np.array(rest)] if rest.shape[0] else []  # own the remainder (< 1 chunk)
        self.n_pending = int(rest.shape[0])

    def _write(self, block: np.ndarray, direct: bool) -> None:
        """Write ``block`` at row ``self.written`` (a chunk boundary, inside the dataset's size)."""
        if block.shape[0] == 0:
            return
        if direct:  # hashes the block as it writes it
            self.staging = _write_chunks_direct(self.ds, self.written, block, self.rows, self.hasher, self.staging)
        else:
            if self._deflate_level(block) is not None:
                from ._deflate import write_chunks

                write_chunks(self.ds, self.written, block, self.rows, level=self.deflate[0],
                             fletcher32=self.deflate[1])
            else:
                self.ds[self.written:self.written + block.shape[0]] = block
            checksum.update(self.hasher, block)
        self.written += block.shape[0]
        self.unqueued += block.nbytes
        if self.unqueued >= WRITEBACK_BYTES:  # spread the write-back over the writing (see _writeback)
            start_writeback(self.ds.file)
            self.unqueued = 0

    def _direct_ok(self, nbytes: int) -> bool:
        """Whether a write of ``nbytes`` here can bypass libhdf5's filter pipeline (see :mod:`._fletcher`)."""
        if nbytes < DIRECT_MIN_BYTES or self.written % self.rows:
            return False
        if self.direct is None:  # decided once per dataset: fletcher32 alone, whole rows per chunk
            self.direct = (filters.filter_ids(self.ds) == [filters.FLETCHER32]
                           and self.ds.chunks == (self.rows,) + self.tail
                           and self.dtype.byteorder in "<|=" and np.little_endian)
        return self.direct

    def _deflate_level(self, block: np.ndarray) -> int | None:
        """The deflate level if ``block`` can be encoded in parallel here (see :mod:`._deflate`), else None."""
        if self.written % self.rows or block.shape[0] == 0:
            return None
        if self.deflate is None:  # decided once per dataset: shuffle + deflate (+ fletcher32), whole rows per chunk
            self.deflate = False
            plist = self.ds.id.get_create_plist()
            ids = filters.filter_ids(self.ds)
            if ids in ([filters.SHUFFLE, filters.DEFLATE], [filters.SHUFFLE, filters.DEFLATE, filters.FLETCHER32]) \
                    and self.ds.chunks == (self.rows,) + self.tail and self.dtype.byteorder in "<|=" \
                    and np.little_endian:
                opts = plist.get_filter(1)[2]
                self.deflate = (int(opts[0]) if opts else 6, ids[-1] == filters.FLETCHER32)
        return self.deflate[0] if self.deflate else None

    def prime(self, path: str, what: str) -> None:
        """Hash the rows already in the dataset (appending) and compare with the recorded checksum."""
        with translate(path, f"cannot read {what}"):
            stored = self.ds.attrs.get(spec.ATTR_DIGEST)
            gap = storage_gap(self.ds)
            if gap:
                raise LodFormatError(f"{path}: {what}: the dataset {gap}; refusing to append")
            checksum.hash_dataset(self.ds, self.hasher)
        stored = spec.text_attr(stored) if stored is not None else None
        if stored is None:
            raise LodChecksumError(f"{path}: {what} has no recorded checksum; refusing to append")
        if checksum.parse_digest(stored, f"{path}: {what}") != checksum.format_digest(self.hasher):
            raise LodChecksumError(f"{path}: {what} does not match its recorded checksum; refusing to append "
                                   "(run lodtool verify)")

    def cast_pending(self, dtype: np.dtype) -> None:
        self.pending = [p.astype(dtype) for p in self.pending]

    def finish(self) -> None:
        self.flush(final=True)
        if self.ds is None:
            self._create(final=True)
        self.staging = None
        self.ds.attrs[spec.ATTR_DIGEST] = checksum.format_digest(self.hasher)


def _write_chunks_direct(ds: h5py.Dataset, start: int, block: np.ndarray, rows: int, hasher,
                         staging: list[np.ndarray] | None = None) -> list[np.ndarray]:
    """Write ``block`` at row ``start`` (a chunk boundary) as whole chunks with their fletcher32, and feed its bytes
    to ``hasher``.

    The bytes are what libhdf5's filter would store: the chunk (the last one
    padded with the fill value, zero), then its Fletcher-32 as a little-endian
    uint32.  Where the file is a plain file (HDF5's default driver) and chunks
    hold at least :data:`IN_PLACE_FROM_BYTES`, every chunk with four bytes of
    ``block`` after it is handed to libhdf5 straight from ``block``
    (:func:`_write_in_place`), up to the dataset's
    :data:`IN_PLACE_UNTIL_CHUNKS`-th chunk; the others, and every chunk
    elsewhere, are laid out with their sums in the buffers of ``staging``
    (:func:`_write_staged`).  Returns the buffers, for the next call to reuse.
    """
    chunk_bytes = rows * (block.nbytes // max(block.shape[0], 1))
    flat = block.reshape(-1).view(np.uint8)
    count = -(-flat.shape[0] // chunk_bytes)
    zeros = (0,) * (block.ndim - 1)

    def coord(k: int) -> tuple:  # where chunk k of the block starts in the dataset
        return (start + k * rows,) + zeros

    fd = _raw_fd(ds)
    in_place = 0
    if fd is not None and chunk_bytes >= IN_PLACE_FROM_BYTES:  # chunk i is followed by four bytes of the block
        in_place = max(count - 1 if flat.shape[0] - (count - 1) * chunk_bytes >= 4 else count - 2, 0)
        in_place = min(in_place, max(IN_PLACE_UNTIL_CHUNKS - start // rows, 0))
    if in_place:
        _write_in_place(ds.id, fd, flat, in_place, chunk_bytes, coord, hasher)
    if in_place < count:
        staging = _write_staged(ds.id, flat, in_place, count, chunk_bytes, coord, hasher, staging)
    return staging or []


def _raw_fd(ds: h5py.Dataset) -> int | None:
    """The descriptor of ``ds``'s file where libhdf5 writes it as a plain file (the ``sec2`` driver), else None."""
    if ds.file.driver != "sec2" or not hasattr(ds.id, "get_chunk_info_by_coord"):
        return None
    fd = ds.file.id.get_vfd_handle()
    return fd if isinstance(fd, int) and fd >= 0 else None


def _write_in_place(dsid, fd: int, flat: np.ndarray, count: int, chunk_bytes: int, coord, hasher) -> None:
    """Chunks ``0..count-1`` of ``flat`` (whole chunks, each followed by at least four bytes of ``flat``), with no
    copy in this process: libhdf5 stores each chunk's bytes and the four after them, and the chunk's Fletcher-32 is
    then written over those four through ``fd``, where libhdf5 placed them.  The sums of groups of chunks are
    computed ahead of the group being written (:func:`_in_order`)."""
    from ._fletcher import fletcher32_chunks

    group = max(STAGE_BYTES // chunk_bytes, 1)
    groups = -(-count // group)

    def sums_of(g: int) -> np.ndarray:
        return fletcher32_chunks(flat[g * group * chunk_bytes:min((g + 1) * group, count) * chunk_bytes], chunk_bytes)

    def write(g: int, sums: np.ndarray) -> None:
        sums = sums.astype("<u4")
        first = g * group
        for i in range(sums.shape[0]):
            k = first + i
            begin = k * chunk_bytes
            dsid.write_direct_chunk(coord(k), flat[begin:begin + chunk_bytes + 4])  # h5py takes its lock
            where = dsid.get_chunk_info_by_coord(coord(k)).byte_offset + chunk_bytes
            if os.pwrite(fd, sums[i:i + 1].tobytes(), where) != 4:
                raise OSError(f"a chunk's checksum was not written whole at byte {where:,}")
        hasher.update(flat[first * chunk_bytes:(first + sums.shape[0]) * chunk_bytes])

    _in_order(groups, *_pipeline(groups), sums_of, write)


def _write_staged(dsid, flat: np.ndarray, first_chunk: int, count: int, chunk_bytes: int, coord, hasher,
                  staging: list[np.ndarray] | None) -> list[np.ndarray]:
    """Chunks ``first_chunk..count-1`` of ``flat``, each copied with its sum into a row of a buffer of ``staging``
    that libhdf5 is handed; groups of chunks are laid out ahead of the group being written (:func:`_in_order`).
    Returns the buffers."""
    total = count - first_chunk
    group = max(STAGE_BYTES // (chunk_bytes + 4), 1)
    groups = -(-total // group)
    pool, in_flight = _pipeline(groups)
    shape = (min(group, total), chunk_bytes + 4)
    staging = [b for b in (staging or []) if b.shape == shape][:in_flight]
    staging += [np.empty(shape, np.uint8) for _ in range(in_flight - len(staging))]

    def stage(g: int) -> np.ndarray:
        return _stage_chunks(flat, first_chunk + g * group, min(group, total - g * group), chunk_bytes,
                             staging[g % in_flight])

    def write(g: int, staged: np.ndarray) -> None:
        first = first_chunk + g * group
        for i in range(staged.shape[0]):
            dsid.write_direct_chunk(coord(first + i), staged[i])  # h5py takes its lock
        hasher.update(flat[first * chunk_bytes:(first + staged.shape[0]) * chunk_bytes])

    _in_order(groups, pool, in_flight, stage, write)
    return staging


def _pipeline(groups: int) -> tuple:
    """The encoding pool that prepares groups of chunks (:func:`._deflate.encoder_pool`; ``None``: this thread does)
    and how many groups are prepared at a time."""
    from ._deflate import encoder_pool, workers

    pool = encoder_pool() if groups > 1 and workers() > 1 else None
    return pool, min(workers() + 1, STAGED_GROUPS, groups) if pool is not None else 1


def _in_order(groups: int, pool, ahead: int, prepare: Callable, write: Callable) -> None:
    """``write(g, prepare(g))`` for each group in order, in this thread, while ``pool``'s threads run ``prepare`` on
    the ``ahead - 1`` groups after it (the copies and sums release the GIL)."""
    queued: collections.deque = collections.deque()

    def queue(g: int) -> None:
        queued.append(pool.submit(prepare, g) if pool is not None else prepare(g))

    for g in range(ahead):
        queue(g)
    for g in range(groups):
        got = queued.popleft()
        write(g, got.result() if pool is not None else got)
        if g + ahead < groups:
            queue(g + ahead)


def _stage_chunks(flat: np.ndarray, first: int, count: int, chunk_bytes: int, buf: np.ndarray) -> np.ndarray:
    """Chunks ``first..first+count`` of the flat uint8 ``flat`` laid out in the rows of ``buf`` as libhdf5 stores
    them: each chunk (the last one of ``flat`` padded with zeros), then its Fletcher-32, little-endian."""
    from ._fletcher import fletcher32_chunks

    part = flat[first * chunk_bytes:(first + count) * chunk_bytes]
    whole = part.shape[0] // chunk_bytes
    out = buf[:count]
    out[:whole, :chunk_bytes] = part[:whole * chunk_bytes].reshape(whole, chunk_bytes)
    sums = fletcher32_chunks(part[:whole * chunk_bytes], chunk_bytes)
    if whole < count:  # the short last chunk, padded
        tail = part.shape[0] - whole * chunk_bytes
        out[whole, :tail] = part[whole * chunk_bytes:]
        out[whole, tail:chunk_bytes] = 0
        sums = np.append(sums, fletcher32_chunks(out[whole, :chunk_bytes], chunk_bytes))
    out[:, chunk_bytes:] = sums.astype("<u4").view(np.uint8).reshape(-1, 4)
    return out


def _refuse_rounding(data: np.ndarray, dtype: np.dtype, name: str, first_row: int) -> None:
    """Refuse integers that an inferred float dtype would round (``dtype=`` given: the user chose).

    >>> _refuse_rounding(np.array([1, 2**53 + 1]), np.dtype("float64"), "t", 10)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    lodtool.errors.LodDtypeError: tensor 't': data row 11: integer 9007199254740993 would be promoted ...
    """
    if data.dtype.kind not in "iu" or dtype.kind not in "fc":
        return
    with np.errstate(all="ignore"):
        real = np.dtype(dtype.char.lower()) if dtype.kind == "c" else dtype
        back = data.astype(real).astype(data.dtype)
    bad = np.flatnonzero((back != data).reshape(-1))
    if bad.size:
        i = int(bad[0])
        row = first_row + i // max(int(np.prod(data.shape[1:], dtype=np.int64)), 1)
        raise LodDtypeError(f"tensor {name!r}: data row {row:,}: integer {data.reshape(-1)[i]} would be promoted "
                            f"to {dtype}, which cannot hold it exactly; pass dtype=... to choose")


def _cast_chunk(data: np.ndarray, dtype: np.dtype, name: str, appending_to: str | None = None) -> np.ndarray:
    """Cast a chunk to a tensor's fixed dtype, refusing casts that change values.

    ``appending_to`` (the file) words the refusal for an append, which never changes the stored dtype.
    """
    if data.dtype == dtype:
        return data
    if np.can_cast(data.dtype, dtype, "safe"):
        return data.astype(dtype)
    with np.errstate(all="ignore"):
        out = data.astype(dtype)
        if data.dtype.kind in "fc" and dtype.kind in "fc" and (dtype.kind == "c" or data.dtype.kind == "f"):
            bad = np.isfinite(data) & ~np.isfinite(out)  # a narrower float: rounding is fine, overflow is not
        else:
            back = out.astype(data.dtype)
            bad = ~((back == data) | ((back != back) & (data != data)))
    if bad.any():
        flat = np.flatnonzero(bad.reshape(bad.shape[0], -1).any(axis=1)) if bad.ndim > 1 else np.flatnonzero(bad)
        row = int(flat[0])
        if appending_to is not None:
            wider = np.result_type(dtype, data.dtype)
            raise LodDtypeError(f"{appending_to}: tensor {name!r} stores {dtype}; the appended values are "
                                f"{data.dtype} and {data[row].tolist()!r} (row {row} of the appended chunk) "
                                f"has no exact {dtype} value. append=True never changes the stored dtype: to store "
                                f"{wider}, re-pack the whole tensor with dtype='{wider}' and overwrite=True")
        raise LodDtypeError(f"tensor {name!r} stores {dtype}; a chunk of {data.dtype} cannot be cast without "
                            f"changing values (chunk row {row}: {data[row]!r})")
    return out


class TensorWriter:
    """Appends chunks of whole top-level sequences to one tensor (made by :meth:`LodWriter.add_tensor`).

    >>> import os, tempfile, numpy as np
    >>> from lodtool import LoDTensor
    >>> from lodtool.container import load
    >>> path = os.path.join(tempfile.mkdtemp(), "t.lod.h5")
    >>> with LodWriter(path) as w:
    ...     tw = w.add_tensor("x", dtype="float32", element_shape=(2,), lod_level=1)
    ...     tw.append(LoDTensor(np.ones((3, 2)), [[0, 1, 3]]))
    >>> load(path).dtype, load(path).shape
    (dtype('float32'), (3, 2))
    """

    def __init__(self, owner: "LodWriter", name: str, *, dtype: Any, element_shape: Sequence[int] | None,
                 lod_level: int, level_names: Sequence[str] | None,
                 lod_source: "TensorWriter | None" = None, tokens: TokenInfo | None = None,
                 chunk_bytes: int | None = None):
        self._owner = owner
        self._chunk_bytes = chunk_bytes
        if tokens is not None and not isinstance(tokens, TokenInfo):
            raise LodUsageError(f"tokens must be a lodtool.tokens.TokenInfo, got {type(tokens).__name__}")
        #: the token metadata recorded with the tensor (None: none given; an append keeps the stored one)
        self.tokens = None if tokens is None or tokens.empty else tokens
        self.name = name
        self._path = owner.path
        self._auto_int = isinstance(dtype, str) and dtype == AUTO_INT
        self._range: tuple[int, int] | None = None  # smallest and largest value so far (auto-int)
        self._auto = dtype is None or (isinstance(dtype, str) and dtype == AUTO) or self._auto_int
        self._dtype = None if self._auto else storage_dtype(dtype, f"tensor {name!r}")
        if isinstance(lod_level, bool) or not isinstance(lod_level, (int, np.integer)) or \
                not 0 <= lod_level <= spec.MAX_LOD_LEVEL:
            raise LodUsageError(f"lod_level must be an integer 0..{spec.MAX_LOD_LEVEL}, got {lod_level!r}")
        self.lod_level = int(lod_level)
        self._element_shape = None if element_shape is None else tuple(int(d) for d in element_shape)
        self.level_names = _check_names(level_names, self.lod_level)
        self._lod_source = lod_source
        self._group: h5py.Group | None = None
        self._data: _Column | None = None
        self._lod: list[_Column] = []
        self._ends = [0] * self.lod_level  # last offset of each level so far
        self._finished = False
        self._existing = False

    # -- setup ----------------------------------------------------------------------------------------
    def _open_new(self, h5: h5py.File) -> None:
        self._group = h5.create_group(self.name)
        comp, level = self._owner._compression
        self._write_attrs(comp, level)
        if self.tokens is not None:
            self._write_tokens()
        if self._dtype is not None and self._element_shape is not None:
            self._make_data_column()
        if self.lod_level and self._lod_source is None:
            lod_group = self._group.create_group(spec.LOD)
            options = filters.offsets_options(comp, level)
            for k in range(self.lod_level):
                col = _Column(lod_group, str(k), _lod.OFFSET_DTYPE, (), options, self._owner._fletcher32,
                              target=OFFSETS_CHUNK_BYTES, direct=self._owner.direct_pays)
                col.extend(np.zeros(1, dtype=_lod.OFFSET_DTYPE))
                self._lod.append(col)

    def _write_attrs(self, comp: str, level: int | None) -> None:
        attrs = self._group.attrs
        attrs[spec.ATTR_LOD_LEVEL] = np.int64(self.lod_level)
        if self.level_names:
            attrs[spec.ATTR_LEVEL_NAMES] = np.array(self.level_names, dtype=h5py.string_dtype())
        attrs[spec.ATTR_COMPRESSION] = comp
        if level is not None:
            attrs[spec.ATTR_COMPRESSION_LEVEL] = np.int64(level)

    def _write_tokens(self) -> None:
        """Record :attr:`tokens` in the group; the file becomes format :data:`spec.TOKENS_VERSION`."""
        attrs, info = self._group.attrs, self.tokens
        for key in spec.TOKEN_ATTRS:
            value = getattr(info, key)
            if key in attrs:
                del attrs[key]
            if value is not None:
                attrs[key] = value if isinstance(value, str) else np.int64(value)
        if spec.TOKENIZER in self._group:
            del self._group[spec.TOKENIZER]
        if info.tokenizer_json is not None:
            raw = np.frombuffer(info.tokenizer_json, np.uint8)
            ds = self._group.create_dataset(spec.TOKENIZER, data=raw, chunks=(max(1, min(raw.size, 1 << 20)),),
                                            maxshape=(None,), compression="gzip", compression_opts=4,
                                            fletcher32=self._owner._fletcher32)
            hasher = checksum.new_hasher()
            checksum.update(hasher, raw)
            ds.attrs[spec.ATTR_DIGEST] = checksum.format_digest(hasher)
        root = self._group.file.attrs
        if spec.parse_version(spec.text_attr(root[spec.ATTR_VERSION])) < spec.parse_version(spec.TOKENS_VERSION):
            root[spec.ATTR_VERSION] = spec.TOKENS_VERSION

    def _make_data_column(self) -> None:
        comp, level = self._owner._compression
        self._data = _Column(self._group, spec.DATA, self._dtype, self._element_shape,
                             filters.dataset_options(comp, level), self._owner._fletcher32,
                             target=self._chunk_bytes, direct=self._owner.direct_pays)

    def _open_existing(self, h5: h5py.File) -> None:
        """Prepare to append to a tensor already in the file (checked, verified, unshared)."""
        path, name = self._path, self.name
        layout, issues = describe_tensor(h5[name], path, name)
        if layout is None:
            level, message = issues[0]
            raise LodFormatError(f"{path}: tensor {name!r}: {'' if level is None else f'level {level}: '}{message}; "
                                 "cannot append")
        if layout.lod_level != self.lod_level:
            raise LodShapeError(f"{path}: tensor {name!r} has {layout.lod_level} LoD level(s); cannot append "
                                f"data with {self.lod_level}")
        stored_shape = tuple(int(d) for d in layout.data.shape[1:])
        if self._element_shape is not None and self._element_shape != stored_shape:
            raise LodShapeError(f"{path}: tensor {name!r} has element shape {stored_shape}; cannot append "
                                f"elements of shape {self._element_shape}")
        stored_dtype = np.dtype(layout.data.dtype)
        if self._dtype is not None and self._dtype != stored_dtype:
            raise LodDtypeError(f"{path}: tensor {name!r} stores {stored_dtype}; cannot append as {self._dtype}: "
                                "append=True never changes the stored dtype (leave out dtype=...: the new values are "
                                f"cast to {stored_dtype} where that changes none of them)")
        if self.level_names and layout.level_names and tuple(self.level_names) != tuple(layout.level_names):
            raise LodShapeError(f"{path}: tensor {name!r} has level names {list(layout.level_names)}; cannot "
                                f"append with {list(self.level_names)}")
        for ds in [layout.data, *layout.lod]:
            if ds.maxshape[0] is not None or not ds.chunks:
                raise LodFormatError(f"{path}: tensor {name!r}: {ds.name} is not resizable; cannot append")
            # the stored rows are re-read (and re-hashed): a filter this machine lacks is named, with the fix
            filters.ensure_readable(ds, path, f"tensor {name!r}: {ds.name}")
        stored_tokens = read_token_info(layout.group, path)
        if self.tokens is not None and stored_tokens is not None and self.tokens != stored_tokens:
            raise LodUsageError(f"{path}: tensor {name!r} holds ids of {stored_tokens.describe()}; cannot append "
                                f"ids of {self.tokens.describe()}")
        self._group = layout.group
        if self.tokens is not None and stored_tokens is None:
            self._write_tokens()
        self.tokens = self.tokens or stored_tokens
        self._existing = True
        self._element_shape = stored_shape
        self._dtype = stored_dtype
        if self.level_names and not layout.level_names:
            self._group.attrs[spec.ATTR_LEVEL_NAMES] = np.array(self.level_names, dtype=h5py.string_dtype())
        self.level_names = self.level_names or layout.level_names
        # the LoD must be valid before anything is added to it
        sizes = layout.level_sizes
        n_rows = int(layout.data.shape[0])
        blocks = [_offset_blocks(ds, path) for ds in layout.lod]
        problems = _lod.find_lod_problems(blocks, n_rows, level_sizes=sizes, max_problems=1)
        if problems:
            raise LodValidationError(f"{path}: tensor {name!r}: {problems[0]}; cannot append to an invalid tensor")
        # offsets shared with other tensors (hard links) are copied first: appending must not touch them
        lod_group = self._group[spec.LOD] if self.lod_level else None
        if lod_group is not None and link_count(lod_group) > 1:  # the whole lod group is shared: a group of our own
            with translate(path, f"cannot copy the shared offsets of tensor {name!r}"):
                own = self._group.create_group("_lod_own")
                for k in range(self.lod_level):
                    own[str(k)] = lod_group[str(k)]  # links for now; shared datasets are copied just below
                del self._group[spec.LOD]
                self._group.move("_lod_own", spec.LOD)
                lod_group = self._group[spec.LOD]
        for k in range(self.lod_level):
            ds = lod_group[str(k)]
            if link_count(ds) > 1:
                with translate(path, f"cannot copy the shared offsets of tensor {name!r}"):
                    lod_group.copy(ds, f"_{k}")
                    del lod_group[str(k)]
                    lod_group.move(f"_{k}", str(k))
        data_ds = self._group[spec.DATA]
        if link_count(data_ds) > 1:  # the data is also another tensor's: appending writes to a copy of its own
            with translate(path, f"cannot copy the shared data of tensor {name!r}"):
                self._group.copy(data_ds, "_data_own")
                del self._group[spec.DATA]
                self._group.move("_data_own", spec.DATA)
            data_ds = self._group[spec.DATA]
        self._data = _Column(self._group, spec.DATA, self._dtype, self._element_shape, {}, data_ds.fletcher32,
                             dataset=data_ds, direct=self._owner.direct_pays)
        self._data.prime(path, f"tensor {name!r} data")
        for k in range(self.lod_level):
            ds = lod_group[str(k)]
            col = _Column(lod_group, str(k), _lod.OFFSET_DTYPE, (), {}, ds.fletcher32, dataset=ds,
                          direct=self._owner.direct_pays)
            col.prime(path, f"tensor {name!r} level {k} offsets")
            self._lod.append(col)
            self._ends[k] = int(read_rows(ds, ds.shape[0] - 1, ds.shape[0])[0])

    # -- appending -----------------------------------------------------------------------------------------
    @property
    def dtype(self) -> np.dtype | None:
        """The data dtype (``None`` until a chunk or the stored tensor sets it; float64 for an empty new tensor)."""
        return self._dtype

    @property
    def n_rows(self) -> int:
        """Rows appended so far (including rows already in the file, when appending)."""
        return self._data.size if self._data is not None else 0

    def append(self, chunk: LoDTensor) -> None:
        """Append ``chunk``'s top-level sequences (its offsets are shifted onto the end of the tensor's)."""
        if self._finished:
            raise LodUsageError(f"tensor {self.name!r} is already finished")
        if not isinstance(chunk, LoDTensor):
            raise LodUsageError(f"append takes a LoDTensor, got {type(chunk).__name__}")
        if chunk.lod_level != self.lod_level:
            raise LodShapeError(f"tensor {self.name!r} has {self.lod_level} LoD level(s); cannot append a chunk "
                                f"with {chunk.lod_level}")
        if self._element_shape is not None and chunk.element_shape != self._element_shape:
            raise LodShapeError(f"tensor {self.name!r} has element shape {self._element_shape}; cannot append "
                                f"elements of shape {chunk.element_shape}")
        raise_if_interrupted_since(self._owner._interrupts)
        data = _host(chunk.data)
        offsets = [_lod.as_index_array(_host(o), level=k) for k, o in enumerate(chunk.offsets)]
        _lod.validate_lod(offsets, data.shape[0])
        data = self._coerce(data)
        # a failed write (a full disk) is this file's error, for every caller (tasks append without the owner)
        with translate(self._path, f"cannot write tensor {self.name!r}"):
            if self._data is None:
                self._element_shape = tuple(chunk.element_shape)
                self._make_data_column()
            for k, o in enumerate(offsets):
                if self._lod_source is None:
                    self._lod[k].extend(np.add(o[1:], self._ends[k] - int(o[0])))  # one pass: shifted onto the end
                self._ends[k] += int(o[-1] - o[0])
            self._data.extend(data)

    def _coerce(self, data: np.ndarray) -> np.ndarray:
        if self._auto_int:
            return self._narrow(data)
        src = storage_dtype(data.dtype, f"a chunk of tensor {self.name!r}")
        if self._dtype is None:
            self._dtype = src
        elif self._existing:  # appending: the stored rows keep their dtype; new values fit it exactly or are refused
            return _cast_chunk(data, self._dtype, self.name, appending_to=self._path)
        elif self._auto:
            wider = np.result_type(self._dtype, src)
            if wider != self._dtype:
                self._promote(storage_dtype(wider))
            # an inferred promotion must not round: integers beyond 2**53 do not survive float64
            _refuse_rounding(data, self._dtype, self.name, self._data.size if self._data is not None else 0)
        return _cast_chunk(data, self._dtype, self.name)

    def _narrow(self, data: np.ndarray) -> np.ndarray:
        """A chunk as the narrowest integer dtype for every value so far, widening what is stored if needed."""
        if data.dtype.kind not in "iu":
            raise LodDtypeError(f"tensor {self.name!r}: dtype auto-int takes integers, but a chunk holds "
                                f"{data.dtype} values; give a float dtype, or leave the dtype to be inferred")
        if data.size:
            lo, hi = int(data.min()), int(data.max())
            if self._range is not None:
                lo, hi = min(lo, self._range[0]), max(hi, self._range[1])
            self._range = (lo, hi)
        elif self._range is None and self._dtype is None:
            self._dtype = _UNSIGNED[0]  # no value yet: the narrowest, widened by the first values that need it
        if self._range is not None:
            want = narrowest_int(*self._range)
            if self._dtype is None:
                self._dtype = want
            elif want != self._dtype:
                # in this session the range covers every value, so ``want`` holds them all; a file appended to
                # holds values of unknown range, so its dtype is only ever widened
                wider = np.result_type(self._dtype, want) if self._existing else want
                if wider.kind == "f":  # uint64 with a negative value: no integer dtype holds both
                    raise LodDtypeError(f"tensor {self.name!r}: no integer dtype holds both {self._dtype} values "
                                        f"and {want} values")
                if wider != self._dtype:
                    self._promote(storage_dtype(wider))
        return _cast_chunk(data, self._dtype, self.name)

    def _promote(self, dtype: np.dtype) -> None:
        """Widen the data dtype, rewriting what is already in the (temp) file."""
        self._dtype = dtype
        self._group.attrs[spec.ATTR_DTYPE] = dtype.str
        col = self._data
        if col is None:
            return
        col.dtype = dtype
        base = col.written
        for block in col.pending:
            _refuse_rounding(block, dtype, self.name, base)
            base += len(block)
        col.cast_pending(dtype)
        if col.ds is None:
            return
        old = col.ds
        comp = spec.text_attr(self._group.attrs.get(spec.ATTR_COMPRESSION)) or "none"
        level = self._group.attrs.get(spec.ATTR_COMPRESSION_LEVEL)
        options = filters.dataset_options(comp, None if level is None else int(level)) \
            if comp in filters.COMPRESSIONS else {}
        tmp_name = "_data_promoted"
        new = _Column(self._group, tmp_name, dtype, self._element_shape, options, old.fletcher32,
                      target=self._chunk_bytes, direct=self._owner.direct_pays)
        with translate(self._path, f"cannot rewrite tensor {self.name!r} as {dtype}"):
            step = checksum.block_rows(old)
            for start in range(0, old.shape[0], step):
                block = read_rows(old, start, min(start + step, old.shape[0]))  # appended-to rows: someone's file
                _refuse_rounding(block, dtype, self.name, start)
                new.extend(block.astype(dtype))
            new.flush(final=False)
            if new.ds is None or new.n_pending:
                new.flush(final=True)
            del self._group[spec.DATA]
            self._group.move(tmp_name, spec.DATA)
        new.name = spec.DATA
        new.ds = self._group[spec.DATA]
        new.pending, new.n_pending = col.pending, col.n_pending
        self._data = new

    # -- finishing ---------------------------------------------------------------------------------------
    def _finish(self) -> None:
        if self._finished:
            return
        self._finished = True
        if self._data is None:
            if self._dtype is None:
                self._dtype = np.dtype(np.float64)
            if self._element_shape is None:
                self._element_shape = ()
            self._make_data_column()
        self._data.finish()
        for col in self._lod:
            col.finish()
        if self._lod_source is not None:
            self._link_to(self._lod_source)
        self._group.attrs[spec.ATTR_DTYPE] = self._dtype.str
        rows = self._data.size
        if self.lod_level and self._ends[-1] != rows:  # pragma: no cover - guarded by per-chunk validation
            raise LodShapeError(f"tensor {self.name!r}: the LoD ends at {self._ends[-1]} but the data has {rows} rows")

    def _link_to(self, source: "TensorWriter") -> None:
        source_lod = source._group[spec.LOD]
        if spec.LOD in self._group:
            del self._group[spec.LOD]
        lod_group = self._group.create_group(spec.LOD)
        for k in range(self.lod_level):
            lod_group[str(k)] = source_lod[str(k)]


def _offset_blocks(ds: h5py.Dataset, path: str, block: int = 1 << 20):
    for start in range(0, ds.shape[0], block):
        with translate(path, f"cannot read {ds.name}"):
            chunk = read_rows(ds, start, min(start + block, ds.shape[0]))
        yield _lod.as_index_array(chunk)


def _check_names(level_names, lod_level: int):
    if level_names is None:
        return None
    names = tuple(spec.check_name_text(str(n), "level name") for n in level_names)
    if len(names) != lod_level:
        raise LodShapeError(f"{len(names)} level name(s) given for a tensor with {lod_level} LoD level(s)")
    return names or None


def _equal_lod(a: h5py.Group, b: h5py.Group, lod_level: int, block: int = 1 << 20) -> bool:
    for k in range(lod_level):
        da, db = a[str(k)], b[str(k)]
        if da.shape != db.shape:
            return False
        if same_object(da, db):
            continue
        for start in range(0, da.shape[0], block):
            stop = min(start + block, da.shape[0])
            if not np.array_equal(read_rows(da, start, stop), read_rows(db, start, stop)):
                return False
    return True


#: what a refused write into an existing tensor tells the user to do: the options every writing command has
DEFAULT_REMEDY = "pass overwrite=True to replace it, or force=True to replace the whole file"
#: the same for ``pack``, which can also append to the tensor or name another one
PACK_REMEDY = ("pass overwrite=True to replace it, append=True to add sequences to it, name=... to write another "
               "tensor, or force=True to replace the whole file")


class LodWriter:
    """Writes a container atomically: a temp file committed on a clean exit, discarded on an exception.

    Writing into a container that exists follows one rule (see :func:`save`):
    the tensors written are added and every other tensor of the file is kept;
    a tensor that is already there is refused unless ``overwrite=True``
    (replace it) or ``append=True`` (:meth:`add_tensor` then returns a writer
    that appends to it); ``force=True`` replaces the whole file.  An existing
    file that is not a lodtool container is replaced only with ``force=True``
    (an empty file needs nothing).  ``path`` may also be a writable binary
    stream: the container is then copied to it on commit; or a URL
    (``s3://bucket/x.lod.h5``): it is then uploaded whole on commit, and
    nothing appears there if the write fails (an object already there is
    replaced only with ``force=True``).  ``remedy`` ends the
    error that refuses a tensor already there: the options the caller offers
    (:data:`DEFAULT_REMEDY`, or ``pack``'s :data:`PACK_REMEDY`).  ``layout``
    (``"compact"`` or ``"paged"``, ``None``: see
    :func:`~lodtool.container._h5.layout_for`) is how a new file places its
    metadata; ``"paged"`` is what object storage reads in few requests
    (``docs/remote.md``).  ``expected_bytes`` (None: unknown) is about how
    many bytes the caller will write: where libhdf5's checksum function
    cannot be called from here, below :data:`DIRECT_FROM_BYTES` the
    fletcher32 of uncompressed datasets is left to libhdf5's filter (a fresh
    process then never imports Numba); it changes no stored byte.

    >>> import os, tempfile, numpy as np
    >>> from lodtool import LoDTensor
    >>> from lodtool.container import load
    >>> path = os.path.join(tempfile.mkdtemp(), "w.lod.h5")
    >>> with LodWriter(path) as w:
    ...     w.write("x", LoDTensor(np.arange(3), [[0, 2, 3]]))
    >>> with LodWriter(path, append=True) as w:
    ...     w.write("x", LoDTensor(np.arange(3, 5), [[0, 2]]))
    >>> load(path).to_nested()
    [[0, 1], [2], [3, 4]]
    """

    def __init__(self, path: str | os.PathLike | Any, *, append: bool = False, overwrite: bool = False,
                 force: bool = False, compression: str | None = None, compression_level: int | None = None,
                 fletcher32: bool = True, share_lod: bool = True, remedy: str = DEFAULT_REMEDY,
                 layout: str | None = None, expected_bytes: int | None = None):
        if force and append:
            raise LodUsageError("append=True adds to a file and force=True replaces it: give one of them")
        self._interrupts = interrupt_mark()
        self._overwrite = bool(overwrite)
        self._remedy = remedy
        self._share_lod = bool(share_lod)
        self._compression = filters.normalize_compression(compression, compression_level)
        filters.dataset_options(*self._compression)  # a missing plugin fails here, before any file is touched
        self._fletcher32 = bool(fletcher32)
        self._expected_bytes = expected_bytes
        self._direct_pays: bool | None = None
        self._stream = path if is_stream(path) else None
        if self._stream is None:
            path = storage.local_path(os.fspath(path))
        #: a target in object storage: written to a temp file, then published whole (:func:`lodtool.atomic.publish`)
        self._url = path if self._stream is None and storage.is_url(path) else None
        self._atomic: AtomicPath | None = None
        self._tmpdir: str | None = None
        self._writers: dict[str, TensorWriter] = {}
        self._links: list[tuple[str, str]] = []
        self._done = False
        if self._stream is not None or self._url is not None:
            if append and self._url is not None:
                raise LodUsageError(f"{storage.redact(self._url)}: cannot append to a container in object storage "
                                    "(an object is replaced whole: an append would rewrite it, undoing any other "
                                    "writer's replacement meanwhile); write a new container, or append to a "
                                    "sharded folder")
            if append:
                raise LodUsageError("append needs a local file path, not a stream")
            if self._url is not None and not force and storage.exists(self._url):
                raise LodExistsError(f"{storage.redact(self._url)}: exists; pass force=True to replace it (a "
                                     "container in object storage is replaced whole, never added to)")
            self.path = "<stream>" if self._url is None else storage.redact(self._url)
            self._tmpdir = tempfile.mkdtemp(prefix="lodtool-")
            tmp = os.path.join(self._tmpdir, "out.lod.h5")
            existing = False
        else:
            self.path = os.fspath(path)
            # a write that starts from the file's contents holds a lock on it until its rename: a second one waits
            self._atomic = AtomicPath(self.path, lock_target=not force)
            existing = not force and holds_content(self.path)
            try:
                if existing:
                    # a foreign, broken or newer file fails before anything is copied
                    _check_appendable(self.path, replace_hint=not append)
                    self._atomic.copy_target()
            except BaseException:
                self._atomic.discard()
                raise
            tmp = self._atomic.tmp
        self.append = existing and bool(append)
        self.adding = existing
        try:
            if existing:
                self._h5 = create_h5(tmp, "r+")
                with translate(self.path, "cannot list the tensors"):
                    self._existing_names = tensor_names(self._h5)
            else:
                self._h5 = create_h5(tmp, "w", layout_for(layout, self._url or self.path))
                attrs = self._h5.attrs
                attrs[spec.ATTR_FORMAT] = spec.FORMAT_NAME
                attrs[spec.ATTR_VERSION] = spec.FORMAT_VERSION
                attrs[spec.ATTR_CREATED_BY] = _created_by()
                attrs[spec.ATTR_CHECKSUM] = spec.CHECKSUM_ALGORITHM
                self._existing_names = []
        except BaseException:
            self.abort()
            raise

    # -- tensors -------------------------------------------------------------------------------------------
    @property
    def direct_pays(self) -> bool:
        """Whether large writes of uncompressed datasets compute fletcher32 themselves (compiled) and write whole
        chunks directly: always where that needs no Numba import (:func:`._fletcher.compiled_without_numba`),
        else decided once, by ``expected_bytes`` (:func:`lodtool._jit.kernels_pay`)."""
        if self._direct_pays is None:
            from ._fletcher import compiled_without_numba

            self._direct_pays = compiled_without_numba() or \
                kernels_pay(self._expected_bytes, DIRECT_FROM_BYTES, DIRECT_MIN_BYTES)
        return self._direct_pays

    def add_tensor(self, name: str, *, dtype: Any = None, element_shape: Sequence[int] | None = None,
                   lod_level: int, level_names: Sequence[str] | None = None,
                   tokens: TokenInfo | None = None, chunk_bytes: int | None = None) -> TensorWriter:
        """A writer for tensor ``name`` (appending to it if the file already has it).

        ``dtype=None`` (or ``"auto"``) takes the chunks' dtype and promotes when
        a later chunk needs a wider one; an explicit dtype casts each chunk and
        refuses casts that change values.  ``element_shape=None`` takes the first
        chunk's.  ``tokens`` (:class:`~lodtool.tokens.TokenInfo`) is recorded
        with the tensor: a command that copies a tensor passes its source's
        ``tokens`` on.  Appending keeps the stored metadata and refuses another.
        ``chunk_bytes`` is the target size of a new data chunk (None:
        :data:`STORAGE_CHUNK_BYTES`; :data:`MAPPED_CHUNK_BYTES` for uncompressed data read from a memory map);
        an appended tensor keeps its chunks.
        """
        return self._add(name, dtype=dtype, element_shape=element_shape, lod_level=lod_level,
                         level_names=level_names, tokens=tokens, chunk_bytes=chunk_bytes)

    def _add(self, name: str, *, dtype, element_shape, lod_level, level_names,
             lod_source: str | None = None, tokens: TokenInfo | None = None,
             chunk_bytes: int | None = None) -> TensorWriter:
        self._check_open()
        spec.check_tensor_name(name)
        if name in self._writers:
            raise LodUsageError(f"tensor {name!r} is already being written")
        source = self._writers[lod_source] if lod_source is not None else None
        self.check_name(name)
        tw = TensorWriter(self, name, dtype=dtype, element_shape=element_shape, lod_level=lod_level,
                          level_names=level_names, lod_source=source, tokens=tokens, chunk_bytes=chunk_bytes)
        try:
            with translate(self.path, f"cannot write tensor {name!r}"):
                if name in self._existing_names and self.append:
                    tw._open_existing(self._h5)
                else:
                    if name in self._existing_names:  # overwrite: the tensor's links go, other tensors keep theirs
                        del self._h5[name]
                        self._existing_names.remove(name)
                    tw._open_new(self._h5)
        except BaseException:
            self.abort()
            raise
        self._writers[name] = tw
        return tw

    @property
    def existing_names(self) -> list[str]:
        """The tensors the file held before this writer (empty for a new file or ``force=True``)."""
        return list(self._existing_names)

    def stored_lod_level(self, name: str) -> int:
        """The LoD level count of tensor ``name`` as the existing file stores it."""
        with translate(self.path, f"cannot read tensor {name!r}"):
            level = _int(self._h5[name].attrs.get(spec.ATTR_LOD_LEVEL))
        if level is None:
            raise LodFormatError(f"{self.path}: tensor {name!r} has no readable lod_level attribute")
        return level

    def check_name(self, name: str) -> None:
        """Raise :class:`~lodtool.errors.LodExistsError` if writing tensor ``name`` would replace one unasked.

        Call it before expensive work; :meth:`add_tensor` calls it too.
        """
        if name in self._existing_names and not (self.append or self._overwrite):
            raise LodExistsError(f"{self.path} already holds tensor {name!r}: {self._remedy}")

    def write(self, name: str, tensor: LoDTensor) -> None:
        """Add ``tensor`` as ``name`` (or append it to tensor ``name`` of an appended file)."""
        if not isinstance(tensor, LoDTensor):
            raise LodUsageError(f"write takes a LoDTensor, got {type(tensor).__name__}")
        tw = self._writers.get(name)
        if tw is None:
            exists = name in self._existing_names and self.append
            tw = self._add(name, dtype=None if exists else tensor.dtype, element_shape=tensor.element_shape,
                           lod_level=tensor.lod_level, level_names=tensor.level_names)
        self._guarded(tw.append, tensor)

    def link_lod(self, name: str, source_name: str) -> None:
        """Make tensor ``name`` share the offsets datasets of ``source_name`` (hard links).

        Checked on commit: both LoDs must be equal, else :class:`LodShapeError`.
        """
        self._check_open()
        for n in (name, source_name):
            if n not in self._writers and n not in self._existing_names:
                raise LodUsageError(f"link_lod: no tensor named {n!r} in {self.path}")
        if name == source_name:
            raise LodUsageError("link_lod: a tensor cannot share offsets with itself")
        self._links.append((name, source_name))

    # -- commit ----------------------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._done:
            raise LodUsageError(f"{self.path}: the writer is already closed")

    def _guarded(self, fn, *args):
        try:
            with translate(self.path, "cannot write"):
                return fn(*args)
        except BaseException:
            self.abort()
            raise

    def _relink(self, name: str, source: str, required: bool) -> bool:
        """Point ``name``'s offsets at ``source``'s datasets if both LoDs are equal."""
        h5 = self._h5
        a, b = h5[name], h5[source]
        la, lb = _int(a.attrs.get(spec.ATTR_LOD_LEVEL)), _int(b.attrs.get(spec.ATTR_LOD_LEVEL))
        if not la or la != lb or not _equal_lod(a[spec.LOD], b[spec.LOD], la):
            if required:
                raise LodShapeError(f"{self.path}: tensors {name!r} and {source!r} have different LoDs; "
                                    "cannot share offsets")
            return False
        if all(same_object(a[spec.LOD][str(k)], b[spec.LOD][str(k)]) for k in range(la)):
            return True
        del a[spec.LOD]
        lod_group = a.create_group(spec.LOD)
        for k in range(la):
            lod_group[str(k)] = b[spec.LOD][str(k)]
        return True

    def _share_equal_lods(self) -> None:
        """Let each tensor written in this session share the offsets of an earlier tensor with an equal LoD."""
        names = tensor_names(self._h5)
        signature, alike = {}, {}
        for n in names:
            group = self._h5[n]
            level = _int(group.attrs.get(spec.ATTR_LOD_LEVEL))
            lod_group = hard_member(group, spec.LOD) if level else None
            if isinstance(lod_group, h5py.Group) and all(str(k) in lod_group for k in range(level)):
                # shapes and recorded digests: only tensors alike in both are compared (a mapping of many
                # tensors of one shape would otherwise compare every pair's offsets)
                levels = [lod_group[str(k)] for k in range(level)]
                signature[n] = (level, tuple((ds.shape, ds.attrs.get(spec.ATTR_DIGEST)) for ds in levels))
                alike.setdefault(signature[n], []).append(n)
        for name in names:
            if name not in self._writers or name not in signature:
                continue
            for other in alike[signature[name]]:
                if other != name and self._relink(name, other, required=False):
                    break

    def commit(self) -> None:
        """Finish every tensor, record checksums, and atomically replace the target."""
        self._check_open()
        try:
            raise_if_interrupted_since(self._interrupts)
            with translate(self.path, "cannot finish writing"):
                ordered = sorted(self._writers.values(), key=lambda tw: tw._lod_source is not None)
                for tw in ordered:
                    tw._finish()
                for name, source in self._links:
                    self._relink(name, source, required=True)
                if self._share_lod:
                    self._share_equal_lods()
                self._h5.close()
            if self._stream is not None:
                with open(os.path.join(self._tmpdir, "out.lod.h5"), "rb") as src:
                    copy_to_stream(src, self._stream)
                shutil.rmtree(self._tmpdir, ignore_errors=True)
            elif self._url is not None:
                publish(os.path.join(self._tmpdir, "out.lod.h5"), self._url)
                shutil.rmtree(self._tmpdir, ignore_errors=True)
            else:
                self._atomic.commit()
        except BaseException:
            self.abort()
            raise
        self._done = True

    def abort(self) -> None:
        """Discard everything written; the target keeps its old contents."""
        if self._done:
            return
        self._done = True
        h5 = getattr(self, "_h5", None)
        if h5 is not None:
            with contextlib.suppress(*H5_ERRORS):  # after a failed write (a full disk) closing fails too; discarded
                h5.close()
        if self._atomic is not None:
            self._atomic.discard()
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)

    def __enter__(self) -> "LodWriter":
        return self

    def __del__(self) -> None:  # a writer dropped without commit() leaves no temp file behind
        try:
            if not self._done:
                self.abort()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            if not self._done:  # an explicit commit() inside the block already finished the file
                self.commit()
        else:
            self.abort()


def holds_content(path: str) -> bool:
    """Whether ``path`` is a regular file with something in it (what writing into it must not lose).

    >>> import os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "x.h5")
    >>> holds_content(p), open(p, "wb").close(), holds_content(p), holds_content(os.devnull)
    (False, None, False, False)
    """
    try:
        info = os.stat(path)
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_size > 0


def _check_appendable(path: str, replace_hint: bool = False) -> None:
    if replace_hint:  # anything but a lodtool container is replaced only on request
        try:
            is_container = h5py.is_hdf5(path)
            if is_container:
                with h5py.File(path, "r", locking=False) as h5:
                    is_container = spec.ATTR_FORMAT in h5.attrs
        except (OSError, RuntimeError, ValueError):
            is_container = False
        if not is_container:
            raise LodExistsError(f"{path} exists and is not a lodtool container: pass force=True to replace it")
    h5 = open_h5(path, "r")
    try:
        with translate(path, "damaged HDF5 file: cannot read the root attributes"):
            version = spec.check_version(h5.attrs, path)
            spec.check_writable_version(version, path)
            algorithm = spec.text_attr(h5.attrs.get(spec.ATTR_CHECKSUM, b""))
        if algorithm != spec.CHECKSUM_ALGORITHM:
            raise LodFormatError(f"{path}: checksum algorithm {algorithm or 'missing'!r}; this lodtool appends only "
                                 f"to files checksummed with {spec.CHECKSUM_ALGORITHM}")
    finally:
        h5.close()


def _int(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _same_lod(a: LoDTensor, b: LoDTensor) -> bool:
    return a.lod_level == b.lod_level and a.lod_level > 0 and \
        all(x.shape == y.shape and np.array_equal(x, y) for x, y in zip(a.offsets, b.offsets))


def _lod_sources(items: Mapping[str, LoDTensor]) -> dict[str, str]:
    """For each tensor whose LoD equals an earlier one's, that earlier tensor's name (the first of its kind).

    Tensors are grouped by their offsets' digests, and only those of one group are compared, so that a mapping of
    many tensors costs one pass, not a comparison of every pair.

    >>> t = LoDTensor(np.arange(3), [[0, 1, 3]])
    >>> _lod_sources({"a": t, "b": LoDTensor(np.zeros(3), [[0, 1, 3]]), "c": LoDTensor(np.arange(3), [[0, 3]])})
    {'b': 'a'}
    """
    sources: dict[str, str] = {}
    firsts: dict[tuple, list[str]] = {}
    for n, t in items.items():
        if not t.lod_level:
            continue
        key = tuple(xxhash.xxh3_64_intdigest(checksum.little_endian(to_host(o)).view(np.uint8)) for o in t.offsets)
        group = firsts.setdefault(key, [])
        source = next((other for other in group if _same_lod(items[other], t)), None)
        if source is None:
            group.append(n)
        else:
            sources[n] = source
    return sources


def save(path: str | os.PathLike | Any, tensors: LoDTensor | Mapping[str, LoDTensor], *, name: str = "tensor",
         overwrite: bool = False, force: bool = False, compression: str | None = None,
         compression_level: int | None = None, share_lod: bool = True, fletcher32: bool = True,
         tokens: Mapping[str, TokenInfo] | None = None, layout: str | None = None) -> None:
    """Write one tensor (as ``name``) or a mapping of named tensors to a container, atomically.

    ``tokens`` maps tensor names to their token metadata (:class:`~lodtool.tokens.TokenInfo`).

    Into a container that exists, the tensors are added and the file's other
    tensors are kept.  A tensor of the same name is refused with
    :class:`~lodtool.errors.LodExistsError` unless ``overwrite=True`` (it is
    then replaced); ``force=True`` replaces the whole file, and is needed to
    replace a file that is not a lodtool container.  The CLI's ``--name``,
    ``--overwrite`` and ``--force`` follow the same rule.

    ``compression``: ``None`` (the default, ``deflate``: shuffle + deflate level 1,
    encoded on every core), ``"gzip"`` (the same filters, ``compression_level``
    0-9, default 4), ``"lzf"``, ``"none"``, or ``"zstd"``/``"blosc"``/``"lz4"`` (need hdf5plugin,
    to write and to read).  With ``share_lod`` tensors whose offsets are equal
    share one set of offsets datasets (HDF5 hard links).  ``layout``: as for
    :class:`LodWriter` (``"paged"`` for reading from object storage).

    >>> import os, tempfile, numpy as np
    >>> from lodtool import LoDTensor
    >>> from lodtool.container import open_file
    >>> p = os.path.join(tempfile.mkdtemp(), "s.lod.h5")
    >>> tokens = LoDTensor(np.arange(5), [[0, 2, 5]])
    >>> save(p, {"tokens": tokens, "labels": LoDTensor(np.ones(5, "int8"), tokens.lod)})
    >>> with open_file(p) as f:
    ...     f.names, f.shared_lod_with("labels")
    (['tokens', 'labels'], ['tokens'])
    >>> save(p, {"more": tokens})                     # added; tokens and labels stay
    >>> save(p, {"more": tokens}, overwrite=True)     # replaced; without overwrite=True: LodExistsError
    >>> save(p, {"only": tokens}, force=True)         # the whole file replaced
    >>> with open_file(p) as f:
    ...     f.names
    ['only']
    """
    if isinstance(tensors, LoDTensor):
        items = {name: tensors}
    elif isinstance(tensors, Mapping):
        items = dict(tensors)
    else:
        raise LodUsageError(f"save takes a LoDTensor or a mapping of names to LoDTensors, got "
                            f"{type(tensors).__name__}")
    if not items:
        raise LodUsageError("save: no tensors given")
    for n, t in items.items():
        spec.check_tensor_name(n)
        if not isinstance(t, LoDTensor):
            raise LodUsageError(f"save: {n!r} is a {type(t).__name__}, not a LoDTensor")
    sources = _lod_sources(items) if share_lod else {}
    with LodWriter(path, overwrite=overwrite, force=force, compression=compression,
                   compression_level=compression_level, fletcher32=fletcher32, share_lod=share_lod,
                   layout=layout) as w:
        for n, t in items.items():
            tw = w._add(n, dtype=t.dtype, element_shape=t.element_shape, lod_level=t.lod_level,
                        level_names=t.level_names, lod_source=sources.get(n), tokens=(tokens or {}).get(n))
            w._guarded(tw.append, t)


__all__ = ["LodWriter", "TensorWriter", "save", "AUTO", "AUTO_INT", "STORAGE_CHUNK_BYTES", "chunk_rows",
           "narrowest_int", "storage_dtype"]
