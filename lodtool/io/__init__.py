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
  lazy handle) streamed from its ``chunks``;
* or, for a format written as several files beside each other (``writes_files``:
  Megatron's ``PREFIX.bin`` + ``PREFIX.idx``), ``write_files(fmt, chunks, out,
  **write_options)`` instead of the two above: chunks of whole top-level
  sequences to the files ``output_files(fmt, out)`` names (``out`` is a path,
  never a stream), which appear together or not at all.

Adding a format: write ``lodtool/io/<name>.py`` with those functions, then add
its line to :data:`REGISTRY`.  ``pack``, ``unpack``, ``slice`` and the CLI's
``--format`` / ``--to`` choices all read the registry, and every input's format
is decided here, by :func:`detect` (extension, then first bytes) and
:func:`input_format` (several inputs, one format).

>>> [f.name for f in REGISTRY]
['json', 'jsonl', 'npy', 'npz', 'parquet', 'arrow', 'pdtensor', 'megatron', 'fairseq', 'datatrove',
 'dolma', 'text']
>>> format_of_path("docs.ndjson").name, format_of_path("x.h5")
('jsonl', None)
>>> get("npz").module, readable()[:4], writable()[:3]
('npy', ('json', 'jsonl', 'npy', 'npz'), ('json', 'jsonl', 'npz'))
"""

from __future__ import annotations

import importlib
import io
import os
import sys
from dataclasses import dataclass
from typing import Any, BinaryIO, Iterable, Iterator, NamedTuple, Sequence

from ..errors import LodError, LodFileNotFoundError, LodInputError, LodUsageError


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
    #: written as several files from one output path (a prefix), published together; never to a stream
    writes_files: bool = False
    #: extra writer options the format takes (``level`` for the token formats), passed only when given
    write_options: tuple[str, ...] = ()

    def _impl(self):
        return importlib.import_module(f"{__name__}.{self.module}")

    def read(self, sources: Sequence[Any], **options) -> Iterator:
        """Chunks of whole top-level sequences from ``sources`` (see the module docstring for ``options``)."""
        return self._impl().read(self.name, sources, **options)

    def token_info(self, sources: Sequence[Any], **options):
        """The token metadata the inputs record themselves (:class:`~lodtool.tokens.TokenInfo`), or None.

        A format module that records some (datatrove's ``.ds.metadata``, the tokenizer that text is
        packed with) has a ``token_info(fmt, sources, **options)``, given the reader's options; the others
        record none.
        """
        impl = self._impl()
        return impl.token_info(self.name, sources, **options) if hasattr(impl, "token_info") else None

    def write(self, tensor, out: BinaryIO) -> None:
        """Write a tensor held in memory to the binary stream ``out``."""
        self._check_writes(stream=True)
        self._impl().write(self.name, tensor, out)

    def write_stored(self, stored, chunks: Iterable, out: BinaryIO) -> None:
        """Write a stored tensor to ``out`` from its ``chunks``, as they are read."""
        self._check_writes(stream=True)
        self._impl().write_stored(self.name, stored, chunks, out)

    def output_files(self, out: str | os.PathLike) -> list[str]:
        """The files :meth:`write_files` makes for the output path ``out`` (a format of :attr:`writes_files`)."""
        self._check_writes(stream=False)
        return self._impl().output_files(self.name, out)

    def write_files(self, chunks: Iterable, out: str | os.PathLike, **options) -> list[str]:
        """Write chunks of whole top-level sequences as the files of the output path ``out``, which all appear
        when complete or none does (an existing one is left as it was); returns their paths.

        ``options`` are the format's :attr:`write_options` (``level`` for the
        token formats); another one is a :class:`~lodtool.errors.LodUsageError`.

        >>> import os, tempfile, numpy as np
        >>> from lodtool import LoDTensor
        >>> prefix = os.path.join(tempfile.mkdtemp(), "corpus")
        >>> files = get("megatron").write_files([LoDTensor(np.arange(3, dtype=np.uint16), [[0, 1, 3]])], prefix)
        >>> [os.path.basename(f) for f in files] == [os.path.basename(f) for f in get("megatron").output_files(prefix)]
        True
        """
        self._check_writes(stream=False)
        self.check_write_options(options)
        return self._impl().write_files(self.name, chunks, out, **options)

    def check_write_options(self, options: dict) -> None:
        """Refuse writer options this format does not take (those given as None are not options given)."""
        unknown = sorted(k for k, v in options.items() if v is not None and k not in self.write_options)
        if unknown:
            takes = [f.name for f in REGISTRY if set(unknown) <= set(f.write_options)]
            raise LodUsageError(f"{', '.join(f'{k}=...' for k in unknown)} applies to writing "
                                f"{_either(takes) if takes else 'no format'}, not {self.name}")

    def _check_writes(self, *, stream: bool) -> None:
        if not self.writes:
            raise LodUsageError(f"lodtool reads {self.name} but does not write it; choose one of "
                                f"{', '.join(writable())}")
        if stream and self.writes_files:
            raise LodUsageError(f"{self.name} is written as several files from one output path; give a path "
                                "(a prefix), not a stream")
        if not stream and not self.writes_files:
            raise LodUsageError(f"{self.name} is written as one file or stream, not as a set of files")


#: every interchange format, in the order the CLI lists them
REGISTRY: tuple[Format, ...] = (
    Format("json", (".json",), (), "json", streams=True, writes=True),
    Format("jsonl", (".jsonl", ".ndjson"), (), "json", streams=True, writes=True),
    Format("npy", (".npy",), (b"\x93NUMPY",), "npy", streams=True, writes=False, options=("max_memory",)),
    Format("npz", (".npz",), (b"PK\x03\x04", b"PK\x05\x06"), "npy", streams=True, writes=True,
           options=("max_memory",)),
    Format("parquet", (".parquet", ".pq"), (b"PAR1",), "parquet", streams=True, writes=True,
           options=("column", "max_memory")),
    Format("arrow", (".arrow", ".feather", ".arrows", ".ipc"), (b"ARROW1",), "arrow", streams=True, writes=True,
           options=("column", "max_memory")),
    Format("pdtensor", (".pdtensor", ".pdiparams"), (), "pdtensor", streams=True, writes=True),
    Format("megatron", (".idx",), (b"MMIDIDX\x00\x00",), "megatron", streams=True, writes=True,
           options=("token_dtype",), writes_files=True, write_options=("level",)),
    Format("fairseq", (), (b"MMIDIDX\x00\x00",), "megatron", streams=True, writes=True, options=("token_dtype",),
           writes_files=True, write_options=("level",)),
    Format("datatrove", (".ds",), (), "datatrove", streams=True, writes=True, options=("token_dtype",),
           writes_files=True, write_options=("level",)),
    Format("dolma", (), (), "dolma", streams=True, writes=True, options=("token_dtype", "eos_token_id"),
           writes_files=True, write_options=("level",)),
    # text is told by the options that tokenize it (pack --tokenizer), never by a name or its bytes
    Format("text", (), (), "text", streams=True, writes=False, options=("text", "tokens")),
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


# -- detection: the one place an input's format is decided -----------------------------------------
#: the first bytes of an HDF5 file, so of a lodtool container (no interchange reader takes one)
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
#: what :func:`detect` calls an HDF5 file
CONTAINER = "container"
#: how much of an input :func:`detect` looks at
DETECT_BYTES = 1 << 16


class Detection(NamedTuple):
    """An input's format: a registry name or :data:`CONTAINER`, and whether its first bytes told it."""

    name: str
    from_content: bool


