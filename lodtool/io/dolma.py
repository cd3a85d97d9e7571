"""OLMo / dolma token arrays: ``NAME.npy`` with NO NPY header (a raw ``numpy.memmap``), documents from
``NAME.csv.gz`` or from EOS tokens.

dolma's ``MemmapWriter`` writes the tokens as a raw memmap of the dtype given
on its command line (``--dtype``; OLMo reads it with ``memmap_dtype``,
default uint16), and beside it a gzipped CSV with one row per document:
``start,end,id,src,loc`` (``start`` and ``end`` in tokens, end exclusive).
OLMo finds documents either from that file or by scanning for its EOS token.

Nothing in the ``.npy`` says its dtype: ``token_dtype`` does.  Where a
``.csv.gz`` exists and ``token_dtype`` is not given, the dtype whose size
makes the last document end at the end of the file is taken (exactly one of
uint16, uint32, uint64 can); without a ``.csv.gz``, ``eos_token_id`` makes
each document end after an EOS token (trailing tokens after the last EOS
are one more document).  The document ids and sources of the ``.csv.gz``
are not kept.  A dataset is a 1-level LoD (``document``) of ``tokens``.

>>> import os, tempfile
>>> from lodtool import LoDTensor
>>> p = os.path.join(tempfile.mkdtemp(), "part-0.npy")
>>> [os.path.basename(f) for f in write_dolma(LoDTensor(np.array([5, 6, 0, 7], np.uint32), [[0, 3, 4]]), p)]
['part-0.npy', 'part-0.csv.gz']
>>> with open_dolma(p) as f:
...     f.tensor().dtype, f.tensor().read().lod
(dtype('uint32'), [[0, 3, 4]])
>>> with open_dolma(p, token_dtype="uint32", eos_token_id=0, boundaries="eos") as f:
...     f.tensor().read().lod
[[0, 3, 4]]
"""

from __future__ import annotations

import csv
import gzip
import io
import os
import zlib
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from ..errors import LodFormatError, LodUsageError
from ..tensor import LoDTensor
from ..limits import STREAM_CHUNK_BYTES
from ._tokens import (BLOCK, TokenFile, TokenProblem, TokenTensor, atomic_files, check_window,
                      file_size, little_endian, map_array, output_prefix, read_chunks, resolve_token_dtype,
                      token_problems, writer_levels)

TOKEN_DTYPES = tuple(np.dtype(d) for d in ("uint8", "uint16", "uint32", "uint64", "int32", "int64"))
#: dtypes a ``.csv.gz`` can tell apart by size (dolma's --dtype choices)
_INFERRED = tuple(np.dtype(d) for d in ("uint16", "uint32", "uint64"))
BOUNDARIES = ("auto", "csv", "eos")


def paths(path: str | os.PathLike) -> tuple[str, str]:
    """``(tokens, metadata)``: the ``.npy`` and the ``.csv.gz`` beside it, as dolma names them.

    >>> paths("d/part-3.npy"), paths("d/part-3.csv.gz")[0], paths("d/web.v2.npy")[1]
    (('d/part-3.npy', 'd/part-3.csv.gz'), 'd/part-3.npy', 'd/web.v2.csv.gz')
    """
    base = os.fspath(path)
    for suffix in (".csv.gz", ".npy"):  # one of its own suffixes; other dots belong to the name
        if base.endswith(suffix) and len(base) > len(suffix):
            base = base[:-len(suffix)]
            break
    return base + ".npy", base + ".csv.gz"


def read_boundaries(path: str) -> np.ndarray:
    """The documents' token offsets from a dolma ``.csv.gz``: ``[start_0, end_0, end_1, ...]`` as int64, each row
    checked to start where the previous one ended (a row that does not is named by its line)."""
    ends: list[int] = []
    try:
        with gzip.open(path, "rt", encoding="utf-8", newline="") as f:
            for line, row in enumerate(csv.reader(f), 1):
                try:
                    start, end = int(row[0]), int(row[1])
                except (IndexError, ValueError):
                    raise LodFormatError(f"{path}: line {line}: {row[:2]!r} is not START,END (token offsets)") \
                        from None
                previous = ends[-1] if ends else 0
                if start != previous or end < start:
                    before = "the array starts at token 0" if line == 1 else \
                        f"the document before it ends at {previous:,}"
                    why = f"starts at token {start:,}, but {before}" if start != previous else \
                        f"ends at token {end:,}, before its start {start:,}"
                    raise LodFormatError(f"{path}: line {line}: document {line - 1} {why} (documents must tile "
                                         "the token array)")
                ends.append(end)
    except (OSError, EOFError, zlib.error, UnicodeDecodeError, csv.Error) as exc:
        raise LodFormatError(f"{path}: cannot read it as a gzipped CSV ({exc})") from None
    out = np.zeros(len(ends) + 1, np.int64)
    out[1:] = ends
    return out


