"""Containers in object storage (lodtool.storage): reading through fsspec, requests counted against a local S3
server (moto's server mode on 127.0.0.1), writing whole objects, and one-line errors for every failure."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import h5py
import numpy as np
import pytest

import lodtool
from lodtool import storage
from lodtool.container.shards import ShardWriter
from lodtool.errors import (LodAccessError, LodError, LodFileNotFoundError, LodFormatError, LodTimeoutError,
                            LodUsageError)

from .s3_server import s3, s3_endpoint  # noqa: F401 - fixtures
from .test_cli import one_line_error, run

fsspec = pytest.importorskip("fsspec", reason="the remote extra (fsspec) is not installed")

SAMPLES = Path(__file__).resolve().parent.parent / "sample_data"




def corpus(n_docs: int = 3000, seed: int = 0) -> lodtool.LoDTensor:
    """Documents of sentences of int32 tokens: several MiB, so the chunks lie past the first page."""
    rng = np.random.default_rng(seed)
    sentences = rng.integers(1, 8, n_docs)
    tokens = rng.integers(5, 300, int(sentences.sum()))
    data = rng.integers(0, 50_000, int(tokens.sum())).astype(np.int32)
    return lodtool.LoDTensor(data, recursive_sequence_lengths=[sentences.tolist(), tokens.tolist()])


@pytest.fixture
def memory_root():
    """A fresh folder of fsspec's in-memory file system (no server needed)."""
    import uuid

    root = f"memory://lodtool-test-{uuid.uuid4().hex[:12]}"
    yield root
    fs = fsspec.filesystem("memory")
    if fs.exists(root.removeprefix("memory://")):
        fs.rm(root.removeprefix("memory://"), recursive=True)


def put(local, url: str) -> None:
    fs, path = fsspec.core.url_to_fs(url)
    fs.put(str(local), path, recursive=Path(local).is_dir())


# -- names, secrets, options ------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, shown", [
    ("s3://AKIAXXXX:verysecret@bucket/a.lod.h5", "s3://bucket/a.lod.h5"),
    ("https://u:p@host:8443/x.lod.h5?X-Amz-Signature=abc&X-Amz-Credential=k", "https://host:8443/x.lod.h5"),
    ("gs://bucket/x.lod.h5", "gs://bucket/x.lod.h5"),
    ("error at https://h/x?sig=1 and s3://k:s@b/y", "error at https://h/x and s3://b/y"),
])
def test_redact_strips_userinfo_and_query(text, shown):
    assert storage.redact(text) == shown


def test_scrub_hides_secret_option_values_anywhere():
    opts = {"key": "AKIAIOSFODNN7", "secret": "wJalrXUtnFEMI", "client_kwargs": {"aws_session_token": "tok123"},
            "endpoint_url": "http://127.0.0.1:9"}
    text = "signature for AKIAIOSFODNN7 with wJalrXUtnFEMI/tok123 at http://127.0.0.1:9 failed"
    assert storage.scrub(text, opts) == "signature for *** with ***/*** at http://127.0.0.1:9 failed"


def test_storage_options_are_scoped_and_parsed():
    assert storage.parse_option("anon=true") == ("anon", True)
    assert storage.parse_option("client_kwargs={\"region_name\": \"x\"}") == ("client_kwargs", {"region_name": "x"})
    with pytest.raises(LodUsageError):
        storage.parse_option("no-equals-sign")
    with storage.options({"a": 1}):
        with storage.options(b=2):
            assert storage.current_options() == {"a": 1, "b": 2}
        assert storage.current_options() == {"a": 1}
    assert storage.current_options() == {}


def test_file_urls_are_local_paths(tmp_path):
    p = tmp_path / "a.lod.h5"
    lodtool.save(p, lodtool.LoDTensor(np.arange(4), [[0, 1, 4]]), compression="none")
    with lodtool.open(f"file://{p}") as f:
        assert f.tensor().mappable  # a local file keeps its memory map
        assert f.tensor().read().lod == [[0, 1, 4]]


# -- reading from an fsspec file system (memory://) -------------------------------------------------------------
def test_open_load_and_branches_from_a_url(tmp_path, memory_root):
    t = corpus(400)
    local = tmp_path / "c.lod.h5"
    lodtool.save(local, {"tokens": t, "labels": lodtool.LoDTensor(np.ones(len(t.data), "int8"), t.lod)},
                 layout="paged")
    put(local, memory_root + "/c.lod.h5")
    with lodtool.open(memory_root + "/c.lod.h5") as f:
        assert f.names == ["tokens", "labels"]
        tokens = f["tokens"]
        assert not tokens.mappable  # object storage is read through libhdf5, never a memory map
        assert tokens.branch(123, 1).equals(t.branch(123, 1))
        assert tokens.head(5).equals(t.head(5)) and tokens.tail(3).equals(t.tail(3))
        assert f.shared_lod_with("labels") == ["tokens"]
    assert lodtool.load(memory_root + "/c.lod.h5:tokens").equals(t)
    assert lodtool.load(memory_root + "/c.lod.h5", "tokens").equals(t)


def test_a_sharded_folder_from_a_url(tmp_path, memory_root):
    t = corpus(300)
    with ShardWriter(tmp_path / "corpus", shard_size=200_000) as w:
        w.write(t)
    assert len(list((tmp_path / "corpus").glob("*.lod.h5"))) > 1
    put(tmp_path / "corpus", memory_root + "/corpus")
    for url in (memory_root + "/corpus", memory_root + "/corpus/"):
        with lodtool.open(url) as f:
            assert f.tensor().read().equals(t)
            assert f.tensor().branch(250, 0).equals(t.branch(250, 0))


