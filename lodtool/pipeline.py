"""Operators on files: read a container, run an operator, write a container.

This is the one place where :mod:`lodtool.format` and :mod:`lodtool.ops` meet
(neither imports the other).  Operators that work sequence by sequence (pool,
softmax, reverse) stream over chunks of whole top-level sequences, so files
larger than memory work; the output is written through the atomic writer.

``device="cuda"`` runs the operator on the GPU: each chunk goes to the device,
through the CUDA kernels, and back to the host for writing.  Without CuPy or a
GPU it fails at once, before any data is read, with a one-line
:class:`~lodtool.errors.LodBackendError`.

>>> import os, tempfile, numpy as np
>>> from lodtool import LoDTensor, save, load
>>> d = tempfile.mkdtemp()
>>> save(os.path.join(d, "x.h5"), LoDTensor(np.arange(5.0), [[0, 2, 5]]))
>>> _ = pool_file(os.path.join(d, "x.h5"), os.path.join(d, "sum.h5"), pool_type="sum")
>>> load(os.path.join(d, "sum.h5")).data.tolist()
[1.0, 9.0]
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .errors import LodUsageError
from .lod import validate_lod
from .tensor import LoDTensor

#: rows per chunk for the streaming operators
CHUNK_ROWS = 1 << 22


@dataclass
class OpResult:
    """What an operator wrote: the output, the tensor name and its size."""

    output: str
    name: str
    rows: int
    sequences: int
    lod_level: int
    dtype: str


def _check_device(device: str, op: str) -> None:
    """Fail early (before reading anything) when ``device`` cannot run ``op``."""
    from .ops import get_backend

    get_backend(None, None, device, op=op)


def _open_tensor(path: str, name: str | None, max_memory: int | None):
    from .format.container import open_file

    f = open_file(path, max_memory=max_memory)
    return f, f.tensor(name)


def _stream(path: str, output: str, name: str | None, out_name: str | None, fn: Callable[[LoDTensor], LoDTensor],
            *, compression: str | None, max_memory: int | None, chunk_rows: int = CHUNK_ROWS) -> OpResult:
    """Apply ``fn`` to each chunk of whole top-level sequences and append the results."""
    from .format.container import LodWriter

    f, t = _open_tensor(path, name, max_memory)
    with f:
        name_out = out_name or t.name
        writer_kwargs = {"compression": compression} if compression else {}
        rows = seqs = 0
        with LodWriter(output, **writer_kwargs) as w:
            tw = None
            for chunk in t.iter_chunks(max_rows=chunk_rows):
                result = fn(chunk)
                if tw is None:
                    names = result.level_names if result.level_names else None
                    tw = w.add_tensor(name_out, dtype=result.dtype, element_shape=result.element_shape,
                                      lod_level=result.lod_level, level_names=names)
                tw.append(result)
                rows += result.shape[0]
                seqs += len(result)
                last = result
        return OpResult(str(output), name_out, rows, seqs, last.lod_level, str(last.dtype))


def pool_file(path: str, output: str, *, pool_type: str = "sum", name: str | None = None,
              out_name: str | None = None, pad_value: float = 0.0, compression: str | None = None,
              max_memory: int | None = None, device: str = "cpu") -> OpResult:
    """``sequence_pool`` over a container, streamed by top-level sequences."""
    from .ops import sequence_pool

    _check_device(device, "sequence_pool")
    return _stream(path, output, name, out_name,
                   lambda c: sequence_pool(c, pool_type, pad_value=pad_value, device=device).to("cpu"),
                   compression=compression, max_memory=max_memory)


def softmax_file(path: str, output: str, *, name: str | None = None, out_name: str | None = None,
                 compression: str | None = None, max_memory: int | None = None, device: str = "cpu") -> OpResult:
    """``sequence_softmax`` over a container, streamed by top-level sequences."""
    from .ops import sequence_softmax

    _check_device(device, "sequence_softmax")
    return _stream(path, output, name, out_name, lambda c: sequence_softmax(c, device=device).to("cpu"),
                   compression=compression, max_memory=max_memory)


def reverse_file(path: str, output: str, *, name: str | None = None, out_name: str | None = None,
                 compression: str | None = None, max_memory: int | None = None, device: str = "cpu") -> OpResult:
    """``sequence_reverse`` over a container, streamed by top-level sequences."""
    from .ops import sequence_reverse

    _check_device(device, "sequence_reverse")
    return _stream(path, output, name, out_name, lambda c: sequence_reverse(c, device=device).to("cpu"),
                   compression=compression, max_memory=max_memory)


def read_lod_only(lazy) -> LoDTensor:
    """A tensor with the file's LoD and a zero-cost stand-in for its data (never read).

    ``sequence_expand`` reads only y's LoD; the stand-in is a broadcast view of
    one element, so no data is read or allocated.
    """
    offsets = [lazy.read_offsets(level) for level in range(lazy.lod_level)]
    validate_lod(offsets, lazy.n_rows)
    stand_in = np.broadcast_to(np.zeros((1,) + tuple(lazy.element_shape), lazy.dtype),
                               (lazy.n_rows,) + tuple(lazy.element_shape))
    return LoDTensor._trusted(stand_in, offsets, lazy.level_names)


def expand_file(x: str, y: str, output: str, *, x_name: str | None = None, y_name: str | None = None,
                ref_level: int = -1, out_name: str | None = None, compression: str | None = None,
                max_memory: int | None = None, device: str = "cpu") -> OpResult:
    """``sequence_expand`` of tensor ``x`` by the LoD of tensor ``y`` (y's data is never read)."""
    from .format.container import save
    from .ops import sequence_expand

    _check_device(device, "sequence_expand")
    fy, ty = _open_tensor(y, y_name, max_memory)
    with fy:
        y_lod = read_lod_only(ty)
    fx, tx = _open_tensor(x, x_name, max_memory)
    with fx:
        xt = tx.read()
        name_out = out_name or tx.name
    result = sequence_expand(xt, y_lod, ref_level=ref_level, device=device).to("cpu")
    kwargs = {"compression": compression} if compression else {}
    save(output, {name_out: result}, **kwargs)
    return OpResult(str(output), name_out, result.shape[0], len(result), result.lod_level, str(result.dtype))


def pad_file(path: str, output, *, name: str | None = None, pad_value: float = 0, maxlen: int | None = None,
             level: int = -1, max_memory: int | None = None, device: str = "cpu") -> dict:
    """``sequence_pad`` of a container's tensor into an NPZ of ``padded``, ``lengths`` and ``mask``."""
    from .format.atomic import atomic_path
    from .ops import sequence_mask, sequence_pad

    _check_device(device, "sequence_pad")
    f, t = _open_tensor(path, name, max_memory)
    with f:
        x = t.read()
    padded, lengths = (_to_host(a) for a in sequence_pad(x, pad_value=pad_value, maxlen=maxlen, level=level,
                                                         device=device))
    mask = sequence_mask(lengths, padded.shape[1])
    arrays = {"padded": padded, "lengths": np.asarray(lengths), "mask": mask}
    if isinstance(output, (str, os.PathLike)):
        with atomic_path(output) as tmp, open(tmp, "wb") as stream:
            np.savez(stream, **arrays)
    else:
        np.savez(output, **arrays)
    return {"output": str(output) if isinstance(output, (str, os.PathLike)) else "-",
            "shape": list(padded.shape), "sequences": int(padded.shape[0]), "maxlen": int(padded.shape[1])}


def unpad_file(npz: str, output: str, *, name: str = "tensor", compression: str | None = None,
               device: str = "cpu") -> OpResult:
    """``sequence_unpad`` of an NPZ holding ``padded`` and ``lengths`` into a container."""
    from .format.container import save
    from .format.npyio import load_npz_arrays
    from .ops import sequence_unpad

    _check_device(device, "sequence_unpad")
    arrays = load_npz_arrays(npz, required=("padded", "lengths"))
    result = sequence_unpad(arrays["padded"], arrays["lengths"], device=device).to("cpu")
    kwargs = {"compression": compression} if compression else {}
    save(output, {name: result}, **kwargs)
    return OpResult(str(output), name, result.shape[0], len(result), result.lod_level, str(result.dtype))


def pack_plan_file(path: str, *, name: str | None = None, level: int = -1, max_memory: int | None = None,
                   device: str = "cpu"):
    """The RNN packing plan of a level, from the offsets alone (its arrays on the host)."""
    from .ops import pack_plan

    _check_device(device, "pack_plan")
    f, t = _open_tensor(path, name, max_memory)
    with f:
        lod_only = read_lod_only(t)
    if not lod_only.lod_level:
        raise LodUsageError("a 0-level tensor has no sequences to plan")
    return pack_plan(lod_only, level=level, device=device).to("cpu")


def _to_host(a):
    """A device array's host copy (CuPy's ``.get()``); a host array as it is."""
    return a.get() if hasattr(a, "__cuda_array_interface__") else a
