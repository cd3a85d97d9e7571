"""Opening HDF5 files, and turning every h5py/OS error into a lodtool error naming the file.

Nothing above this module sees a raw h5py exception: a missing file is
:class:`LodFileNotFoundError`, anything broken, truncated, foreign or not HDF5
at all is :class:`LodFormatError` with the file name and a short reason.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import itertools
import os
import weakref
from typing import Iterator

import h5py
import numpy as np

from .. import storage
from ..errors import LodError, LodFileNotFoundError, LodFormatError, LodMemoryError
from ..atomic import is_temp_path
from . import _mmap

#: per-dataset chunk cache: a few ~1 MiB chunks, so streamed writes and nearby reads hit it.  Sized on
#: purpose: a chunk above it is decoded, used and freed on every read (never cached), so it is a claim
#: of the file and must fit in the memory limit (:func:`chunk_layout_problem` refuses absurd ones)
READ_CACHE = 4 << 20
#: no raw-data chunk cache on files lodtool writes: it writes whole chunks (each goes straight to the file), and a
#: dirty cached chunk that cannot be flushed (a full disk) makes libhdf5's H5D_close free the dataset while its id
#: stays valid, so the next release of that id (h5py's close, the garbage collector) crashed with SIGSEGV/SIGBUS.
#: Uncached, a write that runs out of room fails in the write itself and the file closes cleanly after it.
WRITE_CACHE = 0
_CACHE_SLOTS = 1009


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__  # libhdf5's write errors span lines
    # h5py says "Unable to synchronously open file (file signature not found)": keep the useful part
    for prefix in ("Unable to synchronously ", "Unable to "):
        if text.startswith(prefix):
            text = text[len(prefix):]
    return text if len(text) <= 200 else text[:197] + "..."


#: exceptions h5py and libhdf5 raise for broken files (anything else is a bug and propagates)
H5_ERRORS = (OSError, RuntimeError, KeyError, ValueError, TypeError, AttributeError, IndexError, OverflowError)


def domain_error(exc: BaseException, path: str, what: str) -> LodError:
    """The :class:`LodFormatError` that replaces an h5py exception (for hot paths without a ``with``); where the
    read failed in object storage, that failure's own typed error (libhdf5 reports it as a read error of its own)."""
    failed = storage.take_failure(path)
    if failed is not None:
        return failed
    return LodFormatError(f"{path}: {what} ({_reason(exc)})")


@contextlib.contextmanager
def translate(path: str, what: str = "unreadable") -> Iterator[None]:
    """Re-raise h5py/OS errors inside the block as :class:`LodFormatError` ``"PATH: WHAT (reason)"``.

    >>> with translate("x.h5", "cannot read tensor 'a'"):
    ...     raise OSError("Can't read data (filter returned failure)")
    Traceback (most recent call last):
    ...
    lodtool.errors.LodFormatError: x.h5: cannot read tensor 'a' (Can't read data (filter returned failure))
    """
    try:
        yield
    except LodError:
        raise
    except H5_ERRORS as exc:
        raise domain_error(exc, path, what) from None


def check_input_path(path: str) -> None:
    """Refuse a missing path, a folder and an empty file before libhdf5 sees them."""
    if not os.path.exists(path):
        raise LodFileNotFoundError(f"{path}: no such file")
    if os.path.isdir(path):
        raise LodFormatError(f"{path}: is a folder, not a lodtool container")
    try:
        size = os.path.getsize(path)
    except OSError as exc:  # pragma: no cover - raced with a delete
        raise LodFileNotFoundError(f"{path}: {exc.strerror}") from None
    if is_temp_path(path):
        raise LodFormatError(f"{path}: the temp file of an unfinished lodtool write, not a container "
                             "(safe to delete once no lodtool is writing)")
    if size == 0:
        raise LodFormatError(f"{path}: empty file, not a lodtool container")


#: where an HDF5 file's signature may start (after a user block of 512, 1024, 2048 ... bytes)
_SIGNATURE = b"\x89HDF\r\n\x1a\n"
_SIGNATURE_AT = (0, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144, 524288)


def _open_remote(url: str) -> h5py.File:
    """A container in object storage, through libhdf5's file-object driver over :func:`lodtool.storage.open_input`.

    Read-only; never memory-mapped (:mod:`._mmap` maps only local files), so every read goes through libhdf5.
    """
    where = storage.redact(url)
    source = storage.open_input(url)
    if source.size == 0:
        raise LodFormatError(f"{where}: empty object, not a lodtool container")
    storage.take_failure()  # a failure of an earlier read is not this file's
    try:
        h5 = h5py.File(source, "r", rdcc_nbytes=READ_CACHE, rdcc_nslots=_CACHE_SLOTS)
    except H5_ERRORS as exc:
        failed = storage.take_failure(where)
        if failed is not None:
            raise failed from None
        head = source.head(_SIGNATURE_AT[-1] + len(_SIGNATURE))
        if not any(head[at:at + len(_SIGNATURE)] == _SIGNATURE for at in _SIGNATURE_AT):
            raise LodFormatError(f"{where}: not an HDF5 file, so not a lodtool container") from None
        raise LodFormatError(f"{where}: damaged or truncated HDF5 file ({_reason(exc)})") from None
    h5.__dict__["_lodtool_source"] = source  # the object the driver reads, alive as long as the file
    return h5


def remote_source(h5: h5py.File) -> "storage.RemoteFile | None":
    """The object-storage reader of a file opened from a URL (its request count), or ``None`` for a local file."""
    return h5.__dict__.get("_lodtool_source")


