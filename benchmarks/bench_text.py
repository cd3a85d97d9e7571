"""Text (issue 30): ``pack --tokenizer`` and ``unpack --detokenize`` against the code any user writes.

    python benchmarks/bench_text.py --size full     # 1 GB of JSON Lines text (needs pip install '.[text]')

The corpus is ``sample_data/text.jsonl`` (lodtool's documentation, one document per section) repeated to
the size, tokenized by ``sample_data/tokenizer.json`` (byte-level BPE, 2,048 ids). Timed, interleaved, in
this process:

* lodtool: :func:`lodtool.tasks.pack` with ``text=TextOptions(tokenizer)`` (batches of 4 MiB tokenized on
  every core while the previous batch is written), with the default compression and with ``none``;
* the floor any user writes: the same 4 MiB batches of lines parsed with orjson, ``Tokenizer.encode_batch``
  on each, then ``np.concatenate`` of every document's ids, and one h5py write of the ids and offsets
  (uncompressed);
* text out: :func:`lodtool.tasks.unpack` with ``detokenize=True`` to JSON Lines against
  ``Tokenizer.decode_batch`` of every document's id list (held in memory) and ``orjson.dumps`` of each.

Speeds are MB of text (the JSON Lines file's bytes; for text out, the bytes written) per second; ratios are
lodtool's speed over the floor's. datatrove's ``DocumentTokenizer`` is measured where datatrove imports.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C

TAG = "text"
#: bytes of JSON Lines text per size
SIZES = {"tiny": 2 << 20, "small": 64 << 20, "full": 1 << 30}
SAMPLES = C.ROOT / "sample_data"
BATCH_BYTES = 4 << 20


def make_corpus(path: Path, size: int) -> int:
    lines = (SAMPLES / "text.jsonl").read_bytes().splitlines(keepends=True)
    written = 0
    with open(path, "wb") as f:
        while written < size:
            for line in lines:
                f.write(line)
                written += len(line)
                if written >= size:
                    break
    return written


def floor_pack(src: Path, out: Path, tokenizer, fast: bool = False) -> None:
    """orjson + ``encode_batch`` (``fast``: ``encode_batch_fast``, no offsets) per 4 MiB batch, ``np.concatenate``,
    one h5py write."""
    import h5py
    import orjson

    ids, lengths = [], []

    encode_batch = tokenizer.encode_batch_fast if fast else tokenizer.encode_batch

    def encode(texts):
        for e in encode_batch(texts, add_special_tokens=False):
            ids.append(np.asarray(e.ids, np.uint16))
            lengths.append(len(e.ids))

    with open(src, "rb") as f:
        texts, size = [], 0
        for line in f:
            texts.append(orjson.loads(line)["text"])
            size += len(line)
            if size >= BATCH_BYTES:
                encode(texts)
                texts, size = [], 0
        if texts:
            encode(texts)
    data = np.concatenate(ids)
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    with h5py.File(out, "w") as h:
        h["data"] = data
        h["offsets"] = offsets


def floor_decode(docs: list[list[int]], tokenizer, out) -> int:
    import orjson

    written = 0
    for start in range(0, len(docs), 1024):
        texts = tokenizer.decode_batch(docs[start:start + 1024], skip_special_tokens=False)
        block = b"".join(orjson.dumps({"text": t}) + b"\n" for t in texts)
        out.write(block)
        written += len(block)
    return written


def run(size: str, runs: int, tmpdir: str | None) -> dict:
    title = "Text: pack --tokenizer and unpack --detokenize (issue 30)"
    try:
        import tokenizers
    except ImportError:
        return {"key": TAG, "title": title, "about": "Skipped: `tokenizers` is not installed (pip install '.[text]').",
                "targets": [], "tables": [], "notes": [], "meta": {}}
    from lodtool import tasks
    from lodtool.io.text import TextOptions

    load0 = C.loadavg()
    tok_path = SAMPLES / "tokenizer.json"
    tokenizer = tokenizers.Tokenizer.from_file(str(tok_path))
    with tempfile.TemporaryDirectory(prefix="lodtool-bench-text-", dir=tmpdir) as d:
        d = Path(d)
        src = d / "corpus.jsonl"
        nbytes = make_corpus(src, SIZES[size])
        C.progress(TAG, f"corpus: {C.fmt_bytes(nbytes)}")
        text = TextOptions(str(tok_path))

        def lodtool_default():
            tasks.pack([src], d / "a.lod.h5", text=text, force=True)

        def lodtool_none():
            tasks.pack([src], d / "b.lod.h5", text=text, compression="none", force=True)

        def floor():
            floor_pack(src, d / "floor.h5", tokenizer)

        def floor_fast():
            floor_pack(src, d / "floor.h5", tokenizer, fast=True)

        fns = {"lodtool": lodtool_default, "lodtool none": lodtool_none, "floor": floor}
        if hasattr(tokenizer, "encode_batch_fast"):
            fns["floor fast"] = floor_fast
        datatrove = None
        try:
            from datatrove.pipeline.tokens.tokenizer import DocumentTokenizer  # noqa: F401
            datatrove = "installed, not wired in this run"
        except ImportError:
            datatrove = None
        times = {k: C.median(v) for k, v in C.interleaved(fns, runs).items()}
        mbs = {k: nbytes / t / 1e6 for k, t in times.items()}
        C.progress(TAG, ", ".join(f"{k} {v:.1f} MB/s" for k, v in mbs.items()))

        with __import__("lodtool").open(d / "a.lod.h5") as f:
            t = f.tensor()
            whole = t.read()
        docs = [whole.data[a:b].tolist() for a, b in zip(whole.offsets[0][:-1], whole.offsets[0][1:])]
        sizes: dict = {}

        def detok():
            with open(os.devnull, "wb") as out:
                sizes["lodtool"] = tasks.unpack(d / "a.lod.h5", out, to="jsonl", detokenize=True).bytes_written

        def decode_floor():
            with open(os.devnull, "wb") as out:
                sizes["floor"] = floor_decode(docs, tokenizer, out)

        out_times = {k: C.median(v) for k, v in C.interleaved({"lodtool": detok, "floor": decode_floor},
                                                               runs).items()}
        out_mbs = {k: sizes[k] / t / 1e6 for k, t in out_times.items()}
        C.progress(TAG, ", ".join(f"detokenize {k} {v:.1f} MB/s" for k, v in out_mbs.items()))
        tokens = int(whole.n_rows)
    load1 = C.loadavg()
    r_pack = mbs["lodtool"] / mbs["floor"]
    r_none = mbs["lodtool none"] / mbs["floor"]
    r_out = out_mbs["lodtool"] / out_mbs["floor"]
    targets = [
        C.target("`lodtool pack --tokenizer` JSONL → container (default compression) ≥ 1× the floor "
                 "(`encode_batch` + `np.concatenate` + h5py)", f"{mbs['lodtool']:.1f} MB/s",
                 f"{mbs['floor']:.1f} MB/s", C.fmt_x(r_pack), r_pack >= 1.0, "≥ 1×"),
        C.target("the same with `--compression none`", f"{mbs['lodtool none']:.1f} MB/s", f"{mbs['floor']:.1f} MB/s",
                 C.fmt_x(r_none), r_none >= 1.0, "≥ 1×"),
        *([C.target("the floor with `encode_batch_fast` (no offsets; what lodtool calls where the library has it)",
                    f"{mbs['lodtool']:.1f} MB/s", f"{mbs['floor fast']:.1f} MB/s",
                    C.fmt_x(mbs["lodtool"] / mbs["floor fast"]), None, "informative")] if "floor fast" in mbs else []),
        C.target("`unpack --detokenize` to JSON Lines beside `decode_batch` + `orjson.dumps`",
                 f"{out_mbs['lodtool']:.1f} MB/s", f"{out_mbs['floor']:.1f} MB/s", C.fmt_x(r_out), None,
                 "informative"),
    ]
    notes = ["datatrove's `DocumentTokenizer` is not measured: "
             + ("it is installed, but its pipeline (readers, writers, executor) is not wired into this script yet."
                if datatrove else "datatrove is not installed here.")]
    about = (f"{C.fmt_bytes(nbytes)} of JSON Lines ({tokens:,} tokens with the shipped 2,048-id byte-level BPE), "
             f"medians of {runs} interleaved runs in one process, both cores; text out counts the bytes of JSON "
             f"Lines written. Load average {load0} before, {load1} after.")
    return {"key": TAG, "title": title, "about": about, "targets": targets, "tables": [], "notes": notes,
            "meta": {"pack_mbs": mbs, "detokenize_mbs": out_mbs, "bytes": nbytes, "tokens": tokens,
                     "load": [load0, load1]}}


def main(argv=None) -> int:
    args = C.bench_args(__doc__.split("\n\n")[0], argv)
    return C.finish(run(args.size, args.runs, args.tmpdir), args)


if __name__ == "__main__":
    raise SystemExit(main())
