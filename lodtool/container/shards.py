"""Sharded containers: a folder of whole containers plus a manifest, read as one logical tensor.

A sharded container is a folder::

    DIR/lodtool.json          the manifest (written last, atomically)
    DIR/part-00000.lod.h5     shard 0: a whole container of the current format, readable alone
    DIR/part-00001.lod.h5     ...

The manifest records the format version, each tensor's dtype, element shape,
LoD level and level names, and per shard its file name, its checksum, and
per tensor the top-level sequence count, the row count and the sequences of
every level.  A shard's checksum is ``xxh3_64`` over the checksums its
datasets record (so it costs no extra read, and ``verify`` ties each shard's
data to the manifest through them).  Readers trust the manifest only as far
as they check it: every shard it names must be a regular file in the folder
whose sizes match, and shards holding external or virtual-dataset storage are
refused.  The manifest and every shard are regular files inside the folder,
never symbolic links: readers and writers alike go through
:func:`folder_file`, so no write or read leaves the folder.

Tensors are split at top-level sequence boundaries: shard ``i`` holds
sequences ``C[i]..C[i+1]`` of each tensor.  :class:`ShardedTensor` answers
what the lazy single-file handle answers (sizes, offsets windows, row ranges,
branches, slices, head, tail, chunks, statistics) by mapping global positions
onto shards through the manifest's counts, so a branch lookup opens one shard.

A crash while writing leaves the previous manifest or none, never one that
names a missing shard: shards are committed (atomically) before the manifest
that names them.  The manifest's rename is the folder's commit point: a
signal that arrives during the commit takes effect after it (see
:func:`lodtool.atomic.commit_section`), and a failed or interrupted write
removes only the shards that the manifest on disk does not name
(:func:`remove_uncommitted_shards`).

>>> import os, tempfile, numpy as np
>>> from lodtool import LoDTensor
>>> d = os.path.join(tempfile.mkdtemp(), "corpus")
>>> t = LoDTensor(np.arange(12), recursive_sequence_lengths=[[2, 1, 3, 2], [2, 1, 1, 3, 1, 1, 2, 1]])
>>> with ShardWriter(d, shard_size=40) as w:
...     w.write(t)
>>> sorted(os.listdir(d))
['lodtool.json', 'part-00000.lod.h5', 'part-00001.lod.h5', 'part-00002.lod.h5', 'part-00003.lod.h5']
>>> with open_sharded(d) as f:
...     x = f.tensor()
...     len(x), x.branch(2).to_nested(), x.read().equals(t)
(4, [[4, 5, 6], [7], [8]], True)
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from dataclasses import dataclass, field
from typing import Iterator, Mapping, Sequence

import numpy as np

from .. import atomic as _atomic
from .. import lod as _lod
from .. import storage
from ..tokens import TokenInfo
from ..errors import (LodDtypeError, LodError, LodExistsError, LodFileNotFoundError, LodFormatError, LodIndexError,
                      LodUsageError, LodValidationError)
from ..tensor import LoDTensor, TensorSource, TensorView, bytes_per_row, check_dtype, concat_tensors
from . import spec as _spec
from .spec import short_repr
from ..limits import STREAM_CHUNK_BYTES, check_memory, parse_size, resolve_max_memory

#: the manifest's file name inside a sharded folder
MANIFEST_NAME = "lodtool.json"
#: the manifest's ``format`` field
MANIFEST_FORMAT = "lodtool-sharded"
#: the manifest format this lodtool writes (``major.minor``); readers accept the same major
MANIFEST_VERSION = "1.0"
#: shard file names: ``part-00000.lod.h5``, ...
SHARD_PREFIX, SHARD_SUFFIX = "part-", ".lod.h5"
#: the default target size of one shard (logical bytes of data and offsets)
DEFAULT_SHARD_SIZE = 1 << 30
#: top-level sequences planned at a time when splitting a file (their offsets only)
PLAN_WINDOW = 1 << 16
#: shards kept open at once by one reader
OPEN_SHARDS = 64
#: the largest count a manifest may give (rows, sequences), alone or summed over the shards: an int64
MAX_COUNT = (1 << 63) - 1
#: the most dimensions of an element (HDF5's limit on a dataset's rank, less the rows)
MAX_ELEMENT_DIMS = 31


def shard_name(index: int) -> str:
    """The file name of shard ``index``.

    >>> shard_name(7)
    'part-00007.lod.h5'
    """
    return f"{SHARD_PREFIX}{index:05d}{SHARD_SUFFIX}"


def _shard_index(name: str) -> int | None:
    body = name[len(SHARD_PREFIX):-len(SHARD_SUFFIX)] if name.startswith(SHARD_PREFIX) and \
        name.endswith(SHARD_SUFFIX) else ""
    return int(body) if body.isdigit() else None


def is_sharded(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a folder (a sharded container, or meant to be one).

    >>> import tempfile
    >>> is_sharded(tempfile.mkdtemp()), is_sharded("x.lod.h5")
    (True, False)

    A URL is a folder when it ends in ``/`` or the store says so (one request).
    """
    if storage.is_url(path):
        return storage.is_folder(path)
    return os.path.isdir(os.fspath(path))


# -- the manifest -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TensorSpec:
    """What every shard's copy of one tensor shares: dtype, element shape, LoD level, level names, token metadata.

    The manifest records the token metadata without the tokenizer's JSON (each shard stores that); two specs
    compare it by its hash.
    """

    dtype: np.dtype
    element_shape: tuple[int, ...]
    lod_level: int
    level_names: tuple[str, ...] | None
    tokens: TokenInfo | None = None

    @classmethod
    def of(cls, t) -> "TensorSpec":
        """The spec of a :class:`LoDTensor` or a lazy tensor."""
        names = tuple(t.level_names) if t.level_names else None
        return cls(np.dtype(t.dtype), tuple(int(d) for d in t.element_shape), int(t.lod_level), names,
                   t.tokens)

    def to_json(self) -> dict:
        out = {"dtype": self.dtype.str, "element_shape": list(self.element_shape), "lod_level": self.lod_level,
               "level_names": list(self.level_names) if self.level_names else None}
        if self.tokens is not None:
            out["tokens"] = self.tokens.as_dict()
        return out


@dataclass(frozen=True)
class TensorCounts:
    """One tensor's sizes in one shard: top-level sequences, rows, and the sequences of every level."""

    rows: int
    level_sequences: tuple[int, ...]

    @property
    def sequences(self) -> int:
        """Top-level sequences (rows, for a 0-level tensor)."""
        return self.level_sequences[0] if self.level_sequences else self.rows

    @classmethod
    def of(cls, t) -> "TensorCounts":
        """The counts of a :class:`LoDTensor` or a lazy tensor."""
        return cls(int(t.shape[0]), tuple(t.num_sequences(k) for k in range(t.lod_level)))

    def to_json(self) -> dict:
        return {"sequences": self.sequences, "rows": self.rows, "level_sequences": list(self.level_sequences)}


@dataclass(frozen=True)
class ShardInfo:
    """One shard as the manifest names it: its file (inside the folder), checksum and per-tensor counts."""

    file: str
    checksum: str
    tensors: dict

    def to_json(self) -> dict:
        return {"file": self.file, "checksum": self.checksum,
                "tensors": {name: c.to_json() for name, c in self.tensors.items()}}


@dataclass
class Manifest:
    """The parsed ``lodtool.json`` of a sharded folder."""

    tensors: dict
    shards: list = field(default_factory=list)
    format_version: str = MANIFEST_VERSION
    created_by: str | None = None

    @property
    def names(self) -> list[str]:
        return list(self.tensors)

    def to_json(self) -> dict:
        return {"format": MANIFEST_FORMAT, "format_version": self.format_version, "created_by": self.created_by,
                "tensors": {name: s.to_json() for name, s in self.tensors.items()},
                "shards": [s.to_json() for s in self.shards]}


def _bad(where: str, what: str) -> LodFormatError:
    return LodFormatError(f"{where}: {what}")


def _count(value, where: str, what: str, limit: int = MAX_COUNT) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= limit:
        raise _bad(where, f"{what} is {short_repr(value)}; expected a non-negative integer up to {limit}")
    return value


def _parse_dtype(name: str, raw, where: str) -> np.dtype:
    if not isinstance(raw, str):
        raise _bad(where, f"tensor {name!r}: dtype is {short_repr(raw)}; expected a dtype string such as \"<i8\"")
    try:
        dtype = np.dtype(raw)
    except (TypeError, ValueError, SyntaxError, OverflowError):
        raise _bad(where, f"tensor {name!r}: dtype {short_repr(raw)} is not a dtype") from None
    try:
        return check_dtype(dtype, f"tensor {name!r}")
    except LodDtypeError as exc:
        raise _bad(where, str(exc)) from None


