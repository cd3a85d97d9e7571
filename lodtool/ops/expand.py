"""``sequence_expand``: repeat the rows (or sequences) of ``x`` by the lengths of ``y``'s LoD.

Exactly Paddle's ``sequence_expand`` (checked against PaddlePaddle 3.3 with the
static graph; see ``tests/test_ops_paddle.py``).  With ``R`` the offsets of
``y`` at ``ref_level`` and ``rep_i = R[i+1] - R[i]``:

* ``x`` without LoD (an array or a 0-level tensor): ``x`` must have ``len(R) - 1``
  rows; row ``i`` is repeated ``rep_i`` times; the output has no LoD.
* ``x`` with a 1-level LoD ``X``: ``len(X)`` must equal ``len(R)``; sequence ``i``
  is repeated ``rep_i`` times back to back; the output's one level holds
  ``rep_i`` copies of each sequence's length, so ``rep_i = 0`` drops sequence ``i``.

``y``'s data is never read.  Every numeric dtype and bool is accepted; trailing
dimensions are kept.  Where lodtool differs from Paddle:

* ``x`` with 0 rows (all its sequences empty): Paddle crashes; lodtool returns the
  correct empty result (0 rows, one empty sequence per copy).
* an output with zero sequences (``x`` has a LoD and every ``rep_i`` is 0):
  0 rows with the LoD ``[[0]]``, as Paddle returns it (a level of zero
  sequences is a value in lodtool, though Paddle's own ``set_lod`` refuses it;
  see :func:`lodtool.lod.check_paddle_lod`).

``ref_level`` is ``-1`` (the last level) or ``0 .. levels-1``, as in Paddle;
other negative values are refused like Paddle refuses them.

>>> import numpy as np
>>> from lodtool import LoDTensor
>>> x = LoDTensor(np.array([[1.1], [2.2], [3.3], [4.4]]), recursive_sequence_lengths=[[1, 3]])
>>> y = LoDTensor(np.zeros((6, 1)), recursive_sequence_lengths=[[1, 3], [1, 2, 1, 2]])
>>> out = sequence_expand(x, y, ref_level=0)
>>> out.data.ravel().tolist()
[1.1, 2.2, 3.3, 4.4, 2.2, 3.3, 4.4, 2.2, 3.3, 4.4]
>>> out.lod
[[0, 1, 4, 7, 10]]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._jit import block_count, parallel_blocks
from ..errors import LodIndexError, LodShapeError
from ..lod import lengths_to_offsets
from ..tensor import LoDTensor
from . import _cuda
from ._backend import Crossover, get_backend
from ._segments import segment_rows
from ._util import U, as_tensor, as_words, empty_words

OP = "sequence_expand"


#: work (elements) from which the Numba kernel beats the reference (docs/benchmarks.md, crossovers)
NUMBA_FROM = Crossover(cold=1 << 27, warm=1 << 16)



def sequence_expand(x: Any, y: LoDTensor, ref_level: int = -1, *, backend: str | None = None,
                    device: str | None = None) -> LoDTensor:
    """Expand ``x`` by the LoD of ``y`` at ``ref_level`` (Paddle's ``sequence_expand``).

    ``x`` is a :class:`~lodtool.LoDTensor` with at most one LoD level, or a plain
    array (no LoD).  ``backend`` is ``"numba"`` (default) or ``"numpy"`` (the
    reference).  ``device="cuda"`` (the default when ``x``'s data or either
    tensor's offsets are CuPy arrays) runs on the GPU and returns CuPy arrays.
    Raises :class:`~lodtool.errors.LodShapeError` when the counts do not fit and
    :class:`~lodtool.errors.LodIndexError` for a bad ``ref_level``.

    Rows case (``x`` without LoD):

    >>> import numpy as np
    >>> from lodtool import LoDTensor
    >>> y = LoDTensor(np.zeros(5), recursive_sequence_lengths=[[2, 3]])
    >>> sequence_expand(np.array([10, 20]), y).data.tolist()
    [10, 10, 20, 20, 20]
    """
    xt = as_tensor(x, "x")
    yt = as_tensor(y, "y")
    ref = yt.offsets[expand_level(xt, yt, ref_level)]
    be = get_backend((xt.data, ref, *xt.offsets), backend, device, work=_expand_work(xt, ref), crossover=NUMBA_FROM)
    if be.name == "cupy":
        return _expand_cuda(be.xp, xt, ref)
    if be.name == "numpy":
        return _reference(xt, ref)
    return _expand_numba(xt, ref)


def _expand_work(xt: LoDTensor, ref) -> int | None:
    """Elements ``sequence_expand`` writes (None for device offsets: the tiers are for the CPU).

    With a LoD on ``x`` it is estimated as x's rows times the mean number of
    copies, in O(1): the exact count (a dot product of the two length arrays)
    cost a third of the kernel's own time for a choice that needs only the
    order of magnitude.
    """
    if not isinstance(ref, np.ndarray) or not ref.size:
        return None
    per_row = xt.data.size // max(xt.n_rows, 1)
    if not xt.lod_level:
        return int(ref[-1]) * per_row
    copies = int(ref[-1]) / max(ref.shape[0] - 1, 1)
    return int(xt.n_rows * copies) * per_row


def expand_level(x: Any, y: Any, ref_level: int = -1) -> int:
    """The level of ``y``'s LoD that ``sequence_expand(x, y, ref_level)`` expands by, after its shape checks.

    Raises what the operator raises for tensors that do not fit, from their
    sizes alone: ``x`` and ``y`` need only ``lod_level``, ``n_rows`` and
    ``num_sequences`` (a :class:`~lodtool.LoDTensor`, or a file's lazy tensor,
    checked before any data is read).  The LoDs must be valid.

    >>> import numpy as np
    >>> from lodtool import LoDTensor
    >>> y = LoDTensor(np.zeros(6), recursive_sequence_lengths=[[1, 3], [1, 2, 1, 2]])
    >>> expand_level(LoDTensor(np.zeros(4), [[0, 1, 4]]), y, ref_level=0)
    0
    >>> expand_level(np.zeros(3), y)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    lodtool.errors.LodShapeError: sequence_expand: x has 3 rows but y's level 1 has 4 sequences; ...
    """
    if not hasattr(x, "lod_level"):  # a plain array: a 0-level tensor, as sequence_expand takes it
        x = as_tensor(x, "x")
    if x.lod_level > 1:
        raise LodShapeError(f"{OP}: x has {x.lod_level} LoD levels; it must have 0 or 1 (as in Paddle)")
    if y.lod_level == 0:
        raise LodShapeError(f"{OP}: y has no LoD; expanding needs y's LoD at ref_level")
    n = y.lod_level
    ref_level = int(ref_level)
    if not (ref_level == -1 or 0 <= ref_level < n):
        raise LodIndexError(f"{OP}: ref_level {ref_level} is out of range; it must be -1 or in [0, {n}) "
                            f"for a y with {n} LoD level(s)")
    level = n - 1 if ref_level == -1 else ref_level
    count = y.num_sequences(level)
    if x.lod_level == 0:
        if x.n_rows != count:
            raise LodShapeError(f"{OP}: x has {x.n_rows} rows but y's level {level} has {count} sequences; "
                                "without a LoD, x needs one row per sequence")
    else:
        xs = x.num_sequences(0)
        if xs != count:
            raise LodShapeError(f"{OP}: x has {xs} sequences but y's level {level} has {count}; "
                                "they must have the same number of sequences")
    return level


def _reference(xt: LoDTensor, ref: np.ndarray) -> LoDTensor:
    """The plain NumPy implementation (the specification the kernels are tested against)."""
    data = np.asarray(xt.data)
    reps = ref[1:] - ref[:-1]
    if xt.lod_level == 0:
        return LoDTensor._trusted(np.repeat(data, reps, axis=0), ())
    xoff = xt.offsets[0]
    lens = xoff[1:] - xoff[:-1]
    out_lens = np.repeat(lens, reps)
    out_off = lengths_to_offsets(out_lens)
    index = segment_rows(np.repeat(xoff[:-1], reps), out_lens)  # each copy from its sequence's first row
    return LoDTensor._trusted(data[index], (out_off,), xt.level_names)


def _expand_cuda(xp, xt: LoDTensor, ref) -> LoDTensor:
    """On the GPU (lodtool.ops._cuda): both offsets validated there first."""
    out, out_off = cuda_expand(xp, xt.data, xt.offsets[0] if xt.lod_level else None, ref)
    return LoDTensor._trusted(out, () if out_off is None else (out_off,), xt.level_names)


def _expand_numba(xt: LoDTensor, ref: np.ndarray) -> LoDTensor:
    xw, k = as_words(xt.data)
    uref = ref.view(np.uint64)
    if xt.lod_level == 0:
        out, outw = empty_words(int(ref[-1]), xt.data, xw.dtype)
        if k:
            _expand_rows(len(ref) - 1, xw, U(k), uref, outw)
        return LoDTensor._trusted(out, ())
    uxoff = xt.offsets[0].view(np.uint64)
    n = len(ref) - 1
    nblocks = block_count(n)
    # each block of sequences' output rows, then where each block starts: the output's size before
    # it is allocated, without NumPy temporaries the size of x's LoD
    block_start = np.zeros(nblocks + 1, np.uint64)
    _expand_seq_rows(n, uxoff, uref, block_start[1:], nblocks=nblocks)
    np.cumsum(block_start, out=block_start)
    out, outw = empty_words(int(block_start[-1]), xt.data, xw.dtype)
    out_off = np.empty(int(ref[-1]) + 1, np.int64)
    _expand_seqs(n, xw, U(k), uxoff, uref, block_start, outw, out_off.view(np.uint64), nblocks=nblocks)
    out_off[-1] = block_start[-1]
    return LoDTensor._trusted(out, (out_off,), xt.level_names)


# Kernel notes (they hold for every kernel of lodtool.ops):
# * Index arithmetic is unsigned: offsets arrive as uint64 views, block and item counters
#   are uint64, so Numba emits no negative-index wrap-around checks (they cost 2-7x and
#   blocked vectorisation).  Never mix in a signed int64 (uint64 op int64 is float64 in
#   Numba, and a float index does not compile): write constants as U(1), ONE, EIGHT.
# * Parallel kernels are written as the work of one block of items (lodtool._jit.parallel_blocks):
#   worker threads take blocks from a shared counter until none are left (dynamic scheduling).
# * Outputs are allocated by NumPy outside the kernel and passed in.

@parallel_blocks
def _expand_rows(lo, hi, blk, xw, k, ref, outw):  # pragma: no cover - compiled by Numba
    """Row ``i`` of ``x`` (``k`` words) to output rows ``ref[i]..ref[i+1]``.

    One-word rows repeated at most 8 times are stored as 8 copies without a
    branch on the count; the extra copies land on the next rows' places, which
    those rows overwrite later (never past the block's end, so blocks stay independent).
    """
    one = U(1)
    eight = U(8)
    end = ref[hi]
    if k == one:
        for i in range(lo, hi):
            a = ref[i]
            r = ref[i + one] - a
            v = xw[i]
            if r <= eight and a + eight <= end:
                for t in range(eight):
                    outw[a + t] = v
            else:
                for t in range(r):
                    outw[a + t] = v
    else:
        for i in range(lo, hi):
            a = ref[i]
            r = ref[i + one] - a
            src = i * k
            dst = a * k
            for t in range(r):
                for j in range(k):
                    outw[dst + j] = xw[src + j]
                dst += k


@parallel_blocks
def _expand_seq_rows(lo, hi, blk, xoff, ref, block_rows):  # pragma: no cover - compiled by Numba
    """``block_rows[b]``: the output rows of block ``b`` of x's sequences (their lengths times their copies)."""
    one = U(1)
    total = U(0)
    for i in range(lo, hi):
        total += (xoff[i + one] - xoff[i]) * (ref[i + one] - ref[i])
    block_rows[blk] = total


@parallel_blocks
def _expand_seqs(lo, hi, blk, xw, k, xoff, ref, block_start, outw, out_off):  # pragma: no cover - compiled by Numba
    """Sequence ``i`` of ``x`` copied ``ref[i+1]-ref[i]`` times; block ``b``'s copies from row ``block_start[b]``."""
    one = U(1)
    base = block_start[blk]
    # each offset read once (it ends one sequence and starts the next); uncopied sequences skipped
    a = xoff[lo]
    r0 = ref[lo]
    for i in range(lo, hi):
        r1 = ref[i + one]
        b = xoff[i + one]
        if r1 != r0:
            m = b - a
            span = m * k
            src = a * k
            dst = base * k
            for t in range(r1 - r0):
                out_off[r0 + t] = base + t * m
                for j in range(span):
                    outw[dst + j] = xw[src + j]
                dst += span
            base += (r1 - r0) * m
        r0 = r1
        a = b


# -- the CUDA launcher (lodtool.ops._cuda holds the shared device primitives) --------------------------------
def cuda_expand(xp, data: Any, x_offsets: Any | None, ref_offsets: Any, *, validated: bool = False):
    """``sequence_expand`` on the device: ``(out_data, out_offsets or None)``.

    ``x_offsets`` is ``None`` (``x`` has no LoD: row ``i`` is repeated ``rep_i``
    times) or ``x``'s one level (sequence ``i`` repeated ``rep_i`` times back to
    back; the output's level holds ``rep_i`` copies of each length), where
    ``rep_i = ref[i+1] - ref[i]`` for ``y``'s offsets ``ref`` at ``ref_level``.
    Bit-identical to ``lodtool.ops.sequence_expand``.

    >>> import cupy as cp  # doctest: +SKIP
    >>> out, off = cuda_expand(cp, cp.arange(4.0), cp.array([0, 1, 4]), [0, 1, 3])  # doctest: +SKIP
    >>> out.tolist(), off.tolist()  # doctest: +SKIP
    ([0.0, 1.0, 2.0, 3.0, 1.0, 2.0, 3.0], [0, 1, 4, 7])
    """
    data = _cuda.on_device(xp, data)
    n_rows = int(data.shape[0])
    ref = _cuda.level_offsets(xp, ref_offsets, None, validated)
    count = int(ref.shape[0]) - 1
    xw, k = _cuda.device_words(xp, data)
    if x_offsets is None:
        if n_rows != count:
            raise LodShapeError(f"sequence_expand: x has {n_rows} rows but the reference level has {count} "
                                "sequences; without a LoD, x needs one row per sequence")
        total = _cuda.scalars(xp, ref[-1:])[0]
        out = xp.empty((total,) + tuple(data.shape[1:]), data.dtype)
        outw, _ = _cuda.device_words(xp, out, xw.dtype)
        _cuda.gather_rows(xp, xw, k, ref, count, total, outw, mode=_cuda.MODE_ROW)
        return out, None
    xoff = _cuda.level_offsets(xp, x_offsets, n_rows, validated)
    if int(xoff.shape[0]) != count + 1:
        raise LodShapeError(f"sequence_expand: x has {int(xoff.shape[0]) - 1} sequences but the reference level "
                            f"has {count}; they must have the same number of sequences")
    lens = xoff[1:] - xoff[:-1]
    reps = ref[1:] - ref[:-1]
    out_start = xp.zeros(count + 1, _cuda.I64)
    xp.cumsum(lens * reps, out=out_start[1:])
    nq, total = _cuda.scalars(xp, ref[-1:], out_start[-1:])
    seg = xp.empty(nq, _cuda.I64)
    _cuda.launch(xp, _cuda.compiled().seg_ids, _cuda.grid(nq), ref, count, nq, seg)
    out_off = xp.empty(nq + 1, _cuda.I64)
    out_off[:-1] = out_start[seg] + (xp.arange(nq, dtype=_cuda.I64) - ref[seg]) * lens[seg]
    out_off[-1:] = out_start[-1:]
    src_start = xp.ascontiguousarray(xoff[seg])
    out = xp.empty((total,) + tuple(data.shape[1:]), data.dtype)
    outw, _ = _cuda.device_words(xp, out, xw.dtype)
    _cuda.gather_rows(xp, xw, k, out_off, nq, total, outw, mode=_cuda.MODE_BASE, base=src_start)
    return out, out_off


__all__ = ["sequence_expand", "expand_level", "cuda_expand"]
