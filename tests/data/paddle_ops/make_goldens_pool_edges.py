"""Write pool_edges.npz: Paddle's sequence_pool MaxIndex output and pad_value on float64 data, for lodtool's tests.

Run with a Python that has paddlepaddle 3.3.1 (CPU) installed, from anywhere::

    /path/to/paddlevenv/bin/python tests/data/paddle_ops/make_goldens_pool_edges.py

Paddle is never a dependency of lodtool: this script ran once, and its output
is committed next to it; tests/test_ops_pool.py reads the .npz with NumPy only.
The raw ``sequence_pool`` op runs in the static graph (``LayerHelper.append_op``)
so that its second output, ``MaxIndex``, can be fetched.

Keys, for case ``i``: pool_{i}_x, pool_{i}_lod0 (and pool_{i}_lod1 for 2 levels),
pool_{i}_attrs ([pad_value] as float64), pool_{i}_type (0 max, 1 sum, 2 average),
pool_{i}_out, pool_{i}_index (MaxIndex; max only).
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
OUT = os.path.join(HERE, "pool_edges.npz")
TYPES = ["MAX", "SUM", "AVERAGE"]

paddle.enable_static()
PLACE = paddle.CPUPlace()
EXE = paddle.static.Executor(PLACE)


def offsets(lengths):
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


def run_pool(x, lod, pool_type, pad_value):
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        helper = LayerHelper("sequence_pool")
        xv = paddle.static.data("x", [-1] + list(x.shape[1:]), str(x.dtype), lod_level=len(lod))
        out = helper.create_variable_for_type_inference(str(x.dtype))
        index = helper.create_variable_for_type_inference("int32")
        helper.append_op(type="sequence_pool", inputs={"X": xv}, outputs={"Out": out, "MaxIndex": index},
                         attrs={"pooltype": pool_type, "is_test": False, "pad_value": pad_value})
    t = core.LoDTensor()
    t.set(np.ascontiguousarray(x), PLACE)
    t.set_lod([o.tolist() for o in lod])
    got_out, got_index = EXE.run(main, feed={"x": t}, fetch_list=[out, index], return_numpy=False)
    return np.array(got_out), np.array(got_index)


def main():
    rng = np.random.default_rng(1123)
    arrays = {}
    case = 0
    pads = [0.3, -2.5, 0.1, 1e-8, 0.0]
    for n in range(36):
        levels = 1 + n % 2
        top = rng.integers(1, 5, int(rng.integers(1, 5))).tolist()
        lens = [top] if levels == 1 else [top, rng.integers(0, 4, sum(top)).tolist()]
        if sum(lens[-1]) < len(lens[-1]):  # Paddle refuses fewer rows than sequences
            lens[-1][0] += len(lens[-1])
        width = int(rng.integers(1, 4))
        dtype = "float64" if n % 3 else "float32"
        x = rng.integers(-5, 6, (sum(lens[-1]), width)).astype(dtype)  # small integers: ties in max
        lod = [offsets(lv) for lv in lens]
        code = n % 3
        pad = pads[n % len(pads)]
        out, index = run_pool(x, lod, TYPES[code], pad)
        arrays.update({f"pool_{case}_x": x, f"pool_{case}_type": np.array(code), f"pool_{case}_out": out,
                       f"pool_{case}_attrs": np.array([pad], np.float64)})
        for k, o in enumerate(lod):
            arrays[f"pool_{case}_lod{k}"] = o
        if code == 0:
            arrays[f"pool_{case}_index"] = index
        case += 1
    print("sequence_pool cases:", case)
    np.savez_compressed(OUT, **arrays)
    print("wrote", OUT)


if __name__ == "__main__":
    main()