def _parse_spec(name: str, raw, where: str) -> TensorSpec:
    if not isinstance(raw, dict):
        raise _bad(where, f"tensor {name!r}: expected an object")
    dtype = _parse_dtype(name, raw.get("dtype"), where)
    shape = raw.get("element_shape")
    if not isinstance(shape, list) or len(shape) > MAX_ELEMENT_DIMS:
        raise _bad(where, f"tensor {name!r}: element_shape is {short_repr(shape)}; expected a list of at most "
                          f"{MAX_ELEMENT_DIMS} sizes")
    dims = tuple(_count(d, where, f"tensor {name!r}: element_shape") for d in shape)
    row_bytes = bytes_per_row(dtype, dims)
    if row_bytes > MAX_COUNT:
        raise _bad(where, f"tensor {name!r}: element_shape {list(dims)} makes a row of {row_bytes} bytes; "
                          f"at most {MAX_COUNT} fit an int64")
    level = _count(raw.get("lod_level"), where, f"tensor {name!r}: lod_level", _spec.MAX_LOD_LEVEL)
    names = raw.get("level_names")
    if names is not None and (not isinstance(names, list) or len(names) != level
                              or not all(isinstance(n, str) for n in names)):
        raise _bad(where, f"tensor {name!r}: level_names is {short_repr(names)}; expected {level} strings or null")
    tokens = raw.get("tokens")
    if tokens is not None:
        if not isinstance(tokens, dict):
            raise _bad(where, f"tensor {name!r}: tokens is {short_repr(tokens)}; expected an object")
        try:
            tokens = TokenInfo.from_dict(tokens)
        except LodUsageError as exc:
            raise _bad(where, f"tensor {name!r}: tokens: {exc}") from None
    return TensorSpec(dtype, dims, level, tuple(names) if names else None, tokens)


def _parse_shard(k: int, raw, specs: dict, where: str) -> ShardInfo:
    if not isinstance(raw, dict):
        raise _bad(where, f"shard {k}: expected an object")
    file = raw.get("file")
    if not isinstance(file, str) or not file or os.path.basename(file) != file or file in (".", "..") \
            or file == MANIFEST_NAME:
        raise _bad(where, f"shard {k}: file {file!r} must be a plain file name inside the folder")
    checksum = raw.get("checksum")
    if not isinstance(checksum, str):
        raise _bad(where, f"shard {k}: checksum is {checksum!r}; expected a string")
    from . import checksum as _checksum  # xxhash: only when a manifest is read

    checksum = _checksum.parse_digest(checksum, f"{where}: shard {k}")
    tensors = raw.get("tensors")
    if not isinstance(tensors, dict) or set(tensors) != set(specs):
        raise _bad(where, f"shard {k}: tensors {sorted(tensors) if isinstance(tensors, dict) else tensors!r} "
                          f"do not match the manifest's {sorted(specs)}")
    counts = {}
    for name, spec in specs.items():
        c = tensors[name]
        if not isinstance(c, dict):
            raise _bad(where, f"shard {k}: tensor {name!r}: expected an object")
        rows = _count(c.get("rows"), where, f"shard {k}: tensor {name!r}: rows")
        levels = c.get("level_sequences")
        if not isinstance(levels, list) or len(levels) != spec.lod_level:
            raise _bad(where, f"shard {k}: tensor {name!r}: level_sequences is {levels!r}; "
                              f"expected {spec.lod_level} counts")
        counts[name] = TensorCounts(rows, tuple(_count(n, where, f"shard {k}: tensor {name!r}: level_sequences")
                                                for n in levels))
        if "sequences" in c and c["sequences"] != counts[name].sequences:
            raise _bad(where, f"shard {k}: tensor {name!r}: sequences {c['sequences']!r} disagrees with its "
                              f"level_sequences / rows ({counts[name].sequences})")
    return ShardInfo(file, checksum, counts)


def parse_manifest(raw, where: str) -> Manifest:
    """Check a manifest's JSON value strictly; return it parsed (``where`` names it in errors).

    >>> m = parse_manifest({"format": "lodtool-sharded", "format_version": "1.0", "shards": [],
    ...                     "tensors": {"t": {"dtype": "<i8", "element_shape": [], "lod_level": 1}}}, "m.json")
    >>> m.names, m.tensors["t"].lod_level
    (['t'], 1)
    """
    if not isinstance(raw, dict) or raw.get("format") != MANIFEST_FORMAT:
        raise _bad(where, f"not a lodtool manifest (its \"format\" is not {MANIFEST_FORMAT!r})")
    version = raw.get("format_version")
    major = version.split(".")[0] if isinstance(version, str) else None
    if major != MANIFEST_VERSION.split(".")[0] or not all(p.isdigit() for p in version.split(".")):
        from ..errors import LodVersionError

        raise LodVersionError(f"{where}: manifest format version {version!r} is not supported "
                              f"(this lodtool reads {MANIFEST_VERSION.split('.')[0]}.x)")
    tensors = raw.get("tensors")
    if not isinstance(tensors, dict) or not tensors:
        raise _bad(where, "\"tensors\" must name at least one tensor")
    specs = {}
    for name, spec in tensors.items():
        _spec.check_tensor_name(name)
        specs[name] = _parse_spec(name, spec, where)
    shards = raw.get("shards")
    if not isinstance(shards, list):
        raise _bad(where, "\"shards\" must be a list")
    parsed = [_parse_shard(k, s, specs, where) for k, s in enumerate(shards)]
    for name, spec in specs.items():  # every reader sums the counts in int64: the totals must fit it
        totals = [sum(s.tensors[name].rows for s in parsed)]
        totals += [sum(s.tensors[name].level_sequences[k] for s in parsed) for k in range(spec.lod_level)]
        if max(totals) > MAX_COUNT:
            raise _bad(where, f"tensor {name!r}: the shards' counts add up to {max(totals)}; at most {MAX_COUNT} "
                              "fit an int64")
    files = [s.file for s in parsed]
    if len(set(files)) != len(files):
        raise _bad(where, "a shard file is named twice")
    created = raw.get("created_by")
    return Manifest(specs, parsed, version, created if isinstance(created, str) else None)


def manifest_path(folder: str | os.PathLike) -> str:
    if storage.is_url(folder):
        return storage.join(folder, MANIFEST_NAME)
    return os.path.join(os.fspath(folder), MANIFEST_NAME)


def folder_file(folder: str | os.PathLike, name: str, *, what: str | None = None, missing_ok: bool = False) -> str:
    """The path of ``name`` (the manifest, or a shard the manifest names) in a sharded folder, checked.

    Every reader and every writer of a folder resolves its manifest and shard
    names here, so nothing reads or writes outside the folder: the entry must
    be a regular file, not a symbolic link (wherever it points) nor anything
    else, else :class:`~lodtool.errors.LodFormatError`.  A missing entry is
    :class:`~lodtool.errors.LodFileNotFoundError` (``what`` names it there),
    or, with ``missing_ok`` (a name about to be written), its path.

    >>> import os, tempfile
    >>> d = tempfile.mkdtemp()
    >>> os.path.basename(folder_file(d, "part-00000.lod.h5", missing_ok=True))
    'part-00000.lod.h5'
    >>> os.symlink("/etc/hostname", os.path.join(d, "lodtool.json"))
    >>> folder_file(d, "lodtool.json")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    lodtool.errors.LodFormatError: .../lodtool.json: is a symbolic link; a sharded folder's manifest and shards ...

    In object storage (a URL) there are no links: the name is joined to the
    folder's URL, and a missing object fails where it is opened.
    """
    if storage.is_url(folder):
        return storage.join(folder, name)
    path = os.path.join(os.fspath(folder), name)
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        if missing_ok:
            return path
        raise LodFileNotFoundError(f"{path}: {what or name} is missing") from None
    except OSError as exc:
        raise LodFormatError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    if stat.S_ISLNK(mode):
        raise LodFormatError(f"{path}: is a symbolic link; a sharded folder's manifest and shards must be files "
                             "inside it, and are never read or written through a link")
    if not stat.S_ISREG(mode):
        raise LodFormatError(f"{path}: is not a regular file; a sharded folder's manifest and shards are files")
    return path


def has_manifest(folder: str | os.PathLike) -> bool:
    """Whether ``folder`` has a manifest entry (a symbolic link counts: it is refused where it is used)."""
    if storage.is_url(folder):
        return storage.exists(manifest_path(folder))
    return os.path.lexists(manifest_path(folder))


