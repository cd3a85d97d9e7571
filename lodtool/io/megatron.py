"""Megatron-Core ``IndexedDataset`` (``PREFIX.bin`` + ``PREFIX.idx``) and fairseq's MMIDIDX variant, in place.

``.bin`` holds the tokens, raw, with no header.  ``.idx`` (little-endian, no
padding) holds::

    b"MMIDIDX\\x00\\x00"  u64 version=1  u8 dtype code  u64 n (sequences)
    [u64 d (document_indices entries): Megatron only]
    int32 sequence_lengths[n]  int64 sequence_pointers[n] (byte offsets into .bin)
    [int64 document_indices[d]  [int8 sequence_modes[n]: multimodal]]: Megatron only

A Megatron dataset is a 2-level LoD: ``document_indices`` (documents over
sequences) over the sequences' token offsets (``sequence_pointers`` divided
by the token size).  A fairseq dataset is 1 level (no documents).  The two
share the magic and the version; the ``.idx`` size tells them apart
(Megatron: ``34 + 12n + 8d [+ n]``; fairseq: ``26 + 12n``).

dtype codes 1-5 and 8 mean the same everywhere (uint8 int8 int16 int32 int64
uint16).  The others do not: Megatron-Core writes float64 as 6 and float32
as 7; older Megatron and fairseq read 6 and 7 both as float64; fairseq and
some Megatron forks use 9 and 10 for uint32 and uint64, which Megatron-Core
has not.  Such a code is refused unless ``token_dtype`` says what it is
(lodtool does not guess); a code no fork has is refused always.  Writing,
lodtool gives Megatron-Core's codes (fairseq: 6 float64, 9 uint32, 10 uint64).

>>> import os, tempfile
>>> from lodtool import LoDTensor
>>> prefix = os.path.join(tempfile.mkdtemp(), "corpus")
>>> [os.path.basename(p) for p in write_megatron(LoDTensor(np.array([5, 6, 7, 8], np.uint16),
...                                                             [[0, 1, 3], [0, 3, 3, 4]]), prefix)]
['corpus.bin', 'corpus.idx']
>>> with open_megatron(prefix) as f:
...     t = f.tensor()
...     t.lod_level, t.level_sizes, t[1].lod, t[1].data.tolist()
(2, [3, 4], [[0, 0, 1]], [8])
"""

from __future__ import annotations

import contextlib
import os
import struct
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, BinaryIO, Callable, Iterable, Iterator, Sequence

import numpy as np

from .. import storage
from .._jit import thread_limit
from ..errors import LodFormatError, LodUsageError
from ..tensor import LoDTensor
from ..limits import STREAM_CHUNK_BYTES, resolve_max_memory
from ._megatronscan import arrays_consistent
from ._tokens import (BLOCK, RangedTokens, TokenFile, TokenProblem, TokenTensor, atomic_files, check_window,
                      file_size, first_index, little_endian, map_array, output_prefix, raise_first, read_chunks,
                      resolve_token_dtype, token_problems, writer_levels)

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
#: bytes before the arrays: magic, version, dtype code, sequence count (+ the document count in Megatron)
HEADER_FAIRSEQ = 26
HEADER_MEGATRON = 34
KINDS = ("megatron", "fairseq")
_INT32_MAX = 2 ** 31 - 1

#: codes every fork reads the same way
_COMMON_CODES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 8: np.uint16}
#: what the other codes mean, by fork: Megatron-Core (6 float64, 7 float32), older Megatron and fairseq
#: (6 and 7 float64), fairseq and some Megatron forks (9 uint32, 10 uint64; Megatron-Core has neither)
_FORK_CODES = {6: ("float64",), 7: ("float32", "float64"), 9: ("uint32",), 10: ("uint64",)}
#: the code each writer gives a dtype (Megatron-Core's and fairseq's current writers)
_WRITE_CODES = {
    "megatron": {**{np.dtype(v): k for k, v in _COMMON_CODES.items()}, np.dtype(np.float64): 6,
                 np.dtype(np.float32): 7},
    "fairseq": {**{np.dtype(v): k for k, v in _COMMON_CODES.items()}, np.dtype(np.float64): 6,
                np.dtype(np.uint32): 9, np.dtype(np.uint64): 10},
}
_ALL_DTYPES = tuple(np.dtype(d) for d in (np.uint8, np.int8, np.int16, np.int32, np.int64, np.uint16, np.uint32,
                                          np.uint64, np.float32, np.float64))


