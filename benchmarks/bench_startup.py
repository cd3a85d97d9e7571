"""CLI start-up (issue 5): light commands against ``python -c "import numpy, h5py"``; kernel commands' first and second run.

    python benchmarks/bench_startup.py --size full

On a small generated file (the start-up is what is measured, not the work):

* ``lodtool inspect``, ``validate`` and ``slice ... --to jsonl``, interleaved with
  the anchor ``python -c "import numpy, h5py"`` (target: at most 1.5x);
* the kernel commands (``pool``, ``softmax``, ``reverse``, ``expand``, ``pad``,
  ``pack``) on about 10k rows, interleaved with the same anchor (target: at most
  1.5x; below their work-size crossovers they never import Numba); then each
  command's first run on an empty Numba cache (a fresh
  ``NUMBA_CACHE_DIR`` per command and round, so it compiles), then its second run
  on that cache.  The second run must not compile again: the table counts the
  cache files it wrote (0 when everything came from the cache), and compares it
  with the first run and with ``python -c "import numpy, h5py, numba, click, rich"``.

Every command also runs once under a wrapper that reports whether it imported
numba (light commands must not).  lodtool's bytecode is compiled first, as
``pip install`` does (see ``_common.compile_bytecode``).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C

TAG = "startup"
KERNEL_COMMANDS = {"tiny": ("pad",), "small": ("pool", "softmax", "reverse", "expand", "pad", "pack"),
                   "full": ("pool", "softmax", "reverse", "expand", "pad", "pack")}
HEAVY_ANCHOR = [sys.executable, "-c", "import numpy, h5py, numba, click, rich"]
_PROBE = ("import sys, atexit\n"
          "atexit.register(lambda: sys.stderr.write('\\n@numba=%d\\n' % ('numba' in sys.modules)))\n"
          "sys.argv = ['lodtool'] + sys.argv[1:]\n"
          "from lodtool.cli.main import main\n"
          "main()\n")


def make_inputs(d: Path) -> dict[str, Path]:
    from lodtool import LoDTensor
    from lodtool.container import save

    rng = np.random.default_rng(7)
    docs = rng.integers(1, 5, 667)  # about 10k rows: the "small input" for kernel commands
    sents = rng.integers(1, 12, int(docs.sum()))
    lod = [np.concatenate([[0], np.cumsum(docs)]), np.concatenate([[0], np.cumsum(sents)])]
    two = LoDTensor(rng.standard_normal(int(sents.sum())).astype(np.float32), lod)
    x_lens = rng.integers(1, 6, len(docs))
    one = LoDTensor(rng.standard_normal(int(x_lens.sum())).astype(np.float32), [np.concatenate([[0],
                                                                                              np.cumsum(x_lens)])])
    paths = {"two": d / "small.lod.h5", "x": d / "x.lod.h5", "jsonl": d / "small.jsonl"}
    save(paths["two"], {"tokens": two}, force=True)
    save(paths["x"], {"x": one}, force=True)
    with open(paths["jsonl"], "w") as f:
        f.writelines(str(doc).replace(" ", "") + "\n" for doc in two.to_nested())
    return paths


def commands(p: dict[str, Path], out: Path) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    light = {
        "inspect": ["inspect", str(p["two"])],
        "validate": ["validate", str(p["two"])],
        "slice": ["slice", str(p["two"]), "3", "--to", "jsonl"],
    }
    kernel = {
        "pool": ["pool", str(p["two"]), "--type", "average", "-o", str(out / "pool.lod.h5"), "--force"],
        "softmax": ["softmax", str(p["two"]), "-o", str(out / "softmax.lod.h5"), "--force"],
        "reverse": ["reverse", str(p["two"]), "-o", str(out / "reverse.lod.h5"), "--force"],
        "expand": ["expand", str(p["x"]), str(p["two"]), "--ref-level", "0", "-o", str(out / "expand.lod.h5"),
                   "--force"],
        "pad": ["pad", str(p["two"]), "-o", str(out / "pad.npz")],
        "pack": ["pack", str(p["jsonl"]), "-o", str(out / "pack.lod.h5"), "--force"],
    }
    return light, kernel


def cache_files(d: Path) -> int:
    return sum(1 for f in d.rglob("*") if f.suffix in (".nbi", ".nbc"))


def imports_numba(args: list[str], env: dict) -> bool:
    """Run ``lodtool ARGS`` under a wrapper that reports whether numba got imported (fails if the command does)."""
    import subprocess

    r = subprocess.run([sys.executable, "-c", _PROBE] + args, capture_output=True, text=True, env=env, timeout=600,
                       check=False)
    if r.returncode != 0:
        raise RuntimeError(f"lodtool {' '.join(args)} failed ({r.returncode}):\n{r.stderr[-3000:]}")
    return any(line == "@numba=1" for line in r.stderr.splitlines())


def run(size: str, runs: int, tmpdir: str | None) -> dict:
    runs = max(runs, 1)
    cli = C.lodtool_cmd()  # writes lodtool's bytecode first
    load0 = C.loadavg()
    with tempfile.TemporaryDirectory(prefix="lodtool-bench-startup-", dir=tmpdir) as d:
        tmp = Path(d)
        out = tmp / "out"
        out.mkdir()
        paths = make_inputs(tmp)
        light, kernel_all = commands(paths, out)
        kernel = {k: kernel_all[k] for k in KERNEL_COMMANDS[size]}
        env = C.child_env()
        # warm-up, a check that every command works, and whether it imports numba (the tiny size skips the
        # kernel commands here: their first run below is a check of its own)
        probed = light if size == "tiny" else {**light, **kernel}
        numba_used: dict[str, bool | None] = {name: imports_numba(args, env) for name, args in probed.items()}

        # light commands, the kernel commands on their small input (below every work-size crossover), and the
        # anchors, interleaved
        t_light: dict[str, list[float]] = {k: [] for k in ["anchor", "anchor+numba", *light, *kernel]}
        rounds = 1 if size == "tiny" else 2 * runs
        for _ in range(rounds):
            t_light["anchor"].append(C.run_child(C.import_anchor(), env=env).check("anchor").wall)
            t_light["anchor+numba"].append(C.run_child(HEAVY_ANCHOR, env=env).check("anchor").wall)
            for name, args in {**light, **kernel}.items():
                t_light[name].append(C.run_child(cli + args, env=env).check(f"lodtool {name}").wall)
        med = {k: C.median(v) for k, v in t_light.items()}
        C.progress(TAG, ", ".join(f"{k} {C.fmt_s(v)}" for k, v in med.items()))

        # kernel commands: first run on an empty cache, then the second run on that cache
        first: dict[str, list[float]] = {k: [] for k in kernel}
        second: dict[str, list[float]] = {k: [] for k in kernel}
        written: dict[str, list[int]] = {k: [] for k in kernel}
        for r in range(runs):
            for name, args in kernel.items():
                cache = tmp / f"numba-{name}-{r}"
                cache.mkdir()
                kenv = C.child_env(NUMBA_CACHE_DIR=str(cache))
                first[name].append(C.run_child(cli + args, env=kenv).check(f"lodtool {name} (first)").wall)
                before = cache_files(cache)
                second[name].append(C.run_child(cli + args, env=kenv).check(f"lodtool {name} (second)").wall)
                written[name].append(cache_files(cache) - before)
                shutil.rmtree(cache, ignore_errors=True)
            C.progress(TAG, f"kernel round {r + 1}/{runs}")
    load1 = C.loadavg()

    a, ah = med["anchor"], med["anchor+numba"]
    targets = []
    for name in light:
        targets.append(C.target(f"`lodtool {name}` start-up ≤ 1.5× `python -c \"import numpy, h5py\"`",
                                C.fmt_s(med[name]), C.fmt_s(a), C.fmt_x(med[name] / a), med[name] <= 1.5 * a,
                                "≤ 1.5×"))
    for name in kernel:
        targets.append(C.target(f"`lodtool {name}` on 10k rows ≤ 1.5× `python -c \"import numpy, h5py\"` "
                                "(whole process; the NumPy tier, no Numba import)",
                                C.fmt_s(med[name]), C.fmt_s(a), C.fmt_x(med[name] / a), med[name] <= 1.5 * a,
                                "≤ 1.5×"))
    rows_k = []
    for name in kernel:
        f, s, w = C.median(first[name]), C.median(second[name]), max(written[name])
        met = w == 0  # below the crossovers neither run compiles; above, only the first may
        targets.append(C.target(f"`lodtool {name}`: the second run pays no Numba compile",
                                f"2nd run {C.fmt_s(s)} ({w} cache files written)", f"1st run {C.fmt_s(f)}",
                                f"2nd / 1st = {C.fmt_x(s / f)}", met, "0 files written"))
        rows_k.append([f"`lodtool {name}`", C.fmt_s(f), C.fmt_s(s), str(w), C.fmt_x(s / f), C.fmt_s(ah),
                       C.fmt_x(s / ah), C.fmt_x(s / a), {True: "yes", False: "no"}.get(numba_used.get(name),
                                                                                      "not checked")])
    rows_l = [[f"`lodtool {name}`", C.fmt_s(med[name]), C.fmt_s(a), C.fmt_x(med[name] / a), C.fmt_s(ah),
               C.fmt_x(med[name] / ah), {True: "yes", False: "no"}.get(numba_used.get(name), "not checked")]
              for name in [*light, *kernel]]
    tables = [
        {"title": "Light commands and kernel commands on 10k rows (medians; ratio = command / anchor, lower is better)",
         "head": ["command", "wall", "`import numpy, h5py`", "ratio", "`import numpy, h5py, numba, click, rich`",
                  "ratio", "imports numba"],
         "rows": rows_l},
        {"title": "Kernel commands: first run (empty Numba cache) and second run (medians)",
         "head": ["command", "1st run", "2nd run", "cache files written by the 2nd", "2nd / 1st",
                  "`import numpy, h5py, numba, click, rich`", "2nd / that", "2nd / `import numpy, h5py`",
                  "imports numba"],
         "rows": rows_k},
    ]
    about = (f"A small generated file (667 documents, about 10k rows); {rounds} interleaved runs of each light "
             "command and "
             f"anchor, {runs} first/second pairs of each kernel command (each first run on a fresh "
             f"`NUMBA_CACHE_DIR`); the CLI is `{' '.join(cli)}`. Load average {load0} before, {load1} after.")
    return {"key": TAG, "title": "CLI start-up (issue 5)", "about": about, "targets": targets, "tables": tables,
            "notes": [], "meta": {"light": med, "first": first, "second": second, "written": written,
                                  "numba": numba_used}}


if __name__ == "__main__":
    raise SystemExit(C.main(run, __doc__))
