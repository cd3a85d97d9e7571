"""Benchmark issue 17's new operators: each Numba kernel against its NumPy reference, and against Paddle where it runs.

    python benchmarks/bench_ops_toolkit.py --size full
    python benchmarks/bench_ops_toolkit.py --size small --paddle-python /path/to/paddlevenv/bin/python

Cases (float32, data generated in-process; medians of ``--runs`` interleaved runs after a warm-up
that also compiles the kernels):

* ``sequence_scatter``: 1..19 ids per sequence into rows of 64 values, one sequence per row;
* ``sequence_conv``: 1..19-row sequences of width 16, a 3-row window (start -1), 16 filters;
* ``sequence_topk_avg_pooling``: 2-channel matrices of 1..20 x 1..50 values, topks 1, 3, 5;
* ``im2sequence``: 8-channel images of 32 x 256 (an OCR line), a 3 x 3 kernel, stride 1, padding 1.

Paddle 3.3.1 runs ``sequence_conv`` and ``im2sequence`` (static graph, the raw ops; executor run only,
timed in a child process under ``--paddle-python``, on the same data written to a temp file); it no
longer registers ``sequence_scatter`` and ``sequence_topk_avg_pooling``.  Ratios are ``baseline time
/ lodtool time``: bigger means lodtool is faster.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C

sys.path.insert(0, str(C.ROOT))

TAG = "toolkit"
TITLE = "Toolkit operators in memory (issue 17)"
#: (scatter sequences, conv rows, topk matrices, images) per size
SIZES = {"tiny": (2_000, 20_000, 200, 2), "small": (200_000, 1_000_000, 5_000, 16),
         "full": (1_000_000, 4_000_000, 20_000, 64)}
IMAGE = (8, 32, 256)
WIDTH, FILTERS, CONTEXT, START = 16, 16, 3, -1
TOPKS, CHANNELS = [1, 3, 5], 2


def offsets(lengths) -> np.ndarray:
    out = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=out[1:])
    return out


def make_data(size: str, seed: int = 17) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    n_scatter, n_conv, n_topk, n_images = SIZES[size]
    scatter_lens = rng.integers(1, 20, n_scatter)
    conv_lens = rng.multinomial(n_conv, np.full(n_conv // 10, 10 / n_conv))  # about 10 rows a sequence
    rows, cols = rng.integers(1, 21, n_topk), rng.integers(1, 51, n_topk)
    return {
        "scatter_x": rng.random((n_scatter, 64), np.float32),
        "scatter_off": offsets(scatter_lens),
        "scatter_ids": rng.integers(0, 64, int(scatter_lens.sum())),
        "scatter_upd": rng.random(int(scatter_lens.sum()), np.float32),
        "conv_x": rng.random((int(conv_lens.sum()), WIDTH), np.float32),
        "conv_off": offsets(conv_lens),
        "conv_w": rng.random((CONTEXT * WIDTH, FILTERS), np.float32),
        "topk_x": rng.random(int((CHANNELS * rows * cols).sum()), np.float32),
        "topk_rows": rows, "topk_cols": cols,
        "images": rng.random((n_images,) + IMAGE, np.float32),
    }


def measure(data: dict, runs: int) -> dict[str, dict[str, float]]:
    from lodtool import LoDTensor
    from lodtool.ops import im2sequence, sequence_conv, sequence_scatter, sequence_topk_avg_pooling

    ids = LoDTensor(data["scatter_ids"], [data["scatter_off"]])
    conv_x = LoDTensor(data["conv_x"], [data["conv_off"]])
    topk_x = LoDTensor(data["topk_x"], [offsets(CHANNELS * data["topk_rows"] * data["topk_cols"])])
    calls = {
        "sequence_scatter": lambda be: sequence_scatter(data["scatter_x"], ids, data["scatter_upd"], backend=be),
        "sequence_conv": lambda be: sequence_conv(conv_x, data["conv_w"], CONTEXT, START, backend=be),
        "sequence_topk_avg_pooling": lambda be: sequence_topk_avg_pooling(topk_x, data["topk_rows"].tolist(),
                                                                          data["topk_cols"].tolist(), TOPKS,
                                                                          CHANNELS, backend=be),
        "im2sequence": lambda be: im2sequence(data["images"], (3, 3), (1, 1), (1, 1, 1, 1), backend=be),
    }
    out = {}
    for name, call in calls.items():
        times = C.interleaved({"numba": lambda c=call: c("numba"), "numpy": lambda c=call: c("numpy")}, runs)
        out[name] = {k: C.median(v) for k, v in times.items()}
        C.progress(TAG, f"{name}: numba {C.fmt_s(out[name]['numba'])}, numpy {C.fmt_s(out[name]['numpy'])}")
    return out


# -- Paddle, in a child process under --paddle-python --------------------------------------------------

def paddle_child(npz: str, runs: int) -> None:
    """Time Paddle's sequence_conv and im2sequence on the data in ``npz``; print JSON (seconds)."""
    import os

    os.environ.setdefault("FLAGS_enable_pir_api", "0")
    os.environ.setdefault("GLOG_minloglevel", "3")
    import warnings

    warnings.filterwarnings("ignore")
    import paddle
    from paddle.base import core
    from paddle.base.layer_helper import LayerHelper

    paddle.enable_static()
    place = paddle.CPUPlace()
    exe = paddle.static.Executor(place)
    data = dict(np.load(npz))

    def program(op, inputs, attrs):
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.static.program_guard(main, startup):
            ins = {k: paddle.static.data(k, shape, "float32", lod_level=lod) for k, (shape, lod) in inputs.items()}
            out = LayerHelper(op).create_variable_for_type_inference("float32")
            LayerHelper(op).append_op(type=op, inputs=ins, outputs={"Out": out}, attrs=attrs)
        return main, out

    x = core.LoDTensor()
    x.set(data["conv_x"], place)
    x.set_lod([data["conv_off"].tolist()])
    conv, conv_out = program("sequence_conv", {"X": ([-1, WIDTH], 1), "Filter": ([CONTEXT * WIDTH, FILTERS], 0)},
                             {"contextStart": START, "contextLength": CONTEXT, "contextStride": 1,
                              "paddingTrainable": False})
    im2seq, im2seq_out = program("im2sequence", {"X": ([-1, *IMAGE], 0)},
                                 {"kernels": [3, 3], "strides": [1, 1], "paddings": [1, 1, 1, 1]})
    fns = {
        "sequence_conv": lambda: exe.run(conv, feed={"X": x, "Filter": data["conv_w"]}, fetch_list=[conv_out],
                                         return_numpy=False),
        "im2sequence": lambda: exe.run(im2seq, feed={"X": data["images"]}, fetch_list=[im2seq_out],
                                       return_numpy=False),
    }
    times = {name: C.median(ts) for name, ts in C.interleaved(fns, runs).items()}
    print(json.dumps({"paddle_version": paddle.__version__, "times": times}))


