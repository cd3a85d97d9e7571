"""``sequence_reverse``: reverse the rows of each sequence of the last LoD level.

As Paddle's ``sequence_reverse``: the LoD (all levels) and the shape are
unchanged, only the order of the rows inside each last-level sequence flips.
Every dtype and element shape is accepted; the bytes of each row move as they are.

>>> import numpy as np
>>> from lodtool import LoDTensor
>>> x = LoDTensor(np.arange(5), recursive_sequence_lengths=[[2, 0, 3]])
>>> sequence_reverse(x).data.tolist()
[1, 0, 4, 3, 2]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._jit import parallel_blocks
from ..tensor import LoDTensor
from . import _cuda
from ._backend import Crossover, get_backend
from ._util import U, as_tensor, as_words, empty_words, need_lod

OP = "sequence_reverse"


#: work (elements) from which the Numba kernel beats the reference (docs/benchmarks.md, crossovers)
NUMBA_FROM = Crossover(cold=1 << 25, warm=1 << 14)



def sequence_reverse(x: LoDTensor, *, backend: str | None = None, device: str | None = None) -> LoDTensor:
    """Reverse the rows within each last-level sequence; the LoD is kept.

    ``backend``: ``"numba"`` (default) or ``"numpy"`` (the reference).
    ``device="cuda"`` (the default for CuPy data or offsets) runs on the GPU
    and moves the same bytes.

    >>> import numpy as np
    >>> from lodtool import LoDTensor
    >>> x = LoDTensor(np.arange(6).reshape(3, 2), recursive_sequence_lengths=[[1], [3]])
    >>> sequence_reverse(x).data.tolist(), sequence_reverse(x).lod
    ([[4, 5], [2, 3], [0, 1]], [[0, 1], [0, 3]])
    """
    xt = as_tensor(x, "x")
    need_lod(xt, OP)
    off = xt.offsets[-1]
    be = get_backend((xt.data, *xt.offsets), backend, device, work=xt.data.size, crossover=NUMBA_FROM)
    if be.name == "cupy":  # every level checked on the device; the result's offsets live there too
        levels = _cuda.validate_offsets(be.xp, xt.offsets, xt.n_rows)
        return LoDTensor._trusted(cuda_reverse(be.xp, xt.data, levels[-1], validated=True), levels, xt.level_names)
    if be.name == "numpy":
        data = _reference(np.asarray(xt.data), off)
    else:
        xw, k = as_words(xt.data)
        data, outw = empty_words(xt.n_rows, xt.data, xw.dtype)
        if k:
            _reverse(len(off) - 1, xw, U(k), off.view(np.uint64), outw)
    return LoDTensor._trusted(data, xt.offsets, xt.level_names)


def _reference(data: np.ndarray, off: np.ndarray) -> np.ndarray:
    """The plain NumPy implementation: row ``r`` of a sequence ``[a, b)`` comes from ``a + b - 1 - r``."""
    lens = off[1:] - off[:-1]
    rows = np.arange(len(data), dtype=np.int64)
    mirror = np.repeat(off[:-1] + off[1:] - 1, lens)
    return data[mirror - rows]


@parallel_blocks
def _reverse(lo, hi, blk, xw, k, off, outw):  # pragma: no cover - compiled by Numba
    """Rows ``off[i]..off[i+1]`` (``k`` words each) in reverse order (see the kernel notes in expand.py)."""
    one = U(1)
    for i in range(lo, hi):
        a = off[i]
        b = off[i + one]
        if k == one:
            for t in range(b - a):
                outw[a + t] = xw[b - one - t]
        else:
            for t in range(b - a):
                src = (b - one - t) * k
                dst = (a + t) * k
                for j in range(k):
                    outw[dst + j] = xw[src + j]



# -- the CUDA launcher (lodtool.ops._cuda holds the shared device primitives) --------------------------------
def cuda_reverse(xp, data: Any, offsets: Any, *, validated: bool = False):
    """``sequence_reverse`` on the device: the rows of each sequence of ``offsets`` reversed.

    >>> import cupy as cp  # doctest: +SKIP
    >>> cuda_reverse(cp, cp.arange(5), [0, 2, 2, 5]).tolist()  # doctest: +SKIP
    [1, 0, 4, 3, 2]
    """
    data = _cuda.on_device(xp, data)
    n_rows = int(data.shape[0])
    off = _cuda.level_offsets(xp, offsets, n_rows, validated)
    xw, k = _cuda.device_words(xp, data)
    out = xp.empty(data.shape, data.dtype)
    outw, _ = _cuda.device_words(xp, out, xw.dtype)
    _cuda.gather_rows(xp, xw, k, off, int(off.shape[0]) - 1, n_rows, outw, mode=_cuda.MODE_REV)
    return out


__all__ = ["sequence_reverse", "cuda_reverse"]
