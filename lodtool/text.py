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

import os
import re
from typing import Any, Sequence

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
        blingfire = optional_import("blingfire", "text", "--split sentences")
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
        flat = np.fromiter((i for p in pieces for i in p), np.int64, int(lengths.sum()))
        return flat, lengths

    def decode(self, sequences: Sequence[Any], *, skip_special_tokens: bool = False) -> list[str]:
        """Each id sequence back to its text (``decode_batch``, on every core)."""
        return self._tok.decode_batch([np.asarray(s).tolist() for s in sequences],
                                      skip_special_tokens=skip_special_tokens)


    def preview(self, ids: np.ndarray, more: bool) -> str:
        """The text of the first ids of a sequence, ``…`` after it when ``more`` follow (for ``tree --text``)."""
        return self.decode([ids])[0] + ("…" if more else "")


def decoder_for(info: TokenInfo | None, where: str):
    """What turns the ids of a tensor with token metadata ``info`` back into text: its stored tokenizer.

    A tensor that stores none is a :class:`~lodtool.errors.LodUsageError` naming ``where``.
    """
    if info is None or info.tokenizer_json is None:
        raise LodUsageError(f"{where} stores no tokenizer (pack --tokenizer FILE stores one), so its ids cannot be "
                            "read as text")
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


__all__ = ["TextTokenizer", "split_text", "decoder_for", "decode_nested", "SPLITS", "SPECIAL_NAMES"]
