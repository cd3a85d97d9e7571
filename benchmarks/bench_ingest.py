"""Ingest benchmark: JSON Lines of nested token ids (docs > sentences > tokens) into flat data + LoD.

    python benchmarks/bench_ingest.py --size-mb 200 --write-md bench_ingest.md
    python benchmarks/bench_ingest.py --size full --json ingest.json     # as benchmarks/run.py calls it

Generates a deterministic JSONL file of about ``--size-mb`` MB in a temp folder
(Zipf-like token ids, geometric sentence lengths, like sample_data/corpus.jsonl),
then times, on the same file (read from the page cache; the first run of each
method is a warm-up and is not counted):

- lodtool fast parse: ``iter_json`` to validated LoDTensor chunks (no writing);
- lodtool ``pack`` end to end into a container, compression none and default
  (and once without the parse thread, to show what the overlap buys);
- for reference, the container writer alone (appending chunks parsed beforehand),
  the ceiling of ``pack`` since HDF5 writes from one thread;
- awkward ``ak.from_json(line_delimited=True)`` with and without a schema;
- pysimdjson, one line at a time, to Python lists, flattened to arrays;
- orjson, one line at a time, flattened to arrays (what a Python script would do).

Then, whole processes interleaved: ``lodtool pack`` with the default compression
(shuffle + deflate), ``--compression none`` and ``lzf``, against a script running
awkward ``from_json`` with a schema plus its h5py write, and ``dd conv=fdatasync``
of the uncompressed container's bytes (the disk anchor); the containers' sizes.
Last, JSON out: ``unpack --to jsonl`` against orjson dumping the same nested lists.

Every row produces the same thing: flat int64 token ids plus the lengths of each
level.  The methods run interleaved (a, b, c, a, b, c, ...), so load from other
processes hits them alike.  The table gives the median of ``--runs`` timed runs
(default 5) as MB/s of input, and the ratio to awkward with a schema.  Optional
anchors that are not installed (awkward, pysimdjson) are skipped with a note.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(1, str(Path(__file__).resolve().parent))

SCHEMA = {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}}


def generate(path: Path, size_mb: float, seed: int = 2026) -> int:
    """Write JSONL docs > sentences > token ids until about ``size_mb`` MB; returns the token count."""
    import orjson

    rng = np.random.default_rng(seed)
    target = int(size_mb * 1e6)
    written = tokens = 0
    with open(path, "wb") as f:
        while written < target:
            n_docs = 20000
            n_sent = rng.integers(1, 16, n_docs)
            n_tok = np.minimum(rng.geometric(1 / 14, int(n_sent.sum())), 80)
            ids = np.minimum(rng.zipf(1.5, int(n_tok.sum())), 30000).tolist()
            bounds = np.concatenate([[0], np.cumsum(n_tok)]).tolist()
            sents = [ids[bounds[i]:bounds[i + 1]] for i in range(len(n_tok))]
            sb = np.concatenate([[0], np.cumsum(n_sent)]).tolist()
            lines = [orjson.dumps(sents[sb[d]:sb[d + 1]]) for d in range(n_docs)]
            block = b"\n".join(lines) + b"\n"
            f.write(block)
            written += len(block)
            tokens += len(ids)
    return tokens


# -- the methods: each returns (token count, data checksum) -------------------------------------------
def lodtool_parse(path: Path, tmp: Path):
    from lodtool.io.json import iter_json

    n = s = 0
    for chunk in iter_json(path):
        n += chunk.n_rows
        s += int(chunk.data.sum())
    return n, s


def lodtool_pack(compression, overlap: bool = True):
    def run(path: Path, tmp: Path):
        from lodtool.tasks import _pack as mod

        saved, mod.OVERLAP = mod.OVERLAP, overlap
        try:
            r = mod.pack([path], tmp / "bench.lod.h5", compression=compression, force=True)
        finally:
            mod.OVERLAP = saved
        return r.rows, None
    return run


class WriterOnly:
    """The container writer alone: the input parsed once beforehand, only the appends are timed."""

    def __init__(self):
        self.chunks = None

    def __call__(self, path: Path, tmp: Path):
        from lodtool.container import LodWriter
        from lodtool.io.json import iter_json

        if self.chunks is None:
            self.chunks = list(iter_json(path))
        with LodWriter(tmp / "writer.lod.h5", compression="none", force=True) as w:
            tw = w.add_tensor("tensor", dtype=None, element_shape=(), lod_level=self.chunks[0].lod_level)
            for c in self.chunks:
                tw.append(c)
        n = sum(c.n_rows for c in self.chunks)
        self.chunks = None if n < 0 else self.chunks
        return n, None


def awkward_from_json(schema):
    def run(path: Path, tmp: Path):
        import awkward as ak

        arr = ak.from_json(path, line_delimited=True, schema=schema) if schema else \
            ak.from_json(path, line_delimited=True)
        flat = ak.flatten(arr, axis=None)
        return len(flat), int(ak.sum(flat))
    return run


def simdjson_lines(path: Path, tmp: Path):
    import simdjson

    parser = simdjson.Parser()
    docs_len, sent_len, data = [], [], []
    with open(path, "rb") as f:
        for line in f:
            if not line.strip():
                continue
            doc = parser.parse(line).as_list()
            docs_len.append(len(doc))
            for sent in doc:
                sent_len.append(len(sent))
                data.extend(sent)
    arr = np.array(data, dtype=np.int64)
    np.array(docs_len, dtype=np.int64), np.array(sent_len, dtype=np.int64)
    return len(arr), int(arr.sum())


def orjson_lines(path: Path, tmp: Path):
    import orjson

    n = s = 0
    with open(path, "rb") as f:
        while True:
            lines = f.readlines(64 << 20)
            if not lines:
                break
            docs = [orjson.loads(line) for line in lines if line.strip()]
            docs_len = np.fromiter(map(len, docs), dtype=np.int64, count=len(docs))
            sents = list(itertools.chain.from_iterable(docs))
            sent_len = np.fromiter(map(len, sents), dtype=np.int64, count=len(sents))
            data = np.fromiter(itertools.chain.from_iterable(sents), dtype=np.int64, count=int(sent_len.sum()))
            del docs_len
            n += len(data)
            s += int(data.sum())
    return n, s


def available(module: str) -> bool:
    try:
        __import__(module)
        return True
    except ImportError:
        return False


METHODS = [
    ("lodtool-parse", "lodtool fast parse (iter_json -> LoDTensor chunks)", lodtool_parse, None),
    ("lodtool-pack-none", "lodtool pack, compression none (end to end, into the container)",
     lodtool_pack("none"), None),
    ("lodtool-pack-none-serial", "lodtool pack, compression none, without the parse thread",
     lodtool_pack("none", overlap=False), None),
    ("lodtool-pack-default", "lodtool pack, default compression: shuffle + deflate (end to end)",
     lodtool_pack(None), None),
    ("lodtool-pack-lzf", "lodtool pack, lzf (end to end)", lodtool_pack("lzf"), None),
    ("writer-only", "(reference) LodWriter alone, compression none: appending pre-parsed chunks", WriterOnly(), None),
    ("awkward-schema", "awkward from_json(line_delimited=True, schema=...)", awkward_from_json(SCHEMA), "awkward"),
    ("awkward", "awkward from_json(line_delimited=True), no schema", awkward_from_json(None), "awkward"),
    ("simdjson", "pysimdjson per line -> lists -> flat arrays", simdjson_lines, "simdjson"),
    ("orjson", "orjson per line -> flat arrays", orjson_lines, "orjson"),
]
#: generated input per suite size (MB)
SIZES = {"tiny": 2.0, "small": 30.0, "full": 100.0}


def measure(path: Path, tmp: Path, runs: int, only: set[str] | None = None):
    """Median seconds of every available method, interleaved (a, b, c, a, b, c, ...) after one warm-up each."""
    notes, chosen = [], []
    for key, label, fn, needs in METHODS:
        if only and key not in only:
            continue
        if needs and not available(needs):
            notes.append(f"{label}: skipped ({needs} is not installed)")
            continue
        chosen.append((key, label, fn))
    results = {}
    for key, label, fn in chosen:  # warm-up: imports, Numba's compiled-code cache, the page cache
        results[key] = fn(path, tmp)
    times: dict[str, list[float]] = {key: [] for key, _, _ in chosen}
    gc.freeze()  # keeps gc.collect() below cheap; the runs' own garbage is still collected
    for _ in range(runs):
        for key, label, fn in chosen:
            fresh([tmp / "bench.lod.h5", tmp / "writer.lod.h5"])  # no run pays for freeing or flushing the last
            gc.collect()
            t0 = time.perf_counter()
            results[key] = fn(path, tmp)
            times[key].append(time.perf_counter() - t0)
    size = path.stat().st_size
    rows = []
    for key, label, _ in chosen:
        med = statistics.median(times[key])
        rows.append((key, label, med, min(times[key]), size / med / 1e6, results[key]))
        print(f"{label}: median {med:.3f} s ({size / med / 1e6:.0f} MB/s)", file=sys.stderr)
    counts = {r[5][0] for r in rows if r[5] is not None}
    sums = {r[5][1] for r in rows if r[5] is not None and r[5][1] is not None}
    if len(counts) > 1 or len(sums) > 1:
        notes.append(f"WARNING: the methods disagree (token counts {counts}, sums {sums})")
    return rows, notes


# -- whole process: each command in a fresh process, against awkward + h5py and the disk ------------------
AWKWARD_SCRIPT = """
import pathlib, sys, awkward as ak, h5py
src, out = pathlib.Path(sys.argv[1]), sys.argv[2]  # a Path: a str would be read as JSON text
arr = ak.from_json(src, line_delimited=True, schema={"type": "array", "items": {"type": "array",
                   "items": {"type": "integer"}}})
