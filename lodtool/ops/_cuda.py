"""The shared device primitives of the sequence operators (Numba CUDA over CuPy arrays).

This module holds the CUDA kernels (compiled once, together), the validation
of offsets on the device, the tiled gather and the launch helpers.  Each
operator's launcher (``cuda_<op>``) lives in the operator's own module,
``lodtool/ops/<op>.py``, beside its NumPy reference and its Numba kernel.

Every function takes the array module ``xp`` as its first argument: CuPy on a
GPU, or NumPy under Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``), where
the very same kernels run, slowly, on the host; that is how CI tests them
without a GPU.  This module never imports CuPy (only :mod:`lodtool._device` may) and
imports ``numba.cuda`` on the first kernel launch, so importing it is free.

Inputs are plain arrays: data on the device (C-contiguous or not), offsets as
int64 arrays on the host or the device.  Outputs are device arrays, offsets
included.  The public operators (``lodtool.ops.<op>``) call their launchers when
:func:`~lodtool.ops._backend.get_backend` picks CuPy.  Offsets are
validated **on the device** before any kernel indexes with them (first is 0,
never decreasing, the last equals the rows), and a bad index raises
:class:`~lodtool.errors.LodValidationError` worded exactly as
:func:`lodtool.lod.validate_lod`; pass ``validated=True`` to skip a check the
caller has already made.

Data movement (expand, pad, unpad, reverse, first/last, time-major packing) moves
bytes, never values: rows are viewed as ``k`` unsigned words (the widest that
divides the row and its alignment), so the output is bit-identical to the CPU
path for every dtype.  All of them run one tiled gather kernel: a block owns a
tile of output rows, finds each row's source row from the offsets (a binary
search inside a window of offsets staged in shared memory, then a forward walk;
one small kernel first finds every tile's window), and then copies
``tile_rows * k`` words with consecutive threads on consecutive words
(coalesced), four loads in flight per thread.

Reductions (pool, softmax) run one thread per (sequence, column) in row order,
as the CPU kernels do, so sum/average/sqrt/max/min give the CPU kernel's bits;
softmax uses the device's ``exp`` (within 2 ulp of the host's).

>>> tile_rows(1), tile_rows(8), tile_rows(100_000)
(2048, 1024, 1)
"""

from __future__ import annotations

import threading
import types
from typing import Any, Sequence

import numpy as np

from .._device import is_device_array
from .._device import to_host as _to_host
from ..errors import LodBackendError, LodShapeError, LodValidationError
from ..lod import _too_few, counted
from ._util import row_size, word_dtype

#: threads per block (the simulator runs each thread as a Python thread: fewer there)
THREADS = 256
THREADS_SIM = 32
#: output words a gather block copies, and the most output rows a tile may hold
TILE_WORDS = 8192
MAX_TILE_ROWS = 2048
#: offsets staged per tile in shared memory (a tile without empty sequences needs at most rows + 2)
STAGE = MAX_TILE_ROWS + 2
#: grid-stride kernels launch at most this many blocks
MAX_BLOCKS = 65535 * 4

# gather modes: how an output row's source row is found (see _src_of)
MODE_ROW, MODE_BASE, MODE_REV, MODE_STRIDE, MODE_TO_STEPS, MODE_FROM_STEPS = range(6)
MODE_PAD, MODE_FIRST, MODE_LAST = 6, 7, 8

I64 = np.dtype(np.int64)
#: bound to ``numba.cuda`` in the kernels' globals when they compile (see compiled)
cuda: Any = None


