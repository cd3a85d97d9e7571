"""Bounded memory (issue 5): peak RSS of ``lodtool pack`` on a 1 GB and a 4 GB JSON Lines input.

    python benchmarks/bench_memory.py --size full      # 1 GB and 4 GB inputs

Generates JSON Lines of nested token ids (documents > sentences > ids, as
``bench_ingest.py``): a block of unique documents, repeated to reach the two
input sizes (``full``: 1 GB and 4 GB; ``small``: 100 and 400 MB; ``tiny``: 2 and
8 MB).  Runs ``lodtool pack IN -o OUT`` (default compression) as a child
process, the two sizes interleaved, and reads each child's peak RSS from
``os.wait4`` (``ru_maxrss``: exact, no polling).  Targets: the two peaks within
20% of each other, both below 1 GB.  As a baseline, awkward's
``ak.from_json(line_delimited=True, schema=...)`` on the smaller input, in a child
process of its own (skipped with a note without awkward).
"""

from __future__ import annotations

import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C

TAG = "memory"
#: (unique block MB, small input bytes, large input bytes) per size
SIZES = {"tiny": (1, 2e6, 8e6), "small": (25, 100e6, 400e6), "full": (125, 1e9, 4e9)}
LIMIT = 1e9  # "below 1 GB"
#: runs of each input by default: a peak RSS hardly moves between runs, and a 4 GB pack takes a minute
RUNS = {"tiny": 1, "small": 3, "full": 2}

_AWKWARD = ("import pathlib, sys, awkward as ak\n"
            "schema = {'type': 'array', 'items': {'type': 'array', 'items': {'type': 'integer'}}}\n"
            "a = ak.from_json(pathlib.Path(sys.argv[1]), line_delimited=True, schema=schema)\n"
            "flat = ak.flatten(a, axis=None)\n"
            "print(len(flat))\n")


def make_input(path: Path, block: Path, size: float) -> int:
    """``path`` = ``block`` repeated until it holds at least ``size`` bytes."""
    n = max(1, math.ceil(size / block.stat().st_size))
    with open(path, "wb") as out:
        for _ in range(n):
            with open(block, "rb") as src:
                shutil.copyfileobj(src, out, 16 << 20)
    return path.stat().st_size