def test_every_reading_command_takes_a_url(tmp_path, memory_root):
    local = tmp_path / "a.lod.h5"
    assert run("pack", SAMPLES / "articles.json", "-o", local).exit_code == 0
    put(local, memory_root + "/a.lod.h5")
    url = memory_root + "/a.lod.h5"
    info = json.loads(run("inspect", "--json", url).stdout)
    assert info["path"] == url and info["tensors"][0]["rows"] == json.loads(run("inspect", "--json", local).stdout)[
        "tensors"][0]["rows"]
    assert info["layout"] == "compact" and not info["remote_ready"]
    for args in (["validate", url], ["verify", url], ["tree", url]):
        result = run(*args)
        assert result.exit_code == 0, (args, result.output)
    for cmd in (["slice", "<1>"], ["head", "-n", "2"], ["tail", "-n", "1"]):
        got = run(cmd[0], url, *cmd[1:], "--to", "json")
        want = run(cmd[0], local, *cmd[1:], "--to", "json")
        assert got.exit_code == 0, got.output
        assert got.stdout == want.stdout
    for name, source in (("remote", url), ("local", local)):  # an operator, its input in object storage
        result = run("reverse", source, "-o", tmp_path / f"{name}.lod.h5")
        assert result.exit_code == 0, result.output
    assert lodtool.load(tmp_path / "remote.lod.h5").equals(lodtool.load(tmp_path / "local.lod.h5"))
    plan = run("batch", url, "--max-tokens", "64", "--json")
    assert plan.exit_code == 0, plan.output
    assert plan.stdout == run("batch", local, "--max-tokens", "64", "--json").stdout


def test_batches_read_from_a_url(tmp_path, memory_root):
    t = corpus(200)
    local = tmp_path / "c.lod.h5"
    lodtool.save(local, t, layout="paged")
    put(local, memory_root + "/c.lod.h5")
    got = [{k: np.array(v) for k, v in b.items()} for b in lodtool.batches(memory_root + "/c.lod.h5", max_tokens=4096)]
    want = [{k: np.array(v) for k, v in b.items()} for b in lodtool.batches(local, max_tokens=4096)]
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


# -- the layout -------------------------------------------------------------------------------------------------
def test_layout_default_compact_locally_and_paged_on_request(tmp_path):
    t = corpus(50)
    lodtool.save(tmp_path / "c.lod.h5", t)
    lodtool.save(tmp_path / "p.lod.h5", t, layout="paged")
    with h5py.File(tmp_path / "c.lod.h5") as h5:
        assert h5.id.get_create_plist().get_file_space_strategy()[0] != h5py.h5f.FSPACE_STRATEGY_PAGE
    with h5py.File(tmp_path / "p.lod.h5") as h5:
        assert h5.id.get_create_plist().get_file_space_strategy()[0] == h5py.h5f.FSPACE_STRATEGY_PAGE
        assert h5.id.get_create_plist().get_file_space_page_size() == storage.PAGE_SIZE
    assert lodtool.load(tmp_path / "p.lod.h5").equals(t)
    with pytest.raises(LodUsageError):
        lodtool.save(tmp_path / "x.lod.h5", t, layout="sideways")


def test_cli_layout_option_and_inspect_says_so(tmp_path):
    out = tmp_path / "p.lod.h5"
    assert run("pack", SAMPLES / "articles.json", "-o", out, "--layout", "paged").exit_code == 0
    info = json.loads(run("inspect", "--json", out).stdout)
    assert (info["layout"], info["page_size"], info["remote_ready"]) == ("paged", storage.PAGE_SIZE, True)
    assert "laid out for remote reading" in run("inspect", out).stdout
    plain = tmp_path / "c.lod.h5"
    assert run("pack", SAMPLES / "articles.json", "-o", plain).exit_code == 0
    assert json.loads(run("inspect", "--json", plain).stdout)["remote_ready"] is False


# -- writing ----------------------------------------------------------------------------------------------------
def test_pack_to_a_url_uploads_a_whole_paged_container(tmp_path, memory_root):
    url = memory_root + "/out/a.lod.h5"
    result = run("pack", SAMPLES / "articles.json", "-o", url)
    assert result.exit_code == 0, result.output
    local = tmp_path / "a.lod.h5"
    run("pack", SAMPLES / "articles.json", "-o", local)
    assert lodtool.load(url).equals(lodtool.load(local))
    assert json.loads(run("inspect", "--json", url).stdout)["layout"] == "paged"
    compact = memory_root + "/out/c.lod.h5"
    assert run("pack", SAMPLES / "articles.json", "-o", compact, "--layout", "compact").exit_code == 0
    assert json.loads(run("inspect", "--json", compact).stdout)["layout"] == "compact"


def test_a_failed_write_uploads_nothing(tmp_path, memory_root):
    bad = tmp_path / "bad.json"
    bad.write_text("[[1, 2], [3, ")
    url = memory_root + "/out/a.lod.h5"
    result = run("pack", bad, "-o", url)
    assert result.exit_code != 0
    one_line_error(result)
    assert not storage.exists(url)


