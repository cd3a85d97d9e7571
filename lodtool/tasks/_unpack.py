"""``unpack``: a stored tensor back out as any io format lodtool writes (what ``lodtool unpack`` runs).

The tensor is read in chunks of whole top-level sequences and written as it
goes, so memory stays bounded.  A path is written atomically (a temp file,
renamed when complete); a stream (``-`` is stdout) is written as the chunks
come.  A format written as several files (Megatron's ``PREFIX.bin`` +
``PREFIX.idx``, datatrove, dolma) takes the output path as their prefix and
publishes them together, or none of them.  ``unpack`` is the inverse of :func:`lodtool.tasks.pack`: packing
its output again gives the same tensor (same LoD, dtype from the same
inference, level names for npz).

>>> import io, os, tempfile, numpy as np
>>> from lodtool import LoDTensor
>>> from lodtool.container import save
>>> p = os.path.join(tempfile.mkdtemp(), "a.lod.h5")
>>> save(p, LoDTensor(np.arange(5), [[0, 2, 5]]))
>>> out = io.BytesIO()
>>> unpack(p, out, to="jsonl").sequences, out.getvalue()
(2, b'[0,1]\\n[2,3,4]\\n')
"""

from __future__ import annotations

import itertools
import os
import sys
from dataclasses import dataclass
from typing import Any, BinaryIO, Callable, Iterator

import numpy as np

from .. import io as formats
from ..io._values import resolve_dtype
from ..errors import LodUsageError, LodValidationError
from ..io.text import DECODED_FORMATS, write_decoded

#: the output formats ``unpack`` writes
OUTPUT_FORMATS = formats.writable()


@dataclass(frozen=True)
class UnpackResult:
    """What :func:`unpack` wrote."""

    output: str
    name: str
    to: str
    rows: int
    sequences: int
    bytes_written: int
    #: the files written, for a format written as several files (else empty)
    files: tuple[str, ...] = ()


class _Counter:
    """A write-only stream wrapper that counts bytes (zipfile also asks for ``tell``/``flush``)."""

    def __init__(self, stream: BinaryIO):
        self.stream = stream
        self.count = 0

    def write(self, data) -> int:
        n = self.stream.write(data)
        n = len(memoryview(data)) if n is None else n
        self.count += n
        return n

    def flush(self) -> None:
        flush = getattr(self.stream, "flush", None)
        if flush is not None:
            flush()

    def tell(self) -> int:
        return self.count


