"""What the token formats of LLM training share: a read-only memory-mapped view, problems, multi-file writes.

Megatron-Core / fairseq ``.bin/.idx``, datatrove ``.ds`` and OLMo / dolma
token arrays all store one flat array of token ids (no header) beside an
index of sequence boundaries.  Each format module parses its own index into
int64 offsets windows; this module turns those into a
:class:`~lodtool.tensor.TensorView` over a ``numpy.memmap`` of the tokens
(:class:`TokenTensor`), a small open-file handle (:class:`TokenFile`), the
findings of ``validate`` (:class:`TokenProblem`), the writers' common steps
(:func:`writer_levels`, :func:`atomic_files`) and the registry's chunked reader
(:func:`read_chunks`).

>>> import numpy as np
>>> t = TokenTensor("x.bin", np.arange(5, dtype=np.uint16), [lambda a, b: np.array([0, 2, 5])[a:b]], [3])
>>> t[1].data.tolist(), t.lod_level, t.dtype
([2, 3, 4], 1, dtype('uint16'))
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from .. import lod as _lod
from ..atomic import AtomicPath, commit_section
from ..errors import LodFileNotFoundError, LodFormatError, LodIndexError, LodUsageError, LodValidationError
from ..limits import resolve_max_memory
from ..tensor import RESIDENT_AFTER, LoDTensor, TensorSource, TensorView
from ..tokens import dtype_problem, out_of_vocabulary
from ._values import cast_values, resolve_dtype

#: index entries checked at a time (bounded temporaries over memory-mapped arrays)
BLOCK = 1 << 20

OffsetsWindow = Callable[[int, int], np.ndarray]


@dataclass(frozen=True)
class TokenProblem:
    """One finding of ``validate``: the file, the array and the index of the first violation, and what is wrong.

    >>> str(TokenProblem("c.idx", "document_indices", 3, "decreases"))
    'c.idx: document_indices[3]: decreases'
    """

    file: str
    array: str
    index: int | None
    message: str

    def __str__(self) -> str:
        where = f"{self.array}[{self.index}]" if self.index is not None and self.array else self.array
        return f"{self.file}: {where}: {self.message}" if where else f"{self.file}: {self.message}"


def raise_first(problems: Sequence[TokenProblem]) -> None:
    """Raise the first problem as a one-line :class:`~lodtool.errors.LodFormatError` (nothing if there is none)."""
    if problems:
        raise LodFormatError(str(problems[0]))


def first_index(mask: np.ndarray) -> int | None:
    """Position of the first True of ``mask``, or None."""
    hits = np.flatnonzero(mask)
    return int(hits[0]) if hits.size else None


# -- opening files ----------------------------------------------------------------------------------
def file_size(path: str, what: str = "file") -> int:
    """The size of ``path``; a missing file or a folder is a one-line error naming it."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise LodFileNotFoundError(f"{path}: no such {what}") from None
    except OSError as exc:
        raise LodFormatError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    if not os.path.isfile(path):
        raise LodFormatError(f"{path}: is not a regular file")
    return st.st_size


def map_array(path: str, dtype: Any, count: int, offset: int = 0) -> np.ndarray:
    """``count`` items of ``dtype`` at byte ``offset`` of ``path``, memory-mapped read-only (an empty array for 0).

    ``numpy.memmap`` refuses an empty file or an empty window, which a corpus of
    zero tokens or zero documents is.
    """
    dtype = np.dtype(dtype)
    if count == 0:
        return np.empty(0, dtype)
    try:
        return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=(count,)).view(np.ndarray)
    except (OSError, ValueError) as exc:
        raise LodFormatError(f"{path}: cannot map {count:,} {dtype} values at byte {offset:,} ({exc})") from None


class RangedTokens:
    """The tokens of a file in object storage (a URL), read by ranged requests as they are sliced: what a
    :class:`TokenTensor` needs of its token array (``shape``, ``dtype``, ``nbytes``, ``[a:b]``, ``np.array``).

    Each slice is one request of its bytes (:func:`lodtool.storage.open_input`); ``np.array`` reads them all.
    """

    def __init__(self, url: str, dtype: Any, count: int, size: int | None = None):
        from .. import storage

        self.dtype = np.dtype(dtype)
        self.shape = (int(count),)
        self.nbytes = self.shape[0] * self.dtype.itemsize
        self._file = storage.open_input(url, size=size)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: slice) -> np.ndarray:
        if not isinstance(key, slice):
            raise LodUsageError("token ids are read from object storage a range at a time ([a:b])")
        start, stop, step = key.indices(self.shape[0])
        if step != 1:
            raise LodUsageError("token ids are read from object storage a range at a time ([a:b])")
        size = self.dtype.itemsize
        data = self._file.read_range(start * size, max(stop, start) * size) if stop > start else b""
        return np.frombuffer(data, self.dtype)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        out = np.array(self[:])
        return out if dtype is None else out.astype(dtype)


