"""Benchmark lodtool's sequence operators against their NumPy references and other libraries.

One command (data is generated in-process, nothing is downloaded)::

    python benchmarks/bench_ops.py                      # 10M output rows, widths 1 and 16
    python benchmarks/bench_ops.py --rows 2e6 --repeat 7 --write-md bench_out/ops.md

Every timing is the median of ``--repeat`` runs (at least 5) after one warm-up
run (which also compiles the Numba kernels); lodtool, its reference and
``np.copyto`` run interleaved, the other libraries afterwards, one at a time.  Ratios are ``baseline time /
lodtool time``, so bigger means lodtool is faster, except the ``vs copyto``
column, which is ``lodtool time / fresh np.copyto time`` of the output's bytes
(allocate, then copy; the floor for any operator that writes that output).

Cases, float32 data, for each width (1 and 16):

* expand, rows case: ``x`` without LoD, each row repeated 0..6 times (mean 3).
* expand, sequences case: ``x`` with 1..19-row sequences, each repeated 0..2 times.
* pad, rows case: the 1..19-row sequences of a 1-level tensor, to ``maxlen`` = longest.
* pad, sequences case: level 0 of a 2-level tensor (each padded item spans 1..9
  sub-sequences of 1..19 rows).
* pool (sum, average, max) over 1..19-row sequences, against ``np.add.reduceat``.
* reverse and softmax (width 1) against their references.

Baselines (skipped with a note when the package is missing): the NumPy
reference (``backend="numpy"``), ``np.copyto``, ``np.add.reduceat``,
``torch.nn.utils.rnn.pad_sequence`` (counting the split into a list),
``awkward`` ``pad_none`` + ``to_numpy``, and PaddlePaddle's static-graph
``sequence_expand``/``sequence_pool``/``sequence_softmax`` (executor run only), timed after every
other measurement of the run: paddle is not even imported before (see ``LaterPaddle``).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common as C  # noqa: E402

from lodtool import LoDTensor
from lodtool.ops import sequence_expand, sequence_pad, sequence_pool, sequence_reverse, sequence_softmax

NOTES: list[str] = []


def measure(fns: dict[str, Callable[[], object]], repeat: int) -> dict[str, float]:
    """Median wall time of each callable, after one warm-up call each.

    lodtool, its NumPy reference and ``np.copyto`` run interleaved (a, b, c, a,
    b, c, ...), so load from other processes on a shared machine hits them
    alike.  Other libraries (torch, awkward, paddle) are timed afterwards, each
    on its own: their background threads (Paddle frees its outputs
    asynchronously) would otherwise slow down whatever runs next.
    """
    own = {k: v for k, v in fns.items() if k not in FOREIGN}
    out = _interleaved(own, repeat)
    for name in (k for k in fns if k in FOREIGN):
        time.sleep(PAUSE)
        out.update(_interleaved({name: fns[name]}, repeat))
        time.sleep(PAUSE)
    return out


FOREIGN = ("torch", "awkward", "paddle")
#: seconds to let another library's background threads settle (0 at the tiny size)
PAUSE = 0.2


def _interleaved(fns: dict[str, Callable[[], object]], repeat: int) -> dict[str, float]:
    """Median wall time of each callable, interleaved (benchmarks/_common.py; gc frozen, collected between runs)."""
    return {name: C.median(ts) for name, ts in C.interleaved(fns, repeat).items()}


def fresh_copyto(like: np.ndarray) -> Callable[[], np.ndarray]:
    src = np.ones(like.shape, like.dtype)

    def run():
        dst = np.empty(like.shape, like.dtype)
        np.copyto(dst, src)
        return dst
    return run


def progress(message: str) -> None:
    print(f"[bench_ops] {message} ...", file=sys.stderr, flush=True)


def optional(name: str):
    try:
        return __import__(name)
    except Exception as exc:  # pragma: no cover - depends on the machine
        NOTES.append(f"{name} is not installed here ({type(exc).__name__}); its baseline is skipped")
        return None


# -- data ---------------------------------------------------------------------------------------

def lengths(rng, n: int, lo: int, hi: int) -> np.ndarray:
    return rng.integers(lo, hi + 1, n).astype(np.int64)


def offsets(lens: np.ndarray) -> np.ndarray:
    out = np.zeros(len(lens) + 1, np.int64)
    np.cumsum(lens, out=out[1:])
    return out


def lod_only(level_offsets: list[np.ndarray]) -> LoDTensor:
    n = int(level_offsets[-1][-1])
    return LoDTensor._trusted(np.broadcast_to(np.zeros(1, np.float32), (n,)), level_offsets)


def data(rng, rows: int, width: int) -> np.ndarray:
    shape = (rows,) if width == 1 else (rows, width)
    return rng.standard_normal(shape, dtype=np.float32)


# -- paddle (static graph) -------------------------------------------------------------------------

class Paddle:
    """Runs one static-graph operator; only ``exe.run`` is timed (inputs are fed pre-built)."""

    def __init__(self):
        os.environ.setdefault("FLAGS_enable_pir_api", "0")
        os.environ.setdefault("GLOG_minloglevel", "3")
        import paddle
        from paddle.base import core

        paddle.enable_static()
        self.paddle, self.core = paddle, core
        self.place = paddle.CPUPlace()
        self.exe = paddle.static.Executor(self.place)

    def tensor(self, arr, lod):
        t = self.core.LoDTensor()
        t.set(np.ascontiguousarray(arr.reshape(len(arr), -1)), self.place)
        if lod:
            t.set_lod([o.tolist() for o in lod])
        return t

    def program(self, build):
        paddle = self.paddle
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.static.program_guard(main, startup):
            out = build(paddle)
        return main, out

    def runner(self, build, feed):
        main, out = self.program(build)
        return lambda: self.exe.run(main, feed=feed, fetch_list=[out], return_numpy=False)


class LaterPaddle:
    """Paddle's baselines, timed after every lodtool measurement of the run.

    Importing paddle starts its thread pools and allocator threads, and its
    executor frees outputs asynchronously; on 2 cores that slowed lodtool's
    two-thread kernels next to the one-thread NumPy reference (expand rows
    width 16: 57 -> 73 ms in a process with paddle loaded, the reference
    unchanged).  So cases only record what Paddle will run, and :meth:`run`
    imports paddle once everything else is measured.
    """

    def __init__(self):
        self.pending: list[tuple[dict, Callable, Callable]] = []
        self.paddle = None  # the paddle module, once imported (for the report's versions)

    def later(self, row: dict, make_feed: Callable, build: Callable) -> None:
        """Time ``build``'s program on ``make_feed(paddle)`` into ``row["paddle"]`` at the end."""
        self.pending.append((row, make_feed, build))

    def run(self, repeat: int) -> None:
        if not self.pending:
            return
        try:
            paddle = Paddle()
        except Exception as exc:
            NOTES.append(f"paddle is not installed in {sys.executable} ({type(exc).__name__}); its baseline is "
                         "skipped (benchmarks/run.py --paddle-python PYTHON runs this table under an interpreter "
                         "that has it)")
            self.pending.clear()
            return
        self.paddle = paddle.paddle
        progress("paddle's baselines")
        for row, make_feed, build in self.pending:
            row.update(_interleaved({"paddle": paddle.runner(build, make_feed(paddle))}, repeat))
        self.pending.clear()


