"""Shared helpers of the benchmark suite: timing, child processes, peak RSS, sections, Markdown.

Every benchmark module (``bench_*.py``) produces one *section*: a plain dict
that ``run.py`` turns into Markdown (and that ``--json`` writes out)::

    {"key": "slice", "title": "...", "about": "markdown",
     "tables": [{"title": "...", "head": [...], "rows": [[...], ...]}],
     "targets": [{"target": "...", "lodtool": "...", "anchor": "...", "ratio": "...", "met": True}],
     "notes": ["..."], "meta": {...}}

``targets`` are the issue's targets, one row each, with the measured lodtool
figure next to its anchor from the same run; ``met`` is True, False or None
(a baseline without a target, or an optional anchor that is not installed).
"""

from __future__ import annotations

import gc
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: the sizes the suite knows; each benchmark maps them onto its own data sizes
SIZES = ("tiny", "small", "full")
#: timed runs per measurement by size (tiny is a smoke test: its figures mean nothing)
DEFAULT_RUNS = {"tiny": 1, "small": 5, "full": 5}


# -- timing ----------------------------------------------------------------------------------------
def median(values) -> float:
    return float(statistics.median(values))


def interleaved(fns: dict[str, Callable[[], object]], runs: int, warmup: int = 1) -> dict[str, list[float]]:
    """Wall times of each callable, run a, b, c, a, b, c, ... so load from other processes hits all alike."""
    gc.freeze()  # keeps gc.collect() between runs cheap when big libraries are loaded
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(runs):
        for name, fn in fns.items():
            gc.collect()
            t0 = time.perf_counter()
            result = fn()
            times[name].append(time.perf_counter() - t0)
            del result
    return times


# -- child processes -------------------------------------------------------------------------------
class Child:
    """One finished child process: wall seconds, peak RSS (bytes), exit code, stderr text."""

    def __init__(self, wall: float, maxrss: int, rc: int, stderr: str):
        self.wall, self.maxrss, self.rc, self.stderr = wall, maxrss, rc, stderr

    def check(self, what: str) -> Child:
        if self.rc != 0:
            raise RuntimeError(f"{what} failed with exit code {self.rc}:\n{self.stderr[-3000:]}")
        return self


#: forks the command, waits for it, and writes "wall maxrss" to the file named first.  Peak RSS must come
#: from a small parent: Linux folds the RSS high-water mark of the process that forked (or vforked) a
#: child into the child's ``ru_maxrss`` when it execs, so a command spawned straight from a benchmark
#: process that holds gigabytes would report the benchmark's peak, not its own.
_LAUNCHER = """
import os, sys, time
out, argv = sys.argv[1], sys.argv[2:]
t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    try:
        os.execvp(argv[0], argv)
    finally:
        os._exit(127)
_, status, usage = os.wait4(pid, 0)
wall = time.perf_counter() - t0
with open(out, "w") as f:
    f.write(f"{wall!r} {usage.ru_maxrss * 1024}")
code = os.waitstatus_to_exitcode(status)
sys.exit(code if code >= 0 else 128 - code)
"""


def run_child(cmd: list[str], *, env: dict | None = None, stdout=subprocess.DEVNULL, cwd=None,
              timeout: float = 3600.0) -> Child:
    """Run ``cmd``; its wall time (fork to exit) and its own peak RSS (``ru_maxrss`` from ``wait4``).

    The command is started by a small launcher process (see ``_LAUNCHER``), so
    the peak RSS is the command's own, whatever the size of this process.
    """
    import tempfile

    with tempfile.TemporaryDirectory(prefix="lodtool-bench-child-") as d, tempfile.TemporaryFile() as err:
        report = os.path.join(d, "usage")
        proc = subprocess.Popen([sys.executable, "-S", "-c", _LAUNCHER, report, *cmd], stdin=subprocess.DEVNULL,
                                stdout=stdout, stderr=err, env=env, cwd=cwd, start_new_session=True)
        try:
            rc = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            raise RuntimeError(f"{' '.join(cmd)} ran past {timeout:g} s") from None
        err.seek(0)
        text = err.read().decode("utf-8", "replace")
        try:
            with open(report) as f:
                wall, maxrss = f.read().split()
        except (OSError, ValueError):
            raise RuntimeError(f"the launcher of {' '.join(cmd)} failed ({rc}):\n{text[-3000:]}") from None
    return Child(float(wall), int(maxrss), rc, text)