def read_manifest(folder: str | os.PathLike) -> Manifest:
    """Read and check ``folder/lodtool.json`` (no shard is opened).

    A folder without a manifest is :class:`~lodtool.errors.LodFileNotFoundError`.
    """
    folder = os.fspath(folder)
    remote = storage.is_url(folder)
    missing = LodFileNotFoundError(f"{storage.redact(folder)}: not a sharded container (no {MANIFEST_NAME}; a write "
                                   "that never finished leaves none)")
    if not remote and not os.path.isdir(folder):
        raise LodFileNotFoundError(f"{folder}: no such folder")
    if not remote and not has_manifest(folder):
        raise missing
    path = manifest_path(folder) if remote else folder_file(folder, MANIFEST_NAME)
    where = storage.redact(path)
    try:
        if remote:
            text = storage.read_bytes(path, 64 << 20)
        else:
            with open(path, "rb") as f:
                text = f.read(64 << 20)
        raw = json.loads(text)
    except LodFileNotFoundError:
        raise missing from None
    except (OSError, ValueError, RecursionError) as exc:
        raise LodFormatError(f"{where}: unreadable manifest ({exc})") from None
    return parse_manifest(raw, where)


def write_manifest(folder: str | os.PathLike, manifest: Manifest) -> None:
    """Write ``folder/lodtool.json`` atomically (temp file, fsync, rename, fsync the folder; in object storage,
    one upload of the whole manifest)."""
    from .writer import _created_by

    manifest.created_by = manifest.created_by or _created_by()
    text = json.dumps(manifest.to_json(), indent=1).encode() + b"\n"
    if storage.is_url(folder):
        import tempfile

        with tempfile.TemporaryDirectory(prefix="lodtool-") as tmp:
            with open(os.path.join(tmp, MANIFEST_NAME), "wb") as f:
                f.write(text)
            _atomic.publish(os.path.join(tmp, MANIFEST_NAME), manifest_path(folder))
        return
    with _atomic.atomic_open(folder_file(folder, MANIFEST_NAME, missing_ok=True), follow_symlinks=False) as f:
        f.write(text)


# -- shards -------------------------------------------------------------------------------------------------
def _tensor_datasets(h5, name: str):
    from .checks import _datasets_of

    group = h5[name]
    level = int(group.attrs.get(_spec.ATTR_LOD_LEVEL, 0))
    return list(_datasets_of(group, max(0, min(level, _spec.MAX_LOD_LEVEL))))


def shard_checksum(path: str | os.PathLike) -> str:
    """``xxh3_64`` over the checksums a container's datasets record, in tensor order (attributes only).

    >>> import os, tempfile, numpy as np
    >>> from lodtool import LoDTensor, save
    >>> p = os.path.join(tempfile.mkdtemp(), "a.lod.h5")
    >>> save(p, LoDTensor(np.arange(3), [[0, 3]]))
    >>> shard_checksum(p).startswith("xxh3_64:")
    True
    """
    from .reader import open_file

    path = os.fspath(path)
    with open_file(path) as f:
        return _recorded_checksum(f, path)


def _recorded_checksum(f, path: str) -> str:
    """:func:`shard_checksum` of a container already open."""
    from . import checksum as _checksum
    from ._h5 import translate

    hasher = _checksum.new_hasher()
    with translate(path, "cannot read the recorded checksums"):
        for name in f.names:
            for ds, label in _tensor_datasets(f.h5, name):
                stored = ds.attrs.get(_spec.ATTR_DIGEST) if ds is not None else None
                if stored is None:
                    raise LodFormatError(f"{path}: {label} has no recorded checksum")
                digest = _checksum.parse_digest(_spec.text_attr(stored), f"{path}: {label}")
                hasher.update(f"{label}={digest}\n".encode())
    return _checksum.format_digest(hasher)


def refuse_foreign_storage(path: str, f) -> None:
    """Refuse a container whose datasets keep their values in other files (external storage, virtual datasets)."""
    from ._h5 import translate

    with translate(path, "cannot check the storage of its datasets"):
        for name in f.names:
            for ds, label in _tensor_datasets(f.h5, name):
                if ds is not None and (ds.is_virtual or ds.external):
                    kind = "a virtual dataset" if ds.is_virtual else "external storage"
                    raise LodFormatError(f"{path}: {label} is {kind} (values in other files); a shard must hold "
                                         "its own data")


def describe_shard(path: str | os.PathLike, file: str | None = None) -> ShardInfo:
    """The manifest entry of a container: its checksum and every tensor's counts (metadata only)."""
    from .reader import open_file

    path = os.fspath(path)
    with open_file(path) as f:
        refuse_foreign_storage(path, f)
        counts = {name: TensorCounts.of(f[name]) for name in f.names}
        checksum = _recorded_checksum(f, path)
    return ShardInfo(file or os.path.basename(path), checksum, counts)


def write_shard(path: str | os.PathLike, tensors: Mapping[str, LoDTensor], *,
                compression: str | None = None) -> ShardInfo:
    """Write one whole shard atomically; return its manifest entry.

    >>> import os, tempfile, numpy as np
    >>> p = os.path.join(tempfile.mkdtemp(), shard_name(0))
    >>> info = write_shard(p, {"t": LoDTensor(np.arange(4), [[0, 1, 4]])})
    >>> info.file, info.tensors["t"].sequences, info.tensors["t"].rows
    ('part-00000.lod.h5', 2, 4)
    """
    from .writer import save

    path = folder_file(*os.path.split(os.fspath(path)), missing_ok=True)
    kwargs = {} if compression is None else {"compression": compression}
    # a shard belongs to its task until the manifest names it: a retried task (a killed worker) rewrites it whole
    with _atomic.intermediate_commit():
        save(path, dict(tensors), force=True, **kwargs)
    return ShardInfo(os.path.basename(path), shard_checksum(path),
                     {name: TensorCounts.of(t) for name, t in tensors.items()})


def _check_same_spec(name: str, want: TensorSpec, got: TensorSpec, where: str) -> None:
    difference = _spec_difference(name, want, got)
    if difference:
        raise LodUsageError(f"{where}: {difference}")


def _spec_difference(name: str, want: TensorSpec, got: TensorSpec, holder: str = "the sharded container") -> str | None:
    """How tensor ``name`` as ``got`` differs from ``want``, what ``holder`` holds (``None``: it does not)."""
    if want == got:
        return None
    if want == dataclasses.replace(got, tokens=want.tokens):
        return f"tensor {name!r} holds ids of {_vocab(got.tokens)}, but {holder} holds ids of {_vocab(want.tokens)}"
    return (f"tensor {name!r} is {got.dtype} {list(got.element_shape)} with {got.lod_level} level(s) "
            f"{got.level_names or ''}, but {holder} holds {want.dtype} {list(want.element_shape)} with "
            f"{want.lod_level} level(s) {want.level_names or ''}")


def _shard_mismatches(f, info: ShardInfo, manifest: Manifest) -> list[tuple[str | None, str]]:
    """``(tensor, what)`` for each way the open shard ``f`` differs from its manifest entry ``info``."""
    out: list[tuple[str | None, str]] = []
    extra = sorted(set(f.names) - set(manifest.names))
    if extra:
        out.append((None, f"tensors {extra} are not in {MANIFEST_NAME}"))
    for name in manifest.names:
        if name not in f.names:
            out.append((name, f"tensor {name!r} is missing; {MANIFEST_NAME} names it"))
            continue
        difference = _spec_difference(name, manifest.tensors[name], TensorSpec.of(f[name]), MANIFEST_NAME)
        if difference:  # first: counts of another kind of tensor say little
            out.append((name, difference))
        got, want = TensorCounts.of(f[name]), info.tensors[name]
        if got != want:
            out.append((name, f"tensor {name!r} holds {got.rows} rows, level sequences {list(got.level_sequences)}; "
                              f"{MANIFEST_NAME} says {want.rows}, {list(want.level_sequences)}"))
    return out


def _vocab(info: TokenInfo | None) -> str:
    return "an unnamed vocabulary" if info is None else info.describe()


