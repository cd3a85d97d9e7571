"""Text, tokenized as it streams: a JSON Lines string field, a Parquet string column, or plain text files.

The registry's ``text`` format.  Each input is read a batch of documents at a
time (about :data:`BATCH_BYTES` of text), the batch is tokenized at once by
:class:`lodtool.text.TextTokenizer` (``encode_batch``, on every core), and
comes out as one chunk of token ids: documents > tokens, or with ``split``
documents > lines / paragraphs / sentences > tokens.  Memory stays bounded
by the batch, whatever the input size (one document of a plain text file read
whole is the exception: it is one document).

What an input holds is told per input, by ``kind`` or else its name:

* ``jsonl`` (``.jsonl``, ``.ndjson``, ``.json``; stdin starting with ``{``): one
  object per line, the document in its string field ``field``;
* ``parquet`` (``.parquet``, ``.pq``): the string column ``field``;
* ``plain`` (anything else, stdin too): each file one document
  (``documents="file"``) or each line one (``documents="line"``, the newline
  left out).

Bad input stops the pack with one line naming the file and the place:
invalid UTF-8 (line and byte), a line that is no JSON object, a missing or
non-string field, a null in the column.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import sys
from dataclasses import dataclass
from typing import Any, BinaryIO, Callable, Iterator, Sequence

import numpy as np

from ..errors import LodInputError, LodUsageError
from ..lod import lengths_to_offsets
from ..tensor import LoDTensor
from ..text import SPLITS, TextTokenizer, WordVocabulary, split_text
from ..tokens import TokenInfo
from . import format_of_path, is_stdin, label as _label, open_path, peek_stdin, seekable
from .json import json_kind

#: documents are tokenized in batches of about this much text
BATCH_BYTES = 4 << 20
#: the kinds of text input (see the module docstring)
KINDS = ("jsonl", "parquet", "plain")
#: what a document is in a plain text input
DOCUMENTS = ("file", "line")
#: the level names of what ``pack`` writes, by ``split``
LEVEL_NAMES = {None: ("document",), "lines": ("document", "line"), "paragraphs": ("document", "paragraph"),
               "sentences": ("document", "sentence")}
#: the refusal of text to pack without a tokenizer (a keyword of :class:`TextOptions`; the CLI shows its flag)
NO_TOKENIZER = "packing text needs a tokenizer: give tokenizer='tokenizer.json'"


@dataclass(frozen=True)
class TextOptions:
    """How ``pack`` reads and tokenizes text (``lodtool pack --tokenizer ...``).

    ``tokenizer``: a local ``tokenizer.json`` (or a :class:`~lodtool.text.TextTokenizer`); ``field``: the
    JSON field or Parquet column; ``kind``: ``jsonl``, ``parquet`` or ``plain`` (default: from each input's
    name); ``documents``: ``file`` or ``line`` for plain text; ``split``: ``lines``, ``paragraphs`` or
    ``sentences`` adds a level; ``add_bos`` / ``add_eos`` put the tokenizer's BOS / EOS id around each
    document; ``special_tokens`` runs the tokenizer's own post-processor; ``store_json=False`` records the
    tokenizer by name and hash only.

    >>> TextOptions("tokenizer.json", split="words")
    Traceback (most recent call last):
    ...
    lodtool.errors.LodUsageError: unknown split 'words'; choose one of lines, paragraphs, sentences
    """

    tokenizer: Any
    field: str = "text"
    kind: str | None = None
    documents: str = "file"
    split: str | None = None
    add_bos: bool = False
    add_eos: bool = False
    special_tokens: bool = False
    store_json: bool = True
    #: nested lists of words (strings), not text: ids of a :class:`~lodtool.text.WordVocabulary`
    words: bool = False
    #: the word vocabulary (``words``): fixed by the user, or counted by :func:`count_words` before reading
    vocabulary: Any = None
    #: ``words`` without a fixed vocabulary: words seen fewer times than this are ``<unk>``
    min_count: int = 1

    def __post_init__(self):
        if self.split is not None and self.split not in SPLITS:
            raise LodUsageError(f"unknown split {self.split!r}; choose one of {', '.join(SPLITS)}")
        if self.kind is not None and self.kind not in KINDS:
            raise LodUsageError(f"unknown text input {self.kind!r}; choose one of {', '.join(KINDS)}")
        if self.documents not in DOCUMENTS:
            raise LodUsageError(f"documents must be one of {', '.join(DOCUMENTS)}, got {self.documents!r}")
        if not isinstance(self.field, str) or not self.field:
            raise LodUsageError(f"the text field must be a non-empty name, got {self.field!r}")

    def load(self):
        """The tokenizer (a file is loaded once per process and file version), or the word vocabulary."""
        if self.words:
            if self.vocabulary is None:
                raise LodUsageError("words need their vocabulary: count them first (count_words) or give vocabulary=...")
            return self.vocabulary
        if isinstance(self.tokenizer, TextTokenizer):
            return self.tokenizer
        if self.tokenizer is None:
            raise LodUsageError(NO_TOKENIZER)
        path = os.path.abspath(os.fspath(self.tokenizer))
        try:
            st = os.stat(path)
        except OSError:
            return TextTokenizer.load(self.tokenizer)  # it names the missing file
        return _cached(os.fspath(self.tokenizer), path, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=4)
def _cached(given: str, _path: str, _mtime: int, _size: int) -> TextTokenizer:
    return TextTokenizer.load(given)


def token_info(fmt: str, sources: Sequence[Any], *, text: TextOptions | None = None, **_options) -> TokenInfo | None:
    """The token metadata of text packed with ``text``'s tokenizer or word vocabulary (its JSON included unless
    asked otherwise).

    >>> from lodtool.text import WordVocabulary
    >>> words = WordVocabulary(["<unk>", "the", "cat"])
    >>> token_info("text", [], text=TextOptions(None, words=True, vocabulary=words)).vocab_size
    3
    """
    if text is None:
        return None
    return text.load().token_info(store_json=text.store_json)


def read(fmt: str, sources: Sequence[Any], *, lod_level: int | None = None, dtype: Any = None,
         chunk_bytes: int = BATCH_BYTES, progress: Callable[[int], None] | None = None, stats: dict | None = None,
         text: TextOptions | None = None, tokens: TokenInfo | None = None) -> Iterator[LoDTensor]:
    """The registry's reader: chunks of token ids, a batch of documents each (``tokens``: the special ids to add).

    >>> import io
    >>> from tokenizers import Tokenizer, models, pre_tokenizers
    >>> t = Tokenizer(models.WordLevel({"the": 0, "cat": 1, "sat": 2, "[UNK]": 3}, unk_token="[UNK]"))
    >>> t.pre_tokenizer = pre_tokenizers.Whitespace()
    >>> tok = TextTokenizer(t.to_str().encode(), "words.json", "words")
    >>> src = io.BytesIO(b'{"text": "the cat"}\\n{"text": "sat"}\\n')
    >>> [c.to_nested() for c in read("text", [src], text=TextOptions(tok, kind="jsonl"))]
    [[[0, 1], [2]]]
    """
    if text is None:
        raise LodUsageError(NO_TOKENIZER)
    if text.words:
        yield from _read_words(sources, text, lod_level, dtype, progress, stats)
        return
    tokenizer = text.load()
    tokens = tokens if tokens is not None else tokenizer.token_info(store_json=False)
    bos = _special(text.add_bos, tokens.bos_id, "add_bos", "BOS", "bos_id")
    eos = _special(text.add_eos, tokens.eos_id, "add_eos", "EOS", "eos_token_id")
    levels = 1 if text.split is None else 2
    if lod_level is not None and lod_level != levels:
        raise LodUsageError(f"text{'' if text.split is None else f' split into {text.split}'} packs {levels} LoD "
                            f"level(s), not lod_level={lod_level}")
    batch = max(1, min(int(chunk_bytes or BATCH_BYTES), BATCH_BYTES))
    target = np.dtype(dtype) if dtype is not None else tokens.smallest_dtype()
    counted = _counter(stats, progress)
    for source in sources:
        for docs in _documents(source, text, batch, counted):
            yield _encode(tokenizer, docs, text, bos, eos, target)


def _counter(stats: dict | None, progress) -> Callable[[int], None]:
    """A callback that adds the bytes it is given to ``stats["bytes_read"]`` and tells ``progress`` the total."""
    stats = {} if stats is None else stats
    stats.setdefault("bytes_read", 0)

    def counted(n: int) -> None:
        stats["bytes_read"] += n
        if progress is not None:
            progress(stats["bytes_read"])

    return counted


def _special(wanted: bool, value: int | None, asked_by: str, what: str, id_keyword: str) -> int | None:
    if wanted and value is None:
        raise LodUsageError(f"{asked_by}=True: the tokenizer has no {what} token that lodtool knows by name; "
                            f"give {id_keyword}=...")
    return value if wanted else None


# -- documents, a batch at a time -------------------------------------------------------------------
def _documents(source, text: TextOptions, batch: int, counted) -> Iterator[list[str]]:
    kind = text.kind or _kind_of(source)
    where = _label(source)
    if kind == "parquet":
        yield from _parquet_documents(source, text.field, batch, counted)
        return
    with _opened(source) as stream:
        if kind == "plain" and text.documents == "file":
            raw = stream.read()
            counted(len(raw))
            yield [_decoded(raw, where, None)]
            return
        docs, size = [], 0
        for line_no, raw in enumerate(stream, 1):
            counted(len(raw))
            line = raw[:-1] if raw.endswith(b"\n") else raw
            if kind == "jsonl":
                if not line.strip():
                    continue
                doc = _field(_decoded(line, where, line_no), text.field, where, line_no)
            else:
                doc = _decoded(line[:-1] if line.endswith(b"\r") else line, where, line_no)
            docs.append(doc)
            size += len(raw)
            if size >= batch:
                yield docs
                docs, size = [], 0
        if docs:
            yield docs


def _kind_of(source) -> str:
    if is_stdin(source):
        return "jsonl" if peek_stdin(1 << 12).lstrip().startswith(b"{") else "plain"
    named = format_of_path(source) if isinstance(source, (str, os.PathLike)) else None  # the registry's extensions
    return {"json": "jsonl", "jsonl": "jsonl", "parquet": "parquet"}.get(getattr(named, "name", None), "plain")


@contextlib.contextmanager
def _opened(source) -> Iterator[BinaryIO]:
    """A binary stream of the source: the file, stdin's buffer, or the stream given (left open)."""
    if is_stdin(source):
        yield sys.stdin.buffer
    elif not isinstance(source, (str, os.PathLike)):
        yield getattr(source, "buffer", source)  # a text stream's binary side
    else:
        with open_path(os.fspath(source), 1 << 20) as stream:
            yield stream


