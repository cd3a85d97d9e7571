"""``sequence_slice``: a sub-sequence of each sequence, by a per-sequence offset and length.

As Paddle's ``sequence_slice`` (the op is gone from PaddlePaddle 3.3.1, so it is
checked against Paddle's kernel source, its documented example and the cases of
its unit test, see ``tests/test_ops_seq_slice.py``): sequence ``i`` of the
output is rows ``offset[i] .. offset[i] + length[i]`` of sequence ``i`` of
``x``, so the output's lengths are ``length``.  ``offset`` and ``length`` hold
one integer per sequence, shaped ``(n,)`` or ``(n, 1)`` as Paddle's are; a
negative value, or a slice running past its sequence's end, is an error (as in
Paddle).  Every dtype and element shape is accepted; the bytes of each row
move as they are.

Where lodtool differs from Paddle:

* ``x`` may have several LoD levels.  The sequences of the last level are
  sliced and the levels above are kept (their sequence counts do not change);
  Paddle accepts one level only;
* ``offset`` and ``length`` may be 1-D and of any integer dtype (Paddle: int64
  of shape ``(n, 1)``), and every data dtype is accepted (Paddle: float32,
  float64, int32, int64).

This is not ``lodtool slice`` / :meth:`LoDTensor.slice_level`, which select
whole sequences; ``sequence_slice`` cuts inside every sequence.

>>> import numpy as np
>>> from lodtool import LoDTensor
>>> x = LoDTensor(np.arange(10).reshape(5, 2), [[0, 3, 5]])
>>> out = sequence_slice(x, offset=[0, 1], length=[2, 1])
>>> out.data.tolist(), out.lod
([[0, 1], [2, 3], [8, 9]], [[0, 2, 3]])
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import LodDtypeError, LodIndexError, LodShapeError
from ..tensor import LoDTensor
from . import _cuda
from ._backend import get_backend
from ._segments import copy_segments, gather_segments_cuda, segment_rows
from ._util import as_tensor, need_lod

OP = "sequence_slice"
_I64 = np.dtype(np.int64)


def sequence_slice(x: LoDTensor, offset: Any, length: Any, *, backend: str | None = None,
                   device: str | None = None) -> LoDTensor:
    """Rows ``offset[i] .. offset[i]+length[i]`` of each last-level sequence ``i`` (Paddle's ``sequence_slice``).

    ``offset`` and ``length``: one non-negative integer per sequence (a list or
    an integer array of shape ``(n,)`` or ``(n, 1)``).  ``backend``:
    ``"numba"`` (default) or ``"numpy"`` (the reference).  ``device="cuda"``
    (the default when the data or offsets are CuPy arrays) runs on the GPU.
    Raises :class:`~lodtool.errors.LodShapeError` for a count that does not
    fit, :class:`~lodtool.errors.LodIndexError` for a slice outside its
    sequence, :class:`~lodtool.errors.LodDtypeError` for non-integer offsets.

    >>> import numpy as np
    >>> from lodtool import LoDTensor
    >>> x = LoDTensor(np.arange(6), recursive_sequence_lengths=[[4, 0, 2]])
    >>> out = sequence_slice(x, [1, 0, 0], [2, 0, 1])
    >>> out.data.tolist(), out.recursive_sequence_lengths
    ([1, 2, 4], [[2, 0, 1]])
    """
    xt = as_tensor(x, "x")
    need_lod(xt, OP)
    n = xt.num_sequences(xt.lod_level - 1)
    be = get_backend((xt.data, *xt.offsets) + _device_parts(offset, length), backend, device)
    if be.name == "cupy":
        return cuda_slice(be.xp, xt, offset, length, n)
    off = xt.offsets[-1]
    start, lens = _check(np, off, _as_counts(np, offset, "offset", n), _as_counts(np, length, "length", n))
    out_off = _offsets_of(np, lens)
    data = np.asarray(xt.data)
    total = int(out_off[-1])
    if be.name == "numpy":
        out = data[segment_rows(start, lens)]
    else:
        out = np.empty((total,) + data.shape[1:], data.dtype)
        copy_segments(data, start, out_off[:-1], lens, out)
    return LoDTensor._trusted(out, xt.offsets[:-1] + (out_off,), xt.level_names)


def _device_parts(*values) -> tuple:
    return tuple(v for v in values if hasattr(v, "__cuda_array_interface__"))


def _as_counts(xp, values: Any, what: str, n: int):
    """``values`` as a 1-D int64 array of ``n`` entries (``(n,)`` or ``(n, 1)`` accepted)."""
    on_device = hasattr(values, "__cuda_array_interface__")
    arr = values if on_device else np.asarray(values)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim != 1:
        raise LodShapeError(f"{OP}: {what} must have shape (n,) or (n, 1), got {tuple(arr.shape)}")
    if arr.dtype.kind not in "iu" and (arr.size or arr.dtype.kind != "f"):  # [] is float64: allowed
        raise LodDtypeError(f"{OP}: {what} must hold integers, got dtype {arr.dtype}")
    if int(arr.shape[0]) != n:
        raise LodShapeError(f"{OP}: {what} has {int(arr.shape[0])} entries but x has {n} sequences; "
                            "as in Paddle, it needs one per sequence")
    if arr.dtype == np.uint64 and arr.size and int(_cuda.to_host(arr.max())) > np.iinfo(np.int64).max:
        raise LodIndexError(f"{OP}: {what} holds values beyond int64")
    return xp.ascontiguousarray(xp.asarray(arr).astype(_I64, copy=False))


def _check(xp, off, offset, lens):
    """``(start row of each slice, lengths)``, after Paddle's checks (one transfer on a device)."""
    n = int(lens.shape[0])
    if n == 0:
        return off[:-1], lens
    seq_len = off[1:] - off[:-1]
    bad_offset = offset < 0
    bad_length = lens < 0
    past = offset + lens > seq_len
    flags = _cuda.to_host(xp.stack([bad_offset.any(), bad_length.any(), past.any()]))
    if flags.any():
        if flags[0]:
            i = int(_cuda.to_host(xp.argmax(bad_offset)))
            raise LodIndexError(f"{OP}: offset[{i}]={int(_cuda.to_host(offset[i]))} is negative")
        if flags[1]:
            i = int(_cuda.to_host(xp.argmax(bad_length)))
            raise LodIndexError(f"{OP}: length[{i}]={int(_cuda.to_host(lens[i]))} is negative")
        i = int(_cuda.to_host(xp.argmax(past)))
        o, m, s = (int(_cuda.to_host(a[i])) for a in (offset, lens, seq_len))
        raise LodIndexError(f"{OP}: sequence {i} has {s} rows, but offset {o} + length {m} = {o + m} runs past "
                            "its end")
    return off[:-1] + offset, lens


def _offsets_of(xp, lens):
    out = xp.zeros(int(lens.shape[0]) + 1, _I64)
    if lens.shape[0]:
        xp.cumsum(lens, out=out[1:])
    return out


def cuda_slice(xp, xt: LoDTensor, offset: Any, length: Any, n: int) -> LoDTensor:
    """On the GPU: the offsets validated there, the checks there, one tiled gather of the slices."""
    levels = _cuda.validate_offsets(xp, xt.offsets, xt.n_rows)
    start, lens = _check(xp, levels[-1], _as_counts(xp, offset, "offset", n), _as_counts(xp, length, "length", n))
    out_off = _offsets_of(xp, lens)
    data = _cuda.on_device(xp, xt.data)
    total = int(_cuda.to_host(out_off[-1:])[0])
    out = xp.empty((total,) + tuple(data.shape[1:]), data.dtype)
    if total:
        gather_segments_cuda(xp, data, start, out_off, total, out)
    return LoDTensor._trusted(out, tuple(levels[:-1]) + (out_off,), xt.level_names)


__all__ = ["sequence_slice"]
