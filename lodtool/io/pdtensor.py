"""Paddle's serialized LoDTensor (``save_dense_tensor``, ``.pdtensor``, ``.pdiparams``) in pure NumPy.

Paddle writes one tensor as (little-endian, no padding; the source of truth is
``paddle/phi/core/framework/lod_tensor_serialize.cc`` and
``paddle/fluid/framework/framework.proto``)::

    u32 version (0) | u64 lod_level | per level: u64 byte size, then that many bytes of size_t offsets
    u32 version (0) | i32 descriptor size | proto2 VarType.TensorDesc (1: data_type varint, 2: dims int64)
    the data, C order

A ``.pdiparams`` file (``save_combine``) is several such tensors back to back,
with no index and no names: the names live in the ``.pdmodel``, which lodtool
does not read.  :func:`read_pdtensors` therefore reads every tensor and names
them ``tensor_0``, ``tensor_1``, ... in file order (Paddle writes them sorted by
variable name), or by the ``names`` you pass.  :func:`read_pdtensor` and
``lodtool pack`` take files that hold exactly one tensor.

Dtypes: bool, int8/16/32/64, uint8/16/32/64, float16/32/64, complex64/128.
Paddle's bfloat16, float8 and size_t tensors have no NumPy dtype and are
refused by name (never reinterpreted).  Paddle 3.3 loads uint16/32/64 tensors
but cannot hand them to NumPy itself.  Nothing Paddle's ``set_lod`` would refuse
is written: the writers check Paddle's rule (:func:`lodtool.lod.check_paddle_lod`,
lodtool's plus one: every level holds at least one sequence), so a tensor with
a level of zero sequences (offsets ``[0]``), valid in lodtool, is refused.  A
file is read with lodtool's rule (:func:`lodtool.lod.validate_lod`; Paddle's
loader checks nothing), so such a level is read.  One difference: Paddle skips
the last-offset check for a tensor with no rows (it accepts ``lod [[0, 3]]``
over 0 rows); lodtool refuses such a file.

A file that ``paddle.save`` wrote (Python's pickle format, which Paddle's
tutorials use) is named as such, never unpickled: re-save the tensor in the
binary format with ``paddle.base.core.save_dense_tensor`` (or save the program
with ``paddle.static.save``), as the error says.

>>> import io
>>> from lodtool import LoDTensor
>>> buf = io.BytesIO()
>>> write_pdtensor(LoDTensor(np.arange(4, dtype=np.int64).reshape(4, 1), [[0, 1, 4]]), buf)
>>> t = read_pdtensor(io.BytesIO(buf.getvalue()))
>>> t.lod, t.shape, str(t.dtype)
([[0, 1, 4]], (4, 1), 'int64')
"""

from __future__ import annotations

import contextlib
import os
import struct
import sys
from dataclasses import dataclass
from typing import Any, BinaryIO, Iterable, Iterator, Sequence

import numpy as np

from ..limits import STREAM_CHUNK_BYTES
from .. import lod as _lod
from ..errors import (LodDtypeError, LodError, LodInputError, LodShapeError, LodUsageError,
                      LodValidationError)
from ..tensor import LoDTensor
from . import offset_blocks, open_seekable

#: Paddle's VarType.Type code -> NumPy dtype (little-endian)
DTYPE_OF_CODE = {
    0: np.dtype("bool"), 1: np.dtype("<i2"), 2: np.dtype("<i4"), 3: np.dtype("<i8"), 4: np.dtype("<f2"),
    5: np.dtype("<f4"), 6: np.dtype("<f8"), 20: np.dtype("u1"), 21: np.dtype("i1"), 23: np.dtype("<c8"),
    24: np.dtype("<c16"), 36: np.dtype("<u2"), 37: np.dtype("<u4"), 38: np.dtype("<u8"),
}
#: codes Paddle knows that have no NumPy dtype: refused by name
UNSUPPORTED_CODES = {19: "SIZE_T", 22: "BF16 (bfloat16)", 32: "FP8_E4M3FN", 33: "FP8_E5M2"}
#: (kind, itemsize) of a NumPy dtype -> Paddle's code (any byte order: the file is little-endian)
CODE_OF_KIND = {(dt.kind, dt.itemsize): code for code, dt in DTYPE_OF_CODE.items()}
#: file extensions of this format
EXTENSIONS = (".pdtensor", ".pdiparams")
#: the version Paddle writes, and the only one it reads
VERSION = 0
_INT64_MAX = np.iinfo(np.int64).max
#: a pickle of protocol 2 or later (``paddle.save`` writes 2 to 4) opens with this byte, then the protocol
PICKLE_PROTO = 0x80
PICKLE_PROTOCOLS = range(2, 6)


