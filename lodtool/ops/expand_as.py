"""``sequence_expand_as``: repeat row ``i`` of ``x`` as many times as sequence ``i`` of ``y`` is long.

As Paddle's ``sequence_expand_as`` (the op is gone from PaddlePaddle 3.3.1, so
it is checked against Paddle's kernel source, its documented cases and the
cases of its unit test, see ``tests/test_ops_expand_as.py``): ``x`` has one row
per sequence of ``y``; row ``i`` is repeated ``len_i`` times, where ``len_i`` is
the length of ``y``'s sequence ``i``, and the output takes ``y``'s LoD.
``x``'s own LoD, if any, is not considered, and ``y``'s data is never read.
Every dtype and element shape is accepted; the bytes of each row move as they are.

Where lodtool differs from Paddle:

* ``y`` may have several LoD levels: ``x`` then has one row per sequence of
  ``y``'s last level, and the output takes all of ``y``'s levels (Paddle
  accepts a one-level ``y`` only);
* ``x`` may be 1-D (Paddle asks for at least 2 dimensions), and of any dtype
  (Paddle: float32, float64, int32, int64).

>>> import numpy as np
>>> from lodtool import LoDTensor
>>> y = LoDTensor(np.zeros(8), [[0, 3, 6, 7, 8]])
>>> out = sequence_expand_as(np.array([[1], [2], [3], [4]]), y)
>>> out.data.ravel().tolist(), out.lod
([1, 1, 1, 2, 2, 2, 3, 4], [[0, 3, 6, 7, 8]])
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import LodShapeError
from ..tensor import LoDTensor
from . import _cuda
from ._backend import get_backend
from ._util import U, as_tensor, as_words, empty_words, need_lod
from .expand import _expand_rows, cuda_expand

OP = "sequence_expand_as"


def sequence_expand_as(x: Any, y: LoDTensor, *, backend: str | None = None, device: str | None = None) -> LoDTensor:
    """Expand the rows of ``x`` by the lengths of ``y``'s last-level sequences (Paddle's ``sequence_expand_as``).

    ``x`` is an array or a :class:`~lodtool.LoDTensor` (its LoD is ignored)
    with one row per sequence of ``y``'s last level; ``y`` is a
    :class:`~lodtool.LoDTensor` whose data is never read.  The output has
    ``y``'s LoD.  ``backend``: ``"numba"`` (default) or ``"numpy"`` (the
    reference).  ``device="cuda"`` (the default for CuPy inputs) runs on the GPU.
    Raises :class:`~lodtool.errors.LodShapeError` when the counts do not fit.

    >>> import numpy as np
    >>> from lodtool import LoDTensor
    >>> y = LoDTensor(np.zeros(6), recursive_sequence_lengths=[[2, 1, 3]])
    >>> sequence_expand_as(np.array([[1, 2], [3, 4], [5, 6]]), y).data.tolist()
    [[1, 2], [1, 2], [3, 4], [5, 6], [5, 6], [5, 6]]
    """
    xt = as_tensor(x, "x")
    yt = as_tensor(y, "y")
    need_lod(yt, OP, "y")
    count = yt.num_sequences(yt.lod_level - 1)
    if xt.n_rows != count:
        raise LodShapeError(f"{OP}: x has {xt.n_rows} rows but y's last level has {count} sequences; "
                            "x needs one row per sequence of y")
    be = get_backend((xt.data, *yt.offsets), backend, device)
    if be.name == "cupy":
        return cuda_expand_as(be.xp, xt, yt)
    ref = yt.offsets[-1]
    if be.name == "numpy":
        out = _reference(np.asarray(xt.data), ref)
    else:
        xw, k = as_words(xt.data)
        out, outw = empty_words(int(ref[-1]), xt.data, xw.dtype)
        if k:
            _expand_rows(len(ref) - 1, xw, U(k), ref.view(np.uint64), outw)
    return LoDTensor._trusted(out, yt.offsets, yt.level_names)


def cuda_expand_as(xp, xt: LoDTensor, yt: LoDTensor) -> LoDTensor:
    """On the GPU: y's levels checked there (the output's live there too), then the rows case of
    :func:`~lodtool.ops.expand.cuda_expand` by y's last level."""
    levels = _cuda.validate_offsets(xp, yt.offsets, yt.n_rows)
    out, _ = cuda_expand(xp, xt.data, None, levels[-1], validated=True)
    return LoDTensor._trusted(out, levels, yt.level_names)


def _reference(data: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """The plain NumPy specification: row ``i`` repeated ``ref[i+1] - ref[i]`` times."""
    return np.repeat(data, ref[1:] - ref[:-1], axis=0)


__all__ = ["sequence_expand_as"]