def commit_manifest(folder: str | os.PathLike, specs: Mapping[str, TensorSpec], shards: Sequence[ShardInfo], *,
                    append: bool = False, staging: str | None = None) -> Manifest:
    """Write the manifest naming ``shards`` (after the existing ones when ``append``); sweep dead temp files.

    Every shard must already be committed: in the folder, or, for a folder in
    object storage, in ``staging`` (:func:`lodtool.atomic.staging_for`), from
    where each is copied into the folder (inside the store) just before the
    manifest is written; the staging prefix is removed after it.  Without ``append``, shards of an
    earlier manifest that the new one no longer names are removed after it is
    in place.  Temp files of the shards and the manifest whose writers died
    (a killed worker) are removed.  The manifest's rename is the commit point:
    ``SIGINT`` and ``SIGTERM`` wait until the manifest and this cleanup are
    done, then raise :class:`~lodtool.atomic.InterruptedAfterCommit`.
    """
    folder = os.fspath(folder)
    old = read_manifest(folder) if has_manifest(folder) else None
    specs = dict(specs)
    if append and old is not None:
        for name, spec in specs.items():
            if name not in old.tensors:
                raise LodUsageError(f"{folder}: holds tensors {old.names}, not {name!r}")
            _check_same_spec(name, old.tensors[name], spec, folder)
        if set(specs) != set(old.tensors):
            raise LodUsageError(f"{folder}: an appended shard must hold every tensor of {old.names}")
        specs = dict(old.tensors)
        listed = list(old.shards) + list(shards)
    else:
        listed = list(shards)
    for s in shards if staging is not None else ():
        _atomic.copy_object(storage.join(staging, s.file), folder_file(folder, s.file, missing_ok=True))
    for s in listed:
        try:
            folder_file(folder, s.file, what=f"shard {s.file}")
        except LodFileNotFoundError as exc:
            raise LodFileNotFoundError(f"{exc}; the manifest was not written") from None
    manifest = Manifest(specs, listed)
    remote = storage.is_url(folder)
    with _atomic.commit_section(storage.redact(folder)):
        write_manifest(folder, manifest)
        for s in listed if not remote else ():  # object storage keeps no temp files: uploads are whole
            _atomic.sweep_stale_temps(os.path.join(folder, s.file), min_age=0)
        if old is not None and not append:
            kept = {s.file for s in listed}
            for s in old.shards:
                if s.file not in kept:
                    _remove(folder_file(folder, s.file, missing_ok=True))
        if staging is not None:
            _atomic.remove_staging(staging)
    return manifest


def _remove(path: str) -> None:
    """Delete a shard file or object, if it is there."""
    if storage.is_url(path):
        storage.remove(path)
        return
    try:
        os.unlink(path)
    except OSError:
        pass


def remove_uncommitted_shards(folder: str | os.PathLike, paths: Sequence[str | os.PathLike], *,
                              created: bool = False) -> None:
    """After a failed or interrupted write: remove the shards in ``paths`` that the folder's manifest does not name.

    Shards the manifest names were committed with it (the interrupt came after
    its rename) and stay, so the folder holds the old content or the new one,
    never a manifest naming a removed shard.  With ``created`` (the write made
    the folder) the folder is removed too when that leaves it empty.

    >>> import os, tempfile, numpy as np
    >>> d = os.path.join(tempfile.mkdtemp(), "s")
    >>> os.mkdir(d)
    >>> info = write_shard(os.path.join(d, shard_name(0)), {"t": LoDTensor(np.arange(3), [[0, 3]])})
    >>> remove_uncommitted_shards(d, [os.path.join(d, shard_name(0))], created=True)
    >>> os.path.exists(d)
    False
    """
    folder = os.fspath(folder)
    try:
        named = {s.file for s in read_manifest(folder).shards} if has_manifest(folder) else set()
    except LodError:  # no manifest of ours names anything there (ours are written whole)
        named = set()
    for p in paths:
        if os.path.basename(os.fspath(p)) not in named:
            _remove(os.fspath(p))
    if created and not storage.is_url(folder):
        try:
            os.rmdir(folder)
        except OSError:  # something else is in it now: leave it
            pass


def next_shard_index(folder: str | os.PathLike) -> int:
    """The first shard index above every shard file in ``folder`` (``0`` for an empty or new folder)."""
    folder = os.fspath(folder)
    try:
        names = storage.list_names(folder) if storage.is_url(folder) else os.listdir(folder)
    except FileNotFoundError:
        return 0
    found = [i for i in (_shard_index(n) for n in names) if i is not None]
    return max(found) + 1 if found else 0


def prepare_folder(folder: str | os.PathLike, *, append: bool) -> None:
    """Create ``folder`` if needed; refuse a folder holding files that are not lodtool's.

    Appending needs a manifest already there (or an empty folder).  In object
    storage, the staging prefixes that killed writers left for the folder are
    removed first (:func:`lodtool.atomic.sweep_stale_staging`), with any shard
    their commit had copied into the folder that no manifest names.
    """
    folder = os.fspath(folder)
    remote = storage.is_url(folder)
    if remote:  # object storage has no folders: the names under the prefix
        staged = [n for n in _atomic.sweep_stale_staging(folder) if _shard_index(n) is not None]
        if staged:  # a killed writer's commit may have copied some in: those no manifest names go
            remove_uncommitted_shards(folder, [storage.join(folder, n) for n in staged])
        names = storage.list_names(folder)
    else:
        if os.path.exists(folder) and not os.path.isdir(folder):
            raise LodUsageError(f"{folder}: is a file; a sharded output is a folder")
        os.makedirs(folder, exist_ok=True)
        names = os.listdir(folder)
    foreign = [n for n in names if n != MANIFEST_NAME and _shard_index(n) is None and not _atomic.is_temp_path(n)]
    if foreign:
        raise LodUsageError(f"{folder}: holds files that are not shards ({', '.join(sorted(foreign)[:3])}); "
                            "write a sharded container into a new or empty folder")
    for n in names if not remote else ():  # a link named as the manifest or a shard would take a write out of it
        if not _atomic.is_temp_path(n):
            folder_file(folder, n)
    if append and next_shard_index(folder) and not has_manifest(folder):
        raise LodFileNotFoundError(f"{folder}: has shard files but no manifest; cannot append")


# -- splitting ------------------------------------------------------------------------------------------------
def level_bounds(t, start: int, stop: int) -> list[np.ndarray]:
    """Where top-level sequences ``start..stop`` begin and end on every level below the top, then in the rows.

    Each array holds ``stop - start + 1`` positions; the last is in the data
    rows.  Works on a :class:`LoDTensor` or a lazy tensor, from offsets alone.

    >>> t = LoDTensor(np.arange(6), recursive_sequence_lengths=[[2, 1], [3, 1, 2]])
    >>> [b.tolist() for b in level_bounds(t, 0, 2)]
    [[0, 2, 3], [0, 4, 6]]
    """
    if not t.lod_level:
        return [np.arange(start, stop + 1, dtype=np.int64)]
    idx = t.read_offsets(0, start, stop + 1)
    out = [idx]
    for k in range(1, t.lod_level):
        lo = int(idx[0])
        idx = t.read_offsets(k, lo, int(idx[-1]) + 1)[idx - lo]
        out.append(idx)
    return out


def plan_arrays(tensors: Mapping, start: int, stop: int) -> tuple[np.ndarray, list[np.ndarray], list[int]]:
    """For top-level sequences ``start..stop`` of aligned ``tensors``: the bytes each takes, the positions of
    their boundaries on every level strictly between the top and the rows, and those levels' totals.

    A range of top-level sequences is a valid tensor of its own only when it
    holds at least one entry on each of those levels.
    """
    cost = np.zeros(stop - start, np.int64)
    levels: list[np.ndarray] = []
    totals: list[int] = []
    for t in tensors.values():
        bounds = level_bounds(t, start, stop)
        cost += (bounds[-1][1:] - bounds[-1][:-1]) * t.row_bytes + 8 * max(t.lod_level, 1)
        levels.extend(bounds[:-1])
        totals.extend(t.num_sequences(k) for k in range(1, t.lod_level))
    return cost, levels, totals


def _aligned_count(tensors: Mapping, where: str) -> int:
    counts = {name: (t.num_sequences(0) if t.lod_level else int(t.shape[0])) for name, t in tensors.items()}
    if len(set(counts.values())) > 1:
        listing = ", ".join(f"{n}: {c}" for n, c in counts.items())
        raise LodUsageError(f"{where}: the tensors have different numbers of top-level sequences ({listing}); "
                            "shard one of them at a time (name=...)")
    return next(iter(counts.values()))


