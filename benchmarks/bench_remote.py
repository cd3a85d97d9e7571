"""Containers in object storage (issue 31): requests and bytes per open, per random branch and per batch.

    python benchmarks/bench_remote.py --size small     # 3,000 documents, ~3.3 MB of int32 tokens

Against moto's S3 server on 127.0.0.1 (started here, every request it answers counted with the bytes of
its body; the numbers are the server's), the same tokens stored as:

* a lodtool container in the paged layout (what ``pack -o s3://...`` writes), and in the compact one,
  each read with ``lodtool.open(url)``;
* the same containers opened by h5py over ``s3fs.open(url)`` with fsspec's default settings (the anchor
  the paged layout and lodtool's reader are judged against);
* Parquet (one row per document, a ``list<list<int32>>`` column, row groups of 64 documents) read by
  pyarrow over s3fs: one row group per branch;
* zarr v3 (where zarr is installed: the ``bench`` extra): the tokens and each level's offsets as arrays with
  the container's chunk rows, zarr's default codecs, consolidated metadata, read through zarr's
  ``FsspecStore``: a branch reads its offsets, then its tokens, as a reader of the container would.

Random ``<i,0>`` branches, then the first batch of ``lodtool.batches(url, max_tokens=16384)``; and random
branch reads per second from the local server beside the same container on local disk.  The server runs
in this process, so its time is in the reads per second (a real store adds its round trip to each
request: what the request counts are for).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C

sys.path.insert(0, str(C.ROOT))

TAG = "remote"
#: documents per size
SIZES = {"tiny": 300, "small": 3000, "full": 30000}
BRANCHES = {"tiny": 10, "small": 50, "full": 200}


def make_tensor(n_docs: int, seed: int = 0):
    import lodtool

    rng = np.random.default_rng(seed)
    sentences = rng.integers(1, 8, n_docs)
    tokens = rng.integers(5, 300, int(sentences.sum()))
    data = rng.integers(0, 50_000, int(tokens.sum())).astype(np.int32)
    return lodtool.LoDTensor(data, recursive_sequence_lengths=[sentences.tolist(), tokens.tolist()])


def _cost(server) -> tuple[int, int]:
    log = server.since_mark()
    return len(log), sum(e.nbytes for e in log)


def _zarr_row(t, picks, container: str, folder: str, fs, server) -> list | None:
    """The zarr v3 row (``None`` where zarr is not installed): the same tokens, chunked as in ``container``."""
    try:
        import zarr
        import zarr.storage
    except ImportError:
        return None
    import h5py

    with h5py.File(container) as h5:
        chunk_rows = {"data": h5["tensor/data"].chunks[0],
                      **{f"lod{k}": h5[f"tensor/lod/{k}"].chunks[0] for k in range(len(t.lod))}}
    local = os.path.join(folder, "tokens.zarr")
    group = zarr.open_group(zarr.storage.LocalStore(local), mode="w", zarr_format=3)
    group.create_array("data", data=np.asarray(t.data), chunks=(chunk_rows["data"],))
    for k, level in enumerate(t.lod):
        group.create_array(f"lod{k}", data=np.asarray(level, dtype=np.int64), chunks=(chunk_rows[f"lod{k}"],))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zarr.consolidate_metadata(local, zarr_format=3)
    fs.put(local, "bench/tokens.zarr", recursive=True)
    server.mark()
    store = zarr.storage.FsspecStore.from_url("s3://bench/tokens.zarr", read_only=True)
    with warnings.catch_warnings():  # consolidated metadata is an extension of zarr's, not yet in the v3 spec
        warnings.simplefilter("ignore")
        group = zarr.open_group(store, mode="r", use_consolidated=True, zarr_format=3)
    data, l0, l1 = group["data"], group["lod0"], group["lod1"]
    opened = _cost(server)
    return [f"zarr {zarr.__version__} (v3, FsspecStore), consolidated metadata",
            *_cells(opened, _read_branches(server, picks, data, l0, l1)), "–"]


def _read_branches(server, picks, data, l0, l1) -> list:
    """The requests and bytes of each picked document's first sentence, read through array-like ``data`` and levels."""
    costs = []
    for i in picks:
        server.mark()
        s = int(l0[i])
        a, b = (int(v) for v in l1[s:s + 2])
        data[a:b]
        costs.append(_cost(server))
    return costs


def _cells(opened, branch) -> list[str]:
    """The open's and the branches' cells of a row: requests and bytes."""
    return [f"{opened[0]}, {C.fmt_bytes(opened[1])}",
            f"{np.mean([b[0] for b in branch]):.2f} / {max(b[0] for b in branch)}",
            C.fmt_bytes(np.mean([b[1] for b in branch]))]


