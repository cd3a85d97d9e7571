"""Write conv_im2sequence.npz: PaddlePaddle's own sequence_conv and im2sequence outputs, for lodtool's tests.

Run with a Python that has paddlepaddle 3.3.1 (CPU) installed, from anywhere::

    /path/to/paddlevenv/bin/python tests/data/paddle_ops/make_goldens_conv_im2sequence.py

Paddle is never a dependency of lodtool: this script ran once, and its output
is committed next to it.  tests/test_ops_conv.py and tests/test_ops_im2sequence.py
read the .npz with NumPy only.  Both operators run in the static graph through
their raw ops (``LayerHelper.append_op``), so the filter is an input we choose
rather than a trained parameter.  The cases are Paddle's own unit tests
(test/sequence/test_sequence_conv.py, test/legacy_test/test_im2sequence_op.py:
their shapes, LoDs and attributes, with our random data) and random cases.

Keys, for case ``i``:
  conv_{i}_x, conv_{i}_lod (offsets of x's one level), conv_{i}_filter,
  conv_{i}_attrs ([context_start, context_length]), conv_{i}_out (x's LoD is the output's)
  im2seq_{i}_x (N, C, H, W), im2seq_{i}_attrs (kernels 2, strides 2, paddings 4, out_stride 2),
  im2seq_{i}_y (real sizes (N, 2), float32; absent without), im2seq_{i}_out, im2seq_{i}_lod
"""

from __future__ import annotations

import os
import warnings

os.environ.setdefault("FLAGS_enable_pir_api", "0")
os.environ.setdefault("GLOG_minloglevel", "3")
warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402
import paddle  # noqa: E402
from paddle.base import core  # noqa: E402
from paddle.base.layer_helper import LayerHelper  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "conv_im2sequence.npz")

paddle.enable_static()
PLACE = paddle.CPUPlace()
EXE = paddle.static.Executor(PLACE)


def lod_tensor(arr, offsets=None):
    t = core.LoDTensor()
    t.set(np.ascontiguousarray(arr), PLACE)
    if offsets is not None:
        t.set_lod([[int(v) for v in offsets]])
    return t


def run_op(op, inputs, attrs, feed, dtype):
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        helper = LayerHelper(op)
        ins = {name: paddle.static.data(name, shape, dt, lod_level=lod) for name, (shape, dt, lod) in inputs.items()}
        out = helper.create_variable_for_type_inference(dtype)
        helper.append_op(type=op, inputs=ins, outputs={"Out": out}, attrs=attrs)
    return EXE.run(main, feed=feed, fetch_list=[out], return_numpy=False)[0]


def offsets(lengths):
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


def conv_cases(rng):
    # Paddle's unit tests: (lengths, width, context_start, context_length, filters)
    yield [4, 1, 3, 3], 23, 0, 1, 8, "float32"
    yield [4, 1, 3, 3], 50, -1, 3, 8, "float32"
    yield [0, 4, 1, 0, 3, 3, 0], 50, -1, 3, 8, "float32"
    cuts = np.sort(rng.choice(np.arange(1, 25), 8, replace=False))
    yield np.diff(np.concatenate([[0], cuts, [25]])).tolist(), 25, 2, 3, 8, "float32"
    for case in range(40):
        n = int(rng.integers(1, 6))
        lengths = rng.integers(0, 7, n).tolist()
        if sum(lengths) == 0:
            lengths[0] = 1
        length = int(rng.integers(1, 5))
        start = int(rng.integers(-length - 1, 3))
        yield lengths, int(rng.integers(1, 5)), start, length, int(rng.integers(1, 4)), \
            "float32"