def little_endian(dtype: Any) -> np.dtype:
    """``dtype`` as these formats store it: little-endian (the native dtype itself on a little-endian machine).

    >>> little_endian("uint32"), little_endian(">i8").str
    (dtype('uint32'), '<i8')
    """
    dt = np.dtype(dtype).newbyteorder("<")
    return dt.newbyteorder("=") if dt.isnative else dt


def resolve_token_dtype(value: Any, allowed: Sequence[np.dtype], fmt: str) -> np.dtype | None:
    """The ``token_dtype`` option as one of the dtypes ``fmt`` can store (None if not given)."""
    dt = resolve_dtype(value)
    if dt is not None and dt not in allowed:
        raise LodUsageError(f"{fmt} stores tokens as {', '.join(str(a) for a in allowed)}; token_dtype={dt} is "
                            "none of them")
    return dt


# -- the view ---------------------------------------------------------------------------------------
class TokenTensor(TensorView):
    """A read-only LoD view of a flat token array, its offsets read as int64 windows of the format's index.

    ``levels[k](start, stop)`` returns entries ``start..stop`` of level ``k``'s
    offsets; ``sizes[k]`` is how many it has.  ``problems(max_problems)`` (the
    format's own structural checks, vectorised over its index) runs once
    before a whole-tensor read (or after a few branch reads); after it passes,
    every level is held in memory and branches walk it without per-window
    checks.
    """

    __slots__ = ("name", "path", "tokens", "_tokens", "_levels", "_sizes", "_level_names", "_problems", "_held",
                 "_window_reads")

    def __init__(self, path: str, tokens: np.ndarray, levels: Sequence[OffsetsWindow], sizes: Sequence[int],
                 level_names: Sequence[str] | None = None,
                 problems: Callable[[int], list[TokenProblem]] | None = None, name: str = "tokens"):
        self.name = name
        self.path = path
        #: the token metadata the dataset records (:class:`~lodtool.tokens.TokenInfo`, None: none), which every
        #: command that keeps the ids records with its output, as it does a container's
        self.tokens = None
        self._tokens = tokens
        self._levels = tuple(levels)
        self._sizes = [int(s) for s in sizes]
        self._level_names = tuple(level_names) if level_names else None
        self._problems = problems
        self._held: tuple | None = None
        self._window_reads = 0

    @property
    def lod_level(self) -> int:
        return len(self._levels)

    @property
    def level_names(self) -> tuple[str, ...] | None:
        return self._level_names

    @property
    def n_rows(self) -> int:
        return int(self._tokens.shape[0])

    @property
    def dtype(self) -> np.dtype:
        return self._tokens.dtype

    @property
    def element_shape(self) -> tuple[int, ...]:
        return ()

    @property
    def level_sizes(self) -> list[int]:
        return list(self._sizes)

    @property
    def nbytes(self) -> int:
        return int(self._tokens.nbytes)

    #: how ``inspect`` describes the storage: raw tokens, memory-mapped
    compression = "none"
    compression_level = None
    mappable = True

    @property
    def storage_size(self) -> int:
        return self.nbytes + 8 * sum(self._sizes)

    def __repr__(self) -> str:
        return f"<TokenTensor {self.path!r} rows={self.n_rows} dtype={self.dtype} level_sizes={self._sizes}>"

    def _window(self, level: int, start: int, stop: int) -> np.ndarray:
        return self._levels[level](start, stop)

    def _rows(self, begin: int, end: int) -> np.ndarray:
        return self._tokens[begin:end]

    def validate(self, max_problems: int = 20) -> list[TokenProblem]:
        """The format's structural findings (offsets, counts, sizes), up to ``max_problems`` per check.

        A format's ``problems`` covers every LoD rule its index can break;
        without one the LoD rules are checked over the offsets.
        """
        if self._problems is not None:
            return list(self._problems(max_problems))
        levels = [self._window(k, 0, self._sizes[k]) for k in range(self.lod_level)]
        return [TokenProblem(self.path, f"level {p.level}", p.index, p.message)
                for p in _lod.find_lod_problems(levels, self.n_rows, max_problems=max_problems)]

    def read_offsets(self, level: int, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Entries ``start..stop`` of a level's offsets; before the index is validated, a window that decreases
        is refused as the format's first finding (what ``tree`` draws is never a negative length)."""
        window = super().read_offsets(level, start, stop)
        if self._held is None and window.size > 1 and bool((window[1:] < window[:-1]).any()):
            with self._findings_named():
                raise LodValidationError(f"level {level}: offsets {start}:{stop} decrease")
        return window

    def branch(self, *path: int):
        with self._findings_named():
            return super().branch(*path)

    def slice_level(self, level: int, begin: int, end: int):
        with self._findings_named():
            return super().slice_level(level, begin, end)

    @contextlib.contextmanager
    def _findings_named(self) -> Iterator[None]:
        """A window read that breaks the LoD rules is reported as the format's own first finding (its file, array
        and index), which the whole index is searched for only then."""
        try:
            yield
        except LodValidationError as exc:
            problems = self.validate(max_problems=1)
            raise LodValidationError(str(problems[0]) if problems else f"{self.path}: {exc}") from None

    def _check_valid(self) -> None:
        if self._held is not None:
            return
        problems = self.validate(max_problems=1)
        if problems:
            raise LodValidationError(str(problems[0]))
        self._held = tuple(np.ascontiguousarray(self._window(k, 0, self._sizes[k])) for k in range(self.lod_level))

    def _checked_levels(self) -> tuple | None:
        """The levels, validated and held, once a whole read or :data:`~lodtool.tensor.RESIDENT_AFTER` branch
        reads have asked (a loop of reads then walks them; a one-shot read checks its own windows)."""
        if self._held is None:
            self._window_reads += 1
            if self._window_reads > RESIDENT_AFTER:
                self._check_valid()
        return self._held

    def read(self) -> LoDTensor:
        """The whole tensor in memory (a copy of the tokens), its LoD checked first."""
        self._check_valid()
        return LoDTensor._trusted(np.array(self._tokens), [np.array(o) for o in self._held], self._level_names)


class TokenFile(TensorSource):
    """An open dataset of a token format: tensors by name, as :class:`~lodtool.container.reader.LodFile` offers.

    ``names`` lists the tensors (``tokens``, and ``loss`` where datatrove
    wrote a loss mask); every one is a :class:`TokenTensor`.  Close it (or use
    it as a context manager) to drop the memory maps.  ``max_memory`` bounds
    what a reader of it holds at once (the operators' chunks), as a
    container's does.
    """

    def __init__(self, path: str, fmt: str, tensors: dict[str, TokenTensor], *, files: Sequence[str] = (),
                 info: dict | None = None, default_name: str | None = None, max_memory: int | None = None):
        self.path = path
        self.format = fmt
        self.max_memory = resolve_max_memory(max_memory)
        #: every file the dataset is made of
        self.files = list(files) or [path]
        #: what the index records beyond the LoD (dtype code, kind, tokenizer ...), for ``inspect``
        self.info = dict(info or {})
        self.default_name = default_name
        self._tensors = dict(tensors)
        self.names = list(self._tensors)
        self._open = True

    def __getitem__(self, name: str) -> TokenTensor:
        self._check_open()
        try:
            return self._tensors[name]
        except KeyError:
            raise LodFileNotFoundError(f"{self.path}: no tensor named {name!r} (tensors: "
                                       f"{', '.join(repr(n) for n in self.names)})") from None

    def tensor(self, name: str | None = None) -> TokenTensor:
        """Tensor ``name``; with None, ``tokens``."""
        return self[name if name is not None else (self.default_name or "tokens")]

    def validate(self, max_problems: int = 20) -> list[TokenProblem]:
        """Every tensor's structural findings (see :meth:`TokenTensor.validate`)."""
        self._check_open()
        return [p for n in self.names for p in self._tensors[n].validate(max_problems)]

    def _check_open(self) -> None:
        if not self._open:
            raise LodUsageError(f"{self.path}: this file is closed")

    def close(self) -> None:
        """Drop the memory maps (views read through this handle keep their own)."""
        self._tensors.clear()
        self._open = False

    def __repr__(self) -> str:
        return f"<TokenFile {self.format} {self.path!r} tensors={self.names}>"


# -- the registry's reader --------------------------------------------------------------------------
def read_chunks(opened: Iterable[TokenFile], *, lod_level: int | None, dtype: Any, chunk_bytes: int,
                progress: Callable[[int], None] | None, stats: dict | None) -> Iterator[LoDTensor]:
    """Chunks of whole top-level sequences of each dataset's ``tokens``, one dataset after another.

    Every dataset's LoD is validated before its first chunk; ``dtype`` casts
    the tokens (refusing values it cannot hold); ``stats["bytes_read"]`` counts
    the token bytes read.  The chunks' tokens are read-only views of the
    memory map (they keep it open), not copies.  Datasets of no document at
    all give one empty chunk, so their levels and dtype are still known.

    >>> f = TokenFile("x", "test", {"tokens": TokenTensor("x", np.arange(4, dtype=np.uint16),
    ...                                                   [lambda a, b: np.array([0, 1, 4])[a:b]], [3])})
    >>> [c.lod for c in read_chunks([f], lod_level=None, dtype="int32", chunk_bytes=2, progress=None, stats=None)]
    [[[0, 1]], [[0, 3]]]
    """
    stats = {} if stats is None else stats
    stats["bytes_read"] = 0
    target = resolve_dtype(dtype)
    first: TokenTensor | None = None
    yielded = False
    for f in opened:
        with f:
            t = f.tensor()
            if lod_level is not None and lod_level != t.lod_level:
                raise LodUsageError(f"{t.path}: {f.format} data has {t.lod_level} LoD level(s); lod_level={lod_level} "
                                    "cannot be applied")
            if first is not None and first.lod_level != t.lod_level:
                raise LodFormatError(f"{t.path}: {t.lod_level} LoD level(s), but {first.path} has {first.lod_level}")
            if first is None:
                first = t
            max_rows = max(1, chunk_bytes // max(t.dtype.itemsize, 1))
            for chunk in t.iter_chunks(max_rows=max_rows):
                stats["bytes_read"] += chunk.data.nbytes
                if progress is not None:
                    progress(stats["bytes_read"])
                data = cast_values(chunk.data, target, lambda row, p=t.path: f"{p}: token {row} of this chunk: ")
                yielded = True
                yield LoDTensor._trusted(data, chunk.offsets, chunk.level_names)
    if first is None:
        raise LodUsageError("no inputs given")
    if not yielded:  # every dataset has no document: one empty chunk still says the levels and the dtype
        empty = first.read()
        yield LoDTensor._trusted(cast_values(empty.data, target, lambda row: ""), empty.offsets, empty.level_names)


# -- token ids ---------------------------------------------------------------------------------------
def token_problems(tokens: np.ndarray, vocab_size: int, label: str, what: str = "tokens",
                   max_problems: int = 20) -> list[TokenProblem]:
    """Token ids outside ``0..vocab_size-1``, and a dtype that cannot hold every id of the vocabulary.

    >>> [str(p) for p in token_problems(np.array([1, 7, 2], np.uint8), 5, "c.bin")]
    ['c.bin: tokens[1]: token id 7 is not under the vocabulary size 5']
    """
    problems = []
    dtype = tokens.dtype
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)) or vocab_size < 1:
        raise LodUsageError(f"vocab_size must be a positive integer, got {vocab_size!r}")
    wrong_dtype = dtype_problem(dtype, vocab_size)
    if wrong_dtype:
        return [TokenProblem(label, what, None, wrong_dtype)]
    for start in range(0, tokens.shape[0], BLOCK * 16):
        block = tokens[start:start + BLOCK * 16]
        if not block.size:
            break
        for j in out_of_vocabulary(block, vocab_size)[:max_problems - len(problems)]:
            problems.append(TokenProblem(label, what, start + int(j), f"token id {int(block[j])} is not under the "
                                         f"vocabulary size {vocab_size:,}"))
        if len(problems) >= max_problems:
            break
    return problems


