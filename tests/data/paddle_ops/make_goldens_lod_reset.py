"""Golden cases of Paddle's ``lod_reset`` op (lod_reset / lod_append), computed by PaddlePaddle itself.

Run with a Python that has paddlepaddle (checked with 3.3.1, CPU); lodtool's
tests read the committed ``goldens_lod_reset.npz`` and never import paddle::

    /work/paddlevenv/bin/python tests/data/paddle_ops/make_goldens_lod_reset.py

Each case ``c<k>`` stores its inputs and Paddle's outcome:

* ``c<k>.x``, ``c<k>.x_lod`` (offsets, one level per ``c<k>.x_lod<l>``, count in ``c<k>.x_levels``);
* ``c<k>.mode``: ``attr`` (``target_lod`` attribute), ``ydata`` (Y's int32 data as offsets),
  ``ylod`` (Y a LoD tensor: its LoD is taken), plus ``c<k>.append``;
* ``c<k>.target`` (the attribute or Y's data) and ``c<k>.y_lod<l>`` for ``ylod``;
* ``c<k>.ok``: whether Paddle ran it; then ``c<k>.out`` and ``c<k>.out_lod<l>``
  (``c<k>.out_levels`` levels) are Paddle's output.

The cases include those of Paddle's own unit test (test/legacy_test/test_lod_reset_op.py).
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("FLAGS_enable_pir_api", "0")
os.environ.setdefault("GLOG_minloglevel", "3")

import numpy as np
import paddle
from paddle.base import core
from paddle.base.layer_helper import LayerHelper

HERE = Path(__file__).resolve().parent


def offsets(lengths):
    return [0] + np.cumsum(lengths).astype(int).tolist()


# (x rows, x lod as lengths or None, mode, target (offsets or Y data), y lod lengths, append)
CASES = [
    # Paddle's unit test: TestLodResetOpByAttr, ByInput, Both, YIsLoDTensor, LodAppendOpByAttr
    (10, [[3, 2, 5]], "attr", [0, 7, 10], None, False),
    (10, [[3, 2, 5]], "ydata", [[0, 4, 7, 10]], None, False),
    (10, [[3, 2, 5]], "ydata", [0, 4, 7, 10], None, False),
    (10, [[3, 2, 5]], "ylod", None, [[4, 3, 3]], False),
    (10, [[3, 2, 5]], "attr", list(range(11)), None, True),
    # more: no LoD on x, empty sequences, two-level x reset to one level, Y with two levels
    (6, None, "attr", [0, 2, 2, 6], None, False),
    (6, None, "attr", [0, 6], None, True),
    (7, [[2, 1], [3, 0, 4]], "attr", [0, 1, 7], None, False),
    (5, [[2, 3]], "ylod", None, [[1, 1], [2, 3]], False),
    (5, [[2, 3]], "ylod", None, [[2, 0, 3]], True),
    (4, [[1, 1, 2]], "attr", [0, 0, 1, 1, 4], None, False),
    (3, [[2, 1]], "attr", [0, 1, 1, 3], None, True),
    (3, [[3]], "ydata", [0, 1, 2, 3], None, True),
    # Paddle appends without checking that the levels fit together (the old last level ends at the
    # rows, the new level has fewer sequences): a LoD its own set_lod refuses
    (5, [[2, 3]], "attr", [0, 1, 2, 3, 5], None, True),
    (3, [[3]], "ydata", [0, 1, 3], None, True),
    # refused by Paddle
    (10, [[3, 2, 5]], "attr", [0, 7, 9], None, False),
    (10, [[3, 2, 5]], "attr", [1, 7, 10], None, False),
    (10, [[3, 2, 5]], "attr", [0, 8, 7, 10], None, False),
    (10, [[3, 2, 5]], "attr", [10], None, False),
    (5, [[2, 3]], "ylod", None, [[2, 2]], False),
]


def run_case(exe, place, rows, x_lens, mode, target, y_lens, append, rng):
    x = rng.standard_normal((rows, 3)).astype("float32")
    x_lod = [offsets(lv) for lv in x_lens] if x_lens else []
    main, startup = paddle.static.Program(), paddle.static.Program()
    feed = {}
    with paddle.static.program_guard(main, startup):
        xv = paddle.static.data("x", [-1, 3], "float32", lod_level=len(x_lod))
        xt = core.LoDTensor()
        xt.set(x, place)
        if x_lod:
            xt.set_lod(x_lod)
        feed["x"] = xt
        inputs = {"X": xv}
        attrs = {"append": append}
        if mode == "attr":
            attrs["target_lod"] = list(target)
        elif mode == "ydata":
            ydata = np.array(target, np.int32)
            inputs["Y"] = paddle.static.data("y", list(ydata.shape), "int32")
            feed["y"] = ydata
        else:
            y_lod = [offsets(lv) for lv in y_lens]
            inputs["Y"] = paddle.static.data("y", [-1, 1], "float32", lod_level=len(y_lod))
            yt = core.LoDTensor()
            yt.set(np.zeros((y_lod[-1][-1], 1), np.float32), place)
            yt.set_lod(y_lod)
            feed["y"] = yt
        helper = LayerHelper("lod_reset")
        out = helper.create_variable_for_type_inference(dtype="float32")
        helper.append_op(type="lod_reset", inputs=inputs, outputs={"Out": out}, attrs=attrs)
    try:
        got = exe.run(main, feed=feed, fetch_list=[out], return_numpy=False)[0]
    except Exception as exc:  # noqa: BLE001 (Paddle refuses the case, with one of several exception types)
        lines = [ln.strip() for ln in str(exc).splitlines() if "Error" in ln or "InvalidArgument" in ln]
        return x, x_lod, None, (lines[0] if lines else type(exc).__name__)[:300]
    return x, x_lod, (np.array(got), [list(map(int, lv)) for lv in got.lod()]), None


def main():
    paddle.enable_static()
    place = paddle.CPUPlace()
    exe = paddle.static.Executor(place)
    rng = np.random.default_rng(20261123)
    arrays = {"count": np.array(len(CASES))}
    for k, (rows, x_lens, mode, target, y_lens, append) in enumerate(CASES):
        x, x_lod, result, error = run_case(exe, place, rows, x_lens, mode, target, y_lens, append, rng)
        p = f"c{k}."
        arrays[p + "x"] = x
        arrays[p + "x_levels"] = np.array(len(x_lod))
        for lv, o in enumerate(x_lod):
            arrays[p + f"x_lod{lv}"] = np.array(o, np.int64)
        arrays[p + "mode"] = np.array(mode)
        arrays[p + "append"] = np.array(append)
        if target is not None:
            arrays[p + "target"] = np.array(target, np.int32 if mode == "ydata" else np.int64)
        if y_lens is not None:
            arrays[p + "y_levels"] = np.array(len(y_lens))
            for lv, lens in enumerate(y_lens):
                arrays[p + f"y_lod{lv}"] = np.array(offsets(lens), np.int64)
        arrays[p + "ok"] = np.array(result is not None)
        if result is not None:
            arrays[p + "out"] = result[0]
            arrays[p + "out_levels"] = np.array(len(result[1]))
            for lv, o in enumerate(result[1]):
                arrays[p + f"out_lod{lv}"] = np.array(o, np.int64)
        else:
            arrays[p + "error"] = np.array(error)
        print(k, mode, "ok" if result is not None else f"refused: {error}",
              result[1] if result is not None else "")
    np.savez_compressed(HERE / "goldens_lod_reset.npz", **arrays)


if __name__ == "__main__":
    main()