def run(size: str, runs: int, tmpdir: str | None) -> dict:
    try:
        from moto.moto_server import threaded_moto_server
        import pyarrow as pa
        import pyarrow.parquet as pq
        import s3fs  # noqa: F401 - the remote extra
    except ImportError as exc:
        return {"key": TAG, "title": "Object storage (issue 31)", "about": "", "targets": [], "tables": [],
                "notes": [f"skipped: {exc.name} is not installed (pip install '.[test]' brings moto[server], s3fs "
                          "and pyarrow)"]}

    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1",
                      AWS_EC2_METADATA_DISABLED="true")
    from tests.s3_server import start_server

    moto, server = start_server(threaded_moto_server)
    os.environ["AWS_ENDPOINT_URL"] = server.endpoint
    import h5py
    import s3fs

    import lodtool

    fs = s3fs.S3FileSystem()
    fs.mkdir("bench")
    t = make_tensor(SIZES[size])
    rng = np.random.default_rng(5)
    picks = [int(i) for i in rng.integers(len(t), size=BRANCHES[size])]
    rows, tables = [], []
    targets = []
    try:
        with tempfile.TemporaryDirectory(dir=tmpdir) as d:
            sizes = {}
            for layout in ("paged", "compact"):
                p = os.path.join(d, f"{layout}.lod.h5")
                lodtool.save(p, t, layout=layout)
                sizes[layout] = os.path.getsize(p)
                fs.put_file(p, f"bench/{layout}.lod.h5")
            C.progress(TAG, f"{len(t):,} documents; paged {sizes['paged']:,} B, compact {sizes['compact']:,} B")
            for layout in ("paged", "compact"):
                url = f"s3://bench/{layout}.lod.h5"
                server.mark()
                f = lodtool.open(url)
                tensor = f.tensor()
                opened = _cost(server)
                branch = []
                for i in picks:
                    server.mark()
                    tensor.branch(i, 0)
                    branch.append(_cost(server))
                server.mark()
                next(iter(lodtool.batches(url, max_tokens=16384)))
                batch = _cost(server)
                f.close()
                rows.append([f"lodtool, {layout}", *_cells(opened, branch), f"{batch[0]}, {C.fmt_bytes(batch[1])}"])
                if layout == "paged":
                    targets.append(C.target("open a paged container: requests", str(opened[0]), "–", "–",
                                            opened[0] <= 3, "≤ 3"))
                    most = max(b[0] for b in branch)
                    targets.append(C.target("random `<i,0>` branch: requests (most)", str(most), "–", "–",
                                            most <= 3, "≤ 3"))
                server.mark()
                with fs.open(f"bench/{layout}.lod.h5", "rb") as fo, h5py.File(fo, "r") as h5:
                    g = h5["tensor"]
                    data, l0, l1 = g["data"], g["lod/0"], g["lod/1"]
                    anchor_open = _cost(server)
                    anchor = _read_branches(server, picks, data, l0, l1)
                rows.append([f"h5py + s3fs defaults, {layout}", *_cells(anchor_open, anchor), "–"])
            inner = pa.ListArray.from_arrays(pa.array(np.asarray(t.lod[1]), pa.int32()), pa.array(t.data))
            docs = pa.ListArray.from_arrays(pa.array(np.asarray(t.lod[0]), pa.int32()), inner)
            pq_path = os.path.join(d, "tokens.parquet")
            pq.write_table(pa.table({"tokens": docs}), pq_path, row_group_size=64)
            fs.put_file(pq_path, "bench/tokens.parquet")
            server.mark()
            pf = pq.ParquetFile("bench/tokens.parquet", filesystem=fs)
            pq_open = _cost(server)
            groups = []
            for i in picks:
                server.mark()
                pf.read_row_group(i // 64)
                groups.append(_cost(server))
            rows.append(["Parquet (pyarrow over s3fs), row groups of 64 documents",
                         f"{pq_open[0]}, {C.fmt_bytes(pq_open[1])}",
                         f"{np.mean([g[0] for g in groups]):.2f} / {max(g[0] for g in groups)}",
                         C.fmt_bytes(np.mean([g[1] for g in groups])), "–"])

            zarr_row = _zarr_row(t, picks, os.path.join(d, "paged.lod.h5"), d, fs, server)
            if zarr_row is not None:
                rows.append(zarr_row)

            local = os.path.join(d, "paged.lod.h5")
            speed = {}
            fresh = [int(i) for i in np.random.default_rng(11).integers(len(t), size=len(picks))]
            with lodtool.open(local) as lf, lodtool.open("s3://bench/paged.lod.h5") as rf:
                for where, handle in (("local disk", lf.tensor()), ("local S3 server", rf.tensor())):
                    started = time.perf_counter()
                    for i in fresh:
                        handle.branch(i, 0)
                    speed[where] = len(fresh) / (time.perf_counter() - started)
            speed_rows = [[where, f"{v:,.0f}"] for where, v in speed.items()]
    finally:
        moto.stop()
    tables.append({"title": "Requests and bytes, counted by the server", "head": [
        "reader", "open: requests, bytes", "branch: requests (mean / most)", "branch: bytes (mean)",
        "first batch: requests, bytes"], "rows": rows})
    tables.append({"title": "Random `<i,0>` branches per second, the paged container (other branches than "
                            "above; a chunk read above is not asked for again)",
                   "head": ["from", "branches/s"], "rows": speed_rows})
    about = (f"{len(t):,} documents of 1-7 sentences of 5-300 int32 tokens ({C.fmt_bytes(t.data.nbytes)} of "
             f"tokens); {len(picks)} random branches. Files: paged {C.fmt_bytes(sizes['paged'])}, compact "
             f"{C.fmt_bytes(sizes['compact'])}. See docs/remote.md.")
    return {"key": TAG, "title": "Object storage (issue 31)", "about": about, "targets": targets,
            "tables": tables, "notes": [
                "h5py over s3fs with fsspec's defaults reads in blocks of 50 MiB with read-ahead: the open "
                "brings the whole file (or 50 MiB of it), after which its branches cost nothing more.",
                "The S3 server is moto, in this process: requests and bytes are what matters here, not the "
                "times (a real store adds a round trip to every request).",
                "zarr's FsspecStore over s3fs sent a HEAD, then a GET, for each chunk it read "
                "(each chunk a whole object), and kept none between reads." if zarr_row is not None else
                "zarr v3 not measured: zarr is not installed (pip install '.[bench]' brings it)."]}


if __name__ == "__main__":
    raise SystemExit(C.main(run, __doc__))
