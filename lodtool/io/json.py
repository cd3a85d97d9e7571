"""Ragged JSON and JSON Lines in and out.

Reading
-------
``json``: one nested list.  The outer list is the batch and its items are the
top-level (level-0) sequences, as in :func:`lodtool.from_nested`.
``jsonl``: one top-level sequence per line.  Blank lines (only spaces, tabs or
``\\r``) are skipped, so a final newline or ``\\r\\n`` line ends read as expected.

Both are read ``chunk_bytes`` at a time and come out as chunks of whole
top-level sequences, so memory stays bounded by the chunk size plus the values
of the longest one.  The fast path first squeezes a line's (or top-level
sequence's) runs of 4 KiB of blanks or more to one space; one still longer than
the buffer is scanned as far as it is read and its text dropped (a number longer
than the buffer is read through, keeping what decides its value), and error
columns still count what was dropped.  The general path (``fast=False``, small
inputs) holds a line whole.

Structure.  With ``lod_level=None`` every list level is a LoD level and the
scalars are the elements.  With ``lod_level=N`` the lists nested deeper than N
levels form the element shape, which must be the same for every element.  All
scalars must sit at one depth.  Lists nested deeper than 256 levels are refused.

Values (the policies):

- ``dtype=None`` infers: all integers give int64, any float gives float64, all
  ``true``/``false`` give bool.  Booleans mixed with numbers are an error, and so
  are strings, ``null`` and objects.
- Integers must fit in int64; with ``dtype=uint64`` they may use 0..2**64-1,
  and with a float or complex dtype any integer is read (correctly rounded).
- ``NaN``, ``Infinity`` and ``-Infinity`` (Python's spelling) are read as floats,
  and :func:`write_json` writes non-finite floats the same way, so unpacked
  output packs again.  A number too large for float64 (``1e400``) is refused
  where it stands: an infinite value is written ``Infinity``.
- Floats are read as float64, exactly as Python's ``float()`` reads them.  An
  explicit ``dtype`` must hold every value: integers must be in range, floats
  stored as integers must be whole, float narrowing rounds but must not
  overflow, and only 0 and 1 become booleans.

A fast path (a Numba byte scanner, :mod:`._jsonscan`) reads nested lists of
numbers; everything else, and every error, goes through the general path
(orjson, or the standard library for what orjson refuses, then
:func:`~lodtool.from_nested`).  Both give the same tensors.  JSON Lines are
scanned in blocks of about 4 MB on up to :data:`SCAN_THREADS` threads (the
scanner releases the GIL); a JSON document is scanned by one thread.  Errors are
:class:`~lodtool.errors.LodInputError` with one line naming the place:
``docs.jsonl:3:17: expected ',' or ']'`` for syntax, ``docs.jsonl:3: ... at
branch <2,1>`` for structure and values.

Writing
-------
:func:`write_json` streams chunks out: ``jsonl`` one top-level sequence per
line, ``json`` one nested list on one line.  Floats use the shortest text that
reads back to the same value (float16/float32: the same value in their type).

>>> t = parse_json(b"[[[1, 2], [3]], [[4]]]")
>>> t.lod, t.data.tolist()
([[0, 2, 3], [0, 2, 3, 4]], [1, 2, 3, 4])
>>> import io
>>> out = io.BytesIO()
>>> write_json(t, out, "jsonl")
>>> out.getvalue()
b'[[1,2],[3]]\\n[[4]]\\n'
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import shutil
import stat
import sys
import tempfile
import threading
from typing import TYPE_CHECKING, Any, BinaryIO, Callable, Iterable, Iterator, Sequence

import numpy as np

from .. import lod as _lod
from .._jit import kernels_pay, thread_limit
from ..errors import LodDtypeError, LodError, LodInputError, LodUsageError
from ..tensor import LoDTensor, from_nested
from ..limits import STREAM_CHUNK_BYTES
from . import format_of_path, is_stdin, open_path, seekable
from ._values import cast_values, concat_chunks, resolve_dtype

if TYPE_CHECKING:  # made on first use: the import costs every start-up 2 ms
    from concurrent.futures import ThreadPoolExecutor

#: the formats this module reads and writes
FORMATS = ("json", "jsonl")
#: bytes the fast path scans at a time (its outputs then stay in reused, cache-warm memory)
SCAN_BLOCK = 4 << 20
#: threads scanning JSON Lines blocks in parallel (None: min(8, lodtool._jit.thread_limit())); 1 scans in the
#: calling thread
SCAN_THREADS: int | None = None
#: input bytes from which ``fast=None`` takes the Numba scanner rather than the general (orjson) path: where
#: the scanner's speed pays for its first call (numba's import and the kernels' load), with a margin towards
#: the scanner.  Inputs of unknown size (stdin, streams) take the scanner.
FAST_FROM_BYTES = 2 << 20
#: values of integer or bool data from which JSON output goes through the compiled formatter (cold, warm: numba
#: not yet loaded, or loaded), as FAST_FROM_BYTES: where its speed pays for its first call.
FORMAT_FROM_VALUES = (1 << 20, 1 << 16)
#: LoD levels plus element dimensions at most (the scanner has the same limit)
MAX_LEVELS = 256

_I64_MIN, _I64_MAX, _U64_MAX = -(1 << 63), (1 << 63) - 1, (1 << 64) - 1
_CLS_NONE, _CLS_NUMBER, _CLS_BOOL = 0, 1, 2
_TARGET_DEFAULT, _TARGET_UINT64, _TARGET_FLOAT = 0, 1, 2
_WS = b" \t\r"
_LONG_DIGITS = re.compile(rb"\d{19}")
#: an integer longer than Python's int() reads from text (sys.get_int_max_str_digits(): 4300)
_HUGE_INT = re.compile(rb"(?<![\d.eE+-])-?\d{4301,}")
#: integer tokens long enough (16+ digits) that float64 may not hold them exactly (2**53 has 16)
_LONG_INT = re.compile(rb"(?<![\w.+-])-?\d{16,}(?![\d.eE])")


def _inexact_integer(text) -> tuple[int, str] | None:
    """The first integer token of ``text`` (bytes) that float64 cannot hold exactly: (byte offset, token).

    >>> _inexact_integer(b"[[9007199254740992, 0.5], [9007199254740993]]")
    (27, '9007199254740993')
    >>> _inexact_integer(b"[1.0, 12345678901234567.5, 2]") is None
    True
    """
    if not _has_digit_run(text, 16):  # the regex below costs 20x a scan of the text: most texts skip it
        return None
    for m in _LONG_INT.finditer(text):
        token = m.group().decode()
        if len(token.lstrip("-")) > 400:  # far beyond float64's range: never exact
            return m.start(), token
        value = int(token)
        try:
            if int(float(value)) != value:
                return m.start(), token
        except OverflowError:
            return m.start(), token
    return None


def _has_digit_run(text: bytes, length: int, block: int = 1 << 20) -> bool:
    """Whether ``text`` holds ``length`` digits in a row (blocks of ``block`` bytes: bounded temporaries).

    >>> _has_digit_run(b"[1.25, 123456]", 6), _has_digit_run(b"[1.25, 123456]", 7)
    (True, False)
    """
    a = np.frombuffer(text, dtype=np.uint8)
    for start in range(0, a.size, block):
        part = a[max(start - length + 1, 0):start + block]  # a run across the boundary is seen whole
        digit = np.zeros(part.size + 2, dtype=bool)
        digit[1:-1] = (part - np.uint8(48)) < 10
        edges = np.flatnonzero(digit[1:] != digit[:-1])  # where each run of digits starts and ends
        if (edges[1::2] - edges[::2] >= length).any():
            return True
    return False


def _refuse_inexact(data: np.ndarray, target: int, text, position, found: tuple[str, str] | None = None) -> None:
    """Refuse integers that a float64 result (inferred, integers mixed with floats) would round.

    ``position(offset)`` words the place of a byte offset of ``text``; ``found``, (place, token), is one found
    before in text no longer at hand (it comes first).
    """
    if target != _TARGET_DEFAULT or data.dtype != np.float64:
        return
    if found is None:
        hit = _inexact_integer(bytes(text))
        found = None if hit is None else (position(hit[0]), hit[1])
    if found is not None:
        place, token = found
        short = token if len(token) <= 40 else token[:37] + "..."
        raise LodInputError(f"{place}: integer {short} mixed with floats would be stored as float64, "
                            "which cannot hold it exactly; pass dtype=... to choose, e.g. float64 to "
                            "accept the rounding")


_BOOL_TOKEN = re.compile(rb"\b(?:true|false)\b")
_NUMBER_TOKEN = re.compile(rb"(?<![\w.])(?:-?\d|NaN\b|-?Infinity\b)")
_NOT_A_NUMBER = re.compile(rb'["{]|\bnull\b')
_BRANCH = re.compile(r"<(\d+)((?:,\s*-?\d+)*)>")


# -- inputs -----------------------------------------------------------------------------------------
class _Input:
    """A path, ``-`` (stdin), bytes or a binary stream, read in pieces."""

    def __init__(self, source: Any, name: str | None = None):
        self.path: str | None = None
        self.own = False
        if isinstance(source, (str, os.PathLike)):
            path = os.fspath(source)
            if path == "-":
                self.stream: Any = sys.stdin.buffer
                self.name = name or "<stdin>"
            else:
                self.stream = open_path(path, 0)
                self.path, self.name, self.own = path, name or path, True
        elif isinstance(source, (bytes, bytearray, memoryview)):
            self.stream = io.BytesIO(source)
            self.name = name or "<bytes>"
        else:
            stream = getattr(source, "buffer", source)  # a text stream's binary side
            if not hasattr(stream, "read"):
                raise LodUsageError(f"cannot read from {type(source).__name__}; give a path, bytes or a binary stream")
            self.stream = stream
            label = getattr(source, "name", None)
            self.name = name or (label if isinstance(label, str) else "<stream>")
        self.start = self.stream.tell() if seekable(self.stream) else 0
        self.bytes_read = 0

    def readinto(self, view: memoryview) -> int:
        """Fill ``view`` as far as the input goes; returns the bytes read (0 at the end)."""
        total = 0
        while total < len(view):
            if hasattr(self.stream, "readinto"):
                n = self.stream.readinto(view[total:])
            else:
                data = self.stream.read(len(view) - total)
                n = len(data)
                view[total:total + n] = data
            if not n:
                break
            total += n
        self.bytes_read += total
        return total

    def make_rereadable(self) -> None:
        """Spool a one-way stream (a pipe, a named pipe's path) to an anonymous temp file, so it can be read again
        from the start."""
        if seekable(self.stream):
            return
        spool = tempfile.TemporaryFile(prefix="lodtool-")
        shutil.copyfileobj(self.stream, spool, 1 << 22)
        spool.seek(0)
        self.close()
        self.stream, self.own, self.start = spool, True, 0

    def read_all(self) -> bytes:
        """The whole input, from its start (for the general path of a JSON document)."""
        self.stream.seek(self.start)
        data = self.stream.read()
        self.bytes_read = len(data)  # the whole input, however much the fast path had read before
        return data

    def close(self) -> None:
        if self.own:
            self.stream.close()


# -- pieces and their assembly into chunks ----------------------------------------------------------
class _Piece:
    """Parsed top-level sequences before the LoD is cut: values, and list lengths per list depth."""

    __slots__ = ("data", "levels", "leaf", "items", "lines", "seq_base", "list_depth")

    def __init__(self, data: np.ndarray, levels: list[np.ndarray], leaf: int, items: int,
                 lines: np.ndarray | None, seq_base: int):
        self.data = data          # flat scalars in their natural dtype
        self.levels = levels      # lengths of the lists at depth 1, 2, ...
        self.leaf = leaf          # depth of the scalars (0: this piece has none)
        self.items = items        # top-level sequences
        self.lines = lines        # line of each top-level sequence (None: unknown)
        self.seq_base = seq_base  # global index of the first top-level sequence
        self.list_depth = len(levels)


class _Assembler:
    """Holds the structure decided so far and turns pieces into validated chunks.

    A piece whose LoD would be invalid on its own (a level with no sequence,
    e.g. a chunk of empty documents) is merged with its neighbour, so where the
    input is cut never changes the result.
    """

    def __init__(self, name: str, lod_level: int | None, dtype: np.dtype | None,
                 level_names: tuple[str, ...] | None = None):
        if lod_level is not None and lod_level < 0:
            raise LodUsageError(f"lod_level must be >= 0, got {lod_level}")
        self.name = name
        self.lod_level = lod_level
        self.dtype = dtype
        self.level_names = level_names
        self.target = (_TARGET_DEFAULT if dtype is None else _TARGET_UINT64 if dtype == np.uint64
                       else _TARGET_FLOAT if dtype.kind in "fc" else _TARGET_DEFAULT)
        self.leaf = 0
        self.maxlist = 0
        self.cls = _CLS_NONE
        self.elem_shape: tuple[int, ...] | None = None
        self.pending: _Piece | None = None
        self.final_input = True  # whether the input being read is the last one

    # the structure ------------------------------------------------------------------------------
    def take(self, piece: _Piece, last: bool = False) -> Iterator[LoDTensor]:
        """Accept a piece; yields the chunks that are complete.

        Everything up to the piece's last top-level sequence that reaches the
        deepest LoD level is emitted at once; the rest waits for the next piece
        (or the end), so that no emitted chunk has an empty level.  The last
        piece of the last input (``last`` and :attr:`final_input`) waits whole.
        """
        if piece.leaf:  # the same as before: both paths check it
            self.leaf = piece.leaf
        self.maxlist = max(self.maxlist, piece.list_depth)
        if piece.data.size:
            self.cls = _CLS_BOOL if piece.data.dtype == np.bool_ else _CLS_NUMBER
        if self.pending is not None:
            if self.leaf and not self._degenerate(self.pending) and not self._degenerate(piece):
                yield self._finish(self.pending)
            else:
                piece = _join([self.pending, piece], self.dtype)
            self.pending = None
        if not self.leaf:
            self.pending = piece
            return
        if last and self.final_input:
            self.pending = piece
            return
        covering = self._covering(piece)
        if covering.size >= 2:
            head, self.pending = _split(piece, int(covering[-1]))
            yield self._finish(head)
        else:
            self.pending = piece

    def close(self) -> Iterator[LoDTensor]:
        """Yield what is still held (call once, after the last piece of the last input)."""
        if self.pending is None:
            return
        if not self.leaf:  # no scalar anywhere: every list level counts (from_nested's rule)
            self.leaf = self.maxlist + 1
        out, self.pending = self.pending, None
        yield self._finish(out)

    def _covering(self, piece: _Piece) -> np.ndarray:
        """Indices of the top-level sequences that reach the deepest level a chunk must not leave empty."""
        n_deep, n_lod, levels = self._split(piece)
        need = n_lod if (n_lod >= n_deep or self.elem_shape is not None) else n_lod + 1
        need = min(need, n_deep)
        if need <= 1:
            return np.arange(piece.items)
        bounds = np.arange(piece.items + 1, dtype=np.int64)
        for k in range(need - 1):  # entries of level k+1 under each top-level sequence
            bounds = _lod.lengths_to_offsets(levels[k])[bounds]
        return np.flatnonzero(bounds[1:] > bounds[:-1])

    def _split(self, piece: _Piece) -> tuple[int, int, list[np.ndarray]]:
        n_deep = self.leaf - 1
        n_lod = n_deep if self.lod_level is None else self.lod_level
        levels = piece.levels + [np.zeros(0, np.int64)] * (n_deep - len(piece.levels))
        return n_deep, n_lod, levels

    def _degenerate(self, piece: _Piece) -> bool:
        if not self.leaf:
            return True
        n_deep, n_lod, levels = self._split(piece)
        if n_lod > n_deep:
            return False  # _finish explains
        if any(len(levels[k]) == 0 for k in range(n_lod)):
            return True
        rows = piece.items if n_lod == 0 else int(levels[n_lod - 1].sum())
        return n_lod < n_deep and rows == 0 and self.elem_shape is None

    def _finish(self, piece: _Piece) -> LoDTensor:
        n_deep, n_lod, levels = self._split(piece)
        if n_lod > n_deep:
            raise LodInputError(f"{self.name}: lod_level={n_lod}, but the lists nest only {n_deep} level(s) deep")
        lod_lengths = levels[:n_lod]
        rows = piece.items if n_lod == 0 else int(lod_lengths[-1].sum())
        dims: list[int] = []
        count = rows
        for k, lengths in enumerate(levels[n_lod:]):
            if count == 0:
                dims.append(self.elem_shape[k] if self.elem_shape is not None else 0)
                continue
            d = int(lengths[0])
            bad = np.flatnonzero(lengths != d)
            if bad.size:
                j = int(bad[0])
                where, path = _locate(piece, levels, n_lod + k, j, self.name)
                raise LodInputError(f"{where}: ragged elements: the list at branch {path} has {int(lengths[j])} "
                                    f"items, but {d} elsewhere (below lod_level={n_lod}, every element needs "
                                    "one shape)")
            dims.append(d)
            count *= d
        shape = tuple(dims)
        if rows:
            if self.elem_shape is None:
                self.elem_shape = shape
            elif shape != self.elem_shape:
                where, path = _locate(piece, levels, n_lod, 0, self.name)
                raise LodInputError(f"{where}: element shape {shape} at branch {path}, but {self.elem_shape} "
                                    "before (every element needs one shape)")
        data = piece.data.reshape((rows,) + shape)
        if self.dtype is not None:
            data = cast_values(data, self.dtype, lambda row: "{}: at branch {}: ".format(
                *_locate(piece, levels, n_lod, row, self.name)))
        offsets = [_lod.lengths_to_offsets(lengths) for lengths in lod_lengths]
        return LoDTensor(data, lod=offsets, level_names=self.level_names)


def _split(piece: _Piece, s: int) -> tuple[_Piece, _Piece]:
    """The top-level sequences ``[:s]`` and ``[s:]`` of a piece."""
    head, tail = [], []
    cut = s
    for lengths in piece.levels:
        head.append(lengths[:cut])
        tail.append(lengths[cut:])
        cut = int(lengths[:cut].sum())
    lines = piece.lines
    return (_Piece(piece.data[:cut], head, piece.leaf, s, None if lines is None else lines[:s], piece.seq_base),
            _Piece(piece.data[cut:], tail, piece.leaf, piece.items - s, None if lines is None else lines[s:],
                   piece.seq_base + s))


def _locate(piece: _Piece, levels: list[np.ndarray], depth_index: int, j: int, name: str) -> tuple[str, str]:
    """(``file:line`` or ``file``, ``<i,...>``) of entry ``j`` among the lists (or rows) at ``depth_index``."""
    path = []
    idx = j
    for level in range(depth_index - 1, -1, -1):
        offsets = _lod.lengths_to_offsets(levels[level])
        parent = int(np.searchsorted(offsets, idx, side="right")) - 1
        parent = min(max(parent, 0), len(levels[level]) - 1)
        path.append(idx - int(offsets[parent]))
        idx = parent
    path.append(piece.seq_base + idx)
    where = name
    if piece.lines is not None and 0 <= idx < len(piece.lines):
        where = f"{name}:{int(piece.lines[idx])}"
    return where, _lod.format_path(list(reversed(path)))


# -- the general path -------------------------------------------------------------------------------
def _load_json(text: bytes, name: str, line: int | None) -> tuple[Any, list[tuple[int, str]]]:
    """Parse one JSON text (one JSON Lines line when ``line`` is given).

    Returns the object and the integers outside int64 (byte offset, text).
    orjson reads it when it can; the standard library reads what orjson refuses
    (NaN, Infinity, overflowing floats, integers beyond 64 bits) and words the
    syntax errors.
    """
    import orjson

    limit = MAX_LEVELS if line is not None else MAX_LEVELS + 1  # a JSON document's outer list is the batch
    if text.count(b"[") > limit and _deep_offset(text, limit) >= 0:
        raise _too_deep(text, name, line)  # before any recursive parser sees it
    if len(text) >= _LOCATE_MIN:
        located = _located_syntax_error(text, name, line)
        if located is not None:
            raise located
    bigs: list[tuple[int, str]] = []
    if not _LONG_DIGITS.search(text):
        try:
            return orjson.loads(text), bigs
        except orjson.JSONDecodeError:
            pass
    try:
        s = text.decode("utf-8")
    except UnicodeDecodeError as exc:
        lno, col = _line_col(text, exc.start, line)
        raise LodInputError(f"{name}:{lno}:{col}: invalid UTF-8 (byte 0x{text[exc.start]:02x})") from None
    found: list[str] = []
    overflowing: list[str] = []

    def parse_int(token: str) -> int:
        value = int(token)
        if not _I64_MIN <= value <= _I64_MAX:
            found.append(token)
        return value

    def parse_float(token: str) -> float:
        value = float(token)
        if math.isinf(value):
            overflowing.append(token)
        return value

    try:
        obj = json.loads(s, parse_int=parse_int, parse_float=parse_float)
    except json.JSONDecodeError as exc:
        lno = exc.lineno if line is None else line + exc.lineno - 1
        col = exc.colno + (text.dropped_before(len(s[:exc.pos].encode())) if isinstance(text, _Squeezed) else 0)
        raise LodInputError(f"{name}:{lno}:{col}: {_phrase(exc, s, line is not None)}") from None
    except RecursionError:
        raise _too_deep(text, name, line) from None
    except ValueError:  # an integer too long for Python's int(): its place, and what a user can do
        m = _HUGE_INT.search(text)
        offset = m.start() if m else 0
        lno, col = _line_col(text, offset, line)
        digits = len(m.group().lstrip(b"-")) if m else 0
        raise LodInputError(f"{name}:{lno}:{col}: {_huge_integer(digits)}") from None
    if overflowing:
        token = overflowing[0]
        lno, col = _line_col(text, _token_offset(text, token, 0), line)
        raise LodInputError(f"{name}:{lno}:{col}: {_beyond_float64(token)}")
    if found:
        start = 0
        for token in found:
            offset = _token_offset(text, token, start)
            bigs.append((offset, token))
            start = offset + len(token)
    return obj, bigs


def _huge_integer(digits: int) -> str:
    return (f"an integer of {digits:,} digits; no dtype holds it (int64 and uint64 end at 20 digits, float64 at "
            "309): shorten it, or write it as a float literal below 1.8e308 (or Infinity)")


def _beyond_float64(token: str) -> str:
    short = token if len(token) <= 40 else token[:37] + "..."
    return f"{short} is beyond float64's range (about 1.8e308); write Infinity (or -Infinity) if an infinite value is meant"


def _beyond_int64(token: str) -> str:
    if 0 <= int(token) <= _U64_MAX:
        return (f"integer {token} does not fit in int64; read it as uint64 (0..2**64-1; dtype=uint64) or as a "
                "float (dtype=float64)")
    return (f"integer {token} does not fit in int64 or uint64; read it as a float (dtype=float64, which keeps "
            "about 16 significant digits)")


def _token_offset(text: bytes, token: str, start: int) -> int:
    """Byte offset of the number ``token`` (the whole token, not part of a longer one) from ``start``, else start.

    >>> _token_offset(b"[11, 1, 1e400]", "1", 0), _token_offset(b"[11, 1, 1e400]", "1e400", 0)
    (5, 8)
    """
    m = re.search(rb"(?<![\d.eE+-])" + re.escape(token.encode()) + rb"(?![\d.eE])", text[start:])
    return start + m.start() if m else start


#: texts at least this long are checked for syntax errors in O(1) memory before any parser builds objects
_LOCATE_MIN = 1 << 20
#: bytes of text after the problem that the standard library reads to word it (grown if it needs more)
_WINDOW = 1 << 16
_WINDOW_MAX = 1 << 26


def _located_syntax_error(text: bytes, name: str, line: int | None) -> LodInputError | None:
    """The syntax error of a long text, worded like the general path's, without parsing the whole text.

    Parsers build a Python object per number (about 20 times the text in
    memory: a 1 GiB line would need 20 GiB to be told it is truncated).  A
    Numba pass finds the first token that breaks the grammar; the standard
    library then reads only a stand-in for everything before it (the open
    lists and the last token's kind) plus a window of text from there, so its
    message and position match a full parse.  ``None`` when there is no
    syntax error, or the problem is valid JSON the fast grammar does not take
    (a string, say): the general path decides then.
    """
    js = _scanner()
    buf = np.frombuffer(text, dtype=np.uint8)
    pos, depth, prev = (int(v) for v in js.first_syntax_problem(buf))
    if pos < 0:
        return None
    # "[]" stands for the value before the problem: a number there could run on into the window ("0" ".5")
    lead = "[" * depth + {js.PREV_START: "", js.PREV_OPEN: "", js.PREV_COMMA: "0,", js.PREV_VALUE: "[]"}[prev]
    found = _window_syntax_error(text, pos, len(text), lead, line is not None)
    if found is None:
        return None
    offset, phrase = found
    lno, col = _line_col(text, offset, line)
    return LodInputError(f"{name}:{lno}:{col}: {phrase}")


def _window_syntax_error(text, pos: int, end: int, lead: str, jsonl: bool,
                         more: bool = False) -> tuple[int, str] | None:
    """The standard library's syntax error in ``text[pos:end]`` read after ``lead`` (a stand-in for the text before
    ``pos``; ``more``: the text goes on after ``end``): ``(offset in text, phrase)``, or None where the window
    parses or breaks only where it is cut (then the problem is JSON the fast grammar does not take: a string)."""
    size = _WINDOW
    while True:
        stop = min(end, pos + size)
        chunk = bytes(text[pos:stop])
        try:
            window = chunk.decode("utf-8")
        except UnicodeDecodeError as exc:
            if exc.start < len(chunk) - 3 or stop == end:
                return None  # invalid UTF-8 near the problem: the general path words it
            window = chunk[:exc.start].decode("utf-8")
        s = lead + window
        try:
            json.loads(s)
        except json.JSONDecodeError as exc:
            cut = stop < end or more
            if stop < end and exc.pos >= len(s.rstrip()) and size < _WINDOW_MAX:
                size *= 4  # the problem may run past the window (a long string): read more
                continue
            if cut and exc.pos >= len(s.rstrip()):
                return None
            return pos + len(s[len(lead):exc.pos].encode("utf-8")), _phrase(exc, s, jsonl)
        except (RecursionError, ValueError):
            return None
        return None  # the window parses: the problem is JSON the fast grammar does not take


def _line_col(text: bytes, offset: int, line: int | None) -> tuple[int, int]:
    """1-based line (``line``: the text's first) and column of a byte offset; columns count UTF-8 lead bytes (no
    decoding: a long text needs no copy) and the blanks a :class:`_Squeezed` line dropped."""
    a = np.frombuffer(text, dtype=np.uint8)
    start = text.rfind(b"\n", 0, offset) + 1  # as json.JSONDecodeError counts them
    col = 1
    for block in range(start, offset, 1 << 24):  # in blocks: no temporary the size of the text
        col += int(np.count_nonzero((a[block:min(block + (1 << 24), offset)] & 0xC0) != 0x80))
    if isinstance(text, _Squeezed):
        col += text.dropped_before(offset)
    return (1 if line is None else line) + text.count(b"\n", 0, offset), col


def _phrase(exc: json.JSONDecodeError, s: str, jsonl: bool) -> str:
    at_end = exc.pos >= len(s.rstrip())
    msg = exc.msg
    if at_end and msg.startswith("Expecting"):
        return "unexpected end of input (is it truncated?)" if not jsonl else \
            "unexpected end of line (is it truncated, or does a sequence span lines?)"
    if msg == "Expecting ',' delimiter":
        return "expected ',' or ']'"
    if msg == "Expecting value":
        ch = s[exc.pos] if exc.pos < len(s) else ""
        if ch == "]":
            return "expected a value (a trailing comma?)"
        return f"expected a number, true, false or '[' (found {ch!r})"
    if msg == "Extra data":
        return ("unexpected data after the sequence (JSON Lines takes one sequence per line)" if jsonl
                else "unexpected data after the document")
    if msg.startswith("Unexpected UTF-8 BOM"):
        return "the input starts with a UTF-8 byte order mark; save it without one"
    return msg[:1].lower() + msg[1:]


class _Squeezed(bytes):
    """A JSON Lines line whose long runs of blanks were squeezed (:meth:`_Buffer.squeeze`): columns count them."""

    def __new__(cls, text: bytes, gap_at: np.ndarray, gap_len: np.ndarray):
        out = super().__new__(cls, text)
        out.gap_at, out.gap_len = gap_at, gap_len
        return out

    def dropped_before(self, offset: int) -> int:
        """Blanks dropped before byte ``offset`` of the line."""
        return int(self.gap_len[self.gap_at <= offset].sum())


def _deep_offset(text: bytes, limit: int) -> int:
    """Byte offset of the first '[' that opens more than ``limit`` lists, or -1."""
    a = np.frombuffer(text, dtype=np.uint8)
    base = 0
    for start in range(0, len(a), 1 << 24):
        block = a[start:start + (1 << 24)]
        depth = np.cumsum((block == 91).astype(np.int64) - (block == 93), dtype=np.int64) + base
        hit = np.flatnonzero(depth > limit)
        if hit.size:
            return start + int(hit[0])
        base = int(depth[-1]) if depth.size else base
    return -1


def _too_deep(text: bytes, name: str, line: int | None) -> LodInputError:
    """The error for lists nested more than MAX_LEVELS deep, at the bracket that goes too deep."""
    limit = MAX_LEVELS if line is not None else MAX_LEVELS + 1  # a JSON document's outer list is the batch
    lno, col = _line_col(text, max(_deep_offset(text, limit), 0), line)
    return LodInputError(f"{name}:{lno}:{col}: lists nest deeper than {MAX_LEVELS} levels")


def _general_piece(objs: list, lines: np.ndarray | None, texts: list[bytes], bigs: list[tuple[int, int, str]],
                   seq_base: int, asm: _Assembler, text_line: Callable[[int, int], tuple[int, int]]) -> _Piece:
    """A piece from parsed objects, with every check of the fast path, positioned.

    ``texts[i]`` is the text of item ``i`` (JSON Lines) or the whole document;
    ``bigs`` holds (text index, byte offset, token) of integers beyond int64;
    ``text_line(i, offset)`` gives (line, column) of a byte offset in ``texts[i]``.
    """
    name = asm.name

    def at(i: int, offset: int) -> str:
        lno, col = text_line(i, offset)
        return f"{name}:{lno}:{col}"

    hint = None
    if bigs:
        i, offset, token = bigs[0]
        if asm.target == _TARGET_DEFAULT:
            raise LodInputError(f"{at(i, offset)}: {_beyond_int64(token)}")
        if asm.target == _TARGET_UINT64:
            for i, offset, token in bigs:
                if not 0 <= int(token) <= _U64_MAX:
                    raise LodInputError(f"{at(i, offset)}: integer {token} does not fit in uint64")
            hint = np.uint64
        else:
            hint = np.float64
    try:
        t = from_nested(objs, dtype=hint)
    except LodError as exc:
        place = None
        if isinstance(exc, LodDtypeError):  # a string, null or object: point at the first one
            for i, text in enumerate(texts):
                m = _NOT_A_NUMBER.search(text)
                if m:
                    place = at(i, m.start())
                    break
        raise _reposition(exc, lines, seq_base, name, place) from None
    data = np.asarray(t.data)
    for i, text in enumerate(texts):
        _refuse_inexact(data, asm.target, text, lambda offset, i=i: at(i, offset))
    levels = [np.diff(o) for o in t.offsets]
    has_values = data.size > 0
    piece = _Piece(data, levels, t.lod_level + 1 if has_values else 0, len(objs), lines, seq_base)
    if has_values:
        # booleans and numbers never mix: the kind seen first is expected, the first of the other is wrong
        first_bool, first_num = _first_match(_BOOL_TOKEN, texts), _first_match(_NUMBER_TOKEN, texts)
        expected = asm.cls
        if not expected and first_bool is not None and first_num is not None:
            expected = _CLS_BOOL if first_bool < first_num else _CLS_NUMBER
        wrong = first_num if expected == _CLS_BOOL else first_bool if expected == _CLS_NUMBER else None
        if wrong is not None:
            i, offset = wrong
            token = texts[i][offset:offset + 5].rstrip(b"]}, \t\r\n").decode(errors="replace")
            what = "a number among booleans" if expected == _CLS_BOOL else f"{token} among numbers"
            raise LodInputError(f"{at(i, offset)}: {what} (booleans and numbers cannot be mixed)")
    if asm.leaf:
        if has_values and piece.leaf != asm.leaf:
            where, path = _locate(piece, levels, len(levels), 0, name)
            raise LodInputError(f"{where}: the values at branch {path} sit {piece.leaf - 1} list(s) deep, but "
                                f"{asm.leaf - 1} before")
        if len(levels) >= asm.leaf:
            where, path = _locate(piece, levels, asm.leaf - 1, 0, name)
            raise LodInputError(f"{where}: the list at branch {path} nests deeper than the values before "
                                f"({asm.leaf - 1} list(s) deep)")
    elif has_values and asm.maxlist >= piece.leaf:
        where, path = _locate(piece, levels, len(levels), 0, name)
        raise LodInputError(f"{where}: the values at branch {path} sit {piece.leaf - 1} list(s) deep, but lists "
                            f"nest {asm.maxlist} deep before")
    return piece


def _first_match(pattern: re.Pattern, texts: list[bytes]) -> tuple[int, int] | None:
    for i, text in enumerate(texts):
        m = pattern.search(text)
        if m:
            return i, m.start()
    return None


def _reposition(exc: LodError, lines: np.ndarray | None, seq_base: int, name: str,
                place: str | None = None) -> LodError:
    """A from_nested error with the file, the line (or ``place``) and the global branch path."""
    msg = str(exc)
    m = _BRANCH.search(msg)
    where = place or name
    if m:
        i = int(m.group(1))
        if place is None and lines is not None and 0 <= i < len(lines):
            where = f"{name}:{int(lines[i])}"
        msg = msg[:m.start()] + f"<{seq_base + i}{m.group(2)}>" + msg[m.end():]
    return LodInputError(f"{where}: {msg}")


def _general_jsonl(region: bytes, first_line: int, seq_base: int, asm: _Assembler,
                   gaps: tuple[np.ndarray, np.ndarray] | None = None) -> _Piece | None:
    """A piece from the JSON Lines of ``region``; ``gaps`` are :meth:`_Buffer.gaps` of it, for the columns."""
    objs, lines, texts, bigs = [], [], [], []
    line_start = 0
    for k, raw in enumerate(region.split(b"\n")):
        start, line_start = line_start, line_start + len(raw) + 1
        if not raw.strip(_WS):
            continue
        if gaps is not None and gaps[0].size:
            inside = (gaps[0] > start) & (gaps[0] <= start + len(raw))
            if inside.any():
                raw = _Squeezed(raw, gaps[0][inside] - start, gaps[1][inside])
        line = first_line + k
        obj, found = _load_json(raw, asm.name, line)
        for offset, token in found:
            bigs.append((len(texts), offset, token))
        objs.append(obj)
        lines.append(line)
        texts.append(raw)
    if not objs:
        return None
    line_arr = np.array(lines, dtype=np.int64)
    return _general_piece(objs, line_arr, texts, bigs, seq_base, asm,
                          lambda i, offset: _line_col(texts[i], offset, int(line_arr[i])))


def _general_document(text: bytes, skip: int, asm: _Assembler) -> _Piece | None:
    if not text.strip(_WS + b"\n"):
        return None  # no document at all: an empty input
    obj, found = _load_json(text, asm.name, None)
    if not isinstance(obj, list):
        raise LodInputError(f"{asm.name}: the document is {json_kind(obj)}; it must be a list of sequences "
                            "(the batch)")
    items = obj[skip:]
    if not items:
        return None
    bigs = [(0, offset, token) for offset, token in found]
    lines = _item_lines(text, len(obj))
    return _general_piece(items, None if lines is None else lines[skip:], [text], bigs, skip, asm,
                          lambda i, offset: _line_col(text, offset, None))


def _item_lines(text: bytes, items: int) -> np.ndarray | None:
    """The line each top-level item of a JSON document starts on (None when brackets sit in strings).

    >>> _item_lines(b"[[1],\\n [2,\\n 3], [4]]", 3).tolist()
    [1, 2, 3]
    """
    a = np.frombuffer(text, dtype=np.uint8)
    depth = np.cumsum((a == 91).astype(np.int8) - (a == 93), dtype=np.int32)
    # an item starts at the first non-space byte after the outer '[' or after a ',' between items
    separators = np.flatnonzero(((a == 91) & (depth == 1)) | ((a == 44) & (depth == 1)))
    solid = np.flatnonzero((a != 32) & (a != 9) & (a != 10) & (a != 13))
    if separators.size != items or b'"' in text:
        return None
    starts = solid[np.minimum(np.searchsorted(solid, separators + 1), solid.size - 1)]
    return 1 + np.cumsum(a == 10, dtype=np.int64)[starts]


def json_kind(value) -> str:
    """What a parsed JSON value is, for a message.

    >>> json_kind({}), json_kind([1]), json_kind(None)
    ('an object', 'a list', 'null')
    """
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list",
            dict: "an object"}.get(type(value), "null" if value is None else type(value).__name__)


def _known_size(sources: Sequence[Any]) -> int | None:
    """Total bytes of ``sources`` if every one has a known size (paths, bytes, a file on stdin), else None."""
    total = 0
    for src in sources:
        try:
            if isinstance(src, (bytes, bytearray, memoryview)):
                total += len(src)
            elif isinstance(src, (str, os.PathLike)):
                fd_stat = os.fstat(sys.stdin.fileno()) if os.fspath(src) == "-" else os.stat(src)
                if not stat.S_ISREG(fd_stat.st_mode):
                    return None
                total += fd_stat.st_size
            else:
                return None
        except (OSError, ValueError, AttributeError):  # no stdin, a closed one, a missing file (reported later)
            return None
    return total


# -- the fast path ----------------------------------------------------------------------------------
def _scanner():
    """The fast-path module, imported when the fast path first runs (it imports numba)."""
    from . import _jsonscan

    return _jsonscan


def _region_place(name: str, buf: _Buffer, start: int, offset: int, first_line: int, col0: int = 0) -> str:
    """``name:line:col`` of byte ``offset`` of a region that starts at ``buf.data[start]`` on line ``first_line``,
    after ``col0`` bytes of it that are no longer held (columns count the bytes :meth:`_Buffer.squeeze` dropped)."""
    region = bytes(buf.data[start:start + offset])
    lno, col = _line_col(region, offset, None)
    line_start = region.rfind(b"\n") + 1
    at, dropped = buf.gaps(start + line_start, start + offset)
    return f"{name}:{first_line + lno - 1}:{col + int(dropped.sum()) + (col0 if lno == 1 else 0)}"


def _fast_piece(js, sc, first_line: int, seq_base: int) -> _Piece:
    st = sc.state
    data = sc.values()
    leaf = int(st[js.LEAF]) if data.size else 0
    lengths, depths = sc.lengths()
    n_deep = leaf - 1 if leaf else (int(depths.max()) if depths.size else 0)
    if n_deep == 1:
        levels = [lengths.copy()]
    else:
        levels = [lengths[depths == d] for d in range(1, n_deep + 1)]
    return _Piece(data, levels, leaf, int(st[js.ITEMS]), first_line + sc.item_newlines(), seq_base)


def _sync(js, st: np.ndarray, asm: _Assembler) -> None:
    js.reset_chunk(st)
    if not st[js.DEPTH]:  # an open item's structure so far is the scanner's alone until it ends
        st[js.LEAF] = asm.leaf
        st[js.MAXLIST] = asm.maxlist
        st[js.CLS] = asm.cls


class _Open:
    """An item (a JSON Lines line) longer than the read buffer, scanned as far as read: its values and lists so far
    (pieces of no whole item, one a scan; the text is dropped once scanned), the line it starts on, and the first
    integer in its dropped text that a float64 result would round: (place, token)."""

    __slots__ = ("parts", "line", "inexact")

    def __init__(self, parts: list[_Piece], line: int, inexact: tuple[str, str] | None):
        self.parts, self.line, self.inexact = parts, line, inexact


def _join(parts: list[_Piece], target: np.dtype | None) -> _Piece:
    """The pieces, in order, as one, emptying ``parts``: each array is copied once and let go as it is, so the
    peak is the result and one part, not the parts and the result.  Integer kinds that differ meet in ``target``
    (else int64)."""
    kinds = {p.data.dtype for p in parts if p.data.size}
    if len(kinds) > 1 and {k.kind for k in kinds} <= {"i", "u"}:
        dtype = target if target is not None else np.dtype(np.int64)
    else:
        dtype = np.result_type(*kinds) if kinds else parts[0].data.dtype
    depth = max(p.list_depth for p in parts)
    leaf, items, seq_base = parts[0].leaf or parts[-1].leaf, sum(p.items for p in parts), parts[0].seq_base
    lines = None if any(p.lines is None for p in parts) else np.concatenate([p.lines for p in parts])
    data = np.empty(sum(p.data.size for p in parts), dtype=dtype)
    levels = [np.empty(sum(len(p.levels[k]) for p in parts if k < p.list_depth), np.int64) for k in range(depth)]
    at, level_at = 0, [0] * depth
    while parts:
        p = parts.pop(0)
        if p.data.dtype != dtype and {p.data.dtype.kind, dtype.kind} <= {"i", "u"}:
            p.data = cast_values(p.data, dtype)
        data[at:at + p.data.size] = p.data
        at += p.data.size
        for k, lengths in enumerate(p.levels):
            levels[k][level_at[k]:level_at[k] + len(lengths)] = lengths
            level_at[k] += len(lengths)
        leaf = leaf or p.leaf
    return _Piece(data, levels, leaf, items, lines, seq_base)


def _gather(js, sc, carry: _Open | None, first_line: int, seq_base: int, asm: _Assembler,
            dropped_text=None, place: Callable[[int], str] | None = None) -> tuple[_Piece | None, _Open | None]:
    """The whole items of the last scan, led by the end of the item ``carry`` holds the start of, and the item the
    scan left open, if any (a scan leaves one open only when it ends no item).

    ``dropped_text`` (with ``place`` for its offsets) is the scanned text when it is about to be dropped while an
    item is open: its integers a float64 result would round are noted first.
    """
    if carry is None and not sc.is_open and not sc.state[js.ITEMS]:
        return None, None
    piece = _fast_piece(js, sc, first_line, seq_base)
    inexact = carry.inexact if carry is not None else None
    if not sc.is_open:
        if carry is not None:
            carry.parts.append(piece)
            piece = _join(carry.parts, asm.dtype)
            if piece.items:
                piece.lines[0] = carry.line
                if inexact is not None:
                    _refuse_inexact(piece.data, asm.target, b"", None, inexact)
        return (piece if piece.items else None), None
    base = piece.data.base
    if base is not None and base.nbytes > 2 * piece.data.nbytes:  # the scratch was sized for the worst case
        piece.data = piece.data.copy()
    if dropped_text is not None and inexact is None and asm.target == _TARGET_DEFAULT:
        hit = _inexact_integer(bytes(dropped_text))
        inexact = None if hit is None else (place(hit[0]), hit[1])
    if carry is None:
        return None, _Open([piece], first_line + int(sc.iline[int(sc.state[js.ITEMS])]), inexact)
    carry.parts.append(piece)
    carry.inexact = inexact
    return None, carry


# -- the readers ------------------------------------------------------------------------------------
def iter_json(source: Any, fmt: str | None = None, *, lod_level: int | None = None, dtype: Any = None,
              level_names=None, chunk_bytes: int = STREAM_CHUNK_BYTES, fast: bool | None = None,
              progress: Callable[[int], None] | None = None, name: str | None = None) -> Iterator[LoDTensor]:
    """Read JSON or JSON Lines as chunks of whole top-level sequences (bounded memory).

    ``source`` is a path, ``-`` (stdin), bytes or a binary stream; ``fmt`` is
    ``json`` or ``jsonl`` (default: from the file extension).  Every chunk has
    the same LoD levels and element shape; with ``dtype=None`` a later chunk may
    hold float64 where earlier ones held int64 (concatenating promotes).
    ``fast=None`` uses the Numba fast path when it can, ``False`` never.
    ``progress(n)`` is called with the bytes read so far.

    >>> [c.lod for c in iter_json(b"[[1,2],[3]]\\n[[4]]\\n", "jsonl")]
    [[[0, 2, 3], [0, 2, 3, 4]]]
    >>> [c.to_nested() for c in iter_json(b"[[1,2],[3]]\\n[[4]]\\n", "jsonl", chunk_bytes=16)]
    [[[[1, 2], [3]]], [[[4]]]]
    """
    return iter_json_inputs([source], fmt, lod_level=lod_level, dtype=dtype, level_names=level_names,
                            chunk_bytes=chunk_bytes, fast=fast, progress=progress, names=[name])


def iter_json_inputs(sources: Sequence[Any], fmt: str | None = None, *, lod_level: int | None = None,
                     dtype: Any = None, level_names=None, chunk_bytes: int = STREAM_CHUNK_BYTES,
                     fast: bool | None = None, progress: Callable[[int], None] | None = None,
                     names: Sequence[str | None] | None = None, stats: dict | None = None) -> Iterator[LoDTensor]:
    """Read several JSON or JSON Lines inputs as one stream of chunks (their sequences concatenate).

    Every input must hold at least one sequence unless ``lod_level`` is given
    (then an empty input adds zero sequences), and all must agree in structure.
    ``progress(n)`` gets the bytes read so far over all inputs;
    ``stats["bytes_read"]`` holds the total when the iterator is done.

    >>> [c.to_nested() for c in iter_json_inputs([b"[[1]]\\n", b"[[2,3]]\\n"], "jsonl")]
    [[[[1]]], [[[2, 3]]]]
    """
    sources = list(sources)
    names = list(names) if names is not None else [None] * len(sources)
    if fast is None:  # a pipe on stdin: its first read tells whether the input is small
        for i, src in enumerate(sources):
            if _is_stdin_pipe(src):
                sources[i] = _whole_if_small(sys.stdin.buffer, FAST_FROM_BYTES)
                names[i] = names[i] or "<stdin>"
    kwargs = dict(lod_level=lod_level, dtype=dtype, level_names=level_names, chunk_bytes=chunk_bytes,
                  progress=progress, names=names, stats=stats)
    if fast is None and not kernels_pay(_known_size(sources), FAST_FROM_BYTES, FAST_FROM_BYTES):
        fast = False  # small input: the general path, and Numba never imported
    yield from _iter_json_inputs(sources, fmt, fast=fast, **kwargs)


def _is_stdin_pipe(source: Any) -> bool:
    """Whether ``source`` is ``-`` with something other than a regular file on stdin (a pipe, a terminal)."""
    if not is_stdin(source):
        return False
    try:
        return not stat.S_ISREG(os.fstat(sys.stdin.fileno()).st_mode)
    except (OSError, ValueError, AttributeError):
        return False


class _Prefixed(io.RawIOBase):
    """A one-way stream: ``prefix``, then the rest of ``stream``."""

    def __init__(self, prefix: bytes, stream):
        self._prefix, self._stream = memoryview(prefix), stream

    def readable(self) -> bool:
        return True

    def readinto(self, view) -> int:
        if len(self._prefix):
            n = min(len(view), len(self._prefix))
            view[:n] = self._prefix[:n]
            self._prefix = self._prefix[n:]
            return n
        return self._stream.readinto(view)


def _whole_if_small(stream, limit: int):
    """A one-way stream's bytes if it ends within ``limit`` bytes (then its size is known), else a stream of all
    of it (what was read first, then the rest): the reader's first read, not a peek."""
    head = stream.read(limit + 1)
    if len(head) <= limit:
        return head
    return io.BufferedReader(_Prefixed(head, stream), 1 << 20)


def _iter_json_inputs(sources: list, fmt: str | None, *, lod_level, dtype, level_names, chunk_bytes: int,
                      fast: bool | None, progress, names, stats) -> Iterator[LoDTensor]:
    fmts = [_resolve_format(src, fmt) for src in sources]
    asm = _Assembler("", lod_level, resolve_dtype(dtype), _names(level_names))
    js = _scanner() if fast is not False else None
    chunk_bytes = max(int(chunk_bytes), 16)
    stats = {} if stats is None else stats
    stats["bytes_read"] = 0
    for i, (source, fmt_i) in enumerate(zip(sources, fmts)):
        inp = _Input(source, names[i] if i < len(names) else None)
        asm.name = inp.name
        asm.final_input = i == len(sources) - 1
        base = stats["bytes_read"]
        tick = None if progress is None else (lambda n, base=base: progress(base + n))
        try:  # an empty input adds no sequences (an empty batch in a pipeline); pack decides what that makes
            reader = _read_jsonl if fmt_i == "jsonl" else _read_document
            yield from reader(inp, asm, js, chunk_bytes, tick)
        finally:
            stats["bytes_read"] = base + inp.bytes_read
            inp.close()
    yield from asm.close()


def _names(level_names) -> tuple[str, ...] | None:
    return None if level_names is None else tuple(str(n) for n in level_names)


def _resolve_format(source: Any, fmt: str | None) -> str:
    if fmt is None:
        if isinstance(source, (str, os.PathLike)) and os.fspath(source) != "-":
            found = format_of_path(source)
            fmt = found.name if found is not None else None
        if fmt is None:
            raise LodUsageError("cannot tell the input format; give fmt='json' or 'jsonl'")
    if fmt not in FORMATS:
        raise LodUsageError(f"unknown JSON format {fmt!r}; choose json or jsonl")
    return fmt


class _Buffer:
    """A read buffer (uninitialized numpy bytes): ``data[:filled]`` holds unparsed input.

    It starts small and doubles while reads fill it, up to ``limit`` (more only
    for a line the general path reads whole), so small inputs stay cheap.
    """

    def __init__(self, size: int, limit: int):
        self.data = np.empty(max(size, 16), dtype=np.uint8)
        self.limit = max(limit, len(self.data))
        self.filled = 0
        self.eof = False
        self.full = False
        #: where :meth:`squeeze` dropped blanks: the offset of the byte after each squeezed run, and the bytes dropped
        self.gap_at = self.gap_len = np.zeros(0, np.int64)

    def fill(self, inp: _Input, progress) -> None:
        if self.filled < len(self.data) and not self.eof:
            n = inp.readinto(memoryview(self.data)[self.filled:])
            self.filled += n
            self.full = self.filled == len(self.data)
            if not self.full:
                self.eof = True
            if progress is not None:
                progress(inp.bytes_read)

    def grow(self) -> None:
        bigger = np.empty(len(self.data) * 2, dtype=np.uint8)
        bigger[:self.filled] = self.data[:self.filled]
        self.data = bigger

    def squeeze(self, js) -> bool:
        """Squeeze long runs of blanks (:func:`._jsonscan.squeeze_blanks`) so an item or line that outgrows the
        buffer need not hold them; whether that freed a quarter of the buffer (else it must grow)."""
        if js is None:
            return False
        room = self.filled // _SQUEEZE_RUN + 1
        at, dropped = np.empty(room, np.int64), np.empty(room, np.int64)
        new_filled, n = js.squeeze_blanks(self.data, self.filled, _SQUEEZE_RUN, at, dropped)
        if not n:
            return False
        at, dropped = at[:n], dropped[:n]
        if self.gap_at.size:  # earlier gaps move with the bytes before them; one inside a new run joins its end
            starts = at + np.cumsum(dropped) - dropped  # each run's dropped bytes begin there, before squeezing
            k = np.searchsorted(starts, self.gap_at, side="right") - 1
            ends = np.cumsum(dropped)
            inside = (k >= 0) & (self.gap_at < starts[np.maximum(k, 0)] + dropped[np.maximum(k, 0)])
            moved = np.where(k >= 0, self.gap_at - ends[np.maximum(k, 0)], self.gap_at)
            moved = np.where(inside, at[np.maximum(k, 0)], moved)
            order = np.argsort(np.concatenate([moved, at]), kind="stable")
            at = np.concatenate([moved, at])[order]
            dropped = np.concatenate([self.gap_len, dropped])[order]
        self.gap_at, self.gap_len = at, dropped
        freed = self.filled - int(new_filled)
        self.filled, self.full = int(new_filled), False
        return freed >= len(self.data) // 4

    def gaps(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """The squeezed gaps after ``data[start]`` up to ``data[stop]``, offsets relative to ``start``."""
        keep = (self.gap_at > start) & (self.gap_at <= stop)
        return self.gap_at[keep] - start, self.gap_len[keep]

    def original(self, n: int) -> int:
        """Bytes of input that ``data[:n]`` stands for (with what was dropped before ``data[n]``)."""
        return n + int(self.gap_len[self.gap_at <= n].sum()) if self.gap_at.size else n

    def put_back(self, k: int, text: bytes, dropped: int) -> None:
        """Put ``text`` in place of ``data[:k]``, where it stands for ``dropped`` more bytes of input."""
        rest = self.data[k:self.filled].copy()
        if len(text) + len(rest) > len(self.data):
            self.data = np.empty(len(text) + len(rest), dtype=np.uint8)
        self.data[:len(text)] = np.frombuffer(text, dtype=np.uint8)
        self.data[len(text):len(text) + len(rest)] = rest
        self.filled = len(text) + len(rest)
        self.full = self.filled == len(self.data)
        self.gap_at = self.gap_at + (len(text) - k)
        if dropped:
            self.gap_at = np.concatenate([[len(text)], self.gap_at]).astype(np.int64)
            self.gap_len = np.concatenate([[dropped], self.gap_len]).astype(np.int64)

    def consume(self, n: int) -> None:
        if self.gap_at.size:
            self.gap_at, self.gap_len = self.gap_at[self.gap_at > n] - n, self.gap_len[self.gap_at > n]
        rest = self.filled - n
        if self.full and len(self.data) < self.limit:
            bigger = np.empty(min(len(self.data) * 2, self.limit), dtype=np.uint8)
            bigger[:rest] = self.data[n:self.filled]
            self.data = bigger
        elif rest and n:
            self.data[:rest] = self.data[n:self.filled].copy()
        self.filled = rest
        self.full = False

    def find_newline(self, start: int, end: int, last: bool = False) -> int:
        """Index of the first (``last``: the last) newline in ``data[start:end]``, or -1; read in growing windows."""
        window = 1 << 16
        while start < end:
            lo, hi = (max(end - window, start), end) if last else (start, min(start + window, end))
            text = self.data[lo:hi].tobytes()
            i = text.rfind(b"\n") if last else text.find(b"\n")
            if i >= 0:
                return lo + i
            start, end = (start, lo) if last else (hi, end)
            window *= 2
        return -1


#: runs of blanks at least this long are squeezed to one space when an item or line outgrows the read buffer
_SQUEEZE_RUN = 4096
#: the first read of an input of unknown size
_FIRST_READ = 1 << 20
#: the first read of a larger file: its first chunk reaches the writer sooner (the buffer then doubles up
#: to the chunk size)
_FIRST_FILE_READ = 8 << 20


def _new_buffer(inp: _Input, chunk_bytes: int) -> _Buffer:
    """A read buffer of ``chunk_bytes``, or less for a smaller (or unknown-size) input."""
    size = None
    try:
        if inp.path is not None:
            size = os.fstat(inp.stream.fileno()).st_size
        elif isinstance(inp.stream, io.BytesIO):
            size = len(inp.stream.getbuffer()) - inp.stream.tell()
    except (OSError, AttributeError, ValueError):  # pragma: no cover - a path always has a descriptor
        size = None
    first = min(chunk_bytes, size + 1, _FIRST_FILE_READ) if size is not None \
        else min(chunk_bytes, _FIRST_READ)
    return _Buffer(first, chunk_bytes)


def _blocks(buf: _Buffer, cut: int) -> list[tuple[int, int]]:
    """``buf.data[:cut]`` as blocks of about SCAN_BLOCK bytes, each ending at a line end."""
    out, start = [], 0
    while start < cut:
        stop = cut
        if cut - start > SCAN_BLOCK + SCAN_BLOCK // 2:
            nl = buf.find_newline(start + SCAN_BLOCK, cut)
            stop = nl + 1 if nl >= 0 else cut
        out.append((start, stop))
        start = stop
    return out


_LOCAL = threading.local()
_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _scan_threads() -> int:
    """Threads that scan JSON blocks: :data:`SCAN_THREADS`, else lodtool's thread limit (at most 8), so a
    single-thread Dask worker or ``LODTOOL_NUM_THREADS=1`` parses on one core, as its other work runs."""
    return SCAN_THREADS if SCAN_THREADS is not None else min(8, thread_limit())


def _pool() -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            from concurrent.futures import ThreadPoolExecutor

            _POOL = ThreadPoolExecutor(max_workers=_scan_threads(), thread_name_prefix="lodtool-scan")
        return _POOL


def _scan_block(js, view: np.ndarray, start: int, stop: int, state0: np.ndarray):
    """Scan one JSON Lines block in a worker thread (its own scanner); returns (status, piece, newlines)."""
    scanners = getattr(_LOCAL, "scanners", None)
    if scanners is None:
        scanners = _LOCAL.scanners = {}
    sc = scanners.get(int(state0[js.TARGET]))
    if sc is None:
        sc = scanners[int(state0[js.TARGET])] = js.Scanner(True, int(state0[js.TARGET]))
    sc.state[:] = state0
    status = sc.scan(view, start, stop)
    if status != js.DONE:
        sc.release()  # this thread's scanner lives on; the general path needs the memory now
        return status, None, -1
    piece = _fast_piece(js, sc, 0, 0) if sc.state[js.ITEMS] else None
    return status, piece, int(sc.state[js.NEWLINES])


def _read_jsonl(inp: _Input, asm: _Assembler, js, chunk_bytes: int, progress) -> Iterator[LoDTensor]:
    buf = _new_buffer(inp, chunk_bytes)
    sc = js.Scanner(True, asm.target) if js is not None else None
    first_line, seq_base = 1, 0
    carry: _Open | None = None  # the start of a line longer than the buffer, its text dropped
    col0 = 0  # bytes of the current line before buf.data[0]
    while True:
        buf.fill(inp, progress)
        if buf.eof:
            cut = buf.filled
        else:
            cut = buf.find_newline(0, buf.filled, last=True) + 1
            if cut == 0:  # the line goes on past the buffer
                if sc is None:
                    buf.grow()  # the general path reads a line whole
                elif not buf.squeeze(js):
                    # scan it as far as read: its values stay, its text goes (a number that fills the buffer is
                    # read through first)
                    _sync(js, sc.state, asm)
                    if sc.scan(buf.data, 0, buf.filled, final=False, resume=True) == js.FALLBACK:
                        raise _long_line_error(js, sc, buf, buf.filled, asm, first_line, col0)
                    pos = int(sc.state[js.POS])
                    if pos == 0:
                        _read_long_number(js, sc, buf, inp, progress, asm.name, first_line, col0)
                        continue
                    piece, carry = _gather(js, sc, carry, first_line, seq_base, asm, buf.data[:pos],
                                           lambda offset: f"{asm.name}:{first_line}:{col0 + buf.original(offset) + 1}")
                    if piece is not None:  # the line's sequence ended: blanks up to its newline follow
                        seq_base += piece.items
                        yield from asm.take(piece)
                    col0 += buf.original(pos)
                    buf.consume(pos)
                continue
        view = buf.data
        blocks = _blocks(buf, cut)
        if sc is not None and (carry is not None or sc.state[js.TAIL]):
            # the end of a line whose start is gone is a block of its own: the lines after it are whole
            end = buf.find_newline(0, blocks[0][1]) + 1
            if 0 < end < blocks[0][1]:
                blocks[:1] = [(0, end), (end, blocks[0][1])]
        ahead: list = []
        state0 = None
        for i, (start, stop) in enumerate(blocks):
            goes_on = i == 0 and sc is not None and (carry is not None or bool(sc.state[js.TAIL]))
            if (sc is not None and not ahead and not goes_on and i + 1 < len(blocks) and _scan_threads() > 1
                    and asm.leaf and asm.cls):
                # the structure is known: scan the rest of the buffer in parallel (the scanner releases the GIL)
                _sync(js, sc.state, asm)
                state0 = sc.state.copy()
                ahead = [None] * i + [_pool().submit(_scan_block, js, view, a, b, state0) for a, b in blocks[i:]]
            piece, newlines = None, -1
            if ahead:
                status, piece, newlines = ahead[i].result()
                ahead[i] = None
                if status == js.DONE and asm.leaf == state0[js.LEAF] and asm.cls == state0[js.CLS]:
                    if piece is not None:
                        piece.lines += first_line
                        piece.seq_base = seq_base
                else:
                    piece, newlines = None, -1
            if newlines < 0 and sc is not None:
                _sync(js, sc.state, asm)
                if sc.scan(view, start, stop) == js.DONE:
                    newlines = int(sc.state[js.NEWLINES])
                    piece, carry = _gather(js, sc, carry, first_line, seq_base, asm)
                elif goes_on:  # the line's start is gone: the general path could not word this
                    raise _long_line_error(js, sc, buf, stop, asm, first_line, col0)
            if newlines < 0:
                if sc is not None:
                    sc.release()
                region = view[start:stop].tobytes()
                piece = _general_jsonl(region, first_line, seq_base, asm, buf.gaps(start, stop))
                newlines = region.count(b"\n")
            if piece is not None:
                _refuse_inexact(piece.data, asm.target, view[start:stop], lambda offset: _region_place(
                    asm.name, buf, start, offset, first_line, col0 if goes_on else 0))
                seq_base += piece.items
                yield from asm.take(piece, last=buf.eof and stop == buf.filled)
            first_line += newlines
        buf.consume(cut)
        col0 = 0
        if buf.eof and not buf.filled:
            break


def _read_long_number(js, sc, buf: _Buffer, inp: _Input, progress, name: str, line: int, col0: int) -> None:
    """Read through the number at ``buf.data[0]``, which the whole buffer does not hold, and put back in its place
    what decides its value (its text, up to :data:`._jsonscan.MAX_TOKEN` bytes, else its significant digits):
    bounded memory, whatever its length.  A number broken past its first bytes, or an integer longer than any
    dtype holds, is refused here, where its bytes go by."""
    number = js.NumberText()
    head = bytearray()  # the token's first bytes, while it may be put back whole
    end = -1
    while end < 0:
        for off in range(0, buf.filled, js.TOKEN_PIECE):
            piece = buf.data[off:min(off + js.TOKEN_PIECE, buf.filled)].tobytes()
            k = number.feed(piece)
            if len(head) <= js.MAX_TOKEN:
                head += piece[:k if k >= 0 else len(piece)][:js.MAX_TOKEN + 1 - len(head)]
            if k >= 0:
                end = off + k
                break
        if end < 0:
            if buf.eof:
                end = buf.filled
                break
            buf.consume(buf.filled)
            buf.fill(inp, progress)
    where = f"{name}:{line}"
    if number.valid < number.length:
        phrase = "unexpected data after the sequence (JSON Lines takes one sequence per line)" \
            if sc.jsonl and sc.state[js.DEPTH] == 1 else "expected ',' or ']'"
        if not number.valid:
            phrase = "expected a number, true, false or '[' (found '-')"
        raise LodInputError(f"{where}:{col0 + number.valid + 1}: {phrase}")
    if number.length <= js.MAX_TOKEN:
        text = bytes(head)
    elif number.is_integer:
        raise LodInputError(f"{where}:{col0 + 1}: {_huge_integer(number.length - number.neg)}")
    else:
        text = number.text().encode()
    buf.put_back(end, text, number.length - len(text))


def _long_line_error(js, sc, buf: _Buffer, end: int, asm: _Assembler, line: int, col0: int) -> LodInputError:
    """The error a scan found in a JSON Lines line whose start was scanned and dropped before (the general path,
    which words the errors of lines held whole, cannot): from the scanner's code, its place, and the text there
    (``buf.data[:end]``; the line's text before the error is ASCII, so bytes count columns)."""
    st = sc.state
    pos = int(st[js.ERRPOS])
    code = sc.error if sc.error is not None else int(st[js.ERRCODE])
    where = f"{asm.name}:{line}:{col0 + buf.original(pos) + 1}"
    line_end = buf.find_newline(pos, end)
    more = line_end < 0 and (end < buf.filled or not buf.eof)  # the line goes on past what was read
    end = end if line_end < 0 else line_end
    window = buf.data[pos:min(end, pos + 64)].tobytes()
    token = window[:len(window) - len(window.lstrip(b"-+.0123456789eE"))].decode()
    if code == js.E_SYNTAX:
        depth, expect = int(st[js.ERRDEPTH]), int(st[js.EXPECT])
        lead = "[" * (depth - 1) + ("[]" if expect == 2 else "0," if expect == 0 and depth > 1 else "")
        found = _window_syntax_error(buf.data, pos, end, lead, True, more)
        if found is not None:
            offset, phrase = found
            col = col0 + buf.original(pos) + 1 + len(buf.data[pos:offset].tobytes().decode("utf-8", "replace"))
            return LodInputError(f"{asm.name}:{line}:{col}: {phrase}")
        what = {b'"': "a string", b"{": "an object", b"n": "null"}.get(window[:1], repr(window[:1].decode(
            errors="replace")))
        return LodInputError(f"{where}: {what} where a number, true, false or '[' must be (only lists of numbers "
                             "or booleans are read)")
    if code == js.E_TRUNCATED:
        return LodInputError(f"{where}: unexpected end of line (is it truncated, or does a sequence span lines?)")
    if code == js.E_MIX:
        token = window[:5].rstrip(b"]}, \t\r\n").decode(errors="replace")
        what = "a number among booleans" if st[js.CLS] == js.CLS_BOOL else f"{token} among numbers"
        return LodInputError(f"{where}: {what} (booleans and numbers cannot be mixed)")
    if code == js.E_NEST:
        depth, leaf, maxlist = int(st[js.ERRDEPTH]), int(st[js.LEAF]), int(st[js.MAXLIST])
        if window[:1] == b"[":
            return LodInputError(f"{where}: this list nests deeper than the values before ({leaf - 1} list(s) deep)")
        before = f"{leaf - 1} before" if leaf else f"lists nest {maxlist} deep before"
        return LodInputError(f"{where}: the value here sits {depth - 1} list(s) deep, but {before}")
    if code == js.E_DEEP:
        return LodInputError(f"{where}: lists nest deeper than {MAX_LEVELS} levels")
    if code == js.E_LONG:
        return LodInputError(f"{where}: {_huge_integer(len(token.lstrip('-')))}")
    if sc.error is not None and not token:  # integers above int64 and negative ones, found after the scan
        return LodInputError(f"{asm.name}:{line}: integers above int64 and negative integers: no integer dtype "
                             "holds both; read them as floats (dtype=float64)")
    if not re.fullmatch(r"-?\d+", token):
        return LodInputError(f"{where}: {_beyond_float64(token)}")
    if asm.target == _TARGET_DEFAULT:
        return LodInputError(f"{where}: {_beyond_int64(token)}")
    if not 0 <= int(token) <= _U64_MAX:
        return LodInputError(f"{where}: integer {token} does not fit in uint64")
    return LodInputError(f"{where}: integer {token} above int64 among floats; read them all as floats "
                         "(dtype=float64)")


def _read_document(inp: _Input, asm: _Assembler, js, chunk_bytes: int, progress) -> Iterator[LoDTensor]:
    inp.make_rereadable()
    seq_base = 0
    if js is not None:
        buf = _new_buffer(inp, chunk_bytes)
        sc = js.Scanner(False, asm.target)
        first_line = 1
        carry: _Open | None = None  # the start of an item longer than the buffer, its text dropped
        col0 = 0  # bytes of the current line before buf.data[0]
        while True:
            buf.fill(inp, progress)
            view = buf.data
            pos, span, status = 0, SCAN_BLOCK, js.DONE
            while True:  # scan blocks of about SCAN_BLOCK bytes; an item never splits, but for one left open
                stop = min(pos + span, buf.filled)
                final = buf.eof and stop == buf.filled
                _sync(js, sc.state, asm)
                status = sc.scan(view, pos, stop, final)
                if status == js.FALLBACK:
                    break
                new_pos = int(sc.state[js.POS])
                piece, carry = _gather(js, sc, carry, first_line, seq_base, asm, view[pos:new_pos],
                                       lambda offset: _region_place(asm.name, buf, pos, offset, first_line))
                if piece is not None:
                    _refuse_inexact(piece.data, asm.target, view[pos:new_pos],
                                    lambda offset: _region_place(asm.name, buf, pos, offset, first_line))
                    seq_base += piece.items
                    yield from asm.take(piece, last=final and status == js.DONE)
                first_line += int(sc.state[js.NEWLINES])
                if new_pos == pos and status == js.NEED_MORE:
                    if stop == buf.filled:
                        break  # the item goes on past what was read
                    span *= 2
                    continue
                pos, span = new_pos, SCAN_BLOCK
                if stop == buf.filled and status == js.DONE:
                    break
            if status == js.FALLBACK:
                sc.release()
                del buf, view, carry  # the general path reads the document again, whole
                break
            if buf.eof:
                return
            if pos == 0 and buf.filled == len(buf.data) and not buf.squeeze(js):
                # an item longer than the buffer: scan it as far as read, keep its values, drop its text
                _sync(js, sc.state, asm)
                status = sc.scan(view, 0, buf.filled, final=False, resume=True)
                if status == js.FALLBACK:
                    sc.release()
                    del buf, view, carry
                    break
                pos = int(sc.state[js.POS])
                if pos == 0:
                    _read_long_number(js, sc, buf, inp, progress, asm.name, first_line, col0)
                    continue
                _, carry = _gather(js, sc, carry, first_line, seq_base, asm, view[:pos],
                                   lambda offset: _region_place(asm.name, buf, 0, offset, first_line))
                first_line += int(sc.state[js.NEWLINES])
            nl = buf.find_newline(0, pos, last=True)
            col0 = buf.original(pos) - buf.original(nl + 1) if nl >= 0 else col0 + buf.original(pos)
            buf.consume(pos)
    piece = _general_document(inp.read_all(), seq_base, asm)
    if progress is not None:
        progress(inp.bytes_read)
    if piece is not None:
        yield from asm.take(piece, last=True)


def read_json(source: Any, fmt: str | None = None, *, lod_level: int | None = None, dtype: Any = None,
              level_names=None, chunk_bytes: int = STREAM_CHUNK_BYTES, fast: bool | None = None,
              name: str | None = None) -> LoDTensor:
    """Read a whole JSON or JSON Lines input into one :class:`~lodtool.LoDTensor`.

    >>> read_json(b'[[1, 2], [3]]\\n[[4]]\\n', "jsonl").recursive_sequence_lengths
    [[2, 1], [2, 1, 1]]

    An input without sequences is :class:`~lodtool.errors.LodInputError`
    here (``iter_json`` yields no chunks for it; ``pack`` writes an empty tensor).
    """
    chunks = list(iter_json(source, fmt, lod_level=lod_level, dtype=dtype, level_names=level_names,
                            chunk_bytes=chunk_bytes, fast=fast, name=name))
    if not chunks:
        label = name or (os.fspath(source) if isinstance(source, (str, os.PathLike)) else "<input>")
        raise LodInputError(f"{label}: empty input (no sequences)")
    return concat_chunks(chunks)


def parse_json(text: bytes | str, fmt: str = "json", *, lod_level: int | None = None, dtype: Any = None,
               level_names=None, fast: bool | None = None, name: str = "<json>") -> LoDTensor:
    """Parse JSON or JSON Lines text held in memory.

    >>> parse_json("[[[1.5, 2], [3, 4]]]", lod_level=1).shape
    (2, 2)
    >>> parse_json("[[true], [false, true]]").dtype
    dtype('bool')
    """
    if isinstance(text, str):
        text = text.encode("utf-8")
    return read_json(bytes(text), fmt, lod_level=lod_level, dtype=dtype, level_names=level_names, fast=fast,
                     name=name)


# -- writing ----------------------------------------------------------------------------------------
def write_json(tensor_or_chunks: LoDTensor | Iterable[LoDTensor], out: BinaryIO, fmt: str = "jsonl") -> None:
    """Write a tensor, or chunks of whole top-level sequences, as JSON or JSON Lines.

    ``jsonl`` writes one top-level sequence per line; ``json`` one nested list
    (written incrementally, on one line).  Integers are written as integers,
    bools as ``true``/``false``, floats in their shortest exact form, and
    non-finite floats as ``NaN``/``Infinity``/``-Infinity``.

    >>> import io, numpy as np
    >>> out = io.BytesIO()
    >>> write_json(LoDTensor(np.array([0.1, np.nan, 2.0]), [[0, 2, 3]]), out, "json")
    >>> out.getvalue()
    b'[[0.1,NaN],[2.0]]\\n'
    """
    if fmt not in FORMATS:
        raise LodUsageError(f"unknown JSON format {fmt!r}; choose json or jsonl")
    chunks = [tensor_or_chunks] if isinstance(tensor_or_chunks, LoDTensor) else tensor_or_chunks
    opened = False  # "[" goes out with the first encoded chunk: data that cannot be encoded writes nothing
    for chunk in chunks:
        compiled = _encode_compiled(chunk, fmt)
        if compiled is None:
            text = _encode_chunk(chunk, fmt)
        else:  # the formatter ends every sequence with its separator; json's last comma is the caller's
            text = memoryview(compiled) if fmt == "jsonl" else memoryview(compiled[:-1]) if len(compiled) else b""
        if fmt == "json" and not opened:
            out.write(b"[")
            opened = True
        elif fmt == "json" and len(text):
            out.write(b",")
        if len(text):
            out.write(text)
    if fmt == "json":
        out.write(b"]\n" if opened else b"[]\n")


def _encode_compiled(chunk: LoDTensor, fmt: str) -> np.ndarray | None:
    """The chunk's text from the compiled formatter (:mod:`._jsonfmt`), or None where it does not apply.

    It writes integers and bools, byte for byte as orjson would, above a
    work-size crossover (:data:`FORMAT_FROM_VALUES`).
    """
    data = chunk.data
    if not isinstance(data, np.ndarray) or data.dtype.kind not in "biu" or not chunk.lod_level:
        return None
    if not kernels_pay(data.size, *FORMAT_FROM_VALUES):
        return None
    from ._jsonfmt import encode_lines

    return encode_lines(data, chunk.offsets, chunk.element_shape, sep=10 if fmt == "jsonl" else 44)



def _encode_chunk(chunk: LoDTensor, fmt: str) -> bytes | bytearray:
    """The JSON text of a chunk's top-level sequences: comma-joined (``json``) or one per line (``jsonl``), in
    one buffer (a small ``bytes`` per sequence holds orjson's 4 KiB buffer each).

    >>> import numpy as np
    >>> bytes(_encode_chunk(LoDTensor(np.arange(3), [[0, 2, 3]]), "jsonl"))
    b'[0,1]\\n[2]\\n'
    """
    import orjson

    data = np.asarray(chunk)
    if data.dtype.kind == "c":
        raise LodDtypeError(f"{data.dtype} data has no JSON form; write npz instead")
    if data.dtype.kind == "f" and data.dtype.itemsize < 8:
        # the shortest decimal that reads back to the same float16/float32 value
        data = data.astype(str).astype(np.float64)
    finite = data.dtype.kind != "f" or bool(np.isfinite(data).all())
    nested = LoDTensor._trusted(data, chunk.offsets).to_nested()
    if not nested:
        return b""
    if finite and fmt == "json":
        return orjson.dumps(nested)[1:-1]
    dumps = orjson.dumps if finite else (lambda seq: json.dumps(seq, separators=(",", ":")).encode())
    sep = b"\n" if fmt == "jsonl" else b","
    out = bytearray()
    for seq in nested:
        if out and fmt == "json":
            out += sep
        out += dumps(seq)
        if fmt == "jsonl":
            out += sep
    return out



# -- the io registry's entry points (see lodtool.io) ------------------------------------------------
def read(fmt: str, sources: Sequence[Any], *, lod_level: int | None = None, dtype: Any = None,
         chunk_bytes: int = STREAM_CHUNK_BYTES, progress: Callable[[int], None] | None = None,
         stats: dict | None = None) -> Iterator[LoDTensor]:
    """The registry's reader: ``sources`` of format ``fmt`` as chunks of whole top-level sequences.

    >>> [c.to_nested() for c in read("jsonl", [b"[1, 2]\\n[3]\\n"])]
    [[[1, 2], [3]]]
    """
    return iter_json_inputs(sources, fmt, lod_level=lod_level, dtype=dtype, chunk_bytes=chunk_bytes,
                            progress=progress, stats=stats)


def write(fmt: str, tensor: LoDTensor, out: BinaryIO) -> None:
    """The registry's writer of a tensor in memory (what ``slice`` writes)."""
    write_json(tensor, out, fmt)


def write_stored(fmt: str, stored: Any, chunks: Iterable[LoDTensor], out: BinaryIO) -> None:
    """The registry's streaming writer: a stored tensor's ``chunks``, written as they come (``unpack``)."""
    write_json(chunks, out, fmt)


__all__ = ["FORMATS", "MAX_LEVELS", "iter_json", "iter_json_inputs", "read_json", "parse_json",
           "write_json", "json_kind", "read", "write", "write_stored"]
