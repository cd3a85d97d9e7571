"""``validate``, ``inspect`` and ``verify``: the container's checks over many files, optionally isolated.

These compose :mod:`lodtool.container.checks` with :mod:`lodtool.container.isolate`,
and turn "cannot open" into a per-file result, so one bad file never hides the
report on the rest.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from .. import storage
from ..container.checks import FileReport, Problem
from ..errors import (LodError, LodFileNotFoundError, LodFormatError, LodIsolationRequired, LodReaderCrashError,
                      LodUsageError)


@dataclass
class FileVerification:
    """The outcome of verifying one file's checksums."""

    path: str
    ok: bool
    checked: int = 0
    mismatches: list = field(default_factory=list)
    error: str | None = None
    #: why nothing was checked, for a format that records no checksums
    nothing_to_verify: str | None = None

    def to_dict(self) -> dict:
        return {"path": self.path, "ok": self.ok, "checked": self.checked, "error": self.error,
                "nothing_to_verify": self.nothing_to_verify,
                "mismatches": [dataclasses.asdict(m) if dataclasses.is_dataclass(m) else str(m)
                               for m in self.mismatches]}


def _call(fn, *args, path: str, isolate: bool, timeout: float) -> Any:
    if not isolate:
        return fn(*args)
    from ..container.isolate import run_isolated  # multiprocessing: only --isolate pays for it

    return run_isolated(fn, *args, path=path, timeout=timeout)


def _crash_problem(path: str, exc: LodError) -> Problem:
    return Problem(file=path, tensor=None, level=None, index=None, message=str(exc).removeprefix(f"{path}: "))


def validate(paths: Sequence[str], *, max_memory: int | None = None, isolate: bool = False,
             timeout: float = 60.0, token_dtype: Any = None, eos_token_id: int | None = None,
             vocab_size: int | None = None) -> list[FileReport]:
    """Validate each file (what ``lodtool validate`` runs); unreadable files become reports with ``error`` set.

    With ``isolate`` a reader crash or hang counts as an invalid file (exit 1),
    as the reliability guarantees promise.  A token dataset of LLM training is
    checked in place by its format's rules (``token_dtype`` and
    ``eos_token_id``: what it cannot say itself, see :func:`lodtool.open`).
    ``vocab_size`` checks every token id against it (the data is read, in
    blocks), over the vocabulary a container records; without it, a container's
    recorded vocabulary is checked.

    >>> import os, tempfile, numpy as np
    >>> from lodtool import LoDTensor, save
    >>> p = os.path.join(tempfile.mkdtemp(), "x.lod.h5")
    >>> save(p, LoDTensor(np.arange(3), [[0, 2, 3]]))
    >>> [(r.ok, r.error) for r in validate([p, p + ".missing"])][0]
    (True, None)
    """
    out = []
    if vocab_size is not None and (isinstance(vocab_size, bool) or int(vocab_size) < 1):
        raise LodUsageError(f"vocab_size must be a positive integer, got {vocab_size!r}")
    tokens = (token_dtype, eos_token_id, vocab_size)
    for path in paths:
        try:
            try:
                report = _call(_validate_one, path, max_memory, *tokens, path=path, isolate=isolate, timeout=timeout)
            except LodIsolationRequired:  # an opted-in plugin filter: its decoding runs in a child
                report = _call(_validate_one, path, max_memory, *tokens, path=path, isolate=True, timeout=timeout)
            out.append(report)
        except LodError as exc:
            if isinstance(exc, LodReaderCrashError):
                out.append(FileReport(path, False, [_crash_problem(path, exc)]))
            else:
                out.append(FileReport(path, False, error=_strip_path(str(exc), storage.redact(path))))
    return out


def _validate_one(path: str, max_memory: int | None, token_dtype: Any = None, eos_token_id: int | None = None,
                  vocab_size: int | None = None) -> FileReport:
    from ..container.checks import validate_file
    from ..container.shards import is_sharded, validate_sharded
    from ..io import token_datasets

    if token_datasets.format_of(path) is not None:  # a token dataset of LLM training, checked in place
        found = token_datasets.validate_dataset(path, token_dtype=token_dtype, eos_token_id=eos_token_id,
                                                vocab_size=vocab_size)
        problems = [Problem(p.file, None, None, None, str(p).removeprefix(f"{p.file}: ")) for p in found]
        return FileReport(path, not problems, problems)
    if is_sharded(path):  # every shard, plus the manifest against the shards
        return validate_sharded(path, max_memory=max_memory, vocab_size=vocab_size)
    return validate_file(path, max_memory=max_memory, vocab_size=vocab_size)


