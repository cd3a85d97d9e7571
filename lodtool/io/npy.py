"""NPY and NPZ in and out.  Nothing here ever unpickles: ``allow_pickle`` is always False.

``npy``: several ``.npy`` files, each one top-level sequence of a 1-level LoD
tensor: an array of shape ``(n_i, *element_shape)`` is a sequence of ``n_i``
elements.  Every file needs the same element shape.  With ``dtype=None`` the
files' dtypes promote (``numpy.result_type``); booleans and numbers never mix.

``npz``: one archive holding

- ``data``: the flat data, shape ``(rows, *element_shape)``;
- per level ``k = 0, 1, ...`` either ``offsets_k`` (Paddle's ``lod``; ``lod_k``
  is accepted as another name for it) or ``lengths_k`` (Paddle's
  ``recursive_sequence_lengths``), all of one kind, 1-D integers;
- optionally ``level_names``, a 1-D array of strings.

Anything else in the archive is an error (a misspelt name would otherwise be
dropped silently).  The LoD is fully validated before the data is used.
:func:`write_npz` writes ``data``, ``offsets_k`` and (when the tensor has level
names) ``level_names``, so npz -> pack -> unpack -> npz gives the same arrays.

>>> import io
>>> from lodtool import LoDTensor
>>> buf = io.BytesIO()
>>> write_npz(LoDTensor(np.arange(5), [[0, 2, 5]]), buf)
>>> t = read_npz(io.BytesIO(buf.getvalue()))
>>> t.lod, t.data.tolist()
([[0, 2, 5]], [0, 1, 2, 3, 4])
"""

from __future__ import annotations

import math
import os
import re
import zipfile
import zlib
from typing import Any, BinaryIO, Callable, Iterable, Iterator, Sequence

import numpy as np

from ..limits import STREAM_CHUNK_BYTES
from .. import lod as _lod
from ..errors import LodError, LodInputError, LodMemoryError, LodUsageError
from ..tensor import NUMERIC_KINDS, LoDTensor
from ..tokens import MAX_TOKENIZER_BYTES, TokenInfo
from . import offset_blocks, open_seekable, same_tokens
from ._values import cast_values, resolve_dtype

_LEVEL_ARRAY = re.compile(r"^(offsets|lengths|lod)_(\d+)$")


# -- reading .npy -----------------------------------------------------------------------------------
def _label(source: Any, index: int) -> str:
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        return "<stdin>" if path == "-" else path
    name = getattr(source, "name", None)
    return name if isinstance(name, str) else f"<input {index}>"


def _materialize(source: Any) -> Any:
    """Stdin and other one-way streams, read into memory (a .npy is read twice: header, then data); a path stays."""
    if isinstance(source, (str, os.PathLike)) and os.fspath(source) != "-":
        return source
    return open_seekable(source)[0]


def read_npy_header(source: Any, label: str | None = None) -> tuple[tuple[int, ...], np.dtype, bool]:
    """``(shape, dtype, fortran_order)`` of a .npy file, read from its header only.

    >>> import io
    >>> buf = io.BytesIO(); np.save(buf, np.zeros((3, 2), np.float32)); _ = buf.seek(0)
    >>> read_npy_header(buf)
    ((3, 2), dtype('float32'), False)
    """
    label = label or _label(source, 0)
    f, own = open_seekable(source)
    try:
        start = f.tell()
        shape, fortran, dtype = _header(f, label)
        data_start = f.tell()
        end = f.seek(0, os.SEEK_END)
        _check_claim(shape, dtype, end - data_start, label)
        f.seek(start)
        return shape, dtype, fortran
    finally:
        if own:
            f.close()


def _header(f, label: str):
    # numpy parses the header with tokenize and ast: a damaged one raises almost anything
    try:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        else:
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        return tuple(int(d) for d in shape), bool(fortran), np.dtype(dtype)
    except Exception as exc:
        raise LodInputError(f"{label}: not a readable .npy file ({_short(exc)})") from None


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def _check_claim(shape: tuple[int, ...], dtype: np.dtype, stored: int, label: str) -> None:
    """Refuse a header that claims more data than the file holds, before anything is allocated."""
    claimed = math.prod(shape) * dtype.itemsize
    if claimed > stored:
        raise LodInputError(f"{label}: the header claims shape {shape} of {dtype} ({claimed:,} bytes) but only "
                            f"{stored:,} bytes follow it (truncated?)")