def open_h5(path: str, mode: str = "r") -> h5py.File:
    """Open an HDF5 file for lodtool, with domain errors for every failure; a URL opens read-only through fsspec."""
    if storage.is_url(path):
        if mode != "r":
            raise LodFormatError(f"{storage.redact(path)}: a container in object storage is opened read-only")
        return _open_remote(path)
    check_input_path(path)
    cache = READ_CACHE if mode == "r" else WRITE_CACHE
    try:
        return h5py.File(path, mode, locking=False, rdcc_nbytes=cache, rdcc_nslots=_CACHE_SLOTS)
    except FileNotFoundError:  # pragma: no cover - raced with a delete
        raise LodFileNotFoundError(f"{path}: no such file") from None
    except PermissionError as exc:
        raise LodFormatError(f"{path}: cannot open ({exc.strerror or _reason(exc)})") from None
    except (OSError, RuntimeError, ValueError) as exc:
        try:
            hdf5 = h5py.is_hdf5(path)
        except Exception:  # pragma: no cover - unreadable in some other way
            hdf5 = False
        if not hdf5:
            raise LodFormatError(f"{path}: not an HDF5 file, so not a lodtool container") from None
        raise LodFormatError(f"{path}: damaged or truncated HDF5 file ({_reason(exc)})") from None


#: the file layouts a writer can make: ``compact`` (libhdf5's default: metadata where it was written, the smallest
#: file) and ``paged`` (metadata in whole pages of :data:`lodtool.storage.PAGE_SIZE`, the first page first: what a
#: reader in object storage opens in one request, see docs/remote.md)
LAYOUTS = ("compact", "paged")
_LAYOUT: contextvars.ContextVar[str | None] = contextvars.ContextVar("lodtool_layout", default=None)


@contextlib.contextmanager
def write_layout(layout: str | None) -> Iterator[None]:
    """Files created inside the block get ``layout`` (``None``: as outside it); every writer asks :func:`layout_for`.

    >>> with write_layout("paged"):
    ...     layout_for(None, "x.lod.h5")
    'paged'
    >>> layout_for(None, "x.lod.h5"), layout_for(None, "s3://bucket/x.lod.h5")
    ('compact', 'paged')
    """
    if layout is not None and layout not in LAYOUTS:
        from ..errors import LodUsageError

        raise LodUsageError(f"unknown layout {layout!r}: give one of {', '.join(LAYOUTS)}")
    token = _LAYOUT.set(layout if layout is not None else _LAYOUT.get())
    try:
        yield
    finally:
        _LAYOUT.reset(token)


def layout_for(layout: str | None, target: str | None = None) -> str:
    """The layout a new file gets: ``layout`` if given, else :func:`write_layout`'s, else ``paged`` for a target in
    object storage (read there, where it saves requests) and ``compact`` for a local one (a paged file rounds its
    metadata and its raw data up to whole pages: a small file grows by up to two pages)."""
    chosen = layout if layout is not None else _LAYOUT.get()
    if chosen is None:
        return "paged" if target is not None and storage.is_url(target) else "compact"
    if chosen not in LAYOUTS:
        from ..errors import LodUsageError

        raise LodUsageError(f"unknown layout {chosen!r}: give one of {', '.join(LAYOUTS)}")
    return chosen


def file_layout(h5: h5py.File) -> dict:
    """How an open file is laid out: ``{"layout": "paged" | "compact", "page_size": bytes or None}``."""
    plist = h5.id.get_create_plist()
    if plist.get_file_space_strategy()[0] == h5py.h5f.FSPACE_STRATEGY_PAGE:
        return {"layout": "paged", "page_size": int(plist.get_file_space_page_size())}
    return {"layout": "compact", "page_size": None}


def create_h5(path: str, mode: str = "w", layout: str = "compact") -> h5py.File:
    """Create (``"w"``) or reopen for appending (``"r+"``) a file lodtool writes (its own temp file).

    A new file gets ``layout`` (:data:`LAYOUTS`); a reopened one keeps its own.
    """
    kwargs = {"track_order": True} if mode == "w" else {}
    if mode == "w" and layout == "paged":
        kwargs.update(fs_strategy="page", fs_page_size=storage.PAGE_SIZE, fs_persist=False)
    if mode != "w":
        # appending re-reads (and re-hashes) the stored data, whatever filter wrote it
        _register_plugin_filters()
    try:
        return h5py.File(path, mode, locking=False, rdcc_nbytes=WRITE_CACHE, rdcc_nslots=_CACHE_SLOTS, **kwargs)
    except (OSError, RuntimeError, ValueError) as exc:
        raise LodFormatError(f"{path}: cannot open for writing ({_reason(exc)})") from None


def _register_plugin_filters() -> None:
    from .filters import register_own_plugins  # zstd/blosc/lz4 only: never hdf5plugin's other codecs

    register_own_plugins()


class _MemberDataset(h5py.Dataset):
    """A dataset handle that asks libhdf5 for its chunk shape and dtype once: neither changes after creation, and
    h5py asks again on every access (a layout check reads them a dozen times per dataset)."""

    chunks = functools.cached_property(h5py.Dataset.chunks.fget)
    dtype = functools.cached_property(h5py.Dataset.dtype.fget)