def is_stdin(source: Any) -> bool:
    """Whether ``source`` names stdin (``-``)."""
    return isinstance(source, (str, os.PathLike)) and os.fspath(source) == "-"


def label(source: Any) -> str:
    """How messages name an input: its path, ``stdin``, or ``<stream>``."""
    if is_stdin(source):
        return "stdin"
    return os.fspath(source) if isinstance(source, (str, os.PathLike)) else "<stream>"


def open_path(path: str, buffering: int = -1) -> BinaryIO:
    """The file at ``path`` opened for binary reading; a missing, directory or unreadable one is a one-line error.

    >>> open_path("/no/such.jsonl")
    Traceback (most recent call last):
    lodtool.errors.LodFileNotFoundError: /no/such.jsonl: no such file
    """
    try:
        return open(path, "rb", buffering=buffering)
    except FileNotFoundError:
        raise LodFileNotFoundError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise LodInputError(f"{path}: is a directory, not a file") from None
    except OSError as exc:
        raise LodInputError(f"{path}: cannot read it ({exc.strerror or exc})") from None


def open_seekable(source: Any) -> tuple[BinaryIO, bool]:
    """A seekable binary file for a path, ``-``, bytes or a binary stream (stdin and pipes are read into memory),
    and whether it was opened here (then the caller closes it)."""
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        return (io.BytesIO(sys.stdin.buffer.read()) if path == "-" else open_path(path)), True
    if isinstance(source, (bytes, bytearray, memoryview)):
        return io.BytesIO(bytes(source)), True
    stream = getattr(source, "buffer", source)  # a text stream's binary side
    return (stream, False) if seekable(stream) else (io.BytesIO(stream.read()), True)