def test_a_failed_upload_leaves_nothing_under_the_name(tmp_path, memory_root, monkeypatch):
    from fsspec.implementations.memory import MemoryFileSystem

    url = memory_root + "/out/a.lod.h5"

    def broken(self, lpath, rpath, **kw):
        raise ConnectionResetError("connection reset by peer")

    monkeypatch.setattr(MemoryFileSystem, "put_file", broken)
    result = run("pack", SAMPLES / "articles.json", "-o", url)
    assert result.exit_code == 1
    assert one_line_error(result).startswith(f"lodtool: error: {url}: cannot write it")
    monkeypatch.undo()
    assert not storage.exists(url)


# -- a local S3 server: requests counted ------------------------------------------------------------------------
def _gets(log):
    return [entry for entry in log if entry.method == "GET" and entry.range]


def _ranges(log):
    out = []
    for entry in _gets(log):
        a, b = entry.range.removeprefix("bytes=").split("-")
        out.append((int(a), int(b) + 1))
    return out


def _chunk_floor(h5: h5py.File, name: str, t: lodtool.LoDTensor, *path: int) -> int:
    """Stored bytes of the chunks a full branch ``<path>`` must read: its two offsets at each level, then its rows."""
    offsets = [np.asarray(level) for level in t.lod]
    at, needs = path[0], []
    for k, level in enumerate(offsets):
        needs.append((f"lod/{k}", (at, at + 1)))
        if k + 1 < len(offsets):
            at = int(level[at]) + path[k + 1]
    first, stop = int(offsets[-1][at]), int(offsets[-1][at + 1])
    needs.append(("data", (first, max(stop - 1, first))))
    total = 0
    for ds_name, (a, b) in needs:
        ds = h5[f"{name}/{ds_name}"]
        rows = ds.chunks[0]
        for c in range(a // rows, b // rows + 1):
            total += ds.id.get_chunk_info_by_coord((c * rows,)).size
    return total


def test_open_branch_and_batch_take_few_requests(s3, tmp_path):
    server, root = s3
    t = corpus(3000)
    local = tmp_path / "c.lod.h5"
    lodtool.save(local, t, layout="paged")
    assert local.stat().st_size > 3 * storage.PAGE_SIZE
    put(local, root + "/c.lod.h5")
    url = root + "/c.lod.h5"

    server.mark()
    f = lodtool.open(url)
    tensor = f.tensor()
    opened = server.since_mark()
    assert len(opened) <= 3, opened  # the object's size, its first page, the page holding its text attributes

    rng = np.random.default_rng(1)
    with h5py.File(local) as h5:
        for _ in range(3):
            i = int(rng.integers(len(t)))
            j = int(rng.integers(len(t.branch(i).lod[0]) - 1))
            server.mark()
            got = tensor.branch(i, j)
            read = server.since_mark()
            assert got.equals(t.branch(i, j))
            assert len(read) <= 3, read
            floor = _chunk_floor(h5, "tensor", t, i, j)
            assert sum(e.nbytes for e in read) <= 2 * floor, (read, floor)

    server.mark()
    n_seq = 0
    for batch in lodtool.batches(url, max_tokens=16384, mode="sorted"):
        n_seq += len(batch["lengths"])
        break
    batch_log = server.since_mark()
    assert n_seq > 0
    # the plan and the reader each ask for the object's size and version; nothing read before is fetched again
    # (the head, the chunk indexes, the offsets chunks of the branch reads), and each chunk is one request
    from lodtool.container.writer import STORAGE_CHUNK_BYTES

    assert sum(e.method == "HEAD" for e in batch_log) == 2
    gets = _ranges(batch_log)
    assert len(gets) == len(set(gets)) == len(batch_log) - 2
    assert not set(gets) & set(_ranges(opened))
    assert all(e.nbytes <= STORAGE_CHUNK_BYTES for e in batch_log)
    f.close()


def test_every_random_branch_takes_few_requests_once_offsets_are_read_whole(s3, tmp_path):
    # more branches than the reader reads window by window before it holds each level whole: the offsets of
    # every level (several chunks each) come in the open's requests, never chunk by chunk inside a branch read
    from lodtool.tensor import RESIDENT_AFTER

    server, root = s3
    rng = np.random.default_rng(3)  # short sentences: offsets of many chunks beside a few MiB of tokens
    sentences = rng.integers(1, 8, 20_000)
    tokens = rng.integers(1, 40, int(sentences.sum()))
    t = lodtool.LoDTensor(rng.integers(0, 50_000, int(tokens.sum())).astype(np.int32),
                          recursive_sequence_lengths=[sentences.tolist(), tokens.tolist()])
    local = tmp_path / "c.lod.h5"
    lodtool.save(local, t, layout="paged")
    put(local, root + "/c.lod.h5")
    with h5py.File(local) as h5:
        assert [h5[f"tensor/lod/{k}"].id.get_num_chunks() >= 10 for k in range(2)] == [True, True]
        server.mark()
        with lodtool.open(root + "/c.lod.h5") as f:
            tensor = f.tensor()
            assert len(server.since_mark()) <= 3
            for _ in range(2 * RESIDENT_AFTER + 8):
                i = int(rng.integers(len(t)))
                j = int(rng.integers(len(t.branch(i).lod[0]) - 1))
                mark = len(server.since_mark())
                got = tensor.branch(i, j)
                read = server.since_mark()[mark:]
                assert got.equals(t.branch(i, j))
                assert len(read) <= 3, (i, j, read)
                assert sum(e.nbytes for e in read) <= 2 * _chunk_floor(h5, "tensor", t, i, j), (i, j, read)
    spans = _ranges(server.since_mark())
    assert len(spans) == len(set(spans)), "a range was fetched twice"


def _streamed_paged_container(tmp_path, monkeypatch, lod_level: int) -> tuple[Path, lodtool.LoDTensor]:
    """A paged container written by the streaming ``pack`` from JSONL, with small chunks so that its offsets span
    many chunks that lie between its data chunks (each one run of its own), as a corpus of many input blocks has."""
    from lodtool.container import writer
    from lodtool.io import json as json_io

    monkeypatch.setattr(json_io, "SCAN_BLOCK", 64 << 10)  # pack writes what each input block brings
    monkeypatch.setattr(writer, "OFFSETS_CHUNK_BYTES", 1 << 10)
    monkeypatch.setattr(writer, "STORAGE_CHUNK_BYTES", 16 << 10)
    rng = np.random.default_rng(lod_level)
    source = tmp_path / "docs.jsonl"
    with open(source, "w") as out:
        for _ in range(1500):
            doc = [rng.integers(0, 50_000, int(n)).tolist() for n in rng.integers(5, 150, int(rng.integers(1, 8)))]
            out.write(json.dumps(doc if lod_level == 2 else sum(doc, [])) + "\n")
    local = tmp_path / "streamed.lod.h5"
    result = run("pack", source, "-o", local, "--layout", "paged", "--dtype", "int32")
    assert result.exit_code == 0, result.output
    return local, lodtool.load(local)


@pytest.mark.parametrize("lod_level", [1, 2])
def test_every_random_branch_of_a_streamed_container_takes_few_requests(s3, tmp_path, monkeypatch, lod_level):
    # offsets chunks scattered between data chunks cannot all come with the open: the reader keeps reading one
    # window a level (a request at most) and holds a level whole only once all of its chunks are here, never
    # fetching the rest of a level chunk by chunk inside one branch read
    from lodtool.tensor import RESIDENT_AFTER

    server, root = s3
    local, t = _streamed_paged_container(tmp_path, monkeypatch, lod_level)
    assert t.lod_level == lod_level
    put(local, root + "/s.lod.h5")
    rng = np.random.default_rng(5)
    with h5py.File(local) as h5:
        assert h5.id.get_create_plist().get_file_space_strategy()[0] == h5py.h5f.FSPACE_STRATEGY_PAGE
        spans = [span for k in range(lod_level) for span in storage._spans_of(h5[f"tensor/lod/{k}"])]
        assert len(storage._coalesced(spans)) >= 8, "the offsets should lie in many runs"
        server.mark()
        with lodtool.open(root + "/s.lod.h5") as f:
            tensor = f.tensor()
            assert len(server.since_mark()) <= 3
            for _ in range(4 * RESIDENT_AFTER):
                i = int(rng.integers(len(t)))
                path = (i,) if lod_level == 1 else (i, int(rng.integers(len(t.branch(i).lod[0]) - 1)))
                mark = len(server.since_mark())
                got = tensor.branch(*path)
                read = server.since_mark()[mark:]
                assert got.equals(t.branch(*path))
                assert len(read) <= 3, (path, read)
                assert sum(e.nbytes for e in read) <= 2 * _chunk_floor(h5, "tensor", t, *path), (path, read)
    fetched = _ranges(server.since_mark())
    assert len(fetched) == len(set(fetched)), "a range was fetched twice"


def test_a_read_brings_the_planned_runs_near_it_once():
    kept = storage._Kept()
    gap = storage.MERGE_GAP
    kept.plan([(100, 200), (200 + gap, 300 + gap), (10 * gap, 11 * gap), (20 * gap, 21 * gap)])
    assert kept.take_planned(50, 60) == [(100, 200)]  # within the gap before it
    assert kept.take_planned(50, 60) == []  # taken: fetched once
    assert kept.take_planned(300 + 2 * gap, 400 + 2 * gap) == [(200 + gap, 300 + gap)]  # within the gap after it
    assert kept.take_planned(5 * gap, 6 * gap) == []
    assert kept.take_planned(10 * gap, 20 * gap) == [(10 * gap, 11 * gap), (20 * gap, 21 * gap)]  # a read over two
    assert kept.planned == []


def test_kept_bytes_say_what_a_read_would_not_ask_for():
    kept = storage._Kept()
    assert not kept.holds(0, 10)  # nothing read yet, not even the head
    kept.head = bytes(100)
    kept.keep_run(1000, bytes(500))
    kept.put((5000, 5100), bytes(100))
    assert kept.holds(0, 100) and kept.holds(1000, 1500) and kept.holds(1200, 1300) and kept.holds(5000, 5100)
    assert not kept.holds(90, 110)  # past the head
    assert not kept.holds(1400, 1600)  # past the run
    assert not kept.holds(5000, 5050)  # a kept read answers only exactly its own bytes


def test_no_metadata_is_asked_for_twice(s3, tmp_path):
    server, root = s3
    t = corpus(1500)
    local = tmp_path / "c.lod.h5"
    lodtool.save(local, t, layout="paged")
    put(local, root + "/c.lod.h5")
    server.mark()
    with lodtool.open(root + "/c.lod.h5") as f:
        tensor = f.tensor()
        for i in np.random.default_rng(2).integers(len(t), size=20):
            tensor.branch(int(i))
        tensor.branch(7)
        tensor.branch(7)
    spans = _ranges(server.since_mark())
    assert len(spans) == len(set(spans)), "a range was fetched twice"
    spans.sort()
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), "overlapping ranges: bytes fetched twice"


