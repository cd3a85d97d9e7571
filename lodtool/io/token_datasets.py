"""One entry to the token formats of LLM training: which format a path is, open it in place, validate it.

``lodtool.open``, ``validate``, ``inspect`` and the reading commands call
:func:`format_of`, :func:`open_dataset` and :func:`validate_dataset`, whatever
the format (see :mod:`lodtool.io.megatron`, :mod:`lodtool.io.datatrove`,
:mod:`lodtool.io.dolma`).

>>> import os, tempfile, numpy as np
>>> from lodtool import LoDTensor
>>> from lodtool.io.megatron import write_megatron
>>> prefix = os.path.join(tempfile.mkdtemp(), "corpus")
>>> _ = write_megatron(LoDTensor(np.arange(3, dtype=np.int32), [[0, 1, 3]]), prefix)
>>> format_of(prefix), format_of(prefix + ".bin"), format_of(prefix + ".json")
('megatron', 'megatron', None)
>>> with open_dataset(prefix) as f:
...     f.format, f.tensor().lod_level, validate_dataset(prefix, vocab_size=2)[0].index
('megatron', 2, 2)
"""

from __future__ import annotations

import os
from typing import Any

from .. import storage
from ..errors import LodFormatError, LodUsageError
from ..limits import resolve_max_memory
from . import datatrove as _datatrove, dolma as _dolma, megatron as _megatron
from ._tokens import TokenFile, TokenProblem
from ..tokens import TokenInfo

NPY_MAGIC = b"\x93NUMPY"
#: the token formats of LLM training: what :func:`format_of` names
FORMATS = ("megatron", "fairseq", "datatrove", "dolma")


def format_of(path: str | os.PathLike) -> str | None:
    """``"megatron"``, ``"fairseq"``, ``"datatrove"`` or ``"dolma"`` for a path of one of them, else None.

    A Megatron or fairseq dataset is named by its prefix, ``.idx`` or ``.bin``
    (told apart by the ``.idx`` size); datatrove by its ``.ds`` or a side file;
    dolma by a ``.npy`` without an NPY header (a real ``.npy`` is None here).
    Only headers are read.  A URL (``s3://bucket/corpus``) is a token dataset in object storage: datatrove
    (its ``.ds`` or a side file, told by the name alone, as a local one), or Megatron or fairseq, named by its
    prefix, ``.idx`` or ``.bin``, or None (a name with another extension is not asked for).
    """
    p = os.fspath(path)
    if p.endswith((".ds", ".ds.index", ".ds.loss", ".ds.metadata")):
        return "datatrove"
    if storage.is_url(p):  # in object storage: Megatron and fairseq (the prefix, .idx or .bin)
        name = p.rstrip("/").rsplit("/", 1)[-1] if not p.endswith("/") else ""
        idx = _megatron.paths(p)[2]
        if not name or ("." in name and not name.endswith((".idx", ".bin"))) or not storage.exists(idx):
            return None
        try:
            return _megatron.read_header(idx).kind
        except LodFormatError:
            return None
    if p.endswith(".npy") or p.endswith(".csv.gz"):
        npy, _ = _dolma.paths(p)
        try:
            with open(npy, "rb") as f:
                return None if f.read(len(NPY_MAGIC)) == NPY_MAGIC else "dolma"
        except OSError:
            return None
    _, _, idx = _megatron.paths(p)
    if p == idx or os.path.exists(idx):
        try:
            with open(idx, "rb") as f:
                if f.read(len(_megatron.MAGIC)) != _megatron.MAGIC:
                    return None
        except OSError:
            return None
        return _megatron.kind_of(idx)
    return None