def _check_array_dtype(dtype: np.dtype, label: str) -> None:
    if dtype.hasobject:
        raise LodInputError(f"{label}: holds Python objects (dtype object); lodtool never unpickles, so it refuses "
                            "such arrays")
    if dtype.kind not in NUMERIC_KINDS or dtype.fields is not None:
        raise LodInputError(f"{label}: has dtype {dtype}; lodtool stores numbers and bools only")


def _common_dtype(dtypes: Sequence[np.dtype], labels: Sequence[str]) -> np.dtype:
    kinds = {dt.kind == "b" for dt in dtypes}
    if len(kinds) > 1:
        i = next(k for k, dt in enumerate(dtypes) if (dt.kind == "b") != (dtypes[0].kind == "b"))
        raise LodInputError(f"{labels[i]}: has dtype {dtypes[i]}, but {labels[0]} has {dtypes[0]}; booleans and "
                            "numbers cannot be mixed (pass dtype= to convert)")
    return np.result_type(*dtypes)


def iter_npy(sources: Sequence[Any], *, dtype: Any = None, lod_level: int | None = None,
             chunk_bytes: int = STREAM_CHUNK_BYTES,
             progress: Callable[[int], None] | None = None) -> Iterator[LoDTensor]:
    """Read .npy files, each one top-level sequence, as chunks of a 1-level LoD tensor.

    Every header is checked (dtype, element shape) before any data is read;
    files are memory-mapped where possible and gathered into chunks of about
    ``chunk_bytes``.  ``progress(n)`` gets the data bytes read so far.

    >>> import io
    >>> a, b = io.BytesIO(), io.BytesIO()
    >>> np.save(a, np.arange(6).reshape(3, 2)); np.save(b, np.arange(2).reshape(1, 2))
    >>> _ = a.seek(0), b.seek(0)
    >>> [c.lod for c in iter_npy([a, b])]
    [[[0, 3, 4]]]
    """
    labels = [_label(s, i) for i, s in enumerate(sources)]
    sources = [_materialize(s) for s in sources]
    if not sources:
        raise LodUsageError("no .npy inputs given")
    if lod_level not in (None, 1):
        raise LodUsageError(f"npy input is a 1-level LoD (each file one sequence); lod_level={lod_level} cannot be "
                            "applied")
    target = resolve_dtype(dtype)
    headers = []
    for source, label in zip(sources, labels):
        shape, dt, _ = read_npy_header(source, label)
        _check_array_dtype(dt, label)
        if len(shape) == 0:
            raise LodInputError(f"{label}: is a 0-d array (a scalar); each .npy file must be a sequence of rows")
        headers.append((shape, dt))
    elem = headers[0][0][1:]
    for (shape, _), label in zip(headers, labels):
        if shape[1:] != elem:
            raise LodInputError(f"{label}: element shape {shape[1:]} (array shape {shape}), but {labels[0]} has "
                                f"{elem}; every file needs one element shape")
    common = target if target is not None else _common_dtype([h[1] for h in headers], labels)
    done = 0
    group: list[tuple[np.ndarray, str]] = []
    size = 0
    for source, label, (shape, dt) in zip(sources, labels, headers):
        arr = _load_npy(source, label)
        if arr.shape != shape or arr.dtype != dt:  # pragma: no cover - the header was read just before
            raise LodInputError(f"{label}: changed while being read")
        group.append((arr, label))
        size += arr.nbytes
        done += arr.nbytes
        if progress is not None:
            progress(done)
        if size >= chunk_bytes:
            yield _npy_chunk(group, common, elem)
            group, size = [], 0
    if group:
        yield _npy_chunk(group, common, elem)


def _load_npy(source: Any, label: str) -> np.ndarray:
    try:
        if isinstance(source, (str, os.PathLike)) and os.fspath(source) != "-":
            try:
                return np.load(os.fspath(source), mmap_mode="r", allow_pickle=False)
            except (ValueError, OSError):
                return np.load(os.fspath(source), allow_pickle=False)
        f, own = open_seekable(source)
        try:
            return np.load(f, allow_pickle=False)
        finally:
            if own:
                f.close()
    except LodError:
        raise
    except (ValueError, OSError, EOFError) as exc:
        raise LodInputError(f"{label}: cannot read the array ({exc})") from None