@dataclass(frozen=True)
class PdHeader:
    """One tensor's header: where it is in the file and what it holds.

    >>> import io
    >>> buf = io.BytesIO()
    >>> write_pdtensor(LoDTensor(np.zeros((2, 3), np.float32), [[0, 2]]), buf)
    >>> h = scan(buf.getvalue())[0][0]
    >>> h.shape, h.row_bytes, h.data_start, h.end
    ((2, 3), 12, 50, 74)
    """

    start: int  #: byte position of the tensor in the file
    offsets: tuple  #: LoD levels, int64 offsets arrays
    dtype: np.dtype
    shape: tuple  #: ``dims``
    data_start: int  #: byte position of the data
    end: int  #: byte position just after the data

    @property
    def row_bytes(self) -> int:
        return int(np.prod(self.shape[1:], dtype=np.int64)) * self.dtype.itemsize


# -- reading -----------------------------------------------------------------------------------------
def _label(source: Any) -> str:
    if isinstance(source, (str, os.PathLike)):
        return "<stdin>" if os.fspath(source) == "-" else os.fspath(source)
    if isinstance(source, (bytes, bytearray, memoryview)):
        return "<bytes>"
    name = getattr(source, "name", None)
    return name if isinstance(name, str) else "<stream>"


@contextlib.contextmanager
def _scanned(source: Any, one: bool = False) -> Iterator[tuple[BinaryIO, str, list[PdHeader]]]:
    """``source`` opened (seekable), its label and the headers of its tensors (``one``: it must hold one)."""
    f, owned = open_seekable(source)
    label = _label(source)
    try:
        headers = _scan_open(f, label)
        if one and len(headers) != 1:
            raise LodInputError(f"{label}: holds {len(headers)} tensors (a save_combine / .pdiparams file, whose "
                                "names are in the .pdmodel); read them with lodtool.io.pdtensor.read_pdtensors, or "
                                "pack one tensor per file")
        yield f, label, headers
    finally:
        if owned:
            f.close()


class _Cursor:
    """Reads fixed-size fields from a file, naming the byte position of anything missing or wrong."""

    def __init__(self, f: BinaryIO, label: str, size: int, pos: int):
        self.f, self.label, self.size, self.pos = f, label, size, pos

    def error(self, message: str, pos: int | None = None) -> LodInputError:
        return LodInputError(f"{self.label}: byte {self.pos if pos is None else pos}: {message}")

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.size:
            raise self.error(f"truncated: {what} needs {n:,} bytes but only {self.size - self.pos:,} remain")

    def take(self, n: int, what: str) -> bytes:
        self.need(n, what)
        data = self.f.read(n)
        if len(data) != n:  # pragma: no cover - the file shrank while being read
            raise self.error(f"truncated: {what} ends early (the file changed while being read?)")
        self.pos += n
        return data

    def unpack(self, fmt: str, what: str) -> tuple:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))


def _varint(buf: bytes, i: int, cur: _Cursor, base: int) -> tuple[int, int]:
    """A protobuf varint at ``buf[i]`` as a signed int64, and the position after it."""
    value = shift = 0
    while True:
        if i >= len(buf):
            raise cur.error("the tensor descriptor ends inside a varint", base + i)
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            break
        if shift >= 70:
            raise cur.error("the tensor descriptor holds a varint longer than 10 bytes", base + i)
    value &= (1 << 64) - 1
    return (value - (1 << 64) if value >> 63 else value), i