def lodtool_cmd() -> list[str]:
    """The installed ``lodtool`` script next to this interpreter (not a pyenv shim), else ``python -m lodtool``.

    Every benchmark that times lodtool processes gets its command here, so
    lodtool's bytecode is written first (:func:`compile_bytecode`).
    """
    compile_bytecode()
    script = Path(sys.executable).parent / "lodtool"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "lodtool"]


_compiled = False


def compile_bytecode() -> None:
    """Write lodtool's ``.pyc`` files once per run, as ``pip install`` does for a regular install.

    An editable install under ``PYTHONDONTWRITEBYTECODE=1`` (set on some build
    machines, this one included) otherwise compiles every lodtool module changed
    since its last ``.pyc`` from source on each start-up, while numpy and h5py,
    the anchor, load theirs precompiled: a few ms a module, in every child.
    """
    global _compiled
    if _compiled:
        return
    import compileall

    import lodtool

    compileall.compile_dir(str(Path(lodtool.__file__).parent), quiet=1)
    _compiled = True


def child_env(**extra: str) -> dict:
    """The environment for child processes: this one, without coverage or profiling hooks."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COV_CORE")}
    env.update(extra)
    return env


def import_anchor() -> list[str]:
    """The issue's start-up anchor: ``python -c "import numpy, h5py"``."""
    return [sys.executable, "-c", "import numpy, h5py"]


