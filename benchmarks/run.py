"""Run lodtool's CPU benchmark suite and write ``docs/benchmarks.md``.

    python -m benchmarks --size full                    # the numbers in docs/benchmarks.md (~30 min, 2 cores)
    python -m benchmarks --size tiny -o /tmp/bench.md   # a smoke run (what tests/test_benchmarks_smoke.py does)
    python -m benchmarks --size full --paddle-python /path/to/venv/bin/python   # with Paddle's rows

Each section runs in a child process of its own (``benchmarks/bench_<key>.py
--json ...``), generates its data into a temp folder, and removes it when done:

=========  =================================================================================
ingest     JSON Lines -> data + LoD: lodtool's fast parse and ``pack`` vs awkward, pysimdjson, orjson
ops        operators in memory vs the NumPy reference, ``np.copyto``, torch, awkward, Paddle
slice      branches from a >= 2 GB file: bytes read, latency vs the h5py floor, the CLI process
random     random documents and batches from a 1 GiB corpus vs the np.memmap floor (and Megatron-Core)
llm        a 1 GiB Megatron dataset: to a container and back vs ``cp`` + ``sync``, validate vs NumPy, reads in place
startup    CLI start-up vs ``python -c "import numpy, h5py"``; kernel commands' 1st vs 2nd run
validate   offsets validation vs a read-only pass (``o.sum()``) and NumPy's comparison
memory     peak RSS of ``lodtool pack`` on a 1 GB and a 4 GB input
ooc        operators on a file 2x larger than an RSS cap vs the in-memory path
newops     the operators of issue 17 vs their NumPy references; ``lod_reset`` vs Paddle's op
batch      padding waste per batching mode vs random, pack fill, planning 10M sequences, BatchDataset tokens/s
interop    zero-copy conversions (awkward, Arrow, torch); pack/unpack Parquet vs pyarrow
toolkit    issue 17's operators (scatter, conv, top-k average pooling, im2sequence) vs reference, Paddle
dask       ``lodtool.dask`` pool and parallel pack on 2 process workers vs 1; scheduler overhead
text       ``pack --tokenizer`` MB/s of text vs ``encode_batch`` + ``np.concatenate`` + h5py; ``--detokenize``
remote     requests and bytes per open / branch / batch from a local S3 server vs h5py+s3fs defaults, Parquet
=========  =================================================================================

The report puts every target of issues 3, 4 and 5 in one table (lodtool, its
anchor from the same run, the ratio, met or not), then each section's detail,
with the machine, the versions and the load average.  An existing ``## GPU``
section of the output file (written by ``benchmarks/bench_gpu.py`` on a GPU
machine) and an ``## Across CPUs`` section (a hand-written comparison with
runs on other CPUs) are kept verbatim.  The exit status is 1 if a section failed to run
(a missed target is a result, not a failure).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _common as C

#: key -> (script, title); the order is the report's
SECTIONS = {
    "ingest": ("bench_ingest.py", "Ingest"),
    "ops": ("bench_ops.py", "Operators in memory"),
    "slice": ("bench_slice.py", "Branches from disk"),
    "random": ("bench_random.py", "Random access for training"),
    "llm": ("bench_llm.py", "Token datasets of LLM training"),
    "startup": ("bench_startup.py", "CLI start-up"),
    "validate": ("bench_validate.py", "Validation speed"),
    "memory": ("bench_memory.py", "Bounded memory (pack)"),
    "ooc": ("bench_ooc.py", "Out-of-core operators"),
    "newops": ("bench_ops_new.py", "More sequence operators"),
    "batch": ("bench_batch.py", "Training batches"),
    "interop": ("bench_interop.py", "Interop"),
    "toolkit": ("bench_ops_toolkit.py", "Toolkit operators (issue 17)"),
    "dask": ("bench_dask.py", "lodtool on Dask"),
    "text": ("bench_text.py", "Text"),
    "remote": ("bench_remote.py", "Object storage"),
}
DEFAULT_OUTPUT = C.ROOT / "docs" / "benchmarks.md"
INTRO = ("Every figure below comes from one run of the suite on one machine; each lodtool figure sits next to its "
         "anchor measured in the same run, and the targets of issues 3, 4 and 5 are judged on the ratios, never on "
         "bare times. Reproduce from the repository root with:")
USAGE = ("Add `--paddle-python PYTHON` to run the operator table under an interpreter that has `paddlepaddle` (and "
         "numpy and numba) installed, for Paddle's rows; without it they are skipped with a note, as is any other "
         "optional anchor that is not installed (awkward, pysimdjson, torch). `--size small` is a quicker look, "
         "`--size tiny` the CI smoke test (`tests/test_benchmarks_smoke.py`; its figures mean nothing), "
         "`--only slice,startup` runs some sections, `--output PATH` writes elsewhere, `--tmpdir DIR` puts the "
         "generated data (up to ~7 GB at the full size, removed afterwards) somewhere else. Each section is also a "
         "script of its own (`python benchmarks/bench_slice.py --help`). A `## GPU` section already in the output "
         "file is kept as it is, and so is an `## Across CPUs` section.")
LOAD_NOTE = ("Ratios are measured in the same run, interleaved wherever two things are compared, and each section "
             "records the load average: other work on the machine slows lodtool and its anchors alike, but not "
             "always equally.")
GPU_HEADING = "## GPU"
#: a hand-written comparison of the targets' verdicts on other CPUs, kept as it is like the GPU section
CPUS_HEADING = "## Across CPUs"


def section_command(key: str, size: str, runs: int | None, tmpdir: str, json_out: Path, python: str) -> list[str]:
    script = str(HERE / SECTIONS[key][0])
    cmd = [python, script, "--size", size, "--json", str(json_out)]
    if key == "ops":
        if runs is not None:
            cmd += ["--repeat", str(runs)]
    else:
        cmd += ["--tmpdir", tmpdir]
        if runs is not None:
            cmd += ["--runs", str(runs)]
    return cmd


def existing_section(path: Path, heading: str) -> str | None:
    """The ``heading`` section of an existing report, verbatim (up to the next ``## `` heading)."""
    if not path.exists():
        return None
    text = path.read_text(encoding="utf-8")
    m = re.search(rf"^{re.escape(heading)}\b.*?(?=^## |\Z)", text, flags=re.MULTILINE | re.DOTALL)
    return m.group(0).rstrip() + "\n" if m else None


def existing_gpu_section(path: Path) -> str | None:
    """The ``## GPU`` section of an existing report, verbatim (up to the next ``## `` heading)."""
    return existing_section(path, GPU_HEADING)


def render(sections: list[dict], failures: dict[str, str], info: dict, args, started: str, seconds: float,
           timings: list[list]) -> str:
    cmd = f"python -m benchmarks --size {args.size}"
    if args.runs is not None:
        cmd += f" --runs {args.runs}"
    if args.only:
        cmd += f" --only {args.only}"
    if args.paddle_python:
        cmd += " --paddle-python PYTHON"
    versions = ", ".join(f"{k} {v}" for k, v in info.items() if k not in ("cpu", "cores", "memory_gib", "platform")
                         and v)
    out = ["# lodtool benchmarks", "", INTRO, "", "```", "python -m benchmarks --size full    # writes docs/benchmarks.md",
           "```", "", USAGE, "",
           f"This run: `{cmd}`, started {started}, took {seconds / 60:.1f} min.", "",
           f"Machine: {info['cpu']}, {info['cores']} cores, {info['memory_gib']} GiB RAM, {info['platform']}.", "",
           f"Versions: {versions}.", "", LOAD_NOTE, ""]
    out += ["## Targets", "",
            C.md_table(["section", "target", "goal", "lodtool", "anchor (same run)", "ratio", "verdict"],
                       [[SECTIONS[s["key"]][1], t["target"], t["goal"], t["lodtool"], t["anchor"], t["ratio"],
                         C.verdict(t["met"])] for s in sections for t in s.get("targets", [])]), ""]
    met = [t["met"] for s in sections for t in s.get("targets", []) if t["met"] is not None]
    out += [f"{sum(met)} of {len(met)} targets met.", ""]
    if failures:
        out += ["Sections that failed to run:", ""] + [f"- {k}: {v}" for k, v in failures.items()] + [""]
    out += [C.md_table(["section", "wall time", "load average before", "after"], timings), ""]
    for sec in sections:
        out.append(C.section_markdown(sec))
    return "\n".join(out).rstrip() + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--size", choices=C.SIZES, default="small", help="data sizes (default small; the report: full)")
    ap.add_argument("--runs", type=int, default=None, help="timed runs per measurement (default 5; tiny 1)")
    ap.add_argument("-o", "--output", default=str(DEFAULT_OUTPUT), help="the Markdown report (default "
                                                                          "docs/benchmarks.md)")
    ap.add_argument("--only", default=None, help=f"comma-separated sections (default all: {','.join(SECTIONS)})")
    ap.add_argument("--tmpdir", default=None, help="where the generated data goes (default: the system temp)")
    ap.add_argument("--paddle-python", default=None, metavar="PYTHON",
                    help="run the operator table under this interpreter (one with paddlepaddle, numpy, numba)")
    ap.add_argument("--json", dest="json_out", default=None, help="also write the raw sections as JSON")
    ap.add_argument("--jobs", type=int, default=None, help="sections run side by side (default 1; tiny 2: a smoke "
                                                           "run's figures mean nothing anyway)")
    args = ap.parse_args(argv)
    keys = list(SECTIONS) if not args.only else [k.strip() for k in args.only.split(",") if k.strip()]
    unknown = [k for k in keys if k not in SECTIONS]
    if unknown:
        ap.error(f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    output = Path(args.output)

    started = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    t_start = time.perf_counter()
    info = C.machine_info()
    env = C.child_env(PYTHONPATH=os.pathsep.join(filter(None, [str(C.ROOT), os.environ.get("PYTHONPATH")])))
    jobs = args.jobs or (2 if args.size == "tiny" else 1)
    with tempfile.TemporaryDirectory(prefix="lodtool-bench-suite-", dir=args.tmpdir) as d:

        def run_section(key: str):
            json_out = Path(d) / f"{key}.json"
            python = args.paddle_python if key == "ops" and args.paddle_python else sys.executable
            cmd = section_command(key, args.size, args.runs, d, json_out, python)
            if key in ("newops", "toolkit") and args.paddle_python:  # Paddle timed in a child there
                cmd += ["--paddle-python", args.paddle_python]
            C.progress("run", f"{key}: {' '.join(cmd)}")
            load0, t0 = C.loadavg(), time.perf_counter()
            r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                               cwd=C.ROOT, check=False)
            seconds = time.perf_counter() - t0
            sys.stderr.write(r.stderr)
            timing = [SECTIONS[key][1], f"{seconds:.0f} s", load0, C.loadavg()]
            if r.returncode != 0 or not json_out.exists():
                tail = (r.stderr.strip().splitlines() or ["no output"])[-1]
                C.progress("run", f"{key} FAILED (exit {r.returncode}: {tail})")
                return timing, None, f"exit {r.returncode}: {tail}"
            C.progress("run", f"{key} done in {seconds:.0f} s")
            return timing, json.loads(json_out.read_text()), None

        if jobs > 1:  # the tiny smoke run only: sections running side by side disturb each other's figures
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(jobs) as pool:
                outcomes = list(pool.map(run_section, keys))
        else:
            outcomes = [run_section(key) for key in keys]
    timings = [t for t, _, _ in outcomes]
    sections = [s for _, s, _ in outcomes if s is not None]
    failures = {key: f for key, (_, _, f) in zip(keys, outcomes) if f is not None}
    text = render(sections, failures, info, args, started, time.perf_counter() - t_start, timings)
    gpu = existing_gpu_section(output)  # read at the end: the file may have changed during the run
    cpus = existing_section(output, CPUS_HEADING)
    if cpus:
        text += "\n" + cpus
    text += "\n" + (gpu or f"{GPU_HEADING}\n\nMeasured with `python benchmarks/bench_gpu.py` on a machine with a "
                           "CUDA GPU; this CPU suite keeps this section as it finds it.\n")
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text, encoding="utf-8")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"info": info, "sections": sections, "failures": failures},
                                                  indent=1, default=str))
    C.progress("run", f"wrote {output} ({len(sections)} sections, {len(failures)} failed)")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
