"""lodtool on Dask (issue 19): 2 process workers against 1 on a sharded input, for ``pool`` and parallel ``pack``.

    python benchmarks/bench_dask.py --size full     # a 4 GB sharded input, 8 JSONL inputs of 128 MB

Generates a 1-level float32 tensor (sequences of 1..399 rows; ``full``:
4 GB of data, ``small`` 256 MB, ``tiny`` 16 MB) as a sharded folder of 8
uneven shards, and JSON Lines inputs for ``pack`` (``full``: 8 x 128 MB,
``small`` 8 x 16 MB, ``tiny`` 4 x 1 MB).  Two ``distributed.LocalCluster``\\s run
side by side, one of 1 process worker and one of 2, each worker with one
thread and ``NUMBA_NUM_THREADS=1`` (so N workers use N cores: Numba's own
threads would otherwise let the 1-worker run use both cores as well).
Interleaved over the runs:

* ``pool``: ``lodtool.dask.read(DIR, partition_size=64MB).pool("sum").to_container(OUT)``,
  read, computed and written as one shard per partition, then the manifest
  (and on 1 worker at 256MB too: the two sizes give the whole cost of a partition);
* parallel ``pack``: ``lodtool.dask.pack(INPUTS, OUT, dtype="float32")``, one
  shard per input file.

The target is 2 workers >= 1.7x as fast as 1 for both.  Then the scheduler's
overhead per partition: the wall time of ``n`` partitions that do nothing
(read nothing, return ``None``) on the 1-worker cluster, over ``n``; with the
1-worker ``pool``'s cost per byte of input, the partition size at which the
overhead falls under 5% of a partition's work.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _common as C  # noqa: E402

TAG = "dask"
#: size -> (bytes of float32 data in the sharded input, JSONL inputs, bytes of each)
SIZES = {"tiny": (16 << 20, 4, 1 << 20), "small": (256 << 20, 8, 16 << 20), "full": (4 << 30, 8, 128 << 20)}
PARTITION = "64MB"
#: the larger partitions a second 1-worker ``pool`` runs on: the two runs give the whole cost per partition
PARTITION_LARGE = "256MB"
N_SHARDS = 8


def build_sharded(folder: Path, data_bytes: int, seed: int = 0) -> dict:
    """A 1-level float32 tensor in 8 uneven shards (sizes 1:2:...:8 of the total, shuffled)."""
    from lodtool import LoDTensor
    from lodtool.container.shards import ShardWriter

    rng = np.random.default_rng(seed)
    weights = rng.permutation(np.arange(1, N_SHARDS + 1))
    rows = sequences = 0
    with ShardWriter(folder, shard_size=1 << 40, compression="none", name="x") as w:
        for weight in weights:
            target = int(data_bytes * weight / weights.sum() / 4)
            done = 0
            while done < target:
                want = min(1 << 24, target - done)
                lens = rng.integers(1, 400, max(1, want // 200))
                data = rng.standard_normal(int(lens.sum()), dtype=np.float32)
                off = np.zeros(len(lens) + 1, np.int64)
                np.cumsum(lens, out=off[1:])
                w.write(LoDTensor._trusted(data, (off,)))
                done += len(data)
                sequences += len(lens)
            rows += done
            w.end_shard()  # one shard per weight: uneven shards
    return {"rows": rows, "sequences": sequences, "bytes": rows * 4}


def build_jsonl(folder: Path, n: int, each: int, seed: int = 1) -> list[str]:
    """``n`` JSON Lines files of about ``each`` bytes: one sequence of floats per line."""
    rng = np.random.default_rng(seed)
    paths = []
    for i in range(n):
        path = folder / f"in{i}.jsonl"
        with open(path, "w") as f:
            written = 0
            while written < each:
                lens = rng.integers(1, 200, 2000)
                vals = np.round(rng.standard_normal(int(lens.sum())), 4).astype(str)
                pos = 0
                lines = []
                for n_ in lens:
                    lines.append("[" + ",".join(vals[pos:pos + n_]) + "]\n")
                    pos += n_
                text = "".join(lines)
                f.write(text)
                written += len(text)
        paths.append(str(path))
    return paths


def _noop(i):
    return None


def run(size: str, runs: int, tmpdir: str | None) -> dict:
    import logging

    import dask
    from distributed import Client, LocalCluster

    from lodtool.interop import dask as lod_dask

    data_bytes, n_inputs, each = SIZES[size]
    base = tmpdir or tempfile.gettempdir()
    C.require_disk(base, 3 * data_bytes + 3 * n_inputs * each, "the dask benchmark")
    load0 = C.loadavg()
    with tempfile.TemporaryDirectory(prefix="lodtool-bench-dask-", dir=base) as d:
        d = Path(d)
        t0 = time.perf_counter()
        info = build_sharded(d / "in", data_bytes)
        inputs = build_jsonl(d, n_inputs, each)
        C.progress(TAG, f"built {C.fmt_bytes(info['bytes'])} in {N_SHARDS} shards and {n_inputs} JSONL inputs "
                        f"in {time.perf_counter() - t0:.1f} s")
        env = {"NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
        clusters = {k: LocalCluster(n_workers=k, threads_per_worker=1, processes=True, dashboard_address=":0",
                                    silence_logs=logging.ERROR, env=env) for k in (1, 2)}
        clients = {k: Client(c, set_as_default=False) for k, c in clusters.items()}
        try:
            bag = lod_dask.read(d / "in", partition_size=PARTITION)
            pool_bag = bag.pool("sum")
            n_parts = bag.npartitions
            large_bag = lod_dask.read(d / "in", partition_size=PARTITION_LARGE).pool("sum")
            n_large = large_bag.npartitions

            def pool_on(k, which=pool_bag):
                def go():
                    out = d / f"pool{k}"
                    which.to_container(out, scheduler=clients[k])
                    shutil.rmtree(out)
                return go

            def pack_on(k):
                def go():
                    out = d / f"pack{k}"
                    lod_dask.pack(inputs, out, dtype="float32", compute_kwargs={"scheduler": clients[k]})
                    shutil.rmtree(out)
                return go

            pool_t = C.interleaved({"1": pool_on(1), "2": pool_on(2), "1 large": pool_on(1, large_bag)}, runs)
            C.progress(TAG, f"pool: 1 worker {C.median(pool_t['1']):.2f} s, 2 workers {C.median(pool_t['2']):.2f} s")
            pack_t = C.interleaved({"1": pack_on(1), "2": pack_on(2)}, runs)
            C.progress(TAG, f"pack: 1 worker {C.median(pack_t['1']):.2f} s, 2 workers {C.median(pack_t['2']):.2f} s")

            n_noop = {"tiny": 200, "small": 1000, "full": 2000}[size]

            def noops():
                items = [dask.delayed(_noop, pure=False)(i) for i in range(n_noop)]
                dask.compute(*items, scheduler=clients[1])

            noop_t = C.interleaved({"noop": noops}, runs)["noop"]
        finally:
            for c in clients.values():
                c.close()
            for c in clusters.values():
                c.close()
    load1 = C.loadavg()
    t1, t2 = C.median(pool_t["1"]), C.median(pool_t["2"])
    p1, p2 = C.median(pack_t["1"]), C.median(pack_t["2"])
    overhead = C.median(noop_t) / n_noop
    per_byte = t1 / info["bytes"]  # 1 worker: seconds of read + pool + write per input byte
    five_pct = overhead / (0.05 * per_byte)
    # t = partitions * c + bytes * b on 1 worker, from the two partition sizes: c is everything a partition costs
    # beyond its bytes (the scheduler, opening the file, reading its offsets, writing and fsyncing one shard)
    t_large = C.median(pool_t["1 large"])
    per_part = per_byte_work = five_pct_whole = None  # small inputs: both sizes gave the same partitions
    if n_parts > n_large:
        per_part = max((t1 - t_large) / (n_parts - n_large), 0.0)
        per_byte_work = (t1 - n_parts * per_part) / info["bytes"]
        five_pct_whole = per_part / (0.05 * per_byte_work) if per_byte_work > 0 else None
    pack_bytes = n_inputs * each
    targets = [
        C.target(f"`lodtool.dask` `pool` (sum), {C.fmt_bytes(info['bytes'])} sharded input, 2 process workers vs 1",
                 f"{C.fmt_s(t2)} ({info['bytes'] / t2 / 1e6:.0f} MB/s)",
                 f"1 worker {C.fmt_s(t1)} ({info['bytes'] / t1 / 1e6:.0f} MB/s)", C.fmt_x(t1 / t2),
                 t1 / t2 >= 1.7 if size == "full" else None, "≥ 1.7× (full size)"),
        C.target(f"parallel `pack` of {n_inputs} JSONL inputs ({C.fmt_bytes(pack_bytes)}), 2 process workers vs 1",
                 f"{C.fmt_s(p2)}", f"1 worker {C.fmt_s(p1)}", C.fmt_x(p1 / p2),
                 p1 / p2 >= 1.7 if size == "full" else None, "≥ 1.7× (full size)"),
        C.target("scheduler overhead per partition (a partition that does nothing, 1 worker)",
                 f"{overhead * 1e3:.2f} ms", "—", "—", None, "measured"),
        C.target("partition size at which that overhead is under 5% of a partition's `pool` work",
                 C.fmt_bytes(five_pct), f"`pool` costs {per_byte * 1e9:.2f} ns/byte on 1 worker", "—", None,
                 "measured"),
        C.target(f"whole cost per partition of `pool` (1 worker; from the runs at {PARTITION} and "
                 f"{PARTITION_LARGE}: scheduler, file open and offsets, one shard written and fsynced)",
                 f"{per_part * 1e3:.1f} ms" if per_part is not None else "n/a (the same partitions at both sizes)",
                 f"{per_byte_work * 1e9:.2f} ns/byte of work" if per_part is not None else "—", "—", None,
                 "measured"),
        C.target("partition size at which that whole cost is under 5% of a partition's `pool` work",
                 C.fmt_bytes(five_pct_whole) if five_pct_whole is not None else "n/a", "—", "—", None,
                 "measured"),
    ]
    tables = [{
        "title": "Wall times (median of interleaved runs)",
        "head": ["work", "1 worker", "2 workers", "speed-up"],
        "rows": [[f"`pool` sum, {n_parts} partitions of ≤ {PARTITION}, read + compute + write one shard each",
                  C.fmt_s(t1), C.fmt_s(t2), C.fmt_x(t1 / t2)],
                 [f"`pool` sum, {n_large} partitions of ≤ {PARTITION_LARGE}", C.fmt_s(t_large), "—", "—"],
                 [f"parallel `pack`, {n_inputs} inputs, one shard each", C.fmt_s(p1), C.fmt_s(p2), C.fmt_x(p1 / p2)],
                 [f"{n_noop} empty partitions (scheduler overhead)", C.fmt_s(C.median(noop_t)), "—", "—"]],
    }]
    about = (f"Input: {C.fmt_bytes(info['bytes'])} of float32 in {N_SHARDS} uneven shards ({info['sequences']:,} "
             f"sequences of 1..399 rows, uncompressed), and {n_inputs} JSON Lines files of "
             f"{C.fmt_bytes(each)}. Two `LocalCluster`s (1 and 2 process workers, one thread each, "
             f"`NUMBA_NUM_THREADS=1`) side by side; {runs} interleaved runs, medians. Load average {load0} before, "
             f"{load1} after." + (" **Smoke size: the ratios are not the targets' (full size only).**"
                                  if size != "full" else ""))
    notes = ["The 1.7× targets are judged at `--size full` only (a 4 GB input); smaller sizes report the ratio.",
             "docs/scale.md projects these per-partition costs onto N machines (a projection, not a measurement)."]
    return {"key": TAG, "title": "lodtool on Dask (issue 19)", "about": about, "targets": targets, "tables": tables,
            "notes": notes, "meta": {"pool": pool_t, "pack": pack_t, "noop": noop_t, "n_noop": n_noop,
                                     "partitions": n_parts, "bytes": info["bytes"], "pack_bytes": pack_bytes,
                                     "overhead_s": overhead, "pool_s_per_byte": per_byte,
                                     "five_percent_bytes": five_pct, "partitions_large": n_large,
                                     "per_partition_s": per_part, "work_s_per_byte": per_byte_work,
                                     "five_percent_whole_bytes": five_pct_whole}}


if __name__ == "__main__":
    raise SystemExit(C.main(run, __doc__))