def _parse_desc(buf: bytes, cur: _Cursor, base: int) -> tuple[int, list[int]]:
    """``(data_type, dims)`` of a proto2 ``VarType.TensorDesc`` (unknown fields are skipped)."""
    code: int | None = None
    dims: list[int] = []
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i, cur, base)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(buf, i, cur, base)
            if field == 1:
                code = value
            elif field == 2:
                dims.append(value)
        elif wire == 2:
            n, i = _varint(buf, i, cur, base)
            if n < 0 or i + n > len(buf):
                raise cur.error("the tensor descriptor holds a field longer than itself", base + i)
            if field == 2:  # packed dims (Paddle writes them unpacked; proto2 readers accept both)
                j = i
                while j < i + n:
                    value, j = _varint(buf, j, cur, base)
                    dims.append(value)
            i += n
        elif wire in (1, 5):
            i += 8 if wire == 1 else 4
        else:
            raise cur.error(f"the tensor descriptor has field {field} of wire type {wire}, which is not protobuf",
                            base + i)
    if i > len(buf):
        raise cur.error("the tensor descriptor ends inside a field", base + len(buf))
    if code is None:
        raise cur.error("the tensor descriptor has no data_type (field 1)", base)
    return code, dims


def _read_header(cur: _Cursor, index: int) -> PdHeader:
    start = cur.pos
    (version,) = cur.unpack("<I", f"tensor {index}: the LoD version")
    if version != VERSION:
        head = struct.pack("<I", version)
        if start == 0 and head[0] == PICKLE_PROTO and head[1] in PICKLE_PROTOCOLS:
            raise LodInputError(f"{cur.label}: is a Python pickle (protocol {head[1]}: what paddle.save writes), not "
                                "Paddle's binary tensor format, and lodtool never unpickles; re-save it in Paddle "
                                "with paddle.base.core.save_dense_tensor(paddle.load(path).get_tensor(), "
                                "'x.pdtensor') (a static-graph variable: paddle.save(var, path, "
                                "use_binary_format=True))")
        raise cur.error(f"tensor {index}: LoD version {version}; Paddle writes (and reads) only version 0", start)
    (lod_level,) = cur.unpack("<Q", f"tensor {index}: the LoD level count")
    if lod_level > (cur.size - cur.pos) // 8:
        raise cur.error(f"tensor {index}: truncated or corrupt: lod_level {lod_level:,} needs at least "
                        f"{8 * lod_level:,} more bytes but only {cur.size - cur.pos:,} remain", cur.pos - 8)
    levels = []
    for k in range(lod_level):
        at = cur.pos
        (nbytes,) = cur.unpack("<Q", f"tensor {index}: level {k}'s byte size")
        if nbytes % 8:
            raise cur.error(f"tensor {index}: level {k} has {nbytes:,} bytes of offsets, not a multiple of 8 "
                            "(size_t)", at)
        raw = np.frombuffer(cur.take(nbytes, f"tensor {index}: level {k}'s offsets"), "<u8")
        if raw.size and int(raw.max()) > _INT64_MAX:
            raise cur.error(f"tensor {index}: level {k} holds an offset above 2**63", at + 8)
        levels.append(raw.astype(np.int64))
    at = cur.pos
    (version,) = cur.unpack("<I", f"tensor {index}: the tensor version")
    if version != VERSION:
        raise cur.error(f"tensor {index}: tensor version {version}; Paddle writes (and reads) only version 0", at)
    at = cur.pos
    (desc_size,) = cur.unpack("<i", f"tensor {index}: the descriptor size")
    if desc_size < 0:
        raise cur.error(f"tensor {index}: negative descriptor size {desc_size}", at)
    base = cur.pos
    code, dims = _parse_desc(cur.take(desc_size, f"tensor {index}: the tensor descriptor"), cur, base)
    dtype = _dtype_of(code, cur, index, base)
    if not dims:
        raise cur.error(f"tensor {index}: is 0-dimensional (a scalar); a LoD tensor has at least one dimension "
                        "(its rows)", base)
    if any(d < 0 for d in dims):
        raise cur.error(f"tensor {index}: has negative dims {_dims_text(dims)}", base)
    try:  # NumPy's own limits (64 dims, a size that fits an address), whatever the row count
        np.empty((0, *dims[1:]), dtype)
    except ValueError as exc:
        raise cur.error(f"tensor {index}: NumPy cannot hold an array of dims {_dims_text(dims)} "
                        f"({str(exc).split(';')[0]})", base) from None
    nbytes = dtype.itemsize
    for d in dims:
        nbytes *= d
        if nbytes > cur.size:
            break
    cur.need(nbytes, f"tensor {index}: data of shape {tuple(dims)} {dtype}")
    data_start = cur.pos
    header = PdHeader(start, tuple(levels), dtype, tuple(dims), data_start, data_start + nbytes)
    try:
        _lod.validate_lod(list(levels), dims[0])
    except LodError as exc:
        raise cur.error(f"tensor {index}: invalid LoD: {exc}", start + 12) from None
    return header