def _npy_chunk(group: list[tuple[np.ndarray, str]], dtype: np.dtype, elem: tuple[int, ...]) -> LoDTensor:
    parts = []
    for arr, label in group:
        parts.append(cast_values(np.asarray(arr), dtype, lambda row, label=label: f"{label}: row {row}: "))
    data = np.concatenate(parts) if len(parts) > 1 else parts[0]  # one file: its memory map, not a copy
    lengths = [a.shape[0] for a, _ in group]
    return LoDTensor(data.reshape((data.shape[0],) + elem), recursive_sequence_lengths=[lengths])


def read_npy(sources: Sequence[Any], *, dtype: Any = None) -> LoDTensor:
    """Read .npy files (each one top-level sequence) into one 1-level LoD tensor.

    >>> import io
    >>> a = io.BytesIO(); np.save(a, np.ones((2, 3), np.uint8)); _ = a.seek(0)
    >>> read_npy([a]).shape
    (2, 3)
    """
    from ._values import concat_chunks

    return concat_chunks(iter_npy(sources, dtype=dtype))


# -- reading .npz -----------------------------------------------------------------------------------
#: what a file that is not an NPZ archive is, by its first bytes
_OTHER_MAGIC = ((b"\x89HDF\r\n\x1a\n", "an HDF5 file (a lodtool container? unpack or pad read those)"),
                (b"\x93NUMPY", "a single .npy array"),
                (b"\x80", "a Python pickle, which lodtool never loads"))


def _not_npz(f) -> str | None:
    """What ``f`` (seekable) is by its first bytes when that is known and not an NPZ; it is left at its start."""
    try:
        start = f.tell()
        head = f.read(8)
        f.seek(start)
    except (OSError, ValueError, AttributeError):
        return None
    for magic, what in _OTHER_MAGIC:
        if head.startswith(magic):
            return what
    return None


def load_npz_arrays(source: Any, *, required: Sequence[str] = (), allowed: Callable[[str], bool] | None = None,
                    label: str | None = None, max_memory: int | None = None, last: str | None = None,
                    before_last: Callable[[dict, tuple], None] | None = None) -> dict[str, np.ndarray]:
    """The arrays of an .npz archive (never unpickling), checking names and dtypes.

    ``required`` names must be present; with ``allowed`` given, any other name
    it refuses is an error.  Before anything is inflated, every member's header is
    checked against its declared size, and the declared sizes together against
    ``max_memory`` (a zip bomb is refused, not allocated).  The member ``last`` is
    inflated last, after ``before_last(arrays so far, its shape)`` has checked the
    small ones (say, offsets against the data's rows).

    >>> import io
    >>> buf = io.BytesIO(); np.savez(buf, a=np.arange(3)); _ = buf.seek(0)
    >>> sorted(load_npz_arrays(buf, required=["a"]))
    ['a']
    """
    label = label or _label(source, 0)
    f, own = open_seekable(source)
    try:
        what = _not_npz(f)
        if what is not None:
            raise LodInputError(f"{label}: is {what}, not an .npz archive")
        try:
            archive = np.load(f, allow_pickle=False)
        except (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error, NotImplementedError) as exc:
            raise LodInputError(f"{label}: not a readable .npz archive ({_short(exc)})") from None
        if not isinstance(archive, np.lib.npyio.NpzFile):
            archive_type = "a single .npy array" if isinstance(archive, np.ndarray) else type(archive).__name__
            raise LodInputError(f"{label}: is {archive_type}, not an .npz archive")
        with archive:
            names = list(archive.files)
            missing = [n for n in required if n not in names]
            if missing:
                raise LodInputError(f"{label}: no array named {missing[0]!r} (it has: {', '.join(names) or 'none'})")
            if allowed is not None:
                extra = [n for n in names if not allowed(n)]
                if extra:
                    raise LodInputError(f"{label}: unexpected array {extra[0]!r}; an LoD archive holds data, "
                                        "offsets_0.. (or lengths_0.., lod_0..) and optionally level_names")
            members = {n: _check_member(archive, n, label) for n in names}  # (declared size, shape)
            total = sum(size for size, _ in members.values())
            if max_memory is not None and total > max_memory:
                raise LodMemoryError(f"{label}: its arrays inflate to {total:,} bytes, above the memory limit of "
                                     f"{max_memory:,} (raise it with max_memory=...)")
            out = {}
            order = [n for n in names if n != last] + [n for n in names if n == last]
            for n in order:
                if n == last and before_last is not None and members[n][1] is not None:
                    before_last(out, members[n][1])
                try:
                    out[n] = archive[n]
                except (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error, NotImplementedError) as exc:
                    raise LodInputError(f"{label}: array {n!r} cannot be read ({exc})") from None
                if not isinstance(out[n], np.ndarray):  # numpy hands back a member that is not .npy as bytes
                    raise LodInputError(f"{label}: member {n!r} is not a .npy array")
            return out
    finally:
        if own:
            f.close()


