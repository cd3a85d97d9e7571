"""Text (issue 30): ``pack --tokenizer`` and ``unpack --detokenize`` against the code any user writes and datatrove.

    python benchmarks/bench_text.py --size full     # 1 GiB of JSON Lines, and 4 GiB for peak RSS (needs '.[text]')

The corpus is ``sample_data/text.jsonl`` (lodtool's documentation, one document per section) repeated to
the size (``tiny`` 2 MiB, ``small`` 64 MiB, ``full`` 1 GiB), tokenized by ``sample_data/tokenizer.json``
(byte-level BPE, 2,048 ids). Each contender is a process of its own, timed from start to exit with its peak
RSS (``ru_maxrss``), the contenders interleaved run after run:

* lodtool: ``lodtool pack CORPUS --tokenizer tokenizer.json -o OUT`` (batches of 4 MiB tokenized on every
  core while the previous batch is written), the default compression, and (not at ``full``) ``--compression
  none``;
* the floor any user writes: the same 4 MiB batches of lines parsed with orjson, ``Tokenizer.encode_batch``
  on each (every core), ``np.concatenate`` of every document's ids, one h5py write of ids and offsets
  (uncompressed); not at ``full``, the same with ``encode_batch_fast`` (what lodtool calls);
* datatrove (where it imports): ``JsonlReader`` + ``DocumentTokenizer`` with the same tokenizer.json on a
  ``LocalPipelineExecutor`` of one task (one input file is one task; ``encode_batch`` runs on every core),
  ``shuffle_documents=False`` since lodtool does not shuffle either.

Peak RSS flat in input size: lodtool's peak on the corpus against its peak on a corpus 4 times larger
(``full``: 4 GiB; this one run takes about as long as four passes of the rest, ``--no-large`` skips it).
Text out, on the container of the first 64 MiB of the corpus (the floor holds every document's ids as
Python lists): :func:`lodtool.tasks.unpack` with ``detokenize=True`` to JSON Lines against
``Tokenizer.decode_batch`` + ``orjson.dumps``, in this process, interleaved.

Speeds are MB of text (the JSON Lines file's bytes; for text out, the bytes written) per second; ratios are
lodtool's speed over the other's.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C

TAG = "text"
#: bytes of JSON Lines text per size; peak RSS is also measured on :data:`LARGE` times as much
SIZES = {"tiny": 2 << 20, "small": 64 << 20, "full": 1 << 30}
LARGE = 4
#: text out is measured on the container of at most this much of the corpus
DETOKENIZE_BYTES = 64 << 20
#: runs of each process by default: one pass of the full corpus takes minutes on 2 cores
RUNS = {"tiny": 1, "small": 2, "full": 1}
SAMPLES = C.ROOT / "sample_data"
TOKENIZER = SAMPLES / "tokenizer.json"
BATCH_BYTES = 4 << 20
HERE = Path(__file__).resolve().parent


def make_corpus(path: Path, size: int) -> int:
    """``sample_data/text.jsonl`` repeated, whole lines, until ``path`` holds at least ``size`` bytes."""
    lines = (SAMPLES / "text.jsonl").read_bytes().splitlines(keepends=True)
    block = b"".join(lines)
    written = 0
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        while written + len(block) <= size:
            f.write(block)
            written += len(block)
        for line in lines:
            if written >= size:
                break
            f.write(line)
            written += len(line)
    return written


def floor_pack(src: str, out: str, tokenizer_path: str, fast: bool = False) -> int:
    """orjson + ``encode_batch`` (``fast``: ``encode_batch_fast``, no offsets) per 4 MiB batch, ``np.concatenate``,
    one h5py write; returns the token count."""
    import h5py
    import orjson
    import tokenizers

    tokenizer = tokenizers.Tokenizer.from_file(tokenizer_path)
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
    return int(data.size)


def datatrove_pack(src_dir: str, out_dir: str, tokenizer_path: str, logs: str) -> int:
    """datatrove's ``JsonlReader`` + ``DocumentTokenizer`` (no shuffle) on one task; returns the token count."""
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.tokens import DocumentTokenizer

    LocalPipelineExecutor(pipeline=[JsonlReader(src_dir),
                                    DocumentTokenizer(out_dir, tokenizer_name_or_path=tokenizer_path,
                                                      shuffle_documents=False)],
                          tasks=1, workers=1, logging_dir=logs, skip_completed=False).run()
    return sum(p.stat().st_size for p in Path(out_dir).glob("*.ds")) // 2  # uint16 tokens