def seekable(stream) -> bool:
    """Whether ``stream`` says it can seek (a closed or odd one cannot)."""
    try:
        return bool(stream.seekable())
    except (AttributeError, OSError, ValueError):
        return False


def detect(source: str | os.PathLike) -> Detection | None:
    """The format of the input at a path (or ``-``): from its extension, else from its first bytes; else None.

    A token dataset of LLM training is told by
    :func:`lodtool.io.token_datasets.format_of` first: a Megatron prefix
    (``corpus`` for ``corpus.bin`` + ``corpus.idx``) is an input as it is, and
    a fairseq ``.idx`` is told from a Megatron one by its size.
    A lodtool container (HDF5) is told by its signature as :data:`CONTAINER`.
    JSON and JSON Lines both start with ``[``: a second value on a later line
    makes it JSON Lines, one value (or one longer than :data:`DETECT_BYTES`) JSON.
    stdin is peeked (:func:`peek_stdin`), so its reader still gets every byte.

    >>> import os, tempfile
    >>> d = tempfile.mkdtemp()
    >>> _ = open(os.path.join(d, "x.txt"), "w").write("[1, 2]\\n[3]\\n")
    >>> detect(os.path.join(d, "x.txt")), detect("docs.ndjson")
    (Detection(name='jsonl', from_content=True), Detection(name='jsonl', from_content=False))
    """
    if not is_stdin(source):
        # a token dataset is named by its prefix or any of its files; its module is loaded on use, as every
        # format module is (they import this package)
        token = importlib.import_module(f"{__name__}.token_datasets").format_of(source)
        if token is not None:
            return Detection(token, False)
    by_name = None if is_stdin(source) else format_of_path(source)
    if by_name is not None:
        return Detection(by_name.name, False)
    name = format_of_head(peek_stdin(DETECT_BYTES) if is_stdin(source) else _file_head(source))
    return None if name is None else Detection(name, True)


def format_of_head(head: bytes) -> str | None:
    """The format an input's first bytes show: a registry name, :data:`CONTAINER`, or None.

    >>> format_of_head(b"[[1, 2], [3]]"), format_of_head(b"[1, 2]\\n[3]\\n"), format_of_head(b"\\x93NUMPY\\x01")
    ('json', 'jsonl', 'npy')
    >>> format_of_head(HDF5_SIGNATURE), format_of_head(b"hello")
    ('container', None)
    """
    if head.startswith(HDF5_SIGNATURE):
        return CONTAINER
    binary = format_of_bytes(head)
    if binary is not None:
        return binary.name
    text = head.removeprefix(b"\xef\xbb\xbf").lstrip()
    if not text.startswith(b"["):
        return None
    end = _end_of_first_value(text)
    return "jsonl" if end is not None and text[end:].lstrip().startswith(b"[") else "json"


def input_format(sources: Sequence[Any], format: str | None = None) -> Detection:
    """The one format of ``sources`` (paths, ``-`` or streams): ``format`` when given, else :func:`detect`'s.

    Inputs of two formats, a container, or an input whose format cannot be
    told are :class:`~lodtool.errors.LodUsageError`; streams need ``format``.

    >>> input_format(["a.jsonl", "b.ndjson"])
    Detection(name='jsonl', from_content=False)
    >>> input_format(["a.json", "b.npy"])
    Traceback (most recent call last):
    lodtool.errors.LodUsageError: inputs mix formats (a.json is json, b.npy is npy); pack one format at a time
    """
    if format is not None:
        if format not in _BY_NAME:
            raise LodUsageError(f"unknown input format {format!r}; choose one of {', '.join(_BY_NAME)}")
        return Detection(format, False)
    found: dict[str, str] = {}
    from_content = False
    for src in sources:
        if not isinstance(src, (str, os.PathLike)):
            raise LodUsageError(f"reading a stream needs format= ({_either(readable())})")
        detection = detect(src)
        if detection is None:
            extensions_hint = "" if is_stdin(src) else f" or the extension ({' '.join(extensions())})"
            raise LodUsageError(f"{label(src)}: cannot tell the format from the first bytes{extensions_hint}; "
                                f"give format=... ({_either(readable())})")
        if detection.name == CONTAINER:
            raise LodUsageError(f"{label(src)} is an HDF5 file, not JSON / JSON Lines / NPY / NPZ: a lodtool "
                                "container is packed already (read it with unpack, slice or head)")
        from_content = from_content or detection.from_content
        found.setdefault(detection.name, os.fspath(src))
    if len(found) > 1:
        (a, a_src), (b, b_src) = list(found.items())[:2]
        raise LodUsageError(f"inputs mix formats ({a_src} is {a}, {b_src} is {b}); pack one format at a time")
    return Detection(next(iter(found)), from_content)