def im2seq_cases(rng):
    # Paddle's unit tests: (N, C, H, W, kernels, strides, paddings, out_stride, real sizes)
    yield 1, 3, 4, 10, [2, 2], [1, 1], [1, 1, 1, 1], None, None
    yield 2, 3, 4, 5, [2, 1], [2, 1], [2, 1, 2, 1], None, None
    yield 6, 1, 4, 5, [2, 1], [2, 1], [2, 0, 2, 0], None, None
    yield 6, 2, 3, 3, [2, 2], [1, 1], [0, 0, 0, 0], None, None
    yield 3, 1, 4, 5, [2, 1], [1, 1], [0, 0, 0, 0], [1, 1], [[8, 10], [5, 8], [5, 8]]
    yield 2, 2, 3, 3, [2, 2], [1, 1], [1, 0, 1, 0], [2, 2], [[6, 6], [4, 4]]
    for case in range(40):
        n, c = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        h, w = int(rng.integers(1, 8)), int(rng.integers(1, 8))
        kernels = rng.integers(1, 4, 2).tolist()
        strides = rng.integers(1, 4, 2).tolist()
        paddings = rng.integers(0, 3, 4).tolist()
        if h + paddings[0] + paddings[2] < kernels[0] or w + paddings[1] + paddings[3] < kernels[1]:
            continue
        real = out_stride = None
        if case % 2 and n > 1:
            out_stride = rng.integers(1, 3, 2).tolist()
            # real sizes whose patch grid is at least 1x1 (Paddle allocates a negative size otherwise)
            lo_h = max(1, (kernels[0] - paddings[0] - paddings[2]) * out_stride[0])
            lo_w = max(1, (kernels[1] - paddings[1] - paddings[3]) * out_stride[1])
            real = [[int(rng.integers(lo_h, lo_h + 2 * h + 2)), int(rng.integers(lo_w, lo_w + 2 * w + 2))]
                    for _ in range(n)]
        yield n, c, h, w, kernels, strides, paddings, out_stride, real


def main():
    rng = np.random.default_rng(20261123)
    arrays = {}
    for i, (lengths, width, start, length, filters, dtype) in enumerate(conv_cases(rng)):
        off = offsets(lengths)
        x = rng.uniform(-1, 1, (int(off[-1]), width)).astype(dtype)
        w = rng.uniform(-1, 1, (length * width, filters)).astype(dtype)
        attrs = {"contextStart": start, "contextLength": length, "contextStride": 1, "paddingTrainable": False}
        got = run_op("sequence_conv", {"X": ([-1, width], dtype, 1), "Filter": ([length * width, filters], dtype, 0)},
                     attrs, {"X": lod_tensor(x, off), "Filter": w}, dtype)
        assert [list(o) for o in got.lod()] == [off.tolist()]
        arrays.update({f"conv_{i}_x": x, f"conv_{i}_lod": off, f"conv_{i}_filter": w,
                       f"conv_{i}_attrs": np.array([start, length], np.int64), f"conv_{i}_out": np.array(got)})
    print("sequence_conv cases:", i + 1)
    for i, (n, c, h, w, kernels, strides, paddings, out_stride, real) in enumerate(im2seq_cases(rng)):
        x = rng.uniform(-1, 1, (n, c, h, w)).astype(np.float32)
        attrs = {"kernels": kernels, "strides": strides, "paddings": paddings}
        inputs = {"X": ([-1, c, h, w], "float32", 0)}
        feed = {"X": x}
        if real is not None:
            attrs["out_stride"] = out_stride
            inputs["Y"] = ([-1, 2], "float32", 0)
            feed["Y"] = np.array(real, np.float32)
            arrays[f"im2seq_{i}_y"] = feed["Y"]
        got = run_op("im2sequence", inputs, attrs, feed, "float32")
        arrays.update({f"im2seq_{i}_x": x, f"im2seq_{i}_out": np.array(got),
                       f"im2seq_{i}_lod": np.array(got.lod()[0], np.int64),
                       f"im2seq_{i}_attrs": np.array(kernels + strides + paddings + (out_stride or [1, 1]), np.int64)})
    print("im2sequence cases:", i + 1)
    np.savez_compressed(OUT, **arrays)
    print("wrote", OUT)


if __name__ == "__main__":
    main()
