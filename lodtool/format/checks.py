"""File checks for the CLI: validate, inspect and verify over many files, optionally isolated.

These compose the container's checks with :mod:`.isolate`, and turn "cannot
open" into a per-file result, so one bad file never hides the report on the rest.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..errors import LodError


@dataclass
class FileValidation:
    """The outcome of validating one file: ``ok``, its problems, or why it was unreadable."""

    path: str
    ok: bool
    problems: list = field(default_factory=list)
    error: str | None = None

    def to_dict(self) -> dict:
        return {"path": self.path, "ok": self.ok, "error": self.error,
                "problems": [dataclasses.asdict(p) if dataclasses.is_dataclass(p) else {"message": str(p)}
                             for p in self.problems]}


@dataclass
class FileVerification:
    """The outcome of verifying one file's checksums."""

    path: str
    ok: bool
    checked: int = 0
    mismatches: list = field(default_factory=list)
    error: str | None = None

    def to_dict(self) -> dict:
        return {"path": self.path, "ok": self.ok, "checked": self.checked, "error": self.error,
                "mismatches": [dataclasses.asdict(m) if dataclasses.is_dataclass(m) else str(m)
                               for m in self.mismatches]}


def _call(fn, *args, path: str, isolate: bool, timeout: float) -> Any:
    if not isolate:
        return fn(*args)
    from .isolate import run_isolated  # multiprocessing: only --isolate pays for it

    return run_isolated(fn, *args, path=path, timeout=timeout)


def _crash_problem(path: str, exc: LodError):
    from .container import Problem

    return Problem(file=path, tensor=None, level=None, index=None, message=str(exc).removeprefix(f"{path}: "))


def validate_files(paths: Sequence[str], *, max_memory: int | None = None, isolate: bool = False,
                   timeout: float = 60.0) -> list[FileValidation]:
    """Validate each file; unreadable files become results with ``error`` set.

    With ``isolate`` a reader crash or hang counts as an invalid file (exit 1),
    as the reliability guarantees promise.
    """
    out = []
    for path in paths:
        try:
            report = _call(_validate_one, path, max_memory, path=path, isolate=isolate, timeout=timeout)
            out.append(report)
        except LodError as exc:
            if isolate and "unreadable (the HDF5 reader" in str(exc):
                out.append(FileValidation(path, False, [_crash_problem(path, exc)]))
            else:
                out.append(FileValidation(path, False, error=_strip_path(str(exc), path)))
    return out


def _validate_one(path: str, max_memory: int | None) -> FileValidation:
    from .container import validate_file

    report = validate_file(path, max_memory=max_memory)
    return FileValidation(path, report.ok, list(report.problems), report.error)


def inspect_one(path: str, *, isolate: bool = False, timeout: float = 60.0) -> dict:
    """:func:`container.inspect_file`, optionally in a child process."""
    from .container import inspect_file

    return _call(inspect_file, path, path=path, isolate=isolate, timeout=timeout)


def verify_files(paths: Sequence[str], *, isolate: bool = False, timeout: float = 600.0) -> list[FileVerification]:
    """Recompute every recorded checksum of each file."""
    out = []
    for path in paths:
        try:
            out.append(_call(_verify_one, path, path=path, isolate=isolate, timeout=timeout))
        except LodError as exc:
            if isolate and "unreadable (the HDF5 reader" in str(exc):
                out.append(FileVerification(path, False, mismatches=[_strip_path(str(exc), path)]))
            else:
                out.append(FileVerification(path, False, error=_strip_path(str(exc), path)))
    return out


def _verify_one(path: str) -> FileVerification:
    from .container import verify_file

    mismatches = verify_file(path)
    return FileVerification(path, not mismatches, _count_datasets(path), list(mismatches))


def _count_datasets(path: str) -> int:
    from .container import open_file

    # offsets shared by several tensors (hard links) are one dataset, counted once
    with open_file(path) as f:
        counted: set[str] = set()
        total = 0
        for name in f.names:
            total += 1
            if not counted.intersection(f.shared_lod_with(name)):
                total += f[name].lod_level
            counted.add(name)
        return total


def _strip_path(text: str, path: str) -> str:
    return text[len(path) + 2:] if text.startswith(f"{path}: ") else text
