"""The operators of issue 17 (concat, seq_slice, expand_as, erase, enumerate, reshape, lod_reset) against their
NumPy references, ``np.copyto`` and Paddle's ``lod_reset`` (the one of them PaddlePaddle 3.3.1 still runs).

    python benchmarks/bench_ops_new.py --size full       # 1e7 output rows per case
    python benchmarks/bench_ops_new.py --size small      # 1e6: a quick look

Every timing is the median of ``--runs`` runs after one warm-up run (which
also compiles the Numba kernels); lodtool, its NumPy reference and a fresh
``np.copyto`` of the output's bytes run interleaved, Paddle afterwards on its
own.  Ratios are ``baseline time / lodtool time`` (higher is better for
lodtool).  Cases, float32 data of widths 1 and 16 unless said:

* concat: two inputs of 1..19-row sequences, joined sequence by sequence;
* seq_slice: 1..19-row sequences, a random offset and length inside each;
* expand_as: each row repeated 0..6 times;
* erase: int64 token ids in 0..999, 1..19-row sequences, 3 tokens (compared in turn) and 40 (searched);
* enumerate: int64 ids, windows of 3;
* reshape: 1..19-row sequences of even length, width 16 to 8 (only the offsets are computed);
* lod_reset: a new level of 1..19-row sequences (checked, the data shared); Paddle copies the data.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import _common as C

from lodtool import LoDTensor
from lodtool.ops import (
    lod_reset,
    sequence_concat,
    sequence_enumerate,
    sequence_erase,
    sequence_expand_as,
    sequence_reshape,
    sequence_slice,
)

TAG = "ops_new"
ROWS = {"tiny": 20_000, "small": 1_000_000, "full": 10_000_000}
NOTES: list[str] = []


def offsets(lens: np.ndarray) -> np.ndarray:
    out = np.zeros(len(lens) + 1, np.int64)
    np.cumsum(lens, out=out[1:])
    return out


def lengths(rng, n: int, lo: int, hi: int) -> np.ndarray:
    return rng.integers(lo, hi + 1, n).astype(np.int64)


def floats(rng, rows: int, width: int) -> np.ndarray:
    return rng.standard_normal((rows,) if width == 1 else (rows, width), dtype=np.float32)


def fresh_copyto(like: np.ndarray):
    src = np.ones(like.shape, like.dtype)

    def run():
        dst = np.empty(like.shape, like.dtype)
        np.copyto(dst, src)
        return dst
    return run


def case(op: str, what: str, width, fn, out_data, runs: int) -> dict:
    """Time ``fn(backend)`` with Numba and NumPy, and a fresh copy of the output, interleaved."""
    fns = {"lodtool": lambda: fn(None), "numpy ref": lambda: fn("numpy")}
    if out_data is not None:
        fns["copyto"] = fresh_copyto(out_data)
    times = {k: C.median(v) for k, v in C.interleaved(fns, runs).items()}
    rows = int(out_data.shape[0]) if out_data is not None else None
    return {"op": op, "case": what, "width": width, "out_rows": rows, **times}


PADDLE_CHILD = r"""
import json, os, sys, statistics, time
os.environ.setdefault("FLAGS_enable_pir_api", "0")
os.environ.setdefault("GLOG_minloglevel", "3")
import numpy as np
import paddle
from paddle.base import core
from paddle.base.layer_helper import LayerHelper
folder, runs = sys.argv[1], int(sys.argv[2])
x = np.load(os.path.join(folder, "x.npy"))
x_off = np.load(os.path.join(folder, "x_off.npy"))
target = np.load(os.path.join(folder, "target.npy"))
paddle.enable_static()
place = paddle.CPUPlace()
exe = paddle.static.Executor(place)
main, startup = paddle.static.Program(), paddle.static.Program()
with paddle.static.program_guard(main, startup):
    xv = paddle.static.data("x", [-1, x.shape[1]], "float32", lod_level=1)
    yv = paddle.static.data("y", [-1], "int32")
    helper = LayerHelper("lod_reset")
    out = helper.create_variable_for_type_inference(dtype="float32")
    helper.append_op(type="lod_reset", inputs={"X": xv, "Y": yv}, outputs={"Out": out}, attrs={})
xt = core.LoDTensor()
xt.set(x, place)
xt.set_lod([x_off.tolist()])
yt = core.LoDTensor()
yt.set(target.astype(np.int32), place)
feed = {"x": xt, "y": yt}
exe.run(main, feed=feed, fetch_list=[out], return_numpy=False)
times = []
for _ in range(runs):
    t0 = time.perf_counter()
    exe.run(main, feed=feed, fetch_list=[out], return_numpy=False)
    times.append(time.perf_counter() - t0)
