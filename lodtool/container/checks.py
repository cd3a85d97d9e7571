"""Whole-file checks of a container: :func:`validate_file`, :func:`inspect_file` and :func:`verify_file`.

Each reports on one file (:class:`FileReport`, a dict, or a list of
:class:`ChecksumMismatch`); :mod:`lodtool.tasks` runs them over many files,
optionally isolated.  The format is specified in ``docs/format.md``.

>>> import os, tempfile, numpy as np
>>> from lodtool import LoDTensor
>>> from lodtool.container import load, save
>>> path = os.path.join(tempfile.mkdtemp(), "articles.lod.h5")
>>> t = LoDTensor(np.arange(1, 16), recursive_sequence_lengths=[[3, 1, 2], [3, 2, 4, 1, 2, 3]])
>>> save(path, {"tokens": t})
>>> load(path).equals(t), validate_file(path).ok, verify_file(path)
(True, True, [])
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import tempfile
import weakref
from dataclasses import dataclass, field
from typing import Callable, Iterator

import h5py
import numpy as np

from .. import storage
from ..errors import LodFormatError
from . import spec
from ._h5 import (H5_ERRORS, READ_CACHE, chunk_layout_problem, chunk_nbytes, file_layout, foreign_storage, hard_member,
                  object_key, oversized_chunk, remote_source, storage_gap, translate)
from .filters import ensure_readable, foreign_filter_names
from ..limits import STREAM_CHUNK_BYTES, default_max_memory, human_bytes
from .reader import bounded_metadata_cache, declared_lod_level, open_file

# -- validate ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Problem:
    """One problem of a file: where (tensor, level, offset index) and what."""

    file: str
    tensor: str | None
    level: int | None
    index: int | None
    message: str

    def __str__(self) -> str:
        where = [f"tensor {self.tensor!r}"] if self.tensor is not None else []
        if self.level is not None:
            where.append(f"level {self.level}")
        if self.index is not None:
            where.append(f"index {self.index}")
        return f"{self.file}: {', '.join(where)}: {self.message}" if where else f"{self.file}: {self.message}"


@dataclass
class FileReport:
    """The result of validating one file: ``ok``, the problems, or ``error`` if reading broke off (or never began).

    ``paddle_valid``: the file is valid and Paddle would accept every tensor's
    LoD too (its rule also asks for at least one sequence per level; see
    :func:`lodtool.lod.check_paddle_lod`).

    >>> FileReport("x.lod.h5", False, error="not an HDF5 file").to_dict()
    {'path': 'x.lod.h5', 'ok': False, 'paddle_valid': False, 'error': 'not an HDF5 file', 'problems': []}
    """

    path: str
    ok: bool
    problems: list[Problem] = field(default_factory=list)
    error: str | None = None
    paddle_valid: bool = False

    def __post_init__(self) -> None:
        self.path = storage.redact(self.path)  # a URL is shown without its credentials

    def to_dict(self) -> dict:
        return {"path": self.path, "ok": self.ok, "paddle_valid": self.paddle_valid, "error": self.error,
                "problems": [dataclasses.asdict(p) if dataclasses.is_dataclass(p) else {"message": str(p)}
                             for p in self.problems]}


def validate_file(path: str | os.PathLike, *, max_problems: int = 20, max_memory: int | None = None,
                  vocab_size: int | None = None) -> FileReport:
    """Check a container against the format and the LoD rules, reading offsets only (the data only for the
    token ids, see :func:`token_id_problems`: ``vocab_size``, else the vocabulary a tensor records).

    The split: a file that opens as a lodtool container is always *reported*
    on, never raised about.  Layout problems (missing members, float offsets,
    bad attributes, missing checksums) and LoD problems (first offset, order,
    counts across levels, data rows) become :class:`Problem` entries (up to
    ``max_problems`` per level); an I/O failure part-way (a damaged chunk) sets
    ``error``.  Only a file that cannot be opened as a container at all raises:
    :class:`~lodtool.errors.LodFileNotFoundError` if missing,
    :class:`~lodtool.errors.LodFormatError` (or ``LodVersionError``) otherwise.

    >>> import os, tempfile, numpy as np, h5py
    >>> from lodtool import LoDTensor
    >>> from lodtool.container.writer import save
    >>> p = os.path.join(tempfile.mkdtemp(), "x.lod.h5")
    >>> save(p, LoDTensor(np.arange(3), [[0, 2, 3]]))
    >>> with h5py.File(p, "r+") as f:
    ...     f["tensor/lod/0"][1] = 5
    >>> report = validate_file(p)
    >>> report.ok, [str(pr).split(": ", 1)[1] for pr in report.problems]
    (False, ["tensor 'tensor', level 0, index 2: offset[2]=3 < offset[1]=5 (offsets must not decrease)"])
    """
    path = os.fspath(path)
    with open_file(path, max_memory=max_memory) as f:
        return validate_open_file(f, path, max_problems=max_problems, vocab_size=vocab_size)


def validate_open_file(f, path: str, *, max_problems: int = 20, vocab_size: int | None = None) -> FileReport:
    """:func:`validate_file` of a container already open (``open_file``'s handle), which stays open."""
    problems: list[Problem] = []
    errors: list[str] = []
    paddle = True  # every level holds a sequence (Paddle's rule on top of lodtool's)
    with bounded_metadata_cache(f.h5):
        if f.checksum_algorithm is None:
            problems.append(Problem(path, None, None, None,
                                    f"no checksums recorded (root attribute {spec.ATTR_CHECKSUM!r} is missing)"))
        for name in f.names:
            try:
                layout, issues = f.describe(name)
                problems.extend(Problem(path, name, level, None, message) for level, message in issues)
                if layout is None:
                    continue
                with translate(path, f"cannot read the layout of tensor {name!r}"):
                    gap = storage_gap(layout.data)
                if gap:  # the data is never read here, but a size it does not store is damage all the same
                    problems.append(Problem(path, name, None, None, f"the data {gap}"))
                with translate(path, f"cannot read the layout of tensor {name!r}"):
                    oversized = oversized_chunk(layout.data)
                if oversized:  # the chunk index says so: no data is decoded to see it
                    problems.append(Problem(path, name, None, None, f"the data's {oversized}"))
                with translate(path, f"cannot read the layout of tensor {name!r}"):
                    foreign = foreign_filter_names(layout.data)
                if foreign:  # validate never decodes the data: it must not vouch for a codec lodtool does not run
                    problems.append(Problem(path, name, None, None,
                                            f"data not decoded: it is compressed with {foreign}, a filter lodtool "
                                            "does not decode unless asked (LODTOOL_FILTER_PLUGINS)"))
                if f.checksum_algorithm is not None:
                    with translate(path, f"cannot read the attributes of tensor {name!r}"):
                        for ds, label in layout_datasets(layout):
                            if ds is not None and spec.ATTR_DIGEST not in ds.attrs:
                                problems.append(Problem(path, name, None, None, f"{label} has no recorded checksum"))
                t = f.open_layout(layout)
                lod_problems = t.validate(max_problems=max_problems)
                for p in lod_problems:
                    problems.append(Problem(path, name, p.level, p.index, p.message))
                paddle = paddle and all(size >= 2 for size in t.level_sizes)
                if not lod_problems:
                    problems.extend(token_id_problems(path, name, t, max_problems=max_problems,
                                                      vocab_size=vocab_size))
            except LodFormatError as exc:  # an I/O failure part-way: this tensor is unreadable
                errors.append(str(exc).removeprefix(f"{path}: "))
            finally:
                f.release(name)  # one tensor's HDF5 objects open at a time: a file may hold tens of thousands
    error = "; ".join(errors) if errors else None
    ok = not problems and error is None
    return FileReport(path, ok, problems, error, paddle_valid=ok and paddle)


def token_id_problems(path: str, name: str, t, *, max_problems: int = 20, block_rows: int | None = None,
                      vocab_size: int | None = None) -> list[Problem]:
    """Problems of a tensor's token metadata: metadata that does not parse, a dtype too narrow for the vocabulary,
    and every id (read ``block_rows`` at a time, by default :data:`~lodtool.limits.STREAM_CHUNK_BYTES` of rows)
    that is not under the vocabulary size, first row first.

    The vocabulary size is ``vocab_size`` where given (for every tensor of integer ids, and every tensor that
    records a vocabulary), else the one the tensor records; a tensor without one has nothing to check (no
    data is read).

    >>> import os, tempfile, numpy as np
    >>> from lodtool import LoDTensor
    >>> from lodtool.container.writer import LodWriter
    >>> from lodtool.tokens import TokenInfo
    >>> p = os.path.join(tempfile.mkdtemp(), "ids.lod.h5")
    >>> with LodWriter(p) as w:
    ...     w.add_tensor("ids", lod_level=1, tokens=TokenInfo(vocab_size=5)).append(
    ...         LoDTensor(np.array([1, 7, 2]), [[0, 3]]))
    >>> [str(x) for x in validate_file(p).problems]  # doctest: +ELLIPSIS
    ["...ids.lod.h5: tensor 'ids', index 1: data row 1: token id 7 is not under the vocabulary size 5"]
    """
    from ..tokens import dtype_problem, out_of_vocabulary

    try:
        info = t.tokens
    except LodFormatError as exc:
        return [Problem(path, name, None, None, str(exc).removeprefix(f"{path}: tensor {name!r}: "))]
    recorded = None if info is None else info.vocab_size
    size = vocab_size if vocab_size is not None else recorded
    if size is None or (recorded is None and t.dtype.kind not in "iu"):  # a given size checks ids, not floats
        return []
    wrong_dtype = dtype_problem(t.dtype, size)
    if wrong_dtype:
        return [Problem(path, name, None, None, wrong_dtype)]
    if block_rows is None:
        row_bytes = t.dtype.itemsize * max(1, int(np.prod(t.element_shape, dtype=np.int64)))
        block_rows = max(1, STREAM_CHUNK_BYTES // row_bytes)
    found: list[Problem] = []
    for start in range(0, t.n_rows, block_rows):
        block = t.read_rows(start, min(start + block_rows, t.n_rows))
        flat = block.reshape(block.shape[0], -1)
        for j in out_of_vocabulary(flat, size)[:max_problems - len(found)]:
            row = start + int(j) // max(flat.shape[1], 1)
            value = int(flat.reshape(-1)[j])
            found.append(Problem(path, name, None, row, f"data row {row}: token id {value} is not under the "
                                                         f"vocabulary size {size:,}"))
        if len(found) >= max_problems:
            break
    return found


# -- inspect -----------------------------------------------------------------------------------------------
def inspect_file(path: str | os.PathLike) -> dict:
    """A JSON-able description of a container, from metadata and offsets only (never the data).

    >>> import os, tempfile, numpy as np
    >>> from lodtool import LoDTensor
    >>> from lodtool.container.writer import save
    >>> p = os.path.join(tempfile.mkdtemp(), "x.lod.h5")
    >>> save(p, LoDTensor(np.arange(6), recursive_sequence_lengths=[[3, 1, 2]], level_names=["doc"]))
    >>> info = inspect_file(p)
    >>> info["format_version"], info["tensors"][0]["rows"], info["tensors"][0]["levels"][0]["max"]
    ('1.0', 6, 3)
    """
    path = os.fspath(path)
    with open_file(path) as f, bounded_metadata_cache(f.h5):
        tensors = list(_summaries(f))
        for summary in tensors:  # from what opening each noted: nothing is opened again
            summary["shared_lod_with"] = f.shared_lod_with(summary["name"])
        return {**_file_summary(f, path), "tensors": tensors}


def spooled_inspection(path: str | os.PathLike) -> dict:
    """:func:`inspect_file`'s description, its ``tensors`` an iterable over entries kept in a temporary file (gone
    once nothing refers to it): every tensor is summarised (and a broken one raises) before the first entry can be
    read, and memory does not grow with the number of tensors (what ``lodtool inspect`` prints from).

    >>> import os, tempfile, numpy as np
    >>> from lodtool import LoDTensor
    >>> from lodtool.container.writer import save
    >>> p = os.path.join(tempfile.mkdtemp(), "x.lod.h5")
    >>> save(p, {"a": LoDTensor(np.arange(3), [[0, 3]]), "b": LoDTensor(np.ones(3), [[0, 3]])})
    >>> info = spooled_inspection(p)
    >>> len(info["tensors"]), list(info["tensors"]) == inspect_file(p)["tensors"]
    (2, True)
    """
    path = os.fspath(path)
    spool = tempfile.TemporaryFile()  # unnamed: nothing is left on disk, whatever ends the process
    try:
        with open_file(path) as f, bounded_metadata_cache(f.h5):
            count = 0
            for summary in _summaries(f):
                pickle.dump(summary, spool, protocol=pickle.HIGHEST_PROTOCOL)  # our own entries, read back below
                count += 1
            return {**_file_summary(f, path), "tensors": _SpooledEntries(spool, count, f.lod_groups())}
    except BaseException:
        spool.close()
        raise


class _SpooledEntries:
    """The tensors of :func:`spooled_inspection`: iterable (each time from the first), with a length."""

    def __init__(self, spool, count: int, groups: dict):
        self._spool, self._count, self._groups = spool, count, groups
        weakref.finalize(self, spool.close)  # closed with the entries (the file has no name to leave behind)

    def __iter__(self) -> Iterator[dict]:
        self._spool.seek(0)
        for _ in range(self._count):
            summary = pickle.load(self._spool)
            name = summary["name"]
            summary["shared_lod_with"] = [other for other in self._groups.get(name, ()) if other != name]
            yield summary

    def __len__(self) -> int:
        return self._count


def _summaries(f) -> Iterator[dict]:
    """:func:`tensor_summary` of each tensor of an open file, in order, one tensor open at a time (a file may hold
    tens of thousands); ``shared_lod_with`` is left empty: it is known once every tensor has been opened."""
    for name in f.names:
        try:
            yield tensor_summary(name, f[name], [])
        finally:
            f.release(name)


def _file_summary(f, path: str) -> dict:
    source = remote_source(f.h5)
    return {"path": f.path, "format": spec.FORMAT_NAME, "format_version": f.format_version,
            "created_by": f.created_by, "checksum": f.checksum_algorithm,
            "file_size": source.size if source is not None else os.path.getsize(path), **layout_summary(f.h5)}


def layout_summary(h5) -> dict:
    """``inspect``'s word on the file layout: ``layout`` (``paged`` or ``compact``), ``page_size``, and
    ``remote_ready``: whether object storage opens it in few requests (paged metadata; docs/remote.md).

    >>> import os, tempfile, numpy as np, h5py
    >>> from lodtool import LoDTensor
    >>> from lodtool.container.writer import save
    >>> p = os.path.join(tempfile.mkdtemp(), "x.lod.h5")
    >>> save(p, LoDTensor(np.arange(6), [[0, 6]]), layout="paged")
    >>> with h5py.File(p) as h5:
    ...     layout_summary(h5)
    {'layout': 'paged', 'page_size': 1048576, 'remote_ready': True}
    """
    with translate(getattr(h5, "filename", "?"), "cannot read the file's layout"):
        found = file_layout(h5)
    return {**found, "remote_ready": found["layout"] == "paged"}


def tensor_summary(name: str, t, shared_lod_with: list[str]) -> dict:
    """One tensor's entry of ``inspect``: dtype, shape, per-level length statistics, storage (offsets only).

    A lazy handle of a file or of a sharded folder both answer what it asks.
    """
    levels = []
    for k, stats in enumerate(t.checked_level_stats()):
        levels.append({"level": k, "name": t.level_names[k] if t.level_names else None,
                       "sequences": stats["count"], "min": stats["min"], "median": stats["median"],
                       "mean": stats["mean"], "max": stats["max"], "empty": stats["empty"]})
    return {"name": name, "dtype": str(t.dtype), "element_shape": list(t.element_shape), "rows": t.n_rows,
            "lod_level": t.lod_level, "level_names": list(t.level_names) if t.level_names else None,
            "levels": levels, "compression": t.compression, "compression_level": t.compression_level,
            "memory_mapped": t.mappable, "tokens": _tokens_summary(t),
            "nbytes": t.nbytes, "storage_size": t.storage_size, "shared_lod_with": shared_lod_with}


def _tokens_summary(t) -> dict | None:
    try:
        info = t.tokens  # a view of another format records none
    except LodFormatError as exc:  # inspect describes; validate is where a bad attribute is a problem
        return {"error": str(exc)}
    return None if info is None else info.as_dict()


# -- verify -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ChecksumMismatch:
    """A dataset whose contents do not match its recorded checksum (``actual`` is ``None`` if unreadable)."""

    dataset: str
    expected: str | None
    actual: str | None
    error: str | None = None

    def __str__(self) -> str:
        if self.error and self.expected is None:
            return f"{self.dataset}: {self.error}"
        if self.error:
            return f"{self.dataset}: unreadable ({self.error}); recorded {self.expected}"
        if self.expected is None:
            return f"{self.dataset}: no recorded checksum (actual {self.actual})"
        return f"{self.dataset}: recorded {self.expected}, actual {self.actual}"


def _datasets_of(group: h5py.Group, lod_level: int):
    yield hard_member(group, spec.DATA), f"/{group.name.lstrip('/')}/{spec.DATA}"
    lod_group = hard_member(group, spec.LOD) if lod_level else None
    for k in range(lod_level):
        ds = hard_member(lod_group, str(k)) if isinstance(lod_group, h5py.Group) else None  # None where missing
        yield ds, f"/{group.name.lstrip('/')}/{spec.LOD}/{k}"
    if spec.TOKENIZER in group:  # the stored tokenizer is checksummed like the tensor's own datasets
        yield hard_member(group, spec.TOKENIZER), f"/{group.name.lstrip('/')}/{spec.TOKENIZER}"


def layout_datasets(layout) -> list:
    """``(dataset, label)`` of each dataset of a sound tensor (:class:`~lodtool.container.reader.Layout`) that
    records a checksum, from the handles the layout holds (:func:`_datasets_of` of a group, without opening them
    again); the tokenizer, where stored, is opened here (``None`` where it is no hard-linked member)."""
    prefix = f"/{layout.group.name.lstrip('/')}"
    found = [(layout.data, f"{prefix}/{spec.DATA}")]
    found += [(ds, f"{prefix}/{spec.LOD}/{k}") for k, ds in enumerate(layout.lod)]
    if spec.TOKENIZER.encode() in layout.members:  # checksummed like the tensor's own datasets
        found.append((hard_member(layout.group, spec.TOKENIZER, layout.members), f"{prefix}/{spec.TOKENIZER}"))
    return found


def verify_file(path: str | os.PathLike, *,
                progress: Callable[[int, int], None] | None = None) -> list[ChecksumMismatch]:
    """Recompute the checksum of every dataset; return the ones that do not match (``[]``: all good).

    Each dataset is read once, block by block (shared offsets once for all
    tensors sharing them).  A dataset that cannot be read (a damaged chunk fails
    its fletcher32 or decompression) is a mismatch with ``error`` set.  A file
    without recorded checksums raises :class:`~lodtool.errors.LodFormatError`.
    ``progress(done, total)`` is called with the bytes hashed so far and the bytes to hash.

    >>> import os, tempfile, numpy as np, h5py
    >>> from lodtool import LoDTensor
    >>> from lodtool.container.writer import save
    >>> p = os.path.join(tempfile.mkdtemp(), "x.lod.h5")
    >>> save(p, LoDTensor(np.arange(3), [[0, 2, 3]]))
    >>> with h5py.File(p, "r+") as f:
    ...     f["tensor/data"][0] = 7
    >>> [m.dataset for m in verify_file(p)]
    ['/tensor/data']
    """
    return verify_datasets(path, progress=progress).mismatches


@dataclass
class Verification:
    """What :func:`verify_datasets` found: the mismatches, the datasets a tensor's data and offsets make (offsets
    shared by several tensors counted once), and why a tensor cannot be opened (the first such, else ``None``)."""

    mismatches: list
    datasets: int
    unopened: str | None = None


def verify_datasets(path: str | os.PathLike, *,
                    progress: Callable[[int, int], None] | None = None) -> Verification:
    """:func:`verify_file`, and the datasets counted (what ``lodtool verify`` reports), in one pass: each tensor is
    described once and each of its datasets opened once, hashed from that handle, one tensor open at a time.
    With ``progress`` a first pass over the metadata adds up the bytes to hash.

    >>> import os, tempfile, numpy as np
    >>> from lodtool import LoDTensor
    >>> from lodtool.container.writer import save
    >>> p = os.path.join(tempfile.mkdtemp(), "x.lod.h5")
    >>> save(p, {"a": LoDTensor(np.arange(3), [[0, 3]]), "b": LoDTensor(np.ones(3), [[0, 3]])})
    >>> verify_datasets(p)
    Verification(mismatches=[], datasets=3, unopened=None)
    """
    path = os.fspath(path)
    out: list[ChecksumMismatch] = []
    with open_file(path) as f, bounded_metadata_cache(f.h5):
        if f.checksum_algorithm is None:
            raise LodFormatError(f"{path}: no checksums recorded (root attribute {spec.ATTR_CHECKSUM!r} is "
                                 "missing); nothing to verify")
        if f.checksum_algorithm != spec.CHECKSUM_ALGORITHM:
            raise LodFormatError(f"{path}: checksum algorithm {f.checksum_algorithm!r} is not supported "
                                 f"(this lodtool verifies {spec.CHECKSUM_ALGORITHM})")
        tick = None
        if progress is not None:
            total, done = _bytes_to_hash(f), 0

            def tick(n: int) -> None:
                nonlocal done
                done += n
                progress(done, max(total, done))

        limit = default_max_memory()
        hashed: set[tuple[int, int]] = set()  # offsets shared by several tensors are hashed once
        first_offsets: set = set()  # what names each tensor's first offsets dataset (shared ones counted once)
        counted, unopened = 0, None
        for name in f.names:
            layout, items = _tensor_datasets(f, name)
            if layout is None and unopened is None:
                unopened = _unopened(f, name)
            counted += 1
            for ds, label, key in items:
                if ds is None:  # lost data must not verify as "ok"
                    out.append(ChecksumMismatch(label, None, None, "missing, or not a dataset"))
                    continue
                if layout is not None and layout.lod and ds is layout.lod[0]:
                    if key not in first_offsets:
                        counted += layout.lod_level
                    first_offsets.add(key)
                if key in hashed:
                    continue
                hashed.add(key)
                mismatch = _verify_dataset(path, ds, label, limit, tick)
                if mismatch is not None:
                    out.append(mismatch)
            del layout, items  # one tensor's HDF5 objects open at a time: a file may hold tens of thousands
    return Verification(out, counted, unopened)


def _tensor_datasets(f, name: str, open_tensor: bool = True) -> tuple:
    """The layout of tensor ``name`` (``None``: broken) and its datasets to hash, each ``(handle or None, label,
    what names it)``, each opened once: the layout's own handles where it is sound.  ``open_tensor``: the tensor
    is opened as a reader opens it, so its refusals come first."""
    path = f.path
    with translate(path, f"cannot open tensor {name!r}"):
        # the layout checks validate makes, the same function: the two never disagree on attributes
        layout, _ = f.describe(name)
        if layout is not None:
            found = layout_datasets(layout)
        else:
            group = f.h5[name]
            found = list(_datasets_of(group, declared_lod_level(group.attrs) or 0))
    if layout is not None and open_tensor:
        try:  # and the readers' refusals (rows of zero width claimed by the billion, ...) before hashing
            f.open_layout(layout)
        finally:
            f.release(name)
    items = []
    for ds, label in found:
        if not isinstance(ds, h5py.Dataset):
            items.append((None, label, None))
            continue
        with translate(path, f"cannot open {label}"):
            items.append((ds, label, object_key(ds)))
    return layout, items


def _unopened(f, name: str) -> str:
    """Why ``f[name]`` refuses tensor ``name``, as it words it."""
    try:
        f[name]
    except LodFormatError as exc:
        return str(exc)
    finally:
        f.release(name)
    return f"{f.path}: tensor {name!r}: unreadable layout"  # pragma: no cover - describe found it broken


def _bytes_to_hash(f) -> int:
    """The bytes :func:`verify_datasets` hashes (shared datasets once), from the datasets' metadata."""
    seen: set = set()
    total = 0
    for name in f.names:
        for ds, _, key in _tensor_datasets(f, name, open_tensor=False)[1]:
            if ds is not None and key not in seen:
                seen.add(key)
                total += _logical_nbytes(ds)
    return total


def _logical_nbytes(ds: h5py.Dataset) -> int:
    try:
        return int(ds.size) * ds.dtype.itemsize
    except H5_ERRORS:  # a damaged header: the hashing reports it
        return 0


class _CountingHasher:
    """A hasher that also tells ``tick`` how many bytes went through it (for a progress bar)."""

    def __init__(self, hasher, tick: Callable[[int], None]):
        self.hasher, self.tick = hasher, tick

    def update(self, data) -> None:
        self.hasher.update(data)
        self.tick(memoryview(data).nbytes)

    def hexdigest(self) -> str:
        return self.hasher.hexdigest()


def _verify_dataset(path: str, ds: h5py.Dataset, label: str, max_memory: int,
                    tick: Callable[[int], None] | None = None) -> ChecksumMismatch | None:
    from . import checksum  # xxhash: only verify needs it

    with translate(path, f"cannot read the checksum of {label}"):
        stored = ds.attrs.get(spec.ATTR_DIGEST)
    expected = spec.text_attr(stored) if stored is not None else None
    if expected is not None:
        expected = checksum.parse_digest(expected, f"{path}: {label}")
    with translate(path, f"cannot read the layout of {label}"):
        foreign = foreign_storage(ds)
    if foreign:  # refused before a byte of it is read
        return ChecksumMismatch(label, expected, None, f"the dataset {foreign}")
    with translate(path, f"cannot read the layout of {label}"):
        absurd = chunk_layout_problem(ds)
        chunk = chunk_nbytes(ds)
    if absurd:
        return ChecksumMismatch(label, expected, None, f"the dataset {absurd}")
    if chunk > max(max_memory, READ_CACHE):  # every read decodes whole chunks
        return ChecksumMismatch(label, expected, None, f"one chunk decodes to {human_bytes(chunk)}, above the memory "
                                                       f"limit of {human_bytes(max_memory)}")
    ensure_readable(ds, path, label)
    try:
        with translate(path, f"cannot read {label}"):
            gap = storage_gap(ds)
            if gap:
                return ChecksumMismatch(label, expected, None, f"the dataset {gap}")
            hasher = checksum.new_hasher() if tick is None else _CountingHasher(checksum.new_hasher(), tick)
            actual = checksum.format_digest(checksum.hash_dataset(ds, hasher, max_memory=max_memory))
    except LodFormatError as exc:
        return ChecksumMismatch(label, expected, None, str(exc).removeprefix(f"{path}: "))
    if actual != expected:
        return ChecksumMismatch(label, expected, actual)
    return None


__all__ = ["validate_file", "validate_open_file", "inspect_file", "spooled_inspection", "verify_file",
           "verify_datasets", "Verification", "FileReport", "Problem", "ChecksumMismatch"]