def tile_rows(k: int) -> int:
    """Output rows per gather tile for rows of ``k`` words (at least 1, at most ``MAX_TILE_ROWS``).

    >>> tile_rows(2)
    2048
    """
    return max(1, min(MAX_TILE_ROWS, TILE_WORDS // max(int(k), 1)))


# ---------------------------------------------------------------------------------------------
# device code (plain Python functions; compiled by numba.cuda on first use, see compiled)
# ---------------------------------------------------------------------------------------------

def _upper_bound(a, lo, hi, v):  # pragma: no cover - device function
    """First index in ``[lo, hi)`` with ``a[i] > v`` (``hi`` if none)."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] <= v:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _src_of(mode, j, lo_v, hi_v, o, base, aux, p):  # pragma: no cover - device function
    """Source row of output row ``o`` in segment ``j`` (whose offsets are ``lo_v, hi_v``)."""
    if mode == 0:  # MODE_ROW: segment j repeats source row j
        return j
    if mode == 1:  # MODE_BASE: segment j copies rows from base[j]
        return base[j] + (o - lo_v)
    if mode == 2:  # MODE_REV: segment reversed in place
        return lo_v + hi_v - 1 - o
    if mode == 3:  # MODE_STRIDE: segment j copies rows from j * p (unpad)
        return j * p + (o - lo_v)
    if mode == 4:  # MODE_TO_STEPS: step j, rank o-lo: time step j of the sorted sequence
        return base[aux[o - lo_v]] + j
    # MODE_FROM_STEPS: sequence j, time step o-lo: the row at step (o-lo), rank aux[j]
    return base[o - lo_v] + aux[j]


def _fill_seg(arr, lo, hi, jshift, o0, r_lo, r_hi, mode, base, aux, p, srcrow):  # pragma: no cover
    """Source rows of tile rows ``r_lo..r_hi`` by a search in ``arr[lo:hi]`` then a forward walk."""
    j = _upper_bound(arr, lo, hi, o0 + r_lo) - 1
    for r in range(r_lo, r_hi):
        o = o0 + r
        while arr[j + 1] <= o:
            j += 1
        srcrow[r] = _src_of(mode, j + jshift, arr[j], arr[j + 1], o, base, aux, p)


def _gather(srcw, k, off, nseg, ts, base, aux, p, mode, n_out, tile, padw, outw):  # pragma: no cover
    """Output rows ``[b*tile, (b+1)*tile)`` of ``k`` words each; see the module docstring."""
    srcrow = cuda.shared.array(MAX_TILE_ROWS, np.int64)
    win = cuda.shared.array(STAGE, np.int64)
    tid = np.int64(cuda.threadIdx.x)
    nt = np.int64(cuda.blockDim.x)
    b = np.int64(cuda.blockIdx.x)
    o0 = b * tile
    rows = min(tile, n_out - o0)
    rpt = (rows + nt - 1) // nt
    r_lo = min(rows, tid * rpt)
    r_hi = min(rows, r_lo + rpt)
    # the offsets this tile needs: off[j0 .. j1+1]
    if mode == 6:  # MODE_PAD: output row o is (o // p, o % p)
        j0 = o0 // p
        j1 = (o0 + rows - 1) // p
    elif mode >= 7:  # MODE_FIRST / MODE_LAST: output row i from sequence i
        j0 = o0
        j1 = o0 + rows - 1
    else:  # segment modes: found for every tile at once by _tile_segs
        j0 = ts[b]
        j1 = ts[b + 1]
    cnt = j1 - j0 + 2
    staged = cnt <= STAGE
    if staged:  # one coalesced load of the window into shared memory
        for q in range(tid, cnt, nt):
            win[q] = off[j0 + q]
    cuda.syncthreads()
    # phase 1: each tile row's source row (-1: the pad row)
    if r_lo < r_hi:
        if mode == 6:
            i = (o0 + r_lo) // p
            t = o0 + r_lo - i * p
            for r in range(r_lo, r_hi):
                a = win[i - j0]
                srcrow[r] = a + t if t < win[i - j0 + 1] - a else -1
                t += 1
                if t == p:
                    t = 0
                    i += 1
        elif mode >= 7:
            for r in range(r_lo, r_hi):
                a = win[r]
                e = win[r + 1]
                if a == e:
                    srcrow[r] = -1
                elif mode == 7:
                    srcrow[r] = a
                else:
                    srcrow[r] = e - 1
        elif staged:
            _fill_seg(win, 0, cnt, j0, o0, r_lo, r_hi, mode, base, aux, p, srcrow)
        else:  # many empty segments in this tile: search the offsets in place
            _fill_seg(off, j0, j0 + cnt, 0, o0, r_lo, r_hi, mode, base, aux, p, srcrow)
    cuda.syncthreads()
    # phase 2: copy words; thread tid takes words tid, tid+nt, ... of the tile (coalesced)
    if k == 1:  # one word per row: no (row, column) bookkeeping
        e = tid
        while e + 3 * nt < rows:
            s0 = srcrow[e]
            s1 = srcrow[e + nt]
            s2 = srcrow[e + 2 * nt]
            s3 = srcrow[e + 3 * nt]
            v0 = srcw[s0] if s0 >= 0 else padw[0]
            v1 = srcw[s1] if s1 >= 0 else padw[0]
            v2 = srcw[s2] if s2 >= 0 else padw[0]
            v3 = srcw[s3] if s3 >= 0 else padw[0]
            outw[o0 + e] = v0
            outw[o0 + e + nt] = v1
            outw[o0 + e + 2 * nt] = v2
            outw[o0 + e + 3 * nt] = v3
            e += 4 * nt
        while e < rows:
            s0 = srcrow[e]
            outw[o0 + e] = srcw[s0] if s0 >= 0 else padw[0]
            e += nt
        return
    total = rows * k
    out0 = o0 * k
    e = tid
    r = tid // k
    c = tid - r * k
    dr = nt // k
    dc = nt - dr * k
    while e + 3 * nt < total:
        r1, c1 = _advance(r, c, dr, dc, k)
        r2, c2 = _advance(r1, c1, dr, dc, k)
        r3, c3 = _advance(r2, c2, dr, dc, k)
        s0 = srcrow[r]
        s1 = srcrow[r1]
        s2 = srcrow[r2]
        s3 = srcrow[r3]
        v0 = srcw[s0 * k + c] if s0 >= 0 else padw[c]
        v1 = srcw[s1 * k + c1] if s1 >= 0 else padw[c1]
        v2 = srcw[s2 * k + c2] if s2 >= 0 else padw[c2]
        v3 = srcw[s3 * k + c3] if s3 >= 0 else padw[c3]
        outw[out0 + e] = v0
        outw[out0 + e + nt] = v1
        outw[out0 + e + 2 * nt] = v2
        outw[out0 + e + 3 * nt] = v3
        e += 4 * nt
        r, c = _advance(r3, c3, dr, dc, k)
    while e < total:
        s0 = srcrow[r]
        outw[out0 + e] = srcw[s0 * k + c] if s0 >= 0 else padw[c]
        e += nt
        r, c = _advance(r, c, dr, dc, k)


def _tile_segs(off, nseg, tile, n_out, n_tiles, ts):  # pragma: no cover - kernel
    """``ts[b]``: the segment of ``off`` holding the first row of tile ``b`` (``b = n_tiles``: the last row)."""
    b = np.int64(cuda.grid(1))
    stride = np.int64(cuda.gridsize(1))
    while b <= n_tiles:
        ts[b] = _upper_bound(off, 0, nseg + 1, min(b * tile, n_out - 1)) - 1
        b += stride


def _advance(r, c, dr, dc, k):  # pragma: no cover - device function
    """(row, column) of the word ``blockDim`` further on, without a division."""
    c += dc
    r += dr
    if c >= k:
        c -= k
        r += 1
    return r, c


def _first_decrease(off, n, res, slot):  # pragma: no cover - kernel
    """``res[slot] = min(res[slot], j)`` for every ``j`` with ``off[j] < off[j-1]``."""
    i = np.int64(cuda.grid(1))
    stride = np.int64(cuda.gridsize(1))
    while i < n - 1:
        if off[i + 1] < off[i]:
            cuda.atomic.min(res, slot, i + 1)
        i += stride


def _first_outside(vals, n, lo, hi, res):  # pragma: no cover - kernel
    """``res[0]``: first ``j`` with ``vals[j] < lo``; ``res[1]``: first with ``vals[j] > hi``."""
    i = np.int64(cuda.grid(1))
    stride = np.int64(cuda.gridsize(1))
    while i < n:
        v = vals[i]
        if v < lo:
            cuda.atomic.min(res, 0, i)
        if v > hi:
            cuda.atomic.min(res, 1, i)
        i += stride


def _seg_ids(off, nseg, n, out):  # pragma: no cover - kernel
    """``out[q]``: the segment of ``off`` holding position ``q``."""
    q = np.int64(cuda.grid(1))
    stride = np.int64(cuda.gridsize(1))
    while q < n:
        out[q] = _upper_bound(off, 0, nseg + 1, q) - 1
        q += stride


def _pool(x2, off, n, w, code, pad, scale, out):  # pragma: no cover - kernel
    """``out[i, c]``: rows ``off[i]..off[i+1]`` of column ``c`` reduced in row order (codes as ops.pool.POOL_TYPES)."""
    e = np.int64(cuda.grid(1))
    stride = np.int64(cuda.gridsize(1))
    while e < n * w:
        i = e // w
        c = e - i * w
        a = off[i]
        b = off[i + 1]
        if a == b:
            out[i, c] = pad[c]
        else:
            acc = x2[a, c]
            if code <= 2:
                for r in range(a + 1, b):
                    acc += x2[r, c]
            elif code == 3:
                for r in range(a + 1, b):
                    v = x2[r, c]
                    if v > acc:
                        acc = v
            else:
                for r in range(a + 1, b):
                    v = x2[r, c]
                    if v < acc:
                        acc = v
            if code == 1 or code == 2:
                out[i, c] = acc / scale[i]
            else:
                out[i, c] = acc
        e += stride


_DEVICE_FUNCS = ("_upper_bound", "_src_of", "_fill_seg", "_advance")
_KERNELS = ("_gather", "_tile_segs", "_first_decrease", "_first_outside", "_seg_ids", "_pool")
_compile_lock = threading.Lock()


def numba_cuda():
    """``numba.cuda``, imported on first use (a :class:`LodBackendError` if it cannot be)."""
    if not hasattr(np, "row_stack"):
        # numba-cuda <= 0.30.4 registers an overload of np.row_stack (an alias of vstack that
        # NumPy 2.5 removed) when it loads its CUDA target, and fails without it.
        np.row_stack = np.vstack
    try:
        from numba import cuda
    except Exception as exc:  # pragma: no cover - depends on the install
        raise LodBackendError(f"device='cuda' needs numba's CUDA target ({exc}): pip install numba-cuda") from None
    return cuda


def simulated() -> bool:
    """True when Numba runs CUDA kernels in its simulator (``NUMBA_ENABLE_CUDASIM=1``)."""
    from numba.core import config

    return bool(config.ENABLE_CUDASIM)


def compiled() -> types.SimpleNamespace:
    """The kernels of this module, each ``cuda.jit``-ed once, with the device functions bound."""
    names = globals()
    return jit_kernels([names[k] for k in _KERNELS], [names[f] for f in _DEVICE_FUNCS])


# ---------------------------------------------------------------------------------------------
# host helpers
# ---------------------------------------------------------------------------------------------

def to_host(a: Any) -> np.ndarray:
    """A NumPy copy (or view) of a device or host array."""
    return np.asarray(_to_host(a))


def _address(a: Any) -> int:
    iface = a.__cuda_array_interface__ if is_device_array(a) else a.__array_interface__
    return int(iface["data"][0])


def _threads() -> int:
    return THREADS_SIM if simulated() else THREADS


#: set to a list to record ``(kernel name, start event, end event)`` around each launch (benchmarks)
PROFILE: list | None = None
_streams: dict = {}


def launch(xp, kern, blocks: int, *args) -> None:
    """Launch ``kern`` on CuPy's current stream (no host synchronisation), or in the simulator."""
    ns = compiled()
    if blocks <= 0:
        return
    if simulated() or not any(is_device_array(a) for a in args):
        # host arrays are copied in and back out; a read-only one (a tensor's offsets) is only copied in
        args = [ns.cuda.In(a) if isinstance(a, np.ndarray) and not a.flags.writeable else a for a in args]
        kern[blocks, _threads()](*args)
        return
    cuda = ns.cuda
    ptr = int(xp.cuda.get_current_stream().ptr)
    stream = _streams.get(ptr)
    if stream is None:
        stream = _streams[ptr] = cuda.default_stream() if ptr == 0 else cuda.external_stream(ptr)
    conv = tuple(cuda.as_cuda_array(a, sync=False) if is_device_array(a) else a for a in args)
    if PROFILE is None:
        kern[blocks, _threads(), stream](*conv)
        return
    start, end = xp.cuda.Event(), xp.cuda.Event()
    start.record()
    kern[blocks, _threads(), stream](*conv)
    end.record()
    PROFILE.append((getattr(kern, "py_func", kern).__name__, start, end))


def grid(n: int) -> int:
    t = _threads()
    return max(1, min(MAX_BLOCKS, (int(n) + t - 1) // t))


def scalars(xp, *parts) -> list[int]:
    """Several one-element device arrays read back in one transfer, as Python ints."""
    if not parts:
        return []
    return [int(v) for v in to_host(xp.concatenate([p.reshape(-1)[:1].astype(I64, copy=False) for p in parts]))]


def as_offsets(xp, values: Any, *, level: int | None = None, what: str = "offsets"):
    """One level of offsets (host or device) as a 1-D int64 device array; refuses floats and ranks != 1."""
    where = f"level {level}: " if level is not None else ""
    if not is_device_array(values):
        from ..lod import as_index_array

        return xp.asarray(as_index_array(values, what=what, level=level))
    if values.ndim != 1:
        raise LodValidationError(f"{where}{what} must be 1-D, got shape {tuple(values.shape)}")
    if values.dtype.kind not in "iu":
        raise LodValidationError(f"{where}{what} must be integers, got dtype {values.dtype}")
    return xp.ascontiguousarray(values.astype(I64, copy=False))


def first_outside(xp, vals: Any, lo: int, hi: int) -> tuple[int, int]:
    """The first index of ``vals`` (a device array) below ``lo`` and the first above ``hi`` (its length where there
    is none), read back in one transfer."""
    n = int(vals.shape[0])
    res = xp.full(2, n, I64)
    launch(xp, compiled().first_outside, grid(n), vals, n, lo, hi, res)
    below, above = scalars(xp, res[:1], res[1:])
    return below, above


def on_device(xp, data: Any):
    """``data`` as a device array (a host array is copied over)."""
    return data if is_device_array(data) else xp.asarray(data)


def level_offsets(xp, offsets: Any, n_rows: int | None, validated: bool):
    """One level of offsets as an int64 device array, checked on the device unless the caller ``validated`` it."""
    return as_offsets(xp, offsets) if validated else validate_offsets(xp, [offsets], n_rows)[0]


def lengths_to_offsets(xp, lengths: Any):
    """Lengths to offsets on the device (``[0, l0, l0+l1, ...]``); a negative length is an error.

    >>> import numpy as np
    >>> lengths_to_offsets(np, [3, 2, 4]).tolist()  # doctest: +SKIP
    [0, 3, 5, 9]
    """
    lens = as_offsets(xp, lengths, what="lengths")
    n = int(lens.shape[0])
    if n:
        res = xp.full(2, n, I64)
        launch(xp, compiled().first_outside, grid(n), lens, n, 0, np.iinfo(np.int64).max, res)
        j = scalars(xp, res)[0]
        if j < n:
            raise LodValidationError(f"length[{j}]={scalars(xp, lens[j:j + 1])[0]} is negative")
    out = xp.zeros(n + 1, I64)
    if n:
        xp.cumsum(lens, out=out[1:])
    return out


def offsets_to_lengths(xp, offsets: Any):
    """Offsets to lengths on the device (``offsets[1:] - offsets[:-1]``).

    >>> import numpy as np
    >>> offsets_to_lengths(np, np.array([0, 3, 5, 9])).tolist()  # doctest: +SKIP
    [3, 2, 4]
    """
    off = as_offsets(xp, offsets)
    return off[1:] - off[:-1]


def validate_offsets(xp, levels: Sequence[Any], n_rows: int | None) -> tuple:
    """Check a LoD on the device with lodtool's rules; returns its levels as int64 device arrays.

    Every level has at least 1 offset (``[0]``: zero sequences), starts at 0 and never decreases; each
    level ends at the sequence count of the level below, and the last one at
    ``n_rows`` (``None``: not checked, for a lone reference level).  One kernel
    per level finds the first decrease (an atomic min over the bad indices);
    one transfer brings every level's verdict back.  The first broken rule
    raises :class:`LodValidationError`, worded as :func:`lodtool.lod.validate_lod`.

    >>> import numpy as np
    >>> validate_offsets(np, [np.array([0, 3, 2])], 2)  # doctest: +SKIP
    Traceback (most recent call last):
    ...
    lodtool.errors.LodValidationError: level 0: offset[2]=2 < offset[1]=3 (offsets must not decrease)
    """
    offs = tuple(as_offsets(xp, lv, level=k) for k, lv in enumerate(levels))
    if not offs:
        return offs
    kerns = compiled()
    sizes = [int(o.shape[0]) for o in offs]
    res = xp.asarray(np.array(sizes, dtype=np.int64))
    for k, o in enumerate(offs):
        if sizes[k] > 1:
            launch(xp, kerns.first_decrease, grid(sizes[k] - 1), o, sizes[k], res, k)
    parts = [res]
    for o in offs:
        if o.shape[0]:
            parts += [o[:1], o[-1:]]
    flat = to_host(xp.concatenate([p.astype(I64, copy=False) for p in parts]))
    bad, rest = flat[:len(offs)].tolist(), flat[len(offs):].tolist()
    firsts, lasts = [], []
    for size in sizes:
        if size:
            firsts.append(rest.pop(0))
            lasts.append(rest.pop(0))
        else:
            firsts.append(None)
            lasts.append(None)
    for k, (o, size) in enumerate(zip(offs, sizes)):
        if size and firsts[k] != 0:
            raise LodValidationError(f"level {k}: offset[0]={firsts[k]} (the first offset must be 0)")
        j = bad[k]
        if j < size:
            a, b = scalars(xp, o[j - 1:j], o[j:j + 1])
            raise LodValidationError(f"level {k}: offset[{j}]={b} < offset[{j - 1}]={a} (offsets must not decrease)")
        if size < 1:
            raise LodValidationError(f"level {k}: {_too_few(size, 1)}")
    for k, size in enumerate(sizes):
        end = lasts[k]
        if k + 1 < len(sizes):
            below = sizes[k + 1] - 1
            if end != below:
                raise LodValidationError(f"level {k}: offset[{size - 1}]={end} but level {k + 1} has "
                                         f"{counted(below, 'sequence')} (the last offset must equal it)")
        elif n_rows is not None and end != n_rows:
            raise LodValidationError(f"level {k}: offset[{size - 1}]={end} but the data has "
                                     f"{counted(n_rows, 'row')} (the last offset must equal it)")
    return offs


def row_offsets(xp, levels: Sequence[Any], level: int):
    """Data-row offsets of the sequences of ``level`` (validated levels, device arrays).

    >>> import numpy as np
    >>> row_offsets(np, [np.array([0, 2, 3]), np.array([0, 2, 4, 7])], 0).tolist()  # doctest: +SKIP
    [0, 4, 7]
    """
    o = levels[level]
    for below in levels[level + 1:]:
        o = below[o]
    return o


def device_words(xp, data: Any, w: np.dtype | None = None) -> tuple[Any, int]:
    """``(words, k)``: C-contiguous ``data`` as a flat unsigned device array, ``k`` words per row."""
    data = xp.ascontiguousarray(data)
    row_bytes = data.dtype.itemsize * row_size(data.shape[1:])
    if w is None:
        w = word_dtype(row_bytes, _address(data)) if row_bytes else np.dtype(np.uint8)
    flat = data.reshape(-1).view(np.uint8)
    return (flat.view(w) if w.itemsize > 1 else flat), row_bytes // w.itemsize


def gather_rows(xp, src, k: int, off, nseg: int, n_out: int, outw, *, mode: int, base=None, aux=None,
                 p: int = 0, padw=None) -> None:
    """Launch the tiled gather: ``n_out`` output rows of ``k`` words into ``outw``."""
    if n_out == 0 or k == 0:
        return
    dummy = xp.zeros(1, I64)
    if padw is None:
        padw = xp.zeros(max(k, 1), outw.dtype)
    tile = tile_rows(k)
    blocks = (n_out + tile - 1) // tile
    kerns = compiled()
    ts = dummy
    if mode < MODE_PAD:
        ts = xp.empty(blocks + 1, I64)
        launch(xp, kerns.tile_segs, grid(blocks + 1), off, nseg, tile, n_out, blocks, ts)
    launch(xp, kerns.gather, blocks, src, k, off, nseg, ts, dummy if base is None else base,
            dummy if aux is None else aux, p, mode, n_out, tile, padw, outw)


def pad_words(xp, pad: np.ndarray, w: np.dtype, k: int):
    """The pad row (host array of the data's dtype and element shape) as ``k`` device words."""
    flat = np.ascontiguousarray(pad).reshape(-1).view(np.uint8)
    words = flat.view(w) if w.itemsize > 1 else flat
    if words.size != k:  # pragma: no cover - shapes checked by callers
        raise LodShapeError(f"pad value has {words.size} words, rows have {k}")
    return xp.asarray(words) if k else xp.zeros(1, w)


# ---------------------------------------------------------------------------------------------
# compiling the kernels of other operator modules (their launchers live in ops/<op>.py)
# ---------------------------------------------------------------------------------------------

_jitted: dict = {}


def jit_kernels(kernels: Sequence[Any], device_functions: Sequence[Any] = ()) -> types.SimpleNamespace:
    """``numba.cuda.jit`` plain-Python ``kernels`` once; a namespace of them by name (leading ``_`` dropped).

    ``device_functions`` are compiled first and bound by name in every kernel's
    globals (later ones may call earlier ones), as is ``cuda``.  The functions
    stay plain Python in their module, so importing it needs no Numba.

    >>> def _twice(a, out):  # doctest: +SKIP
    ...     i = cuda.grid(1)
    ...     if i < a.shape[0]:
    ...         out[i] = 2 * a[i]
    >>> jit_kernels([_twice]).twice  # doctest: +SKIP
    <numba.cuda.dispatcher.CUDADispatcher object at ...>
    """
    key = (tuple(kernels), tuple(device_functions))
    ns = _jitted.get(key)
    if ns is None:
        with _compile_lock:
            ns = _jitted.get(key)
            if ns is None:
                cuda = numba_cuda()
                glb = dict(kernels[0].__globals__)
                glb["cuda"] = cuda

                def rebind(fn):
                    f = types.FunctionType(fn.__code__, glb, fn.__name__, fn.__defaults__)
                    f.__qualname__ = fn.__qualname__
                    f.__module__ = fn.__module__
                    return f

                for fn in device_functions:
                    glb[fn.__name__] = cuda.jit(device=True)(rebind(fn))
                ns = types.SimpleNamespace(cuda=cuda)
                for fn in kernels:
                    setattr(ns, fn.__name__.lstrip("_"), cuda.jit(cache=not simulated())(rebind(fn)))
                _jitted[key] = ns
    return ns


__all__ = ["validate_offsets", "level_offsets", "on_device", "first_outside", "lengths_to_offsets",
           "offsets_to_lengths", "row_offsets", "device_words", "as_offsets", "to_host", "tile_rows", "numba_cuda",
           "simulated", "jit_kernels"]