def eos_boundaries(tokens: np.ndarray, eos: int) -> np.ndarray:
    """Document offsets where each document ends after an ``eos`` token (a tail without one is a document too).

    >>> eos_boundaries(np.array([5, 0, 6, 7, 0, 8], np.uint16), 0).tolist()
    [0, 2, 5, 6]
    """
    parts = [np.zeros(1, np.int64)]
    for start in range(0, tokens.shape[0], BLOCK * 16):
        hits = np.flatnonzero(tokens[start:start + BLOCK * 16] == eos)
        parts.append(hits.astype(np.int64) + (start + 1))
    out = np.concatenate(parts)
    if out[-1] != tokens.shape[0]:
        out = np.append(out, tokens.shape[0])
    return out


def _dtype(npy: str, size: int, given: np.dtype | None, offsets: np.ndarray | None) -> np.dtype:
    if offsets is not None and offsets.size > 1 and int(offsets[-1]) > 0:
        fits = [d for d in _INFERRED if size == int(offsets[-1]) * d.itemsize]
        if given is None and len(fits) == 1:
            return fits[0]
    if given is None:
        raise LodUsageError(f"{npy}: a dolma token array records no dtype; give token_dtype=... (the --dtype it was "
                            "tokenized with, e.g. uint16 or uint32)")
    return given


def open_dolma(path: str | os.PathLike, *, token_dtype: Any = None, eos_token_id: int | None = None,
               boundaries: str = "auto") -> TokenFile:
    """Open a dolma / OLMo token array in place: ``tokens``, a memory-mapped view of one level (``document``).

    ``boundaries``: ``"csv"`` (the ``.csv.gz``), ``"eos"`` (scan for
    ``eos_token_id``) or ``"auto"`` (the ``.csv.gz`` where it exists, else EOS).
    The ``.csv.gz`` is read whole (it is compressed text); an EOS scan reads
    the tokens once.
    """
    npy, meta = paths(path)
    if boundaries not in BOUNDARIES:
        raise LodUsageError(f"boundaries must be one of {', '.join(BOUNDARIES)}, got {boundaries!r}")
    size = file_size(npy, "token file (.npy)")
    given = resolve_token_dtype(token_dtype, TOKEN_DTYPES, "dolma")
    use_csv = boundaries == "csv" or (boundaries == "auto" and os.path.exists(meta))
    if use_csv:
        file_size(meta, "document file (.csv.gz)")
        offsets = read_boundaries(meta)
    elif eos_token_id is None:
        raise LodUsageError(f"{npy}: a dolma token array (a .npy without an NPY header) with no "
                            f"{os.path.basename(meta)} beside it; give eos_token_id=... to find the documents by "
                            "their EOS token")
    else:
        offsets = None
    dtype = little_endian(_dtype(npy, size, given, offsets))
    with open(npy, "rb") as f:
        if f.read(6) == b"\x93NUMPY":
            raise LodFormatError(f"{npy}: byte 0: this is a real .npy (it has an NPY header); dolma arrays have none "
                                 "(read it as npy)")
    stored = size // dtype.itemsize
    if offsets is None:
        tokens = map_array(npy, dtype, stored)
        if eos_token_id is not None and not 0 <= int(eos_token_id) <= np.iinfo(dtype).max:
            raise LodUsageError(f"eos_token_id={eos_token_id} is not a {dtype.name} value")
        offsets = eos_boundaries(tokens, int(eos_token_id))
    else:
        if int(offsets[-1]) > stored:
            row = int(np.argmax(offsets[1:] > stored))
            raise LodFormatError(f"{meta}: line {row + 1}: document {row} ends at token {int(offsets[row + 1]):,}, but "
                                 f"{npy} holds {stored:,} {dtype.name} tokens (truncated .npy, or the wrong "
                                 "token_dtype)")
        tokens = map_array(npy, dtype, int(offsets[-1]))
    offsets.flags.writeable = False

    def window(start: int, stop: int) -> np.ndarray:
        check_window(start, stop, offsets.size, f"{npy}: document offsets")
        return offsets[start:stop]

    def problems(max_problems: int) -> list[TokenProblem]:
        """What is left to find: the rows tile the array from token 0 (read_boundaries), EOS offsets do too."""
        found = []
        end = int(offsets[-1]) * dtype.itemsize
        if size > end:
            found.append(TokenProblem(npy, "", None, f"{size - end:,} bytes after the last document's end; the "
                                      "documents do not cover them"))
        return found

    t = TokenTensor(npy, tokens, [window], [offsets.size], ("document",), problems)
    info = {"boundaries": "csv" if use_csv else "eos", "documents": int(offsets.size - 1), "dtype": dtype.name}
    return TokenFile(npy, "dolma", {"tokens": t}, files=[npy] + ([meta] if use_csv else []), info=info)