def peek_stdin(n: int) -> bytes:
    """Up to ``n`` first bytes of stdin, left in it for the reader that comes next.

    A buffered stdin (a pipe, a file) is peeked: that gives what it has
    buffered, at least one byte unless it is empty.  A seekable stream (a
    test's ``BytesIO``) is read and sought back.  An unreadable stdin gives ``b""``.
    """
    try:
        stream = sys.stdin.buffer
        if hasattr(stream, "peek"):
            return stream.peek(n)[:n]
        if stream.seekable():
            start = stream.tell()
            head = stream.read(n)
            stream.seek(start)
            return head
    except (OSError, ValueError, AttributeError):  # no stdin, or one that cannot be peeked
        pass
    return b""


def _file_head(path: str | os.PathLike) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(DETECT_BYTES)
    except OSError:  # missing or unreadable: its reader says so, with the reason
        return b""


def _end_of_first_value(text: bytes) -> int | None:
    depth, in_string, escaped = 0, False, False
    for i, byte in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte == 0x5B:
            depth += 1
        elif byte == 0x5D:
            depth -= 1
            if depth == 0:
                return i + 1
    return None


#: offsets a stored tensor's writer reads at a time (:func:`offset_blocks`)
OFFSET_BLOCK = 1 << 20


def offset_blocks(stored: Any) -> list[Iterator]:
    """Per LoD level of a stored tensor, its offsets in blocks of :data:`OFFSET_BLOCK` (read as they are drawn):
    what a format's ``write_stored`` streams.

    >>> import numpy as np
    >>> from lodtool import LoDTensor
    >>> class Stored:  # the two members of a stored tensor it reads
    ...     level_sizes = [3]
    ...     def read_offsets(self, level, start, stop): return np.array([0, 2, 5])[start:stop]
    >>> [np.concatenate(list(b)).tolist() for b in offset_blocks(Stored())]
    [[0, 2, 5]]
    """
    def blocks(level: int) -> Iterator:
        size = stored.level_sizes[level]
        for start in range(0, size, OFFSET_BLOCK):
            yield stored.read_offsets(level, start, min(start + OFFSET_BLOCK, size))

    return [blocks(k) for k in range(len(stored.level_sizes))]


def same_tokens(sources: Sequence[Any], info_of, errors: tuple) -> Any:
    """The one token metadata ``info_of(path)`` finds in the files among ``sources`` (inputs that disagree are
    refused); a file ``info_of`` fails on with one of ``errors`` is skipped, for its reader to name the problem."""
    found: dict = {}
    for s in sources:
        if not isinstance(s, (str, os.PathLike)) or is_stdin(s) or not os.path.isfile(s):
            continue
        try:
            info = info_of(os.fspath(s))
        except LodError:
            raise
        except (*errors, OSError):
            continue
        if info is not None:
            found.setdefault(info, os.fspath(s))
    if len(found) > 1:
        (a, a_src), (b, b_src) = list(found.items())[:2]
        raise LodUsageError(f"{a_src} holds ids of {a.describe()} and {b_src} of {b.describe()}; pack one "
                            "vocabulary at a time")
    return next(iter(found), None)


def _either(names: Sequence[str]) -> str:
    return f"{', '.join(names[:-1])} or {names[-1]}" if len(names) > 1 else names[0]


__all__ = ["Format", "REGISTRY", "get", "readable", "writable", "extensions", "format_of_path", "format_of_bytes",
           "format_of_head", "detect", "input_format", "Detection", "peek_stdin", "is_stdin", "label",
           "open_path", "open_seekable", "seekable", "same_tokens", "offset_blocks", "OFFSET_BLOCK",
           "HDF5_SIGNATURE", "CONTAINER"]