def run(size: str, runs: int, tmpdir: str | None) -> dict:
    from bench_ingest import generate

    block_mb, small, large = SIZES[size]
    runs = max(runs, 1)
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="lodtool-bench-memory-", dir=tmpdir) as d:
        tmp = Path(d)
        C.require_disk(tmp, int((small + large) * 1.6), "the memory benchmark")
        load0 = C.loadavg()
        t0 = time.perf_counter()
        block = tmp / "block.jsonl"
        generate(block, block_mb)
        inputs = {"small": tmp / "small.jsonl", "large": tmp / "large.jsonl"}
        sizes = {"small": make_input(inputs["small"], block, small), "large": make_input(inputs["large"], block, large)}
        block.unlink()
        C.progress(TAG, f"inputs {C.fmt_bytes(sizes['small'])} and {C.fmt_bytes(sizes['large'])} in "
                        f"{time.perf_counter() - t0:.1f} s")
        cli, env = C.lodtool_cmd(), C.child_env()
        rss: dict[str, list[int]] = {"small": [], "large": []}
        wall: dict[str, list[float]] = {"small": [], "large": []}
        for r in range(runs):
            for key in ("small", "large") if r % 2 == 0 else ("large", "small"):
                out = tmp / f"{key}.lod.h5"
                c = C.run_child(cli + ["pack", str(inputs[key]), "-o", str(out), "--force"],
                                env=env).check("lodtool pack")
                rss[key].append(c.maxrss)
                wall[key].append(c.wall)
                out.unlink()
            C.progress(TAG, f"round {r + 1}/{runs}: peak RSS {C.fmt_bytes(rss['small'][-1])} / "
                            f"{C.fmt_bytes(rss['large'][-1])}")
        ak_rss = ak_wall = None
        try:
            import awkward  # noqa: F401
        except ImportError:
            notes.append("awkward is not installed: its peak-RSS baseline is skipped")
        else:
            c = C.run_child([sys.executable, "-c", _AWKWARD, str(inputs["small"])], env=env)
            if c.rc == 0:
                ak_rss, ak_wall = c.maxrss, c.wall
            else:
                notes.append(f"awkward from_json failed on the {C.fmt_bytes(sizes['small'])} input "
                             f"(exit {c.rc}: {c.stderr.strip().splitlines()[-1:]}); its baseline is skipped")
        load1 = C.loadavg()

    peak = {k: max(v) for k, v in rss.items()}
    ratio = peak["large"] / peak["small"]
    within = 1 / 1.2 <= ratio <= 1.2
    below = all(v < LIMIT for v in peak.values())
    mbs = {k: sizes[k] / C.median(wall[k]) / 1e6 for k in wall}
    targets = [
        C.target(f"`lodtool pack` peak RSS: {C.fmt_bytes(sizes['large'])} input within 20% of "
                 f"{C.fmt_bytes(sizes['small'])} input", f"{C.fmt_bytes(peak['large'])}",
                 f"{C.fmt_bytes(peak['small'])}", C.fmt_x(ratio), within, "0.83–1.2×"),
        C.target("`lodtool pack` peak RSS below 1 GB for both inputs",
                 f"{C.fmt_bytes(peak['small'])} / {C.fmt_bytes(peak['large'])}", "1 GB (10⁹ B)",
                 C.fmt_x(max(peak.values()) / LIMIT), below, "< 1 GB"),
        C.target(f"awkward `from_json` (with schema) peak RSS on the {C.fmt_bytes(sizes['small'])} input",
                 C.fmt_bytes(peak["small"]), C.fmt_bytes(ak_rss) if ak_rss else "skipped",
                 C.fmt_x(ak_rss / peak["small"]) + " of lodtool's" if ak_rss else "–", None, "baseline"),
    ]
    rows = [[f"`lodtool pack` (default compression), {C.fmt_bytes(sizes[k])} input", C.fmt_bytes(peak[k]),
             C.fmt_bytes(min(rss[k])), f"{C.median(wall[k]):.2f} s", f"{mbs[k]:.0f} MB/s",
             C.fmt_x(peak[k] / sizes[k])] for k in ("small", "large")]
    if ak_rss:
        rows.append([f"awkward `from_json` with schema, {C.fmt_bytes(sizes['small'])} input (1 run)",
                     C.fmt_bytes(ak_rss), C.fmt_bytes(ak_rss), f"{ak_wall:.2f} s",
                     f"{sizes['small'] / ak_wall / 1e6:.0f} MB/s", C.fmt_x(ak_rss / sizes["small"])])
    tables = [{"title": "Peak RSS (ru_maxrss of the child process)",
               "head": ["process", "peak RSS (max of runs)", "min of runs", "median wall", "input MB/s",
                        "peak RSS / input size"],
               "rows": rows}]
    print(f"lodtool pack peak RSS: {C.fmt_bytes(peak['small'])} for {C.fmt_bytes(sizes['small'])}, "
          f"{C.fmt_bytes(peak['large'])} for {C.fmt_bytes(sizes['large'])} (ratio {ratio:.3f})", file=sys.stderr)
    about = (f"Inputs: {C.fmt_bytes(sizes['small'])} and {C.fmt_bytes(sizes['large'])} of JSON Lines (documents > "
             f"sentences > int token ids; a {block_mb} MB block of unique documents, repeated); {runs} runs of "
             f"each, interleaved; peak RSS is the largest of the runs. Load average {load0} before, {load1} after.")
    return {"key": TAG, "title": "Bounded memory: pack (issue 5)", "about": about, "targets": targets,
            "tables": tables, "notes": notes, "meta": {"rss": rss, "wall": wall, "sizes": sizes, "awkward": ak_rss}}


if __name__ == "__main__":
    raise SystemExit(C.main(run, __doc__, default_runs=RUNS))