# -- the writers --------------------------------------------------------------------------------------
def writer_levels(chunk: LoDTensor, levels_out: int, level: int | None, fmt: str,
                  label: str) -> tuple[np.ndarray, np.ndarray | None]:
    """A chunk's LoD as ``fmt`` stores it: ``(token offsets of its sequences, document offsets over them)``.

    ``levels_out`` is 2 (Megatron: documents over sequences over tokens) or 1
    (one level of documents; the second result is then None).  ``level=k``
    makes level ``k``'s sequences the stored sequences, every level under it
    flattened into their tokens and (for 2) the levels between 0 and ``k``
    into the documents; without it the tensor needs ``levels_out`` levels
    (Megatron also takes 1: each sequence its own document).

    >>> t = LoDTensor(np.arange(6), recursive_sequence_lengths=[[2, 1], [1, 2, 3], [2, 0, 1, 1, 1, 1]])
    >>> [a.tolist() for a in writer_levels(t, 2, 1, "megatron", "x")]
    [[0, 2, 3, 6], [0, 2, 3]]
    >>> [a.tolist() for a in writer_levels(t, 2, 2, "megatron", "x")]
    [[0, 2, 2, 3, 4, 5, 6], [0, 3, 6]]
    """
    depth = chunk.lod_level
    if chunk.element_shape:
        raise LodUsageError(f"{label}: {fmt} stores one token per row, but the rows have shape "
                            f"{chunk.element_shape}")
    if depth == 0:
        raise LodUsageError(f"{label}: {fmt} needs sequences, but the tensor has no LoD level")
    if level is None:
        if depth == levels_out or (levels_out == 2 and depth == 1):
            level = depth - 1
        else:
            raise LodUsageError(f"{label}: the tensor has {depth} LoD levels, but {fmt} stores {levels_out}; "
                                f"choose the level whose sequences it keeps with level=... (0..{depth - 1}); the "
                                "levels under it are flattened into their tokens")
    if isinstance(level, bool) or not isinstance(level, (int, np.integer)) or not 0 <= level < depth:
        raise LodUsageError(f"{label}: level={level!r} is not a level of this tensor (0..{depth - 1})")
    offsets = chunk.offsets
    tokens = offsets[level]
    for o in offsets[level + 1:]:
        tokens = o[tokens]
    if levels_out == 1:
        return tokens, None
    if level == 0:
        return tokens, np.arange(tokens.size, dtype=np.int64)
    docs = offsets[0]
    for o in offsets[1:level]:
        docs = o[docs]
    return tokens, docs