def test_verbose_shows_the_request_count(s3, tmp_path):
    server, root = s3
    local = tmp_path / "a.lod.h5"
    lodtool.save(local, corpus(20), layout="paged")
    put(local, root + "/a.lod.h5")
    result = run("-v", "inspect", root + "/a.lod.h5")
    assert result.exit_code == 0, result.output
    assert "requests to object storage" in result.stderr
    assert "requests to object storage" not in run("inspect", root + "/a.lod.h5").stderr


def test_pack_to_s3_and_read_back(s3, tmp_path):
    server, root = s3
    url = root + "/out/articles.lod.h5"
    server.mark()
    result = run("pack", SAMPLES / "articles.json", "-o", url)
    assert result.exit_code == 0, result.output
    puts = [e for e in server.since_mark() if e.method in ("PUT", "POST")]
    assert len(puts) == 1  # one PUT: the object appears whole, or not at all
    local = tmp_path / "a.lod.h5"
    run("pack", SAMPLES / "articles.json", "-o", local)
    assert lodtool.load(url).equals(lodtool.load(local))


def _random_jsonl(path, count: int, seed: int):
    """``count`` documents of 1-299 random token ids, one JSON list per line."""
    rng = np.random.default_rng(seed)
    path.write_text("".join(json.dumps(rng.integers(0, 50_000, int(rng.integers(1, 300))).tolist()) + "\n"
                            for _ in range(count)))
    return path