def validate_dolma(path: str | os.PathLike, *, token_dtype: Any = None, eos_token_id: int | None = None,
                   boundaries: str = "auto", vocab_size: int | None = None,
                   max_problems: int = 20) -> list[TokenProblem]:
    """Every finding of a dolma token array: documents tiling the array from token 0 to its end and (with
    ``vocab_size``) every token id.  Rows that do not tile, or a ``.npy`` shorter than its documents, raise.

    >>> import os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "a.npy")
    >>> _ = write_dolma(LoDTensor(np.array([3, 9], np.uint16), [[0, 1, 2]]), p)
    >>> [x.message for x in validate_dolma(p, token_dtype="uint16", vocab_size=5)]
    ['token id 9 is not under the vocabulary size 5']
    """
    with open_dolma(path, token_dtype=token_dtype, eos_token_id=eos_token_id, boundaries=boundaries) as f:
        t = f.tensor()
        problems = t.validate(max_problems)
        if vocab_size is not None:
            problems += token_problems(t.read_rows(0, t.n_rows), vocab_size, t.path, max_problems=max_problems)
        return problems


# -- writing ------------------------------------------------------------------------------------------
def write_chunks(chunks: Iterable[LoDTensor], out: str | os.PathLike, *, level: int | None = None,
                 source: str = "") -> list[str]:
    """Write chunks of whole documents as dolma does: ``NAME.npy`` (raw tokens) and ``NAME.csv.gz`` (rows
    ``start,end,id,src,loc``: ``id`` and ``loc`` the document number, ``src`` the ``source`` given); both
    appear, or neither.  Returns the paths written.

    >>> import os, tempfile, gzip
    >>> p = os.path.join(tempfile.mkdtemp(), "part-0.npy")
    >>> _ = write_chunks([LoDTensor(np.array([7, 8, 9], np.uint16), [[0, 2, 3]])], p, source="s3://x.json.gz")
    >>> gzip.open(p[:-4] + ".csv.gz", "rt").read().splitlines()
    ['0,2,0,s3://x.json.gz,0', '2,3,1,s3://x.json.gz,1']
    """
    npy, meta = output_files("dolma", out)
    dtype = None
    written = documents = 0
    with atomic_files([npy, meta]) as (npy_tmp, meta_tmp):
        with open(npy_tmp, "wb") as tf, open(meta_tmp, "wb") as raw, \
                gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz, \
                io.TextIOWrapper(gz, encoding="utf-8", newline="") as text:
            rows = csv.writer(text)
            for chunk in chunks:
                if dtype is None:
                    dtype = chunk.dtype
                    if dtype not in TOKEN_DTYPES:
                        raise LodUsageError(f"{npy}: dolma token arrays hold "
                                            f"{', '.join(d.name for d in TOKEN_DTYPES)}, not {dtype}; cast them with "
                                            "dtype=...")
                elif chunk.dtype != dtype:
                    raise LodFormatError(f"{npy}: a chunk of {chunk.dtype} after chunks of {dtype}")
                seq, _ = writer_levels(chunk, 1, level, "dolma", npy)
                data = np.ascontiguousarray(chunk.data, dtype=little_endian(dtype))[int(seq[0]):int(seq[-1])]
                tf.write(memoryview(data).cast("B"))
                starts = (seq - seq[0] + written).tolist()
                for i in range(len(starts) - 1):
                    rows.writerow([starts[i], starts[i + 1], documents + i, source, documents + i])
                documents += len(starts) - 1
                written += data.size
        if dtype is None:
            raise LodUsageError(f"{npy}: nothing to write (no chunks)")
    return [npy, meta]


def write_dolma(tensor: LoDTensor, out: str | os.PathLike, *, level: int | None = None) -> list[str]:
    """Write a tensor held in memory as a dolma token array and its ``.csv.gz``; see :func:`write_chunks`."""
    return write_chunks([tensor], out, level=level)


# -- the io registry's entry points (see lodtool.io) ------------------------------------------------
def read(fmt: str, sources: Sequence[Any], *, lod_level: int | None = None, dtype: Any = None,
         chunk_bytes: int = STREAM_CHUNK_BYTES, progress: Callable[[int], None] | None = None,
         stats: dict | None = None, token_dtype: Any = None, eos_token_id: int | None = None) -> Iterator[LoDTensor]:
    """The registry's reader: each token array in place, as chunks of whole documents (arrays concatenate)."""
    for s in sources:
        if not isinstance(s, (str, os.PathLike)):
            raise LodUsageError("dolma is read from files (NAME.npy + NAME.csv.gz), not from a stream")
    opened = (open_dolma(s, token_dtype=token_dtype, eos_token_id=eos_token_id) for s in sources)
    return read_chunks(opened, lod_level=lod_level, dtype=dtype, chunk_bytes=chunk_bytes, progress=progress,
                       stats=stats)


def output_files(fmt: str, out: Any) -> list[str]:
    """The registry's file names: ``[NAME.npy, NAME.csv.gz]`` for the output path ``out``."""
    return list(paths(output_prefix(out, fmt, (".npy", ".csv.gz"))))


def write_files(fmt: str, chunks: Iterable[LoDTensor], out: Any, *, level: int | None = None) -> list[str]:
    """The registry's writer: chunks of whole documents to ``NAME.npy`` (no NPY header) + ``NAME.csv.gz``."""
    return write_chunks(chunks, out, level=level)


__all__ = ["paths", "read_boundaries", "eos_boundaries", "open_dolma", "validate_dolma", "write_chunks", "write_dolma",
           "read", "output_files", "write_files"]