def _dims_text(dims: list[int]) -> str:
    """``dims`` for a message: the list, or its length and first few where it is long.

    >>> _dims_text([2, 3]), _dims_text([1] * 100)
    ('[2, 3]', '[1, 1, 1, 1, 1, 1, 1, 1, ...] (100 dims)')
    """
    if len(dims) <= 8:
        return str(list(dims))
    return f"[{', '.join(str(d) for d in dims[:8])}, ...] ({len(dims):,} dims)"


def _dtype_of(code: int, cur: _Cursor, index: int, at: int) -> np.dtype:
    if code in DTYPE_OF_CODE:
        return DTYPE_OF_CODE[code]
    if code in UNSUPPORTED_CODES:
        raise LodDtypeError(f"{cur.label}: byte {at}: tensor {index} holds {UNSUPPORTED_CODES[code]} data, which "
                            "NumPy has no dtype for; convert it in Paddle first (e.g. tensor.astype('float32'))")
    raise cur.error(f"tensor {index}: unknown Paddle data_type {code}", at)


def scan(source: Any) -> tuple[list[PdHeader], str]:
    """The headers of every tensor in ``source`` (offsets read; data skipped), and the source's label.

    >>> import io
    >>> from lodtool import LoDTensor
    >>> buf = io.BytesIO()
    >>> write_pdtensors([LoDTensor(np.zeros(2)), LoDTensor(np.ones(3, np.int32), [[0, 3]])], buf)
    >>> [(h.shape, str(h.dtype), len(h.offsets)) for h in scan(buf.getvalue())[0]]
    [((2,), 'float64', 0), ((3,), 'int32', 1)]
    """
    with _scanned(source) as (_, label, headers):
        return headers, label


def _scan_open(f: BinaryIO, label: str) -> list[PdHeader]:
    start = f.tell()
    size = f.seek(0, os.SEEK_END)
    f.seek(start)
    cur = _Cursor(f, label, size, start)
    headers = []
    while cur.pos < size:
        header = _read_header(cur, len(headers))
        headers.append(header)
        cur.pos = header.end
        f.seek(cur.pos)
    if not headers:
        raise LodInputError(f"{label}: is empty; a Paddle tensor file holds at least one tensor")
    return headers