def child(function: str, *args: str) -> list[str]:
    """The command that runs ``function(*args)`` of this module in a fresh interpreter and prints its result."""
    code = (f"import sys; sys.path.insert(0, {str(HERE)!r}); import bench_text; "
            f"print(bench_text.{function}(*sys.argv[1:]))")
    return [sys.executable, "-c", code, *args]


def floor_decode(docs: list[list[int]], tokenizer, out) -> int:
    import orjson

    written = 0
    for start in range(0, len(docs), 1024):
        texts = tokenizer.decode_batch(docs[start:start + 1024], skip_special_tokens=False)
        block = b"".join(orjson.dumps({"text": t}) + b"\n" for t in texts)
        out.write(block)
        written += len(block)
    return written


def tokens_in(path: Path) -> int:
    import lodtool

    with lodtool.open(path) as f:
        return int(f.tensor().n_rows)


def detokenize(d: Path, src: Path, tokenizer, runs: int) -> dict:
    """MB/s of ``unpack --detokenize`` and of ``decode_batch`` + orjson on the first :data:`DETOKENIZE_BYTES`."""
    import lodtool
    from lodtool import tasks
    from lodtool.io.text import TextOptions

    part = d / "part" / "part.jsonl"
    part.parent.mkdir()
    with open(src, "rb") as f, open(part, "wb") as out:
        taken = 0
        for line in f:
            if taken >= DETOKENIZE_BYTES:
                break
            out.write(line)
            taken += len(line)
    container = d / "part.lod.h5"
    tasks.pack([part], container, text=TextOptions(str(TOKENIZER)), force=True)
    part.unlink()
    with lodtool.open(container) as f:
        whole = f.tensor().read()
    docs = [whole.data[a:b].tolist() for a, b in zip(whole.offsets[0][:-1], whole.offsets[0][1:])]
    del whole
    sizes: dict = {}

    def lodtool_out():
        with open(os.devnull, "wb") as out:
            sizes["lodtool"] = tasks.unpack(container, out, to="jsonl", detokenize=True).bytes_written

    def floor_out():
        with open(os.devnull, "wb") as out:
            sizes["floor"] = floor_decode(docs, tokenizer, out)

    times = {k: C.median(v) for k, v in C.interleaved({"lodtool": lodtool_out, "floor": floor_out}, runs).items()}
    container.unlink()
    return {"mbs": {k: sizes[k] / t / 1e6 for k, t in times.items()}, "bytes": sizes["floor"],
            "same": sizes["floor"] == sizes["lodtool"]}


