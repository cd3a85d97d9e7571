"""``im2sequence``: the patches of each image as one sequence (how OCR models feed a CNN's map to an RNN).

As Paddle's ``im2sequence`` (checked against PaddlePaddle 3.3.1, static graph;
``tests/data/paddle_ops``).  ``x`` is a batch of images ``(N, C, H, W)``.  A
``kh x kw`` window slides with ``strides`` over each image padded with zeros
(``paddings`` = up, left, down, right); each window position gives one row of
``C * kh * kw`` values (channel, then window row, then window column), the
positions row by row.  Image ``n`` gives one sequence of ``oh * ow`` rows::

    oh = (H + up + down - kh) // stride_h + 1        ow likewise

With ``real_sizes`` (Paddle's input ``Y``: the ``(height, width)`` of each
image before it was padded into the batch) and ``out_stride`` (how much the
network before shrank the image), image ``n``'s grid is computed from
``ceil(real_h / out_stride_h)`` and ``ceil(real_w / out_stride_w)`` instead of
``H`` and ``W``: the top-left ``oh_n x ow_n`` windows of the image, where values
outside the image (not the real size) are zeros, exactly as Paddle computes it.

Where lodtool differs on purpose: Paddle ignores ``real_sizes`` when the batch
holds one image; lodtool applies them to any batch.  A real size whose grid
would be empty gives an empty sequence (Paddle allocates a negative size); a
kernel larger than the padded image is a :class:`~lodtool.errors.LodShapeError`.
Every dtype works (it only moves values).

>>> import numpy as np
>>> x = np.arange(2 * 1 * 3 * 3).reshape(2, 1, 3, 3)
>>> out = im2sequence(x, kernels=(2, 2), strides=(1, 1))
>>> out.lod, out.data[:2].tolist()
([[0, 4, 8]], [[0, 1, 3, 4], [1, 2, 4, 5]])
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .._jit import parallel_blocks
from ..errors import LodShapeError, LodUsageError
from ..lod import lengths_to_offsets
from ..tensor import LoDTensor
from . import _cuda
from ._backend import get_backend
from ._util import U, as_tensor

#: bound to ``numba.cuda`` in the CUDA kernels' globals when they compile (see _cuda.jit_kernels)
cuda: Any = None

OP = "im2sequence"


def im2sequence(x: Any, kernels: Sequence[int], strides: Sequence[int] = (1, 1),
                paddings: Sequence[int] = (0, 0, 0, 0), real_sizes: Any = None, out_stride: Sequence[int] = (1, 1),
                *, backend: str | None = None, device: str | None = None) -> LoDTensor:
    """Image patches as sequences: one sequence of ``C * kh * kw``-value rows per image (Paddle's op).

    ``kernels``: ``(kh, kw)``; ``strides``: ``(sh, sw)``; ``paddings``: ``(up,
    left, down, right)``, or ``(ph, pw)`` for both sides.  ``real_sizes``: an
    ``(N, 2)`` array of each image's real ``(height, width)`` (truncated to
    integers, as Paddle's float input is), with ``out_stride``.  ``backend``:
    ``"numba"`` (default) or ``"numpy"`` (the reference); ``device="cuda"``
    runs one GPU thread per output value, the same bits.

    >>> import numpy as np
    >>> x = np.arange(16.0).reshape(1, 1, 4, 4)
    >>> im2sequence(x, kernels=(2, 2), strides=(2, 2)).data.tolist()
    [[0.0, 1.0, 4.0, 5.0], [2.0, 3.0, 6.0, 7.0], [8.0, 9.0, 12.0, 13.0], [10.0, 11.0, 14.0, 15.0]]
    """
    images = as_tensor(x, "x").data
    if images.ndim != 4:
        raise LodShapeError(f"{OP}: x must be a batch of images (N, C, H, W), got shape {tuple(images.shape)}")
    kh, kw = _pair(kernels, "kernels", 1)
    sh, sw = _pair(strides, "strides", 1)
    pads = _paddings(paddings)
    n, c, h, w = (int(d) for d in images.shape)
    heights, widths = _grids(n, h, w, kh, kw, sh, sw, pads, real_sizes, out_stride)
    counts = heights * widths
    off = lengths_to_offsets(counts)
    geometry = np.array([kh, kw, sh, sw, pads[0], pads[1]], np.int64)
    be = get_backend(images, backend, device)
    if be.name == "cupy":
        data = cuda_im2sequence(be.xp, images, off, widths, geometry)
        return LoDTensor._trusted(data, (be.xp.asarray(off),))
    images = np.ascontiguousarray(images)
    if be.name == "numpy":
        data = _reference(images, heights, widths, geometry)
    else:
        data = np.empty((int(off[-1]), c * kh * kw), images.dtype)
        if data.size:
            words, k = _words(images)
            _im2seq(int(off[-1]), words.reshape(n, c, h, w * k), off.view(np.uint64), widths, geometry, k,
                    data.reshape(-1).view(np.uint8).view(words.dtype), per_worker=4)
    return LoDTensor._trusted(data, (off,))


def _word_dtype(dtype: np.dtype) -> np.dtype:
    """The unsigned word a value moves as: its own size up to 8 bytes (complex128: 2 words of 8)."""
    return np.dtype(f"u{min(dtype.itemsize, 8)}")


def _words(images: np.ndarray) -> tuple[np.ndarray, int]:
    """C-contiguous ``images`` as flat unsigned words, and the words per value."""
    wd = _word_dtype(images.dtype)
    return images.reshape(-1).view(np.uint8).view(wd), images.dtype.itemsize // wd.itemsize


def _pair(values, what: str, least: int) -> tuple[int, int]:
    vals = _ints(values, what)
    if len(vals) != 2 or min(vals) < least:
        raise LodUsageError(f"{OP}: {what} must be two integers >= {least}, got {values!r}")
    return vals[0], vals[1]


def _ints(values, what: str) -> list[int]:
    try:
        arr = np.asarray(values)
    except (TypeError, ValueError):
        arr = np.asarray(None)
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise LodUsageError(f"{OP}: {what} must be a list of integers, got {values!r}")
    return [int(v) for v in arr]


def _paddings(paddings) -> tuple[int, int, int, int]:
    vals = _ints(paddings, "paddings")
    if len(vals) == 2:
        vals = vals + vals
    if len(vals) != 4 or min(vals) < 0:
        raise LodUsageError(f"{OP}: paddings must be 4 integers >= 0 (up, left, down, right) or 2 (height, width), "
                            f"got {paddings!r}")
    return vals[0], vals[1], vals[2], vals[3]


def _grids(n, h, w, kh, kw, sh, sw, pads, real_sizes, out_stride) -> tuple[np.ndarray, np.ndarray]:
    """Each image's window grid ``(heights, widths)``, from its real size when given."""
    up, left, down, right = pads
    if real_sizes is None:
        oh = (h + up + down - kh) // sh + 1
        ow = (w + left + right - kw) // sw + 1
        if oh < 1 or ow < 1:
            raise LodShapeError(f"{OP}: a {kh}x{kw} kernel does not fit the padded {h + up + down}x"
                                f"{w + left + right} image")
        return np.full(n, oh, np.int64), np.full(n, ow, np.int64)
    osh, osw = _pair(out_stride, "out_stride", 1)
    real = np.asarray(_cuda.to_host(real_sizes))
    if real.dtype.kind not in "iuf" or real.shape != (n, 2):
        raise LodShapeError(f"{OP}: real_sizes must be numbers of shape ({n}, 2) (height, width per image), got "
                            f"shape {real.shape} of dtype {real.dtype}")
    if real.dtype.kind == "f" and not np.all(np.isfinite(real)):
        raise LodShapeError(f"{OP}: real_sizes must be finite")
    real = np.trunc(real).astype(np.int64)
    if real.size and int(real.min()) < 0:
        raise LodShapeError(f"{OP}: real_sizes must not be negative (found {int(real.min())})")
    rh = -(-real[:, 0] // osh)
    rw = -(-real[:, 1] // osw)
    oh = np.maximum((rh + up + down - kh) // sh + 1, 0)
    ow = np.maximum((rw + left + right - kw) // sw + 1, 0)
    empty = (oh == 0) | (ow == 0)
    return np.where(empty, 0, oh), np.where(empty, 0, ow)


def _reference(images: np.ndarray, heights: np.ndarray, widths: np.ndarray, geometry: np.ndarray) -> np.ndarray:
    """The plain NumPy implementation (the specification the kernels are tested against)."""
    kh, kw, sh, sw, up, left = (int(v) for v in geometry)
    n, c, h, w = images.shape
    parts = []
    for i in range(n):
        oh, ow = int(heights[i]), int(widths[i])
        if not oh * ow:
            continue
        need_h, need_w = (oh - 1) * sh + kh, (ow - 1) * sw + kw  # the padded extent the grid reads
        canvas = np.zeros((c, max(need_h, up + h), max(need_w, left + w)), images.dtype)
        canvas[:, up:up + h, left:left + w] = images[i]
        windows = np.lib.stride_tricks.sliding_window_view(canvas[:, :need_h, :need_w], (kh, kw), axis=(1, 2))
        picked = windows[:, ::sh, ::sw][:, :oh, :ow]  # (c, oh, ow, kh, kw)
        parts.append(picked.transpose(1, 2, 0, 3, 4).reshape(oh * ow, c * kh * kw))
    if not parts:
        return np.zeros((0, c * geometry[0] * geometry[1]), images.dtype)
    return np.concatenate(parts)


@parallel_blocks
def _im2seq(lo, hi, blk, images, off, widths, geometry, k, out):  # pragma: no cover - compiled by Numba
    """Output row ``g`` (image ``i``, window ``(r, q)``), blocks of rows handed out dynamically.

    ``images`` is ``(n, c, h, w * k)`` words and ``out`` flat words: values move as ``k`` unsigned words
    each (see :func:`_words`), so every dtype shares one kernel.  A window inside the image copies
    ``kw * k`` consecutive words per window row without bounds checks; only border windows check.
    """
    kh, kw, sh, sw, up, left = geometry[0], geometry[1], geometry[2], geometry[3], geometry[4], geometry[5]
    c = images.shape[1]
    h = images.shape[2]
    wk = images.shape[3]
    w = wk // k
    src = images.reshape(images.size)
    span = kw * k
    spanu = U(span)
    wku = U(wk)
    row_words = c * kh * span
    plane = h * wk
    i = np.searchsorted(off, lo, side="right") - 1
    for g in range(lo, hi):
        while off[i + 1] <= g:
            i += 1
        local = np.int64(g - off[i])
        ow = widths[i]
        r = local // ow
        q = local - r * ow
        y0 = r * sh - up
        x0 = q * sw - left
        dst = np.int64(g) * row_words
        image = i * c * plane
        if y0 >= 0 and y0 + kh <= h and x0 >= 0 and x0 + kw <= w:  # unsigned indices: no wrap checks
            d = U(dst)
            for ch in range(c):
                b = U(image + ch * plane + y0 * wk + x0 * k)
                for fr in range(kh):
                    for t in range(spanu):
                        out[d + t] = src[b + t]
                    d += spanu
                    b += wku
        else:
            for ch in range(c):
                for fr in range(kh):
                    y = y0 + fr
                    for fc in range(kw):
                        xx = x0 + fc
                        if 0 <= y < h and 0 <= xx < w:
                            at = image + ch * plane + y * wk + xx * k
                            for t in range(k):
                                out[dst + t] = src[at + t]
                        else:
                            for t in range(k):
                                out[dst + t] = 0
                        dst += k


def _im2seq_dev(images, off, seq, widths, geometry, k, total, width, out):  # pragma: no cover - CUDA kernel
    """``out[g, e]``, one thread per word (coalesced writes); ``seq[g]``: row ``g``'s image; ``k`` words a value."""
    t = np.int64(cuda.grid(1))
    stride = np.int64(cuda.gridsize(1))
    kh, kw, sh, sw, up, left = geometry[0], geometry[1], geometry[2], geometry[3], geometry[4], geometry[5]
    h = images.shape[2]
    w = images.shape[3] // k
    while t < total * width:
        g = t // width
        word = t - g * width
        e = word // k
        part = word - e * k
        i = seq[g]
        local = g - off[i]
        r = local // widths[i]
        q = local - r * widths[i]
        ch = e // (kh * kw)
        rest = e - ch * kh * kw
        fr = rest // kw
        fc = rest - fr * kw
        y = r * sh - up + fr
        xx = q * sw - left + fc
        if 0 <= y < h and 0 <= xx < w:
            out[g, word] = images[i, ch, y, xx * k + part]
        else:
            out[g, word] = 0
        t += stride


def cuda_im2sequence(xp, images, off: np.ndarray, widths: np.ndarray, geometry: np.ndarray):
    """``im2sequence`` on the device: the grid's sizes come from the host (they are small), the values move there.

    ``off`` are the output's offsets (windows per image), ``widths`` each image's
    grid width, ``geometry`` ``(kh, kw, sh, sw, up, left)``; one thread per word.

    >>> import cupy as cp, numpy as np  # doctest: +SKIP
    >>> out = cuda_im2sequence(cp, cp.arange(4.0).reshape(1, 1, 2, 2), np.array([0, 1]), np.array([1]),
    ...                        np.array([2, 2, 1, 1, 0, 0]))  # doctest: +SKIP
    >>> out.tolist()  # doctest: +SKIP
    [[0.0, 1.0, 2.0, 3.0]]
    """
    images = xp.ascontiguousarray(_cuda.on_device(xp, images))
    n, c, h, w = (int(d) for d in images.shape)
    total = int(off[-1])
    width = c * int(geometry[0]) * int(geometry[1])
    out = xp.empty((total, width), images.dtype)
    if total and width:
        wd = _word_dtype(images.dtype)
        k = images.dtype.itemsize // wd.itemsize
        words = images.reshape(-1).view(np.uint8).view(wd).reshape(n, c, h, w * k)
        outw = out.reshape(-1).view(np.uint8).view(wd).reshape(total, width * k)
        doff = xp.asarray(off)
        seq = xp.empty(total, np.int64)
        _cuda.launch(xp, _cuda.compiled().seg_ids, _cuda.grid(total), doff, n, total, seq)
        kern = _cuda.jit_kernels([_im2seq_dev]).im2seq_dev
        _cuda.launch(xp, kern, _cuda.grid(total * width * k), words, doff, seq, xp.asarray(widths),
                     xp.asarray(geometry), k, total, width * k, outw)
    return out


__all__ = ["im2sequence"]
