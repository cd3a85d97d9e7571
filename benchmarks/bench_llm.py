"""Token datasets of LLM training: a Megatron-Core dataset converted, validated and read in place.

    python benchmarks/bench_llm.py --size full      # 268M int32 tokens (1 GiB .bin) in 1,000,000 documents

Writes a Megatron-Core ``.bin/.idx`` dataset of documents > sentences > token
ids (int32; ``full`` 268M tokens, ``small`` a tenth, ``tiny`` a smoke test),
then:

* **conversion**: ``lodtool pack corpus -o c.lod.h5 --compression none`` and
  ``lodtool unpack c.lod.h5 --to megatron -o back`` (processes, each followed by
  ``sync``) beside ``cp`` of the ``.bin`` and ``.idx`` + ``sync``; the round trip
  must give the same bytes;
* **validate in place**: ``validate_megatron`` (every check of ``lodtool
  validate``, in this process) beside a NumPy pass over the ``.idx`` arrays
  (lengths not negative, pointers and document indices not decreasing), both on
  the memory map, warm, and, for reference, the same rules ``validate`` checks
  written as plain NumPy (each pointer the previous one plus its sequence's bytes);
  and the ``lodtool inspect`` / ``validate`` processes;
* **random documents**: ``lodtool.open(prefix).tensor()[i]`` on an open handle
  beside the floor (``np.memmap`` of the ``.bin``, offsets in RAM) and, where it
  installs, Megatron-Core's ``IndexedDataset`` reading the document's sequences
  (``ds[a:b]``).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C

TAG = "llm"
#: (tokens, documents, random reads per pass)
SIZES = {"tiny": (200_000, 1_000, 500), "small": (26_800_000, 100_000, 20_000),
         "full": (268_435_456, 1_000_000, 20_000)}
#: documents generated and written at a time
BLOCK_DOCS = 50_000


def build(prefix: Path, tokens: int, docs: int, seed: int = 7) -> dict:
    """A Megatron dataset written by lodtool's writer a block of documents at a time; returns its shape."""
    from lodtool import LoDTensor
    from lodtool.io.megatron import write_chunks

    rng = np.random.default_rng(seed)
    sentences = rng.integers(1, 16, docs)
    mean = tokens / int(sentences.sum())
    shape = {"docs": docs, "sentences": int(sentences.sum()), "tokens": 0}

    def chunks():
        for start in range(0, docs, BLOCK_DOCS):
            per_doc = sentences[start:start + BLOCK_DOCS]
            lengths = np.maximum(rng.lognormal(np.log(mean) - 0.18, 0.6, int(per_doc.sum())).astype(np.int64), 1)
            shape["tokens"] += int(lengths.sum())
            values = rng.integers(0, 50_000, int(lengths.sum()), dtype=np.int32)
            yield LoDTensor(values, [np.concatenate(([0], np.cumsum(per_doc))),
                                     np.concatenate(([0], np.cumsum(lengths)))])

    write_chunks(chunks(), str(prefix))
    return shape


def sync() -> None:
    os.sync()


def timed(cmd: list[str]) -> float:
    """Wall seconds of a process and the ``sync`` after it."""
    t0 = time.perf_counter()
    C.run_child(cmd).check(" ".join(cmd))
    sync()
    return time.perf_counter() - t0


def same_bytes(a: Path, b: Path) -> bool:
    import filecmp

    return all(filecmp.cmp(f"{a}{s}", f"{b}{s}", shallow=False) for s in (".bin", ".idx"))


def conversion(folder: Path, prefix: Path, runs: int) -> tuple[list, dict]:
    lodtool = C.lodtool_cmd()
    container, back, copy = folder / "c.lod.h5", folder / "back", folder / "copy"
    copy.mkdir()
    files = [f"{prefix}.bin", f"{prefix}.idx"]
    nbytes = sum(os.path.getsize(f) for f in files)
    times: dict[str, list[float]] = {"cp": [], "pack": [], "unpack": []}
    for _ in range(runs):  # interleaved: cp, pack, unpack
        times["cp"].append(timed(["cp", *files, str(copy)]))
        times["pack"].append(timed([*lodtool, "pack", str(prefix), "-o", str(container), "--compression", "none",
                                    "--force", "-q"]))
        times["unpack"].append(timed([*lodtool, "unpack", str(container), "--to", "megatron", "-o", str(back), "-q"]))
    identical = same_bytes(prefix, back)
    r = {k: C.median(v) for k, v in times.items()}
    r["round trip"] = r["pack"] + r["unpack"]
    r["bytes"], r["identical"] = nbytes, identical
    rows = [[what, C.fmt_s(r[key]), f"{nbytes / r[key] / 1e6:,.0f} MB/s", C.fmt_x(r["cp"] / r[key])]
            for what, key in (("`cp` .bin + .idx, `sync`", "cp"), ("`lodtool pack PREFIX --compression none`, `sync`",
                                                                       "pack"),
                              ("`lodtool unpack --to megatron`, `sync`", "unpack"),
                              ("round trip (pack + unpack)", "round trip"))]
    return rows, r


