"""Random access for training: random documents and batches against the memory-map floor.

    python benchmarks/bench_random.py --size full      # 268M tokens (1 GiB as int32) in 1,000,000 documents

Generates documents > sentences > token ids (the ``full`` size: 1,000,000
documents, ~8 sentences each, 268M tokens; ``small`` a tenth of it; ``tiny``
a smoke test), stored as int32 and as uint16, each in a container written with
``--compression none`` (memory-mappable) and one with the default compression,
plus the same flat tokens as a raw file and the offsets as arrays in RAM: the
floor any hand-written loader reaches.  Every file is then dropped from the page
cache and read back once in order (:func:`reread`), so all of them are cached as
a read leaves a file, not as its writer did.  Then, each warm (the same documents read
once before: page cache filled, offsets held, every chunk's checksum checked
once) and uncached (``posix_fadvise(POSIX_FADV_DONTNEED)`` on every file before
the pass):

* **random documents**: ``lodtool.open(p)["tokens"].branch(i)`` on an open
  handle for random ``i``, beside the floor: ``np.memmap`` of the raw tokens,
  offsets in RAM, the document's tokens and its sentence offsets rebased (the
  same result).  Megatron-Core's ``IndexedDataset.get(i)`` and HuggingFace
  ``datasets`` ``ds[i]`` join where they are installed (skipped with a note);
* **batches**: ``lodtool.batches(p, plan, output="varlen")`` on a ``sorted``
  plan of sentences (``max_tokens=4096``) in tokens/s, beside its floor: a
  Numba gather of the same plan from ``np.memmap`` that writes, in one loop
  into buffers reused for every batch, what a varlen trainer takes (the
  values, int32 ``cu_seqlens``, int64 ``position_ids``, the longest sequence,
  and the int64 lengths every lodtool batch holds); and ``output="jagged-numpy"``
  beside a gather of the values, int64 offsets and lengths.  The passes are
  interleaved, each repeated ``--runs`` times; a ratio is the median of the
  per-run ratios;
* **chunk-aware shuffle**: the default-compression container read with a
  ``chunks`` plan (a fresh reader, so a fresh cache of decoded chunks, per
  pass; the median of ``--runs`` passes, at least 3), in tokens/s beside the
  memory-mappable figure, with the chunks it decoded per stored chunk;
* **map-style dataset**: ``SequenceDataset`` (sentences) under
  ``DataLoader(batch_size=64, shuffle=True, num_workers=2)`` in tokens/s,
  where torch is installed, beside the same loader (the same padding
  collation) over Megatron-Core's ``IndexedDataset`` of the same sentences
  where it is installed; both loaders are bound by the loader's own cost per
  batch, so the ratio is the median of at least 7 paired runs.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C

TAG = "random"
#: (tokens, documents, random reads per warm pass, per uncached pass)
SIZES = {"tiny": (200_000, 1_000, 500, 200), "small": (26_800_000, 100_000, 20_000, 2_000),
         "full": (268_435_456, 1_000_000, 20_000, 2_000)}
#: batches of 64 sentences the map-style dataset's loader is timed on
LOADER_BATCHES = {"tiny": 20, "small": 500, "full": 2000}
NAME = "tokens"
MAX_TOKENS = 4096


def build(folder: Path, tokens: int, docs: int, seed: int = 5) -> dict:
    """The corpus: raw token files, offsets, and the containers; returns the paths and the shape."""
    from lodtool import LoDTensor
    from lodtool.container import save

    rng = np.random.default_rng(seed)
    sentences = rng.integers(1, 16, docs)
    mean = tokens / int(sentences.sum())
    # lognormal sentence lengths with the mean that gives about ``tokens`` in all (no sentence stretched to fit)
    lengths = np.maximum(rng.lognormal(np.log(mean) - 0.18, 0.6, int(sentences.sum())).astype(np.int64), 1)
    values = rng.integers(0, 50_000, int(lengths.sum()), dtype=np.int64)
    o0 = np.concatenate(([0], np.cumsum(sentences)))
    o1 = np.concatenate(([0], np.cumsum(lengths)))
    out = {"docs": docs, "sentences": int(len(lengths)), "tokens": int(o1[-1]), "o0": o0, "o1": o1, "files": {}}
    for dtype in ("int32", "uint16"):
        data = values.astype(dtype)
        raw = folder / f"{dtype}.bin"
        data.tofile(raw)
        t = LoDTensor(data, [o0, o1], level_names=["document", "sentence"])
        for compression in ("none", "deflate"):
            path = folder / f"{dtype}-{compression}.lod.h5"
            save(str(path), {NAME: t}, compression=compression)
            out["files"][(dtype, compression)] = path
        out["files"][(dtype, "raw")] = raw
        del t, data
    return out


def drop_cache(*paths) -> None:
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def reread(*paths) -> None:
    """Drop each file from the page cache and read it back in one pass, in order.

    A file just written in small pieces (libhdf5's writes, Megatron-Core's
    builder) sits in the page cache in small folios, which a memory map maps
    4 KiB at a time; one written in one piece (the raw tokens), or read back in
    order, sits in large ones, mapped 2 MiB at a time where the map is aligned
    (``FilePmdMapped`` in ``/proc/PID/smaps``).  On Linux 6.18 that alone made
    the same compiled gather 10-15% slower from a container just written than
    from the raw file.  Read back, every file is cached alike.
    """
    for p in paths:
        drop_cache(p)
        with open(p, "rb") as f:
            while f.read(1 << 24):
                pass


def per_read(fn, indices) -> float:
    t0 = time.perf_counter()
    for i in indices:
        fn(int(i))
    return (time.perf_counter() - t0) / len(indices)


def floor_reader(raw: Path, dtype: str, o0: np.ndarray, o1: np.ndarray):
    data = np.memmap(raw, dtype=dtype, mode="r")

    def read(i: int):
        a, b = int(o0[i]), int(o0[i + 1])
        r0, r1 = int(o1[a]), int(o1[b])
        return data[r0:r1], o1[a:b + 1] - r0
    return read


def megatron_dataset(folder: Path, raw: Path, dtype: str, o0, o1):
    """Megatron-Core's ``IndexedDataset`` of the sentences, over a ``.bin/.idx`` its own builder wrote (one
    document per document), or ``None``."""
    try:
        from megatron.core.datasets.indexed_dataset import IndexedDataset, IndexedDatasetBuilder
    except Exception:  # noqa: BLE001 - not installed (it needs torch), or broken: the row is skipped
        return None
    import torch

    prefix = str(folder / f"megatron-{dtype}")
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=np.dtype(dtype).type)
    data = np.memmap(raw, dtype=dtype, mode="r")
    for d in range(len(o0) - 1):
        for s in range(int(o0[d]), int(o0[d + 1])):
            builder.add_item(torch.from_numpy(np.array(data[int(o1[s]):int(o1[s + 1])])))
        builder.end_document()
    builder.finalize(prefix + ".idx")
    reread(prefix + ".bin", prefix + ".idx")
    return IndexedDataset(prefix)


def random_documents(shape: dict, folder: Path, dtype: str, reads: int, uncached_reads: int,
                     megatron) -> tuple[list, dict]:
    import lodtool

    rng = np.random.default_rng(11)
    o0, o1 = shape["o0"], shape["o1"]
    files = shape["files"]
    handles = {c: lodtool.open(files[(dtype, c)]) for c in ("none", "deflate")}
    readers = {"floor": floor_reader(files[(dtype, "raw")], dtype, o0, o1),
               "none": handles["none"][NAME].branch, "deflate": handles["deflate"][NAME].branch}
    if megatron is not None:  # Megatron's get(i) reads a sequence: compare whole documents by their sentences
        readers["megatron"] = lambda i, get=megatron.get: [get(s) for s in range(int(o0[i]), int(o0[i + 1]))]
    result = {}
    for temp, count in (("warm", reads), ("uncached", uncached_reads)):
        idx = rng.integers(0, shape["docs"], count)
        for key, read in readers.items():
            if temp == "warm":  # the same documents once before: page cache, held offsets, chunks checked once
                per_read(read, idx)
            else:
                drop_cache(*(p for p in files.values() if str(p).startswith(str(folder / dtype))))
            result[(key, temp)] = per_read(read, idx)
    for h in handles.values():
        h.close()
    rows = []
    for key, label in (("floor", "np.memmap + offsets in RAM (the floor)"),
                       ("none", "lodtool `branch(i)`, `--compression none`"),
                       ("deflate", "lodtool `branch(i)`, default compression"),
                       ("megatron", "Megatron-Core `IndexedDataset.get` (per sentence)")):
        if (key, "warm") in result:
            rows.append([dtype, label] + [f"{result[(key, t)] * 1e6:.1f} µs" for t in ("warm", "uncached")]
                        + [C.fmt_x(result[(key, "warm")] / result[("floor", "warm")])])
    return rows, result


def _gather_kernels():
    """The floors: Numba gathers of a plan's batch from ``np.memmap`` into buffers reused for every batch.

    ``jagged`` writes the values, int64 offsets and int64 lengths (what
    ``output="jagged-numpy"`` holds); ``varlen`` writes, in the same loop, the values,
    int32 ``cu_seqlens``, int64 ``position_ids`` and lengths and returns the longest
    sequence (``max_seqlen``): what ``output="varlen"`` holds.
    """
    import numba

    @numba.njit(nogil=True, cache=False)
    def jagged(data, o1, seqs, out, offsets, lengths):
        pos = 0
        offsets[0] = 0
        for j in range(seqs.shape[0]):
            a, b = o1[seqs[j]], o1[seqs[j] + 1]
            out[pos:pos + b - a] = data[a:b]
            pos += b - a
            offsets[j + 1] = pos
            lengths[j] = b - a
        return pos

    @numba.njit(nogil=True, cache=False)
    def varlen(data, o1, seqs, out, cu_seqlens, position_ids, lengths):
        pos = 0
        longest = 0
        cu_seqlens[0] = 0
        for j in range(seqs.shape[0]):
            a, b = o1[seqs[j]], o1[seqs[j] + 1]
            for k in range(b - a):
                out[pos + k] = data[a + k]
                position_ids[pos + k] = k
            pos += b - a
            cu_seqlens[j + 1] = pos
            lengths[j] = b - a
            longest = max(longest, b - a)
        return longest
    return jagged, varlen


def batches(shape: dict, dtype: str, runs: int = 7) -> tuple[list, dict]:
    import lodtool
    from lodtool.tasks._batch import BatchReader

    path = shape["files"][(dtype, "none")]
    plan = lodtool.batch_plan(path, level=1, max_tokens=MAX_TOKENS, mode="sorted", seed=0)
    tokens = int(shape["tokens"])
    data = np.memmap(shape["files"][(dtype, "raw")], dtype=dtype, mode="r")
    jagged, varlen = _gather_kernels()
    out = np.empty(MAX_TOKENS * 4, dtype)
    positions = np.empty(MAX_TOKENS * 4, np.int64)
    longest_batch = max(len(b) for b in plan)
    offsets = np.empty(longest_batch + 1, np.int64)
    cu_seqlens = np.empty(longest_batch + 1, np.int32)
    lengths = np.empty(longest_batch, np.int64)
    o1 = shape["o1"]
    plan_batches = [np.asarray(b, np.int64) for b in plan]

    def floor_jagged_pass():
        n = 0
        for b in plan_batches:
            n += jagged(data, o1, b, out, offsets, lengths)
        return n

    def floor_varlen_pass():
        n = 0
        for b in plan_batches:
            varlen(data, o1, b, out, cu_seqlens, positions, lengths)
            n += int(cu_seqlens[b.shape[0]])
        return n

    def lodtool_pass(output):
        def read():
            n = 0
            key = "cu_seqlens" if output == "varlen" else "offsets"
            for b in lodtool.batches(path, plan, output=output):
                n += int(b[key][-1])
            return n
        return read

    passes = {"floor_varlen": floor_varlen_pass, "varlen": lodtool_pass("varlen"),
              "floor_jagged": floor_jagged_pass, "jagged": lodtool_pass("jagged-numpy")}
    for fn in passes.values():  # compiled and warm
        assert fn() == tokens
    times = {key: [] for key in passes}
    for _ in range(max(runs, 3)):  # interleaved, so a change in the machine's load falls on every reader alike
        for key, fn in passes.items():
            t0 = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - t0)
    result = {key: tokens / float(np.median(t)) for key, t in times.items()}
    for key in ("varlen", "jagged"):  # the median of the per-run ratios, each against the floor timed beside it
        result[key + "_ratio"] = float(np.median(np.array(times["floor_" + key]) / np.array(times[key])))
    chunked = shape["files"][(dtype, "deflate")]
    chunk_plan = lodtool.batch_plan(chunked, level=1, max_tokens=MAX_TOKENS, mode="chunks", seed=0)
    decodes = []

    def chunks_pass():  # a fresh reader: its cache of decoded chunks starts empty, as an epoch's would
        n = 0
        with BatchReader(chunked, chunk_plan, output="varlen") as reader:
            for b in reader:
                n += int(b["cu_seqlens"][-1])
            cache = reader._source.chunks
            decodes.append(cache.decodes / cache.n_blocks)
        return n

    chunks_pass()
    chunk_times = []
    for _ in range(max(runs, 3)):  # one pass moved by a quarter between runs on this machine: the median of several
        t0 = time.perf_counter()
        chunks_pass()
        chunk_times.append(time.perf_counter() - t0)
    result["chunks"] = tokens / float(np.median(chunk_times))
    result["decodes_per_chunk"] = decodes[-1]
    rows = [[dtype, "Numba gather of the plan from np.memmap: values, `cu_seqlens`, `position_ids`, lengths "
             "(varlen floor)",
             f"{result['floor_varlen'] / 1e6:.1f}M", "1.00×"],
            [dtype, "`lodtool.batches(..., output=\"varlen\")`, `--compression none`",
             f"{result['varlen'] / 1e6:.1f}M", C.fmt_x(result["varlen_ratio"])],
            [dtype, "Numba gather of the plan from np.memmap: values, offsets, lengths (jagged floor)",
             f"{result['floor_jagged'] / 1e6:.1f}M", "1.00×"],
            [dtype, "`lodtool.batches(..., output=\"jagged-numpy\")`, `--compression none`",
             f"{result['jagged'] / 1e6:.1f}M", C.fmt_x(result["jagged_ratio"])],
            [dtype, f"`chunks` plan, default compression ({decodes[-1]:.2f} decodes per chunk), ÷ varlen floor",
             f"{result['chunks'] / 1e6:.1f}M", C.fmt_x(result["chunks"] / result["floor_varlen"])]]
    return rows, result


def _loader_tokens(loader, batches: int) -> float:
    """Tokens/s of ``batches`` batches of ``(values, lengths)`` from ``loader``, its workers started and warm."""
    it = iter(loader)
    for _ in range(20):
        next(it)
    t0 = time.perf_counter()
    n = 0
    for _ in range(batches):
        n += int(next(it)[1].sum())
    return n / (time.perf_counter() - t0)


def dataloader(shape: dict, dtype: str, batches: int, megatron, runs: int = 7) -> tuple[list, dict]:
    """``SequenceDataset`` of sentences under ``DataLoader(shuffle=True, num_workers=2)``, beside the same loader
    over Megatron-Core's ``IndexedDataset`` of the same sentences (``megatron``, or ``None``): tokens/s."""
    try:
        import torch
    except ImportError:
        return [], {}
    from lodtool.interop.torch import SequenceDataset

    def megatron_collate(items):  # its items are NumPy arrays: the same padding, from tensors over them
        return SequenceDataset.collate([torch.from_numpy(x) for x in items])

    # its items view its read-only map; the padding copies them, so torch's warning about writes does not apply
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")

    datasets = {"lodtool": (SequenceDataset(shape["files"][(dtype, "none")], level=1), SequenceDataset.collate)}
    if megatron is not None:
        datasets["megatron"] = (megatron, megatron_collate)
    loaders = {key: torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True, num_workers=2, collate_fn=collate,
                                                persistent_workers=True) for key, (ds, collate) in datasets.items()}
    figures = {key: [] for key in loaders}
    for _ in range(runs):  # interleaved, so a change in the machine's load falls on both alike
        for key, loader in loaders.items():
            figures[key].append(_loader_tokens(loader, batches))
    del loaders
    result = {"dataloader": float(np.median(figures["lodtool"]))}
    label = "`DataLoader(batch_size=64, shuffle=True, num_workers=2)`"
    rows = [[dtype, f"`SequenceDataset` + {label}", f"{result['dataloader'] / 1e6:.2f}M", "–"]]
    if "megatron" in figures:
        result["dataloader_megatron"] = float(np.median(figures["megatron"]))
        result["dataloader_ratio"] = float(np.median(np.array(figures["lodtool"]) / np.array(figures["megatron"])))
        rows.append([dtype, f"Megatron-Core `IndexedDataset` + {label} (lodtool ÷ this in the last column)",
                     f"{result['dataloader_megatron'] / 1e6:.2f}M", C.fmt_x(result["dataloader_ratio"])])
    return rows, result