class ShardWriter:
    """Writes tensors into a sharded folder: whole top-level sequences, a new shard every ``shard_size`` bytes.

    :meth:`write` takes a :class:`LoDTensor` (named ``name``) or a mapping of
    names to tensors with the same number of top-level sequences, any number of
    times; sequences go to the current shard until it holds ``shard_size``
    bytes (logical bytes of rows; a sequence bigger than that is a shard of its
    own).  Each shard is committed atomically when full, and the manifest last,
    by :meth:`commit` (a clean exit of the ``with`` block).  On failure the new
    shards are removed and the folder's manifest is untouched.  For a folder in
    object storage the shards are uploaded to a staging prefix beside it
    (:func:`lodtool.atomic.staging_for`) and copied into it by the commit, just
    before the manifest: a failed or killed write leaves nothing in the folder.  ``append=True``
    adds shards after those of an existing manifest.  ``tokens`` is the token
    metadata of tensor ``name`` where the tensors written carry none (chunks
    read from an input): every shard and the manifest record it.

    >>> import os, tempfile, numpy as np
    >>> d = os.path.join(tempfile.mkdtemp(), "out")
    >>> with ShardWriter(d, shard_size="1KB") as w:
    ...     w.write(LoDTensor(np.arange(300.0), [[0, 100, 200, 300]]))
    >>> [s.tensors["tensor"].rows for s in read_manifest(d).shards]
    [100, 100, 100]
    """

    def __init__(self, folder: str | os.PathLike, *, shard_size: int | str = DEFAULT_SHARD_SIZE,
                 append: bool = False, compression: str | None = None, name: str = "tensor",
                 tokens: TokenInfo | None = None, chunk_bytes: int | None = None):
        self.folder = os.fspath(folder)
        self.chunk_bytes = chunk_bytes  # of each shard's data chunks (None: the writer's default)
        self.tokens = tokens
        self.shard_size = parse_size(shard_size, "shard size")
        self.append = append
        self.compression = compression
        self.name = name
        # removed again by abort() when it stays empty (object storage has no folders to remove)
        self._created = not storage.is_url(self.folder) and not os.path.exists(self.folder)
        prepare_folder(self.folder, append=append)
        existing = read_manifest(self.folder) if append and has_manifest(self.folder) else None
        self.specs: dict = dict(existing.tensors) if existing else {}
        self._index = next_shard_index(self.folder)
        self.shards: list[ShardInfo] = []
        self._paths: list[str] = []  # every shard this writer started: abort() removes those no manifest names
        self._staging: str | None = None  # where shards for object storage wait for the commit (made on first use)
        self._sigterm = _atomic.hold_sigterm()  # SIGTERM runs abort(), as Ctrl-C does
        self._interrupts = _atomic.interrupt_mark()
        self._writer = None
        self._tws: dict = {}
        self._used = 0
        self._counts: dict = {}
        self._open = True

    # the shard being written
    def _start_shard(self) -> None:
        from .writer import LodWriter

        kwargs = {} if self.compression is None else {"compression": self.compression}
        if storage.is_url(self.folder) and self._staging is None:
            self._staging = _atomic.staging_for(self.folder)
        self._path = folder_file(self._staging or self.folder, shard_name(self._index), missing_ok=True)
        self._index += 1
        self._writer = LodWriter(self._path, **kwargs)
        # from here on, a file at this name in the folder is this writer's (its rename, or the commit's copy, makes it)
        self._paths.append(folder_file(self.folder, shard_name(self._index - 1), missing_ok=True))
        self._tws = {name: self._writer.add_tensor(name, dtype=s.dtype, element_shape=s.element_shape,
                                                   lod_level=s.lod_level, level_names=s.level_names,
                                                   tokens=s.tokens, chunk_bytes=self.chunk_bytes)
                     for name, s in self.specs.items()}
        self._used = 0
        self._counts = {name: [0, [0] * s.lod_level] for name, s in self.specs.items()}

    def end_shard(self) -> None:
        """Commit the shard being written now (if any); the next sequences start a new shard."""
        if self._writer is None:
            return
        writer, self._writer = self._writer, None
        self._used = 0
        try:
            with _atomic.intermediate_commit():
                writer.commit()
        except LodExistsError:  # another writer made a shard of this name meanwhile: it is not this one's to remove
            self._paths.pop()
            raise
        counts = {name: TensorCounts(rows, tuple(levels)) for name, (rows, levels) in self._counts.items()}
        self.shards.append(ShardInfo(os.path.basename(self._path), shard_checksum(self._path), counts))

    def _append(self, part: Mapping[str, LoDTensor], cost: int) -> None:
        _atomic.raise_if_interrupted_since(self._interrupts)
        if self._writer is None:
            self._start_shard()
        for name, t in part.items():
            self._tws[name].append(t)
            c = self._counts[name]
            c[0] += int(t.shape[0])
            c[1] = [n + t.num_sequences(k) for k, n in enumerate(c[1])]
        self._used += cost

    def _specs_from(self, tensors: Mapping) -> None:
        got = {name: TensorSpec.of(t) for name, t in tensors.items()}
        if self.tokens is not None and self.name in got and got[self.name].tokens is None:
            got[self.name] = dataclasses.replace(got[self.name], tokens=self.tokens)
        if not self.specs:
            self.specs = got
            return
        if set(got) != set(self.specs):
            raise LodUsageError(f"{self.folder}: holds tensors {sorted(self.specs)}, got {sorted(got)}")
        for name, spec in got.items():  # every shard must match the manifest: no shard promotes on its own
            _check_same_spec(name, self.specs[name], spec, self.folder)
            if spec.tokens is not None and spec.tokens.tokenizer_json is not None:
                self.specs[name] = spec  # equal, and it carries the tokenizer's JSON for the new shards

    def write(self, tensors: LoDTensor | Mapping[str, LoDTensor]) -> None:
        """Add whole top-level sequences (lazy tensors work too: they are read a chunk at a time)."""
        if not self._open:
            raise LodUsageError(f"{self.folder}: this shard writer is already finished")
        if isinstance(tensors, Mapping):
            tensors = dict(tensors)
        else:
            tensors = {self.name: tensors}
        self._specs_from(tensors)
        n = _aligned_count(tensors, self.folder)
        a = 0
        while a < n:
            stop = min(a + PLAN_WINDOW, n)
            while True:  # widen the window until a valid cut (or the end) is inside it
                cost, levels, totals = plan_arrays(tensors, a, stop)
                b = self._cut(cost, levels, totals, n - a)
                if b is not None or stop == n:
                    break
                stop = min(a + 2 * (stop - a), n)
            if b == 0:  # the next sequences do not fit in this shard: start the next one
                self.end_shard()
                continue
            b = n - a if b is None else b
            part = {name: t[a:a + b] for name, t in tensors.items()}
            self._append(part, int(cost[:b].sum()))
            del part
            if self._used >= self.shard_size:
                self.end_shard()
            a += b

    def _cut(self, cost: np.ndarray, levels: list[np.ndarray], totals: list[int], remaining: int) -> int | None:
        """How many of the planned sequences go next (``0``: close the shard first; ``None``: plan further).

        As many as the shard's room and the chunk budget allow, at least one;
        then more until the piece holds an entry on every level below the top;
        and all that remain when what would be left holds none on some level.
        """
        ends = np.concatenate(([0], np.cumsum(cost)))
        room = self.shard_size - self._used
        b = int(np.searchsorted(ends, min(room, STREAM_CHUNK_BYTES), side="right")) - 1
        if b < 1:
            if self._used and cost[0] > room:
                return 0
            b = 1
        for pos in levels:
            need = int(np.searchsorted(pos, pos[0], side="right"))
            if need >= len(pos):
                return None
            b = max(b, need)
        if b < remaining and any(int(pos[b]) >= total for pos, total in zip(levels, totals)):
            return remaining
        return b

    def commit(self) -> Manifest:
        """Commit the last shard, then the manifest naming every shard."""
        if not self._open:
            raise LodUsageError(f"{self.folder}: this shard writer is already finished")
        try:
            _atomic.raise_if_interrupted_since(self._interrupts)
            self.end_shard()
            if not self.specs:
                raise LodUsageError(f"{self.folder}: nothing was written")
            manifest = commit_manifest(self.folder, self.specs, self.shards, append=self.append,
                                       staging=self._staging)
        except BaseException:
            self.abort()
            raise
        self._open = False
        _atomic.release_sigterm(self._sigterm)
        self._sigterm = False
        return manifest

    def abort(self) -> None:
        """Remove the shards this writer made that no manifest names; the folder's manifest is untouched."""
        self._open = False
        if self._writer is not None:
            self._writer.abort()
            self._writer = None
        if self._staging is not None:
            _atomic.remove_staging(self._staging)
            self._staging = None
        remove_uncommitted_shards(self.folder, self._paths, created=self._created)
        self._paths = []
        self.shards = []
        _atomic.release_sigterm(self._sigterm)
        self._sigterm = False

    def __enter__(self) -> "ShardWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()