def numpy_pass(prefix: Path) -> bool:
    """The anchor: the ``.idx`` arrays memory-mapped and checked for order with NumPy alone."""
    from lodtool.io.megatron import read_index

    ix = read_index(str(prefix))
    ok = bool((ix.sequence_lengths >= 0).all())
    ok &= bool((ix.sequence_pointers[1:] >= ix.sequence_pointers[:-1]).all())
    ok &= bool((ix.document_indices[1:] >= ix.document_indices[:-1]).all())
    return ok


def numpy_same_checks(prefix: Path) -> bool:
    """The rules ``validate`` checks in O(n), as plain NumPy over the memory-mapped ``.idx`` arrays."""
    from lodtool.io.megatron import read_index

    ix = read_index(str(prefix))
    lengths, pointers, docs = ix.sequence_lengths, ix.sequence_pointers, ix.document_indices
    itemsize = np.dtype(ix.dtype).itemsize
    ok = bool((lengths >= 0).all()) and (len(pointers) == 0 or int(pointers[0]) == 0)
    ok = ok and bool((pointers[1:] == pointers[:-1] + lengths[:-1].astype(np.int64) * itemsize).all())
    ok = ok and int(docs[0]) == 0 and bool((docs[1:] >= docs[:-1]).all()) and int(docs[-1]) == len(lengths)
    return ok


def validation(prefix: Path, runs: int) -> tuple[list, dict]:
    from lodtool.io.megatron import validate_megatron

    assert numpy_pass(prefix) and numpy_same_checks(prefix) and validate_megatron(str(prefix)) == []
    times = C.interleaved({"validate": lambda: validate_megatron(str(prefix)), "numpy": lambda: numpy_pass(prefix),
                           "numpy same checks": lambda: numpy_same_checks(prefix)}, runs)
    r = {k: C.median(v) for k, v in times.items()}
    lodtool = C.lodtool_cmd()
    for command in ("inspect", "validate"):
        r[command + " process"] = C.median([C.run_child([*lodtool, command, str(prefix)]).check(command).wall
                                            for _ in range(max(runs, 1))])
    rows = [["`validate_megatron(prefix)` (every check), warm", C.fmt_s(r["validate"]),
             C.fmt_x(r["numpy"] / r["validate"])],
            ["NumPy pass over the .idx arrays (order only), warm", C.fmt_s(r["numpy"]), "1×"],
            ["NumPy, the same rules as `validate` (plain full-array code), warm", C.fmt_s(r["numpy same checks"]),
             C.fmt_x(r["numpy"] / r["numpy same checks"])],
            ["`lodtool inspect PREFIX` process", C.fmt_s(r["inspect process"]), "–"],
            ["`lodtool validate PREFIX` process", C.fmt_s(r["validate process"]), "–"]]
    return rows, r


def per_read(fn, indices) -> float:
    t0 = time.perf_counter()
    for i in indices:
        fn(int(i))
    return (time.perf_counter() - t0) / len(indices)


