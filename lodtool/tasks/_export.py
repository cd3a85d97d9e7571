"""Write one in-memory tensor to any output lodtool knows: a container, JSON, JSON Lines, NPZ, a token dataset.

``slice``, ``head`` and ``tail`` use this, so their output composes with ``jq``
and with ``lodtool pack -`` exactly as ``unpack``'s does.
"""

from __future__ import annotations

import os
from typing import BinaryIO

from .. import io as formats
from ..errors import LodUsageError
from ..tensor import LoDTensor

#: the container, then every interchange format lodtool writes
TARGETS = ("h5", *formats.writable())


def export(tensor: LoDTensor, output: str | os.PathLike | BinaryIO, *, to: str, name: str = "tensor",
           compression: str | None = None, overwrite: bool = False, force: bool = False, tokens=None,
           decoder=None, level: int | None = None) -> None:
    """Write ``tensor`` to a path (atomically) or a binary stream, as ``to``.

    A container (``to="h5"``) follows :func:`~lodtool.container.writer.save`'s
    rule for an existing file (``overwrite``, ``force``), and records ``tokens``
    (:class:`~lodtool.tokens.TokenInfo`) with the tensor; a format written as
    several files (``megatron`` ...) names them from the path ``output``, and stores the sequences of
    ``level`` (the levels under it flattened into their tokens; a format that keeps every level refuses
    ``level``).  With a ``decoder``
    (:func:`lodtool.text.decoder_for`) the ids are written as text, ``jsonl`` or ``json``
    (:func:`lodtool.io.text.write_decoded`).

    >>> import io, numpy as np
    >>> buf = io.BytesIO()
    >>> export(LoDTensor(np.arange(3), [[0, 2, 3]]), buf, to="jsonl")
    >>> buf.getvalue().decode()
    '[0,1]\\n[2]\\n'
    """
    if to not in TARGETS:
        raise LodUsageError(f"unknown output format {to!r}; choose one of {', '.join(TARGETS)}")
    if to == "h5":
        if level is not None:
            raise LodUsageError("level=... chooses the level a token format stores; a container keeps every level")
        if not isinstance(output, (str, os.PathLike)):
            raise LodUsageError("a container is written to a path")
        from ..container.writer import save

        kwargs = {"compression": compression} if compression else {}
        save(output, {name: tensor}, overwrite=overwrite, force=force, tokens={name: tokens} if tokens else None,
             **kwargs)
        return
    fmt = formats.get(to)
    if fmt.writes_files:  # several files named from the path (PREFIX.bin + PREFIX.idx), together
        fmt.write_files([tensor], output, level=level)
        return
    fmt.check_write_options({"level": level})
    if decoder is not None:
        from ..io.text import write_decoded

        def write(t, stream):
            write_decoded([t], decoder, stream, to=to)
    else:
        write = fmt.write
    if isinstance(output, (str, os.PathLike)):
        from ..atomic import atomic_path

        with atomic_path(output) as tmp, open(tmp, "wb") as stream:
            write(tensor, stream)
    else:
        write(tensor, output)


__all__ = ["export", "TARGETS"]