# -- cases ----------------------------------------------------------------------------------------

def bench_expand(rng, rows: int, width: int, repeat: int, paddle) -> list[dict]:
    out = []
    # rows case: x without LoD, each row repeated 0..6 times
    reps = lengths(rng, int(rows * 1.01) // 3, 0, 6)
    x = data(rng, len(reps), width)
    y = lod_only([offsets(reps)])
    out.append(_expand_row("rows", x, y, width, repeat, paddle, x_lod=None))
    # sequences case: x with 1..19-row sequences, each repeated 0..2 times
    lens = lengths(rng, int(rows * 1.01) // 10, 1, 19)
    reps = lengths(rng, len(lens), 0, 2)
    xt = LoDTensor._trusted(data(rng, int(lens.sum()), width), (offsets(lens),))
    y = lod_only([offsets(reps)])
    out.append(_expand_row("sequences", xt, y, width, repeat, paddle, x_lod=[offsets(lens)]))
    return out


def _expand_row(case, x, y, width, repeat, paddle, x_lod) -> dict:
    result = sequence_expand(x, y)
    row = {"op": "expand", "case": case, "width": width, "out_rows": result.n_rows}
    fns = {"lodtool": lambda: sequence_expand(x, y),
           "numpy ref": lambda: sequence_expand(x, y, backend="numpy"),
           "copyto": fresh_copyto(result.data)}
    del result
    row.update(measure(fns, repeat))
    if paddle is not None:
        xd = np.asarray(x.data if isinstance(x, LoDTensor) else x)
        ref_rows = np.zeros((y.n_rows, 1), np.float32)

        def build(pd):
            xv = pd.static.data("x", [-1, width], "float32", lod_level=1 if x_lod else 0)
            yv = pd.static.data("y", [-1, 1], "float32", lod_level=1)
            return pd.static.nn.sequence_expand(xv, yv, ref_level=-1)
        paddle.later(row, lambda P: {"x": P.tensor(xd, x_lod), "y": P.tensor(ref_rows, y.offsets)}, build)
    return row


def bench_pad(rng, rows: int, width: int, repeat: int, torch, ak) -> list[dict]:
    out = []
    lens = lengths(rng, -(-rows // 19), 1, 19)  # padded to 19: at least `rows` output rows
    xt = LoDTensor._trusted(data(rng, int(lens.sum()), width), (offsets(lens),))
    out.append(_pad_row("rows", xt, -1, lens, width, repeat, torch, ak))
    subs = lengths(rng, rows // 100, 1, 9)  # ~50 rows each, padded to ~150
    lens2 = lengths(rng, int(subs.sum()), 1, 19)
    xt2 = LoDTensor._trusted(data(rng, int(lens2.sum()), width), (offsets(subs), offsets(lens2)))
    row_lens = np.add.reduceat(lens2, offsets(subs)[:-1])
    out.append(_pad_row("sequences", xt2, 0, row_lens, width, repeat, torch, ak))
    return out


def _pad_row(case, xt, level, lens, width, repeat, torch, ak) -> dict:
    padded, _ = sequence_pad(xt, level=level)
    maxlen = padded.shape[1]
    row = {"op": "pad", "case": case, "width": width, "out_rows": padded.shape[0] * maxlen}
    fns = {"lodtool": lambda: sequence_pad(xt, level=level),
           "numpy ref": lambda: sequence_pad(xt, level=level, backend="numpy"),
           "copyto": fresh_copyto(padded)}
    del padded
    flat = np.asarray(xt.data)
    if torch is not None:
        from torch.nn.utils.rnn import pad_sequence

        split_sizes = lens.tolist()

        def run_torch():
            seqs = torch.split(torch.from_numpy(flat), split_sizes)
            return pad_sequence(seqs, batch_first=True, padding_value=0.0).numpy()
        fns["torch"] = run_torch
    if ak is not None:
        ragged = ak.unflatten(flat, lens)

        def run_ak():
            return ak.to_numpy(ak.pad_none(ragged, maxlen, axis=1, clip=True), allow_missing=True).filled(0)
        fns["awkward"] = run_ak
    row.update(measure(fns, repeat))
    return row


def bench_pool(rng, rows: int, width: int, repeat: int, paddle) -> list[dict]:
    out = []
    lens = lengths(rng, rows // 10, 1, 19)
    x = data(rng, int(lens.sum()), width)
    off = offsets(lens)
    xt = LoDTensor._trusted(x, (off,))
    starts = off[:-1]
    for pool_type in ("sum", "average", "max"):
        row = {"op": f"pool {pool_type}", "case": "sequences", "width": width, "out_rows": len(lens)}
        fns = {"lodtool": lambda pool_type=pool_type: sequence_pool(xt, pool_type),
               "numpy ref": lambda pool_type=pool_type: sequence_pool(xt, pool_type, backend="numpy")}
        if pool_type == "sum":
            fns["np.add.reduceat"] = lambda: np.add.reduceat(x, starts, axis=0)
        row.update(measure(fns, repeat))
        if paddle is not None:
            def build(pd, pool_type=pool_type):
                xv = pd.static.data("x", [-1, width], "float32", lod_level=1)
                return pd.static.nn.sequence_pool(xv, pool_type)
            paddle.later(row, lambda P: {"x": P.tensor(x, [off])}, build)
        out.append(row)
    return out


def bench_misc(rng, rows: int, repeat: int, paddle) -> list[dict]:
    lens = lengths(rng, rows // 10, 1, 19)
    off = offsets(lens)
    x = data(rng, int(lens.sum()), 1)
    xt = LoDTensor._trusted(x, (off,))
    out = []
    for name, fn in (("reverse", sequence_reverse), ("softmax", sequence_softmax)):
        result = fn(xt)
        row = {"op": name, "case": "sequences", "width": 1, "out_rows": result.n_rows}
        fns = {"lodtool": lambda fn=fn: fn(xt), "numpy ref": lambda fn=fn: fn(xt, backend="numpy"),
               "copyto": fresh_copyto(result.data)}
        del result
        row.update(measure(fns, repeat))
        if paddle is not None and name == "softmax":
            def build(pd):
                return pd.static.nn.sequence_softmax(pd.static.data("x", [-1, 1], "float32", lod_level=1))
            paddle.later(row, lambda P: {"x": P.tensor(x, [off])}, build)
        out.append(row)
    return out


# -- report -----------------------------------------------------------------------------------------

BASELINES = ["numpy ref", "np.add.reduceat", "torch", "awkward", "paddle"]


def table_cells(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    """The header and the cells of the results table: times, ratios to each baseline present, copyto."""
    present = [b for b in BASELINES if any(b in r for r in rows)]
    head = ["op", "case", "width", "out rows", "lodtool ms"] + [f"{b} ms" for b in present] + \
        [f"× vs {b}" for b in present] + ["copyto ms", "lodtool / copyto"]
    body = []
    for r in rows:
        ours = r["lodtool"]
        cells = [r["op"], r["case"], str(r["width"]), f"{r['out_rows']:,}", f"{ours * 1e3:.1f}"]
        cells += [f"{r[b] * 1e3:.1f}" if b in r else "–" for b in present]
        cells += [f"{r[b] / ours:.2f}×" if b in r else "–" for b in present]
        cells += [f"{r['copyto'] * 1e3:.1f}" if "copyto" in r else "–",
                  f"{ours / r['copyto']:.2f}" if "copyto" in r else "–"]
        body.append(cells)
    return head, body


def table(rows: list[dict]) -> str:
    head, body = table_cells(rows)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(cells) + " |" for cells in body]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=float, default=10_000_000, help="output rows per case (default 1e7)")
    parser.add_argument("--widths", default="1,16", help="element widths, comma-separated (default 1,16)")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per measurement, >= 5 (default 5)")
    parser.add_argument("--ops", default="expand,pad,pool,misc", help="which groups to run")
    parser.add_argument("--no-paddle", action="store_true", help="skip the PaddlePaddle baseline")
    parser.add_argument("--write-md", metavar="PATH", help="also write the Markdown report to PATH")
    parser.add_argument("--size", choices=sorted(SIZES), default=None,
                        help="suite size (sets --rows and, for tiny, --widths 1): tiny 2e4, small 1e6, full 1e7")
    parser.add_argument("--json", dest="json_out", default=None, help="write the suite section as JSON to PATH")
    args = parser.parse_args(argv)
    if args.size:
        args.rows = SIZES[args.size]
        if args.size == "tiny":
            args.widths = "1"
            global PAUSE
            PAUSE = 0.0
    rows = int(args.rows)
    repeat = max(5, args.repeat)
    widths = [int(w) for w in args.widths.split(",")]
    ops = set(args.ops.split(","))
    rng = np.random.default_rng(2024)

    torch = optional("torch") if "pad" in ops else None
    if torch is not None:
        torch.set_num_threads(os.cpu_count() or 1)
    ak = optional("awkward") if "pad" in ops else None
    paddle = None if args.no_paddle else LaterPaddle()

    # the long-lived process a library user has: the kernels are loaded, so the warm crossovers apply
    # (the first-call side, a fresh CLI process, is the start-up section's)
    from lodtool._jit import numba_module

    numba_module()
    load_before = os.getloadavg()[0]
    results: list[dict] = []
    for width in widths:
        if "expand" in ops:
            progress(f"expand, width {width}")
            results += bench_expand(rng, rows, width, repeat, paddle)
        if "pad" in ops:
            progress(f"pad, width {width}")
            results += bench_pad(rng, rows, width, repeat, torch, ak)
        if "pool" in ops:
            progress(f"pool, width {width}")
            results += bench_pool(rng, rows, width, repeat, paddle)
    if "misc" in ops:
        progress("reverse and softmax")
        results += bench_misc(rng, rows, repeat, paddle)
    if paddle is not None:
        paddle.run(repeat)

    import numba

    threads = numba.config.NUMBA_NUM_THREADS
    load_after = os.getloadavg()[0]
    load = f"load average {load_before:.2f} before, {load_after:.2f} after"
    report = ["# lodtool sequence operators: benchmark\n",
              f"`python benchmarks/bench_ops.py --rows {rows:g} --repeat {repeat}` on {platform.machine()}, "
              f"{os.cpu_count()} CPUs, Python {platform.python_version()}, NumPy {np.__version__}, "
              f"Numba {numba.__version__} ({threads} threads); float32 data; median of {repeat} runs; "
              f"{load}.\n",
              "`× vs X` = X's time / lodtool's time (higher is better for lodtool); "
              "`lodtool / copyto` = lodtool's time / a fresh `np.copyto` of the output's bytes.\n",
              table(results)]
    if NOTES:
        report.append("\nNotes:\n" + "\n".join(f"- {n}" for n in NOTES))
    text = "\n".join(report) + "\n"
    print(text)
    if args.write_md:
        os.makedirs(os.path.dirname(os.path.abspath(args.write_md)), exist_ok=True)
        with open(args.write_md, "w", encoding="utf-8") as f:
            f.write(text)
    if args.json_out:
        import json

        versions = {"python": f"{platform.python_version()} ({sys.executable})", "numpy": np.__version__,
                    "numba": f"{numba.__version__} ({threads} threads)"}
        for name, mod in (("torch", torch), ("awkward", ak), ("paddle", paddle and paddle.paddle)):
            if mod is not None:
                versions[name] = mod.__version__
        sec = section(results, rows, repeat, versions, (round(load_before, 2), round(load_after, 2)))
        with open(args.json_out, "w", encoding="utf-8") as f:
            json.dump(sec, f, indent=1, default=str)
    return 0


# -- the suite's section ---------------------------------------------------------------------------------

#: suite size -> output rows per case
SIZES = {"tiny": 2e4, "small": 1e6, "full": 1e7}


def _case(r: dict) -> str:
    return f"{r['op']} {r['case']} w{r['width']}"


def _criterion(rows: list[dict], what: str, goal: str, pick, ratio, ok) -> dict:
    """One target row summarising ``ratio(r)`` (higher is better) over the rows ``pick`` selects."""
    sel = [r for r in rows if pick(r)]
    have = [r for r in sel if ratio(r) is not None]
    if not have:
        return {"target": what, "goal": goal, "lodtool": "–", "anchor": "not installed", "ratio": "skipped",
                "met": None}
    worst = min(have, key=ratio)
    passed = sum(bool(ok(ratio(r))) for r in have)
    text = ", ".join(f"{_case(r)} {ratio(r):.3g}×" for r in have)
    return {"target": what, "goal": goal, "lodtool": f"{passed} of {len(have)} cases", "anchor": text,
            "ratio": f"worst {_case(worst)}: {ratio(worst):.3g}×", "met": passed == len(have)}


def section(rows: list[dict], n_rows: int, repeat: int, versions: dict, load: tuple[float, float]) -> dict:
    """The suite's section (see ``_common.py``): the issue 4 targets and the full table."""
    def vs(base):
        return lambda r: r[base] / r["lodtool"] if base in r else None

    def copy_ratio(r):
        return r["lodtool"] / r["copyto"] if "copyto" in r else None

    exp_pad = lambda r: r["op"] in ("expand", "pad")
    targets = [
        _criterion(rows, "`sequence_expand` and `sequence_pad` ≥ 1.5× the NumPy reference, every case",
                   "≥ 1.5×", exp_pad, vs("numpy ref"), lambda x: x >= 1.5),
        _criterion(rows, "`sequence_expand` ≥ 10× Paddle's op", "≥ 10×", lambda r: r["op"] == "expand",
                   vs("paddle"), lambda x: x >= 10),
        _worst_copy(rows, copy_ratio),
        _criterion(rows, "`sequence_pad` ≥ 5× torch `pad_sequence` (split into a list included)", "≥ 5×",
                   lambda r: r["op"] == "pad", vs("torch"), lambda x: x >= 5),
        _criterion(rows, "`sequence_pad` ≥ 2× awkward `pad_none` + `to_numpy`", "≥ 2×",
                   lambda r: r["op"] == "pad", vs("awkward"), lambda x: x >= 2),
        _criterion(rows, "`sequence_pool` ≥ 2× Paddle's op", "≥ 2×", lambda r: r["op"].startswith("pool"),
                   vs("paddle"), lambda x: x >= 2),
        _criterion(rows, "`sequence_pool` sum ≥ 1× `np.add.reduceat`", "≥ 1×", lambda r: r["op"] == "pool sum",
                   vs("np.add.reduceat"), lambda x: x >= 1),
    ]
    head, body = table_cells(rows)
    about = (f"In-memory operators on float32 data, {n_rows:,} output rows per case (pool: 1/10 of that); "
             f"median of {repeat} runs after a warm-up; lodtool, its NumPy reference and `np.copyto` interleaved, "
             "torch, awkward and Paddle each timed on their own afterwards. "
             f"Interpreter and versions: {', '.join(f'{k} {v}' for k, v in versions.items())}. "
             f"Load average {load[0]} before, {load[1]} after.")
    return {"key": "ops", "title": "Sequence operators in memory (issue 4)", "about": about, "targets": targets,
            "tables": [{"title": "`× vs X` = X's time / lodtool's time (higher is better for lodtool); "
                                 "`lodtool / copyto` = lodtool's time / a fresh `np.copyto` of the output's bytes",
                        "head": head, "rows": body}],
            "notes": list(NOTES), "meta": {"rows": rows, "versions": versions}}


def _worst_copy(rows: list[dict], copy_ratio) -> dict:
    sel = [r for r in rows if r["op"] in ("expand", "pad") and r["width"] == 16 and copy_ratio(r) is not None]
    what = "width 16: `sequence_expand` and `sequence_pad` within 1.5× of a fresh `np.copyto` of the output"
    if not sel:
        return {"target": what, "goal": "≤ 1.5×", "lodtool": "–", "anchor": "no width-16 cases run",
                "ratio": "skipped", "met": None}
    worst = max(sel, key=copy_ratio)
    passed = sum(copy_ratio(r) <= 1.5 for r in sel)
    return {"target": what, "goal": "≤ 1.5×", "lodtool": f"{passed} of {len(sel)} cases",
            "anchor": ", ".join(f"{_case(r)} {copy_ratio(r):.3g}×" for r in sel),
            "ratio": f"worst {_case(worst)}: {copy_ratio(worst):.3g}×", "met": passed == len(sel)}


if __name__ == "__main__":
    sys.exit(main())