def _decoded(raw: bytes, where: str, line_no: int | None) -> str:
    """``raw`` as UTF-8; invalid bytes are an error naming the line and the byte."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        if line_no is None:  # a whole file: count its lines up to the bad byte
            line_no = raw.count(b"\n", 0, exc.start) + 1
            column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1)
        else:
            column = exc.start
        raise LodInputError(f"{where}:{line_no}: invalid UTF-8 at byte {column + 1} of the line "
                            f"(0x{raw[exc.start]:02x}); text must be UTF-8") from None


def _field(line: str, field: str, where: str, line_no: int) -> str:
    value = _json_value(line, where, line_no)
    if not isinstance(value, dict):
        raise LodInputError(f"{where}:{line_no}: a JSON Lines text input holds one object per line, this one is "
                            f"{json_kind(value)}")
    if field not in value:
        shown = ", ".join(list(value)[:8]) or "none"
        raise LodInputError(f"{where}:{line_no}: no field {field!r} (its fields: {shown}); field=... names it")
    doc = value[field]
    if not isinstance(doc, str):
        raise LodInputError(f"{where}:{line_no}: field {field!r} is {json_kind(doc)}, not a string")
    return doc


def _parquet_documents(source, field: str, batch: int, counted) -> Iterator[list[str]]:
    from .._optional import optional_import

    pq = optional_import("pyarrow.parquet", "parquet", "a Parquet text input")
    pa = optional_import("pyarrow", "parquet", "a Parquet text input")
    where = _label(source)
    try:
        pf = pq.ParquetFile(source)
    except (pa.ArrowException, OSError) as exc:
        raise LodInputError(f"{where}: not a Parquet file ({str(exc).splitlines()[0]})") from None
    names = pf.schema_arrow.names
    if field not in names:
        raise LodInputError(f"{where}: no column {field!r} (its columns: {', '.join(names[:8])}); field=... "
                            "names it")
    kind = pf.schema_arrow.field(field).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        raise LodInputError(f"{where}: column {field!r} holds {kind}, not strings")
    row, rows = 0, max(pf.metadata.num_rows, 1)
    # progress counts the file's bytes (what the bar's total is), shared out over the rows read
    size = os.path.getsize(source) if isinstance(source, (str, os.PathLike)) else 0
    try:
        for rb in pf.iter_batches(batch_size=max(1, batch // 1024), columns=[field]):
            col = rb.column(0)
            if col.null_count:
                first = int(np.flatnonzero(np.asarray(col.is_null()))[0])
                raise LodInputError(f"{where}: row {row + first}: column {field!r} is null, not a string")
            counted(size * (row + len(col)) // rows - size * row // rows if size else int(col.nbytes))
            row += len(col)
            yield col.to_pylist()
    except pa.ArrowException as exc:
        raise LodInputError(f"{where}: cannot read it ({str(exc).splitlines()[0]})") from None


# -- nested lists of words ---------------------------------------------------------------------------
#: words encoded per chunk
WORDS_PER_CHUNK = 1 << 20


class SpooledInput:
    """A one-way input (stdin) copied to an unnamed temp file, so that it can be read twice (count, then encode);
    the file goes when this object does (or at :meth:`close`)."""

    def __init__(self, source):
        import tempfile

        self.label = _label(source)
        self.file = tempfile.TemporaryFile(prefix="lodtool-")
        with _opened(source) as stream:
            shutil.copyfileobj(stream, self.file, 1 << 22)

    def close(self) -> None:
        self.file.close()


def rereadable(sources: Sequence[Any]) -> list:
    """``sources`` with stdin and one-way streams spooled (:class:`SpooledInput`), so each can be read twice.

    >>> import io
    >>> [type(s).__name__ for s in rereadable(["words.jsonl", io.BytesIO(b"[]")])]
    ['str', 'BytesIO']
    """
    return [SpooledInput(s) if is_stdin(s) or not isinstance(s, (str, os.PathLike)) and not seekable(s) else s
            for s in sources]


def count_words(sources: Sequence[Any], *, min_count: int = 1) -> WordVocabulary:
    """The vocabulary of every word of ``sources`` (JSON or JSON Lines of nested lists of strings), most frequent
    first; one pass, memory bounded by the distinct words.

    >>> import io
    >>> count_words([io.BytesIO(b'[["the", "cat"], ["sat"]]\\n[["the"]]\\n')]).words
    ['<unk>', 'the', 'cat', 'sat']
    """
    from collections import Counter

    counts: Counter = Counter()
    for _, item in _word_items(sources):
        counts.update(_strings(item))
    return WordVocabulary.from_counts(counts, min_count=min_count)


def _strings(item) -> list:
    """Every string in a nested list, in order (what the first pass counts; the second checks the nesting)."""
    found, stack = [], [item]
    while stack:
        x = stack.pop()
        if isinstance(x, str):
            found.append(x)
        elif isinstance(x, list):
            stack.extend(reversed(x))
    return found


def _read_words(sources, text: TextOptions, lod_level: int | None, dtype, progress, stats) -> Iterator[LoDTensor]:
    vocabulary = text.load()
    target = np.dtype(dtype) if dtype is not None else vocabulary.token_info().smallest_dtype()
    levels, first_where = lod_level, None
    waiting: list = []  # items without a word, before the first one that shows the depth
    ids: list[np.ndarray] = []
    lengths: list[list[int]] = []

    def take(where: str, item, first: str | None) -> int:
        words, item_lengths = _flattened(item, where, levels, first)
        lengths[:] = lengths or [[] for _ in range(levels)]
        for k in range(levels):
            lengths[k].extend(item_lengths[k])
        ids.append(vocabulary.encode(words, lambda k: f"{where}: "))
        return len(words)

    size = 0
    for where, item in _word_items(sources, _counter(stats, progress)):
        if levels is None:
            depth = _depth(item, where)
            if depth is None:
                waiting.append((where, item))
                continue
            levels, first_where = depth, where
        size += sum(take(w, it, first_where) for w, it in [*waiting, (where, item)])
        waiting = []
        if size >= WORDS_PER_CHUNK:
            yield _word_chunk(ids, lengths, target)
            ids, lengths[:], size = [], [], 0
    if waiting:  # no item held a word: the shallowest depth they all fit
        levels = max(_depth(it, w, least=True) for w, it in waiting)
        for w, it in waiting:
            take(w, it, None)
    if lengths:
        yield _word_chunk(ids, lengths, target)


def _word_chunk(ids: list[np.ndarray], lengths: list[list[int]], target: np.dtype) -> LoDTensor:
    return LoDTensor._trusted(np.concatenate(ids).astype(target), [lengths_to_offsets(n) for n in lengths], None)


def _word_items(sources, counted: Callable[[int], None] = lambda n: None) -> Iterator[tuple[str, Any]]:
    """``(where, item)`` of each top-level item of JSON / JSON Lines inputs of words."""
    for source in sources:
        where = source.label if isinstance(source, SpooledInput) else _label(source)
        stream_source = source.file if isinstance(source, SpooledInput) else source
        lines = _words_as_lines(stream_source)
        if not isinstance(stream_source, (str, os.PathLike)):
            stream_source.seek(0)
        with _opened(stream_source) as stream:
            if lines:
                for line_no, raw in enumerate(stream, 1):
                    counted(len(raw))
                    if not raw.strip():
                        continue
                    item = _json_value(_decoded(raw.rstrip(b"\r\n"), where, line_no), where, line_no)
                    yield f"{where}:{line_no}", item
            else:
                raw = stream.read()
                counted(len(raw))
                document = _json_value(_decoded(raw, where, None), where, None)
                if not isinstance(document, list):
                    raise LodInputError(f"{where}: a JSON input of words is a list of items, not "
                                        f"{json_kind(document)}")
                for k, item in enumerate(document):
                    yield f"{where}: item {k}", item


def _words_as_lines(source) -> bool:
    """Whether a words input (a path or a seekable stream) is JSON Lines (an item a line), not one JSON document."""
    from . import detect, format_of_head

    if isinstance(source, (str, os.PathLike)):
        found = detect(source)
        return found is None or found.name != "json"
    source.seek(0)
    return format_of_head(source.read(1 << 16)) != "json"


def _json_value(text_: str, where: str, line_no: int | None):
    import orjson

    try:
        return orjson.loads(text_)
    except orjson.JSONDecodeError as exc:
        at = f":{line_no}" if line_no is not None else ""
        raise LodInputError(f"{where}{at}: not JSON ({str(exc).split(':')[0]})") from None


def _flattened(item, where: str, depth: int, first: str | None) -> tuple[list, list]:
    """An item of nested lists of words, ``depth`` lists deep: its words and the lengths of each level."""
    if not isinstance(item, list):
        raise LodInputError(f"{where}: an item of words is a list, not {json_kind(item)}")
    lengths: list[list[int]] = []
    frontier = [item]
    for k in range(depth):
        lengths.append([])
        nxt: list = []
        for seq in frontier:
            if not isinstance(seq, list):
                what = "a word" if isinstance(seq, str) else json_kind(seq)
                since = f" (as in {first})" if first and first != where else ""
                raise LodInputError(f"{where}: {what} {k} list(s) deep, where words nest {depth} deep{since}")
            lengths[k].append(len(seq))
            nxt.extend(seq)
        frontier = nxt
    for w in frontier:
        if not isinstance(w, str):
            raise LodInputError(f"{where}: {json_kind(w)} where a word (a string) belongs")
    return frontier, lengths


def _depth(item, where: str, least: bool = False) -> int | None:
    """How many lists deep the first word of ``item`` sits; None for an item with no word (``least``: the depth
    of its deepest list instead)."""
    if not isinstance(item, list):
        raise LodInputError(f"{where}: an item of words is a list, not {json_kind(item)}")
    depth, frontier = 1, item
    while True:
        if any(isinstance(x, str) for x in frontier):
            return depth
        if not any(isinstance(x, list) for x in frontier):
            return depth if least else None
        frontier = [y for x in frontier if isinstance(x, list) for y in x]
        depth += 1


# -- tokenizing a batch ----------------------------------------------------------------------------------
def _encode(tokenizer: TextTokenizer, docs: list[str], text: TextOptions, bos: int | None, eos: int | None,
            target: np.dtype) -> LoDTensor:
    if text.split is None:
        pieces, per_doc = docs, None
    else:
        cut = [split_text(d, text.split) or ([""] if bos is not None or eos is not None else []) for d in docs]
        per_doc = np.fromiter(map(len, cut), np.int64, len(cut))
        pieces = [p for c in cut for p in c]
    ids, lengths = tokenizer.encode(pieces, special_tokens=text.special_tokens)
    if bos is not None or eos is not None:
        ids, lengths = _with_specials(ids, lengths, per_doc, bos, eos)
    if ids.size and int(ids.max()) > np.iinfo(target).max:  # the tokenizer gave an id past its own vocabulary
        raise LodInputError(f"{tokenizer.label}: token id {int(ids.max())} does not fit {target}; give a wider "
                            "dtype=...")
    offsets = [lengths_to_offsets(n) for n in ([] if per_doc is None else [per_doc]) + [lengths]]
    return LoDTensor._trusted(ids.astype(target), offsets, LEVEL_NAMES[text.split])


def _with_specials(ids: np.ndarray, lengths: np.ndarray, per_doc: np.ndarray | None, bos: int | None,
                   eos: int | None) -> tuple[np.ndarray, np.ndarray]:
    """BOS before the first piece of each document and EOS after its last (a piece is a document without split).

    >>> _with_specials(np.array([5, 6, 7]), np.array([2, 1]), None, 0, 9)[0].tolist()
    [0, 5, 6, 9, 0, 7, 9]
    """
    n = lengths.size
    first = np.zeros(n, bool)
    last = np.zeros(n, bool)
    if per_doc is None:
        first[:], last[:] = True, True
    else:
        ends = np.cumsum(per_doc)
        starts = ends - per_doc
        has = per_doc > 0
        first[starts[has]] = True
        last[ends[has] - 1] = True
    pre = first.astype(np.int64) if bos is not None else np.zeros(n, np.int64)
    post = last.astype(np.int64) if eos is not None else np.zeros(n, np.int64)
    new_lengths = lengths + pre + post
    new_ends = np.cumsum(new_lengths)
    new_starts = new_ends - new_lengths
    out = np.empty(int(new_ends[-1]) if n else 0, np.int64)
    piece = np.repeat(np.arange(n), lengths)
    old_starts = np.cumsum(lengths) - lengths
    out[np.arange(ids.size) - old_starts[piece] + new_starts[piece] + pre[piece]] = ids
    if bos is not None:
        out[new_starts[first]] = bos
    if eos is not None:
        out[new_ends[last] - 1] = eos
    return out, new_lengths


# -- text out ----------------------------------------------------------------------------------------
#: what ``unpack --detokenize`` writes
DECODED_FORMATS = ("jsonl", "json")


def write_decoded(chunks, decoder, out: BinaryIO, *, to: str = "jsonl", field: str = "text",
                  skip_special_tokens: bool = False) -> None:
    """Token id chunks back to text: per top-level sequence one JSON value, its innermost sequences decoded.

    With a tokenizer the value is ``{field: text}`` (a document of one level; nested lists of strings below
    deeper ones), so that ``pack --tokenizer`` reads it again; with a word vocabulary it is the nested list
    of words that was packed.  ``to``: ``jsonl`` (a line each) or ``json`` (one list).

    >>> import io
    >>> from lodtool.text import TextTokenizer
    >>> from tokenizers import Tokenizer, models, pre_tokenizers
    >>> t = Tokenizer(models.WordLevel({"the": 0, "cat": 1, "[UNK]": 2}, unk_token="[UNK]"))
    >>> t.pre_tokenizer = pre_tokenizers.Whitespace()
    >>> out = io.BytesIO()
    >>> write_decoded([LoDTensor(np.array([0, 1, 1]), [[0, 2, 3]])], TextTokenizer(t.to_str().encode(), "t"), out)
    >>> out.getvalue().decode()
    '{"text":"the cat"}\\n{"text":"cat"}\\n'
    """
    import orjson

    from ..text import decode_nested

    if to not in DECODED_FORMATS:
        raise LodUsageError(f"detokenized text is written as {' or '.join(DECODED_FORMATS)}, not {to}")
    wrap = isinstance(decoder, TextTokenizer)
    first = True
    if to == "json":
        out.write(b"[")
    for chunk in chunks:
        values = decode_nested(chunk, decoder, skip_special_tokens=skip_special_tokens)
        if wrap:
            values = [{field: v} for v in values]
        if to == "jsonl":
            out.write(b"".join(orjson.dumps(v) + b"\n" for v in values))
        elif values:
            out.write((b"" if first else b",") + b",".join(map(orjson.dumps, values)))
            first = False
    if to == "json":
        out.write(b"]\n")


def write_stored(fmt: str, stored: Any, chunks, out: BinaryIO) -> None:
    """The registry's streaming writer: a stored tensor's chunks as JSON Lines of text, decoded by its tokenizer.

    (``text`` is not one of :func:`lodtool.io.writable`'s formats: ``unpack --detokenize`` is how it is asked for.)
    """
    from ..text import decoder_for

    write_decoded(chunks, decoder_for(stored.tokens, f"tensor {stored.name!r}"), out)


def write(fmt: str, tensor: LoDTensor, out: BinaryIO) -> None:
    """The registry's writer: a tensor in memory records no tokenizer, so it cannot be written as text."""
    raise LodUsageError("a tensor in memory stores no tokenizer: write text from a container "
                        "(detokenize=True), or decode with lodtool.text.decode_nested")


__all__ = ["TextOptions", "count_words", "rereadable", "SpooledInput", "read", "write", "write_stored", "token_info", "write_decoded", "DECODED_FORMATS", "NO_TOKENIZER", "KINDS", "DOCUMENTS", "BATCH_BYTES", "LEVEL_NAMES"]