def member_links(group: h5py.Group) -> dict[bytes, int]:
    """The link type (``h5py.h5l.TYPE_HARD``, ...) of every member of ``group``, by raw name, in one libhdf5 call.

    >>> import os, tempfile
    >>> with h5py.File(os.path.join(tempfile.mkdtemp(), "x.h5"), "w") as h5:
    ...     h5["a"], h5["b"] = 1, h5py.SoftLink("/a")
    ...     member_links(h5) == {b"a": h5py.h5l.TYPE_HARD, b"b": h5py.h5l.TYPE_SOFT}
    True
    """
    found: dict[bytes, int] = {}
    group.id.links.iterate(lambda name, info: found.__setitem__(name, info.type), info=True)
    return found


def hard_member(group: h5py.Group, name: str, links: dict[bytes, int] | None = None):
    """``group[name]`` if it is a hard link, else ``None`` (soft and external links are refused); ``name`` is one
    member's name, never a path.  ``links``: the group's :func:`member_links` where already listed.

    External links would make libhdf5 open other files named by an untrusted
    file; lodtool only ever writes hard links.
    """
    key = name.encode()
    gid = group.id
    # through the low-level API: h5py's group.get(..., getlink=True) and group[name] cost ~10 libhdf5 calls and a
    # File object each, which a file of tens of thousands of tensors paid several times per tensor
    if "/" in name:
        return None
    if links is None:
        if not gid.links.exists(key) or gid.links.get_info(key).type != h5py.h5l.TYPE_HARD:
            return None
    elif links.get(key) != h5py.h5l.TYPE_HARD:
        return None
    oid = h5py.h5o.open(gid, key)
    readonly = group.__dict__.get("_lodtool_readonly")  # a member's file is its group's: asked once per walk
    if readonly is None:
        readonly = h5py.h5i.get_file_id(oid).get_intent() == h5py.h5f.ACC_RDONLY
    if isinstance(oid, h5py.h5d.DatasetID):  # read-only handles cache their shape, as h5py's own do
        return _MemberDataset(oid, readonly=readonly)
    if isinstance(oid, h5py.h5g.GroupID):
        member = h5py.Group(oid)
        member.__dict__["_lodtool_readonly"] = readonly
        return member
    return h5py.Datatype(oid)


def foreign_storage(ds: h5py.Dataset) -> str | None:
    """Why ``ds`` keeps its values outside this file, or ``None``: external raw storage, or a virtual dataset.

    Both make libhdf5 read other local files named by the untrusted file
    (``/etc/shadow``, a FIFO, ``/dev/zero``), so both are refused from the
    dataset's creation properties alone, before a single value is read.
    lodtool never writes either.
    """
    plist = ds.id.get_create_plist()
    if plist.get_layout() == h5py.h5d.VIRTUAL:
        return "is a virtual dataset (its values live in other files); lodtool refuses virtual datasets"
    if plist.get_external_count():
        return ("keeps its raw bytes in another file (external storage); lodtool refuses external storage, "
                "which would read local files the container names")
    return None


#: a read touches at most this many chunks: libhdf5 keeps several KiB of bookkeeping per chunk it reads
#: in one call (131,073 one-entry chunks read at once took 820 MB), so longer reads go in pieces
MAX_CHUNKS_PER_READ = 1024
#: a chunk larger than this must not be much larger than its whole dataset: a chunk decodes in full,
#: so a huge chunk declared for a few values is a decompression bomb (lodtool writes chunks of <= 64 KiB)
CHUNK_SLACK_BYTES = 8 << 20
#: how much larger than its dataset's values such a chunk may be (room for a dataset still growing)
CHUNK_SLACK_RATIO = 4


def chunk_nbytes(ds: h5py.Dataset) -> int:
    """Bytes one chunk of ``ds`` decodes to (0 for a contiguous dataset)."""
    if not ds.chunks:
        return 0
    count = 1
    for c in ds.chunks:
        count *= int(c)
    return count * ds.dtype.itemsize


