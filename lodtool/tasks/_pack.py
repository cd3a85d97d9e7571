"""``pack``: ragged JSON, JSON Lines, NPY, NPZ, Parquet, Arrow or Paddle tensors into a container (``lodtool pack``).

The input is read in chunks of whole top-level sequences and each chunk is
appended to the container as it comes, so memory stays bounded whatever the
input size.  Parsing runs in a second thread (the fast JSON path releases the
GIL), overlapping the writing and compression of the previous chunk.  A failed
pack leaves no output: the container is committed only when everything is in.

>>> import os, tempfile
>>> d = tempfile.mkdtemp()
>>> src = os.path.join(d, "docs.jsonl")
>>> _ = open(src, "w").write("[[1, 2], [3]]\\n[[4, 5, 6]]\\n")
>>> r = pack([src], os.path.join(d, "docs.lod.h5"), level_names=["doc", "sentence"])
>>> r.sequences, r.rows, r.lod_level, str(r.dtype)
(2, 6, 2, 'int64')
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import BinaryIO, Callable, Iterator, Sequence

import numpy as np

from ..errors import LodInputError, LodUsageError
from ..tensor import LoDTensor
from .. import io as formats
from ..container import filters
from ..container.writer import AUTO_INT, MAPPED_CHUNK_BYTES, PACK_REMEDY, LodWriter
from ..limits import STREAM_CHUNK_BYTES, resolve_max_memory
from ..io._values import resolve_dtype
from ._pipe import read_ahead
from ..io.text import TextOptions
from ..tokens import TOKEN_FIELDS, TokenInfo, dtype_problem

#: the input formats ``pack`` reads
INPUT_FORMATS = formats.readable()
#: parse the next chunk in a thread while the previous one is written (measured: see benchmarks/bench_ingest.py)
OVERLAP = True


@dataclass(frozen=True)
class PackResult:
    """What :func:`pack` wrote (``rows`` and ``sequences`` count this call's input only, also when appending)."""

    output: str
    name: str
    rows: int
    sequences: int
    lod_level: int
    dtype: np.dtype
    bytes_read: int
    #: the input format when it was detected from the first bytes (stdin, an unknown extension), else None
    detected_format: str | None = None
    #: with ``dtype="auto-int"``: the data's bytes saved against int64 before compression (0 otherwise)
    bytes_saved: int = 0
    #: with ``dtype="auto-int"``: the bytes the tensor (data and offsets) takes in the file, compressed (0 otherwise)
    stored_bytes: int = 0


def pack(inputs: Sequence[str | os.PathLike | BinaryIO], output: str | os.PathLike, *, format: str | None = None,
         lod_level: int | None = None, dtype=None, name: str = "tensor", level_names: Sequence[str] | None = None,
         compression: str | None = None, append: bool = False, overwrite: bool = False, force: bool = False,
         chunk_bytes: int = STREAM_CHUNK_BYTES, progress: Callable[[int], None] | None = None,
         column: str | None = None, max_memory: int | None = None, token_dtype=None,
         eos_token_id: int | None = None, tokens: TokenInfo | None = None,
         text: TextOptions | None = None) -> PackResult:
    """Pack ragged input into tensor ``name`` of the container ``output``.

    ``inputs`` are paths, ``-`` (stdin) or binary streams, all of one
    ``format`` (one of :func:`lodtool.io.readable`: ``json``, ``jsonl``,
    ``npy``, ``npz``, ``parquet``, ``arrow``, ``pdtensor``; default: from the
    file extensions, else from the first bytes of stdin or of the file, see
    :func:`lodtool.io.detect`; streams need it).  Several inputs concatenate
    as top-level sequences, in order: each .npy file is one sequence, every
    other input adds its sequences.
    ``lod_level``, ``dtype`` and the value policies are those of
    :mod:`lodtool.io.json`; ``dtype=None`` infers (and promotes int64 to
    float64 when a later chunk holds floats); ``dtype="auto-int"`` stores the
    narrowest integer dtype that holds every value (unsigned when none is
    negative), widening as later chunks need it, and never losing a value.
    Into an existing container the
    tensor is added and the file's other tensors are kept; a tensor ``name``
    that is already there is refused unless ``append=True`` (add the
    sequences to it; a missing file is created) or ``overwrite=True``
    (replace it); ``force=True`` replaces the whole file.  ``chunk_bytes`` is
    how much input is parsed at a time; ``progress(n)`` is called with the bytes
    read so far.  ``column`` picks the column of a table input (parquet,
    arrow; default: its only column).  ``token_dtype`` and ``eos_token_id`` are what a token dataset
    cannot say itself (a dolma array's dtype and, without its ``.csv.gz``, its EOS token; a fairseq dtype
    code that differs between forks); ``eos_token_id`` is recorded as the tensor's EOS id, whatever the input.  An input read whole (an NPZ archive) must fit in ``max_memory``
    (default ``min(available RAM / 2, 4 GiB)``), checked before it is inflated.  Errors are
    :class:`~lodtool.errors.LodError` subclasses and
    leave ``output`` as it was.  ``tokens`` (:class:`~lodtool.tokens.TokenInfo`: vocabulary size, special
    ids, tokenizer) is recorded with the tensor, over what the input records itself (the tokenizer name of
    a datatrove ``.ds.metadata``).  ``text`` (:class:`lodtool.io.text.TextOptions`) packs text instead:
    JSON Lines, Parquet or plain text, tokenized as it streams by a local ``tokenizer.json``, into the
    narrowest unsigned dtype that holds the vocabulary, the tokenizer recorded (``docs/text.md``).

    >>> import os, tempfile, numpy as np
    >>> from lodtool.container import load
    >>> d = tempfile.mkdtemp()
    >>> a, b = os.path.join(d, "a.npy"), os.path.join(d, "b.npy")
    >>> np.save(a, np.zeros((3, 2), np.float32)); np.save(b, np.ones((1, 2), np.float32))
    >>> r = pack([a, b], os.path.join(d, "v.lod.h5"))
    >>> load(os.path.join(d, "v.lod.h5")).lod, r.dtype
    ([[0, 3, 4]], dtype('float32'))
    """
    from ..atomic import refuse_output_over_input

    sources = _as_list(inputs)
    refuse_output_over_input(output, sources)
    source = PackSource.open(sources, format=format, lod_level=lod_level, dtype=dtype, level_names=level_names,
                             column=column, max_memory=max_memory, chunk_bytes=chunk_bytes, progress=progress,
                             token_dtype=token_dtype, eos_token_id=eos_token_id, tokens=tokens, text=text)
    kwargs = {} if compression is None else {"compression": compression}
    with LodWriter(output, append=append, overwrite=overwrite, force=force, remedy=PACK_REMEDY,
                   expected_bytes=_input_bytes(sources), **kwargs) as writer:
        writer.check_name(name)  # before any input is read
        written = _write_chunks(writer, name, source, _data_chunk_bytes(source.format, compression))
        if written.tensor is None:
            written.tensor = _add_without_chunks(writer, name, source)
    if progress is not None:
        progress(source.bytes_read)
    return _result(os.fspath(output), name, source, written)


@dataclass
class PackSource:
    """Inputs made ready to pack: their one format, the dtype and level names asked for, and their chunks.

    The one preparation of :func:`pack` and of :func:`lodtool.tasks.pack_sharded`:
    the options are checked and the format decided before a byte is parsed.
    """

    sources: list
    format: str
    detected: bool
    lod_level: int | None
    #: the dtype asked for (None: inferred; never set with auto_int)
    target: np.dtype | None
    auto_int: bool
    level_names: list[str] | None
    chunks: Iterator[LoDTensor]
    stats: dict
    #: the token metadata recorded with the tensor: the input's own, with what the caller gave over it
    tokens: TokenInfo | None = None

    @classmethod
    def open(cls, inputs, *, format: str | None = None, lod_level: int | None = None, dtype=None,
             level_names: Sequence[str] | None = None, column: str | None = None, max_memory: int | None = None,
             chunk_bytes: int = STREAM_CHUNK_BYTES, progress: Callable[[int], None] | None = None,
             token_dtype=None, eos_token_id: int | None = None, tokens: TokenInfo | None = None,
             text: TextOptions | None = None) -> "PackSource":
        """Check the options, decide the format, and start reading (lazily: nothing is parsed yet)."""
        sources = _as_list(inputs)
        if text is not None and text.words:
            sources, text = _with_vocabulary(sources, text)
        if text is not None:  # the text reader tells each input's kind (JSON Lines, Parquet, plain) itself
            text = _text_kind(text, format)
            detection = formats.Detection("text", False)
        else:
            detection = formats.input_format(sources, format)
            if detection.name == "text":
                from ..io.text import NO_TOKENIZER

                raise LodUsageError(NO_TOKENIZER)
        if lod_level is not None and (isinstance(lod_level, bool) or int(lod_level) < 0):
            raise LodUsageError(f"lod_level must be a non-negative integer, got {lod_level!r}")
        auto_int = isinstance(dtype, str) and dtype == AUTO_INT
        target = None if auto_int else resolve_dtype(dtype)
        stats: dict = {"bytes_read": 0}
        fmt = formats.get(detection.name)
        reads_eos = "eos_token_id" in fmt.options
        options = reader_options(detection.name, column, max_memory, token_dtype=token_dtype,
                                 eos_token_id=eos_token_id if reads_eos else None)
        if text is not None:
            options["text"] = text
        recorded = fmt.token_info(sources, **options) or TokenInfo()
        if tokens is not None:
            recorded = recorded.merged(**{k: getattr(tokens, k) for k in TOKEN_FIELDS},
                                       tokenizer_json=tokens.tokenizer_json)
        if eos_token_id is not None:  # the EOS id a dolma array's documents end at is the EOS id it records
            if tokens is not None and tokens.eos_id not in (None, eos_token_id):
                raise LodUsageError(f"eos_token_id={eos_token_id} and tokens.eos_id={tokens.eos_id} disagree")
            recorded = recorded.merged(eos_id=eos_token_id)
        if text is not None:
            options["tokens"] = recorded
            if target is None and not auto_int:  # ids take the narrowest dtype of the vocabulary
                target = recorded.smallest_dtype()
        if not recorded.empty and recorded.vocab_size is not None and target is not None:
            wrong = dtype_problem(target, recorded.vocab_size)
            if wrong:
                raise LodUsageError(f"dtype='{target}': {wrong}")
        chunks = fmt.read(sources, lod_level=lod_level, dtype=target, chunk_bytes=chunk_bytes, progress=progress,
                          stats=stats, **options)
        names = None if level_names is None else [str(n) for n in level_names]
        return cls(sources, detection.name, detection.from_content, lod_level, target, auto_int, names,
                   read_ahead(chunks) if OVERLAP else chunks, stats, None if recorded.empty else recorded)

    @property
    def bytes_read(self) -> int:
        return int(self.stats["bytes_read"])

    def names_for(self, chunk: LoDTensor) -> list[str] | None:
        """The level names of the tensor the first chunk starts: those given, else the input's own."""
        names = self.level_names if self.level_names is not None else \
            (list(chunk.level_names) if chunk.level_names else None)
        if names is not None and len(names) != chunk.lod_level:
            raise LodUsageError(f"{len(names)} level name(s) given ({', '.join(names)}), but the input has "
                                f"{chunk.lod_level} LoD level(s)")
        return names

    def empty_input_error(self) -> LodInputError:
        where = ", ".join(formats.label(s) for s in self.sources)
        return LodInputError(f"{where}: empty input, so the number of LoD levels cannot be inferred; give "
                             "lod_level=... (and dtype=...) to store zero sequences")


def _input_bytes(sources: list) -> int | None:
    """The bytes the inputs hold (a token dataset's tokens), or None where one's size is not known."""
    from ..io.token_datasets import input_bytes

    total = 0
    for src in sources:
        size = input_bytes(src) if isinstance(src, (str, os.PathLike)) and not formats.is_stdin(src) else None
        if size is None:
            return None
        total += size
    return total


@dataclass
class _Written:
    """What :func:`_write_chunks` added: the tensor writer (None: no chunk came), counts, the chunks' dtype."""

    tensor: object = None
    first: LoDTensor | None = None
    rows: int = 0
    sequences: int = 0
    seen: np.dtype | None = None


def _data_chunk_bytes(fmt: str, compression: str | None) -> int | None:
    """The data chunk size ``pack`` asks for: :data:`~lodtool.container.writer.MAPPED_CHUNK_BYTES` for the
    uncompressed tokens of a token dataset (read from a memory map, written and unpacked as large chunks), else
    None (the writer's default).

    >>> _data_chunk_bytes("megatron", "none"), _data_chunk_bytes("megatron", None)
    (1048576, None)
    """
    from ..io.token_datasets import FORMATS

    uncompressed = filters.normalize_compression(compression, None)[0] == "none"
    return MAPPED_CHUNK_BYTES if uncompressed and fmt in FORMATS else None


def _write_chunks(writer: LodWriter, name: str, source: PackSource, chunk_bytes: int | None = None) -> _Written:
    """Append every chunk of ``source`` to tensor ``name``, created from the first chunk's structure (its data
    chunks of ``chunk_bytes``, None: the writer's default)."""
    out = _Written()
    for chunk in source.chunks:
        if out.tensor is None:
            out.first = chunk
            out.tensor = writer.add_tensor(name, dtype=AUTO_INT if source.auto_int else source.target,
                                           element_shape=chunk.element_shape, lod_level=chunk.lod_level,
                                           level_names=source.names_for(chunk), tokens=source.tokens,
                                           chunk_bytes=chunk_bytes)
        out.tensor.append(chunk)
        out.rows += chunk.n_rows
        out.sequences += len(chunk)
        out.seen = chunk.dtype if out.seen is None else np.result_type(out.seen, chunk.dtype)
    return out


def _add_without_chunks(writer: LodWriter, name: str, source: PackSource):
    """The tensor of an input with no sequence: the one appended to (checked all the same), or an empty one."""
    if writer.append and name in writer.existing_names:
        return writer.add_tensor(name, dtype=source.target, lod_level=writer.stored_lod_level(name),
                                 tokens=source.tokens)
    if source.lod_level is None:
        raise source.empty_input_error()
    names = source.level_names
    if names is not None and len(names) != source.lod_level:
        raise LodUsageError(f"{len(names)} level name(s) given, but lod_level is {source.lod_level}")
    return writer.add_tensor(name, dtype=source.target if source.target is not None else np.float64,
                             element_shape=(), lod_level=source.lod_level, level_names=names, tokens=source.tokens)


def _result(output: str, name: str, source: PackSource, written: _Written) -> PackResult:
    tw, first = written.tensor, written.first
    levels = first.lod_level if first is not None else tw.lod_level
    if source.auto_int or source.target is None and written.seen is None:
        out_dtype = np.dtype(tw.dtype)
    else:
        out_dtype = np.dtype(source.target if source.target is not None else written.seen)
    saved = stored = 0
    if source.auto_int:
        values = written.rows * int(np.prod(first.element_shape if first is not None else (), dtype=np.int64))
        saved = values * (8 - out_dtype.itemsize)
        stored = _stored_bytes(output, name)
    return PackResult(output, name, written.rows, written.sequences, levels, out_dtype, source.bytes_read,
                      source.format if source.detected else None, saved, stored)


def _stored_bytes(output: str, name: str) -> int:
    """The bytes tensor ``name`` of the container ``output`` takes in the file (0 for a stream)."""
    from ..container.reader import open_file

    if not os.path.isfile(output):
        return 0
    with open_file(output) as f:
        return f.tensor(name).storage_size


def reader_options(fmt: str, column: str | None, max_memory: int | None, *, token_dtype=None,
                   eos_token_id: int | None = None) -> dict:
    """The extra options of format ``fmt``'s reader: ``column`` (table formats only), ``token_dtype`` and
    ``eos_token_id`` (token datasets only), and ``max_memory``; each given to a format that takes none is refused.

    >>> reader_options("parquet", "tokens", None)  # doctest: +ELLIPSIS
    {'column': 'tokens', 'max_memory': ...}
    >>> reader_options("jsonl", "tokens", None)
    Traceback (most recent call last):
    lodtool.errors.LodUsageError: column applies to table inputs (parquet, arrow), not jsonl
    >>> reader_options("jsonl", None, None, eos_token_id=2)
    Traceback (most recent call last):
    lodtool.errors.LodUsageError: eos_token_id=... applies to dolma inputs, not jsonl
    """
    given = {"column": column, "token_dtype": token_dtype, "eos_token_id": eos_token_id}
    extra = {k: v for k, v in given.items() if v is not None}
    for option in extra:
        if option in formats.get(fmt).options:
            continue
        takes = ", ".join(f.name for f in formats.REGISTRY if option in f.options)
        if option == "column":
            raise LodUsageError(f"column applies to table inputs ({takes}), not {fmt}")
        raise LodUsageError(f"{option}=... applies to {takes} inputs, not {fmt}")
    if "max_memory" in formats.get(fmt).options:  # an input read whole is checked before it is inflated
        extra["max_memory"] = resolve_max_memory(max_memory)
    return extra


def _with_vocabulary(sources: list, text: TextOptions) -> tuple[list, TextOptions]:
    """Words with their vocabulary: the one given (a container's stored one, a tokenizer.json, a word list), or
    the inputs' own, counted in a first pass (stdin is spooled to an unnamed temp file for it, which goes with
    the sources)."""
    from ..io.text import count_words, rereadable
    from ..text import WordVocabulary

    given = text.vocabulary
    if isinstance(given, WordVocabulary):
        return sources, text
    if given is not None:
        return sources, dataclasses.replace(text, vocabulary=_vocabulary_of(os.fspath(given)))
    sources = rereadable(sources)
    return sources, dataclasses.replace(text, vocabulary=count_words(sources, min_count=text.min_count))


def _vocabulary_of(path: str):
    """The word vocabulary of ``path``: a container's (its tensor's stored vocabulary), or a vocabulary file."""
    from .. import io as formats
    from ..text import WordVocabulary, decoder_for

    if formats.detect(path) == formats.Detection(formats.CONTAINER, True):
        from ..container.reader import open_file

        with open_file(path) as f:
            t = f.tensor()
            found = decoder_for(t.tokens, f"{path}: tensor {t.name!r}")
        if not isinstance(found, WordVocabulary):
            raise LodUsageError(f"{path}: tensor {t.name!r} stores a tokenizer, not a word vocabulary")
        return found
    return WordVocabulary.load(path)


def _text_kind(text: TextOptions, format: str | None) -> TextOptions:
    """``text`` with its input kind from ``format`` (``jsonl``, ``parquet``, ``text`` for plain), if given."""
    if format is None:
        return text
    kinds = {"jsonl": "jsonl", "parquet": "parquet", "text": "plain"}
    if format not in kinds:
        raise LodUsageError(f"text is read from jsonl, parquet or plain text (format='text'), not {format}")
    return dataclasses.replace(text, kind=kinds[format])


def _as_list(inputs) -> list:
    if isinstance(inputs, (str, bytes, os.PathLike)) or hasattr(inputs, "read"):
        inputs = [inputs]
    inputs = list(inputs)
    if not inputs:
        raise LodUsageError("no input given")
    if sum(1 for i in inputs if formats.is_stdin(i)) > 1:
        raise LodUsageError("stdin (-) can be read only once")
    return inputs


__all__ = ["pack", "PackResult", "PackSource", "INPUT_FORMATS", "AUTO_INT"]