form, length, buffers = ak.to_buffers(arr)
with h5py.File(out, "w") as f:
    for key, buf in buffers.items():
        f.create_dataset(key, data=buf)
"""


def fresh(outputs) -> None:
    """Before a timed write: delete its previous output and flush every dirty page, untimed.

    So no command pays for the one before it: this disk is mounted with
    ``discard``, which makes freeing a 3.47 GB file cost ~1.5 s (in the unlink,
    or in the rename or truncate that replaces it), and awkward's h5py write
    leaves its pages dirty (it does not fsync), for the next command to wait on.
    """
    for out in outputs:
        Path(out).unlink(missing_ok=True)
    os.sync()


def whole_process(path: Path, tmp: Path, runs: int) -> tuple[dict, list[dict], list[str]]:
    """``lodtool pack`` (default, none, lzf) as whole processes, interleaved with awkward + h5py and ``dd``.

    The ``dd`` anchor writes as many bytes as the uncompressed container, with
    ``conv=fdatasync``: what this disk takes, so the ``none`` row can be read as
    a fraction of it.
    """
    import shutil

    import _common as C

    cli = C.lodtool_cmd()
    env = C.child_env()
    notes = []
    out = {k: tmp / f"whole-{k}.lod.h5" for k in ("deflate", "none", "lzf")}
    written_by = {f"pack-{k}": v for k, v in out.items()} | {"awkward+h5py": tmp / "awkward.h5",
                                                              "dd": tmp / "dd.bin"}
    # --force: the warm-up's output is still there if a fresh() below could not delete it
    cmds = {f"pack-{k}": cli + ["-q", "pack", str(path), "-o", str(out[k]), "--force"] +
            ([] if k == "deflate" else ["--compression", k]) for k in out}
    if available("awkward"):
        cmds["awkward+h5py"] = [sys.executable, "-c", AWKWARD_SCRIPT, str(path), str(written_by["awkward+h5py"])]
    else:
        notes.append("awkward + h5py: skipped (awkward is not installed)")
    for name, cmd in cmds.items():  # warm-up: the page cache, the Numba cache
        C.run_child(cmd, env=env).check(name)
    none_bytes = out["none"].stat().st_size
    if shutil.which("dd"):
        block = 4 << 20
        cmds["dd"] = ["dd", "if=/dev/zero", f"of={written_by['dd']}", f"bs={block}",
                      f"count={-(-none_bytes // block)}", "conv=fdatasync", "status=none"]
    times: dict[str, list[float]] = {k: [] for k in cmds}
    for _ in range(runs):
        for name, cmd in cmds.items():
            fresh([written_by[name]])
            times[name].append(C.run_child(cmd, env=env).check(name).wall)
    med = {k: C.median(v) for k, v in times.items()}
    sizes = {k: v.stat().st_size for k, v in out.items()}
    size_in = path.stat().st_size
    base = med.get("awkward+h5py")
    targets = []
    for key, goal in (("pack-deflate", 2.0), ("pack-none", 2.0)):
        ratio = base / med[key] if base else None
        what = {"pack-deflate": "`lodtool pack` with the default compression (shuffle + deflate), whole process, "
                                "≥ 2× awkward `from_json` with a schema + its h5py write",
                "pack-none": "`lodtool pack --compression none`, whole process, ≥ 2× the same"}[key]
        targets.append(C.target(what, f"{C.fmt_s(med[key])} ({size_in / med[key] / 1e6:.0f} MB/s)",
                                f"awkward + h5py {C.fmt_s(base)}" if base else "awkward not installed",
                                C.fmt_x(ratio) if ratio else "skipped", ratio >= goal if ratio else None,
                                f"≥ {goal:g}×"))
    targets.append(C.target("default compression: file no larger than lzf's", f"{sizes['deflate']:,} bytes",
                            f"lzf {sizes['lzf']:,} bytes", C.fmt_x(sizes["lzf"] / sizes["deflate"]),
                            sizes["deflate"] <= sizes["lzf"], "≤ lzf"))
    rows = []
    for name in cmds:
        ratio = C.fmt_x(base / med[name]) if base else "–"
        written = {"pack-deflate": sizes["deflate"], "pack-none": sizes["none"], "pack-lzf": sizes["lzf"],
                   "dd": none_bytes}.get(name)
        rows.append([name, C.fmt_s(med[name]), f"{size_in / med[name] / 1e6:.0f}", ratio,
                     f"{written:,}" if written else "–",
                     f"{written / med[name] / 1e6:.0f}" if written else "–"])
    notes.append("Every timed write (in process and whole process, lodtool's and the anchors') starts with its "
                 "previous output deleted and the disk synced, untimed: this disk is mounted with `discard`, so "
                 "freeing a 3.47 GB file costs ~1.5 s to whoever replaces it, and awkward's h5py write leaves its "
                 "pages dirty (no fsync) for the next command to wait on.")
    if "dd" in med:
        notes.append(f"`pack --compression none` took {C.fmt_x(med['pack-none'] / med['dd'])} the time of `dd` "
                     f"writing its {none_bytes:,} bytes with fdatasync (the disk's own speed).")
    table = {"title": "Whole process, interleaved (ratio = awkward + h5py time / command time, higher is faster)",
             "head": ["command", "median s", "input MB/s", "vs awkward + h5py", "bytes written", "written MB/s"],
             "rows": rows}
    return table, targets, notes


#: the large input of the whole-process comparison (full size): the 100 MB file repeated, so Numba's fixed
#: first-call cost (~0.9 s here: its import and the cached scanner's load) is spread over ten times the work
LARGE_REPEAT = 10


def whole_process_large(path: Path, tmp: Path, runs: int) -> tuple[list, list[dict], list[str]]:
    """``lodtool pack`` (default compression and ``none``) against awkward + h5py, whole processes, on a 10x
    larger input, with ``dd conv=fdatasync`` of the uncompressed container's bytes (the disk's own speed)."""
    import shutil

    import _common as C

    big = tmp / "docs-large.jsonl"
    with open(big, "wb") as out:
        for _ in range(LARGE_REPEAT):
            with open(path, "rb") as src:
                while chunk := src.read(64 << 20):
                    out.write(chunk)
    env = C.child_env()
    outs = {"pack-deflate": tmp / "large.lod.h5", "pack-none": tmp / "large-none.lod.h5"}
    written_by = outs | {"awkward+h5py": tmp / "awkward-large.h5", "dd": tmp / "dd-large.bin"}
    cmds = {"pack-deflate": C.lodtool_cmd() + ["-q", "pack", str(big), "-o", str(outs["pack-deflate"]), "--force"],
            "pack-none": C.lodtool_cmd() + ["-q", "pack", str(big), "-o", str(outs["pack-none"]), "--force",
                                            "--compression", "none"],
            "awkward+h5py": [sys.executable, "-c", AWKWARD_SCRIPT, str(big), str(written_by["awkward+h5py"])]}
    times: dict[str, list[float]] = {k: [] for k in cmds}
    none_bytes = None
    for _ in range(max(runs // 2, 1)):
        for name, cmd in list(cmds.items()):
            fresh([written_by[name]])
            times.setdefault(name, []).append(C.run_child(cmd, env=env).check(name).wall)
            if name == "pack-none" and none_bytes is None and shutil.which("dd"):  # dd runs from here on
                none_bytes = outs["pack-none"].stat().st_size
                block = 4 << 20
                cmds["dd"] = ["dd", "if=/dev/zero", f"of={written_by['dd']}", f"bs={block}",
                              f"count={-(-none_bytes // block)}", "conv=fdatasync", "status=none"]
                fresh([written_by["dd"]])
                times["dd"] = [C.run_child(cmds["dd"], env=env).check("dd").wall]
    med = {k: C.median(v) for k, v in times.items()}
    size = big.stat().st_size
    sizes = {k: v.stat().st_size for k, v in outs.items()}
    for f in [big, *written_by.values()]:
        f.unlink(missing_ok=True)
    base = med["awkward+h5py"]
    targets = [C.target(f"{what} on a {size / 1e9:.1f} GB input (the fixed start-up spread over more work)",
                        f"{C.fmt_s(med[key])} ({size / med[key] / 1e6:.0f} MB/s)", f"awkward + h5py {C.fmt_s(base)}",
                        C.fmt_x(base / med[key]), base / med[key] >= 2.0, "≥ 2×")
               for key, what in (("pack-deflate", "the default compression"), ("pack-none", "`--compression none`"))]
    written = {"pack-deflate": sizes["pack-deflate"], "pack-none": sizes["pack-none"], "dd": none_bytes}
    rows = [[f"{name}, {size / 1e9:.1f} GB input", C.fmt_s(med[name]), f"{size / med[name] / 1e6:.0f}",
             C.fmt_x(base / med[name]), f"{written[name]:,}" if written.get(name) else "–",
             f"{written[name] / med[name] / 1e6:.0f}" if written.get(name) else "–"] for name in med]
    notes = []
    if "dd" in med:
        notes.append(f"On the {size / 1e9:.1f} GB input, `pack --compression none` took "
                     f"{C.fmt_x(med['pack-none'] / med['dd'])} the time of `dd` writing its {none_bytes:,} bytes "
                     "with fdatasync.")
    return rows, targets, notes


def json_out(tmp: Path, runs: int) -> tuple[dict, list[dict]]:
    """``unpack --to jsonl`` of the packed container against orjson dumping the same nested lists, in process."""
    import io

    import orjson

    import _common as C
    from lodtool.container import load
    from lodtool.tasks import unpack

    src = tmp / "whole-none.lod.h5"
    tensor = load(src)
    nested = tensor.to_nested()

    class Discard(io.RawIOBase):  # the text is made and dropped, as orjson's bytes are: no copy into a buffer
        def writable(self):
            return True

        def write(self, b):
            return len(memoryview(b))

    def lodtool_jsonl():
        return unpack(src, Discard(), to="jsonl").bytes_written

    def orjson_dump():
        return sum(len(orjson.dumps(seq)) + 1 for seq in nested)

    times = C.interleaved({"lodtool": lodtool_jsonl, "orjson": orjson_dump}, runs)
    med = {k: C.median(v) for k, v in times.items()}
    text = lodtool_jsonl()
    ratio = med["orjson"] / med["lodtool"]
    target = C.target("`unpack --to jsonl` at least orjson's speed dumping the same nested lists (which are "
                      "built beforehand, untimed)",
                      f"{C.fmt_s(med['lodtool'])} ({text / med['lodtool'] / 1e6:.0f} MB/s)",
                      f"orjson {C.fmt_s(med['orjson'])}", C.fmt_x(ratio), ratio >= 1.0, "≥ 1×")
    table = {"title": "JSON out (in process; ratio = orjson time / lodtool time)",
             "head": ["method", "median s", "MB/s of text"],
             "rows": [["lodtool unpack --to jsonl (reads the container too; the text dropped as orjson's is)", C.fmt_s(med["lodtool"]),
                       f"{text / med['lodtool'] / 1e6:.0f}"],
                      ["orjson.dumps per top-level sequence", C.fmt_s(med["orjson"]),
                       f"{text / med['orjson'] / 1e6:.0f}"]]}
    return table, [target]


def section(rows, notes, size: int, tokens: int, runs: int, load: tuple[float, float]) -> dict:
    """The suite's section (see ``_common.py``): targets and the full table."""
    import _common as C

    by = {r[0]: r for r in rows}
    base = by.get("awkward-schema")
    targets = []
    for key, goal in (("lodtool-pack-none", 2.0), ("lodtool-pack-default", None), ("lodtool-parse", None)):
        if key not in by:
            continue
        r = by[key]
        ratio = base[2] / r[2] if base else None
        what = {"lodtool-pack-none": "`lodtool pack` JSONL → container, `--compression none`, ≥ 2× awkward "
                                     "`from_json` with a schema",
                "lodtool-pack-default": "the same with the default compression (reported)",
                "lodtool-parse": "the fast parse alone (no writing)"}[key]
        targets.append(C.target(what, f"{r[4]:.0f} MB/s", f"awkward with schema {base[4]:.0f} MB/s" if base else
                                "awkward not installed", C.fmt_x(ratio) if ratio else "skipped",
                                (ratio >= goal if ratio else None) if goal else None,
                                f"≥ {goal:g}×" if goal else "reported"))
    table_rows = [[label, f"{med:.3f}", f"{best:.3f}", f"{mbs:.0f}", C.fmt_x(base[2] / med) if base else "–"]
                  for key, label, med, best, mbs, _ in rows]
    about = (f"Input: {size / 1e6:.1f} MB of JSON Lines, {tokens:,} int64 token ids (documents > sentences > "
             f"tokens), read from the page cache; median of {runs} interleaved runs after one warm-up each; "
             f"in-process calls. Load average {load[0]} before, {load[1]} after.")
    return {"key": "ingest", "title": "Ingest: JSON Lines → data + LoD (issue 5)", "about": about,
            "targets": targets,
            "tables": [{"title": "All methods (ratio = awkward-with-schema time / method time, higher is faster)",
                        "head": ["method", "median s", "best s", "MB/s", "vs awkward with schema"],
                        "rows": table_rows}],
            "notes": notes, "meta": {"rows": [r[:5] for r in rows], "size": size}}