def _chunks_per_band(ds: h5py.Dataset) -> int:
    """How many chunks one band of ``chunks[0]`` rows spans (the element dimensions may be chunked too)."""
    band = 1
    for n, c in zip(ds.shape[1:], ds.chunks[1:]):
        band *= max(-(-int(n) // int(c)), 1)
    return band


def chunk_layout_problem(ds: h5py.Dataset) -> str | None:
    """Why ``ds``'s chunk layout is absurd (a chunk bomb, or a row spread over too many chunks), or ``None``.

    Chunk shapes are metadata: this reads no values.

    >>> import h5py, numpy as np, tempfile, os
    >>> f = h5py.File(os.path.join(tempfile.mkdtemp(), "x.h5"), "w")
    >>> ds = f.create_dataset("o", shape=(5,), maxshape=(None,), chunks=(1 << 26,), dtype="<i8")
    >>> chunk_layout_problem(ds)
    'holds 5 values of 8 bytes in chunks of 67,108,864 (512.0 MiB each): a chunk far larger than its dataset'
    >>> chunk_layout_problem(f.create_dataset("p", shape=(5,), maxshape=(None,), chunks=(8,), dtype="<i8"))
    """
    if not ds.chunks:
        return None
    nbytes = chunk_nbytes(ds)
    if nbytes > CHUNK_SLACK_BYTES and nbytes > CHUNK_SLACK_RATIO * ds.size * ds.dtype.itemsize:
        from ..limits import human_bytes

        shape = "x".join(f"{int(c):,}" for c in ds.chunks)
        return (f"holds {ds.size:,} values of {ds.dtype.itemsize} bytes in chunks of {shape} "
                f"({human_bytes(nbytes)} each): a chunk far larger than its dataset")
    band = _chunks_per_band(ds)
    if band > MAX_CHUNKS_PER_READ:
        return (f"has shape {ds.shape} in chunks of {ds.chunks}: one row spans {band:,} chunks "
                f"(at most {MAX_CHUNKS_PER_READ:,} are read at a time)")
    return None


def rows_per_read(ds: h5py.Dataset) -> int | None:
    """The most rows of ``ds`` one read may touch (whole chunks, :data:`MAX_CHUNKS_PER_READ` at most); ``None``: any."""
    if not ds.chunks:
        return None
    return max(MAX_CHUNKS_PER_READ // _chunks_per_band(ds), 1) * int(ds.chunks[0])


#: each live dataset handle's (chunks, dtype, native dtype, rows per read), by ``id()``: h5py asks libhdf5
#: again on every ``ds.chunks`` / ``ds.dtype`` (3 and 1.5 us), which a branch read did a dozen times (40% of
#: its time).  An entry goes when its handle does (``weakref.finalize``), before the id can be reused.
_LAYOUTS: dict[int, tuple] = {}


def _layout(ds: h5py.Dataset) -> tuple:
    layout = _LAYOUTS.get(id(ds))
    if layout is not None:
        return layout
    dtype = ds.dtype
    # big-endian data on a little-endian machine is converted by libhdf5 as it is read: kernels need native order
    native = dtype if dtype.isnative else dtype.newbyteorder("=")
    layout = (ds.chunks, dtype, native, rows_per_read(ds))
    try:
        weakref.finalize(ds, _LAYOUTS.pop, id(ds), None)
    except TypeError:  # pragma: no cover - an object that cannot be weakly referenced: not cached
        return layout
    _LAYOUTS[id(ds)] = layout
    return layout


def read_rows(ds: h5py.Dataset, start: int, stop: int, limit: int | None = None) -> np.ndarray:
    """``ds[start:stop]`` in native byte order: from a memory map of the file where the rows are plain bytes
    (:mod:`._mmap`; a run of rows is then a read-only view), else read :data:`MAX_CHUNKS_PER_READ` chunks at a
    time into one array.

    Memory stays the size of the result whatever the chunk layout: libhdf5's
    per-chunk bookkeeping is bounded by the piece, not by the whole read, and
    every chunk a piece touches is checked first (:func:`check_inflation`):
    none may decode to more than ``limit`` bytes (``None``: the default limit).

    >>> import h5py, numpy as np, tempfile, os
    >>> f = h5py.File(os.path.join(tempfile.mkdtemp(), "x.h5"), "w")
    >>> ds = f.create_dataset("o", data=np.arange(3000), chunks=(1,))
    >>> bool((read_rows(ds, 10, 2990) == np.arange(10, 2990)).all())
    True
    """
    mapped = _mmap.mapping(ds) if stop > start else None
    if mapped is not None:
        rows = mapped.rows(start, stop)
        if rows is not None:
            return rows
    out = _read_by_libhdf5(ds, start, stop, limit)
    if mapped is not None:
        mapped.checked_by_libhdf5(start, stop)
    return out


def _read_by_libhdf5(ds: h5py.Dataset, start: int, stop: int, limit: int | None) -> np.ndarray:
    chunks, dtype, native, step = _layout(ds)
    if stop > start and chunks:
        check_inflation(ds, start, stop, limit)
    shape = ds.shape
    out = np.empty((stop - start,) + tuple(shape[1:]), dtype=native)
    if stop <= start or not out.size:
        return out
    if step is None or chunks is None:
        step = stop - start
    first = start - start % int(chunks[0]) if chunks else start  # pieces on chunk boundaries: no chunk decoded twice
    for a in range(first, stop, step):
        lo, hi = max(a, start), min(a + step, stop)
        _read_hyperslab(ds, out, shape, lo, hi, lo - start)
    return out


def _read_hyperslab(ds: h5py.Dataset, out: np.ndarray, shape: tuple, lo: int, hi: int, at: int) -> None:
    """Rows ``lo..hi`` of ``ds`` into ``out[at:]``: what h5py's ``read_direct`` does, without building its
    selection objects (half the time of a short read)."""
    rest = tuple(shape[1:])
    fspace = ds.id.get_space()
    if lo or hi != shape[0]:
        fspace.select_hyperslab((lo,) + (0,) * len(rest), (hi - lo,) + rest)
    mspace = h5py.h5s.create_simple(out.shape)
    if at or hi - lo != out.shape[0]:
        mspace.select_hyperslab((at,) + (0,) * len(rest), (hi - lo,) + rest)
    ds.id.read(mspace, fspace, out)


# -- how far a stored chunk can inflate ------------------------------------------------------------------------------
# libhdf5's deflate filter and h5py's lzf filter grow their output buffer to whatever the stream holds, and the
# zstd, blosc, lz4 and szip decoders allocate the decoded size their own header declares: a chunk declared as
# 8 KiB can decode to 256 MiB.  So before libhdf5 decodes a chunk, its stored size (metadata) bounds what it can
# become; where that bound is above the memory limit, the chunk is decoded here in bounded pieces, or its header
# read, and refused if it decodes past its declared size.

_DEFLATE, _SHUFFLE, _FLETCHER32, _SZIP, _NBIT, _SCALEOFFSET, _LZF = 1, 2, 3, 4, 5, 6, 32000
_ZSTD, _BLOSC, _LZ4 = 32015, 32001, 32004
#: the most bytes one stored byte can decode to, for the codecs that decode into a growing buffer: deflate
#: (zlib's limit, a 258-byte match per ~2 bits: 1032:1) and lzf (a 3-byte back-reference copies at most 264 bytes)
INFLATE_RATIO = {_DEFLATE: 1032, _LZF: 88}
#: a growing buffer is reallocated: while it grows, the old and the new one are both held (measured: a 256 MiB
#: inflate peaked at 512 MiB more than the process held before)
_GROWTH_PEAK = 2
#: codecs whose decoder allocates the size its own header declares (so that size is read, never assumed)
HEADER_CODECS = frozenset({_SZIP, _ZSTD, _BLOSC, _LZ4})
_CODEC_NAMES = {_DEFLATE: "deflate", _LZF: "lzf", _SZIP: "szip", _ZSTD: "zstd", _BLOSC: "blosc", _LZ4: "lz4",
                _NBIT: "nbit", _SCALEOFFSET: "scaleoffset"}
#: filters whose output is no larger than their input (shuffle, fletcher32) or sized by the dataset's own
#: parameters, checked against the chunk once (nbit, scaleoffset)
_SIZE_KEEPING = frozenset({_SHUFFLE, _FLETCHER32})
_PARAMETER_SIZED = frozenset({_NBIT, _SCALEOFFSET})
#: inflating a chunk to check it goes in pieces of this size (never more in memory)
_INFLATE_PIECE = 1 << 20
#: the chunks whose bound a dataset handle remembers (a whole-dataset stream starts over past it: memory stays flat)
_REMEMBERED_CHUNKS = 1 << 16
#: a read touching this many chunks, or a handle that has looked this many up one by one, bounds them all with one
#: pass over the chunk index instead
_SCAN_FROM_CHUNKS = 64


def honest_stored_size(declared: int) -> int:
    """The most bytes an honest writer stores a chunk of ``declared`` bytes in.

    Every codec's worst case on incompressible data (deflate: 0.1% + 12 bytes,
    zstd, lz4 and blosc: a header and a fraction of a percent) plus fletcher32's
    4 bytes fits; a codec that would expand a chunk further is an optional
    filter in HDF5, and the chunk is then stored unfiltered.

    >>> honest_stored_size(65536)
    70656
    """
    return declared + declared // 16 + 1024


class _Inflation:
    """What decoding the chunks of one dataset may take; the bounds proven so far, per chunk."""

    def __init__(self, ds: h5py.Dataset):
        self.declared = chunk_nbytes(ds)
        self.chunk_rows = int(ds.chunks[0])
        # the chunk offsets of one band of rows, past the first dimension (a 1-D dataset: just the row's)
        self.band = list(itertools.product(*(range(0, int(n), int(c)) for n, c in zip(ds.shape[1:], ds.chunks[1:]))))
        plist = ds.id.get_create_plist()
        self.pipeline = [plist.get_filter(i)[:3] for i in range(plist.get_nfilters())]  # (code, flags, cd_values)
        self.codes = [int(code) for code, _, _ in self.pipeline]
        self.guarded = all(c in INFLATE_RATIO or c in HEADER_CODECS or c in _SIZE_KEEPING or c in _PARAMETER_SIZED
                           for c in self.codes)  # an opted-in plugin codec is the user's call (decoded isolated)
        self.problem = self._parameter_problem()
        ratio = 1
        for code in self.codes:
            ratio *= INFLATE_RATIO.get(code, 1)
        header = any(c in HEADER_CODECS for c in self.codes)
        # below this limit chunks need a look; at or above it none can exceed it (a chunk is no larger than its file)
        if not self.guarded or not any(c in INFLATE_RATIO or c in HEADER_CODECS for c in self.codes):
            self.needs_look_below = 0
        elif header:
            self.needs_look_below = None  # always: the header says what the decoder will allocate
        else:
            self.needs_look_below = _GROWTH_PEAK * ratio * _stored_bytes_bound(ds)
        self.ratio = None if header else _GROWTH_PEAK * ratio
        # a header codec decoded first (after fletcher32's check) can be bounded from the chunk's first bytes alone
        outer = len(self.codes) - 1 - (self.codes[-1:] == [_FLETCHER32])
        self.header_at = outer if header and outer >= 0 and self.codes[outer] in HEADER_CODECS and all(
            c in _SIZE_KEEPING or c in _PARAMETER_SIZED for c in self.codes[:outer]) else None
        self.scanned_bound: int | None = None  # from one pass over the chunk index: the bound of every chunk
        self.scanned = False
        self.bounds: dict[tuple, int] = {}  # chunk offset -> most bytes its decoding takes (proven)
        self.verified: set[tuple] = set()  # chunks decoded or read here: their bound is the declared size
        self.default_limit: int | None = None

    def scan(self, ds: h5py.Dataset) -> None:
        """Bound every chunk at once from the chunk index (about 1 µs a chunk, where a lookup by offset takes 5-20).

        For deflate and lzf only the largest stored chunk matters; a header
        codec's header is read from the file at each chunk's address (checked
        once against libhdf5's own read of a chunk).  A chunk stored in more
        than an honest size, or whose header declares more than the chunk,
        leaves no bound: chunks are then looked at as they are read, and that
        one refused.
        """
        self.scanned = True
        if self.ratio is None and self.header_at is None:
            return
        honest, declared, codec, bit = honest_stored_size(self.declared), self.declared, None, 0
        fd = None
        if self.header_at is not None:
            codec, bit = self.codes[self.header_at], 1 << self.header_at
            try:
                fd = ds.file.id.get_vfd_handle()
            except H5_ERRORS:
                return
        state = {"largest": 0, "bounded": True, "addresses_checked": False}

        def visit(info) -> None:
            stored = int(info.size)
            if not state["bounded"]:
                return
            if stored > honest:
                state["bounded"] = False
                return
            state["largest"] = max(state["largest"], stored)
            if codec is None or info.filter_mask & bit or not stored:
                return
            head = os.pread(fd, 32, info.byte_offset)
            if not state["addresses_checked"]:  # the index's addresses are where libhdf5 reads (no user block)
                state["addresses_checked"] = True
                if ds.id.read_direct_chunk(info.chunk_offset)[1][:32] != head[:min(32, stored)]:
                    state["bounded"] = False
                    return
            size = _header_size(codec, head[:stored])
            if size is None or size > declared:
                state["bounded"] = False

        try:
            ds.id.chunk_iter(visit)
        except (AttributeError, OSError, *H5_ERRORS):  # an HDF5 without H5Dchunk_iter: chunks looked at one by one
            return
        if state["bounded"]:
            self.scanned_bound = (self.ratio * state["largest"] if self.ratio is not None
                                  else max(state["largest"], declared))

    def _parameter_problem(self) -> str | None:
        for code, _, values in self.pipeline:
            # cd_values[2] elements of cd_values[4] bytes is what the nbit and scaleoffset decoders allocate
            if code in _PARAMETER_SIZED and (len(values) < 5 or int(values[2]) * int(values[4]) > self.declared):
                return (f"{_CODEC_NAMES[code]} parameters {tuple(int(v) for v in values[:5])} claim more than its "
                        f"chunks of {self.declared:,} bytes")
            if code == _LZF and len(values) >= 3 and int(values[2]) > honest_stored_size(self.declared):
                return f"lzf parameters claim chunks of {int(values[2]):,} bytes, not {self.declared:,}"
        return None


def file_identity(h5file: h5py.File) -> tuple[int, int, int, int] | None:
    """``(device, inode, size, modification time in ns)`` of the local file an open HDF5 handle reads, from its
    descriptor (the file it reads, even where its path has been replaced since), or ``None`` for another driver
    (object storage, memory).  The key under which what was learnt of a file holds while it is unchanged.

    >>> import os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "a.h5")
    >>> with h5py.File(p, "w") as f:
    ...     file_identity(f)[1] == os.stat(p).st_ino
    True
    """
    try:
        fid = h5file.id
        if fid.get_access_plist().get_driver() != h5py.h5fd.SEC2:
            return None
        stat = os.fstat(fid.get_vfd_handle())
    except H5_ERRORS:
        return None
    return stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns


def _file_size(ds: h5py.Dataset) -> int:
    try:  # the file's descriptor from the dataset's id: ds.file would build an h5py File object
        return os.fstat(h5py.h5i.get_file_id(ds.id).get_vfd_handle()).st_size
    except H5_ERRORS:  # a driver without a file descriptor: the file's size is unknown (every chunk is looked at)
        return 1 << 62


def _stored_bytes_bound(ds: h5py.Dataset) -> int:
    """Bytes no stored chunk of ``ds`` exceeds: the bytes all its chunks take, for a dataset of a few chunks (its
    short index summed in one call: an offsets dataset of a small tensor then needs no chunk looked up), else the
    file's size."""
    expected = 1
    for n, c in zip(ds.shape, ds.chunks):
        expected *= -(-int(n) // int(c))
    if expected <= _SCAN_FROM_CHUNKS:
        try:
            return int(ds.id.get_storage_size())
        except H5_ERRORS:  # a damaged index: each chunk is looked at as it is read
            pass
    return _file_size(ds)


def _inflation(ds: h5py.Dataset) -> _Inflation:
    info = ds.__dict__["_lodtool_inflation"] = _Inflation(ds)
    return info


def check_inflation(ds: h5py.Dataset, start: int, stop: int, limit: int | None = None) -> None:
    """Refuse, before libhdf5 decodes them, chunks of rows ``start..stop`` that could decode past ``limit`` bytes.

    A chunk stored in far more bytes than it holds decoded is refused as
    damaged or crafted.  A chunk whose stored size times its codec's largest
    ratio (deflate 1032:1, lzf 88:1) fits in the limit needs nothing more: for
    a file whose whole size times that ratio fits (or a dataset of a few chunks whose stored bytes do), no chunk
    is looked at at all.
    Any other chunk is inflated here in 1 MiB pieces (deflate), parsed (lzf),
    or its header read (zstd, blosc, lz4, szip), and refused if it decodes past
    its declared size.  Each chunk is checked once per dataset handle.

    >>> import h5py, numpy as np, tempfile, os, zlib
    >>> f = h5py.File(os.path.join(tempfile.mkdtemp(), "x.h5"), "w")
    >>> ds = f.create_dataset("o", shape=(1024,), chunks=(1024,), dtype="<i8", compression="gzip")
    >>> ds.id.write_direct_chunk((0,), zlib.compress(bytes(8 << 20)))  # 8 KiB declared, 8 MiB inside
    >>> check_inflation(ds, 0, 10, limit=1 << 20)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    lodtool.errors.LodFormatError: ...x.h5: dataset /o, chunk at rows 0..1,023: inflates past its declared 8.0 KiB ...
    """
    info = ds.__dict__.get("_lodtool_inflation") or _inflation(ds)  # kept on the handle: a dict lookup per read
    if not info.guarded:
        return
    if limit is None:
        if info.default_limit is None:
            from ..limits import default_max_memory

            info.default_limit = default_max_memory()
        limit = info.default_limit
    limit = max(limit, READ_CACHE)  # as for chunk shapes: a chunk up to the chunk cache is its fixed cost, not a claim
    if info.problem is not None:
        raise LodFormatError(f"{ds.file.filename}: dataset {ds.name}: {info.problem}")
    if info.needs_look_below is not None and limit >= info.needs_look_below:
        return
    bounds, rows = info.bounds, info.chunk_rows
    first = start - start % rows
    if not info.scanned and ((stop - first) // rows * len(info.band) >= _SCAN_FROM_CHUNKS
                             or len(bounds) >= _SCAN_FROM_CHUNKS):
        # a long read (a stream), or many short ones (random branches, batches): one pass over the index is cheaper
        # than a lookup per chunk
        info.scan(ds)
    if info.scanned_bound is not None and limit >= info.scanned_bound:
        return
    if len(bounds) > _REMEMBERED_CHUNKS:
        bounds.clear()
        info.verified.clear()
    for r in range(first, stop, rows):
        for rest in info.band:
            offset = (r,) + rest
            bound = bounds.get(offset)
            if bound is None or (bound > limit and offset not in info.verified):
                bound = bounds[offset] = _chunk_bound(ds, info, offset, limit)
            if bound > limit:
                from ..limits import check_memory

                check_memory(bound, limit, ds.file.filename, f"dataset {ds.name}, {_rows_of(ds, offset)}")


def oversized_chunk(ds: h5py.Dataset) -> str | None:
    """Why a chunk of ``ds`` is stored in far more bytes than it holds decoded (the first such chunk), or ``None``.

    Stored sizes are metadata (the chunk index): ``validate`` reports such a
    chunk without decoding it, as every reader refuses it before decoding.

    >>> import h5py, numpy as np, tempfile, os, zlib
    >>> f = h5py.File(os.path.join(tempfile.mkdtemp(), "x.h5"), "w")
    >>> ds = f.create_dataset("o", shape=(1024,), chunks=(1024,), dtype="<i8", compression="gzip")
    >>> ds.id.write_direct_chunk((0,), zlib.compress(bytes(64 << 20), 1))
    >>> oversized_chunk(ds)  # doctest: +ELLIPSIS
    'chunk at rows 0..1,023 is stored in ... bytes, far more than the 8,192 it holds decoded (a decompression bomb)'
    """
    if not ds.chunks or not ds.id.get_create_plist().get_nfilters():  # unfiltered: stored as declared
        return None
    declared = chunk_nbytes(ds)
    honest = honest_stored_size(declared)
    found: list = []

    def visit(info) -> None:
        if not found and int(info.size) > honest:
            found.append((tuple(info.chunk_offset), int(info.size)))

    try:
        ds.id.chunk_iter(visit)
    except AttributeError:  # pragma: no cover - an HDF5 without H5Dchunk_iter: the readers still refuse it
        return None
    if not found:
        return None
    offset, stored = found[0]
    return (f"{_rows_of(ds, offset)} is stored in {stored:,} bytes, far more than the {declared:,} it holds "
            "decoded (a decompression bomb)")


def _rows_of(ds: h5py.Dataset, offset: tuple) -> str:
    last = min(offset[0] + int(ds.chunks[0]), int(ds.shape[0])) - 1
    return f"chunk at rows {offset[0]:,}..{last:,}"


def _chunk_bound(ds: h5py.Dataset, info: _Inflation, offset: tuple, limit: int) -> int:
    """The most bytes decoding the chunk at ``offset`` takes, proven from its stored size, or by decoding it here."""
    from ..limits import human_bytes

    stored_info = ds.id.get_chunk_info_by_coord(offset)
    if stored_info.byte_offset is None or not stored_info.size:
        return 0  # not stored: read as fill values (storage_gap refuses datasets missing chunks)
    stored, mask = int(stored_info.size), int(stored_info.filter_mask)
    if stored > honest_stored_size(info.declared):
        where = f"{ds.file.filename}: dataset {ds.name}, {_rows_of(ds, offset)}"
        raise LodFormatError(f"{where}: stored in {stored:,} bytes, far more than the {info.declared:,} it holds "
                             "decoded (a decompression bomb); refused before decoding")
    active = [code for i, code in enumerate(info.codes) if not mask & (1 << i)]  # a set bit: that filter skipped
    size = peak = stored
    for code in reversed(active):  # the decoding order
        if code in HEADER_CODECS:
            size = None
            break
        if code in _PARAMETER_SIZED:
            size = info.declared
        elif code in INFLATE_RATIO:
            size *= INFLATE_RATIO[code]
            peak = max(peak, _GROWTH_PEAK * size)
        peak = max(peak, size)
    if size is not None and peak <= limit:
        return peak
    decoded = _decoded_size(ds, offset, active, info.declared)
    if decoded is not None and decoded <= info.declared:
        info.verified.add(offset)
        return max(stored, info.declared)
    where = f"{ds.file.filename}: dataset {ds.name}, {_rows_of(ds, offset)}"
    if decoded is None:
        codecs = "+".join(_CODEC_NAMES.get(c, str(c)) for c in active if c not in _SIZE_KEEPING) or "none"
        raise LodMemoryError(f"{where}: its {codecs} pipeline cannot be checked before decoding, and its stored "
                             f"size ({stored:,} bytes) could inflate past the memory limit of {human_bytes(limit)} "
                             "(raise it with max_memory=...)")
    first = next(c for c in reversed(active) if c not in _SIZE_KEEPING)
    how = (f"its {_CODEC_NAMES[first]} header declares {decoded:,} bytes" if first in HEADER_CODECS
           else f"from {stored:,} bytes stored")
    raise LodFormatError(f"{where}: inflates past its declared {human_bytes(info.declared)} ({how}: a "
                         "decompression bomb); refused before decoding")


def _decoded_size(ds: h5py.Dataset, offset: tuple, active: list[int], declared: int) -> int | None:
    """The size the first codec in decoding order makes of the raw chunk (above ``declared``: more than that, maybe
    not all of it counted; ``None``: not checkable here).  Memory: the stored chunk and one 1 MiB piece."""
    order = list(reversed(active))
    strip = 0
    if order and order[0] == _FLETCHER32:  # its 4-byte checksum trails the stored chunk
        order.pop(0)
        strip = 4
    if not order or any(c not in _SIZE_KEEPING and c not in _PARAMETER_SIZED for c in order[1:]):
        return None  # nothing to decode, or two codecs in a row (the second one's input is not at hand)
    _, raw = ds.id.read_direct_chunk(offset)
    raw = memoryview(raw)[:len(raw) - strip] if strip else memoryview(raw)
    codec = order[0]
    if codec == _DEFLATE:
        return _inflated_size(raw, declared)
    if codec == _LZF:
        return _lzf_size(bytes(raw), declared)
    if codec in HEADER_CODECS:
        return _header_size(codec, bytes(raw[:32]))
    return None


def _inflated_size(raw, declared: int) -> int:
    import zlib

    inflater = zlib.decompressobj()
    total = 0
    data = raw
    try:
        while not inflater.eof:
            piece = inflater.decompress(data, _INFLATE_PIECE)  # with no input left, what zlib still holds
            total += len(piece)
            if total > declared:
                return declared + 1
            data = inflater.unconsumed_tail
            if not piece and not data:  # a truncated stream: libhdf5 fails on it too
                break
    except zlib.error:  # damaged: libhdf5 fails on it too, after no more than was counted here
        pass
    return total


def _lzf_size(raw: bytes, declared: int) -> int:
    """The length an lzf stream decodes to, from its control bytes alone."""
    total, i, n = 0, 0, len(raw)
    while i < n:
        ctrl = raw[i]
        i += 1
        if ctrl < 32:  # a literal run of ctrl + 1 bytes
            total += ctrl + 1
            i += ctrl + 1
        else:  # a back-reference: length in the top 3 bits (7: one more length byte), then an offset byte
            length = ctrl >> 5
            if length == 7:
                length += raw[i] if i < n else 0
                i += 1
            total += length + 2
            i += 1
        if total > declared:
            return declared + 1
    return total


def _header_size(codec: int, head: bytes) -> int | None:
    """The decoded size a zstd, blosc, lz4 or szip chunk's own header declares (what its decoder allocates)."""
    if codec == _SZIP:
        return int.from_bytes(head[:4], "little") if len(head) >= 4 else None
    if codec == _BLOSC:
        return int.from_bytes(head[4:8], "little") if len(head) >= 16 else None
    if codec == _LZ4:
        return int.from_bytes(head[:8], "big") if len(head) >= 12 else None
    if codec == _ZSTD:
        return _zstd_content_size(head)
    return None  # pragma: no cover - HEADER_CODECS is the four above


def _zstd_content_size(head: bytes) -> int | None:
    """A zstd frame's declared content size (0 where it declares none: the decoder then allocates nothing)."""
    if len(head) < 6 or int.from_bytes(head[:4], "little") != 0xFD2FB528:
        return None
    descriptor = head[4]
    fcs_flag, single_segment, dict_flag = descriptor >> 6, (descriptor >> 5) & 1, descriptor & 3
    pos = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[dict_flag]
    width = (1 if single_segment else 0, 2, 4, 8)[fcs_flag]
    if width == 0:
        return 0
    if len(head) < pos + width:
        return None
    value = int.from_bytes(head[pos:pos + width], "little")
    return value + 256 if width == 2 else value


def same_object(a: h5py.HLObject, b: h5py.HLObject) -> bool:
    """Whether two handles are the same HDF5 object (hard links to one dataset)."""
    return a.id == b.id


def object_key(obj: h5py.HLObject) -> tuple[int, int]:
    """What names the HDF5 object behind a handle (hard links to one dataset share it), without holding it open."""
    info = h5py.h5o.get_info(obj.id)
    return int(info.fileno), int(info.addr)


def storage_gap(ds: h5py.Dataset) -> str | None:
    """Why ``ds`` cannot hold the values its shape claims, or ``None`` if every chunk is stored.

    lodtool writes every chunk of every dataset; a shape whose chunks are mostly
    missing is a crafted or damaged file, and reading it "as zeros" block by
    block would take forever.  Counting the stored chunks is cheap (metadata only).
    """
    if ds.size == 0:
        return None
    if ds.chunks:
        expected = 1
        for n, c in zip(ds.shape, ds.chunks):
            expected *= -(-n // c)
        stored = ds.id.get_num_chunks()
        if stored < expected:
            return f"claims shape {ds.shape} but stores {stored} of its {expected} chunks"
        return None
    if ds.id.get_storage_size() < ds.size * ds.dtype.itemsize:
        return f"claims shape {ds.shape} but stores only {ds.id.get_storage_size()} bytes"
    return None


def link_count(obj: h5py.HLObject) -> int:
    """How many hard links name this object (``> 1``: shared)."""
    return int(h5py.h5o.get_info(obj.id).rc)