@contextlib.contextmanager
def atomic_files(targets: Sequence[str]) -> Iterator[list[str]]:
    """Temp paths for several files that appear together: each is written in full and synced, then renamed over
    its target in turn, with SIGINT and SIGTERM held back until the last rename (a SIGKILL between two renames
    is the one way to leave a new file beside an old one); on an error every temp file is removed and no target
    is touched.

    >>> import os, tempfile
    >>> d = tempfile.mkdtemp()
    >>> with atomic_files([os.path.join(d, "a.bin"), os.path.join(d, "a.idx")]) as (a, b):
    ...     _ = open(a, "wb").write(b"1"), open(b, "wb").write(b"2")
    >>> sorted(os.listdir(d))
    ['a.bin', 'a.idx']
    """
    held: list[AtomicPath] = []
    try:
        for target in targets:
            held.append(AtomicPath(target))
        yield [a.tmp for a in held]
    except BaseException:
        for a in held:
            a.discard()
        raise
    with commit_section(targets[0]):  # SIGINT and SIGTERM wait for every rename: never a new file beside an old one
        for i, a in enumerate(held):
            try:
                a.commit()
            except BaseException:
                for rest in held[i + 1:]:
                    rest.discard()
                raise


def output_prefix(out: Any, fmt: str, suffixes: Sequence[str]) -> str:
    """The prefix of a multi-file output: a path, with any of the format's ``suffixes`` taken off.

    A stream cannot hold several files, so it is refused.

    >>> output_prefix("corpus.idx", "megatron", (".bin", ".idx")), output_prefix("c", "megatron", (".bin", ".idx"))
    ('corpus', 'c')
    """
    if not isinstance(out, (str, os.PathLike)) or os.fspath(out) == "-":
        raise LodUsageError(f"{fmt} is written as several files ({' + '.join('PREFIX' + s for s in suffixes)}); "
                            "give an output path prefix, not a stream")
    path = os.fspath(out)
    for s in sorted(suffixes, key=len, reverse=True):
        if path.endswith(s) and len(path) > len(s):
            return path[:-len(s)]
    return path


def check_window(start: int, stop: int, size: int, what: str) -> None:
    if not 0 <= start <= stop <= size:
        raise LodIndexError(f"{what}: offsets window {start}:{stop} is outside 0:{size}")


__all__ = ["TokenProblem", "TokenTensor", "TokenFile", "RangedTokens", "read_chunks", "writer_levels", "atomic_files",
           "output_prefix", "map_array", "little_endian", "file_size", "raise_first", "first_index", "token_problems",
           "BLOCK"]