def _check_member(archive, name: str, label: str) -> tuple[int, tuple | None]:
    """Check an .npz member's header against the member's size (numpy would allocate what it claims); returns its
    declared (inflated) size, which reading it never exceeds, and its shape (None: not an array)."""
    member = f"{name}.npy" if f"{name}.npy" in archive.zip.namelist() else name
    try:
        info = archive.zip.getinfo(member)
        with archive.zip.open(member) as f:
            if f.read(6) != b"\x93NUMPY":
                return info.file_size, None  # not an array: refused once numpy hands it back as bytes
        with archive.zip.open(member) as f:
            shape, _, dtype = _header(f, f"{label}: array {name!r}")
            data_start = f.tell()
    except LodInputError:
        raise
    except (OSError, EOFError, zipfile.BadZipFile, zlib.error, NotImplementedError, KeyError) as exc:
        raise LodInputError(f"{label}: array {name!r} cannot be read ({_short(exc)})") from None
    if dtype.hasobject:
        raise LodInputError(f"{label}: array {name!r} holds Python objects (dtype object); lodtool never "
                            "unpickles, so it refuses such arrays")
    _check_claim(shape, dtype, info.file_size - data_start, f"{label}: array {name!r}")
    return info.file_size, shape


def read_npz(source: Any, *, dtype: Any = None, lod_level: int | None = None, level_names=None,
             label: str | None = None, max_memory: int | None = None) -> LoDTensor:
    """Read an LoD archive (``data`` plus ``offsets_k`` or ``lengths_k``) into a validated tensor.

    The offsets are read and validated against the rows the data's header
    claims before the data is inflated; ``max_memory`` bounds the declared
    sizes of all arrays together.

    >>> import io
    >>> buf = io.BytesIO()
    >>> np.savez(buf, data=np.arange(7.0), lengths_0=[2, 1], lengths_1=[2, 2, 3]); _ = buf.seek(0)
    >>> read_npz(buf).lod
    [[0, 2, 3], [0, 2, 4, 7]]
    """
    label = label or _label(source, 0)
    checked: dict = {}

    def check_levels(arrays: dict, data_shape: tuple) -> None:
        checked["offsets"], checked["levels"], checked["kinds"] = _npz_levels(arrays, data_shape, lod_level, label)

    arrays = load_npz_arrays(source, required=("data",), label=label, max_memory=max_memory, last="data",
                             before_last=check_levels,
                             allowed=lambda n: n in ("data", "level_names", TOKENS_MEMBER)
                             or bool(_LEVEL_ARRAY.match(n)))
    data = arrays["data"]
    _check_array_dtype(data.dtype, f"{label}: array 'data'")
    offsets, n_levels = checked["offsets"], len(checked["levels"])
    if n_levels == 0 and data.shape[0] == 0:
        raise LodInputError(f"{label}: empty input (the data has no rows and there is no LoD)")
    names = level_names
    if names is None and "level_names" in arrays:
        raw = arrays["level_names"]
        if raw.ndim != 1 or raw.dtype.kind not in "US":
            raise LodInputError(f"{label}: array 'level_names' must be a 1-D array of strings")
        names = [x.decode() if isinstance(x, bytes) else str(x) for x in raw.tolist()]
        if len(names) != n_levels:
            raise LodInputError(f"{label}: {len(names)} level name(s) for {n_levels} LoD level(s)")
    target = resolve_dtype(dtype)
    data = cast_values(data, target, lambda row: f"{label}: data[{row}]: ")
    return LoDTensor._trusted(data, offsets, None if names is None else tuple(str(x) for x in names))