def paths(path: str | os.PathLike) -> tuple[str, str, str]:
    """``(prefix, bin, idx)`` of a dataset named by its prefix, its ``.idx`` or its ``.bin``.

    >>> paths("data/c.idx"), paths("data/c")[1]
    (('data/c', 'data/c.bin', 'data/c.idx'), 'data/c.bin')
    """
    p = os.fspath(path)
    prefix = p[:-4] if p.endswith((".idx", ".bin")) else p
    return prefix, prefix + ".bin", prefix + ".idx"


@dataclass
class Index:
    """A parsed ``.idx``: its header, and its arrays memory-mapped (nothing is read but the header)."""

    path: str
    bin_path: str
    kind: str
    code: int
    dtype: np.dtype
    sequence_count: int
    #: entries of ``document_indices`` (documents + 1); None for fairseq
    document_count: int | None
    multimodal: bool
    bin_size: int
    sequence_lengths: np.ndarray
    sequence_pointers: np.ndarray
    document_indices: np.ndarray | None
    sequence_modes: np.ndarray | None
    #: where the tokens are read from, when it is not ``bin_path`` (a URL, which messages name redacted)
    bin_source: str | None = None

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def n_tokens(self) -> int:
        """Tokens up to the end of the last sequence, as the last pointer and length say."""
        n = self.sequence_count
        if not n:
            return 0
        return (int(self.sequence_pointers[n - 1]) + int(self.sequence_lengths[n - 1]) * self.itemsize) \
            // self.itemsize

    def token_offsets(self, start: int, stop: int) -> np.ndarray:
        """Entries ``start..stop`` of the sequences' token offsets (``n + 1`` of them) as int64."""
        n = self.sequence_count
        check_window(start, stop, n + 1, f"{self.path}: sequence offsets")
        out = np.empty(stop - start, np.int64)
        inner = min(stop, n) - start
        if inner > 0:
            shift = self.itemsize.bit_length() - 1  # a power of two: the shift is the floor division, twice as fast
            np.right_shift(self.sequence_pointers[start:start + inner], shift, out=out[:inner])
        if stop == n + 1:
            out[-1] = self.n_tokens
        return out

    def document_offsets(self, start: int, stop: int) -> np.ndarray:
        check_window(start, stop, self.document_count, f"{self.path}: document_indices")
        return np.asarray(self.document_indices[start:stop], np.int64)


def _u64(head: bytes, at: int) -> int:
    return struct.unpack_from("<Q", head, at)[0]


@dataclass(frozen=True)
class Header:
    """What the first 34 bytes and the ``.idx`` size say: the kind, the dtype code and the counts."""

    kind: str
    code: int
    sequence_count: int
    document_count: int | None
    multimodal: bool


def read_header(idx_path: str) -> Header:
    """The header of an MMIDIDX ``.idx``, its kind told by the file size (the arrays are not read); a URL is read
    in object storage (one request for its size, one for its head)."""
    if storage.is_url(idx_path):
        remote = storage.open_input(idx_path)
        return parse_header(remote.head(min(HEADER_MEGATRON, remote.size)), remote.size, storage.redact(idx_path))
    idx_size = file_size(idx_path, "index file (.idx)")
    with open(idx_path, "rb") as f:
        head = f.read(HEADER_MEGATRON)
    return parse_header(head, idx_size, idx_path)


def parse_header(head: bytes, idx_size: int, idx_path: str) -> Header:
    """:class:`Header` from the first (up to 34) bytes of an ``.idx`` of ``idx_size`` bytes."""
    if not head.startswith(MAGIC):
        raise LodFormatError(f"{idx_path}: byte 0: not an MMIDIDX index (the file starts with {head[:9]!r}, not "
                             f"{MAGIC!r})")
    if len(head) < HEADER_FAIRSEQ:
        raise LodFormatError(f"{idx_path}: byte {len(head)}: the header is cut short ({idx_size} bytes; at least "
                             f"{HEADER_FAIRSEQ} are needed)")
    version = _u64(head, 9)
    if version != VERSION:
        raise LodFormatError(f"{idx_path}: byte 9: version {version}; Megatron and fairseq indexes are version 1")
    code, n = head[17], _u64(head, 18)
    d = _u64(head, 26) if len(head) >= HEADER_MEGATRON else None
    fairseq_size = HEADER_FAIRSEQ + 12 * n
    if idx_size == fairseq_size:
        return Header("fairseq", code, n, None, False)
    if d is not None:
        plain = HEADER_MEGATRON + 12 * n + 8 * d
        if idx_size in (plain, plain + n):
            return Header("megatron", code, n, d, idx_size != plain)
    megatron = f"Megatron's 34 + 12n + 8d [+ n] = {HEADER_MEGATRON + 12 * n + 8 * d:,}" if d is not None else \
        "Megatron's 34-byte header"
    raise LodFormatError(f"{idx_path}: byte {min(idx_size, fairseq_size)}: the file has {idx_size:,} bytes, but its "
                         f"header (n={n:,} sequences{'' if d is None else f', d={d:,}'}) needs {megatron} or "
                         f"fairseq's 26 + 12n = {fairseq_size:,} (truncated, or not an MMIDIDX index)")