print(json.dumps({"version": paddle.__version__, "median": statistics.median(times)}))
"""


def paddle_lod_reset(python: str | None, x: np.ndarray, x_off: np.ndarray, target: np.ndarray,
                     runs: int) -> float | None:
    """Paddle's lod_reset op (static graph, Y the new offsets as int32), timed in a child of ``python``;
    only ``exe.run`` is timed.  ``None`` (with a note) when no interpreter with paddle is given or it fails."""
    if not python:
        NOTES.append("Paddle's baseline needs --paddle-python PYTHON (an interpreter with paddlepaddle; "
                     "benchmarks/run.py passes its own --paddle-python on); skipped")
        return None
    import json
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="lodtool-bench-paddle-") as d:
        np.save(Path(d) / "x.npy", np.ascontiguousarray(x.reshape(len(x), -1)))
        np.save(Path(d) / "x_off.npy", x_off)
        np.save(Path(d) / "target.npy", target)
        r = subprocess.run([python, "-c", PADDLE_CHILD, d, str(runs)], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        tail = (r.stderr.strip().splitlines() or ["no output"])[-1]
        NOTES.append(f"Paddle's baseline failed under {python} ({tail}); skipped")
        return None
    result = json.loads(r.stdout.strip().splitlines()[-1])
    NOTES.append(f"Paddle {result['version']} ({python}), timed in a child process, the same data")
    return float(result["median"])


def run_all(size: str, runs: int, paddle_python: str | None = None) -> list[dict]:
    rng = np.random.default_rng(17)
    n = ROWS[size]
    results = []
    for width in (1, 16):
        C.progress(TAG, f"concat, seq_slice, expand_as, width {width}")
        a_lens, b_lens = lengths(rng, n // 20, 1, 19), lengths(rng, n // 20, 1, 19)
        a = LoDTensor._trusted(floats(rng, int(a_lens.sum()), width), (offsets(a_lens),))
        b = LoDTensor._trusted(floats(rng, int(b_lens.sum()), width), (offsets(b_lens),))
        out = sequence_concat([a, b]).data
        results.append(case("concat", "2 inputs", width, lambda be, a=a, b=b: sequence_concat([a, b], backend=be), out, runs))
        lens = lengths(rng, n // 5, 1, 19)
        x = LoDTensor._trusted(floats(rng, int(lens.sum()), width), (offsets(lens),))
        off = rng.integers(0, lens)
        ln = rng.integers(0, lens - off + 1)
        out = sequence_slice(x, off, ln).data
        results.append(case("seq_slice", "1..19 rows", width, lambda be, x=x, off=off, ln=ln: sequence_slice(x, off, ln, backend=be),
                            out, runs))
        reps = lengths(rng, n // 3, 0, 6)
        y = LoDTensor._trusted(np.broadcast_to(np.zeros(1, np.float32), (int(reps.sum()),)), (offsets(reps),))
        xr = floats(rng, len(reps), width)
        out = sequence_expand_as(xr, y).data
        results.append(case("expand_as", "rows x 0..6", width, lambda be, xr=xr, y=y: sequence_expand_as(xr, y, backend=be),
                            out, runs))
    C.progress(TAG, "erase, enumerate, reshape, lod_reset")
    lens = lengths(rng, n // 10, 1, 19)
    ids = LoDTensor._trusted(rng.integers(0, 1000, int(lens.sum())).astype(np.int64), (offsets(lens),))
    for tokens in ([0, 1, 2], list(range(0, 1000, 25))):
        out = sequence_erase(ids, tokens).data
        results.append(case("erase", f"{len(tokens)} tokens", "id",
                            lambda be, t=tokens: sequence_erase(ids, t, backend=be), out, runs))
    lens3 = lengths(rng, n // 30, 1, 19)
    ids3 = LoDTensor._trusted(rng.integers(0, 1000, int(lens3.sum())).astype(np.int64), (offsets(lens3),))
    out = sequence_enumerate(ids3, 3).data
    results.append(case("enumerate", "win 3", "id", lambda be: sequence_enumerate(ids3, 3, backend=be), out, runs))
    even = lengths(rng, n // 10, 1, 9) * 2
    # contiguous data: the reshape is a view, so the case times the offsets (a broadcast view would be copied,
    # and the copy of 640 MB, the same for both paths, would be all that is timed)
    xs = LoDTensor._trusted(np.zeros((int(even.sum()), 16), np.float32), (offsets(even),))
    results.append(case("reshape", "16 -> 8, offsets only", 16, lambda be: sequence_reshape(xs, 8, backend=be), None,
                        runs))
    new_lens = lengths(rng, n // 10, 1, 19)
    new_off = offsets(new_lens)
    xd = floats(rng, int(new_off[-1]), 16)
    old_off = np.array([0, len(xd)], np.int64)
    xl = LoDTensor._trusted(xd, (old_off,))
    row = case("lod_reset", "new level", 16, lambda be: lod_reset(xl, target_lod=new_off), None, runs)
    paddle_time = paddle_lod_reset(paddle_python, xd, old_off, new_off, max(runs, 3))
    if paddle_time is not None:
        row["paddle"] = paddle_time
    results.append(row)
    return results


BASELINES = ["numpy ref", "paddle"]


def section(results: list[dict], size: str, runs: int, load: tuple[float, float]) -> dict:
    def vs(base):
        return lambda r: r[base] / r["lodtool"] if base in r else None

    targets = []
    kernels = [r for r in results if r["op"] != "lod_reset"]
    for op in dict.fromkeys(r["op"] for r in kernels):
        sel = [r for r in kernels if r["op"] == op]
        worst = min(sel, key=vs("numpy ref"))
        passed = sum(vs("numpy ref")(r) >= 1.5 for r in sel)
        targets.append(C.target(f"`{op}` ≥ 1.5× its NumPy reference, every case", f"{passed} of {len(sel)} cases",
                                ", ".join(f"{r['case']} w{r['width']} {C.fmt_x(vs('numpy ref')(r))}" for r in sel),
                                f"worst {worst['case']} w{worst['width']}: {C.fmt_x(vs('numpy ref')(worst))}",
                                passed == len(sel), "≥ 1.5×"))
    reset = [r for r in results if r["op"] == "lod_reset"]
    have = [r for r in reset if "paddle" in r]
    if have:
        ratio = vs("paddle")(have[0])
        targets.append(C.target("`lod_reset` ≥ 2× Paddle's op", "1 case", f"new level w16 {C.fmt_x(ratio)}",
                                C.fmt_x(ratio), ratio >= 2, "≥ 2×"))
    else:
        targets.append(C.target("`lod_reset` ≥ 2× Paddle's op", "–", "not installed", "skipped", None, "≥ 2×"))
    present = [b for b in BASELINES if any(b in r for r in results)]
    head = ["op", "case", "width", "out rows", "lodtool ms"] + [f"{b} ms" for b in present] + \
        [f"× vs {b}" for b in present] + ["copyto ms", "lodtool / copyto"]
    body = []
    for r in results:
        ours = r["lodtool"]
        cells = [r["op"], r["case"], str(r["width"]), f"{r['out_rows']:,}" if r["out_rows"] is not None else "–",
                 f"{ours * 1e3:.2f}"]
        cells += [f"{r[b] * 1e3:.2f}" if b in r else "–" for b in present]
        cells += [C.fmt_x(r[b] / ours) if b in r else "–" for b in present]
        cells += [f"{r['copyto'] * 1e3:.2f}" if "copyto" in r else "–",
                  f"{ours / r['copyto']:.2f}" if "copyto" in r else "–"]
        body.append(cells)
    import numba

    about = (f"The operators of issue 17, in memory, {ROWS[size]:,} rows per case at this size ({size}); median of "
             f"{runs} runs after a warm-up; lodtool, its NumPy reference and `np.copyto` interleaved, Paddle on its "
             f"own afterwards in a child process. NumPy {np.__version__}, Numba {numba.__version__} "
             f"({numba.config.NUMBA_NUM_THREADS} threads), Python {sys.version.split()[0]} ({sys.executable}). "
             f"Load average {load[0]} before, {load[1]} after. PaddlePaddle 3.3.1 runs `lod_reset` only; the other "
             "operators are gone from it.")
    return {"key": "newops", "title": "More sequence operators (issue 17)", "about": about, "targets": targets,
            "tables": [{"title": "`× vs X` = X's time / lodtool's time (higher is better for lodtool); "
                                 "`lodtool / copyto` = lodtool's time / a fresh `np.copyto` of the output's bytes",
                        "head": head, "rows": body}],
            "notes": list(NOTES)}


def run(size: str, runs: int, tmpdir: str | None, paddle_python: str | None = None) -> dict:
    """The suite's section; ``tmpdir`` goes unused (every case is in memory)."""
    runs = max(1, runs)
    load0 = C.loadavg()
    results = run_all(size, runs, paddle_python)
    return section(results, size, runs, (load0, C.loadavg()))


if __name__ == "__main__":
    raise SystemExit(C.main(run, __doc__, extra=lambda ap: ap.add_argument(
        "--paddle-python", default=None, metavar="PYTHON",
        help="time Paddle's lod_reset in a child process of this interpreter (one with paddlepaddle)")))