def unpack(path: str | os.PathLike, output: str | os.PathLike | BinaryIO, *, name: str | None = None,
           to: str = "json", chunk_rows: int = 1 << 22, progress: Callable[[int, int], None] | None = None,
           level: int | None = None, dtype: Any = None, token_dtype: Any = None,
           eos_token_id: int | None = None, detokenize: bool = False,
           skip_special_tokens: bool = False) -> UnpackResult:
    """Write tensor ``name`` of the container at ``path`` to ``output`` as ``to`` (a :func:`lodtool.io.writable`).

    ``output`` is a path (written atomically), ``-`` (stdout) or a writable
    binary stream.  ``json`` writes one nested list, ``jsonl`` one top-level
    sequence per line, ``npz`` the arrays ``data``, ``offsets_0..`` and
    ``level_names`` (see :mod:`lodtool.io.npy`), ``parquet`` one row group
    per chunk, ``arrow`` one record batch per chunk, ``pdtensor`` Paddle's
    serialized LoDTensor (see each :mod:`lodtool.io` module).  Chunks of at most
    ``chunk_rows`` rows (or one top-level sequence) are read at a time;
    ``progress(done, total)`` is called after each with the bytes of rows
    written so far and in all.  A sharded folder is checked whole (every
    shard against the manifest, every shard's LoD) before the first byte is
    written, as a file's LoD is.  ``detokenize`` writes text instead of ids
    (``jsonl`` or ``json``; :func:`lodtool.io.text.write_decoded`), decoded by the
    tokenizer the tensor stores (``skip_special_tokens`` leaves EOS and the like out).

    ``megatron``, ``fairseq``, ``datatrove`` and ``dolma`` are written as
    several files named from ``output`` (a path: the prefix, or one of the
    files), which appear together when complete or not at all (files already
    there stay as they were on an error).  Megatron keeps 2 levels (a
    1-level tensor writes ``document_indices = arange(n + 1)``), the others
    1; ``level=k`` makes level ``k``'s sequences the stored sequences, the
    levels under it flattened into their tokens (a deeper tensor needs it).
    ``result.files`` names the files written.  ``dtype`` casts the values
    (refusing any it cannot hold, naming its row): a format's own dtypes
    (datatrove's uint16 or uint32) from a container of int64.  ``token_dtype`` and
    ``eos_token_id`` are what a token dataset read in place cannot say itself
    (see :func:`lodtool.open`).

    >>> import io, os, tempfile, numpy as np
    >>> from lodtool import LoDTensor
    >>> from lodtool.container import save
    >>> p = os.path.join(tempfile.mkdtemp(), "b.lod.h5")
    >>> save(p, LoDTensor(np.array([0.5, 1.0, 2.0]), [[0, 1, 3]]))
    >>> out = io.BytesIO()
    >>> r = unpack(p, out, to="json")
    >>> out.getvalue(), r.rows
    (b'[[0.5],[1.0,2.0]]\\n', 3)
    """
    if to not in OUTPUT_FORMATS:
        raise LodUsageError(f"unknown output format {to!r}; choose one of {', '.join(OUTPUT_FORMATS)}")
    if detokenize and to not in DECODED_FORMATS:
        raise LodUsageError(f"detokenize=True writes text as {' or '.join(DECODED_FORMATS)}, not {to}")
    if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, int) or chunk_rows < 1:
        raise LodUsageError(f"chunk_rows must be a positive integer, got {chunk_rows!r}")
    from ..atomic import refuse_output_over_input
    from ._open import open as open_path  # a container file, a sharded folder or a token dataset

    fmt = formats.get(to)
    fmt.check_write_options({"level": level})
    cast_to = resolve_dtype(dtype)
    targets = fmt.output_files(output) if fmt.writes_files else [output]
    for target in targets:
        refuse_output_over_input(target, [path])
    with open_path(path, token_dtype=token_dtype, eos_token_id=eos_token_id) as f:
        t = f.tensor(name)
        where = f"{os.fspath(path)}:{t.name}"
        if fmt.writes_files:
            for target in targets:  # a token dataset read in place is several files
                refuse_output_over_input(target, getattr(f, "files", [path]))
            files = _write_files(t, fmt, output, chunk_rows, progress, level, (cast_to, where))
            return UnpackResult(os.fspath(output), t.name, to, t.n_rows, len(t),
                                sum(os.path.getsize(p) for p in files), tuple(files))
        write = _writer(t, f"{os.fspath(path)}: tensor {t.name!r}", to, chunk_rows, progress, detokenize,
                        skip_special_tokens, (cast_to, where))
        if isinstance(output, (str, os.PathLike)) and os.fspath(output) != "-":
            from ..atomic import atomic_open

            with atomic_open(output) as stream:
                written = write(_Counter(stream))
            label = os.fspath(output)
        else:
            stream = sys.stdout.buffer if isinstance(output, (str, os.PathLike)) else output
            counter = _Counter(stream)
            written = write(counter)
            counter.flush()
            label = "-"
        return UnpackResult(label, t.name, to, t.n_rows, len(t), written)


def _first_then_rest(t, chunk_rows: int) -> Iterator:
    """The chunks of ``t``, the first one read before anything is written.

    Reading it validates the whole LoD and decodes the first rows, so a file
    that cannot be unpacked (an invalid LoD, a missing filter plugin) fails
    before a partial document reaches the output.
    """
    from ._pipe import read_ahead

    chunks = t.iter_chunks(max_rows=chunk_rows)
    first = next(chunks, None)
    if first is None:
        return iter(())
    # the next chunk is read in a second thread while this one is formatted (the formatter releases the GIL)
    return itertools.chain([first], read_ahead(chunks))