def _npz_levels(arrays: dict, data_shape: tuple, lod_level: int | None, label: str):
    """The validated offsets of an LoD archive's level arrays, against ``data_shape`` from its header."""
    if len(data_shape) == 0:
        raise LodInputError(f"{label}: array 'data' is 0-d; it needs a first dimension (the rows)")
    levels: dict[int, tuple[str, np.ndarray]] = {}
    kinds = set()
    for n, arr in arrays.items():
        m = _LEVEL_ARRAY.match(n)
        if not m:
            continue
        kind, k = m.group(1), int(m.group(2))
        kind = "offsets" if kind == "lod" else kind
        if k in levels:
            raise LodInputError(f"{label}: level {k} is given twice ({levels[k][0]}_{k} and {n})")
        kinds.add(kind)
        levels[k] = (n, arr)
    if len(kinds) > 1:
        raise LodInputError(f"{label}: mixes offsets_k and lengths_k arrays; give every level the same way")
    n_levels = len(levels)
    for k in range(n_levels):
        if k not in levels:
            raise LodInputError(f"{label}: levels must be numbered 0..{n_levels - 1}, but level {k} is missing "
                                f"(found {', '.join(sorted(n for n, _ in levels.values()))})")
    if lod_level is not None and lod_level != n_levels:
        raise LodInputError(f"{label}: has {n_levels} LoD level(s), but lod_level={lod_level} was asked")
    offsets = []
    for k in range(n_levels):
        n, arr = levels[k]
        try:
            values = _lod.as_index_array(arr, what=n)  # its messages name the array
        except LodError as exc:
            raise LodInputError(f"{label}: {exc}") from None
        try:
            offsets.append(_lod.lengths_to_offsets(values) if kinds == {"lengths"} else values)
        except LodError as exc:
            raise LodInputError(f"{label}: {n}: {exc}") from None
    problems = _lod.find_lod_problems(offsets, int(data_shape[0]), max_problems=1)
    if problems:
        name = levels[problems[0].level][0] + (" (as offsets)" if kinds == {"lengths"} else "")
        raise LodInputError(f"{label}: {name}: {problems[0].message}")
    return offsets, levels, kinds


def iter_npz(sources: Sequence[Any], *, dtype: Any = None, lod_level: int | None = None, level_names=None,
             progress: Callable[[int], None] | None = None, max_memory: int | None = None) -> Iterator[LoDTensor]:
    """Read LoD archives one after another (their top-level sequences concatenate)."""
    done = 0
    first: LoDTensor | None = None
    first_label = ""
    for i, source in enumerate(sources):
        label = _label(source, i)
        t = read_npz(source, dtype=dtype, lod_level=lod_level, level_names=level_names, label=label,
                     max_memory=max_memory)
        if first is None:
            first, first_label = t, label
        elif t.lod_level != first.lod_level or t.element_shape != first.element_shape:
            raise LodInputError(f"{label}: {t.lod_level} LoD level(s) and element shape {t.element_shape}, but "
                                f"{first_label} has {first.lod_level} and {first.element_shape}")
        _common_dtype([first.dtype, t.dtype], [first_label, label])  # booleans and numbers never mix
        done += t.data.nbytes
        if progress is not None:
            progress(done)
        yield t


# -- writing .npz -----------------------------------------------------------------------------------
class NpzWriter:
    """Writes an .npz archive member by member; a member's data may come in blocks.

    It writes what ``numpy.load`` reads (uncompressed ZIP64 members holding
    .npy files), to a path or any writable binary stream, even a pipe.
    """

    def __init__(self, out: BinaryIO, compress: bool = False):
        self._zip = zipfile.ZipFile(out, mode="w", compression=zipfile.ZIP_DEFLATED if compress else
                                    zipfile.ZIP_STORED, allowZip64=True)

    def add(self, name: str, shape: tuple[int, ...], dtype: np.dtype, blocks: Iterable[np.ndarray]) -> None:
        """Write ``name.npy`` of ``shape``/``dtype`` from C-ordered blocks of rows."""
        dtype = np.dtype(dtype)
        header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False,
                  "shape": tuple(int(d) for d in shape)}
        expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        written = 0
        with self._zip.open(name + ".npy", mode="w", force_zip64=True) as member:
            np.lib.format.write_array_header_2_0(member, header) if _needs_v2(header) else \
                np.lib.format.write_array_header_1_0(member, header)
            for block in blocks:
                block = np.ascontiguousarray(block, dtype=dtype)
                member.write(memoryview(block.reshape(-1)).cast("B"))
                written += block.nbytes
                del block  # a generator's next block is made without this one still held
        if written != expected:
            raise LodError(f"{name}: wrote {written} bytes, but its shape {shape} needs {expected}")

    def close(self) -> None:
        self._zip.close()


