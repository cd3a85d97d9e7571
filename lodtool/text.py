"""Text to token ids and back: a HuggingFace tokenizer from a local ``tokenizer.json``, and document splitting.

:class:`TextTokenizer` wraps ``tokenizers.Tokenizer`` (Rust, batched, on every
core; the ``text`` extra): :meth:`~TextTokenizer.encode` turns a batch of
strings into one flat id array and their lengths, :meth:`~TextTokenizer.decode`
turns id arrays back into strings, and :meth:`~TextTokenizer.token_info` is
the :class:`~lodtool.tokens.TokenInfo` a container records (the JSON itself
included, so the ids can be read as text without the original file).
:func:`split_text` cuts a document into lines, paragraphs or sentences so that
the pieces concatenate to the document exactly.  Nothing here downloads
anything: a tokenizer is a file the user has.

>>> split_text("One. Two!\\n\\nThree", "paragraphs")
['One. Two!\\n\\n', 'Three']
>>> split_text("a\\nb\\n", "lines")
['a\\n', 'b\\n']
"""

from __future__ import annotations

import itertools
import os
import re
from typing import Any, Mapping, Sequence

import numpy as np

from ._optional import optional_import
from .errors import LodInputError, LodUsageError
from .tokens import MAX_TOKENIZER_BYTES, TokenInfo

#: the ways :func:`split_text` cuts a document (``pack --split``)
SPLITS = ("lines", "paragraphs", "sentences")
#: special tokens looked up by name when the user names none, most common spelling first
SPECIAL_NAMES = {
    "eos_id": ("<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>", "[SEP]", "<|im_end|>"),
    "bos_id": ("<s>", "<|begin_of_text|>", "<bos>", "[CLS]", "<|startoftext|>"),
    "pad_id": ("<pad>", "[PAD]", "<|pad|>", "<|padding|>"),
}
_PARAGRAPH_END = re.compile(r"\n(?:[ \t\r\f\v]*\n)+")


def split_text(text: str, how: str) -> list[str]:
    """``text`` cut into ``lines``, ``paragraphs`` or ``sentences``; the pieces join back to ``text`` exactly.

    Each piece keeps what separates it from the next (the newline, the blank
    lines, the spaces after a sentence), so no byte is lost; an empty text has
    no pieces.  Sentences come from blingfire, whose model is inside its wheel
    (``docs/text.md`` says why it was chosen).

    >>> split_text("Dr. Smith came. He sat down.", "sentences")
    ['Dr. Smith came. ', 'He sat down.']
    """
    if how not in SPLITS:
        raise LodUsageError(f"unknown split {how!r}; choose one of {', '.join(SPLITS)}")
    if not text:
        return []
    if how == "lines":
        return text.splitlines(keepends=True)
    if how == "paragraphs":
        cuts = [m.end() for m in _PARAGRAPH_END.finditer(text)]
    else:
        blingfire = optional_import("blingfire", "text", "split='sentences'")
        _, spans = blingfire.text_to_sentences_and_offsets(text)
        cuts = [start for start, _ in spans[1:]]
    bounds = [0, *(c for c in cuts if 0 < c < len(text)), len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]


