"""HuggingFace datatrove's tokenized files (``NAME.ds`` + ``NAME.ds.index``, optional ``.ds.loss``, ``.ds.metadata``).

``.ds`` holds the tokens, raw little-endian ``uint16`` or ``uint32``, no
header.  ``.ds.index`` holds each document's END offset in tokens as
``uint64`` (no leading 0, no count).  ``.ds.loss`` holds one byte (a bool)
per token: a loss mask sharing the tokens' LoD.  ``.ds.metadata`` is text,
``"{tokenizer}|{token size}\\n{token count}\\n{the count for humans}"``: the
only place the token size is written.

Without ``.ds.metadata`` the token size follows from the sizes: the
``.ds`` has ``token size x last end`` bytes, so exactly one of 2 and 4 fits
(``token_dtype`` is needed only when no token is stored at all, else it
must agree).  A dataset is a 1-level LoD (documents) of ``tokens`` and,
where a ``.ds.loss`` exists, ``loss``.

A dataset in object storage (a URL of its ``.ds`` or a side file) is read
in place too, as a Megatron one is: its ``.ds.index`` (and ``.ds.metadata``)
whole, in one request each, its tokens and loss mask by ranged requests.

>>> import os, tempfile
>>> from lodtool import LoDTensor
>>> p = os.path.join(tempfile.mkdtemp(), "x.ds")
>>> [os.path.basename(f) for f in write_datatrove(LoDTensor(np.array([5, 6, 7], np.uint16), [[0, 2, 2, 3]]), p)]
['x.ds', 'x.ds.index']
>>> with open_datatrove(p) as f:
...     f.names, f.tensor().lod_level, f.tensor()[2].data.tolist()
(['tokens'], 1, [7])
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from .. import storage
from ..errors import LodFormatError, LodUsageError
from ..tensor import LoDTensor
from ..limits import STREAM_CHUNK_BYTES, resolve_max_memory
from ..tokens import TokenInfo
from ._tokens import (BLOCK, RangedTokens, TokenFile, TokenProblem, TokenTensor, atomic_files, check_window,
                      file_size, first_index, little_endian, map_array, output_prefix, raise_first, read_chunks,
                      resolve_token_dtype, token_problems, writer_levels)

SUFFIXES = (".index", ".loss", ".metadata")
TOKEN_DTYPES = (np.dtype("uint16"), np.dtype("uint32"))
#: the most bytes a ``.ds.metadata`` may have (three short lines)
METADATA_LIMIT = 1 << 16


def paths(path: str | os.PathLike) -> dict[str, str]:
    """The files of the dataset ``path`` names (its ``.ds`` or any of its side files).

    >>> paths("d/x.ds.index")["tokens"], paths("d/x.ds")["loss"]
    ('d/x.ds', 'd/x.ds.loss')
    """
    p = os.fspath(path)
    for s in SUFFIXES:
        if p.endswith(".ds" + s):
            p = p[:-len(s)]
    return {"tokens": p, "index": p + ".index", "loss": p + ".loss", "metadata": p + ".metadata"}


def read_metadata(path: str) -> tuple[str, int, int] | None:
    """``(tokenizer, token size, token count)`` of a ``.ds.metadata`` (None if there is none); a URL is read in
    one request."""
    if storage.is_url(path):
        if not storage.exists(path):
            return None
        raw, path = storage.read_bytes(path, METADATA_LIMIT), storage.redact(path)
    elif not os.path.exists(path):
        return None
    else:
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except OSError as exc:
            raise LodFormatError(f"{path}: cannot read it ({exc})") from None
    try:
        lines = raw.decode("utf-8").split("\n")
    except UnicodeDecodeError as exc:
        raise LodFormatError(f"{path}: cannot read it ({exc})") from None
    name, _, size = lines[0].rpartition("|")
    try:
        token_size, count = int(size), int(lines[1]) if len(lines) > 1 else -1
    except ValueError:
        raise LodFormatError(f"{path}: line 1 must be TOKENIZER|TOKEN_SIZE and line 2 the token count, got "
                             f"{lines[:2]!r}") from None
    if token_size not in (2, 4):
        raise LodFormatError(f"{path}: line 1: token size {token_size}; datatrove writes 2 or 4")
    return name, token_size, count


class Dataset:
    """A datatrove file's parts: the document ends (memory-mapped, or read whole from a URL), the token dtype, the
    sizes."""

    def __init__(self, path: str | os.PathLike, token_dtype: Any = None):
        located = paths(path)
        #: where the tokens and the loss mask are read from: the files, or their URLs (messages name them redacted)
        self.sources = {k: located[k] for k in ("tokens", "loss")}
        if storage.is_url(located["tokens"]):
            self.files = {k: storage.redact(v) for k, v in located.items()}
            self.ds_size = int(storage.info(located["tokens"]).get("size") or 0)
            whole = storage.read_bytes(located["index"], resolve_max_memory(None))
            index_size = len(whole)
            ends = lambda: np.frombuffer(whole, "<u8", index_size // 8)  # noqa: E731
            self.loss_size = int(storage.info(located["loss"]).get("size") or 0) \
                if storage.exists(located["loss"]) else None
        else:
            self.files = located
            self.ds_size = file_size(located["tokens"], "token file (.ds)")
            index_size = file_size(located["index"], "index file (.ds.index)")
            ends = lambda: map_array(located["index"], "<u8", index_size // 8)  # noqa: E731
            self.loss_size = os.path.getsize(located["loss"]) if os.path.exists(located["loss"]) else None
        self.path = self.files["tokens"]
        if index_size % 8:
            raise LodFormatError(f"{self.files['index']}: byte {index_size - index_size % 8}: {index_size} bytes is not "
                                 "a whole number of uint64 document ends (truncated?)")
        self.ends = ends()
        self.metadata = read_metadata(located["metadata"])
        self.dtype = self._token_dtype(resolve_token_dtype(token_dtype, TOKEN_DTYPES, "datatrove"))
        self.n_tokens = int(self.ends[-1]) if self.ends.size else 0
        raise_first(self._size_problems())

    def values(self, part: str, dtype: Any, count: int):
        """The first ``count`` values of ``part`` (``tokens`` or ``loss``): memory-mapped, or read by ranged
        requests from a URL."""
        source = self.sources[part]
        if storage.is_url(source):
            size = self.ds_size if part == "tokens" else self.loss_size
            return RangedTokens(source, dtype, count, size)
        return map_array(source, dtype, count)

    def _token_dtype(self, given: np.dtype | None) -> np.dtype:
        meta = np.dtype(f"<u{self.metadata[1]}") if self.metadata else None
        last = int(self.ends[-1]) if self.ends.size else 0
        fits = [d for d in TOKEN_DTYPES if last and self.ds_size == last * d.itemsize]
        for source, dt in (("token_dtype", given), (self.files["metadata"], meta)):
            if dt is not None and fits and dt not in fits:
                raise LodFormatError(f"{self.path}: {source} says {dt.name} tokens, but {last:,} tokens take "
                                     f"{self.ds_size:,} bytes, so they are {fits[0].name}")
        found = next((d for d in (given, meta, fits[0] if fits else None) if d is not None), None)
        if found is None:
            if last:
                raise LodFormatError(f"{self.files['index']}: entry {self.ends.size - 1}: the documents end at token "
                                     f"{last:,}, but {self.path} has {self.ds_size:,} bytes, which is neither 2 nor 4 "
                                     "bytes a token (truncated, or bytes after the last document?); give token_dtype=...")
            found = np.dtype("uint16")  # no token stored: datatrove's default size
        return little_endian(found)

    def _size_problems(self) -> list[TokenProblem]:
        """O(1): the last end against the ``.ds`` (the first document past it is named) and the loss size."""
        isz, problems = self.dtype.itemsize, []
        stored = self.ds_size // isz
        if self.n_tokens > stored:
            first = next(start + j for start in range(0, self.ends.size, BLOCK)
                         if (j := first_index(self.ends[start:start + BLOCK] > stored)) is not None)
            problems.append(TokenProblem(self.files["index"], "document_ends", first,
                                         f"document {first} ends at token {int(self.ends[first]):,}, but "
                                         f"{self.path} holds {stored:,} {self.dtype.name} tokens (a truncated .ds, "
                                         "or ends past it)"))
        if self.loss_size is not None and self.loss_size != self.n_tokens:
            problems.append(TokenProblem(self.files["loss"], "", None,
                                         f"{self.loss_size:,} loss bytes for {self.n_tokens:,} tokens (one per "
                                         "token is needed)"))
        return problems

    def offsets(self, start: int, stop: int) -> np.ndarray:
        """Entries ``start..stop`` of the documents' token offsets (a 0, then the ends) as int64."""
        check_window(start, stop, self.ends.size + 1, f"{self.files['index']}: offsets")
        out = np.empty(stop - start, np.int64)
        lo = max(start, 1)
        if start == 0 and stop > 0:
            out[0] = 0
        if stop > lo:
            ends = self.ends[lo - 1:stop - 1]
            if ends.size and int(ends.max()) > np.iinfo(np.int64).max:
                raise LodFormatError(f"{self.files['index']}: an end in entries {lo - 1}..{stop - 2} does not fit "
                                     "in int64")
            out[lo - start:] = ends
        return out

    def problems(self, max_problems: int = 20) -> list[TokenProblem]:
        """The sizes, then every decrease of the document ends (by index), block by block."""
        problems = self._size_problems()
        found = 0
        index = self.files["index"]
        for start in range(0, self.ends.size, BLOCK):
            block = self.ends[max(start - 1, 0):start + BLOCK]
            shift = 1 if start else 0
            for j in np.flatnonzero(block[1:] < block[:-1])[:max_problems - found]:
                i = start - shift + int(j) + 1
                problems.append(TokenProblem(index, "document_ends", i,
                                             f"document {i} ends at token {int(block[j + 1]):,}, before document "
                                             f"{i - 1} ends (at {int(block[j]):,}); the ends must not decrease"))
                found += 1
            if found >= max_problems:
                break
        stored = self.ds_size // self.dtype.itemsize
        if not problems and (self.ds_size % self.dtype.itemsize or stored > self.n_tokens):
            problems.append(TokenProblem(self.path, "", None, f"{self.ds_size - self.n_tokens * self.dtype.itemsize:,} "
                                         "bytes after the last document's end; the index does not cover them"))
        return problems