def read_index(path: str | os.PathLike, *, kind: str | None = None, token_dtype: Any = None,
               check_bin: bool = True) -> Index:
    """Parse a ``.idx`` (named by itself, its ``.bin`` or their prefix) and check it against its ``.bin``.

    ``kind`` insists on ``"megatron"`` or ``"fairseq"`` (None: whichever the
    sizes show); ``token_dtype`` says what a code that differs between forks
    means.  Everything checked here is O(1): the header, the ``.idx`` size
    against its counts, and (``check_bin``) the ``.bin`` size against the last
    sequence (on a mismatch the first sequence past the ``.bin`` is found and
    named).

    >>> import os, tempfile
    >>> from lodtool import LoDTensor
    >>> p = os.path.join(tempfile.mkdtemp(), "c")
    >>> _ = write_megatron(LoDTensor(np.arange(5, dtype=np.uint16), [[0, 2, 5]]), p)
    >>> ix = read_index(p + ".idx")
    >>> ix.kind, ix.code, ix.sequence_count, ix.document_count, ix.sequence_pointers.tolist()
    ('megatron', 8, 2, 3, [0, 4])
    """
    _, bin_path, idx_path = paths(path)
    if kind is not None and kind not in KINDS:
        raise LodUsageError(f"unknown index kind {kind!r}; choose megatron or fairseq")
    h = read_header(idx_path)
    if kind is not None and kind != h.kind:
        other = "a fairseq MMIDIDX index (no document count: 26 + 12n bytes)" if h.kind == "fairseq" else \
            "a Megatron-Core index (with document_indices: 34 + 12n + 8d bytes)"
        raise LodFormatError(f"{idx_path}: byte 26: this is {other}, not a {kind} one; read it as {h.kind}")
    dtype = _token_dtype(h.code, h.kind, token_dtype, idx_path)
    if storage.is_url(idx_path):  # the .idx read whole, in one request; the .bin's size asked for
        whole = storage.read_bytes(idx_path, resolve_max_memory(None))
        array = lambda dt, count, offset: np.frombuffer(whole, dt, count, offset)  # noqa: E731
        bin_size = int(storage.info(bin_path).get("size") or 0)
    else:
        array = lambda dt, count, offset: map_array(idx_path, dt, count, offset)  # noqa: E731
        bin_size = file_size(bin_path, "token file (.bin)")
    n, d = h.sequence_count, h.document_count
    header = HEADER_FAIRSEQ if h.kind == "fairseq" else HEADER_MEGATRON
    lengths = array("<i4", n, header)
    pointers = array("<i8", n, header + 4 * n)
    docs = modes = None
    if h.kind == "megatron":
        docs = array("<i8", d, header + 12 * n)
        if h.multimodal:
            modes = array("i1", n, header + 12 * n + 8 * d)
    source = None
    if storage.is_url(idx_path):
        source, idx_path, bin_path = bin_path, storage.redact(idx_path), storage.redact(bin_path)
    index = Index(idx_path, bin_path, h.kind, h.code, dtype, n, d, h.multimodal, bin_size, lengths, pointers, docs,
                  modes, source)
    if check_bin:
        raise_first(_bin_problems(index))
    return index


def _token_dtype(code: int, kind: str, given: Any, idx_path: str) -> np.dtype:
    given = resolve_token_dtype(given, _ALL_DTYPES, kind)
    if code in _COMMON_CODES:
        dtype = np.dtype(_COMMON_CODES[code])
        if given is not None and given != dtype:
            raise LodUsageError(f"{idx_path}: byte 17: dtype code {code} is {dtype.name} in every fork; "
                                f"token_dtype={given} contradicts it")
        return little_endian(dtype)
    meanings = _FORK_CODES.get(code)
    if meanings is None:
        known = ", ".join(str(c) for c in sorted({*_COMMON_CODES, *_FORK_CODES}))
        raise LodFormatError(f"{idx_path}: byte 17: dtype code {code} does not exist (no Megatron or fairseq fork "
                             f"has it; known: {known})")
    if given is None:
        raise LodFormatError(f"{idx_path}: byte 17: dtype code {code} means {' or '.join(meanings)} depending on "
                             "which fork wrote the file; say which with token_dtype=... (lodtool does not guess)")
    if given.name not in meanings:
        raise LodUsageError(f"{idx_path}: byte 17: dtype code {code} is never {given} (it is "
                            f"{' or '.join(meanings)})")
    return little_endian(given)