def measure_paddle(data: dict, python: str, runs: int, tmpdir: str | None, notes: list[str]) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="lodtool-bench-toolkit-", dir=tmpdir) as d:
        npz = Path(d) / "data.npz"
        np.savez(npz, **{k: v for k, v in data.items() if k.startswith(("conv_", "images"))})
        code = (f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r}); import bench_ops_toolkit; "
                "bench_ops_toolkit.paddle_child(sys.argv[1], int(sys.argv[2]))")
        r = subprocess.run([python, "-c", code, str(npz), str(runs)], capture_output=True, text=True,
                           env=C.child_env(), check=False)
    if r.returncode != 0:
        tail = (r.stderr.strip().splitlines() or ["no output"])[-1]
        notes.append(f"Paddle's run failed under {python} ({tail}); its rows are skipped")
        return {}
    result = json.loads(r.stdout.strip().splitlines()[-1])
    notes.append(f"Paddle {result['paddle_version']} (CPU), static graph, executor run of the raw op, timed in a "
                 "child process on the same data")
    return result["times"]


def run(size: str, runs: int, tmpdir: str | None, paddle_python: str | None) -> dict:
    load0 = C.loadavg()
    data = make_data(size)
    times = measure(data, runs)
    notes: list[str] = []
    paddle = measure_paddle(data, paddle_python, runs, tmpdir, notes) if paddle_python else {}
    if not paddle_python:
        notes.append("Paddle's rows need `--paddle-python PYTHON` (an interpreter with paddlepaddle); skipped")
    notes.append("Paddle 3.3.1 no longer registers sequence_scatter and sequence_topk_avg_pooling: no Paddle rows")
    rows, targets = [], []
    for name, t in times.items():
        ratio = t["numpy"] / t["numba"]
        p = paddle.get(name)
        rows.append([f"`{name}`", C.fmt_s(t["numba"]), C.fmt_s(t["numpy"]), C.fmt_x(ratio),
                     C.fmt_s(p) if p else "–", C.fmt_x(p / t["numba"]) if p else "–"])
        targets.append(C.target(f"`{name}` kernel ≥ 1.5× its NumPy reference", C.fmt_s(t["numba"]),
                                f"{C.fmt_s(t['numpy'])} (reference)", C.fmt_x(ratio), ratio >= 1.5, "≥ 1.5×"))
        if name in ("sequence_conv", "im2sequence"):
            targets.append(C.target(f"`{name}` ≥ 2× Paddle's op", C.fmt_s(t["numba"]),
                                    f"{C.fmt_s(p)} (Paddle)" if p else "not run", C.fmt_x(p / t["numba"]) if p else "–",
                                    (p / t["numba"] >= 2) if p else None, "≥ 2×"))
    n_scatter, n_conv, n_topk, n_images = SIZES[size]
    about = (f"Float32 data: scatter of {n_scatter:,} sequences into rows of 64; conv over {n_conv:,} rows of width "
             f"{WIDTH} (window {CONTEXT}, start {START}, {FILTERS} filters); top-k averages of {n_topk:,} "
             f"{CHANNELS}-channel matrices (1..20 x 1..50, topks {TOPKS}); im2sequence of {n_images} images of "
             f"{IMAGE[0]} x {IMAGE[1]} x {IMAGE[2]} (3 x 3 kernel, padding 1). Medians of {runs} interleaved runs.")
    return {"key": TAG, "title": TITLE, "about": about, "targets": targets,
            "tables": [{"title": "", "head": ["operator", "lodtool (Numba)", "NumPy reference", "vs reference",
                                              "Paddle", "vs Paddle"], "rows": rows}],
            "notes": notes, "meta": {"size": size, "load_before": load0, "load_after": C.loadavg()}}


if __name__ == "__main__":
    raise SystemExit(C.main(run, __doc__, extra=lambda ap: ap.add_argument(
        "--paddle-python", default=None, metavar="PYTHON", help="time Paddle's ops under this interpreter")))