def random_documents(prefix: Path, reads: int, runs: int) -> tuple[list, dict]:
    import lodtool
    from lodtool.io.megatron import read_index

    ix = read_index(str(prefix))
    docs = np.array(ix.document_indices, np.int64)
    offsets = np.concatenate((np.asarray(ix.sequence_pointers, np.int64) // ix.itemsize, [ix.n_tokens]))
    data = np.memmap(ix.bin_path, dtype=ix.dtype, mode="r")

    def floor(i: int):
        a, b = int(docs[i]), int(docs[i + 1])
        r0 = int(offsets[a])
        return data[r0:int(offsets[b])], offsets[a:b + 1] - r0

    f = lodtool.open(str(prefix))
    t = f.tensor()
    readers = {"floor": floor, "lodtool": lambda i: t[i]}
    try:
        from megatron.core.datasets.indexed_dataset import IndexedDataset

        ds = IndexedDataset(str(prefix))
        readers["megatron"] = lambda i: ds[int(docs[i]):int(docs[i + 1])]
    except Exception:  # noqa: BLE001 - not installed (it needs torch), or broken: the row is skipped
        pass
    rng = np.random.default_rng(11)
    indices = rng.integers(0, len(docs) - 1, reads)
    for fn in readers.values():  # warm: the page cache, the held offsets, Megatron's index cache
        per_read(fn, indices)
    times: dict[str, list[float]] = {k: [] for k in readers}
    for _ in range(runs):
        for k, fn in readers.items():
            times[k].append(per_read(fn, indices))
    f.close()
    r = {k: C.median(v) for k, v in times.items()}
    names = {"floor": "`np.memmap` of the .bin, offsets in RAM (the floor)", "lodtool": "`lodtool.open(prefix)"
             ".tensor()[i]`", "megatron": "Megatron-Core `IndexedDataset`, `ds[a:b]` (the document's sequences)"}
    rows = [[names[k], f"{v * 1e6:.1f} µs", C.fmt_x(v / r["floor"])] for k, v in r.items()]
    return rows, r


def run(size: str, runs: int, tmpdir: str | None) -> dict:
    import tempfile

    tokens, docs, reads = SIZES[size]
    with tempfile.TemporaryDirectory(dir=tmpdir) as d:
        folder = Path(d)
        C.require_disk(folder, tokens * 4 * 4, "the Megatron dataset and its copies")
        prefix = folder / "corpus"
        C.progress(TAG, f"writing {docs:,} documents, about {tokens:,} tokens")
        shape = build(prefix, tokens, docs)
        C.progress(TAG, "conversion")
        conv_rows, conv = conversion(folder, prefix, runs)
        C.progress(TAG, "validation")
        val_rows, val = validation(prefix, runs)
        C.progress(TAG, "random documents")
        doc_rows, docs_r = random_documents(prefix, reads, runs)
    ratio = conv["cp"] / conv["round trip"]
    targets = [C.target("Megatron → container → Megatron ≥ 0.5× the speed of `cp` + `sync`, byte-identical",
                        C.fmt_s(conv["round trip"]), C.fmt_s(conv["cp"]), C.fmt_x(ratio),
                        ratio >= 0.5 and conv["identical"], "≥ 0.5×, same bytes"),
               C.target("`validate` of a Megatron dataset in place ≥ a NumPy pass over its .idx arrays",
                        C.fmt_s(val["validate"]), C.fmt_s(val["numpy"]), C.fmt_x(val["numpy"] / val["validate"]),
                        val["validate"] <= val["numpy"], "at least as fast")]
    if "megatron" in docs_r:
        targets.append(C.target("random document through `lodtool.open` ≥ Megatron-Core `IndexedDataset`",
                                f"{docs_r['lodtool'] * 1e6:.1f} µs", f"{docs_r['megatron'] * 1e6:.1f} µs",
                                C.fmt_x(docs_r["lodtool"] / docs_r["megatron"]),
                                docs_r["lodtool"] <= docs_r["megatron"], "at least as fast"))
    notes = [f"{shape['docs']:,} documents, {shape['sentences']:,} sentences, {shape['tokens']:,} int32 tokens "
             f"({C.fmt_bytes(conv['bytes'])} of .bin + .idx); {reads:,} random documents per pass.",
             f"The round trip gave {'the same' if conv['identical'] else '**different**'} bytes."]
    if "megatron" not in docs_r:
        notes.append("Megatron-Core is not installed here (`pip install megatron-core`, which needs torch): its row "
                     "is skipped.")
    return {"key": TAG, "title": "Token datasets of LLM training (issue 29)", "about": __doc__.split("\n\n")[2],
            "tables": [{"title": "Conversion (median wall time, processes)", "head": ["run", "time", "throughput",
                                                                                     "÷ cp"], "rows": conv_rows},
                       {"title": "Validation in place", "head": ["run", "time", "speed vs NumPy"], "rows": val_rows},
                       {"title": "Random documents (per read, warm)", "head": ["reader", "time", "÷ floor"],
                        "rows": doc_rows}],
            "targets": targets, "notes": notes}


def main(argv=None) -> int:
    args = C.bench_args(__doc__.split("\n\n")[0], argv)
    return C.finish(run(args.size, args.runs, args.tmpdir), args)


if __name__ == "__main__":
    raise SystemExit(main())