def shard_file(path: str | os.PathLike, folder: str | os.PathLike, *, shard_size: int | str = DEFAULT_SHARD_SIZE,
               name: str | None = None, compression: str | None = None, append: bool = False,
               max_memory: int | None = None) -> Manifest:
    """Split a container (or a sharded folder) into shards of about ``shard_size`` bytes.

    Every tensor is sharded (they must have the same number of top-level
    sequences), or only ``name``.  The LoD is validated first; then ranges of
    whole top-level sequences are planned from the offsets alone and read one
    chunk at a time.

    >>> import os, tempfile, numpy as np
    >>> from lodtool import save
    >>> d = tempfile.mkdtemp()
    >>> save(os.path.join(d, "a.lod.h5"), LoDTensor(np.arange(10), [[0, 3, 5, 9, 10]]))
    >>> m = shard_file(os.path.join(d, "a.lod.h5"), os.path.join(d, "shards"), shard_size=64)
    >>> [s.tensors["tensor"].sequences for s in m.shards]
    [2, 2]
    """
    with open_path(path, max_memory=max_memory) as f:
        names = [name] if name is not None else f.names
        tensors = {n: f[n] for n in names}
        for n, t in tensors.items():
            problems = t.validate(max_problems=1)
            if problems:
                raise LodValidationError(f"{f.path}: tensor {n!r}: {problems[0]}")
        with ShardWriter(folder, shard_size=shard_size, compression=compression, append=append) as w:
            w.write(tensors)
    return read_manifest(folder)


def merge(folder: str | os.PathLike, output: str | os.PathLike, *, compression: str | None = None,
          max_memory: int | None = None, overwrite: bool = False, force: bool = False) -> None:
    """Join a sharded folder into one container (level names kept), streamed chunk by chunk, atomically; a container
    file is copied the same way (a repack: into the layout and compression the writer is given).

    Into an existing container the tensors are added by :func:`lodtool.save`'s
    rule: one of the same name needs ``overwrite``; ``force`` replaces the file.

    >>> import os, tempfile, numpy as np
    >>> from lodtool import load
    >>> d = tempfile.mkdtemp()
    >>> t = LoDTensor(np.arange(10), [[0, 3, 5, 9, 10]], level_names=["doc"])
    >>> with ShardWriter(os.path.join(d, "s"), shard_size=24) as w:
    ...     w.write(t)
    >>> merge(os.path.join(d, "s"), os.path.join(d, "m.lod.h5"))
    >>> load(os.path.join(d, "m.lod.h5")).equals(t)
    True
    """
    from .writer import LodWriter

    kwargs = {} if compression is None else {"compression": compression}
    with LodWriter(output, overwrite=overwrite, force=force, **kwargs) as w:
        merge_into(folder, w, max_memory=max_memory)