def _read_rows(f: BinaryIO, label: str, h: PdHeader, begin: int, end: int) -> np.ndarray:
    """Rows ``begin:end`` of a tensor's data, as a fresh aligned array in native byte order."""
    count = (end - begin) * (h.row_bytes // h.dtype.itemsize)
    out = np.empty(count, h.dtype.newbyteorder("="))
    f.seek(h.data_start + begin * h.row_bytes)
    got = f.readinto(memoryview(out).cast("B"))
    if got != out.nbytes:  # pragma: no cover - the file shrank after the scan
        raise LodInputError(f"{label}: byte {h.data_start + begin * h.row_bytes}: data ends early")
    if h.dtype.byteorder == "<" and sys.byteorder != "little":  # pragma: no cover - big-endian hosts
        out = out.byteswap()
    return out.reshape((end - begin,) + tuple(h.shape[1:]))


def read_pdtensors(source: Any, *, names: Sequence[str] | None = None) -> dict[str, LoDTensor]:
    """Every tensor of a Paddle tensor file (a ``.pdiparams`` holds several), by name, in file order.

    The file holds no names: they are ``tensor_0``, ``tensor_1``, ... unless
    ``names`` gives one per tensor (from the model, e.g. its sorted parameter
    names).  The data is copied out of the file (one read per tensor).

    >>> import io
    >>> from lodtool import LoDTensor
    >>> buf = io.BytesIO()
    >>> write_pdtensors([LoDTensor(np.zeros((2, 2), np.float32)), LoDTensor(np.arange(3), [[0, 1, 3]])], buf)
    >>> {k: t.shape for k, t in read_pdtensors(buf.getvalue()).items()}
    {'tensor_0': (2, 2), 'tensor_1': (3,)}
    """
    with _scanned(source) as (f, label, headers):
        if names is None:
            keys = [f"tensor_{i}" for i in range(len(headers))]
        else:
            keys = [str(n) for n in names]
            if len(keys) != len(headers) or len(set(keys)) != len(keys):
                raise LodUsageError(f"{label}: holds {len(headers)} tensor(s), but {len(keys)} name(s) were given"
                                    if len(keys) != len(headers) else f"{label}: the names given repeat a name")
        return {k: LoDTensor._trusted(_read_rows(f, label, h, 0, h.shape[0]), h.offsets)
                for k, h in zip(keys, headers)}


def read_pdtensor(source: Any) -> LoDTensor:
    """The one tensor of a Paddle tensor file (``save_dense_tensor`` output).

    A file with several tensors (a ``.pdiparams``) is refused here: read it
    with :func:`read_pdtensors`.

    >>> import io
    >>> from lodtool import LoDTensor
    >>> buf = io.BytesIO()
    >>> write_pdtensor(LoDTensor(np.array([1.5, 2.5], np.float32), [[0, 2]]), buf)
    >>> read_pdtensor(buf.getvalue()).data.tolist()
    [1.5, 2.5]
    """
    with _scanned(source, one=True) as (f, label, (h,)):
        return LoDTensor._trusted(_read_rows(f, label, h, 0, h.shape[0]), h.offsets)


def top_level_rows(offsets: Sequence[np.ndarray], n_rows: int) -> np.ndarray:
    """Where each top-level sequence starts in the data rows (and the end), composing the levels.

    >>> top_level_rows([np.array([0, 2, 3]), np.array([0, 1, 4, 6])], 6).tolist()
    [0, 4, 6]
    """
    if not offsets:
        return np.arange(n_rows + 1, dtype=np.int64)
    rows = offsets[0]
    for level in offsets[1:]:
        rows = level[rows]
    return rows


def chunk_bounds(rows_at: np.ndarray, chunk_rows: int) -> list[tuple[int, int]]:
    """Ranges of whole top-level sequences of about ``chunk_rows`` rows each (at least one sequence each).

    >>> chunk_bounds(np.array([0, 2, 4, 9, 10]), 4)
    [(0, 2), (2, 3), (3, 4)]
    """
    n = len(rows_at) - 1
    bounds = []
    a = 0
    while a < n:
        b = int(np.searchsorted(rows_at, rows_at[a] + max(chunk_rows, 1), side="right")) - 1
        b = min(max(b, a + 1), n)
        bounds.append((a, b))
        a = b
    return bounds


def iter_pdtensor(sources: Sequence[Any], *, chunk_bytes: int = STREAM_CHUNK_BYTES) -> Iterator[LoDTensor]:
    """Chunks of whole top-level sequences of each source's one tensor, in order (bounded memory).

    Only the offsets and ``chunk_bytes`` of data are held at a time.  The
    tensors of all sources must agree in LoD levels, dtype and element shape.

    >>> import io
    >>> from lodtool import LoDTensor
    >>> buf = io.BytesIO()
    >>> write_pdtensor(LoDTensor(np.arange(6), [[0, 2, 3, 6]]), buf)
    >>> [c.lod for c in iter_pdtensor([io.BytesIO(buf.getvalue())], chunk_bytes=16)]
    [[[0, 2]], [[0, 1]], [[0, 3]]]
    """
    first: tuple | None = None
    first_label = ""
    for source in sources:
        with _scanned(source, one=True) as (f, label, (h,)):
            kind = (len(h.offsets), h.dtype, tuple(h.shape[1:]))
            if first is None:
                first, first_label = kind, label
            elif kind != first:
                raise LodInputError(f"{label}: holds {kind[0]} LoD level(s) of {kind[1]} with element shape {kind[2]}, "
                                    f"but {first_label} holds {first[0]} of {first[1]} with {first[2]}")
            rows_at = top_level_rows(h.offsets, h.shape[0])
            chunk_rows = max(1, chunk_bytes // max(h.row_bytes, 1))
            level_sizes = [len(o) for o in h.offsets]
            if len(rows_at) == 1:  # a level holding no sequence: nothing to chunk
                yield LoDTensor._trusted(_read_rows(f, label, h, 0, 0), h.offsets)
                continue
            for a, b in chunk_bounds(rows_at, chunk_rows):
                offsets, lo, hi = _lod.extract_range(0, a, b, _lod.memory_reader(h.offsets), level_sizes)
                yield LoDTensor._trusted(_read_rows(f, label, h, lo, hi), offsets)


# -- writing -----------------------------------------------------------------------------------------
def _code_of(dtype: np.dtype) -> int:
    dt = np.dtype(dtype)
    code = CODE_OF_KIND.get((dt.kind, dt.itemsize)) if dt.fields is None else None
    if code is None:
        raise LodDtypeError(f"Paddle has no data type for {dt}; supported: bool, int8/16/32/64, uint8/16/32/64, "
                            "float16/32/64, complex64/128")
    return code


def _varint_bytes(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def tensor_desc(dtype: np.dtype, shape: Sequence[int]) -> bytes:
    """The proto2 ``VarType.TensorDesc`` bytes Paddle writes (dims unpacked, as Paddle's C++ does).

    >>> tensor_desc(np.dtype("int64"), (6, 2)).hex()
    '080310061002'
    """
    out = b"\x08" + _varint_bytes(_code_of(dtype))
    for d in shape:
        out += b"\x10" + _varint_bytes(int(d))
    return out


def write_pdtensor_parts(out: BinaryIO, *, shape: Sequence[int], dtype: np.dtype,
                         offsets: Sequence[Iterable[np.ndarray]], level_sizes: Sequence[int],
                         data_blocks: Iterable[np.ndarray]) -> None:
    """Write one tensor from blocks (bounded memory): ``offsets[k]`` yields level ``k``'s offsets in order.

    The offsets are checked with Paddle's rule as they are written, and the
    data's row count against ``shape``: a :class:`~lodtool.errors.LodValidationError`
    or :class:`~lodtool.errors.LodShapeError` leaves a partial stream, so write
    to a temporary file (``unpack`` does).

    >>> import io
    >>> buf = io.BytesIO()
    >>> write_pdtensor_parts(buf, shape=(3,), dtype=np.dtype("int32"), offsets=[[np.array([0, 1]), np.array([3])]],
    ...                      level_sizes=[3], data_blocks=[np.arange(2, dtype=np.int32), np.array([7], np.int32)])
    >>> read_pdtensor(buf.getvalue()).lod
    [[0, 1, 3]]
    """
    desc = tensor_desc(dtype, shape)
    out.write(struct.pack("<IQ", VERSION, len(level_sizes)))
    ends = []
    for k, (blocks, size) in enumerate(zip(offsets, level_sizes)):
        out.write(struct.pack("<Q", 8 * int(size)))
        checker = _lod.LevelChecker(k, min_offsets=2)  # Paddle's rule: a level holds at least one sequence
        for block in blocks:
            block = _lod.as_index_array(block, level=k)
            checker.feed(block)
            if checker.problems:
                raise LodValidationError(f"Paddle would refuse this LoD: {checker.problems[0]}")
            out.write(np.ascontiguousarray(block, "<i8").view("<u8").data)  # checked non-negative: same bits
        checker.finish()
        if checker.problems or checker.count != size:
            raise LodValidationError(f"Paddle would refuse this LoD: "
                                          f"{checker.problems[0] if checker.problems else f'level {k} size'}")
        ends.append(checker.last)
    problems = _lod.cross_level_problems(ends, list(level_sizes), int(shape[0]))
    if problems:
        raise LodValidationError(f"Paddle would refuse this LoD: {problems[0]}")
    out.write(struct.pack("<Ii", VERSION, len(desc)))
    out.write(desc)
    target = DTYPE_OF_CODE[_code_of(dtype)]
    rows = 0
    for block in data_blocks:
        block = np.asarray(block)
        if tuple(block.shape[1:]) != tuple(shape[1:]):
            raise LodShapeError(f"data block of shape {block.shape} does not fit the tensor shape {tuple(shape)}")
        out.write(np.ascontiguousarray(block, dtype=target).reshape(-1).view(np.uint8).data)
        rows += block.shape[0]
    if rows != shape[0]:
        raise LodShapeError(f"{rows} data rows written for a tensor of {shape[0]} rows")


def write_pdtensors(tensors: Iterable[LoDTensor], out: str | os.PathLike | BinaryIO) -> None:
    """Write tensors back to back, as Paddle's ``save_combine`` does (a ``.pdiparams``).

    A path is written atomically.  Pass them in the order the model expects
    (Paddle sorts by variable name).

    >>> import io
    >>> from lodtool import LoDTensor
    >>> buf = io.BytesIO()
    >>> write_pdtensors([LoDTensor(np.zeros(1)), LoDTensor(np.zeros(2))], buf)
    >>> len(read_pdtensors(buf.getvalue()))
    2
    """
    tensors = list(tensors)
    for t in tensors:
        _code_of(t.dtype)  # refuse before anything is written
    with _atomic(out) as stream:
        for t in tensors:
            t = t.to("cpu")
            write_pdtensor_parts(stream, shape=t.shape, dtype=t.dtype, offsets=[[o] for o in t.offsets],
                                 level_sizes=[len(o) for o in t.offsets], data_blocks=[np.asarray(t.data)])


def write_pdtensor(tensor: LoDTensor, out: str | os.PathLike | BinaryIO) -> None:
    """Write one tensor as Paddle's ``save_dense_tensor`` does, byte for byte (a path is written atomically).

    >>> import io
    >>> from lodtool import LoDTensor
    >>> buf = io.BytesIO()
    >>> write_pdtensor(LoDTensor(np.array([7], np.int32)), buf)
    >>> buf.getvalue().hex()
    '00000000000000000000000000000000040000000802100107000000'
    """
    write_pdtensors([tensor], out)


def _atomic(out):
    """An atomic writer for a path, or the stream itself (the one place this module touches file commits)."""
    import contextlib

    if hasattr(out, "write") and not isinstance(out, (str, bytes, os.PathLike)):
        return contextlib.nullcontext(out)
    from ..atomic import atomic_open

    return atomic_open(out)


# -- the io registry's entry points (see lodtool.io) ------------------------------------------------
def read(fmt: str, sources: Sequence[Any], *, lod_level: int | None = None, dtype: Any = None,
         chunk_bytes: int = STREAM_CHUNK_BYTES, progress=None, stats: dict | None = None) -> Iterator[LoDTensor]:
    """The registry's reader: each source's one tensor, in chunks of whole top-level sequences.

    ``lod_level`` (if given) must be the file's; ``dtype`` casts, refusing
    values it cannot hold.

    >>> import io
    >>> buf = io.BytesIO()
    >>> write_pdtensor(LoDTensor(np.arange(3), [[0, 1, 3]]), buf)
    >>> [c.lod for c in read("pdtensor", [io.BytesIO(buf.getvalue())], dtype="int16")]
    [[[0, 1, 3]]]
    """
    from ._values import read_with_options

    return read_with_options(sources, lambda source: iter_pdtensor([source], chunk_bytes=chunk_bytes), _label,
                             lod_level=lod_level, dtype=dtype, progress=progress, stats=stats)


def write(fmt: str, tensor: LoDTensor, out: BinaryIO) -> None:
    """The registry's writer of a tensor in memory (what ``slice --to pdtensor`` writes)."""
    write_pdtensor(tensor, out)


def write_stored(fmt: str, stored: Any, chunks: Iterable[LoDTensor], out: BinaryIO) -> None:
    """The registry's streaming writer: the stored tensor's offsets block by block, then its data chunks."""
    _code_of(stored.dtype)  # refuse before anything is written
    write_pdtensor_parts(out, shape=stored.shape, dtype=stored.dtype,
                         offsets=offset_blocks(stored), level_sizes=stored.level_sizes,
                         data_blocks=(c.data for c in chunks))


__all__ = ["read_pdtensor", "read_pdtensors", "iter_pdtensor", "write_pdtensor", "write_pdtensors",
           "write_pdtensor_parts", "scan", "tensor_desc", "PdHeader", "DTYPE_OF_CODE", "UNSUPPORTED_CODES",
           "CODE_OF_KIND", "EXTENSIONS", "read", "write", "write_stored"]