def input_bytes(path: str | os.PathLike) -> int | None:
    """The bytes reading ``path`` reads (what a progress bar counts up to): a token dataset's tokens (its
    ``.bin``, ``.ds`` or ``.npy``, whichever of its paths names it), else the file itself; None where the path
    is no file (a folder, a missing path).

    >>> import os, tempfile, numpy as np
    >>> from lodtool import LoDTensor
    >>> from lodtool.io.megatron import write_megatron
    >>> prefix = os.path.join(tempfile.mkdtemp(), "corpus")
    >>> _ = write_megatron(LoDTensor(np.arange(3, dtype=np.int32), [[0, 1, 3]]), prefix)
    >>> input_bytes(prefix), input_bytes(prefix + ".idx"), input_bytes(prefix + ".json")
    (12, 12, None)
    """
    fmt = format_of(path)
    if fmt in ("megatron", "fairseq"):
        path = _megatron.paths(path)[1]
    elif fmt == "datatrove":
        path = _datatrove.paths(path)["tokens"]
    elif fmt == "dolma":
        path = _dolma.paths(path)[0]
    return os.path.getsize(path) if os.path.isfile(path) else None


def open_dataset(path: str | os.PathLike, *, token_dtype: Any = None, eos_token_id: int | None = None,
                 max_memory: int | None = None) -> TokenFile:
    """Open a token dataset of any of the formats in place (see each module's ``open_...``); ``max_memory`` bounds
    what a reader of it holds at once, as a container's does."""
    fmt = format_of(path)
    f = None
    if fmt in ("megatron", "fairseq"):
        f = _megatron.open_megatron(path, kind=fmt, token_dtype=token_dtype)
    elif fmt == "datatrove":
        f = _datatrove.open_datatrove(path, token_dtype=token_dtype)
    elif fmt == "dolma":
        f = _dolma.open_dolma(path, token_dtype=token_dtype, eos_token_id=eos_token_id)
    if f is not None:
        f.max_memory = resolve_max_memory(max_memory)
        f.tensor().tokens = recorded_tokens(fmt, path, eos_token_id=eos_token_id)
        return f
    raise LodUsageError(f"{os.fspath(path)}: not a Megatron or fairseq dataset (PREFIX.bin + PREFIX.idx), a datatrove "
                        "file (.ds) or a dolma token array (.npy without a header)")


def recorded_tokens(fmt: str, path: str | os.PathLike, *, eos_token_id: int | None = None) -> TokenInfo | None:
    """The token metadata of a token dataset, as ``pack`` records it: what the files say (datatrove's
    tokenizer name), with ``eos_token_id`` (given: the dataset cannot say it) as the EOS id; None if nothing.

    >>> import os, tempfile, numpy as np
    >>> from lodtool import LoDTensor
    >>> from lodtool.io.megatron import write_megatron
    >>> prefix = os.path.join(tempfile.mkdtemp(), "corpus")
    >>> _ = write_megatron(LoDTensor(np.arange(3, dtype=np.int32), [[0, 1, 3]]), prefix)
    >>> recorded_tokens("megatron", prefix), recorded_tokens("megatron", prefix, eos_token_id=2).eos_id
    (None, 2)
    """
    found = _datatrove.token_info(fmt, [path]) if fmt == "datatrove" else None
    if eos_token_id is not None:
        found = (found or TokenInfo()).merged(eos_id=eos_token_id)
    return None if found is None or found.empty else found


def validate_dataset(path: str | os.PathLike, *, vocab_size: int | None = None, token_dtype: Any = None,
                     eos_token_id: int | None = None, max_problems: int = 20) -> list[TokenProblem]:
    """Every finding of a token dataset of any of the formats (see each module's ``validate_...``)."""
    fmt = format_of(path)
    common = {"token_dtype": token_dtype, "vocab_size": vocab_size, "max_problems": max_problems}
    if fmt in ("megatron", "fairseq"):
        return _megatron.validate_megatron(path, kind=fmt, **common)
    if fmt == "datatrove":
        return _datatrove.validate_datatrove(path, **common)
    if fmt == "dolma":
        return _dolma.validate_dolma(path, eos_token_id=eos_token_id, **common)
    open_dataset(path)  # raises, naming what the path is not
    return []  # pragma: no cover


__all__ = ["FORMATS", "format_of", "input_bytes", "open_dataset", "recorded_tokens", "validate_dataset"]
