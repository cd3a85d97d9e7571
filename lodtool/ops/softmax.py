"""``sequence_softmax``: softmax within each sequence of the last LoD level.

As Paddle's ``sequence_softmax`` (checked against PaddlePaddle 3.3, static
graph): the data must have one value per row (shape ``(N,)`` or ``(N, 1)``,
else :class:`~lodtool.errors.LodShapeError`), the output keeps the input's
shape and LoD, and empty sequences contribute nothing.  It is numerically
stable: each sequence's maximum is subtracted before ``exp``.

Dtypes: float32 and float64 keep theirs (as Paddle); float16 is computed in
float32 and rounded back; bool and integers, which Paddle refuses, are
promoted to float64 (as NumPy's true division promotes them); complex data is a
:class:`~lodtool.errors.LodDtypeError`.  A NaN in a sequence makes that whole
sequence NaN.

>>> import numpy as np
>>> from lodtool import LoDTensor
>>> x = LoDTensor(np.array([0.0, 1.0, 0.0, 1.0, 2.0]), recursive_sequence_lengths=[[2, 0, 3]])
>>> np.round(sequence_softmax(x).data, 4).tolist()
[0.2689, 0.7311, 0.09, 0.2447, 0.6652]
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._jit import kernel, parallel_blocks
from ..errors import LodDtypeError
from ..tensor import LoDTensor
from . import _cuda
from ._backend import Crossover, get_backend
from ._util import U, as_tensor, need_lod, need_one_value_per_row

#: bound to ``numba.cuda`` in the CUDA kernels' globals when they compile (see _cuda.jit_kernels)
cuda: Any = None

OP = "sequence_softmax"
_PADDLE_WIDTH = "; as in Paddle, the width of each time step must be 1"


#: work (elements) from which the Numba kernel beats the reference (docs/benchmarks.md, crossovers)
NUMBA_FROM = Crossover(cold=1 << 24, warm=1 << 10)



def softmax_dtype(dtype) -> np.dtype:
    """The output dtype of ``sequence_softmax`` for ``dtype`` data.

    >>> str(softmax_dtype(np.int32)), str(softmax_dtype(np.float32))
    ('float64', 'float32')
    """
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return dtype
    if dtype.kind in "biu":
        return np.dtype(np.float64)
    raise LodDtypeError(f"{OP}: {dtype} data is not supported; use real (float or integer) data")


def sequence_softmax(x: LoDTensor, *, backend: str | None = None, device: str | None = None) -> LoDTensor:
    """Softmax over the rows of each last-level sequence (Paddle's ``sequence_softmax``).

    ``backend``: ``"numba"`` (default) or ``"numpy"`` (the reference).
    ``device="cuda"`` (the default for CuPy data or offsets) runs on the GPU;
    its ``exp`` is the device's, so results match within a few ulp.

    >>> import numpy as np
    >>> from lodtool import LoDTensor
    >>> x = LoDTensor(np.array([[1.0], [1.0], [5.0]], np.float32), recursive_sequence_lengths=[[2, 1]])
    >>> sequence_softmax(x).data.ravel().tolist()
    [0.5, 0.5, 1.0]
    """
    xt = as_tensor(x, "x")
    need_lod(xt, OP)
    need_one_value_per_row(xt.element_shape, OP, why=_PADDLE_WIDTH)
    out_dtype = softmax_dtype(xt.dtype)
    be = get_backend((xt.data, *xt.offsets), backend, device, work=xt.data.size, crossover=NUMBA_FROM)
    if be.name == "cupy":  # every level checked on the device; the result's offsets live there too
        levels = _cuda.validate_offsets(be.xp, xt.offsets, xt.n_rows)
        return LoDTensor._trusted(cuda_softmax(be.xp, xt.data, levels[-1], validated=True), levels, xt.level_names)
    work = np.float32 if out_dtype == np.float16 else out_dtype
    flat = np.ascontiguousarray(xt.data).reshape(-1).astype(work, copy=False)
    off = xt.offsets[-1]
    if be.name == "numpy":
        out = _reference(flat, off)
    else:
        out = np.empty_like(flat)
        _softmax(len(off) - 1, flat, off.view(np.uint64), out)
    out = out.astype(out_dtype, copy=False).reshape(xt.shape)
    return LoDTensor._trusted(out, xt.offsets, xt.level_names)


def _reference(flat: np.ndarray, off: np.ndarray) -> np.ndarray:
    """The plain NumPy implementation (the specification the kernels are tested against)."""
    lens = off[1:] - off[:-1]
    full = lens > 0
    starts = off[:-1][full]
    if not starts.size:
        return flat.copy()
    counts = lens[full]
    with np.errstate(over="ignore", invalid="ignore"):  # inf and NaN come out as they do in the kernel
        peak = np.maximum.reduceat(flat, starts)
        e = np.exp(flat - np.repeat(peak, counts))
        total = np.add.reduceat(e.astype(np.float64), starts)
        return (e / np.repeat(total, counts)).astype(flat.dtype, copy=False)


@parallel_blocks
def _softmax(lo, hi, blk, x, off, out):  # pragma: no cover - compiled by Numba
    """Each sequence ``x[off[i]:off[i+1]]`` through :func:`_softmax_seq` (see the kernel notes in expand.py)."""
    one = U(1)
    for i in range(lo, hi):
        _softmax_seq(x, off[i], off[i + one], out)


@kernel(inline="always")
def _softmax_seq(x, a, b, out):  # pragma: no cover - compiled (CPU and CUDA)
    """Stable softmax of ``x[a:b]`` into ``out[a:b]``; the sum accumulates in float64."""
    if a == b:
        return
    peak = x[a]
    for r in range(a, b):
        v = x[r]
        if v > peak or v != v:  # NaN wins, as in np.maximum
            peak = v
    total = 0.0
    for r in range(a, b):
        e = math.exp(x[r] - peak)
        out[r] = e
        total += e
    for r in range(a, b):
        out[r] = out[r] / total


def _softmax_dev(x, off, n, out):  # pragma: no cover - CUDA kernel
    """One thread a sequence."""
    i = np.int64(cuda.grid(1))
    stride = np.int64(cuda.gridsize(1))
    while i < n:
        _softmax_seq(x, off[i], off[i + 1], out)
        i += stride


# -- the CUDA launcher (lodtool.ops._cuda holds the shared device primitives) --------------------------------
def cuda_softmax(xp, data: Any, offsets: Any, *, validated: bool = False):
    """``sequence_softmax`` on the device (one value per row), dtypes as ``softmax_dtype``.

    Stable (the sequence's maximum is subtracted), sums in float64; equal to
    the CPU kernel within a few ulp (the device's ``exp`` differs from the host's).

    >>> import cupy as cp  # doctest: +SKIP
    >>> cuda_softmax(cp, cp.array([1.0, 1.0, 5.0]), [0, 2, 3]).tolist()  # doctest: +SKIP
    [0.5, 0.5, 1.0]
    """
    data = _cuda.on_device(xp, data)
    need_one_value_per_row(data.shape[1:], OP, why=_PADDLE_WIDTH)
    out_dtype = softmax_dtype(data.dtype)
    work = np.dtype(np.float32) if out_dtype == np.float16 else out_dtype
    off = _cuda.level_offsets(xp, offsets, int(data.shape[0]), validated)
    flat = xp.ascontiguousarray(data.reshape(-1).astype(work, copy=False))
    out = xp.empty_like(flat)
    n = int(off.shape[0]) - 1
    if n and flat.size:
        _cuda.launch(xp, _cuda.jit_kernels([_softmax_dev], [_softmax_seq.py_func]).softmax_dev, _cuda.grid(n), flat,
                     off, n, out)
    return out.astype(out_dtype, copy=False).reshape(data.shape)


__all__ = ["sequence_softmax", "softmax_dtype", "cuda_softmax"]