def _bin_problems(index: Index, *, full: bool = False) -> list[TokenProblem]:
    """The ``.bin`` against the index: every sequence inside it (the first one past its end is named).

    Without ``full`` only the last sequence is looked at unless it is outside
    (O(1), as every open does); ``full`` checks them all.
    """
    n, size, isz = index.sequence_count, index.bin_size, index.itemsize
    if not n:
        return []
    last = int(index.sequence_pointers[n - 1])
    if not full and 0 <= last and last + int(index.sequence_lengths[n - 1]) * isz <= size:
        return []
    for start in range(0, n, BLOCK):
        p = index.sequence_pointers[start:start + BLOCK]
        e = p + index.sequence_lengths[start:start + BLOCK].astype(np.int64) * isz
        bad = first_index((e > size) | (p < 0))
        if bad is not None:
            i = start + bad
            return [TokenProblem(index.path, "sequence_pointers", i,
                                 f"sequence {i} spans bytes {int(p[bad]):,}..{int(e[bad]):,} of {index.bin_path}, "
                                 f"which has {size:,} bytes (a truncated .bin, or pointers past its end)")]
    return []


def index_problems(index: Index, max_problems: int = 20) -> list[TokenProblem]:
    """What Megatron-Core never checks, vectorised over the memory-mapped arrays, block by block.

    Lengths not negative; ``sequence_pointers[0] == 0`` and each pointer the
    previous one plus its sequence's bytes (so they never decrease, overlap or
    leave gaps, and every sequence is inside the ``.bin`` once the last one
    is); ``document_indices`` starting at 0, never decreasing and ending at
    the sequence count; nothing in the ``.bin`` after the last sequence.  Each
    check reports up to ``max_problems`` violations, by index.  Where the
    pointers are not chained, every sequence is checked against the ``.bin``
    and the token size on its own.
    """
    n, isz, path = index.sequence_count, index.itemsize, index.path
    lengths, pointers, docs = index.sequence_lengths, index.sequence_pointers, index.document_indices
    if arrays_consistent(lengths, pointers, docs, isz) and (docs is None or (len(docs) and int(docs[-1]) == n)):
        problems = _bin_problems(index)
        return problems + _uncovered_problems(index, outside=bool(problems))
    negative: list[TokenProblem] = []
    chained: list[TokenProblem] = []
    if n and int(pointers[0]) != 0:
        chained.append(TokenProblem(path, "sequence_pointers", 0,
                                    f"is {int(pointers[0]):,} (the first sequence must start at byte 0)"))
    for start in range(0, n, BLOCK):
        stop = min(start + BLOCK, n)
        ln = lengths[start:stop]
        if len(negative) < max_problems and int(ln.min()) < 0:
            for j in np.flatnonzero(ln < 0)[:max_problems - len(negative)]:
                negative.append(TokenProblem(path, "sequence_lengths", start + int(j),
                                             f"is {int(ln[j])} (a length cannot be negative)"))
        lo = max(start, 1)
        if lo >= stop or len(chained) >= max_problems:
            continue
        prev = pointers[lo - 1:stop - 1]
        expected = lengths[lo - 1:stop - 1].astype(np.int64)
        expected *= isz
        expected += prev
        cur = pointers[lo:stop]
        if np.array_equal(cur, expected):
            continue
        for j in np.flatnonzero(cur != expected)[:max_problems - len(chained)]:
            i, got, want = lo + int(j), int(cur[j]), int(expected[j])
            how = "decreases" if got < int(prev[j]) else ("overlaps the sequence before it" if got < want
                                                           else "leaves a gap after the sequence before it")
            chained.append(TokenProblem(path, "sequence_pointers", i,
                                        f"is {got:,}, but sequence {i - 1} starts at byte {int(prev[j]):,} with "
                                        f"{int(lengths[i - 1]):,} tokens of {isz} bytes, so it must be {want:,} "
                                        f"(it {how})"))
    broken = bool(negative or chained)
    problems = _bin_problems(index, full=broken)
    outside = bool(problems)
    problems += negative + chained
    if broken:
        for start in range(0, n, BLOCK):  # chained pointers from 0 are on token boundaries; these are not
            p = pointers[start:start + BLOCK]
            j = first_index(p % isz != 0)
            if j is not None:
                problems.append(TokenProblem(path, "sequence_pointers", start + j,
                                             f"is {int(p[j]):,}, not a multiple of the token size {isz}"))
                break
    if index.document_indices is not None:
        problems += _document_problems(index, max_problems)
    return problems + _uncovered_problems(index, outside)