def inspect(path: str, *, isolate: bool = False, timeout: float = 60.0, token_dtype: Any = None,
            eos_token_id: int | None = None, spooled: bool = False) -> dict:
    """:func:`~lodtool.container.checks.inspect_file`, optionally in a child process (``lodtool inspect``); a token
    dataset is described in place (``token_dtype``, ``eos_token_id``: see :func:`lodtool.open`).

    ``spooled``: a container's ``tensors`` are read back one by one from a temporary file
    (:func:`~lodtool.container.checks.spooled_inspection`: every tensor summarised first, in memory that does not
    grow with their number), for printing; not with ``isolate``, nor for a sharded folder or a token dataset.

    >>> import os, tempfile, numpy as np
    >>> from lodtool import LoDTensor, save
    >>> p = os.path.join(tempfile.mkdtemp(), "x.lod.h5")
    >>> save(p, LoDTensor(np.arange(3), [[0, 2, 3]]), name="tokens")
    >>> [t["name"] for t in inspect(p)["tensors"]], [t["name"] for t in inspect(p, spooled=True)["tensors"]]
    (['tokens'], ['tokens'])
    """
    from ..container.checks import inspect_file, spooled_inspection
    from ..container.shards import inspect_sharded, is_sharded
    from ..io import token_datasets

    if token_datasets.format_of(path) is not None:
        return _inspect_tokens(path, token_dtype, eos_token_id)
    if is_sharded(path):
        return _call(inspect_sharded, path, path=path, isolate=isolate, timeout=timeout)
    return _call(spooled_inspection if spooled and not isolate else inspect_file, path, path=path, isolate=isolate,
                 timeout=timeout)


def _inspect_tokens(path: str, token_dtype: Any, eos_token_id: int | None) -> dict:
    """``inspect`` of a token dataset read in place: its format, files and tensors (offsets only)."""
    from ..container.checks import tensor_summary
    from ..io import token_datasets

    with token_datasets.open_dataset(path, token_dtype=token_dtype, eos_token_id=eos_token_id) as f:
        return {"path": path, "format": f.format, "format_version": None, "created_by": None, "checksum": None,
                "file_size": sum(int(storage.info(p).get("size") or 0) if storage.is_url(p) else os.path.getsize(p)
                                 for p in f.files), "files": list(f.files), "info": f.info,
                "tensors": [tensor_summary(name, f[name], []) for name in f.names]}


def verify(paths: Sequence[str], *, isolate: bool = False, timeout: float = 600.0,
           progress: Callable[[int, int], None] | None = None) -> list[FileVerification]:
    """Recompute every recorded checksum of each file (``lodtool verify``).

    ``progress(done, total)`` is called with the bytes hashed so far and the bytes to hash, summed over
    the files opened so far (not with ``isolate``, whose hashing runs in a child process, nor for a
    sharded folder).

    >>> import os, tempfile, numpy as np
    >>> from lodtool import LoDTensor, save
    >>> p = os.path.join(tempfile.mkdtemp(), "x.lod.h5")
    >>> save(p, LoDTensor(np.arange(3), [[0, 2, 3]]))
    >>> [(r.ok, r.checked) for r in verify([p])]
    [(True, 2)]
    """
    out = []
    finished = current = 0  # bytes to hash in the files before this one, and in this one

    def tick(done: int, total: int) -> None:
        nonlocal current
        current = total
        progress(finished + done, finished + total)

    for path in paths:
        try:
            try:
                out.append(_call(_verify_one, path, None if isolate or progress is None else tick, path=path,
                                 isolate=isolate, timeout=timeout))
            except LodIsolationRequired:  # an opted-in plugin filter: its decoding runs in a child
                out.append(_call(_verify_one, path, path=path, isolate=True, timeout=timeout))
        except LodError as exc:
            if isinstance(exc, LodReaderCrashError):
                out.append(FileVerification(path, False, mismatches=[_strip_path(str(exc), path)]))
            else:
                out.append(FileVerification(path, False, error=_strip_path(str(exc), path)))
        finished, current = finished + current, 0
    return out


def _verify_one(path: str, progress: Callable[[int, int], None] | None = None) -> FileVerification:
    from ..container.checks import verify_datasets
    from ..container.shards import folder_file, is_sharded, read_manifest, verify_sharded
    from ..io import token_datasets

    fmt = token_datasets.format_of(path)
    if fmt is not None:
        return FileVerification(path, True, nothing_to_verify=f"a {fmt} dataset records no checksums (validate "
                                                               "checks its structure)")

    if is_sharded(path):  # every shard's datasets, plus each shard's checksum against the manifest
        mismatches = verify_sharded(path)
        shards = read_manifest(path).shards
        checked = len(shards)
        for s in shards:
            try:
                checked += _count_datasets(folder_file(path, s.file))
            except (LodFormatError, LodFileNotFoundError):  # a link or a missing shard: a mismatch already
                pass
        return FileVerification(path, not mismatches, checked, list(mismatches))
    found = verify_datasets(path, progress=progress)
    if found.unopened is not None:  # a tensor no reader opens: the file is unreadable, whatever the checksums say
        raise LodFormatError(found.unopened)
    return FileVerification(path, not found.mismatches, found.datasets, list(found.mismatches))


def _count_datasets(path: str) -> int:
    from ..container.reader import open_file

    # offsets shared by several tensors (hard links) are one dataset, counted once
    with open_file(path) as f:
        counted: set[str] = set()
        total = 0
        for name in f.names:
            total += 1
            if not counted.intersection(f.shared_lod_with(name)):
                total += f[name].lod_level
            f.release(name)  # one tensor open at a time: a file may hold tens of thousands
            counted.add(name)
        return total


def _strip_path(text: str, path: str) -> str:
    return text[len(path) + 2:] if text.startswith(f"{path}: ") else text


__all__ = ["validate", "inspect", "verify", "FileVerification"]
