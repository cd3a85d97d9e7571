"""Ingest benchmark: JSON Lines of nested token ids (docs > sentences > tokens) into flat data + LoD.

    python benchmarks/bench_ingest.py --size-mb 200 --write-md bench_ingest.md

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

Every row produces the same thing: flat int64 token ids plus the lengths of each
level.  The table gives the median of ``--runs`` timed runs (default 5, 3 above
500 MB) as MB/s of input, and the ratio to awkward with a schema.  Optional
anchors that are not installed (awkward, pysimdjson) are skipped with a note.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

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
    from lodtool.format.jsonio import iter_json

    n = s = 0
    for chunk in iter_json(path):
        n += chunk.n_rows
        s += int(chunk.data.sum())
    return n, s


def lodtool_pack(compression, overlap: bool = True):
    def run(path: Path, tmp: Path):
        from lodtool.format import pack as mod

        saved, mod.OVERLAP = mod.OVERLAP, overlap
        try:
            r = mod.pack([path], tmp / "bench.lod.h5", compression=compression)
        finally:
            mod.OVERLAP = saved
        return r.rows, None
    return run


class WriterOnly:
    """The container writer alone: the input parsed once beforehand, only the appends are timed."""

    def __init__(self):
        self.chunks = None

    def __call__(self, path: Path, tmp: Path):
        from lodtool.format.container import LodWriter
        from lodtool.format.jsonio import iter_json

        if self.chunks is None:
            self.chunks = list(iter_json(path))
        with LodWriter(tmp / "writer.lod.h5", compression="none") as w:
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


def time_runs(fn, path: Path, tmp: Path, runs: int):
    fn(path, tmp)  # warm-up: imports, Numba's compiled-code cache, the page cache
    times, result = [], None
    for _ in range(runs):
        gc.collect()
        t0 = time.perf_counter()
        result = fn(path, tmp)
        times.append(time.perf_counter() - t0)
    return times, result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=float, default=200.0, help="size of the generated JSONL file (default 200)")
    ap.add_argument("--runs", type=int, default=None, help="timed runs per method (default 5; 3 above 500 MB)")
    ap.add_argument("--write-md", metavar="PATH", help="also write the Markdown table to PATH")
    ap.add_argument("--tmpdir", default=None, help="where to put the generated file and containers")
    ap.add_argument("--only", default=None, help="comma-separated method keys to run (default: all)")
    args = ap.parse_args(argv)
    runs = args.runs or (5 if args.size_mb <= 500 else 3)

    with tempfile.TemporaryDirectory(prefix="lodtool-bench-", dir=args.tmpdir) as d:
        tmp = Path(d)
        path = tmp / "docs.jsonl"
        t0 = time.perf_counter()
        tokens = generate(path, args.size_mb)
        size = path.stat().st_size
        print(f"generated {size / 1e6:.1f} MB, {tokens:,} tokens in {time.perf_counter() - t0:.1f} s",
              file=sys.stderr)

        methods = [
            ("lodtool-parse", "lodtool fast parse (iter_json -> LoDTensor chunks)", lodtool_parse, None),
            ("lodtool-pack-none", "lodtool pack, compression none (end to end, into the container)",
             lodtool_pack("none"), None),
            ("lodtool-pack-none-serial", "lodtool pack, compression none, without the parse thread",
             lodtool_pack("none", overlap=False), None),
            ("lodtool-pack-default", "lodtool pack, default compression (end to end)", lodtool_pack(None), None),
            ("writer-only", "(reference) LodWriter alone, compression none: appending pre-parsed chunks",
             WriterOnly(), None),
            ("awkward-schema", "awkward from_json(line_delimited=True, schema=...)", awkward_from_json(SCHEMA),
             "awkward"),
            ("awkward", "awkward from_json(line_delimited=True), no schema", awkward_from_json(None), "awkward"),
            ("simdjson", "pysimdjson per line -> lists -> flat arrays", simdjson_lines, "simdjson"),
            ("orjson", "orjson per line -> flat arrays", orjson_lines, "orjson"),
        ]
        only = set(args.only.split(",")) if args.only else None
        rows, notes = [], []
        for key, label, fn, needs in methods:
            if only and key not in only:
                continue
            if needs and not available(needs):
                notes.append(f"{label}: skipped ({needs} is not installed)")
                continue
            times, result = time_runs(fn, path, tmp, runs)
            med = statistics.median(times)
            rows.append((key, label, med, min(times), size / med / 1e6, result))
            print(f"{label}: median {med:.3f} s ({size / med / 1e6:.0f} MB/s)", file=sys.stderr)
        counts = {r[5][0] for r in rows if r[5] is not None}
        sums = {r[5][1] for r in rows if r[5] is not None and r[5][1] is not None}
        if len(counts) > 1 or len(sums) > 1:
            notes.append(f"WARNING: the methods disagree (token counts {counts}, sums {sums})")
        base = next((r[2] for r in rows if r[0] == "awkward-schema"), None)

        import numba

        import lodtool

        lines = [
            f"Input: {size / 1e6:.1f} MB JSONL, {tokens:,} int64 token ids (docs > sentences > tokens), "
            f"read from the page cache; median of {runs} runs after one warm-up.",
            f"Machine: {os.cpu_count()} CPUs, {platform.platform()}, Python {platform.python_version()}, "
            f"numpy {np.__version__}, numba {numba.__version__}, lodtool {lodtool.__version__}.",
            "",
            "| method | median s | best s | MB/s | vs awkward with schema |",
            "|---|---:|---:|---:|---:|",
        ]
        for key, label, med, best, mbs, _ in rows:
            ratio = f"{base / med:.2f}x" if base else "n/a"
            lines.append(f"| {label} | {med:.3f} | {best:.3f} | {mbs:.0f} | {ratio} |")
        if notes:
            lines.append("")
            lines.extend(f"- {n}" for n in notes)
        table = "\n".join(lines)
        print(table)
        if args.write_md:
            Path(args.write_md).write_text(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
