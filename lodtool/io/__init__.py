"""Interchange formats behind one registry: each format is one module here plus one line in :data:`REGISTRY`.

A :class:`Format` entry names the format, its file extensions and magic bytes,
the module that implements it (imported on first use, so listing formats
costs nothing), whether it can be written, and whether its reader streams
(chunks of whole top-level sequences, bounded memory).  The module provides:

* ``read(fmt, sources, *, lod_level, dtype, chunk_bytes, progress, stats)``:
  an iterator of :class:`~lodtool.LoDTensor` chunks of whole top-level
  sequences; ``stats["bytes_read"]`` holds the bytes read when it is done;
* ``write(fmt, tensor, out)``: a tensor in memory to a binary stream;
* ``write_stored(fmt, stored, chunks, out)``: a stored tensor (the container's
  lazy handle) streamed from its ``chunks``.

Adding a format: write ``lodtool/io/<name>.py`` with those functions, then add
its line to :data:`REGISTRY`.  ``pack``, ``unpack``, ``slice`` and the CLI's
``--format`` / ``--to`` choices all read the registry.

>>> [f.name for f in REGISTRY]
['json', 'jsonl', 'npy', 'npz', 'parquet', 'arrow', 'pdtensor', 'megatron', 'fairseq', 'datatrove',
 'dolma']
>>> format_of_path("docs.ndjson").name, format_of_path("x.h5")
('jsonl', None)
>>> get("npz").module, readable()[:4], writable()[:3]
('npy', ('json', 'jsonl', 'npy', 'npz'), ('json', 'jsonl', 'npz'))
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Any, BinaryIO, Iterable, Iterator, Sequence

from ..errors import LodUsageError


@dataclass(frozen=True)
class Format:
    """One interchange format: its name, how files of it are recognised, and the module that reads it."""

    name: str
    extensions: tuple[str, ...]
    #: leading bytes of a file of this format (empty: text, recognised by its extension only)
    magic: tuple[bytes, ...]
    #: the implementing module, inside lodtool.io
    module: str
    #: whether the reader yields bounded chunks (True) or needs each input whole
    streams: bool
    writes: bool
    #: extra reader options the format takes (``column`` for table formats), passed only when given
    options: tuple[str, ...] = ()

    def _impl(self):
        return importlib.import_module(f"{__name__}.{self.module}")

    def read(self, sources: Sequence[Any], **options) -> Iterator:
        """Chunks of whole top-level sequences from ``sources`` (see the module docstring for ``options``)."""
        return self._impl().read(self.name, sources, **options)

    def write(self, tensor, out: BinaryIO) -> None:
        """Write a tensor held in memory to the binary stream ``out``."""
        self._check_writes()
        self._impl().write(self.name, tensor, out)

    def write_stored(self, stored, chunks: Iterable, out: BinaryIO) -> None:
        """Write a stored tensor to ``out`` from its ``chunks``, as they are read."""
        self._check_writes()
        self._impl().write_stored(self.name, stored, chunks, out)

    def _check_writes(self) -> None:
        if not self.writes:
            raise LodUsageError(f"lodtool reads {self.name} but does not write it; choose one of "
                                f"{', '.join(writable())}")


#: every interchange format, in the order the CLI lists them
REGISTRY: tuple[Format, ...] = (
    Format("json", (".json",), (), "json", streams=True, writes=True),
    Format("jsonl", (".jsonl", ".ndjson"), (), "json", streams=True, writes=True),
    Format("npy", (".npy",), (b"\x93NUMPY",), "npy", streams=True, writes=False, options=("max_memory",)),
    Format("npz", (".npz",), (b"PK\x03\x04", b"PK\x05\x06"), "npy", streams=True, writes=True,
           options=("max_memory",)),
    Format("parquet", (".parquet", ".pq"), (b"PAR1",), "parquet", streams=True, writes=True, options=("column",)),
    Format("arrow", (".arrow", ".feather", ".arrows", ".ipc"), (b"ARROW1",), "arrow", streams=True, writes=True,
           options=("column",)),
    Format("pdtensor", (".pdtensor", ".pdiparams"), (), "pdtensor", streams=True, writes=True),
    Format("megatron", (".idx",), (b"MMIDIDX\x00\x00",), "megatron", streams=True, writes=False,
           options=("token_dtype",)),
    Format("fairseq", (), (b"MMIDIDX\x00\x00",), "megatron", streams=True, writes=False, options=("token_dtype",)),
    Format("datatrove", (".ds",), (), "datatrove", streams=True, writes=False, options=("token_dtype",)),
    Format("dolma", (), (), "dolma", streams=True, writes=False, options=("token_dtype", "eos_token_id")),
)

_BY_NAME = {f.name: f for f in REGISTRY}


def get(name: str) -> Format:
    """The format called ``name``; an unknown name is a :class:`~lodtool.errors.LodUsageError`.

    >>> get("jsonl").extensions
    ('.jsonl', '.ndjson')
    """
    try:
        return _BY_NAME[name]
    except KeyError:
        raise LodUsageError(f"unknown format {name!r}; choose one of {', '.join(_BY_NAME)}") from None


def readable() -> tuple[str, ...]:
    """The names of the formats lodtool reads."""
    return tuple(f.name for f in REGISTRY)


def writable() -> tuple[str, ...]:
    """The names of the formats lodtool writes."""
    return tuple(f.name for f in REGISTRY if f.writes)


def extensions() -> tuple[str, ...]:
    """Every registered file extension, in registry order.

    >>> " ".join(extensions())
    '.json .jsonl .ndjson .npy .npz .parquet .pq .arrow .feather .arrows .ipc .pdtensor .pdiparams .idx .ds'
    """
    return tuple(ext for f in REGISTRY for ext in f.extensions)


def format_of_path(path: str | os.PathLike) -> Format | None:
    """The format a file's extension names, or None."""
    ext = os.path.splitext(os.fspath(path))[1].lower()
    return next((f for f in REGISTRY if ext in f.extensions), None)


def format_of_bytes(head: bytes) -> Format | None:
    """The format whose magic bytes ``head`` starts with, or None (text formats have none).

    >>> format_of_bytes(b"\\x93NUMPY\\x01\\x00").name, format_of_bytes(b"[[1]]")
    ('npy', None)
    """
    return next((f for f in REGISTRY if any(head.startswith(m) for m in f.magic)), None)


__all__ = ["Format", "REGISTRY", "get", "readable", "writable", "extensions", "format_of_path", "format_of_bytes"]