def open_datatrove(path: str | os.PathLike, *, token_dtype: Any = None) -> TokenFile:
    """Open a datatrove file in place: ``tokens`` (and ``loss`` where a ``.ds.loss`` exists), memory-mapped views
    of one level (``document``) whose offsets are int64 windows of the ``.ds.index``."""
    d = Dataset(path, token_dtype)
    tensors = {"tokens": TokenTensor(d.path, d.values("tokens", d.dtype, d.n_tokens), [d.offsets],
                                     [d.ends.size + 1], ("document",), d.problems)}
    if d.loss_size is not None:
        tensors["loss"] = TokenTensor(d.files["loss"], d.values("loss", np.bool_, d.n_tokens), [d.offsets],
                                      [d.ends.size + 1], ("document",), d.problems, name="loss")
    info = {"token_size": d.dtype.itemsize, "documents": int(d.ends.size),
            "tokenizer": d.metadata[0] if d.metadata else None}
    present = {"tokens": True, "index": True, "loss": d.loss_size is not None, "metadata": d.metadata is not None}
    files = [f for key, f in d.files.items() if present[key]]
    return TokenFile(d.path, "datatrove", tensors, files=files, info=info)


def validate_datatrove(path: str | os.PathLike, *, token_dtype: Any = None, vocab_size: int | None = None,
                       max_problems: int = 20) -> list[TokenProblem]:
    """Every finding of a datatrove file: sizes, document ends that decrease, the loss mask's size, the metadata's
    token count and (with ``vocab_size``) every token id.  A file whose index cannot be read at all raises.

    >>> import os, tempfile
    >>> from lodtool import LoDTensor
    >>> p = os.path.join(tempfile.mkdtemp(), "x.ds")
    >>> _ = write_datatrove(LoDTensor(np.array([5, 6, 7], np.uint16), [[0, 2, 3]]), p)
    >>> [str(x).split("/")[-1] for x in validate_datatrove(p, vocab_size=7)]
    ['x.ds: tokens[2]: token id 7 is not under the vocabulary size 7']
    """
    d = Dataset(path, token_dtype)
    problems = d.problems(max_problems)
    if d.metadata and d.metadata[2] >= 0 and d.metadata[2] != d.n_tokens:
        problems.append(TokenProblem(d.files["metadata"], "", None, f"line 2 counts {d.metadata[2]:,} tokens, but the "
                                     f"index ends at {d.n_tokens:,}"))
    if vocab_size is not None:
        tokens = d.values("tokens", d.dtype, min(d.n_tokens, d.ds_size // d.dtype.itemsize))
        problems += token_problems(tokens, vocab_size, d.path, max_problems=max_problems)
    return problems


# -- writing ------------------------------------------------------------------------------------------
def _output_paths(out: Any) -> dict[str, str]:
    base = output_prefix(out, "datatrove", SUFFIXES)
    return paths(base if base.endswith(".ds") else base + ".ds")


def write_chunks(chunks: Iterable[LoDTensor], out: str | os.PathLike, *, loss: Iterable[LoDTensor] | None = None,
                 level: int | None = None) -> list[str]:
    """Write chunks of whole documents as ``NAME.ds`` + ``NAME.ds.index`` (+ ``NAME.ds.loss`` from the ``loss``
    chunks, bools sharing the tokens' LoD); every file appears, or none.  Returns the paths written.  A
    ``.ds.loss`` or ``.ds.metadata`` already beside the output that this write does not replace is refused
    (it would describe other tokens).

    >>> import os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "x.ds")
    >>> t = LoDTensor(np.array([1, 2, 3], np.uint32), [[0, 1, 3]])
    >>> [os.path.basename(f) for f in write_chunks([t], p, loss=[LoDTensor(np.array([1, 0, 1], bool), [[0, 1, 3]])])]
    ['x.ds', 'x.ds.index', 'x.ds.loss']
    >>> np.fromfile(p + ".index", "<u8").tolist()
    [1, 3]
    """
    files = _output_paths(out)
    targets = [files["tokens"], files["index"]] + ([files["loss"]] if loss is not None else [])
    stale = next((files[k] for k in ("loss", "metadata") if files[k] not in targets and os.path.exists(files[k])),
                 None)
    if stale is not None:
        raise LodUsageError(f"{stale}: exists beside the output and would no longer match its tokens; remove it, "
                            "or write to another name")
    loss_iter = iter(loss) if loss is not None else None
    dtype = None
    written = 0
    with atomic_files(targets) as tmps:
        with open(tmps[0], "wb") as tf, open(tmps[1], "wb") as xf, \
                (open(tmps[2], "wb") if loss_iter is not None else contextlib.nullcontext()) as lf:
            for chunk in chunks:
                if dtype is None:
                    dtype = chunk.dtype
                    if dtype not in TOKEN_DTYPES:
                        raise LodUsageError(f"{files['tokens']}: datatrove stores uint16 or uint32 tokens, not "
                                            f"{dtype}; cast them with dtype=...")
                elif chunk.dtype != dtype:
                    raise LodFormatError(f"{files['tokens']}: a chunk of {chunk.dtype} after chunks of {dtype}")
                seq, _ = writer_levels(chunk, 1, level, "datatrove", files["tokens"])
                data = np.ascontiguousarray(chunk.data, dtype=little_endian(dtype))[int(seq[0]):int(seq[-1])]
                tf.write(memoryview(data).cast("B"))
                ends = (seq[1:] - seq[0] + written).astype("<u8")
                xf.write(memoryview(ends).cast("B"))
                written += data.size
                if loss_iter is not None:
                    mask = next(loss_iter, None)
                    if mask is None or mask.lod != chunk.lod or mask.dtype != np.bool_:
                        raise LodUsageError(f"{files['loss']}: the loss mask needs bools with the tokens' LoD")
                    lf.write(np.ascontiguousarray(mask.data, np.bool_)[int(seq[0]):int(seq[-1])].tobytes())
        if dtype is None:
            raise LodUsageError(f"{files['tokens']}: nothing to write (no chunks)")
    return targets


def write_datatrove(tensor: LoDTensor, out: str | os.PathLike, *, loss: LoDTensor | None = None,
                    level: int | None = None) -> list[str]:
    """Write a tensor held in memory (and its loss mask) as a datatrove file; see :func:`write_chunks`."""
    return write_chunks([tensor], out, loss=None if loss is None else [loss], level=level)


# -- the io registry's entry points (see lodtool.io) ------------------------------------------------
def read(fmt: str, sources: Sequence[Any], *, lod_level: int | None = None, dtype: Any = None,
         chunk_bytes: int = STREAM_CHUNK_BYTES, progress: Callable[[int], None] | None = None,
         stats: dict | None = None, token_dtype: Any = None) -> Iterator[LoDTensor]:
    """The registry's reader: each ``.ds`` in place, as chunks of whole documents (files concatenate)."""
    for s in sources:
        if not isinstance(s, (str, os.PathLike)):
            raise LodUsageError("datatrove is read from files (NAME.ds + NAME.ds.index), not from a stream")
    return read_chunks((open_datatrove(s, token_dtype=token_dtype) for s in sources), lod_level=lod_level,
                       dtype=dtype, chunk_bytes=chunk_bytes, progress=progress, stats=stats)


def output_files(fmt: str, out: Any) -> list[str]:
    """The registry's file names: ``[NAME.ds, NAME.ds.index]`` for the output path ``out`` (``NAME.ds``, ``NAME``
    or a side file)."""
    files = _output_paths(out)
    return [files["tokens"], files["index"]]


def write_files(fmt: str, chunks: Iterable[LoDTensor], out: Any, *, level: int | None = None) -> list[str]:
    """The registry's writer: chunks of whole documents to ``NAME.ds`` + ``NAME.ds.index``."""
    return write_chunks(chunks, out, level=level)


# -- token metadata, for pack ------------------------------------------------------------------------
def token_info(fmt: str, sources: Sequence[Any], **_options) -> TokenInfo | None:
    """The tokenizer name the ``.ds.metadata`` files record (one name for all inputs), as :class:`TokenInfo`.

    Inputs whose metadata names different tokenizers are refused: their ids do not share a vocabulary.

    >>> import os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "x.ds")
    >>> _ = open(p + ".metadata", "w").write("gpt2|2\\n3\\n3.0\\n")
    >>> token_info("datatrove", [p]).tokenizer_name
    'gpt2'
    """
    names = {}
    for s in sources:
        if isinstance(s, (str, os.PathLike)):
            meta = read_metadata(paths(s)["metadata"])
            if meta is not None and meta[0]:
                names.setdefault(meta[0], os.fspath(s))
    if len(names) > 1:
        (a, a_src), (b, b_src) = list(names.items())[:2]
        raise LodUsageError(f"{a_src} was tokenized with {a} and {b_src} with {b}; pack one tokenizer at a time")
    return TokenInfo(tokenizer_name=next(iter(names))) if names else None


__all__ = ["token_info", "paths", "read_metadata", "open_datatrove", "validate_datatrove", "write_chunks",
           "write_datatrove", "read", "output_files", "write_files"]
