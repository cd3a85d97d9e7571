"""Opening HDF5 files, and turning every h5py/OS error into a lodtool error naming the file.

Nothing above this module sees a raw h5py exception: a missing file is
:class:`LodFileNotFoundError`, anything broken, truncated, foreign or not HDF5
at all is :class:`LodFormatError` with the file name and a short reason.
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator

import h5py
import numpy as np

from ..errors import LodError, LodFileNotFoundError, LodFormatError
from ..atomic import is_temp_path

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


def domain_error(exc: BaseException, path: str, what: str) -> LodFormatError:
    """The :class:`LodFormatError` that replaces an h5py exception (for hot paths without a ``with``)."""
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


def open_h5(path: str, mode: str = "r") -> h5py.File:
    """Open an HDF5 file for lodtool, with domain errors for every failure."""
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


def create_h5(path: str, mode: str = "w") -> h5py.File:
    """Create (``"w"``) or reopen for appending (``"r+"``) a file lodtool writes (its own temp file)."""
    kwargs = {"track_order": True} if mode == "w" else {}
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


def hard_member(group: h5py.Group, name: str):
    """``group[name]`` if it is a hard link, else ``None`` (soft and external links are refused).

    External links would make libhdf5 open other files named by an untrusted
    file; lodtool only ever writes hard links.
    """
    link = group.get(name, getlink=True)
    if not isinstance(link, h5py.HardLink):
        return None
    return group[name]


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
        from .limits import human_bytes

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


def read_rows(ds: h5py.Dataset, start: int, stop: int) -> np.ndarray:
    """``ds[start:stop]`` in native byte order, read :data:`MAX_CHUNKS_PER_READ` chunks at a time into one array.

    Memory stays the size of the result whatever the chunk layout: libhdf5's
    per-chunk bookkeeping is bounded by the piece, not by the whole read.

    >>> import h5py, numpy as np, tempfile, os
    >>> f = h5py.File(os.path.join(tempfile.mkdtemp(), "x.h5"), "w")
    >>> ds = f.create_dataset("o", data=np.arange(3000), chunks=(1,))
    >>> bool((read_rows(ds, 10, 2990) == np.arange(10, 2990)).all())
    True
    """
    step = rows_per_read(ds)
    # big-endian data on a little-endian machine is converted by libhdf5 as it is read: kernels need native order
    native = ds.dtype if ds.dtype.isnative else ds.dtype.newbyteorder("=")
    if (step is None or stop - start <= step) and native == ds.dtype:
        return ds[start:stop]
    out = np.empty((stop - start,) + tuple(ds.shape[1:]), dtype=native)
    if step is None or stop - start <= step:
        if stop > start:
            ds.read_direct(out, np.s_[start:stop], np.s_[0:stop - start])
        return out
    first = start - start % int(ds.chunks[0])  # pieces on chunk boundaries: no chunk is decoded twice
    for a in range(first, stop, step):
        lo, hi = max(a, start), min(a + step, stop)
        ds.read_direct(out, np.s_[lo:hi], np.s_[lo - start:hi - start])
    return out


def same_object(a: h5py.HLObject, b: h5py.HLObject) -> bool:
    """Whether two handles are the same HDF5 object (hard links to one dataset)."""
    return a.id == b.id


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
