"""Training batches (issue 20): padding waste per mode, pack fill rate, planning speed, BatchDataset throughput.

    python benchmarks/bench_batch.py --size full     # 1M lognormal lengths, 10M sequences planned from a file

* **Padding waste** (``1 - real tokens / padded tokens``) of ``sorted``,
  ``megabatch`` and ``buckets`` against ``random`` batches of the same mean
  batch size (so the same mean real tokens per batch), on the shipped corpus
  (``sample_data/corpus.jsonl`` packed; its sentences, level 1) and on
  lognormal lengths.  ``pack`` reports its fill rate.
* **Planning** ``batch_plan(path, max_tokens=4096)`` from a container of N
  sequences (open, read and validate the offsets, plan), against reading the
  same offsets with h5py alone.
* **Throughput** of ``BatchDataset`` (``output="padded"``, main process, the
  decoded chunks cached after a first epoch) in real tokens/s, against a PyTorch
  baseline that holds every sequence as a tensor in a list and builds each
  batch of the same plan with ``pad_sequence`` plus a mask, and against the
  same reader allocating fresh output arrays per batch.
* **Buffer reuse** where allocation costs something: frames of 80 float32
  features (speech filterbanks), batches of up to 131,072 padded frames (42 MB,
  past glibc's largest mmap threshold, 32 MiB, so a fresh array is fresh pages
  every batch), reused buffers against fresh arrays.  At the corpus's 32 KB
  batches malloc recycles freed memory and the two are within noise.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C

TAG = "batch"
#: (lognormal lengths, sequences planned from a file, epochs timed for throughput) per size
SIZES = {"tiny": (20_000, 200_000, 1), "small": (1_000_000, 1_000_000, 3), "full": (1_000_000, 10_000_000, 5)}
MAX_TOKENS = 4096
CORPUS = C.ROOT / "sample_data" / "corpus.jsonl"
BOUNDARIES = [8, 16, 32, 64, 128, 256, 512, 1024, 2048]


def lognormal_lengths(n: int, seed: int = 20) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.clip(np.round(rng.lognormal(4.0, 0.9, n)), 1, MAX_TOKENS).astype(np.int64)


def waste_rows(label: str, source, level: int) -> tuple[list[list], list[dict], dict]:
    from lodtool.tasks._batch import batch_plan

    rows, targets, meta = [], [], {}
    for mode in ("sorted", "megabatch", "buckets", "random", "pack"):  # load the compiled kernels first
        batch_plan(np.arange(1, 100), max_tokens=256, mode=mode, **({"boundaries": [8]} if mode == "buckets" else {}))
    for mode in ("sorted", "megabatch", "buckets", "random"):
        extra = {"boundaries": BOUNDARIES} if mode == "buckets" else {}
        t0 = time.perf_counter()
        plan = batch_plan(source, level=level, max_tokens=MAX_TOKENS, mode=mode, **extra)
        seconds = time.perf_counter() - t0
        s = plan.stats()
        base = plan.random_baseline().stats()
        ratio = s["padding_waste"] / base["padding_waste"] if base["padding_waste"] else None
        meta[mode] = {"waste": s["padding_waste"], "random_waste": base["padding_waste"], "batches": s["batches"],
                      "seconds": seconds}
        rows.append([label, mode, f"{s['batches']:,}", f"{s['tokens_per_batch']['mean']:,.0f}",
                     f"{s['padding_waste']:.2%}", f"{base['padding_waste']:.1%}",
                     "" if ratio is None else f"{ratio:.3f}", C.fmt_s(seconds)])
        if mode in ("sorted", "megabatch"):
            targets.append(C.target(f"`{mode}` padding waste ≤ ¼ of `random`'s at the same mean batch size, {label}",
                                    f"{s['padding_waste']:.2%}", f"random {base['padding_waste']:.1%}",
                                    "" if ratio is None else f"{ratio:.3f}",
                                    None if ratio is None else ratio <= 0.25, "≤ 0.25"))
    packed = batch_plan(source, level=level, max_tokens=MAX_TOKENS, mode="pack").stats()
    meta["pack"] = {"fill_rate": packed["fill_rate"], "rows": packed["batches"]}
    rows.append([label, "pack", f"{packed['batches']:,}", f"{packed['tokens_per_batch']['mean']:,.0f}",
                 f"{packed['padding_waste']:.2%}", "", "", ""])
    targets.append(C.target(f"`pack` fill rate ≥ 98%, {label}", f"{packed['fill_rate']:.2%}",
                            f"rows of {MAX_TOKENS}", "", packed["fill_rate"] >= 0.98, "≥ 98%"))
    return rows, targets, meta


def planning(n: int, d: str, runs: int) -> tuple[dict, dict]:
    import h5py

    import lodtool
    from lodtool import LoDTensor
    from lodtool.tasks._batch import batch_plan

    rng = np.random.default_rng(7)
    lengths = rng.integers(1, 8, n).astype(np.int64)  # short rows keep the file small: planning reads offsets only
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    path = Path(d) / "plan.lod.h5"
    lodtool.save(str(path), LoDTensor._trusted(np.zeros(int(offsets[-1]), np.int8), [offsets]), compression="none")
    batch_plan(lengths[:1000], max_tokens=MAX_TOKENS)  # loads the compiled kernels (cached on disk)

    def lodtool_():
        return batch_plan(str(path), max_tokens=MAX_TOKENS, mode="sorted")

    def h5py_():
        with h5py.File(path, "r", locking=False) as h:
            return h["tensor/lod/0"][...]

    times = C.interleaved({"lodtool": lodtool_, "h5py": h5py_}, max(runs, 3))
    pack_t = C.interleaved({"pack": lambda: batch_plan(str(path), max_tokens=MAX_TOKENS, mode="pack")}, 1, warmup=0)
    return {k: C.median(v) for k, v in times.items()}, {"pack": C.median(pack_t["pack"])}


def throughput(path: str, epochs: int) -> dict | None:
    try:
        import torch
    except ImportError:
        return None
    import lodtool
    from lodtool.interop._torch_batch import BatchDataset
    from lodtool.tasks._batch import batch_plan

    plan = batch_plan(path, level=1, max_tokens=MAX_TOKENS, mode="sorted")
    tokens = int(plan.batch_tokens.sum())
    with lodtool.open(path) as f:
        t = f.tensor()
        full = t.read()
    rows = np.concatenate([[0], np.cumsum(np.diff(full.lod[-1]))])
    tensors = [torch.from_numpy(full.data[rows[i]:rows[i + 1]]) for i in range(rows.shape[0] - 1)]
    batches = [b.tolist() for b in plan]
    pad_sequence = torch.nn.utils.rnn.pad_sequence

    def baseline():
        n = 0
        for b in batches:
            seqs = [tensors[i] for i in b]
            values = pad_sequence(seqs, batch_first=True)
            lengths = torch.tensor([len(s) for s in seqs])
            mask = torch.arange(values.shape[1])[None, :] < lengths[:, None]
            n += int(mask.shape[0])
        return n

    reused = BatchDataset(path, plan, output="padded")
    fresh = BatchDataset(path, plan, output="padded", reuse_buffers=False)

    def epoch(ds):
        return lambda: sum(int(b["lengths"].shape[0]) for b in ds)

    times = C.interleaved({"lodtool": epoch(reused), "fresh": epoch(fresh), "torch": baseline}, epochs)
    return {k: tokens / C.median(v) for k, v in times.items()} | {"tokens": tokens, "batches": len(plan)}


#: the wide case: feature width, padded frames per batch, utterances (per size)
WIDE_WIDTH, WIDE_TOKENS = 80, 131_072
WIDE_SEQUENCES = {"tiny": 200, "small": 4_000, "full": 8_000}


def reuse(d: str, size: str, epochs: int) -> dict:
    """Real frames/s of ``lodtool.batches`` (padded) with reused buffers against fresh arrays, wide rows."""
    import lodtool
    from lodtool import LoDTensor
    from lodtool.tasks._batch import BatchReader, batch_plan

    rng = np.random.default_rng(21)
    lengths = np.clip(np.round(rng.lognormal(5.5, 0.5, WIDE_SEQUENCES[size])), 20, 3000).astype(np.int64)
    data = rng.standard_normal((int(lengths.sum()), WIDE_WIDTH)).astype(np.float32)
    path = str(Path(d) / "frames.lod.h5")
    lodtool.save(path, LoDTensor(data, recursive_sequence_lengths=[lengths.tolist()]), compression="none")
    plan = batch_plan(path, max_tokens=WIDE_TOKENS, mode="sorted")
    frames = int(plan.batch_tokens.sum())

    def epoch(reuse_buffers: bool):
        reader = BatchReader(path, plan, output="padded", cache_bytes=data.nbytes + (1 << 20),
                             reuse_buffers=reuse_buffers)  # the file's chunks cached after the warm-up epoch
        return lambda: sum(int(b["lengths"].shape[0]) for b in reader)

    times = C.interleaved({"reused": epoch(True), "fresh": epoch(False)}, epochs)
    return {k: frames / C.median(v) for k, v in times.items()} | {"batches": len(plan),
                                                                  "batch_bytes": WIDE_TOKENS * WIDE_WIDTH * 4}


def run(size: str, runs: int, tmpdir: str | None) -> dict:
    import lodtool

    n_lognormal, n_plan, epochs = SIZES[size]
    load0 = C.loadavg()
    with tempfile.TemporaryDirectory(prefix="lodtool-bench-batch-", dir=tmpdir) as d:
        corpus = str(Path(d) / "corpus.lod.h5")
        lodtool.pack([str(CORPUS)], corpus)
        rows_c, targets_c, meta_c = waste_rows("corpus sentences", corpus, level=1)
        C.progress(TAG, f"corpus: sorted waste {meta_c['sorted']['waste']:.1%} vs random "
                        f"{meta_c['sorted']['random_waste']:.1%}; pack fill {meta_c['pack']['fill_rate']:.2%}")
        rows_l, targets_l, meta_l = waste_rows(f"{n_lognormal:,} lognormal", lognormal_lengths(n_lognormal), level=0)
        C.progress(TAG, f"lognormal: sorted waste {meta_l['sorted']['waste']:.1%} vs random "
                        f"{meta_l['sorted']['random_waste']:.1%}; pack fill {meta_l['pack']['fill_rate']:.2%}")
        plan_t, pack_t = planning(n_plan, d, runs)
        C.progress(TAG, f"planning {n_plan:,} sequences: {plan_t['lodtool']:.3f} s (h5py offsets read "
                        f"{plan_t['h5py']:.3f} s)")
        speed = throughput(corpus, max(epochs, runs if size != "tiny" else 1))
        wide = reuse(d, size, max(epochs, runs if size != "tiny" else 1))
        C.progress(TAG, f"wide rows: reused {wide['reused'] / 1e6:.1f} M frames/s, fresh {wide['fresh'] / 1e6:.1f}")
    load1 = C.loadavg()

    targets = targets_c + targets_l
    targets.append(C.target(f"plan {n_plan:,} sequences from a container (`batch_plan(path)`, sorted) < 1 s",
                            C.fmt_s(plan_t["lodtool"]), f"h5py reads the offsets: {C.fmt_s(plan_t['h5py'])}",
                            C.fmt_x(plan_t["lodtool"] / plan_t["h5py"]),
                            plan_t["lodtool"] < 1.0 if size == "full" else None, "< 1 s"))
    tables = [{"title": f"Padding waste at max_tokens={MAX_TOKENS} (random: the same mean batch size)",
               "head": ["data", "mode", "batches", "tokens/batch", "waste", "random's waste", "ratio", "plan time"],
               "rows": rows_c + rows_l},
              {"title": f"Planning {n_plan:,} sequences from a container",
               "head": ["what", "time"],
               "rows": [["`batch_plan(path, mode='sorted')` (open, offsets, validate, plan)",
                         C.fmt_s(plan_t["lodtool"])],
                        ["`batch_plan(path, mode='pack')`", C.fmt_s(pack_t["pack"])],
                        ["h5py reads the offsets (floor)", C.fmt_s(plan_t["h5py"])]]}]
    notes = []
    if speed is None:
        notes.append("torch is not installed: the BatchDataset rows are skipped.")
        targets.append(C.target("`BatchDataset` tokens/s ≥ 3× a list of tensors + `pad_sequence`", "", "", "", None,
                                "≥ 3×"))
    else:
        r_torch, r_fresh = speed["lodtool"] / speed["torch"], speed["lodtool"] / speed["fresh"]
        targets.append(C.target("`BatchDataset` tokens/s ≥ 3× a list of tensors + `pad_sequence` (same plan)",
                                f"{speed['lodtool'] / 1e6:.1f} M tokens/s", f"{speed['torch'] / 1e6:.1f} M tokens/s",
                                C.fmt_x(r_torch), r_torch >= 3, "≥ 3×"))
        targets.append(C.target(f"reused buffers faster than the same batches in fresh allocations ({WIDE_WIDTH} "
                                f"float32 features, batches of ≤ {WIDE_TOKENS:,} frames, "
                                f"{wide['batch_bytes'] / 1e6:.0f} MB)",
                                f"{wide['reused'] / 1e6:.1f} M frames/s", f"fresh {wide['fresh'] / 1e6:.1f} M frames/s",
                                C.fmt_x(wide["reused"] / wide["fresh"]), wide["reused"] > wide["fresh"], "> 1×"))
        notes.append(f"At the corpus's small batches (≤ {MAX_TOKENS} int64 tokens, 32 KB) reused buffers ran at "
                     f"{C.fmt_x(r_fresh)} the speed of fresh arrays: malloc recycles memory that small.")
        tables.append({"title": f"Throughput, corpus sentences, {speed['batches']} batches of ≤ {MAX_TOKENS} padded "
                                "tokens (real tokens/s)",
                       "head": ["reader", "tokens/s"],
                       "rows": [["`BatchDataset(output='padded')`, buffers reused", f"{speed['lodtool']:,.0f}"],
                                ["the same, fresh arrays per batch", f"{speed['fresh']:,.0f}"],
                                ["list of tensors + `pad_sequence` + mask", f"{speed['torch']:,.0f}"]]})
        tables.append({"title": f"Buffer reuse, {WIDE_WIDTH} float32 features, {wide['batches']} batches of ≤ "
                                f"{WIDE_TOKENS:,} padded frames (real frames/s)",
                       "head": ["reader", "frames/s"],
                       "rows": [["`lodtool.batches(output='padded')`, buffers reused", f"{wide['reused']:,.0f}"],
                                ["the same, fresh arrays per batch", f"{wide['fresh']:,.0f}"]]})
    about = (f"Lengths in rows; waste = 1 − real / padded tokens. The corpus is `sample_data/corpus.jsonl` packed "
             f"(its sentences, level 1); the lognormal lengths have μ=4, σ=0.9 (clipped to 1..{MAX_TOKENS}). "
             f"Load average {load0} before, {load1} after.")
    return {"key": TAG, "title": "Training batches (issue 20)", "about": about, "targets": targets, "tables": tables,
            "notes": notes, "meta": {"corpus": meta_c, "lognormal": meta_l, "planning": plan_t, "speed": speed}}


if __name__ == "__main__":
    raise SystemExit(C.main(run, __doc__))