def _uncovered_problems(index: Index, outside: bool) -> list[TokenProblem]:
    """The bytes of the ``.bin`` after the last sequence (none are looked for where a sequence is ``outside`` it)."""
    end = index.n_tokens * index.itemsize
    if outside or index.bin_size <= end:
        return []
    return [TokenProblem(index.bin_path, "", None, f"{index.bin_size - end:,} bytes after the end of the last "
                         f"sequence (byte {end:,}); the index does not cover them")]


def _document_problems(index: Index, max_problems: int) -> list[TokenProblem]:
    docs, path, n = index.document_indices, index.path, index.sequence_count
    problems = []
    if index.document_count == 0:
        return [TokenProblem(path, "document_indices", None, "is empty; it needs at least the entry 0")]
    if int(docs[0]) != 0:
        problems.append(TokenProblem(path, "document_indices", 0, f"is {int(docs[0])} (the first entry must be 0)"))
    d = index.document_count
    for start in range(0, d - 1, BLOCK):
        stop = min(start + BLOCK, d - 1)
        block = docs[start:stop + 1]
        down = block[1:] < block[:-1]
        if not down.any():
            continue
        for j in np.flatnonzero(down)[:max_problems - len(problems)]:
            i = start + int(j) + 1
            problems.append(TokenProblem(path, "document_indices", i, f"is {int(block[j + 1])} < entry {i - 1} = "
                                         f"{int(block[j])} (document indices must not decrease)"))
        if len(problems) >= max_problems:
            break
    if int(docs[d - 1]) != n:
        problems.append(TokenProblem(path, "document_indices", d - 1,
                                     f"is {int(docs[d - 1])} but the index has {n:,} sequences (the last entry must "
                                     "equal it)"))
    return problems


# -- the view ---------------------------------------------------------------------------------------
def open_megatron(path: str | os.PathLike, *, kind: str | None = None, token_dtype: Any = None) -> TokenFile:
    """Open a Megatron (or fairseq) dataset in place: ``tokens``, a read-only view over a memory map of the ``.bin``.

    ``path`` is the prefix, the ``.idx`` or the ``.bin``.  A Megatron dataset
    is 2 levels (``document``, ``sequence``), a fairseq one 1 (``sequence``);
    offsets are int64 windows of the ``.idx`` arrays, never the whole ``.bin``.

    >>> import os, tempfile
    >>> from lodtool import LoDTensor
    >>> p = os.path.join(tempfile.mkdtemp(), "c")
    >>> _ = write_megatron(LoDTensor(np.arange(4, dtype=np.int32), [[0, 1, 2, 4]]), p, kind="fairseq")
    >>> with open_megatron(p + ".bin") as f:
    ...     f.format, f.tensor().level_names, f.tensor()[2].data.tolist()
    ('fairseq', ('sequence',), [2, 3])
    """
    index = read_index(path, kind=kind, token_dtype=token_dtype)
    tokens = _tokens_of(index, index.n_tokens)
    if index.kind == "megatron":
        levels = [index.document_offsets, index.token_offsets]
        sizes, names = [index.document_count, index.sequence_count + 1], ("document", "sequence")
    else:
        levels, sizes, names = [index.token_offsets], [index.sequence_count + 1], ("sequence",)
    t = TokenTensor(index.bin_path, tokens, levels, sizes, names, lambda m: index_problems(index, m))
    info = {"kind": index.kind, "dtype_code": index.code, "multimodal": index.multimodal,
            "sequences": index.sequence_count, "documents": (index.document_count or 1) - 1
            if index.kind == "megatron" else None}
    return TokenFile(index.path, index.kind, {"tokens": t}, files=[index.bin_path, index.path], info=info)


def _tokens_of(index: Index, count: int):
    """The first ``count`` tokens of the ``.bin``: memory-mapped, or read by ranged requests from a URL."""
    if index.bin_source is not None:
        return RangedTokens(index.bin_source, index.dtype, count, index.bin_size)
    return map_array(index.bin_path, index.dtype, count)


