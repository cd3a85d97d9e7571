"""Token metadata: what a tensor of token ids needs to be read as text (:class:`TokenInfo`), and the id checks.

A tensor of token ids means something only with its vocabulary: its size, the
special ids (end, beginning of sequence, padding) and the tokenizer that made
it.  :class:`TokenInfo` holds these; the container stores it beside the tensor
(``docs/format.md``, *Token metadata*), every command that copies the tensor
keeps it, and ``validate`` checks every id against :attr:`TokenInfo.vocab_size`
with :func:`out_of_vocabulary`.

>>> info = TokenInfo(vocab_size=50_257, eos_id=50_256, tokenizer_name="gpt2")
>>> info.smallest_dtype(), info.as_dict()["eos_id"]
(dtype('uint16'), 50256)
>>> TokenInfo(vocab_size=5, eos_id=7)
Traceback (most recent call last):
...
lodtool.errors.LodUsageError: eos_id 7 is not under the vocabulary size 5
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

import numpy as np

from .errors import LodUsageError

#: the special ids :class:`TokenInfo` records, in the order they are shown
SPECIAL_IDS = ("eos_id", "bos_id", "pad_id")
#: a tokenizer JSON larger than this is not stored (nor read back from an untrusted file)
MAX_TOKENIZER_BYTES = 256 << 20
#: the algorithm of :attr:`TokenInfo.tokenizer_hash`
HASH_ALGORITHM = "sha256"
#: the fields of :class:`TokenInfo` but the JSON (each a container attribute of the same name)
TOKEN_FIELDS = ("vocab_size", "eos_id", "bos_id", "pad_id", "tokenizer_name", "tokenizer_hash")
#: the largest vocabulary :class:`TokenInfo` accepts (ids must fit an int64)
MAX_VOCAB_SIZE = 1 << 62


def tokenizer_hash(data: bytes) -> str:
    """``"sha256:<hex>"`` of a tokenizer's JSON bytes: how a container names the tokenizer that made its ids.

    >>> tokenizer_hash(b"{}")[:19]
    'sha256:44136fa355b3'
    """
    return f"{HASH_ALGORITHM}:{hashlib.sha256(bytes(data)).hexdigest()}"


@dataclass(frozen=True)
class TokenInfo:
    """The vocabulary of a tensor of token ids: its size, special ids and tokenizer (every field optional).

    ``tokenizer_json`` is the tokenizer itself (a HuggingFace ``tokenizer.json``,
    or the word vocabulary ``pack`` builds), stored in the container where the
    user asks; ``tokenizer_hash`` names it either way (:func:`tokenizer_hash`,
    filled in from the JSON when not given, and checked against it when both
    are).  Two infos are equal when their fields are; the JSON itself is
    compared through its hash.
    """

    vocab_size: int | None = None
    eos_id: int | None = None
    bos_id: int | None = None
    pad_id: int | None = None
    tokenizer_name: str | None = None
    tokenizer_hash: str | None = None
    tokenizer_json: bytes | None = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        if self.vocab_size is not None:
            object.__setattr__(self, "vocab_size", _whole(self.vocab_size, "vocab_size", 1, MAX_VOCAB_SIZE))
        for name in SPECIAL_IDS:
            value = getattr(self, name)
            if value is None:
                continue
            value = _whole(value, name, 0, MAX_VOCAB_SIZE - 1)
            if self.vocab_size is not None and value >= self.vocab_size:
                raise LodUsageError(f"{name} {value} is not under the vocabulary size {self.vocab_size}")
            object.__setattr__(self, name, value)
        for name in ("tokenizer_name", "tokenizer_hash"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value or _controls(value)):
                raise LodUsageError(f"{name} must be a non-empty printable string, got {value!r}")
        if self.tokenizer_json is not None:
            data = bytes(self.tokenizer_json)
            if len(data) > MAX_TOKENIZER_BYTES:
                raise LodUsageError(f"the tokenizer JSON has {len(data):,} bytes; at most {MAX_TOKENIZER_BYTES:,} "
                                    "are stored (store its name and hash only)")
            digest = tokenizer_hash(data)
            if self.tokenizer_hash is not None and self.tokenizer_hash != digest:
                raise LodUsageError(f"tokenizer_hash {self.tokenizer_hash} is not the hash of the tokenizer JSON "
                                    f"({digest})")
            object.__setattr__(self, "tokenizer_json", data)
            object.__setattr__(self, "tokenizer_hash", digest)

    @property
    def empty(self) -> bool:
        """Whether no field is set (such an info is not stored).

        >>> TokenInfo().empty, TokenInfo(pad_id=0).empty
        (True, False)
        """
        return all(getattr(self, k) is None for k in TOKEN_FIELDS) and self.tokenizer_json is None

    def smallest_dtype(self) -> np.dtype:
        """The narrowest unsigned dtype that holds every id of the vocabulary (uint16 up to 65,536 ids).

        >>> TokenInfo(vocab_size=65_536).smallest_dtype(), TokenInfo(vocab_size=65_537).smallest_dtype()
        (dtype('uint16'), dtype('uint32'))
        """
        if self.vocab_size is None:
            raise LodUsageError("the vocabulary size is unknown, so no dtype can be chosen for it")
        return next(np.dtype(t) for t in (np.uint8, np.uint16, np.uint32, np.uint64)
                    if self.vocab_size - 1 <= np.iinfo(t).max)

    def without_json(self) -> "TokenInfo":
        """The same info, its tokenizer named by hash only."""
        return replace(self, tokenizer_json=None)

    def merged(self, **given: Any) -> "TokenInfo":
        """This info with the fields of ``given`` that are not None put over it (checked again).

        >>> TokenInfo(vocab_size=10, eos_id=0).merged(eos_id=9, bos_id=None)
        TokenInfo(vocab_size=10, eos_id=9, bos_id=None, pad_id=None, tokenizer_name=None, tokenizer_hash=None)
        """
        unknown = sorted(set(given) - set(TOKEN_FIELDS) - {"tokenizer_json"})
        if unknown:
            raise LodUsageError(f"unknown token metadata: {', '.join(unknown)}")
        return replace(self, **{k: v for k, v in given.items() if v is not None})

    def as_dict(self) -> dict:
        """The fields as JSON values (the tokenizer JSON by its size: ``tokenizer_json_bytes``).

        >>> TokenInfo(vocab_size=3, tokenizer_json=b"{}").as_dict()["tokenizer_json_bytes"]
        2
        """
        out = {k: getattr(self, k) for k in TOKEN_FIELDS}
        out["tokenizer_json_bytes"] = None if self.tokenizer_json is None else len(self.tokenizer_json)
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "TokenInfo":
        """The info of :meth:`as_dict` (``tokenizer_json_bytes`` is ignored; unknown keys are refused).

        >>> TokenInfo.from_dict({"vocab_size": 3, "eos_id": 2}).eos_id
        2
        """
        unknown = sorted(set(raw) - set(TOKEN_FIELDS) - {"tokenizer_json_bytes"})
        if unknown:
            raise LodUsageError(f"unknown token metadata: {', '.join(unknown)}")
        return cls(**{k: raw.get(k) for k in TOKEN_FIELDS})

    def to_bytes(self) -> bytes:
        """The whole info, the tokenizer's JSON included, as UTF-8 JSON: how an interchange file carries it.

        >>> info = TokenInfo(vocab_size=3, eos_id=2, tokenizer_json=b'{"a": 1}')
        >>> back = TokenInfo.from_bytes(info.to_bytes(), "x.npz")
        >>> back == info and back.tokenizer_json == info.tokenizer_json
        True
        """
        import json

        fields = {k: getattr(self, k) for k in TOKEN_FIELDS}
        fields["tokenizer_json"] = None if self.tokenizer_json is None else self.tokenizer_json.decode("utf-8")
        return json.dumps(fields, ensure_ascii=False, separators=(",", ":")).encode("utf-8")

    @classmethod
    def from_bytes(cls, raw: bytes, label: str) -> "TokenInfo":
        """The info of :meth:`to_bytes`; anything else is a :class:`~lodtool.errors.LodInputError` naming ``label``."""
        import json

        from .errors import LodInputError

        try:
            fields = json.loads(bytes(raw).decode("utf-8"))
            if not isinstance(fields, dict):
                raise ValueError("not a JSON object")
            unknown = sorted(set(fields) - set(TOKEN_FIELDS) - {"tokenizer_json"})
            if unknown:
                raise ValueError(f"unknown fields {', '.join(unknown)}")
            stored = fields.get("tokenizer_json")
            if stored is not None and not isinstance(stored, str):
                raise ValueError("tokenizer_json is not a string")
            return cls(**{k: fields.get(k) for k in TOKEN_FIELDS},
                       tokenizer_json=None if stored is None else stored.encode("utf-8"))
        except (UnicodeDecodeError, ValueError, LodUsageError) as exc:
            raise LodInputError(f"{label}: its token metadata does not parse ({exc})") from None

    def describe(self) -> str:
        """One line for people (:func:`describe_tokens`)."""
        return describe_tokens(self.as_dict())



def describe_tokens(fields: Mapping[str, Any]) -> str:
    """:meth:`TokenInfo.as_dict`'s fields in one line for people (what ``inspect`` shows).

    >>> describe_tokens(TokenInfo(vocab_size=50_257, eos_id=50_256, tokenizer_name="gpt2").as_dict())
    'vocabulary 50,257, eos 50256, tokenizer gpt2'
    >>> describe_tokens(TokenInfo(tokenizer_json=b"{}").as_dict())
    'tokenizer sha256:44136fa355b3 (stored, 2 bytes)'
    """
    parts = [] if fields.get("vocab_size") is None else [f"vocabulary {fields['vocab_size']:,}"]
    parts += [f"{name[:-3]} {fields[name]}" for name in SPECIAL_IDS if fields.get(name) is not None]
    who = fields.get("tokenizer_name") or (fields.get("tokenizer_hash") or "")[:19]
    if who:
        size = fields.get("tokenizer_json_bytes")
        parts.append(f"tokenizer {who}" + (f" (stored, {size:,} bytes)" if size else ""))
    return ", ".join(parts)


def _whole(value: Any, name: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not lo <= int(value) <= hi:
        raise LodUsageError(f"{name} must be an integer {lo}..{hi}, got {value!r}")
    return int(value)


def _controls(text: str) -> bool:
    return any(ch < " " or "\x7f" <= ch <= "\x9f" for ch in text)


# -- the id checks ------------------------------------------------------------------------------------
def dtype_problem(dtype: Any, vocab_size: int) -> str | None:
    """Why ``dtype`` cannot hold every id of a vocabulary of ``vocab_size``, or None.

    >>> dtype_problem("uint8", 300)
    'dtype uint8 holds ids up to 255, but the vocabulary has 300 (ids up to 299)'
    >>> dtype_problem("uint16", 300), dtype_problem("float32", 3)
    (None, 'dtype float32 holds no token ids (an integer dtype is needed)')
    """
    dtype = np.dtype(dtype)
    if dtype.kind not in "iu":
        return f"dtype {dtype} holds no token ids (an integer dtype is needed)"
    if vocab_size - 1 > np.iinfo(dtype).max:
        return (f"dtype {dtype} holds ids up to {np.iinfo(dtype).max}, but the vocabulary has {vocab_size:,} "
                f"(ids up to {vocab_size - 1:,})")
    return None


def out_of_vocabulary(ids: np.ndarray, vocab_size: int) -> np.ndarray:
    """The positions of ``ids`` that are not token ids of a vocabulary of ``vocab_size`` (negative, or too big).

    A block whose largest id is in range costs one pass and no allocation beyond it.

    >>> out_of_vocabulary(np.array([1, 7, 2, -1]), 5).tolist()
    [1, 3]
    """
    if not ids.size:
        return np.zeros(0, np.int64)
    if int(ids.max()) < vocab_size and (ids.dtype.kind == "u" or int(ids.min()) >= 0):
        return np.zeros(0, np.int64)
    return np.flatnonzero((ids >= vocab_size) | (ids < 0))


__all__ = ["TokenInfo", "TOKEN_FIELDS", "tokenizer_hash", "describe_tokens", "dtype_problem", "out_of_vocabulary", "SPECIAL_IDS",
           "MAX_TOKENIZER_BYTES"]
