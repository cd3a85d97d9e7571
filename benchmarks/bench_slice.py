"""Branches from disk (issue 3): bytes read, latency against the h5py floor, the CLI process, awkward's route.

    python benchmarks/bench_slice.py --size full      # a 2-level file of >= 2 GB, 40,000 documents

Generates a 2-level container (documents > sentences > int64 token ids; the
``full`` size writes 2.2 GB of data in 40,000 documents, ``small`` 200 MB in
4,000, ``tiny`` 4 MB in 400), compression ``none`` unless ``--compression``
says otherwise, then for random top-level branches ``<i>``:

* **bytes read** by ``lodtool.open(path)["tokens"].branch(i)`` on an open
  handle, counted with ``/proc/self/io`` ``rchar`` (every ``read``/``pread``
  libhdf5 makes, page cache or not), split into the offsets windows and the
  data hyperslab by wrapping the handle's two readers, next to the branch's own
  data bytes; the same count for the h5py floor;
* **latency** of ``branch(i)`` against the h5py floor: three partial reads done
  by hand (level-0 window, level-1 window, one data hyperslab) on a plain
  ``h5py.File``.  The two run in alternating passes over the same indices, each
  pass on a freshly opened file (libhdf5 shares one file's chunk caches between
  handles of one process, so the two must never be open at once);
* **the whole process** ``lodtool slice FILE i --to jsonl`` against
  ``python -c "import numpy, h5py"``, interleaved;
* **awkward's route**: read the whole file with h5py, build the ragged array,
  index it (skipped with a note without awkward).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C

TAG = "slice"
#: (data bytes, documents, branches) per size
SIZES = {"tiny": (4e6, 400, 200), "small": (200e6, 4_000, 1_000), "full": (2.2e9, 40_000, 1_000)}
NAME = "tokens"
MEAN_SENTENCE = 30  # tokens; sentences are 1..59 tokens long


def build(path: Path, data_bytes: float, n_docs: int, compression: str, seed: int = 3) -> dict:
    """Write the 2-level file in chunks of documents; returns its shape."""
    from lodtool import LoDTensor
    from lodtool.container import LodWriter

    rng = np.random.default_rng(seed)
    rows_per_doc = data_bytes / 8 / n_docs
    sents_per_doc = max(rows_per_doc / MEAN_SENTENCE, 1)
    rows = sents = 0
    step = max(1, min(n_docs, int(2 ** 24 / rows_per_doc)))  # ~128 MB of data per append
    with LodWriter(path, compression=compression, force=True) as w:
        tw = w.add_tensor(NAME, dtype="int64", element_shape=(), lod_level=2, level_names=["doc", "sentence"])
        for start in range(0, n_docs, step):
            n = min(step, n_docs - start)
            n_sent = rng.integers(max(1, int(sents_per_doc * 0.5)), int(sents_per_doc * 1.5) + 2, n)
            s_len = rng.integers(1, 2 * MEAN_SENTENCE, int(n_sent.sum()))
            data = rng.integers(0, 30_000, int(s_len.sum()), dtype=np.int64)
            o0 = np.zeros(n + 1, np.int64)
            np.cumsum(n_sent, out=o0[1:])
            o1 = np.zeros(len(s_len) + 1, np.int64)
            np.cumsum(s_len, out=o1[1:])
            tw.append(LoDTensor._trusted(data, (o0, o1)))
            rows += len(data)
            sents += len(s_len)
    return {"docs": n_docs, "sentences": sents, "rows": rows, "bytes": os.path.getsize(path)}


# -- bytes -----------------------------------------------------------------------------------------
def count_lodtool_bytes(path: Path, indices) -> dict:
    """Bytes read per branch, split into offsets windows and data, on one open handle."""
    import lodtool

    per = {"offsets": [], "data": [], "total": [], "own": [], "own_offsets": []}
    with lodtool.open(path) as f:
        t = f[NAME]
        counts = {"offsets": 0, "data": 0}
        window, rows = t._window, t._rows

        def counted(kind, fn):
            def wrapper(*a):
                r0 = C.rchar()
                try:
                    return fn(*a)
                finally:
                    counts[kind] += C.rchar() - r0
            return wrapper

        t._window = counted("offsets", window)  # instance attributes shadow the methods branch() calls
        t._rows = counted("data", rows)
        for i in indices:
            counts["offsets"] = counts["data"] = 0
            r0 = C.rchar()
            b = t.branch(int(i))
            per["total"].append(C.rchar() - r0)
            per["offsets"].append(counts["offsets"])
            per["data"].append(counts["data"])
            per["own"].append(b.data.nbytes)
            per["own_offsets"].append(8 * (2 + len(b.offsets[0])))
    return {k: np.asarray(v) for k, v in per.items()}


def open_floor(path: Path):
    import h5py

    h = h5py.File(path, "r", locking=False)
    return h, h[f"{NAME}/lod/0"], h[f"{NAME}/lod/1"], h[f"{NAME}/data"]


def floor_read(o0, o1, d, i: int):
    w0 = o0[i:i + 2]
    w1 = o1[w0[0]:w0[1] + 1]
    return d[w1[0]:w1[-1]]


def count_floor_bytes(path: Path, indices) -> np.ndarray:
    h, o0, o1, d = open_floor(path)
    out = []
    with h:
        for i in indices:
            r0 = C.rchar()
            floor_read(o0, o1, d, int(i))
            out.append(C.rchar() - r0)
    return np.asarray(out)


# -- latency ---------------------------------------------------------------------------------------
def lodtool_pass(path: Path, indices) -> list[float]:
    import lodtool

    out = []
    with lodtool.open(path) as f:
        t = f[NAME]
        for i in indices:
            t0 = time.perf_counter()
            t.branch(int(i))
            out.append(time.perf_counter() - t0)
    return out


def floor_pass(path: Path, indices) -> list[float]:
    h, o0, o1, d = open_floor(path)
    out = []
    with h:
        for i in indices:
            t0 = time.perf_counter()
            floor_read(o0, o1, d, int(i))
            out.append(time.perf_counter() - t0)
    return out


def awkward_route(path: Path, i: int):
    import awkward as ak
    import h5py

    with h5py.File(path, "r", locking=False) as h:
        data = h[f"{NAME}/data"][...]
        o0 = h[f"{NAME}/lod/0"][...]
        o1 = h[f"{NAME}/lod/1"][...]
    content = ak.contents.ListOffsetArray(ak.index.Index64(o0), ak.contents.ListOffsetArray(
        ak.index.Index64(o1), ak.contents.NumpyArray(data)))
    arr = ak.Array(content)
    branch = arr[i]
    return ak.to_numpy(ak.flatten(branch)), ak.num(branch).to_numpy()


def run(size: str, runs: int, tmpdir: str | None, compression: str = "none") -> dict:
    data_bytes, n_docs, n_branches = SIZES[size]
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="lodtool-bench-slice-", dir=tmpdir) as d:
        tmp = Path(d)
        C.require_disk(tmp, int(data_bytes * 1.1), "the slice benchmark")
        path = tmp / "corpus.lod.h5"
        load0 = C.loadavg()
        t0 = time.perf_counter()
        shape = build(path, data_bytes, n_docs, compression)
        C.progress(TAG, f"built {C.fmt_bytes(shape['bytes'])}: {shape['docs']:,} docs, {shape['sentences']:,} "
                        f"sentences, {shape['rows']:,} rows in {time.perf_counter() - t0:.1f} s")
        rng = np.random.default_rng(11)

        # bytes read
        idx = rng.integers(0, n_docs, n_branches)
        by = count_lodtool_bytes(path, idx)
        floor_by = count_floor_bytes(path, idx)
        counted = C.rchar() >= 0
        if not counted:
            notes.append("/proc/self/io is not readable here: bytes read were not counted")
        excess = by["total"] - by["own"]
        budget_ok = by["total"] <= (64 << 10) + by["own"]
        offs_ok = by["offsets"] <= (64 << 10)

        # latency, alternating passes, each on a freshly opened file
        lt, ft = [], []
        for p in range(max(runs, 1)):
            ids = rng.integers(0, n_docs, n_branches)
            if p % 2 == 0:
                lt.append(C.median(lodtool_pass(path, ids)))
                ft.append(C.median(floor_pass(path, ids)))
            else:
                ft.append(C.median(floor_pass(path, ids)))
                lt.append(C.median(lodtool_pass(path, ids)))
        lat, flo = C.median(lt), C.median(ft)
        C.progress(TAG, f"branch median {C.fmt_s(lat)}, h5py floor {C.fmt_s(flo)}")

        # whole processes, interleaved
        cli = C.lodtool_cmd()
        env = C.child_env()
        proc = {"slice": [], "anchor": []}
        for _ in range(1):  # warm-up
            C.run_child(cli + ["slice", str(path), "0", "--to", "jsonl"], env=env).check("lodtool slice")
            C.run_child(C.import_anchor(), env=env)
        for _ in range(max(runs, 1) * 2):
            i = int(rng.integers(0, n_docs))
            proc["slice"].append(C.run_child(cli + ["slice", str(path), str(i), "--to", "jsonl"], env=env)
                                 .check("lodtool slice").wall)
            proc["anchor"].append(C.run_child(C.import_anchor(), env=env).check("import anchor").wall)
        ps, pa = C.median(proc["slice"]), C.median(proc["anchor"])
        C.progress(TAG, f"slice process {C.fmt_s(ps)}, import anchor {C.fmt_s(pa)}")

        # awkward's route
        ak_t = None
        try:
            import awkward  # noqa: F401
        except ImportError:
            notes.append("awkward is not installed: its route (load the whole file, index) is skipped")
        else:
            times = []
            awkward_route(path, 0)  # warm-up
            for _ in range(max(runs, 1)):
                i = int(rng.integers(0, n_docs))
                t0 = time.perf_counter()
                awkward_route(path, i)
                times.append(time.perf_counter() - t0)
            ak_t = C.median(times)
            C.progress(TAG, f"awkward route {C.fmt_s(ak_t)}")
        load1 = C.loadavg()

    q = lambda a, p: float(np.percentile(a, p))
    targets = [
        C.target("offsets read per branch ≤ 64 KiB", f"median {C.fmt_bytes(q(by['offsets'], 50))}, "
                 f"max {C.fmt_bytes(by['offsets'].max())}", "64 KiB", f"{offs_ok.mean():.0%} of branches within",
                 bool(offs_ok.all()) if counted else None, "every branch"),
        C.target("bytes read per branch ≤ 64 KiB + the branch's own data",
                 f"median {C.fmt_bytes(q(by['total'], 50))} read for {C.fmt_bytes(q(by['own'], 50))} of data",
                 f"h5py floor reads {C.fmt_bytes(q(floor_by, 50))}",
                 f"{budget_ok.mean():.0%} of branches within", bool(budget_ok.all()) if counted else None,
                 "every branch"),
        C.target("`f[name].branch(i)` latency ≤ 3× the h5py floor", C.fmt_s(lat), f"h5py floor {C.fmt_s(flo)}",
                 C.fmt_x(lat / flo), lat <= 3 * flo, "≤ 3×"),
        C.target("`lodtool slice FILE i --to jsonl` process ≤ 1.5× `python -c \"import numpy, h5py\"`",
                 C.fmt_s(ps), C.fmt_s(pa), C.fmt_x(ps / pa), ps <= 1.5 * pa, "≤ 1.5×"),
        C.target("awkward's route (load the whole file, index) vs `branch(i)`", C.fmt_s(lat),
                 f"awkward {C.fmt_s(ak_t)}" if ak_t else "awkward not installed",
                 C.fmt_x(ak_t / lat) + " faster" if ak_t else "skipped", None, "baseline"),
    ]
    tables = [{
        "title": f"Bytes read per branch ({n_branches:,} random branches `<i>`, counted with `/proc/self/io` rchar)",
        "head": ["", "median", "95th pct", "max"],
        "rows": [
            ["lodtool: offsets windows"] + [C.fmt_bytes(v) for v in (q(by["offsets"], 50), q(by["offsets"], 95),
                                                                      by["offsets"].max())],
            ["lodtool: data hyperslab"] + [C.fmt_bytes(v) for v in (q(by["data"], 50), q(by["data"], 95),
                                                                    by["data"].max())],
            ["lodtool: total"] + [C.fmt_bytes(v) for v in (q(by["total"], 50), q(by["total"], 95),
                                                           by["total"].max())],
            ["the branch's own data"] + [C.fmt_bytes(v) for v in (q(by["own"], 50), q(by["own"], 95),
                                                                  by["own"].max())],
            ["the branch's own offsets"] + [C.fmt_bytes(v) for v in (q(by["own_offsets"], 50),
                                                                     q(by["own_offsets"], 95),
                                                                     by["own_offsets"].max())],
            ["lodtool total − own data"] + [C.fmt_bytes(v) for v in (q(excess, 50), q(excess, 95), excess.max())],
            ["h5py floor (3 reads by hand): total"] + [C.fmt_bytes(v) for v in (q(floor_by, 50), q(floor_by, 95),
                                                                                floor_by.max())],
        ]}, {
        "title": "Latency and processes (medians)",
        "head": ["measurement", "lodtool", "anchor", "anchor figure", "lodtool / anchor"],
        "rows": [
            ["one branch on an open handle", C.fmt_s(lat), "h5py floor, 3 partial reads", C.fmt_s(flo),
             C.fmt_x(lat / flo)],
            ["`lodtool slice FILE i --to jsonl`", C.fmt_s(ps), "`python -c \"import numpy, h5py\"`", C.fmt_s(pa),
             C.fmt_x(ps / pa)],
            ["one branch on an open handle", C.fmt_s(lat), "awkward: read whole file + index",
             C.fmt_s(ak_t) if ak_t else "skipped", C.fmt_x(lat / ak_t) if ak_t else "–"],
        ]}]
    about = (f"File: {C.fmt_bytes(shape['bytes'])} on disk, compression `{compression}`, {shape['docs']:,} "
             f"documents > {shape['sentences']:,} sentences > {shape['rows']:,} int64 tokens; "
             f"{n_branches:,} random branches per pass, {max(runs, 1)} passes (latency: median of the pass "
             f"medians), {max(runs, 1) * 2} interleaved process runs; load average {load0} before, {load1} after.")
    return {"key": TAG, "title": "Branches from disk (issue 3)", "about": about, "targets": targets,
            "tables": tables, "notes": notes,
            "meta": {"shape": shape, "branch_s": lat, "floor_s": flo, "process_s": ps, "anchor_s": pa,
                     "awkward_s": ak_t, "bytes_median": q(by["total"], 50)}}


if __name__ == "__main__":
    raise SystemExit(C.main(run, __doc__, extra=lambda ap: ap.add_argument(
        "--compression", default="none", help="compression of the generated file (default none)")))