def test_a_killed_pack_to_s3_leaves_the_object_whole_or_absent(s3, tmp_path):
    import signal
    import subprocess
    import sys

    import s3fs

    server, root = s3
    src = _random_jsonl(tmp_path / "big.jsonl", 20_000, seed=7)
    local = tmp_path / "local.lod.h5"
    assert run("pack", src, "-o", local).exit_code == 0
    want = lodtool.load(local)
    fs = s3fs.S3FileSystem(endpoint_url=server.endpoint)
    outcomes = []
    # SIGKILL (no cleanup can run) while the container is still written locally, and once its upload is answered
    for i, moment in enumerate([0.5, 0.8, "uploaded"]):
        url = f"{root}/k{i}.lod.h5"
        server.mark()
        proc = subprocess.Popen([sys.executable, "-m", "lodtool", "pack", str(src), "-o", url],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        start = time.monotonic()
        while proc.poll() is None and time.monotonic() - start < 60:
            uploaded = any(e.method in ("PUT", "POST") for e in server.since_mark())
            if uploaded if moment == "uploaded" else (not uploaded and time.monotonic() - start > moment):
                break
            time.sleep(0.001)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        fs.invalidate_cache()
        if fs.exists(url):
            assert lodtool.load(url).equals(want)  # whole, never a part
            outcomes.append("whole")
        else:
            outcomes.append("absent")
    assert outcomes[0] == "absent" and outcomes[-1] == "whole", outcomes
    assert sorted(n.rsplit("/", 1)[-1] for n in fs.ls(root)) == [f"k{i}.lod.h5" for i, o in enumerate(outcomes)
                                                                  if o == "whole"]  # nothing else left there


def test_sharded_folder_on_s3(s3, tmp_path):
    server, root = s3
    t = corpus(300)
    with ShardWriter(tmp_path / "corpus", shard_size=200_000) as w:
        w.write(t)
    put(tmp_path / "corpus", root + "/corpus")
    with lodtool.open(root + "/corpus") as f:
        assert f.tensor().read().equals(t)
    assert run("validate", root + "/corpus").exit_code == 0
    assert run("verify", root + "/corpus").exit_code == 0


# -- bad input: one line, bounded time, no credentials shown, nothing written ----------------------------------
def _check_refusal(result, url_shown: str, out: Path, secrets=("testing-secret-key",)):
    assert result.exit_code != 0
    line = one_line_error(result)
    assert url_shown in line, line
    for secret in secrets:
        assert secret not in result.output
    assert not out.exists()
    return line


def test_missing_bucket_and_missing_object(s3, tmp_path):
    server, root = s3
    out = tmp_path / "o.lod.h5"
    for url in ("s3://no-such-bucket-lodtool/x.lod.h5", root + "/missing.lod.h5"):
        result = run("slice", url, "<0>", "-o", out)
        _check_refusal(result, url, out)
        with pytest.raises(LodFileNotFoundError):
            lodtool.open(url)


def test_no_credentials(s3, tmp_path, monkeypatch):
    server, root = s3
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # never ask the instance metadata address
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    out = tmp_path / "o.lod.h5"
    started = time.monotonic()
    result = run("slice", root + "/x.lod.h5", "<0>", "-o", out)
    assert time.monotonic() - started < 10
    line = _check_refusal(result, root + "/x.lod.h5", out)
    assert "credentials" in line
    with pytest.raises(LodAccessError):
        lodtool.open(root + "/x.lod.h5")


def test_credentials_given_as_options_never_show(s3, tmp_path):
    server, root = s3
    out = tmp_path / "o.lod.h5"
    result = run("inspect", root + "/missing.lod.h5", "--storage-option", "key=AKIAFAKEKEY99",
                 "--storage-option", "secret=SuperSecretValue42")
    assert result.exit_code != 0
    assert "SuperSecretValue42" not in result.output and "AKIAFAKEKEY99" not in result.output
    assert not out.exists()


class _Refusing(BaseHTTPRequestHandler):
    """An S3 endpoint that refuses everything: 403 AccessDenied."""

    def _deny(self):
        body = (b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>AccessDenied</Code>"
                b"<Message>Access Denied</Message></Error>")
        self.send_response(403)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_HEAD = do_PUT = do_POST = _deny

    def log_message(self, *args):
        pass


@pytest.fixture
def refusing_endpoint():
    pytest.importorskip("s3fs")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture
def silent_endpoint():
    """A server that accepts connections and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    held: list = []
    stop = threading.Event()

    def accept():
        sock.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(sock.accept()[0])
            except OSError:
                pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    sock.close()


def test_access_denied(s3, refusing_endpoint, tmp_path):
    out = tmp_path / "o.lod.h5"
    url = "s3://bucket/x.lod.h5"
    result = run("slice", url, "<0>", "-o", out, "--storage-option", f"endpoint_url={refusing_endpoint}")
    line = _check_refusal(result, url, out)
    assert "access denied" in line
    with pytest.raises(LodAccessError), storage.options(endpoint_url=refusing_endpoint):
        lodtool.open(url)


def test_a_server_that_hangs_times_out(s3, silent_endpoint, tmp_path):
    out = tmp_path / "o.lod.h5"
    url = "s3://bucket/x.lod.h5"
    started = time.monotonic()
    result = run("slice", url, "<0>", "-o", out, "--storage-option", f"endpoint_url={silent_endpoint}",
                 "--storage-option", "timeout=0.5", "--storage-option", "attempts=1")
    assert time.monotonic() - started < 8
    line = _check_refusal(result, url, out)
    assert "did not answer in time" in line
    with pytest.raises(LodTimeoutError), storage.options(endpoint_url=silent_endpoint, timeout=0.5, attempts=1):
        lodtool.open(url)


def test_a_truncated_object(s3, tmp_path):
    server, root = s3
    local = tmp_path / "c.lod.h5"
    lodtool.save(local, corpus(300), layout="paged")
    cut = tmp_path / "cut.lod.h5"
    cut.write_bytes(local.read_bytes()[: local.stat().st_size // 2])
    put(cut, root + "/cut.lod.h5")
    out = tmp_path / "o.lod.h5"
    result = run("slice", root + "/cut.lod.h5", "<0>", "-o", out)
    line = _check_refusal(result, root + "/cut.lod.h5", out)
    assert "truncated" in line
    with pytest.raises(LodFormatError):
        lodtool.load(root + "/cut.lod.h5")


def test_errors_are_typed_builtins():
    assert issubclass(LodAccessError, PermissionError) and issubclass(LodAccessError, LodError)
    assert issubclass(LodTimeoutError, TimeoutError) and issubclass(LodTimeoutError, OSError)


def test_save_to_a_url_and_an_existing_object_needs_force(memory_root):
    t = corpus(30)
    url = memory_root + "/lib/t.lod.h5"
    lodtool.save(url, t)
    assert lodtool.load(url).equals(t)
    with pytest.raises(lodtool.errors.LodExistsError):
        lodtool.save(url, corpus(10, seed=3))
    assert lodtool.load(url).equals(t)  # untouched
    lodtool.save(url, corpus(10, seed=3), force=True)
    assert lodtool.load(url).equals(corpus(10, seed=3))
    with pytest.raises(LodUsageError):
        lodtool.LodWriter(url, append=True)
    result = run("pack", SAMPLES / "articles.json", "-o", url)
    assert result.exit_code == 2 and "--force" in one_line_error(result)


def test_merge_repacks_a_container_into_the_paged_layout(tmp_path, memory_root):
    src = tmp_path / "c.lod.h5"
    assert run("pack", SAMPLES / "articles.json", "-o", src).exit_code == 0
    assert json.loads(run("inspect", "--json", src).stdout)["remote_ready"] is False
    out = tmp_path / "p.lod.h5"
    result = run("merge", src, "-o", out, "--layout", "paged", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["rows"] == lodtool.load(src).data.shape[0]
    assert json.loads(run("inspect", "--json", out).stdout)["remote_ready"] is True
    assert lodtool.load(out).equals(lodtool.load(src))
    url = memory_root + "/p.lod.h5"
    assert run("merge", src, "-o", url).exit_code == 0  # to object storage: paged by default
    assert json.loads(run("inspect", "--json", url).stdout)["remote_ready"] is True
    assert lodtool.load(url).equals(lodtool.load(src))


def test_dask_workers_read_partitions_straight_from_s3(s3, tmp_path):
    pytest.importorskip("dask")
    from lodtool.interop import dask as lod_dask

    server, root = s3
    t = corpus(400)
    with ShardWriter(tmp_path / "corpus", shard_size=300_000) as w:
        w.write(t)
    put(tmp_path / "corpus", root + "/corpus")
    local = lod_dask.read(tmp_path / "corpus", partition_size="64KB").reverse().compute(scheduler="sync")
    bag = lod_dask.read(root + "/corpus", partition_size="64KB")
    assert bag.npartitions > 2 and all(p.path == root + "/corpus" for p in bag.partitions)
    remote = bag.reverse().compute(scheduler="threads", num_workers=2)
    assert remote.equals(local)
    assert np.asarray(remote.data).tobytes() == np.asarray(local.data).tobytes()


def test_dask_partitions_carry_storage_options_but_never_show_them(memory_root):
    pytest.importorskip("dask")
    from lodtool.interop import dask as lod_dask

    lodtool.save(memory_root + "/t.lod.h5", corpus(50))
    with storage.options(secret="NeverShowThis1"):
        bag = lod_dask.read(memory_root + "/t.lod.h5", partition_size="16KB")
    part = bag.partitions[0]
    assert part.storage_options == {"secret": "NeverShowThis1"}
    assert "NeverShowThis1" not in repr(part)


def test_sharded_output_to_s3_commits_the_manifest_last(s3, tmp_path):
    server, root = s3
    t = corpus(300)
    url = root + "/out/corpus"
    server.mark()
    with ShardWriter(url, shard_size=200_000) as w:
        w.write(t)
    puts = [e.path.rsplit("/", 1)[-1] for e in server.since_mark() if e.method == "PUT"]
    assert puts[-1] == "lodtool.json" and len(puts) > 2  # every shard whole, then the manifest
    assert lodtool.load(url).equals(t)
    assert run("validate", url).exit_code == 0
    info = json.loads(run("inspect", "--json", url).stdout)
    assert (info["layout"], info["remote_ready"]) == ("paged", True)  # shards written for object storage
    local = tmp_path / "corpus"
    with ShardWriter(local, shard_size=200_000) as w:
        w.write(t)
    assert sorted(storage.list_names(url)) == sorted(p.name for p in local.iterdir())


def test_a_failed_sharded_write_to_s3_leaves_no_shards(s3):
    server, root = s3
    url = root + "/out/failed"
    with pytest.raises(RuntimeError):
        with ShardWriter(url, shard_size=100_000) as w:
            w.write(corpus(200))
            w.end_shard()
            raise RuntimeError("the producer failed")
    assert storage.list_names(url) == []


def _bucket_names(root: str) -> list[str]:
    import s3fs

    fs = s3fs.S3FileSystem()
    fs.invalidate_cache()
    return sorted(p.split("/", 1)[1] for p in fs.find(root.removeprefix("s3://"), withdirs=False))


def test_a_failed_sharded_write_to_s3_leaves_nothing_in_the_bucket(s3):
    server, root = s3
    with pytest.raises(RuntimeError):
        with ShardWriter(root + "/out/failed", shard_size=100_000) as w:
            w.write(corpus(200))
            w.end_shard()
            assert not storage.list_names(root + "/out/failed")  # the finished shards wait in a staging prefix
            raise RuntimeError("the producer failed")
    assert _bucket_names(root) == []


def test_a_sharded_pack_to_s3_killed_leaves_nothing_under_the_folder_and_the_next_write_sweeps(s3, tmp_path):
    import signal
    import subprocess
    import sys

    server, root = s3
    src = _random_jsonl(tmp_path / "docs.jsonl", 3_000, seed=8)
    url = root + "/out/corpus/"
    server.mark()
    proc = subprocess.Popen([sys.executable, "-m", "lodtool", "pack", str(src), "-o", url, "--shard-size", "256KB"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    start = time.monotonic()
    staged = []
    while proc.poll() is None and time.monotonic() - start < 60 and len(staged) < 2:
        staged = [e for e in server.since_mark() if e.method == "PUT" and "/part-" in e.path]
        time.sleep(0.001)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert len(staged) >= 2 and all(".lodtmp-" in e.path for e in staged)  # killed while shards were uploaded
    left = _bucket_names(root)
    assert left and not [n for n in left if n.startswith("out/corpus/")], left  # nothing under the folder
    assert all(n.startswith("out/.corpus.lodtmp-") for n in left), left

    with ShardWriter(url, shard_size=100_000) as w:
        w.write(corpus(100))
    left = _bucket_names(root)
    assert all(n.startswith("out/corpus/") for n in left), left  # the killed write's staging is gone
    assert sorted(n.rsplit("/", 1)[-1] for n in left) == sorted(
        ["lodtool.json", *(s.file for s in lodtool.container.shards.read_manifest(url).shards)])


def test_the_next_write_removes_shards_a_commit_killed_while_copying_left(s3, tmp_path):
    import subprocess
    import sys

    from lodtool import atomic

    server, root = s3
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    folder = root + "/out/c"
    staging = atomic.staging_for(folder)
    owner = tmp_path / atomic.STAGING_OWNER
    owner.write_text(json.dumps({"host": __import__("socket").gethostname(), "pid": gone.pid}))
    atomic.publish(owner, storage.join(staging, atomic.STAGING_OWNER))  # as if that process had made it
    shard = tmp_path / "part-00005.lod.h5"
    lodtool.save(shard, corpus(20))
    for where in (staging, folder):  # staged, and copied into the folder, then killed before the manifest
        atomic.publish(shard, storage.join(where, "part-00005.lod.h5"))
    with ShardWriter(folder, shard_size=100_000) as w:
        w.write(corpus(30, seed=4))
    assert lodtool.load(folder).equals(corpus(30, seed=4))
    assert _bucket_names(root) == ["out/c/lodtool.json", "out/c/part-00000.lod.h5"]


def test_a_staging_prefix_of_a_writer_elsewhere_is_swept_only_once_it_is_old(memory_root, tmp_path):
    from lodtool import atomic

    folder = memory_root + "/corpus"
    staging = atomic.staging_for(folder)
    owner = tmp_path / atomic.STAGING_OWNER
    owner.write_text(json.dumps({"host": "another-machine", "pid": 1}))
    atomic.publish(owner, storage.join(staging, atomic.STAGING_OWNER))
    atomic.publish(owner, storage.join(staging, "part-00003.lod.h5"))
    assert atomic.sweep_stale_staging(folder) == []  # its writer may be running there
    assert storage.exists(storage.join(staging, "part-00003.lod.h5"))
    assert atomic.sweep_stale_staging(folder, min_age=0) == ["part-00003.lod.h5"]
    assert not storage.exists(storage.join(staging, "part-00003.lod.h5"))
    live = atomic.staging_for(folder)  # this process's own: never swept while it runs
    assert atomic.sweep_stale_staging(folder, min_age=0) == [] and storage.exists(
        storage.join(live, atomic.STAGING_OWNER))


def test_cli_shard_to_s3(s3, tmp_path):
    server, root = s3
    src = tmp_path / "c.lod.h5"
    lodtool.save(src, corpus(300))
    result = run("shard", src, "-o", root + "/sharded", "--shard-size", "200KB")
    assert result.exit_code == 0, result.output
    assert lodtool.load(root + "/sharded").equals(lodtool.load(src))


@pytest.mark.slow
def test_cli_pack_sharded_to_s3(s3, tmp_path):
    server, root = s3
    result = run("pack", SAMPLES / "corpus.jsonl", "-o", root + "/packed/", "--shard-size", "64KB")
    assert result.exit_code == 0, result.output
    local = tmp_path / "packed"
    assert run("pack", SAMPLES / "corpus.jsonl", "-o", local, "--shard-size", "64KB").exit_code == 0
    assert lodtool.load(root + "/packed/").equals(lodtool.load(local))


def test_dask_writes_its_shards_to_s3(s3, tmp_path):
    pytest.importorskip("dask")
    from lodtool.interop import dask as lod_dask

    server, root = s3
    src = tmp_path / "c.lod.h5"
    lodtool.save(src, corpus(120))
    bag = lod_dask.read(src, partition_size="64KB").reverse()
    bag.to_container(root + "/reversed", scheduler="threads", num_workers=2)
    bag.to_container(tmp_path / "reversed", scheduler="sync")
    remote, local = lodtool.load(root + "/reversed"), lodtool.load(tmp_path / "reversed")
    assert np.asarray(remote.data).tobytes() == np.asarray(local.data).tobytes() and remote.lod == local.lod


def test_dask_shards_for_s3_wait_in_staging_and_a_failed_job_leaves_nothing(s3, tmp_path, monkeypatch):
    pytest.importorskip("dask")
    from lodtool.interop import dask as lod_dask

    server, root = s3
    src = tmp_path / "c.lod.h5"
    lodtool.save(src, corpus(120))
    bag = lod_dask.read(src, partition_size="16KB").reverse()
    assert bag.npartitions > 1
    write, seen = lod_dask._write_result, []

    def write_then_fail(task, path, *args, **kwargs):
        seen.append(path)
        if len(seen) > 1:
            assert not storage.list_names(root + "/reversed")  # the first shard waits outside the folder
            raise RuntimeError("a worker failed")
        return write(task, path, *args, **kwargs)

    monkeypatch.setattr(lod_dask, "_write_result", write_then_fail)
    with pytest.raises(RuntimeError):
        bag.to_container(root + "/reversed", scheduler="sync")
    assert ".lodtmp-" in seen[0] and "/reversed/" not in seen[0]
    assert _bucket_names(root) == []  # no shard in the folder, no staging prefix
    monkeypatch.setattr(lod_dask, "_write_result", write)
    bag.to_container(root + "/reversed", scheduler="sync")
    assert all(n.startswith("reversed/") for n in _bucket_names(root))  # the staging prefix is gone after commit


@pytest.mark.parametrize("command", [["inspect"], ["validate"], ["slice", "@URL", "<0>"], ["head"]])
def test_credentials_in_a_url_never_show(s3, tmp_path, command):
    server, root = s3
    bucket = root.removeprefix("s3://")
    url = f"s3://AKIAINURL42:SecretInUrl42@{bucket}/missing.lod.h5?X-Amz-Signature=SigInQuery42"
    args = [url if a == "@URL" else a for a in command] + ([] if "@URL" in command else [url])
    result = run(*args)
    assert result.exit_code != 0
    for secret in ("AKIAINURL42", "SecretInUrl42", "SigInQuery42"):
        assert secret not in result.output
    assert storage.redact(url).rsplit("?", 1)[0] in result.output or "missing.lod.h5" in result.output


def test_a_read_that_fails_after_the_open_is_its_own_typed_error(tmp_path, memory_root, monkeypatch):
    from fsspec.implementations.memory import MemoryFileSystem

    t = corpus(400)
    local = tmp_path / "c.lod.h5"
    lodtool.save(local, t, layout="paged")
    put(local, memory_root + "/c.lod.h5")
    with lodtool.open(memory_root + "/c.lod.h5") as f:
        tensor = f.tensor()

        def hangs(self, path, start=None, end=None, **kw):
            raise TimeoutError("read timed out")

        monkeypatch.setattr(MemoryFileSystem, "cat_file", hangs)
        with pytest.raises(LodTimeoutError, match="did not answer in time"):
            tensor.branch(len(t) - 1)  # its chunks lie past the first page: a request, which fails
        # a later error of another file is its own, never this object's stale failure
        bad = tmp_path / "bad.lod.h5"
        bad.write_bytes(b"not hdf5 at all")
        with pytest.raises(LodFormatError, match="not an HDF5 file"):
            lodtool.open(bad)


def test_unpack_reads_a_url(tmp_path, memory_root):
    local = tmp_path / "a.lod.h5"
    assert run("pack", SAMPLES / "articles.json", "-o", local).exit_code == 0
    put(local, memory_root + "/a.lod.h5")
    got = run("unpack", memory_root + "/a.lod.h5", "--to", "jsonl")
    assert got.exit_code == 0, got.output
    assert got.stdout == run("unpack", local, "--to", "jsonl").stdout