def merge_into(folder: str | os.PathLike, writer, *, max_memory: int | None = None) -> None:
    """Stream every tensor of a sharded folder, or of a container file (a repack, into the writer's layout), into an
    open :class:`~lodtool.container.writer.LodWriter`.

    >>> import os, tempfile, numpy as np
    >>> from lodtool import load
    >>> from lodtool.container.writer import LodWriter
    >>> d = tempfile.mkdtemp()
    >>> with ShardWriter(os.path.join(d, "s"), shard_size=16) as w:
    ...     w.write(LoDTensor(np.arange(6), [[0, 2, 6]]))
    >>> with LodWriter(os.path.join(d, "m.lod.h5")) as out:
    ...     merge_into(os.path.join(d, "s"), out)
    >>> load(os.path.join(d, "m.lod.h5")).lod
    [[0, 2, 6]]
    """
    with open_path(folder, max_memory=max_memory) as f:
        for name in f.names:
            t = f[name]
            tw = writer.add_tensor(name, dtype=t.dtype, element_shape=t.element_shape, lod_level=t.lod_level,
                                   level_names=t.level_names, tokens=t.tokens)
            for chunk in t.iter_chunks(max_rows=max(1, STREAM_CHUNK_BYTES // max(t.row_bytes, 1))):
                tw.append(chunk)


# -- reading --------------------------------------------------------------------------------------------------
class ShardedTensor(TensorView):
    """One tensor of a sharded folder, read lazily as one logical tensor.

    It is a :class:`~lodtool.tensor.TensorView` over global positions, like
    :class:`~lodtool.container.reader.LazyTensor` for one file: sizes, dtype,
    offsets windows and row ranges, branches, level slices, head, tail, chunks
    of whole top-level sequences, validation and level statistics.  A
    read maps its range onto the shards through the manifest's counts and opens
    only the shards it touches.
    """

    def __init__(self, file: "ShardedFile", name: str):
        self._file = file
        self.name = name
        spec = file.manifest.tensors[name]
        self._spec = spec
        self._path = file.path
        counts = [s.tensors[name] for s in file.manifest.shards]
        rows = np.array([c.rows for c in counts], np.int64)
        self._rows_at = np.concatenate(([0], np.cumsum(rows)))
        self._seq_at = [np.concatenate(([0], np.cumsum([c.level_sequences[k] for c in counts]).astype(np.int64)))
                        for k in range(spec.lod_level)]
        self._n_rows = int(self._rows_at[-1])
        #: storage size, mappable and compression, as the last pass over every shard found them
        self._noted: dict = {}

    # -- metadata ------------------------------------------------------------------------------------------
    lod_level = property(lambda self: self._spec.lod_level)
    level_names = property(lambda self: self._spec.level_names)
    dtype = property(lambda self: self._spec.dtype)
    element_shape = property(lambda self: self._spec.element_shape)
    n_rows = property(lambda self: self._n_rows)

    @property
    def tokens(self) -> TokenInfo | None:
        """The token metadata of the manifest, with the tokenizer's JSON where the first shard stores it."""
        info = self._spec.tokens
        if info is None or info.tokenizer_hash is None or not self._file.manifest.shards:
            return info
        stored = self._file._shard_tensor(0, self.name)[1].tokens
        return stored if stored is not None and stored == info else info

    @property
    def n_shards(self) -> int:
        return len(self._rows_at) - 1

    @property
    def level_sizes(self) -> list[int]:
        """Entries of each level's (global) offsets: its sequences + 1."""
        return [int(s[-1]) + 1 for s in self._seq_at]

    @property
    def nbytes(self) -> int:
        return self._n_rows * self.row_bytes + 8 * sum(self.level_sizes)

    @property
    def storage_size(self) -> int:
        if "storage_size" in self._noted:
            return self._noted["storage_size"]
        return sum(self.shard(i)[1].storage_size for i in range(self.n_shards))

    @property
    def compression(self) -> str:
        if "compression" in self._noted:
            return self._noted["compression"]
        return self.shard(0)[1].compression if self.n_shards else "none"

    @property
    def compression_level(self) -> int | None:
        if "compression_level" in self._noted:
            return self._noted["compression_level"]
        return self.shard(0)[1].compression_level if self.n_shards else None

    @property
    def mappable(self) -> bool:
        """Whether every shard's data is read from a memory map (see ``LazyTensor.mappable``)."""
        if "mappable" in self._noted:
            return self._noted["mappable"]
        return all(self.shard(i)[1].mappable for i in range(self.n_shards))

    def __repr__(self) -> str:
        return (f"<ShardedTensor {self.name!r} shape={self.shape} dtype={self.dtype} lod_level={self.lod_level} "
                f"shards={self.n_shards} folder={self._path!r}>")

    def shard(self, i: int):
        """``(path, lazy tensor)`` of shard ``i`` (opened on first use, checked against the manifest)."""
        return self._file._shard_tensor(i, self.name)

    def shard_ranges(self) -> list[tuple[str, int, int]]:
        """``(shard path, first, stop)`` of each shard's top-level sequences in global numbering.

        Every shard is checked against the manifest first (:meth:`ShardedFile.check_shards`): a caller that
        reads the shards by these paths on its own reads what the manifest describes.
        """
        self._file.check_shards()
        at = self._seq_at[0] if self.lod_level else self._rows_at
        return [(self._file.shard_path(i), int(at[i]), int(at[i + 1])) for i in range(self.n_shards)]

    # -- raw reads -------------------------------------------------------------------------------------------
    def _pieces(self, at: np.ndarray, start: int, stop: int) -> Iterator[tuple[int, int, int]]:
        """``(shard, local start, local stop)`` covering global ``start..stop``; shard ``i`` starts at ``at[i]``."""
        pos = start
        while pos < stop:
            i = int(np.searchsorted(at, pos, side="right")) - 1
            end = min(stop, int(at[i + 1]))
            yield i, pos - int(at[i]), end - int(at[i])
            pos = end

    def _window(self, level: int, start: int, stop: int) -> np.ndarray:
        """Entries ``start..stop`` of level ``level``'s global offsets (each shard's, shifted by what precedes it)."""
        at = self._seq_at[level]
        count = int(at[-1])
        below = self._seq_at[level + 1] if level + 1 < self.lod_level else self._rows_at
        if 8 * (stop - start) > self._file.max_memory:
            check_memory(8 * (stop - start), self._file.max_memory, self._path, f"{self.name!r} level {level} offsets")
        out = np.empty(stop - start, np.int64)
        for i, a, b in self._pieces(at, start, min(stop, count)):
            out[int(at[i]) + a - start:int(at[i]) + b - start] = self.shard(i)[1].read_offsets(level, a, b) + below[i]
        if stop == count + 1 and stop > start:
            out[-1] = int(below[-1])
        return out

    def _rows(self, begin: int, end: int) -> np.ndarray:
        """Data rows ``begin..end`` (global), read from each shard they fall in."""
        if (end - begin) * self.row_bytes > self._file.max_memory:
            check_memory((end - begin) * self.row_bytes, self._file.max_memory, self._path,
                         f"{end - begin:,} rows of tensor {self.name!r}")
        parts = [self.shard(i)[1].read_rows(a, b) for i, a, b in self._pieces(self._rows_at, begin, end)]
        if not parts:
            return np.empty((0,) + self.element_shape, self.dtype)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    # -- branches and slices -----------------------------------------------------------------------------
    def branch(self, *path: int) -> LoDTensor:
        """The ``<i,j,...>``-slice: the manifest finds the shard, then one partial read there."""
        if not self.lod_level:
            raise LodIndexError("a 0-level tensor has no branches; slice its rows with numpy")
        if not path:
            raise LodIndexError("an empty path selects no branch")
        n = len(self)
        i = path[0]
        if not isinstance(i, (int, np.integer)) or not -n <= i < n:
            valid = f"valid: {-n}..{n - 1}" if n else "it is empty"
            raise LodIndexError(f"level 0: index {i} is out of range ({valid})")
        i = int(i) + n if i < 0 else int(i)
        at = self._seq_at[0]
        s = int(np.searchsorted(at, i, side="right")) - 1
        return self.shard(s)[1].branch(i - int(at[s]), *path[1:])

    # -- whole reads -------------------------------------------------------------------------------------
    def read(self) -> LoDTensor:
        """The whole tensor, every shard validated; its size is checked against the memory limit first."""
        check_memory(self.nbytes, self._file.max_memory, self._path, f"tensor {self.name!r}")
        parts = [self.shard(i)[1].read() for i in range(self.n_shards)]
        return concat_tensors(parts, self.level_names) if parts else self.head(0)  # no shards: zero sequences

    def validate(self, max_problems: int = 20) -> list[_lod.LodProblem]:
        """Every broken LoD rule of every shard (indices are global positions)."""
        out: list[_lod.LodProblem] = []
        for i in range(self.n_shards):
            out += self._shard_problems(i, max_problems - len(out))
            if len(out) >= max_problems:
                return out
        return out

    def _shard_problems(self, i: int, max_problems: int) -> list[_lod.LodProblem]:
        """Shard ``i``'s broken LoD rules, at global positions and naming the shard."""
        out = []
        for p in self.shard(i)[1].validate(max_problems=max_problems):
            shift = int(self._seq_at[p.level][i]) if p.index is not None and p.level < self.lod_level else 0
            out.append(_lod.LodProblem(p.level, None if p.index is None else p.index + shift,
                                       f"{p.message} (in {self._file.manifest.shards[i].file})"))
        return out

    def checked_level_stats(self) -> list[dict]:
        """:meth:`level_stats` of every level, each shard validated first, in one pass over the shards.

        A folder of more shards than stay open would otherwise open each one
        again for every level; the pass also notes the shards' storage size,
        whether they map and their compression, which ``inspect`` asks for next.
        """
        limit, where, what = self._stats_context()
        levels = [_lod.LengthStats(limit, where, f"{what}level {k} lengths") for k in range(self.lod_level)]
        noted = {"storage_size": 0, "mappable": True}
        for i in range(self.n_shards):
            problems = self._shard_problems(i, 1)
            if problems:
                raise self._problem_error(problems[0])
            part = self.shard(i)[1]
            for k, stats in enumerate(levels):
                stats.restart()  # a shard's offsets start at its own zero
                for block in part.offset_blocks(k):
                    stats.add(block)
            noted["storage_size"] += part.storage_size
            noted["mappable"] = noted["mappable"] and part.mappable
            if i == 0:
                noted.update(compression=part.compression, compression_level=part.compression_level)
        self._noted = noted
        return [stats.result() for stats in levels]

    def iter_chunks(self, max_rows: int = 1 << 22) -> Iterator[LoDTensor]:
        """Chunks of whole top-level sequences, shard after shard (a chunk never spans two shards).

        The whole folder is checked before the first chunk, as a single file's
        LoD is: every shard against the manifest, and every shard's LoD, so a
        broken folder fails before a streaming writer has written a byte.
        """
        self._check_valid()
        at = self._seq_at[0] if self.lod_level else self._rows_at
        for i in range(self.n_shards):
            if at[i + 1] > at[i]:  # a shard of no top-level sequences gives no chunk
                yield from self.shard(i)[1].iter_chunks(max_rows=max_rows)

    def _stats_context(self) -> tuple[int, str, str]:
        return self._file.max_memory, self._path, f"tensor {self.name!r} "


class ShardedFile(TensorSource):
    """An open sharded folder: the manifest, tensor names, and sharded tensors by name.

    Shards are opened on first use (at most :data:`OPEN_SHARDS` at once) and
    checked against the manifest: sizes that disagree, a missing shard, a
    shard that is a symbolic link, or external / virtual storage are
    :class:`~lodtool.errors.LodFormatError`.
    """

    def __init__(self, path: str, *, max_memory: int | None = None):
        #: the folder as messages name it (a URL without its credentials)
        self.path = storage.redact(path) if storage.is_url(path) else path
        self._folder = path
        #: the storage options in force when the folder was opened: its shards open later, with the same
        self._storage_options = dict(storage.current_options())
        self.manifest = read_manifest(path)
        self.max_memory = resolve_max_memory(max_memory)
        self.names = self.manifest.names
        self.format_version = self.manifest.format_version
        self.created_by = self.manifest.created_by
        self.checksum_algorithm = _spec.CHECKSUM_ALGORITHM
        self._open: dict = {}
        self._tensors: dict = {}
        self._layouts: dict[int, dict] = {}  # each shard's, noted when it is first opened

    def shard_path(self, i: int) -> str:
        """The path of shard ``i``, checked by :func:`folder_file` (a regular file inside the folder)."""
        return folder_file(self._folder, self.manifest.shards[i].file, what=f"shard {i} named by {MANIFEST_NAME}")

    def check_shards(self) -> None:
        """Open every shard and check it against the manifest (names, dtype, shape, levels, counts, storage).

        Metadata only; what a reader that streams a whole folder runs before its first byte.
        """
        for i in range(len(self.manifest.shards)):
            self._shard_file(i)

    def _shard_file(self, i: int):
        from .reader import open_file

        if i in self._open:
            return self._open[i]
        path = self.shard_path(i)
        if len(self._open) >= OPEN_SHARDS:
            oldest = next(iter(self._open))
            self._open.pop(oldest).close()
        with storage.options(self._storage_options):
            f = open_file(path, max_memory=self.max_memory)
        try:
            refuse_foreign_storage(path, f)
            found = _shard_mismatches(f, self.manifest.shards[i], self.manifest)
            if found:
                raise LodFormatError(f"{path}: {found[0][1]}")
        except BaseException:
            f.close()
            raise
        if i not in self._layouts:
            from .checks import layout_summary

            self._layouts[i] = layout_summary(f.h5)
        self._open[i] = f
        return f

    def shard_layout(self, i: int) -> dict:
        """Shard ``i``'s layout as ``inspect`` words it (noted when the shard was first opened)."""
        if i not in self._layouts:
            self._shard_file(i)
        return self._layouts[i]

    def _shard_tensor(self, i: int, name: str):
        return self.shard_path(i), self._shard_file(i)[name]

    def __getitem__(self, name: str) -> ShardedTensor:
        if name not in self.names:
            listing = ", ".join(repr(n) for n in self.names)
            raise LodFileNotFoundError(f"{self.path}: no tensor named {name!r} (tensors: {listing})")
        if name not in self._tensors:
            self._tensors[name] = ShardedTensor(self, name)
        return self._tensors[name]

    def tensor(self, name: str | None = None) -> ShardedTensor:
        """Tensor ``name``; with ``None``, the only tensor of the folder."""
        if name is not None:
            return self[name]
        if len(self.names) == 1:
            return self[self.names[0]]
        raise LodUsageError(f"{self.path} holds {len(self.names)} tensors ({', '.join(self.names)}); "
                            "name one (name=...)")

    def shared_lod_with(self, name: str) -> list[str]:
        return []

    def close(self) -> None:
        for f in self._open.values():
            f.close()
        self._open.clear()
        self._tensors.clear()

    def __repr__(self) -> str:
        return (f"<ShardedFile {self.path!r} v{self.format_version} tensors={self.names} "
                f"shards={len(self.manifest.shards)}>")


def open_sharded(path: str | os.PathLike, *, max_memory: int | None = None) -> ShardedFile:
    """Open a sharded folder lazily (only the manifest is read).

    >>> import os, tempfile, numpy as np
    >>> d = os.path.join(tempfile.mkdtemp(), "s")
    >>> with ShardWriter(d) as w:
    ...     w.write(LoDTensor(np.arange(3), [[0, 2, 3]]))
    >>> with open_sharded(d) as f:
    ...     f.names, len(f.manifest.shards)
    (['tensor'], 1)
    """
    return ShardedFile(os.fspath(path), max_memory=max_memory)


def open_path(path: str | os.PathLike, *, max_memory: int | None = None):
    """Open a container file, or a sharded folder, for reading: a :class:`LodFile` or a :class:`ShardedFile`.

    >>> import os, tempfile, numpy as np
    >>> from lodtool import save
    >>> p = os.path.join(tempfile.mkdtemp(), "a.lod.h5")
    >>> save(p, LoDTensor(np.arange(3), [[0, 3]]))
    >>> with open_path(p) as f:
    ...     len(f.tensor())
    1
    """
    from .reader import open_file

    path = storage.local_path(os.fspath(path))
    with storage.remembered_info():  # a URL's kind and size are asked for once
        if is_sharded(path):
            return open_sharded(path, max_memory=max_memory)
        return open_file(path, max_memory=max_memory)


# -- checks ---------------------------------------------------------------------------------------------------
def validate_sharded(path: str | os.PathLike, *, max_problems: int = 20, max_memory: int | None = None,
                     vocab_size: int | None = None):
    """Validate every shard, plus the manifest against the shards: a ``FileReport`` for the folder.

    Problems name the shard (or the manifest) they come from; ``vocab_size`` is
    :func:`~lodtool.container.checks.validate_file`'s, for every shard.

    >>> import os, tempfile, numpy as np
    >>> d = os.path.join(tempfile.mkdtemp(), "s")
    >>> with ShardWriter(d, shard_size=16) as w:
    ...     w.write(LoDTensor(np.arange(6), [[0, 2, 4, 6]]))
    >>> validate_sharded(d).ok
    True
    """
    from .checks import FileReport, Problem, validate_open_file
    from .reader import open_file

    path = os.fspath(path)
    problems: list = []
    errors: list[str] = []
    try:
        manifest = read_manifest(path)
    except (LodFormatError, LodFileNotFoundError) as exc:
        return FileReport(path, False, [], str(exc).removeprefix(f"{path}: "))
    mpath = manifest_path(path)
    for info in manifest.shards:
        spath = os.path.join(path, info.file)
        try:
            folder_file(path, info.file, what=f"shard {info.file}")
        except (LodFormatError, LodFileNotFoundError) as exc:  # "shard F is missing", "shard F is a symbolic link"
            what = str(exc).removeprefix(f"{spath}: ")
            problems.append(Problem(mpath, None, None, None, what if what.startswith("shard ") else
                                    f"shard {info.file} {what}"))
            continue
        with open_file(spath, max_memory=max_memory) as f:  # once: the shard's checks, then the manifest's
            report = validate_open_file(f, spath, max_problems=max_problems, vocab_size=vocab_size)
            problems.extend(report.problems)
            if report.error:
                errors.append(f"{info.file}: {report.error}")
                continue
            try:
                refuse_foreign_storage(spath, f)
                found = _shard_mismatches(f, info, manifest)
                checksum = _recorded_checksum(f, spath)
            except (LodFormatError, LodFileNotFoundError) as exc:
                errors.append(str(exc))
                continue
        problems += [Problem(spath, name, None, None, what) for name, what in found]
        if checksum != info.checksum:
            problems.append(Problem(spath, None, None, None, f"checksum {checksum}; {MANIFEST_NAME} records "
                                    f"{info.checksum}"))
    error = "; ".join(errors) if errors else None
    return FileReport(path, not problems and error is None, problems, error)


def verify_sharded(path: str | os.PathLike) -> list:
    """Recompute every shard's dataset checksums and compare each shard's checksum with the manifest's.

    Returns the mismatches (``[]``: all good); dataset names carry the shard's file name.

    >>> import os, tempfile, numpy as np
    >>> d = os.path.join(tempfile.mkdtemp(), "s")
    >>> with ShardWriter(d, shard_size=16) as w:
    ...     w.write(LoDTensor(np.arange(6), [[0, 2, 4, 6]]))
    >>> verify_sharded(d)
    []
    """
    from .checks import ChecksumMismatch, verify_file

    path = os.fspath(path)
    manifest = read_manifest(path)
    out = []
    for info in manifest.shards:
        try:
            spath = folder_file(path, info.file)
        except (LodFormatError, LodFileNotFoundError):
            out.append(ChecksumMismatch(info.file, info.checksum, None, "missing, or not a regular file"))
            continue
        for m in verify_file(spath):
            out.append(ChecksumMismatch(f"{info.file}:{m.dataset}", m.expected, m.actual, m.error))
        actual = shard_checksum(spath)
        if actual != info.checksum:
            out.append(ChecksumMismatch(info.file, info.checksum, actual))
    return out


def _size(path: str) -> int:
    return int(storage.info(path).get("size") or 0) if storage.is_url(path) else os.path.getsize(path)


def inspect_sharded(path: str | os.PathLike) -> dict:
    """A JSON-able description of a sharded folder (metadata and offsets only), shaped like ``inspect_file``'s.

    >>> import os, tempfile, numpy as np
    >>> d = os.path.join(tempfile.mkdtemp(), "s")
    >>> with ShardWriter(d, shard_size=16) as w:
    ...     w.write(LoDTensor(np.arange(6), [[0, 2, 4, 6]]))
    >>> info = inspect_sharded(d)
    >>> info["shards"], info["tensors"][0]["rows"], info["tensors"][0]["levels"][0]["sequences"]
    (3, 6, 3)
    """
    from .checks import tensor_summary

    path = os.fspath(path)
    with open_sharded(path) as f:
        tensors = [tensor_summary(name, f[name], []) for name in f.names]
        size = sum(_size(f.shard_path(i)) for i in range(len(f.manifest.shards)))
        layouts = [f.shard_layout(i) for i in range(len(f.manifest.shards))]
        layout = layouts[0] if layouts and all(x == layouts[0] for x in layouts) else \
            {"layout": "mixed" if layouts else None, "page_size": None,
             "remote_ready": bool(layouts) and all(x["remote_ready"] for x in layouts)}
        return {"path": storage.redact(path), "format": MANIFEST_FORMAT, "format_version": f.format_version,
                "created_by": f.created_by, "checksum": _spec.CHECKSUM_ALGORITHM,
                "file_size": size + _size(manifest_path(path)), "shards": len(f.manifest.shards),
                **layout, "tensors": tensors}


__all__ = ["MANIFEST_NAME", "MANIFEST_FORMAT", "MANIFEST_VERSION", "DEFAULT_SHARD_SIZE", "shard_name",
           "is_sharded", "TensorSpec", "TensorCounts", "ShardInfo", "Manifest", "parse_manifest", "read_manifest",
           "write_manifest", "folder_file", "has_manifest", "shard_checksum", "describe_shard", "write_shard",
           "commit_manifest", "remove_uncommitted_shards", "prepare_folder",
           "next_shard_index", "level_bounds", "plan_arrays", "ShardWriter", "shard_file", "merge", "merge_into",
           "concat_tensors",
           "ShardedTensor", "ShardedFile", "open_sharded", "open_path", "validate_sharded", "verify_sharded",
           "inspect_sharded"]