def run(size: str, runs: int, tmpdir: str | None) -> dict:
    import tempfile

    tokens, docs, reads, uncached_reads = SIZES[size]
    with tempfile.TemporaryDirectory(dir=tmpdir) as d:
        folder = Path(d)
        C.require_disk(folder, tokens * 16, "the random-access corpus")
        C.progress(TAG, f"building {docs:,} documents, {tokens:,} tokens")
        shape = build(folder, tokens, docs)
        reread(*shape["files"].values())
        doc_rows, batch_rows, figures = [], [], {}
        for dtype in ("int32", "uint16"):
            megatron = megatron_dataset(folder, shape["files"][(dtype, "raw")], dtype, shape["o0"], shape["o1"])
            C.progress(TAG, f"random documents, {dtype}")
            rows, res = random_documents(shape, folder, dtype, reads, uncached_reads, megatron)
            doc_rows += rows
            figures[dtype] = res
            C.progress(TAG, f"batches, {dtype}")
            rows, res = batches(shape, dtype, runs)
            batch_rows += rows
            figures[dtype + " batches"] = res
            C.progress(TAG, f"map-style dataset, {dtype}")
            rows, res = dataloader(shape, dtype, LOADER_BATCHES[size], megatron, max(runs, 7))
            batch_rows += rows
            figures[dtype + " batches"].update(res)
    targets = []
    for dtype in ("int32", "uint16"):
        r = figures[dtype]
        ratio = r[("none", "warm")] / r[("floor", "warm")]
        targets.append(C.target(f"random `branch(i)`, memory-mappable container, {dtype}, warm",
                                f"{r[('none', 'warm')] * 1e6:.1f} µs", f"{r[('floor', 'warm')] * 1e6:.1f} µs",
                                C.fmt_x(ratio), ratio <= 1.5, "≤ 1.5× the np.memmap floor"))
        if ("megatron", "warm") in r:
            mega = r[("megatron", "warm")]
            targets.append(C.target(f"random document, lodtool vs Megatron-Core `IndexedDataset`, {dtype}",
                                    f"{r[('none', 'warm')] * 1e6:.1f} µs", f"{mega * 1e6:.1f} µs",
                                    C.fmt_x(r[("none", "warm")] / mega), r[("none", "warm")] <= mega,
                                    "at least as fast"))
        b = figures[dtype + " batches"]
        for key, output in (("varlen", "varlen"), ("jagged", "jagged-numpy")):
            ratio = b[key + "_ratio"]
            targets.append(C.target(f"`lodtool.batches(output=\"{output}\")` sorted plan, tokens/s, {dtype}",
                                    f"{b[key] / 1e6:.1f}M/s", f"{b['floor_' + key] / 1e6:.1f}M/s", C.fmt_x(ratio),
                                    ratio >= 0.8, "≥ 0.8× a Numba gather of the same arrays from np.memmap"))
        if "dataloader_ratio" in b:
            ratio = b["dataloader_ratio"]
            targets.append(C.target(f"`SequenceDataset` under `DataLoader(num_workers=2, shuffle=True)` vs the same "
                                    f"loader over Megatron-Core `IndexedDataset`, tokens/s, {dtype}",
                                    f"{b['dataloader'] / 1e6:.2f}M/s", f"{b['dataloader_megatron'] / 1e6:.2f}M/s",
                                    C.fmt_x(ratio), ratio >= 1, "at least as fast"))
        ratio = b["chunks"] / b["varlen"]
        targets.append(C.target(f"default compression, `chunks` plan, tokens/s, {dtype}",
                                f"{b['chunks'] / 1e6:.1f}M/s, {b['decodes_per_chunk']:.2f} decodes per chunk",
                                f"memory-mappable {b['varlen'] / 1e6:.1f}M/s", C.fmt_x(ratio),
                                ratio >= 0.5 and b["decodes_per_chunk"] <= 2,
                                "≥ 0.5× the memory-mappable figure, ≤ 2 decodes per chunk"))
    notes = [f"{shape['docs']:,} documents, {shape['sentences']:,} sentences, {shape['tokens']:,} tokens; "
             f"{reads:,} random documents per warm pass, {uncached_reads:,} per uncached pass (after "
             "`posix_fadvise(POSIX_FADV_DONTNEED)` of every file of the dtype)."]
    if not any("dataloader" in figures[d + " batches"] for d in ("int32", "uint16")):
        notes.append("torch is not installed here: the map-style dataset's row is skipped.")
    if not any(("megatron", "warm") in figures[d] for d in ("int32", "uint16")):
        notes.append("Megatron-Core is not installed here (`pip install megatron-core`, which needs torch): its rows "
                     "(random documents, and the DataLoader over its `IndexedDataset`) are skipped.")
    return {"key": TAG, "title": "Random access for training (issue 28)", "about": __doc__.split("\n\n")[1],
            "tables": [{"title": "Random documents (per read)", "head": ["dtype", "read", "warm", "uncached",
                                                                        "warm ÷ floor"], "rows": doc_rows},
                       {"title": "Batches (tokens/s, warm)", "head": ["dtype", "reader", "tokens/s", "÷ floor"],
                        "rows": batch_rows}],
            "targets": targets, "notes": notes}


if __name__ == "__main__":
    raise SystemExit(C.main(run, __doc__))