def _reporting(chunks: Iterator, t, progress: Callable[[int, int], None] | None) -> Iterator:
    """The chunks, calling ``progress(done, total)`` (bytes of rows) once each one has been written."""
    if progress is None:
        yield from chunks
        return
    row_bytes = t.row_bytes
    total, done = t.n_rows * row_bytes, 0
    for chunk in chunks:
        yield chunk
        done += int(chunk.shape[0]) * row_bytes
        progress(done, total)


def _writer(t, where: str, to: str, chunk_rows: int, progress: Callable[[int, int], None] | None,
            detokenize: bool, skip_special_tokens: bool, cast: tuple) -> Callable[[_Counter], int]:
    """``write(out)``: the tensor's chunks to ``out`` as ``to`` (cast by ``cast``, decoded to text with
    ``detokenize``); the bytes."""
    decoder = None
    if detokenize:  # a tensor without a tokenizer fails before the output is opened
        from ..text import decoder_for

        decoder = decoder_for(t.tokens, where)

    def write(out: _Counter) -> int:
        chunks = _reporting(_as_dtype(_first_then_rest(t, chunk_rows), *cast), t, progress)
        if decoder is not None:
            write_decoded(chunks, decoder, out, to=to, skip_special_tokens=skip_special_tokens)
        else:
            formats.get(to).write_stored(t, chunks, out)
        return out.count

    return write


def _as_dtype(chunks: Iterator, target: np.dtype | None, label: str) -> Iterator:
    """The chunks with their values cast to ``target`` (None: as they are); a value it cannot hold is refused,
    naming ``label`` (the tensor) and its row."""
    if target is None:
        yield from chunks
        return
    from ..io._values import cast_values
    from ..tensor import LoDTensor

    row = 0
    for chunk in chunks:
        data = cast_values(chunk.data, target, lambda r, start=row: f"{label}: row {start + r:,}: ")
        row += int(chunk.shape[0])
        yield LoDTensor(data, chunk.lod, level_names=chunk.level_names)


def _write_files(t, fmt, output, chunk_rows: int, progress: Callable[[int, int], None] | None,
                 level: int | None, cast: tuple) -> list[str]:
    """The chunks of ``t`` as the files of a multi-file format (nothing is published before the last one is in).

    A tensor of no sequence is passed as one empty chunk, so the files still
    say its dtype and levels.
    """
    from ._pipe import read_ahead

    copied = _copy_stored(t, fmt, output, progress, level, cast[0])
    if copied is not None:
        return copied
    chunks = read_ahead(t.iter_chunks(max_rows=chunk_rows)) if len(t) else iter([t.read()])
    return fmt.write_files(_reporting(_as_dtype(chunks, *cast), t, progress), output,
                           **({} if level is None else {"level": level}))


def _copy_stored(t, fmt, output, progress: Callable[[int, int], None] | None, level: int | None,
                 cast_to: np.dtype | None) -> list[str] | None:
    """A container's uncompressed tensor written as Megatron or fairseq with its tokens copied from the stored
    bytes (:func:`lodtool.container._copy.stored_copier`) beside the index of its validated LoD; None where that
    does not apply (another format or source, compressed data, a cast), nothing written."""
    from ..container._copy import stored_copier
    from ..container.reader import LazyTensor
    from ..io import megatron

    if fmt.name not in megatron.KINDS or not isinstance(t, LazyTensor) or t.element_shape or \
            (cast_to is not None and cast_to != t.dtype):
        return None
    copy = stored_copier(t)
    if copy is None:
        return None
    from ._operators import read_lod_only

    total = t.n_rows * t.dtype.itemsize
    tick = None if progress is None else (lambda done: progress(done, total))
    def validated_lod():  # read while the tokens are copied: nothing is published before both are done
        try:
            return read_lod_only(t)
        except LodValidationError as exc:  # named as every other read of the tensor names it
            raise t._problem_error(exc) from None

    return megatron.write_copied(validated_lod, lambda f: copy(f, tick), output, kind=fmt.name, level=level)


__all__ = ["unpack", "UnpackResult", "OUTPUT_FORMATS"]
