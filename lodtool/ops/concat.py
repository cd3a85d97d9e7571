"""``sequence_concat``: join several LoD tensors sequence by sequence.

As Paddle's ``sequence_concat`` (the op is gone from PaddlePaddle 3.3.1, so it
is checked against Paddle's kernel source and its documented example, see
``tests/test_ops_concat.py``): all inputs have the same number of top-level
sequences, and output sequence ``i`` is sequence ``i`` of the first input, then
sequence ``i`` of the second, and so on.  The output's offsets are the sums of
the inputs' offsets: LoDs ``[0, 3, 7]`` and ``[0, 7, 9]`` give ``[0, 10, 16]``.

Rules, as in Paddle: at least two inputs, each with a LoD, all with the same
number of sequences and the same dtype.  Every dtype and element shape is
accepted; the bytes of each row move as they are.

Where lodtool differs from Paddle:

* inputs with several LoD levels (all the same number of levels) are joined at
  the top level, and every level below comes along: sequence ``i`` of the output
  holds the sub-sequences of sequence ``i`` of each input, in input order.
  Paddle reads only the first level as row offsets, which is right for
  one-level inputs only;
* element shapes must be equal (Paddle checks only the row's size and takes the
  first input's shape, so ``(N, 2, 3)`` and ``(M, 6)`` would join there);
* every dtype is accepted (Paddle has float32, float64 and int64 kernels).

>>> import numpy as np
>>> from lodtool import LoDTensor
>>> a = LoDTensor(np.array([1, 2, 3]), recursive_sequence_lengths=[[1, 2]])
>>> b = LoDTensor(np.array([7, 8]), recursive_sequence_lengths=[[2, 0]])
>>> out = sequence_concat([a, b])
>>> out.data.tolist(), out.lod
([1, 7, 8, 2, 3], [[0, 3, 5]])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import LodDtypeError, LodShapeError
from ..tensor import LoDTensor
from . import _cuda
from ._backend import get_backend
from ._segments import copy_segments, gather_segments_cuda, segment_rows
from ._util import as_tensor, need_lod

OP = "sequence_concat"
_I64 = np.dtype(np.int64)


def sequence_concat(xs: Sequence[Any], *, backend: str | None = None, device: str | None = None) -> LoDTensor:
    """Join the tensors of ``xs`` sequence by sequence (Paddle's ``sequence_concat``).

    ``xs`` holds two or more :class:`~lodtool.LoDTensor` with the same number
    of LoD levels, top-level sequences, dtype and element shape.  ``backend``:
    ``"numba"`` (default) or ``"numpy"`` (the reference).  ``device="cuda"``
    (the default when any input lives on the GPU) runs there and returns device
    arrays.  Raises :class:`~lodtool.errors.LodShapeError` for inputs that do
    not fit and :class:`~lodtool.errors.LodDtypeError` for mixed dtypes.

    >>> import numpy as np
    >>> from lodtool import LoDTensor
    >>> x1 = LoDTensor(np.arange(7.0), [[0, 3, 7]])
    >>> x2 = LoDTensor(np.arange(9.0), [[0, 7, 9]])
    >>> sequence_concat([x1, x2]).lod
    [[0, 10, 16]]
    """
    if isinstance(xs, (LoDTensor, np.ndarray)) or not isinstance(xs, Sequence):
        raise LodShapeError(f"{OP}: xs must be a list of LoD tensors")
    ts = [as_tensor(x, f"xs[{j}]") for j, x in enumerate(xs)]
    check_concat(ts)
    arrays = tuple(a for t in ts for a in (t.data, *t.offsets))
    be = get_backend(arrays, backend, device)
    names = ts[0].level_names if all(t.level_names == ts[0].level_names for t in ts) else None
    if be.name == "cupy":
        return cuda_concat(be.xp, ts, names)
    return _concat(np, [np.asarray(t.data) for t in ts], [t.offsets for t in ts], be.name, names)


def cuda_concat(xp, ts: list[LoDTensor], names=None) -> LoDTensor:
    """On the GPU: every input's offsets validated there, one buffer of all inputs, one tiled gather."""
    levels = [_cuda.validate_offsets(xp, t.offsets, t.n_rows) for t in ts]
    datas = [_cuda.on_device(xp, t.data) for t in ts]
    return _concat(xp, datas, levels, "cupy", names)


def check_concat(xs: Sequence[Any]) -> None:
    """Raise what :func:`sequence_concat` raises for inputs that do not fit, from their sizes alone.

    Each input needs only ``lod_level``, ``num_sequences``, ``dtype`` and
    ``element_shape`` (a :class:`~lodtool.LoDTensor`, or a file's lazy tensor,
    checked before any data is read).

    >>> import numpy as np
    >>> from lodtool import LoDTensor
    >>> check_concat([LoDTensor(np.arange(3), [[0, 3]]), LoDTensor(np.arange(3.0), [[0, 3]])])
    Traceback (most recent call last):
    ...
    lodtool.errors.LodDtypeError: sequence_concat: xs[1] has dtype float64 but xs[0] has int64; ...
    """
    if len(xs) < 2:
        raise LodShapeError(f"{OP}: got {len(xs)} input(s); as in Paddle, it joins at least two")
    first = xs[0]
    for j, t in enumerate(xs):
        need_lod(t, OP, f"xs[{j}]")
        if t.lod_level != first.lod_level:
            raise LodShapeError(f"{OP}: xs[{j}] has {t.lod_level} LoD level(s) but xs[0] has {first.lod_level}; "
                                "the inputs must have the same number of levels")
        if t.num_sequences(0) != first.num_sequences(0):
            raise LodShapeError(f"{OP}: xs[{j}] has {t.num_sequences(0)} sequences but xs[0] has "
                                f"{first.num_sequences(0)}; the inputs must have the same number of sequences")
        if t.dtype != first.dtype:
            raise LodDtypeError(f"{OP}: xs[{j}] has dtype {t.dtype} but xs[0] has {first.dtype}; "
                                "the inputs must have the same dtype")
        if tuple(t.element_shape) != tuple(first.element_shape):
            raise LodShapeError(f"{OP}: xs[{j}] has rows of shape {tuple(t.element_shape)} but xs[0] has "
                                f"{tuple(first.element_shape)}; the inputs must have the same element shape")


def _positions(xp, offsets) -> list:
    """For each level below the top (the data rows last): where each top-level sequence starts and ends there."""
    pos = [offsets[0]]
    for below in offsets[1:]:
        pos.append(below[pos[-1]])
    return pos


def _segment_table(xp, starts: list):
    """Segments ``(i, j)`` in output order (sequence ``i`` of input ``j``): ``(lengths (n, m), offsets)``."""
    lens = xp.stack([s[1:] - s[:-1] for s in starts], axis=1)
    seg_off = xp.zeros(int(lens.size) + 1, _I64)
    if lens.size:
        xp.cumsum(lens.reshape(-1), out=seg_off[1:])
    return lens, seg_off


def _interleave(xp, arrays: list, starts: list, how: str):
    """Segment ``i`` of every array in turn, for ``i = 0, 1, ..``; segment ``i`` of ``arrays[j]``
    is ``arrays[j][starts[j][i]:starts[j][i+1]]``."""
    lens, seg_off = _segment_table(xp, starts)
    n, m = int(lens.shape[0]), len(arrays)
    total = int(_cuda.to_host(seg_off[-1:])[0])
    if how == "numpy":
        return _reference_gather(arrays, starts, lens)
    first = arrays[0]
    out = xp.empty((total,) + tuple(first.shape[1:]), first.dtype)
    if how == "numba":
        dst = seg_off[:-1].reshape(n, m)
        for j, (a, s) in enumerate(zip(arrays, starts)):
            copy_segments(a, s[:-1], np.ascontiguousarray(dst[:, j]), lens[:, j], out)
        return out
    # cupy: one buffer holding every input, then one tiled gather of all segments
    base = xp.zeros(m, _I64)
    sizes = xp.asarray(np.array([int(a.shape[0]) for a in arrays], _I64))
    xp.cumsum(sizes[:-1], out=base[1:])
    src = xp.concatenate([xp.ascontiguousarray(a) for a in arrays]) if total else first
    seg_start = (xp.stack([s[:-1] for s in starts], axis=1) + base[None, :]).reshape(-1)
    if total:
        gather_segments_cuda(xp, src, seg_start, seg_off, total, out)
    return out


def _reference_gather(arrays: list, starts: list, lens: np.ndarray) -> np.ndarray:
    """The plain NumPy specification: all inputs in one array, then one index of output rows."""
    sizes = np.array([len(a) for a in arrays], _I64)
    base = np.concatenate([[0], np.cumsum(sizes[:-1])]).astype(_I64)
    seg_start = (np.stack([s[:-1] for s in starts], axis=1) + base[None, :]).reshape(-1)
    return np.concatenate(arrays)[segment_rows(seg_start, lens.reshape(-1))]


def _concat(xp, datas: list, levels: list, how: str, names) -> LoDTensor:
    n_levels = len(levels[0])
    positions = [_positions(xp, lv) for lv in levels]
    # the top level: each output sequence holds the sub-sequences (or rows) of every input's sequence
    top = positions[0][0]
    counts = sum((p[0][1:] - p[0][:-1] for p in positions), xp.zeros(int(top.shape[0]) - 1, _I64))
    out_levels = [_offsets_of(xp, counts)]
    for lv in range(1, n_levels):  # the levels below: their lengths, interleaved like the data
        lengths = [off[lv][1:] - off[lv][:-1] for off in levels]
        out_levels.append(_offsets_of(xp, _interleave(xp, lengths, [p[lv - 1] for p in positions], how)))
    data = _interleave(xp, datas, [p[-1] for p in positions], how)
    return LoDTensor._trusted(data, tuple(out_levels), names)


def _offsets_of(xp, lengths):
    off = xp.zeros(int(lengths.shape[0]) + 1, _I64)
    if lengths.shape[0]:
        xp.cumsum(lengths, out=off[1:])
    return off


__all__ = ["check_concat", "sequence_concat"]