class TextTokenizer:
    """A HuggingFace ``tokenizers`` tokenizer, from a ``tokenizer.json`` file or the JSON a container stores.

    >>> from tokenizers import Tokenizer, models, pre_tokenizers
    >>> t = Tokenizer(models.WordLevel({"hello": 0, "world": 1, "[UNK]": 2}, unk_token="[UNK]"))
    >>> t.pre_tokenizer = pre_tokenizers.Whitespace()
    >>> tok = TextTokenizer(t.to_str().encode(), "words.json", "words")
    >>> ids, lengths = tok.encode(["hello world", "world"])
    >>> ids.tolist(), lengths.tolist(), tok.vocab_size
    ([0, 1, 1], [2, 1], 3)
    >>> tok.decode([ids[:2]])
    ['hello world']
    """

    def __init__(self, raw: bytes, label: str, name: str | None = None):
        tokenizers = optional_import("tokenizers", "text", "a tokenizer")
        if len(raw) > MAX_TOKENIZER_BYTES:
            raise LodInputError(f"{label}: {len(raw):,} bytes; a tokenizer file of at most {MAX_TOKENIZER_BYTES:,} "
                                "is read")
        try:
            self._tok = tokenizers.Tokenizer.from_str(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise LodInputError(f"{label}: not a tokenizer.json (invalid UTF-8 at byte {exc.start})") from None
        except Exception as exc:  # tokenizers raises its own Exception types for any JSON it cannot load
            detail = " ".join(str(exc).split())[:200]
            raise LodInputError(f"{label}: not a tokenizer.json that the tokenizers library loads ({detail})") \
                from None
        self.raw = raw
        self.label = label
        self.name = name
        self.vocab_size = int(self._tok.get_vocab_size(with_added_tokens=True))

    @classmethod
    def load(cls, path: str | os.PathLike) -> "TextTokenizer":
        """The tokenizer of a local ``tokenizer.json`` (its name: the file name, or its folder's for ``tokenizer.json``)."""
        path = os.fspath(path)
        try:
            with open(path, "rb") as f:
                raw = f.read(MAX_TOKENIZER_BYTES + 1)
        except FileNotFoundError:
            from .errors import LodFileNotFoundError

            raise LodFileNotFoundError(f"{path}: no such tokenizer file") from None
        except OSError as exc:
            raise LodInputError(f"{path}: cannot read it ({exc.strerror or exc})") from None
        base = os.path.basename(path)
        if base == "tokenizer.json" and os.path.basename(os.path.dirname(os.path.abspath(path))):
            base = os.path.basename(os.path.dirname(os.path.abspath(path)))
        elif base.endswith(".json"):
            base = base[:-5]
        return cls(raw, path, base or None)

    def token_id(self, token: str) -> int | None:
        """The id of ``token`` in the vocabulary (added tokens too), or None."""
        found = self._tok.token_to_id(token)
        return None if found is None else int(found)

    def special_id(self, field: str, token: str | None = None) -> int | None:
        """The id of the special token ``field`` (``eos_id``, ``bos_id``, ``pad_id``): ``token``'s, else the first of
        :data:`SPECIAL_NAMES` the vocabulary holds; a ``token`` it lacks is an error."""
        if token is not None:
            found = self.token_id(token)
            if found is None:
                raise LodUsageError(f"{self.label}: the vocabulary has no token {token!r} (for {field[:-3]})")
            return found
        return next((i for i in map(self.token_id, SPECIAL_NAMES[field]) if i is not None), None)

    def token_info(self, *, store_json: bool = True, **special: int | None) -> TokenInfo:
        """What a container records: the vocabulary size, the special ids (given, else found by name), the name
        and hash, and (``store_json``) the JSON itself."""
        ids = {field: special.get(field) if special.get(field) is not None else self.special_id(field)
               for field in SPECIAL_NAMES}
        info = TokenInfo(vocab_size=self.vocab_size, tokenizer_name=self.name, tokenizer_json=self.raw, **ids)
        return info if store_json else info.without_json()

    def encode(self, texts: Sequence[str], *, special_tokens: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """``texts`` as one flat int64 id array and each text's token count (``encode_batch``, on every core).

        ``special_tokens`` runs the tokenizer's post-processor (BERT's ``[CLS] ... [SEP]``, say).
        """
        encode = getattr(self._tok, "encode_batch_fast", self._tok.encode_batch)
        encodings = encode(list(texts), add_special_tokens=special_tokens)
        pieces = [e.ids for e in encodings]
        lengths = np.fromiter(map(len, pieces), np.int64, len(pieces))
        # chain.from_iterable feeds fromiter from C: a generator expression here costs as much as the ids themselves
        flat = np.fromiter(itertools.chain.from_iterable(pieces), np.int64, int(lengths.sum()))
        return flat, lengths

    def decode(self, sequences: Sequence[Any], *, skip_special_tokens: bool = False) -> list[str]:
        """Each id sequence back to its text (``decode_batch``, on every core)."""
        return self._tok.decode_batch([np.asarray(s).tolist() for s in sequences],
                                      skip_special_tokens=skip_special_tokens)


    def preview(self, ids: np.ndarray, more: bool) -> str:
        """The text of the first ids of a sequence, ``…`` after it when ``more`` follow (for ``tree --text``)."""
        return self.decode([ids])[0] + ("…" if more else "")


class WordVocabulary:
    """Words and their ids: what ``pack --words`` builds from nested lists of strings, most frequent first.

    Id 0 is :data:`UNKNOWN` (a word under ``min_count``, or one a fixed vocabulary lacks); the container
    stores the vocabulary as a HuggingFace ``WordLevel`` tokenizer.json, so ``tokenizers`` loads it too.
    Any ``WordLevel`` model's ids are words, so :func:`decoder_for` reads them back as lists of words.

    >>> v = WordVocabulary.from_counts({"cat": 1, "the": 3, "sat": 1, "a": 1}, min_count=1)
    >>> v.words, v.encode(["the", "cat", "dog"]).tolist()
    (['<unk>', 'the', 'cat', 'sat', 'a'], [1, 2, 0])
    >>> v.decode([np.array([1, 3])]), WordVocabulary.from_json(v.to_json(), "v").words == v.words
    ([['the', 'sat']], True)
    """

    UNKNOWN = "<unk>"

    def __init__(self, words: Sequence[str], label: str = "the word vocabulary", name: str | None = "words"):
        self.words = list(words)
        self.label = label
        self.name = name
        self.index = {w: i for i, w in enumerate(self.words)}
        if len(self.index) != len(self.words):
            raise LodInputError(f"{label}: a word is listed twice")
        self.unk_id = self.index.get(self.UNKNOWN)
        self.vocab_size = len(self.words)
        self.raw = self.to_json()

    @classmethod
    def from_counts(cls, counts: Mapping[str, int], *, min_count: int = 1) -> "WordVocabulary":
        """The vocabulary of words counted in order of first sight: :data:`UNKNOWN`, then the words seen at least
        ``min_count`` times, most frequent first (ties: first seen first)."""
        if isinstance(min_count, bool) or not isinstance(min_count, int) or min_count < 1:
            raise LodUsageError(f"min_count must be a positive integer, got {min_count!r}")
        order = {w: i for i, w in enumerate(counts)}
        kept = sorted((w for w, n in counts.items() if n >= min_count and w != cls.UNKNOWN),
                      key=lambda w: (-counts[w], order[w]))
        return cls([cls.UNKNOWN, *kept])

    @classmethod
    def from_json(cls, raw: bytes, label: str) -> "WordVocabulary":
        """The vocabulary of a ``WordLevel`` tokenizer.json (ids must be ``0..n-1``)."""
        import json

        try:
            model = json.loads(raw.decode("utf-8"))["model"]
            vocab = model["vocab"]
            if model.get("type") != "WordLevel" or not isinstance(vocab, dict):
                raise ValueError("not a WordLevel model")
        except (UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
            raise LodInputError(f"{label}: not a word vocabulary (a WordLevel tokenizer.json): {exc}") from None
        words = sorted(vocab, key=vocab.__getitem__)
        if [vocab[w] for w in words] != list(range(len(words))):
            raise LodInputError(f"{label}: the word ids are not 0..{len(words) - 1}")
        return cls(words, label)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "WordVocabulary":
        """A fixed vocabulary from a file: a ``WordLevel`` tokenizer.json, or plain text of one word per line
        (the id is the line number, from 0)."""
        path = os.fspath(path)
        try:
            with open(path, "rb") as f:
                raw = f.read(MAX_TOKENIZER_BYTES + 1)
        except OSError as exc:
            raise LodInputError(f"{path}: cannot read the vocabulary ({exc.strerror or exc})") from None
        if raw.lstrip().startswith(b"{"):
            return cls.from_json(raw, path)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = raw.count(b"\n", 0, exc.start) + 1
            raise LodInputError(f"{path}:{line}: invalid UTF-8 in the vocabulary") from None
        return cls(text.splitlines(), path)

    def to_json(self) -> bytes:
        """The vocabulary as a HuggingFace ``WordLevel`` tokenizer.json."""
        import json

        unknown = self.UNKNOWN if self.unk_id is not None else None
        doc = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
               "pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": None, "decoder": None,
               "model": {"type": "WordLevel", "vocab": self.index, "unk_token": unknown}}
        return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8")

    def token_info(self, *, store_json: bool = True, **special: int | None) -> TokenInfo:
        """What a container records: the vocabulary size, the name ``words`` and the vocabulary itself."""
        info = TokenInfo(vocab_size=max(self.vocab_size, 1), tokenizer_name=self.name, tokenizer_json=self.raw,
                         **{k: v for k, v in special.items() if v is not None})
        return info if store_json else info.without_json()

    def encode(self, words: Sequence[str], where=None) -> np.ndarray:
        """The ids of ``words``; a word the vocabulary lacks is :data:`UNKNOWN`'s id, or (without one) an error
        naming ``where(k)`` for the ``k``-th word."""
        index, unk = self.index, self.unk_id
        if unk is not None:
            return np.fromiter((index.get(w, unk) for w in words), np.int64, len(words))
        try:
            return np.fromiter((index[w] for w in words), np.int64, len(words))
        except KeyError as exc:
            k = list(words).index(exc.args[0])
            raise LodInputError(f"{where(k) if where else ''}word {exc.args[0]!r} is not in {self.label}, which has "
                                f"no {self.UNKNOWN!r} to stand for it") from None

    def decode(self, sequences: Sequence[Any], *, skip_special_tokens: bool = False) -> list[list[str]]:
        """Each id sequence as its list of words."""
        words = self.words
        try:
            return [[words[i] for i in np.asarray(s).tolist()] for s in sequences]
        except IndexError:
            raise LodInputError(f"{self.label}: an id is past its {len(words)} words") from None

    def preview(self, ids: np.ndarray, more: bool) -> str:
        """The first words of a sequence, space-separated (``tree --text``)."""
        return " ".join(self.decode([ids])[0]) + (" …" if more else "")


def decoder_for(info: TokenInfo | None, where: str):
    """What turns the ids of a tensor with token metadata ``info`` back into text: its stored tokenizer
    (:class:`TextTokenizer`), or :class:`WordVocabulary` for a ``WordLevel`` one (its ids are words).

    A tensor that stores none is a :class:`~lodtool.errors.LodUsageError` naming ``where``.

    >>> words = WordVocabulary(["<unk>", "the", "cat"])
    >>> decoder_for(words.token_info(), "x.lod.h5").decode([np.array([1, 2])])
    [['the', 'cat']]
    >>> decoder_for(TokenInfo(vocab_size=3), "x.lod.h5: tensor 'ids'")
    Traceback (most recent call last):
    ...
    lodtool.errors.LodUsageError: x.lod.h5: tensor 'ids' stores no tokenizer (a container packed with one stores it), so its ids cannot be read as text
    """
    if info is None or info.tokenizer_json is None:
        raise LodUsageError(f"{where} stores no tokenizer (a container packed with one stores it), so its ids cannot be "
                            "read as text")
    if b'"WordLevel"' in info.tokenizer_json:
        try:
            return WordVocabulary.from_json(info.tokenizer_json, f"{where}: its stored vocabulary")
        except LodInputError:
            pass  # a "WordLevel" string elsewhere in another model's JSON: the tokenizer decides
    return TextTokenizer(info.tokenizer_json, f"{where}: its stored tokenizer", info.tokenizer_name)


def decode_nested(chunk, decoder, *, skip_special_tokens: bool = False) -> list:
    """A chunk's top-level sequences with every innermost sequence decoded: strings nested as the LoD nests them.

    The innermost sequences of the whole chunk are decoded in one batch.

    >>> from lodtool import LoDTensor
    >>> class Letters:
    ...     def decode(self, seqs, skip_special_tokens=False):
    ...         return ["".join("abcdefgh"[i] for i in s) for s in seqs]
    >>> decode_nested(LoDTensor(np.arange(5), [[0, 2, 3], [0, 1, 3, 5]]), Letters())
    [['a', 'bc'], ['de']]
    """
    if not chunk.lod_level:
        raise LodUsageError("a tensor without LoD levels has no sequences to read as text")
    data = np.asarray(chunk.data)
    last = np.asarray(chunk.offsets[-1])
    texts = decoder.decode([data[a:b] for a, b in zip(last[:-1], last[1:])], skip_special_tokens=skip_special_tokens)
    for level in range(chunk.lod_level - 2, -1, -1):
        offs = np.asarray(chunk.offsets[level])
        texts = [texts[a:b] for a, b in zip(offs[:-1], offs[1:])]
    return texts


__all__ = ["TextTokenizer", "WordVocabulary", "split_text", "decoder_for", "decode_nested", "SPLITS", "SPECIAL_NAMES"]