# -- machine and versions ---------------------------------------------------------------------------
def _version(module: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(module)
    except Exception:
        return None


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def mem_total(field: str = "MemTotal") -> int | None:
    """A /proc/meminfo figure in bytes (``MemAvailable`` for what can be had now); ``None`` off Linux."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def git_revision() -> str:
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             timeout=10, check=False).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, timeout=10, check=False).stdout.strip()
        return f"{rev}{' + local changes' if dirty else ''}" if rev else "unknown"
    except Exception:
        return "unknown"


def machine_info() -> dict:
    import h5py
    import numpy as np

    info = {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": round((mem_total() or 0) / (1 << 30), 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "h5py": h5py.__version__,
        "hdf5": h5py.version.hdf5_version,
        "lodtool": _version("lodtool") or "source tree",
        "git": git_revision(),
    }
    for mod in ("numba", "awkward", "pyarrow", "pysimdjson", "orjson", "torch", "psutil"):
        info[mod] = _version(mod)
    return info


def loadavg() -> float:
    return round(os.getloadavg()[0], 2)


# -- formatting -----------------------------------------------------------------------------------------
def fmt_s(seconds: float) -> str:
    """A duration with a unit that keeps 3 significant digits."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.3g} ms" if seconds * 1e3 < 100 else f"{seconds * 1e3:.0f} ms"
    return f"{seconds:.2f} s"


def fmt_bytes(n: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:.3g} {unit}" if n / scale < 100 else f"{n / scale:.0f} {unit}"
    return f"{int(n)} B"


def fmt_x(ratio: float | None) -> str:
    if ratio is None:
        return "–"
    if 0 < ratio < 0.01:
        return f"1/{1 / ratio:,.0f}"
    return f"{ratio:.3g}×" if ratio < 100 else f"{ratio:,.0f}×"


def target(what: str, lodtool: str, anchor: str, ratio: str, met: bool | None, goal: str) -> dict:
    return {"target": what, "goal": goal, "lodtool": lodtool, "anchor": anchor, "ratio": ratio, "met": met}


def md_table(head: list[str], rows: list[list]) -> str:
    def cell(v) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")
    lines = ["| " + " | ".join(map(cell, head)) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(map(cell, r)) + " |" for r in rows]
    return "\n".join(lines)


def verdict(met: bool | None) -> str:
    return {True: "met", False: "**not met**", None: "–"}[met]


def section_markdown(sec: dict, level: int = 2) -> str:
    h = "#" * level
    out = [f"{h} {sec['title']}", ""]
    if sec.get("about"):
        out += [sec["about"].strip(), ""]
    if sec.get("targets"):
        out += [md_table(["target", "goal", "lodtool", "anchor (same run)", "ratio", "verdict"],
                         [[t["target"], t["goal"], t["lodtool"], t["anchor"], t["ratio"], verdict(t["met"])]
                          for t in sec["targets"]]), ""]
    for table in sec.get("tables", []):
        if table.get("title"):
            out += [f"{table['title']}", ""]
        out += [md_table(table["head"], table["rows"]), ""]
    if sec.get("notes"):
        out += ["Notes:", ""] + [f"- {n}" for n in sec["notes"]] + [""]
    return "\n".join(out)


# -- the command line every bench_*.py shares -----------------------------------------------------------
def bench_args(description: str, argv=None, extra: Callable | None = None, default_runs: dict | None = None):
    import argparse

    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--size", choices=SIZES, default="small", help="data size (default small)")
    ap.add_argument("--runs", type=int, default=None, help="timed runs per measurement (default 5; tiny 1)")
    ap.add_argument("--tmpdir", default=None, help="where the generated data goes (default: the system temp)")
    ap.add_argument("--json", dest="json_out", default=None, help="write the section as JSON to this path")
    if extra is not None:
        extra(ap)
    args = ap.parse_args(argv)
    if args.runs is None:
        args.runs = (default_runs or DEFAULT_RUNS)[args.size]
    return args


def finish(sec: dict, args) -> int:
    """Print the section as Markdown; write it as JSON with ``--json``."""
    print(section_markdown(sec))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(sec, indent=1, default=str))
    return 0


#: the options :func:`bench_args` gives every section script; :func:`main` passes the others on to ``run``
COMMON_OPTIONS = ("size", "runs", "tmpdir", "json_out")


def main(run: Callable[..., dict], doc: str, argv=None, *, extra: Callable | None = None,
         default_runs: dict | None = None) -> int:
    """The command line of a section script: ``if __name__ == "__main__": raise SystemExit(C.main(run, __doc__))``.

    Parses the suite's options (:func:`bench_args`; the description is ``doc``'s
    first paragraph) and those ``extra`` adds, calls ``run(size, runs, tmpdir,
    **the extra options by their dest)`` and prints the section it returns
    (:func:`finish`).
    """
    args = bench_args(doc.split("\n\n")[0], argv, extra, default_runs)
    options = {k: v for k, v in vars(args).items() if k not in COMMON_OPTIONS}
    return finish(run(args.size, args.runs, args.tmpdir, **options), args)


def progress(tag: str, message: str) -> None:
    print(f"[{tag}] {message}", file=sys.stderr, flush=True)


def disk_free(path: str | os.PathLike) -> int:
    return shutil.disk_usage(path).free


def require_disk(path: str | os.PathLike, need: int, what: str) -> None:
    free = disk_free(path)
    if free < need + (2 << 30):
        raise SystemExit(f"{what} needs about {fmt_bytes(need)} in {path}, but only {fmt_bytes(free)} is free "
                         "(pass --tmpdir, or a smaller --size)")


def rchar() -> int:
    """Bytes this process has read through read()/pread() so far (``/proc/self/io``), or -1."""
    try:
        with open("/proc/self/io") as f:
            for line in f:
                if line.startswith("rchar:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1