def kind_of(path: str | os.PathLike) -> str:
    """``"megatron"`` or ``"fairseq"``: which format an MMIDIDX ``.idx`` is, from its size alone.

    >>> import os, tempfile
    >>> from lodtool import LoDTensor
    >>> p = os.path.join(tempfile.mkdtemp(), "c")
    >>> _ = write_megatron(LoDTensor(np.arange(3, dtype=np.int32), [[0, 3]]), p, kind="fairseq")
    >>> kind_of(p + ".idx")
    'fairseq'
    """
    return read_header(paths(path)[2]).kind


def validate_megatron(path: str | os.PathLike, *, kind: str | None = None, token_dtype: Any = None,
                      vocab_size: int | None = None, max_problems: int = 20) -> list[TokenProblem]:
    """Every finding of a Megatron or fairseq dataset: header, sizes, pointers, lengths, document indices and
    (with ``vocab_size``) every token id; each names the file and the index of the violation.

    A dataset whose header cannot be read at all raises (as :func:`read_index`).

    >>> import os, tempfile
    >>> from lodtool import LoDTensor
    >>> p = os.path.join(tempfile.mkdtemp(), "c")
    >>> _ = write_megatron(LoDTensor(np.array([1, 9, 2], np.uint16), [[0, 2, 3]]), p)
    >>> [str(x).split("/")[-1] for x in validate_megatron(p, vocab_size=8)]
    ['c.bin: tokens[1]: token id 9 is not under the vocabulary size 8']
    """
    index = read_index(path, kind=kind, token_dtype=token_dtype, check_bin=False)
    problems = index_problems(index, max_problems)
    if vocab_size is not None:
        covered = min(index.n_tokens, index.bin_size // index.itemsize)
        tokens = _tokens_of(index, max(covered, 0))
        problems += token_problems(tokens, vocab_size, index.bin_path, max_problems=max_problems)
    return problems


# -- writing ------------------------------------------------------------------------------------------
class _IndexBuilder:
    """Collects the sequences' token offsets of the chunks written to a ``.bin``, then writes the ``.idx``: each array
    computed a block at a time into reused buffers and written as it is (no array of the whole index is made)."""

    def __init__(self, kind: str, dtype: np.dtype, label: str):
        codes = _WRITE_CODES[kind]
        if np.dtype(dtype) not in codes:
            ok = ", ".join(sorted({np.dtype(d).name for d in codes}))
            raise LodUsageError(f"{label}: {kind} cannot store {dtype} tokens (it stores {ok}); cast them with "
                                "dtype=...")
        self.kind, self.code, self.label = kind, codes[np.dtype(dtype)], label
        self.dtype = little_endian(dtype)
        #: (a chunk's token offsets of its sequences, the byte of the .bin its first token is written at)
        self.parts: list[tuple[np.ndarray, int]] = []
        #: (a chunk's document offsets after its first, the sequences of the chunks before it)
        self.documents: list[tuple[np.ndarray, int]] = []
        self.sequences = 0
        self.nbytes = 0  # of the .bin so far

    def add(self, seq_offsets: np.ndarray, doc_offsets: np.ndarray | None, *, keep: bool = False) -> None:
        """The sequences of one chunk: ``seq_offsets`` (token offsets, validated) and the documents over them.

        They are copied, unless ``keep`` says the caller leaves them unchanged until :meth:`write`.
        """
        seq = np.asarray(seq_offsets, np.int64) if keep else np.array(seq_offsets, np.int64)
        n, isz = seq.size - 1, self.dtype.itemsize
        if n > 0:
            tokens = int(seq[-1]) - int(seq[0])
            if tokens > _INT32_MAX:  # else no sequence can be too long for its int32 length
                wide = np.diff(seq)
                big = first_index(wide > _INT32_MAX)
                if big is not None:
                    raise LodUsageError(f"{self.label}: sequence {self.sequences + big} has {int(wide[big]):,} "
                                        f"tokens; {self.kind} stores a sequence's length as int32 (at most "
                                        f"{_INT32_MAX:,})")
            self.parts.append((seq, self.nbytes - int(seq[0]) * isz))
            self.nbytes += tokens * isz
        if doc_offsets is not None:
            docs = np.asarray(doc_offsets, np.int64) if keep else np.array(doc_offsets, np.int64)
            self.documents.append((docs[1:], self.sequences))
        self.sequences += max(n, 0)

    def write(self, f: BinaryIO) -> None:
        """The ``.idx``: the header, then each array, a block of :data:`~lodtool.io._tokens.BLOCK` entries a write."""
        f.write(MAGIC + struct.pack("<QBQ", VERSION, self.code, self.sequences))
        if self.kind == "megatron":
            f.write(struct.pack("<Q", 1 + sum(d.size for d, _ in self.documents)))
        size = min(BLOCK, max([self.sequences, 1] + [d.size for d, _ in self.documents]))
        narrow, wide = np.empty(size, "<i4"), np.empty(size, "<i8")
        isz = self.dtype.itemsize
        for seq, _ in self.parts:  # sequence_lengths
            for a in range(0, seq.size - 1, BLOCK):
                out = narrow[:min(BLOCK, seq.size - 1 - a)]
                np.subtract(seq[a + 1:a + 1 + out.size], seq[a:a + out.size], out=out, casting="unsafe")
                f.write(memoryview(out).cast("B"))
        for seq, first in self.parts:  # sequence_pointers: each sequence's first byte, no running sum
            for a in range(0, seq.size - 1, BLOCK):
                out = wide[:min(BLOCK, seq.size - 1 - a)]
                np.multiply(seq[a:a + out.size], isz, out=out)
                out += first
                f.write(memoryview(out).cast("B"))
        if self.kind != "megatron":
            return
        f.write(struct.pack("<q", 0))  # document_indices
        for docs, before in self.documents:
            for a in range(0, docs.size, BLOCK):
                out = wide[:min(BLOCK, docs.size - a)]
                np.add(docs[a:a + out.size], before, out=out)
                f.write(memoryview(out).cast("B"))


def write_chunks(chunks: Iterable[LoDTensor], out: str | os.PathLike, *, kind: str = "megatron",
                 level: int | None = None) -> list[str]:
    """Write chunks of whole top-level sequences as ``PREFIX.bin`` + ``PREFIX.idx``; both appear, or neither.

    ``out`` is the prefix (or either file's path).  A 2-level LoD is
    documents over sequences; a 1-level LoD writes ``document_indices =
    arange(n + 1)`` (each sequence its own document); a deeper one needs
    ``level`` (see :func:`lodtool.io._tokens.writer_levels`).  fairseq keeps
    one level of sequences.  Returns the paths written.

    >>> import os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "c")
    >>> chunks = [LoDTensor(np.arange(3, dtype=np.int32), [[0, 2, 3]]),
    ...           LoDTensor(np.arange(2, dtype=np.int32), [[0, 2]])]
    >>> [os.path.basename(f) for f in write_chunks(chunks, p + ".idx")]
    ['c.bin', 'c.idx']
    >>> with open_megatron(p) as f:
    ...     f.tensor().read().lod
    [[0, 1, 2, 3], [0, 2, 3, 5]]
    """
    levels_out = 2 if kind == "megatron" else 1

    def fill(bf: BinaryIO, xf: BinaryIO, prefix: str) -> None:
        builder = None
        for chunk in chunks:
            if builder is None:
                builder = _IndexBuilder(kind, chunk.dtype, prefix)
            elif chunk.dtype != builder.dtype:
                raise LodFormatError(f"{prefix}: a chunk of {chunk.dtype} after chunks of {builder.dtype}")
            seq, docs = writer_levels(chunk, levels_out, level, kind, prefix)
            builder.add(seq, docs)
            data = np.ascontiguousarray(chunk.data, dtype=builder.dtype)[int(seq[0]):int(seq[-1])]
            bf.write(memoryview(data).cast("B"))
        if builder is None:
            raise LodUsageError(f"{prefix}: nothing to write (no chunks)")
        builder.write(xf)

    return _write_dataset(out, kind, fill)


def write_copied(lod: LoDTensor | Callable[[], LoDTensor], copy_tokens: Callable[[BinaryIO], int],
                 out: str | os.PathLike, *, kind: str = "megatron", level: int | None = None) -> list[str]:
    """Write the index of ``lod``'s offsets, and as the ``.bin`` what ``copy_tokens(f)`` writes to the open file
    ``f``: every token of ``lod``, in order, as ``lod.dtype`` (it returns the bytes written, which are checked).

    ``lod.data`` is never read (a stand-in of its dtype will do): the tokens are copied from where they are
    stored (a container's uncompressed data) instead of through memory a chunk at a time.  ``lod`` may be a
    callable that reads it: it is then read, and the index built, while the tokens are copied (in a second
    thread, where this process may use two cores).  ``kind`` and ``level`` are :func:`write_chunks`'; both
    files appear, or neither.

    >>> import os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "c")
    >>> tokens = np.arange(3, dtype=np.int32)
    >>> stand_in = LoDTensor(np.broadcast_to(np.int32(0), (3,)), [[0, 2, 3]])
    >>> _ = write_copied(stand_in, lambda f: f.write(tokens.tobytes()), p)
    >>> with open_megatron(p) as f:
    ...     t = f.tensor().read()
    >>> t.data.tolist(), t.lod
    ([0, 1, 2], [[0, 1, 2], [0, 2, 3]])
    """
    def fill(bf: BinaryIO, xf: BinaryIO, prefix: str) -> None:
        with ThreadPoolExecutor(1) if callable(lod) and thread_limit() > 1 else contextlib.nullcontext() as pool:
            copied = pool.submit(copy_tokens, bf) if pool is not None else None
            known = lod() if callable(lod) else lod
            builder = _IndexBuilder(kind, known.dtype, prefix)
            seq, docs = writer_levels(known, 2 if kind == "megatron" else 1, level, kind, prefix)
            builder.add(seq, docs, keep=True)
            builder.write(xf)
            written = copied.result() if copied is not None else copy_tokens(bf)
        expected = (int(seq[-1]) - int(seq[0])) * builder.dtype.itemsize
        if written != expected:
            raise LodFormatError(f"{prefix}.bin: {written:,} bytes of tokens were copied, but the index needs "
                                 f"{expected:,}")

    return _write_dataset(out, kind, fill)


def _write_dataset(out: str | os.PathLike, kind: str,
                   fill: Callable[[BinaryIO, BinaryIO, str], None]) -> list[str]:
    """``PREFIX.bin`` and ``PREFIX.idx`` as ``fill(bin_file, idx_file, prefix)`` writes them; both appear together
    when complete, or neither."""
    if kind not in KINDS:
        raise LodUsageError(f"unknown index kind {kind!r}; choose megatron or fairseq")
    bin_path, idx_path = output_files(kind, out)
    prefix = bin_path[:-len(".bin")]
    with atomic_files([bin_path, idx_path]) as (bin_tmp, idx_tmp):
        with open(bin_tmp, "wb") as bf, open(idx_tmp, "wb") as xf:
            fill(bf, xf, prefix)
    return [bin_path, idx_path]


def write_megatron(tensor: Any, out: str | os.PathLike, *, kind: str = "megatron",
                   level: int | None = None) -> list[str]:
    """Write a tensor held in memory as a Megatron (or fairseq) dataset; see :func:`write_chunks`."""
    return write_chunks([tensor], out, kind=kind, level=level)


# -- the io registry's entry points (see lodtool.io) ------------------------------------------------
def read(fmt: str, sources: Sequence[Any], *, lod_level: int | None = None, dtype: Any = None,
         chunk_bytes: int = STREAM_CHUNK_BYTES, progress: Callable[[int], None] | None = None,
         stats: dict | None = None, token_dtype: Any = None) -> Iterator[LoDTensor]:
    """The registry's reader: each source (a prefix, ``.idx`` or ``.bin``) in place, as chunks of whole documents
    (sequences for fairseq); datasets concatenate.  The reader of one format refuses the other's index.

    >>> import os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "c")
    >>> _ = write_megatron(LoDTensor(np.arange(4, dtype=np.int16), [[0, 1, 2], [0, 3, 4]]), p)
    >>> [c.lod for c in read("megatron", [p])]
    [[[0, 1, 2], [0, 3, 4]]]
    """
    for s in sources:
        if not isinstance(s, (str, os.PathLike)):
            raise LodUsageError(f"{fmt} is read from files (PREFIX.bin + PREFIX.idx), not from a stream")
    opened = (open_megatron(s, kind=fmt, token_dtype=token_dtype) for s in sources)
    return read_chunks(opened, lod_level=lod_level, dtype=dtype, chunk_bytes=chunk_bytes, progress=progress,
                       stats=stats)


def output_files(fmt: str, out: Any) -> list[str]:
    """The registry's file names: ``[PREFIX.bin, PREFIX.idx]`` for the output path ``out`` (a prefix or either file)."""
    _, bin_path, idx_path = paths(output_prefix(out, fmt, (".bin", ".idx")))
    return [bin_path, idx_path]


def write_files(fmt: str, chunks: Iterable[LoDTensor], out: Any, *, level: int | None = None) -> list[str]:
    """The registry's writer: chunks of whole top-level sequences to ``PREFIX.bin`` + ``PREFIX.idx``."""
    return write_chunks(chunks, out, kind=fmt, level=level)


__all__ = ["MAGIC", "Index", "paths", "read_index", "open_megatron", "kind_of", "validate_megatron",
           "index_problems", "write_chunks", "write_copied", "write_megatron", "read", "output_files", "write_files"]