def _needs_v2(header: dict) -> bool:
    return len(repr(header)) > 60000


def write_npz(tensor: LoDTensor, out: str | os.PathLike | BinaryIO, *, compress: bool = False) -> None:
    """Write a tensor as an .npz archive: ``data``, ``offsets_0..`` and ``level_names`` if it has them.

    A path is written atomically; a stream is written in place.

    >>> import io
    >>> buf = io.BytesIO()
    >>> write_npz(LoDTensor(np.arange(3), [[0, 2, 3]], level_names=["doc"]), buf)
    >>> _ = buf.seek(0); arrays = np.load(buf)
    >>> sorted(arrays.files), arrays["offsets_0"].tolist()
    (['data', 'level_names', 'offsets_0'], [0, 2, 3])
    """
    data = np.asarray(tensor)
    write_npz_parts(out, shape=data.shape, dtype=data.dtype, data_blocks=[data],
                    offsets=[[o] for o in tensor.offsets], level_sizes=[len(o) for o in tensor.offsets],
                    level_names=tensor.level_names, compress=compress)


def write_npz_parts(out: str | os.PathLike | BinaryIO, *, shape: tuple[int, ...], dtype: np.dtype,
                    data_blocks: Iterable[np.ndarray], offsets: Sequence[Iterable[np.ndarray]],
                    level_sizes: Sequence[int], level_names: Sequence[str] | None = None,
                    compress: bool = False, tokens: TokenInfo | None = None) -> None:
    """Write an LoD archive whose data and offsets arrive in blocks (``unpack`` streams this way).

    ``tokens`` (:class:`~lodtool.tokens.TokenInfo`) rides along as the uint8 member ``tokens``
    (:meth:`~lodtool.tokens.TokenInfo.to_bytes`), which ``pack`` records again (:func:`token_info`).
    """
    members = [("data", tuple(shape), dtype, data_blocks)]
    members += [(f"offsets_{k}", (int(size),), np.dtype(np.int64), blocks)
                for k, (blocks, size) in enumerate(zip(offsets, level_sizes))]
    if level_names:
        names = np.array([str(n) for n in level_names])
        members.append(("level_names", names.shape, names.dtype, [names]))
    if tokens is not None:
        raw = np.frombuffer(tokens.to_bytes(), np.uint8)
        members.append((TOKENS_MEMBER, raw.shape, raw.dtype, [raw]))
    write_npz_members(out, members, compress=compress)


def write_npz_members(out: str | os.PathLike | BinaryIO,
                      members: Sequence[tuple[str, tuple[int, ...], Any, Iterable[np.ndarray]]], *,
                      compress: bool = False) -> None:
    """Write an .npz of ``(name, shape, dtype, blocks)`` members, in order, each from its blocks of rows.

    The blocks of one member are drawn only while that member is written, so
    generators that read and compute as they go keep memory bounded.  A path is
    written atomically; a stream (a pipe too) in place.

    >>> import io
    >>> buf = io.BytesIO()
    >>> write_npz_members(buf, [("a", (3, 2), "int32", (np.full((n, 2), n) for n in (1, 2))),
    ...                         ("b", (2,), "bool", [np.array([True, False])])])
    >>> _ = buf.seek(0); arrays = np.load(buf)
    >>> arrays.files, arrays["a"].tolist(), arrays["b"].tolist()
    (['a', 'b'], [[1, 1], [2, 2], [2, 2]], [True, False])
    """
    if isinstance(out, (str, os.PathLike)):
        from ..atomic import atomic_open

        with atomic_open(out) as f:
            _write_members(f, members, compress)
    else:
        _write_members(out, members, compress)