def main(argv=None) -> int:
    import json

    import _common as C

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", choices=sorted(SIZES), default=None, help="suite size: tiny 2 MB, small 30, full 100")
    ap.add_argument("--size-mb", type=float, default=None, help="size of the generated JSONL file (default 200)")
    ap.add_argument("--runs", type=int, default=None, help="timed runs per method (default 5; tiny 1)")
    ap.add_argument("--write-md", metavar="PATH", help="also write the Markdown table to PATH")
    ap.add_argument("--json", dest="json_out", default=None, help="write the suite section as JSON to PATH")
    ap.add_argument("--tmpdir", default=None, help="where to put the generated file and containers")
    ap.add_argument("--only", default=None, help="comma-separated method keys to run (default: all)")
    ap.add_argument("--in-process-only", action="store_true",
                    help="skip the whole-process table (pack vs awkward + h5py vs dd) and the JSON-out table")
    args = ap.parse_args(argv)
    size_mb = args.size_mb or SIZES[args.size or "full"]
    runs = args.runs or (1 if args.size == "tiny" else 5)

    with tempfile.TemporaryDirectory(prefix="lodtool-bench-", dir=args.tmpdir) as d:
        tmp = Path(d)
        path = tmp / "docs.jsonl"
        t0 = time.perf_counter()
        load0 = C.loadavg()
        tokens = generate(path, size_mb)
        size = path.stat().st_size
        print(f"generated {size / 1e6:.1f} MB, {tokens:,} tokens in {time.perf_counter() - t0:.1f} s",
              file=sys.stderr)
        rows, notes = measure(path, tmp, runs, set(args.only.split(",")) if args.only else None)
        whole = json_table = None
        if not args.in_process_only:
            whole = whole_process(path, tmp, runs)
            json_table = json_out(tmp, runs)
            if (args.size or "full") == "full" and available("awkward"):
                large_rows, large_targets, large_notes = whole_process_large(path, tmp, runs)
                whole[0]["rows"] += large_rows
                whole[1][2:2] = large_targets
                whole[2].extend(large_notes)
        sec = section(rows, notes, size, tokens, runs, (load0, C.loadavg()))
        if whole is not None:
            table, targets, whole_notes = whole
            sec["targets"] += targets + json_table[1]
            sec["tables"] += [table, json_table[0]]
            sec["notes"] += whole_notes
    text = C.section_markdown(sec)
    print(text)
    if args.write_md:
        Path(args.write_md).write_text(text)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(sec, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