def run(size: str, runs: int, tmpdir: str | None, large: bool = True) -> dict:
    title = "Text: pack --tokenizer and unpack --detokenize (issue 30)"
    try:
        import tokenizers
    except ImportError:
        return {"key": TAG, "title": title, "about": "Skipped: `tokenizers` is not installed (pip install '.[text]').",
                "targets": [], "tables": [], "notes": [], "meta": {}}
    runs = max(runs, 1)
    notes: list[str] = []
    load0 = C.loadavg()
    datatrove = importlib.util.find_spec("datatrove") is not None
    with tempfile.TemporaryDirectory(prefix="lodtool-bench-text-", dir=tmpdir) as d:
        d = Path(d)
        C.require_disk(d, SIZES[size] * (LARGE + 3 if large else 3), "the text corpora and their outputs")
        src = d / "in" / "corpus.jsonl"
        nbytes = make_corpus(src, SIZES[size])
        C.progress(TAG, f"corpus: {C.fmt_bytes(nbytes)}")
        cli, env = C.lodtool_cmd(), C.child_env()
        tok = str(TOKENIZER)
        commands = {"lodtool": cli + ["pack", str(src), "--tokenizer", tok, "-o", str(d / "a.lod.h5"), "--force",
                                      "-q"]}
        if size != "full":
            commands["lodtool none"] = commands["lodtool"] + ["--compression", "none"]
        commands["floor"] = child("floor_pack", str(src), str(d / "floor.h5"), tok)
        if size != "full":
            commands["floor fast"] = child("floor_pack", str(src), str(d / "floor.h5"), tok, "1")
        if datatrove:
            commands["datatrove"] = child("datatrove_pack", str(src.parent), str(d / "dt"), tok, str(d / "dt-logs"))
        walls: dict[str, list[float]] = {k: [] for k in commands}
        rss: dict[str, list[int]] = {k: [] for k in commands}
        counts: dict[str, int] = {}
        for r in range(runs):
            for name, cmd in (commands.items() if r % 2 == 0 else reversed(commands.items())):
                shutil.rmtree(d / "dt", ignore_errors=True)
                shutil.rmtree(d / "dt-logs", ignore_errors=True)
                with tempfile.TemporaryFile() as out:
                    c = C.run_child(cmd, env=env, stdout=out, timeout=6 * 3600).check(name)
                    out.seek(0)
                    printed = out.read().split()
                walls[name].append(c.wall)
                rss[name].append(c.maxrss)
                if printed and printed[-1].isdigit():
                    counts[name] = int(printed[-1])
                C.progress(TAG, f"run {r + 1}/{runs}: {name} {c.wall:.1f} s, {nbytes / c.wall / 1e6:.2f} MB/s, "
                                f"peak RSS {C.fmt_bytes(c.maxrss)} (load {C.loadavg()})")
        counts["lodtool"] = tokens_in(d / "a.lod.h5")
        for leftover in ("a.lod.h5", "floor.h5"):
            (d / leftover).unlink(missing_ok=True)
        for leftover in ("dt", "dt-logs"):
            shutil.rmtree(d / leftover, ignore_errors=True)
        mbs = {k: nbytes / C.median(v) / 1e6 for k, v in walls.items()}

        C.progress(TAG, "text out")
        out = detokenize(d, src, tokenizers.Tokenizer.from_file(tok), max(runs, 2 if size == "full" else runs))
        C.progress(TAG, ", ".join(f"detokenize {k} {v:.2f} MB/s" for k, v in out["mbs"].items()))

        large_bytes = large_rss = large_wall = None
        if large:
            src.unlink()
            big = d / "large.jsonl"
            large_bytes = make_corpus(big, SIZES[size] * LARGE)
            C.progress(TAG, f"peak RSS on {C.fmt_bytes(large_bytes)}")
            c = C.run_child(cli + ["pack", str(big), "--tokenizer", tok, "-o", str(d / "large.lod.h5"), "-q"],
                            env=env, timeout=12 * 3600).check("lodtool pack (large)")
            large_rss, large_wall = c.maxrss, c.wall
            C.progress(TAG, f"lodtool pack {C.fmt_bytes(large_bytes)}: {c.wall:.1f} s, "
                            f"{large_bytes / c.wall / 1e6:.2f} MB/s, peak RSS {C.fmt_bytes(c.maxrss)}")
    load1 = C.loadavg()

    def speed(k: str) -> str:
        return f"{mbs[k]:.2f} MB/s"

    r_pack = mbs["lodtool"] / mbs["floor"]
    targets = [
        C.target("`lodtool pack --tokenizer` JSONL → container (default compression) ≥ 1× the floor "
                 "(`encode_batch` + `np.concatenate` + h5py)", speed("lodtool"), speed("floor"), C.fmt_x(r_pack),
                 r_pack >= 1.0, "≥ 1×")]
    if "lodtool none" in mbs:
        r_none = mbs["lodtool none"] / mbs["floor"]
        targets.append(C.target("the same with `--compression none`", speed("lodtool none"), speed("floor"),
                                C.fmt_x(r_none), r_none >= 1.0, "≥ 1×"))
    if datatrove:
        r_dt = mbs["lodtool"] / mbs["datatrove"]
        targets.append(C.target("`lodtool pack --tokenizer` ahead of datatrove's `DocumentTokenizer` (same "
                                "tokenizer.json, same JSONL)", speed("lodtool"), speed("datatrove"), C.fmt_x(r_dt),
                                r_dt > 1.0, "> 1×"))
    else:
        notes.append("datatrove is not installed here: its row is skipped.")
    base_rss = max(rss["lodtool"])
    if large_rss is not None:
        r_rss = large_rss / base_rss
        targets.append(C.target(f"`lodtool pack --tokenizer` peak RSS flat in input size: "
                                f"{C.fmt_bytes(large_bytes)} within 20% of {C.fmt_bytes(nbytes)}",
                                C.fmt_bytes(large_rss), C.fmt_bytes(base_rss), C.fmt_x(r_rss),
                                1 / 1.2 <= r_rss <= 1.2, "0.83–1.2×"))
    else:
        targets.append(C.target(f"`lodtool pack --tokenizer` peak RSS flat in input size ({LARGE}× the corpus)",
                                "not measured (--no-large)", C.fmt_bytes(base_rss), "–", None, "0.83–1.2×"))
    r_out = out["mbs"]["lodtool"] / out["mbs"]["floor"]
    targets.append(C.target("`unpack --detokenize` to JSON Lines beside `decode_batch` + `orjson.dumps`",
                            f"{out['mbs']['lodtool']:.2f} MB/s", f"{out['mbs']['floor']:.2f} MB/s", C.fmt_x(r_out),
                            None, "reported"))
    names = {"lodtool": "`lodtool pack --tokenizer` (default compression)",
             "lodtool none": "`lodtool pack --tokenizer --compression none`",
             "floor": "floor: orjson + `encode_batch` + `np.concatenate` + h5py",
             "floor fast": "the floor with `encode_batch_fast`",
             "datatrove": "datatrove `JsonlReader` + `DocumentTokenizer`, 1 task, no shuffle"}
    rows = [[names[k], f"{C.median(walls[k]):.1f} s", f"{mbs[k]:.2f}", C.fmt_x(mbs[k] / mbs["floor"]),
             C.fmt_bytes(max(rss[k])), f"{counts[k]:,}" if k in counts else "–"] for k in commands]
    if large_rss is not None:
        rows.append([f"`lodtool pack --tokenizer` on {C.fmt_bytes(large_bytes)} (1 run)", f"{large_wall:.1f} s",
                     f"{large_bytes / large_wall / 1e6:.2f}", "–", C.fmt_bytes(large_rss), "–"])
    tables = [{"title": f"Packing {C.fmt_bytes(nbytes)} of JSON Lines (processes; median wall of {runs} run(s), "
                        "peak RSS the largest)",
               "head": ["process", "wall", "MB/s", "÷ floor", "peak RSS", "tokens"], "rows": rows},
              {"title": f"Text out ({C.fmt_bytes(out['bytes'])} of JSON Lines written, in this process, median of "
                        f"{max(runs, 2 if size == 'full' else runs)})",
               "head": ["writer", "MB/s", "÷ floor"],
               "rows": [["`tasks.unpack(..., to=\"jsonl\", detokenize=True)`", f"{out['mbs']['lodtool']:.2f}",
                         C.fmt_x(r_out)],
                        ["`decode_batch` of 1,024 documents at a time + `orjson.dumps`", f"{out['mbs']['floor']:.2f}",
                         "1×"]]}]
    if len(set(counts.values())) > 1:
        notes.append("The packers' token counts differ: " + ", ".join(f"{k} {v:,}" for k, v in counts.items()))
    else:
        notes.append(f"Every packer wrote the same {counts['lodtool']:,} tokens (lodtool's counted in its container, "
                     "the floor's in its array, datatrove's from its .ds file's size).")
    notes.append("lodtool tokenizes with `encode_batch_fast` (no character offsets) where the library has it; the "
                 "floor calls `encode_batch`, as the issue writes it" + ("" if "floor fast" in mbs else
                 " (the floor with `encode_batch_fast` is measured at the smaller sizes only)") + ".")
    notes.append("Text out: the floor's id lists are built beforehand, untimed; lodtool's time includes reading the "
                 "container and turning its ids into lists.")
    if not out["same"]:
        notes.append("Text out: lodtool and the floor wrote different byte counts.")
    about = (f"{C.fmt_bytes(nbytes)} of JSON Lines ({counts['lodtool']:,} tokens with the shipped 2,048-id "
             f"byte-level BPE); every packer a whole process (start-up included) on both cores. "
             f"Load average {load0} before, {load1} after.")
    return {"key": TAG, "title": title, "about": about, "targets": targets, "tables": tables, "notes": notes,
            "meta": {"pack_mbs": mbs, "walls": walls, "rss": rss, "tokens": counts, "bytes": nbytes,
                     "detokenize_mbs": out["mbs"], "large": [large_bytes, large_rss, large_wall],
                     "load": [load0, load1]}}


if __name__ == "__main__":
    raise SystemExit(C.main(run, __doc__, default_runs=RUNS, extra=lambda ap: ap.add_argument(
        "--no-large", dest="large", action="store_false", help=f"skip the peak-RSS run on {LARGE}× the corpus")))
