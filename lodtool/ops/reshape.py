"""``sequence_reshape``: give the rows a new width; each sequence keeps its values, in order.

As Paddle's ``sequence_reshape`` (the op is gone from PaddlePaddle 3.3.1, so it
is checked against Paddle's kernel source, its documented example and the cases
of its unit test, see ``tests/test_ops_reshape.py``): the data of ``x``
(``N`` rows of width ``M``) becomes rows of width ``new_dim``, and a sequence of
``L`` rows becomes one of ``L * M / new_dim`` rows, which must be a whole number
for every sequence.  The values do not move; only the LoD and the shape change.
With ``new_dim == M`` the LoD is kept as it is.

Where lodtool differs from Paddle:

* ``x`` may have several LoD levels: the last level is reshaped and the levels
  above are kept (their sequence counts do not change); Paddle accepts one level;
* rows of any shape are accepted, their width being the product of the element
  shape (Paddle asks for 2-D data); the output is always ``(rows, new_dim)``;
* the output shares ``x``'s data when it is C-contiguous (Paddle copies it);
* every dtype is accepted (Paddle: float32, float64, int32, int64).

>>> import numpy as np
>>> from lodtool import LoDTensor
>>> x = LoDTensor(np.arange(1, 13).reshape(6, 2), [[0, 2, 6]])
>>> out = sequence_reshape(x, 4)
>>> out.data.tolist(), out.lod
([[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]], [[0, 1, 3]])
"""

from __future__ import annotations

import numpy as np

from .._jit import block_count, parallel_blocks
from ..errors import LodShapeError, LodUsageError
from ..tensor import LoDTensor
from . import _cuda
from ._backend import get_backend
from ._util import U, as_tensor, need_lod, row_size

OP = "sequence_reshape"
_I64 = np.dtype(np.int64)


def sequence_reshape(x: LoDTensor, new_dim: int, *, backend: str | None = None,
                     device: str | None = None) -> LoDTensor:
    """Rows of width ``new_dim``, each last-level sequence keeping its values (Paddle's ``sequence_reshape``).

    ``backend``: ``"numba"`` (default) or ``"numpy"`` (the reference); both
    compute the new offsets and check them, the data is only reshaped.
    ``device="cuda"`` (the default for CuPy inputs) does this on the GPU.
    Raises :class:`~lodtool.errors.LodShapeError` for a sequence whose values do
    not fill whole rows of ``new_dim``, and :class:`~lodtool.errors.LodUsageError`
    for ``new_dim < 1``.

    >>> import numpy as np
    >>> from lodtool import LoDTensor
    >>> x = LoDTensor(np.arange(8), recursive_sequence_lengths=[[2, 6]])
    >>> out = sequence_reshape(x, 2)
    >>> out.shape, out.recursive_sequence_lengths
    ((4, 2), [[1, 3]])
    """
    xt = as_tensor(x, "x")
    need_lod(xt, OP)
    if isinstance(new_dim, (bool, np.bool_)) or not isinstance(new_dim, (int, np.integer)) or new_dim < 1:
        raise LodUsageError(f"{OP}: new_dim must be an integer >= 1, got {new_dim!r}")
    new_dim = int(new_dim)
    width = row_size(xt.element_shape)
    be = get_backend((xt.data, *xt.offsets), backend, device)
    xp = be.xp
    if be.name == "cupy":
        levels = _cuda.validate_offsets(xp, xt.offsets, xt.n_rows)
        data = _cuda.on_device(xp, xt.data)
    else:
        levels, data = xt.offsets, np.asarray(xt.data)
    off = levels[-1]
    if width == new_dim:
        out_off = off
    elif be.name == "numba":
        out_off = np.empty_like(off)
        nblocks = block_count(len(off))
        first_bad = np.full(nblocks, len(off), np.int64)
        _new_offsets(len(off), off.view(np.uint64), U(width), U(new_dim), out_off.view(np.uint64), first_bad,
                     nblocks=nblocks)
        _raise_if_bad(int(first_bad.min()), off, width, new_dim)
    else:  # the NumPy reference, or CuPy's own kernels on the device
        out_off = _reference(xp, off, width, new_dim)
    out = xp.ascontiguousarray(data).reshape(int(data.shape[0]) * width // new_dim, new_dim)
    return LoDTensor._trusted(out, tuple(levels[:-1]) + (out_off,), xt.level_names)


def _reference(xp, off, width: int, new_dim: int):
    """The specification: ``offset * width`` must divide by ``new_dim`` at every offset; the quotients are
    the new offsets (all prefix sums divide exactly when every sequence does)."""
    values = off * width
    bad = values % new_dim != 0
    if bool(_cuda.to_host(bad.any())):
        _raise_if_bad(int(_cuda.to_host(xp.argmax(bad))), _cuda.to_host(off), width, new_dim)
    return values // new_dim


def _raise_if_bad(j: int, off, width: int, new_dim: int) -> None:
    """Offset ``j`` is the first whose values do not fill whole rows: sequence ``j - 1`` is to blame."""
    if j >= len(off):
        return
    i = j - 1
    length = int(off[j]) - int(off[i])
    raise LodShapeError(f"{OP}: sequence {i} has {length} rows of {width} values = {length * width} values, "
                        f"which do not fill whole rows of new_dim={new_dim}; as in Paddle, every sequence's "
                        "length * width must divide by new_dim")


@parallel_blocks
def _new_offsets(lo, hi, blk, off, width, new_dim, out_off, first_bad):  # pragma: no cover - compiled by Numba
    """``out_off[j] = off[j] * width / new_dim``; ``first_bad[b]``: block ``b``'s first offset that does not divide."""
    for j in range(lo, hi):
        v = off[j] * width
        q = v // new_dim
        out_off[j] = q
        if q * new_dim != v:
            first_bad[blk] = j
            break


__all__ = ["sequence_reshape"]