def _write_members(f, members, compress: bool) -> None:
    writer = NpzWriter(f, compress)
    try:
        for name, shape, dtype, blocks in members:
            writer.add(name, tuple(shape), np.dtype(dtype), blocks)
    finally:
        writer.close()



# -- the io registry's entry points (see lodtool.io) ------------------------------------------------
def read(fmt: str, sources: Sequence[Any], *, lod_level: int | None = None, dtype: Any = None,
         chunk_bytes: int = STREAM_CHUNK_BYTES, progress: Callable[[int], None] | None = None,
         stats: dict | None = None, max_memory: int | None = None) -> Iterator[LoDTensor]:
    """The registry's reader: ``.npy`` files (each one sequence) or LoD archives, as chunks.

    An archive is read whole: ``max_memory`` bounds the declared sizes of its arrays.

    >>> import io
    >>> buf = io.BytesIO(); np.save(buf, np.arange(3)); _ = buf.seek(0)
    >>> [c.lod for c in read("npy", [buf])]
    [[[0, 3]]]
    """
    stats = {} if stats is None else stats
    stats["bytes_read"] = 0

    def tick(n: int) -> None:
        stats["bytes_read"] = n
        if progress is not None:
            progress(n)

    if fmt == "npy":
        return iter_npy(sources, dtype=dtype, lod_level=lod_level, chunk_bytes=chunk_bytes, progress=tick)
    return iter_npz(sources, dtype=dtype, lod_level=lod_level, progress=tick, max_memory=max_memory)


def write(fmt: str, tensor: LoDTensor, out: BinaryIO) -> None:
    """The registry's writer of a tensor in memory: an LoD archive (``npz``)."""
    write_npz(tensor, out)


def write_stored(fmt: str, stored: Any, chunks: Iterable[LoDTensor], out: BinaryIO) -> None:
    """The registry's streaming writer: a stored tensor's data ``chunks`` and its offsets, block by block."""
    write_npz_parts(out, shape=stored.shape, dtype=stored.dtype, data_blocks=(c.data for c in chunks),
                    offsets=offset_blocks(stored), level_sizes=stored.level_sizes,
                    level_names=stored.level_names, tokens=stored.tokens)


#: the archive member holding the token metadata (:meth:`lodtool.tokens.TokenInfo.to_bytes`)
TOKENS_MEMBER = "tokens"


def token_info(fmt: str, sources: Sequence[Any], **_options) -> TokenInfo | None:
    """The token metadata LoD archives carry (member ``tokens``; the same in every archive), for ``pack``.

    Only archives named by path are looked at (a stream is read once, by the reader).

    >>> import os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "ids.npz")
    >>> write_npz_parts(p, shape=(2,), dtype=np.dtype("uint8"), data_blocks=[np.array([1, 2], np.uint8)],
    ...                 offsets=[[np.array([0, 2])]], level_sizes=[2], tokens=TokenInfo(vocab_size=3))
    >>> token_info("npz", [p]).vocab_size
    3
    """
    def info_of(path: str) -> TokenInfo | None:
        with zipfile.ZipFile(path) as z:
            member = next((i for i in z.infolist() if i.filename == TOKENS_MEMBER + ".npy"), None)
            if member is None:
                return None
            if member.file_size > MAX_TOKENIZER_BYTES + 4096:
                raise LodInputError(f"{path}: member {TOKENS_MEMBER!r} claims {member.file_size:,} bytes")
            with z.open(member) as f:
                raw = np.load(f, allow_pickle=False)
        if raw.dtype != np.uint8 or raw.ndim != 1:
            raise LodInputError(f"{path}: member {TOKENS_MEMBER!r} must be a 1-D uint8 array")
        return TokenInfo.from_bytes(raw.tobytes(), path)

    return same_tokens(sources, info_of, (ValueError, zipfile.BadZipFile)) if fmt == "npz" else None


__all__ = ["token_info", "TOKENS_MEMBER", "iter_npy", "read_npy", "read_npy_header", "iter_npz", "read_npz", "load_npz_arrays", "write_npz",
           "write_npz_parts", "write_npz_members", "NpzWriter", "read", "write", "write_stored"]

