"""lodtool.dask on a LocalCluster of 2 process workers: the same answers as the one-process path, byte for byte."""

from __future__ import annotations

import io
import logging
import multiprocessing
import os
import signal
import threading
import time

import numpy as np
import pytest

pytest.importorskip("distributed")

from lodtool import LoDTensor, load, save, tasks  # noqa: E402
from lodtool.container.shards import (  # noqa: E402
    MANIFEST_NAME,
    ShardWriter,
    concat_tensors,
    merge,
    open_sharded,
    read_manifest,
    shard_name,
    validate_sharded,
    write_shard,
)
from lodtool.errors import LodError, LodUsageError  # noqa: E402
from lodtool.interop import dask as lod_dask  # noqa: E402


@pytest.fixture(scope="module")
def client():
    from distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0",
                           silence_logs=logging.ERROR)
    with Client(cluster) as c:
        yield c
    cluster.close()


def _tokens(n_docs: int, seed: int, dtype="float32") -> LoDTensor:
    rng = np.random.default_rng(seed)
    docs = rng.integers(1, 5, n_docs)
    sents = rng.integers(0, 7, int(docs.sum()))
    sents[-1] = max(sents[-1], 1)
    data = rng.standard_normal(int(sents.sum())).astype(dtype)
    return LoDTensor(data, recursive_sequence_lengths=[docs.tolist(), sents.tolist()], level_names=["doc", "sent"])


def _empty_allowed() -> bool:
    """Whether this lodtool stores a tensor of zero sequences (offsets [0]; the empty tensor of issue 17)."""
    import tempfile

    try:
        empty = LoDTensor._trusted(np.zeros(0, "float32"), (np.zeros(1, np.int64),) * 2, ("doc", "sent"))
        save(os.path.join(tempfile.mkdtemp(), "e.lod.h5"), empty)
        return True
    except LodError:  # this lodtool's LoD rules need one sequence per level
        return False


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A sharded folder with uneven shards (big, one sequence, medium; empty ones where the format allows them),
    and the same tensor as one file."""
    d = tmp_path_factory.mktemp("corpus")
    parts = [_tokens(60, 1), _tokens(1, 2), _tokens(23, 3), _tokens(7, 4)]
    folder = str(d / "shards")
    with ShardWriter(folder, shard_size="1MB") as w:
        for p in parts:
            w.write(p)
            w.end_shard()  # one shard per part: uneven on purpose
    if _empty_allowed():
        from lodtool.container.shards import TensorSpec, commit_manifest

        empty = LoDTensor._trusted(np.zeros(0, "float32"), (np.zeros(1, np.int64),) * 2, ("doc", "sent"))
        m = read_manifest(folder)
        extra = [write_shard(os.path.join(folder, shard_name(i)), {"tensor": empty}) for i in (4, 5)]
        shards = m.shards[:1] + extra[:1] + m.shards[1:] + extra[1:]
        commit_manifest(folder, {"tensor": TensorSpec.of(empty)}, shards)
    whole = concat_tensors(parts)
    single = str(d / "whole.lod.h5")
    save(single, whole)
    return {"folder": folder, "single": single, "tensor": whole, "dir": d}


def _same_bytes(a: LoDTensor, b: LoDTensor) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    assert np.ascontiguousarray(a.data).tobytes() == np.ascontiguousarray(b.data).tobytes()
    assert len(a.offsets) == len(b.offsets)
    for x, y in zip(a.offsets, b.offsets):
        assert np.asarray(x, np.int64).tobytes() == np.asarray(y, np.int64).tobytes()


def test_plan_is_uneven_shards_cut_into_whole_sequence_partitions(corpus):
    parts, spec = lod_dask.plan(corpus["folder"], partition_size=512)
    m = read_manifest(corpus["folder"])
    assert len(parts) > len([s for s in m.shards if s.tensors["tensor"].sequences])
    assert sum(p.stop - p.start for p in parts) == len(corpus["tensor"])
    assert [p.start for p in parts] == list(np.cumsum([0] + [p.stop - p.start for p in parts])[:-1])
    t = corpus["tensor"]
    rows = np.asarray(t.offsets[1])[np.asarray(t.offsets[0])]  # the first row of every top-level sequence
    assert [p.row for p in parts] == [int(rows[p.start]) for p in parts]
    assert spec.level_names == ("doc", "sent")


@pytest.mark.parametrize("pool_type", ["sum", "average", "sqrt", "max", "min", "first", "last"])
def test_pool_matches_the_one_process_path(client, corpus, tmp_path, pool_type):
    want_path = str(tmp_path / "want.lod.h5")
    tasks.pool(corpus["single"], want_path, pool_type=pool_type)
    bag = lod_dask.read(corpus["folder"], partition_size=512).pool(pool_type)
    _same_bytes(bag.compute(), load(want_path))
    if pool_type != "sum":
        return  # one written run is enough: the shards hold what compute() joins
    out = str(tmp_path / "out")
    bag.to_container(out)
    merge(out, str(tmp_path / "merged.lod.h5"))
    _same_bytes(load(str(tmp_path / "merged.lod.h5")), load(want_path))
    assert validate_sharded(out).ok


@pytest.mark.parametrize("pool_type", ["max", "min"])
def test_pool_index_matches_the_one_process_path(client, corpus, tmp_path, pool_type):
    want_path = str(tmp_path / "want.lod.h5")
    tasks.pool(corpus["folder"], want_path, pool_type=pool_type, index=True)
    want, want_index = load(want_path, "tensor"), load(want_path, "tensor_index")
    assert want_index.dtype == np.int32 and (want_index.data == -1).any()  # empty sentences are in the corpus
    bag = lod_dask.read(corpus["folder"], partition_size=256).pool(pool_type, return_index=True)
    assert bag.npartitions > 4
    got, got_index = bag.compute()
    _same_bytes(got, want)
    _same_bytes(got_index, want_index)  # global rows, counted across partitions and shards
    assert got_index.level_names == want_index.level_names
    if pool_type != "max":
        return
    out = str(tmp_path / "out")
    m = bag.to_container(out)
    assert m.names == ["tensor", "tensor_index"] and validate_sharded(out).ok
    merge(out, str(tmp_path / "merged.lod.h5"))
    _same_bytes(load(str(tmp_path / "merged.lod.h5"), "tensor_index"), want_index)
    _same_bytes(load(str(tmp_path / "merged.lod.h5"), "tensor"), want)


def test_pool_index_refusals(corpus):
    bag = lod_dask.read(corpus["folder"], partition_size=256)
    with pytest.raises(LodUsageError, match="max and min"):
        bag.pool("sum", return_index=True)
    with pytest.raises(LodUsageError, match="before other operators"):
        bag.reverse().pool("max", return_index=True)
    with pytest.raises(LodUsageError, match="chaining"):
        bag.pool("max", return_index=True).reverse()


@pytest.mark.parametrize("op", ["softmax", "reverse"])
def test_softmax_and_reverse_match_the_one_process_path(client, corpus, tmp_path, op):
    want_path = str(tmp_path / "want.lod.h5")
    getattr(tasks, op)(corpus["single"], want_path)
    bag = getattr(lod_dask.read(corpus["folder"], partition_size=256), op)()
    got = bag.compute()
    _same_bytes(got, load(want_path))
    assert got.level_names == load(want_path).level_names


def test_expand_matches_the_one_process_path(client, corpus, tmp_path):
    rng = np.random.default_rng(7)
    n = 90
    x = LoDTensor(rng.standard_normal(n).astype("float64"), None)
    reps = rng.integers(0, 4, n)
    reps[0] = 1
    y = LoDTensor(np.zeros(int(reps.sum()), np.int8), recursive_sequence_lengths=[reps.tolist()])
    save(tmp_path / "x.lod.h5", x)
    with ShardWriter(tmp_path / "xs", shard_size=200) as w:
        w.write(x)
    with ShardWriter(tmp_path / "ys", shard_size=50) as w:
        w.write(y)
    tasks.expand(str(tmp_path / "x.lod.h5"), str(tmp_path / "ys"), str(tmp_path / "want.lod.h5"))
    got = lod_dask.read(tmp_path / "xs", partition_size=80).expand(tmp_path / "ys").compute()
    _same_bytes(got, load(tmp_path / "want.lod.h5"))


def test_pad_matches_the_one_process_path(client, corpus, tmp_path):
    want = io.BytesIO()
    tasks.pad(corpus["single"], want, pad_value=-1.0)
    want = np.load(io.BytesIO(want.getvalue()))
    got = lod_dask.read(corpus["folder"], partition_size=512).pad(pad_value=-1.0).compute()
    for key in ("padded", "lengths", "mask"):
        assert got[key].dtype == want[key].dtype and got[key].tobytes() == want[key].tobytes()
    summary = lod_dask.read(corpus["folder"], partition_size=512).pad(level=0).to_npz(tmp_path / "p.npz")
    assert summary["shape"][0] == len(corpus["tensor"])


@pytest.mark.parametrize("truncate", ["head", "tail"])
@pytest.mark.parametrize("level", [0, 1])
def test_pad_truncate_matches_the_one_process_path(client, corpus, truncate, level):
    want = io.BytesIO()
    tasks.pad(corpus["single"], want, pad_value=-1.0, maxlen=3, level=level, truncate=truncate)
    want = np.load(io.BytesIO(want.getvalue()))
    got = lod_dask.read(corpus["folder"], partition_size=512).pad(pad_value=-1.0, maxlen=3, level=level,
                                                                 truncate=truncate).compute()
    for key in ("padded", "lengths", "mask"):
        assert got[key].dtype == want[key].dtype and got[key].tobytes() == want[key].tobytes()
    assert got["lengths"].max() == 3  # something was cut


def test_a_failed_job_leaves_no_new_folder_and_names_the_level(corpus, tmp_path):
    wide = LoDTensor(np.zeros((6, 2), np.float32), [[0, 2, 6]])
    save(tmp_path / "wide.lod.h5", wide)
    with pytest.raises(LodError, match="one value"):
        lod_dask.read(tmp_path / "wide.lod.h5", partition_size=8).softmax().to_container(tmp_path / "out",
                                                                                          scheduler="sync")
    assert not os.path.exists(tmp_path / "out")
    with pytest.raises(LodError, match="of level 1;"):  # the level as an index, as the one-process error says
        lod_dask.read(corpus["folder"]).pad(maxlen=1).compute(scheduler="sync")


def test_pad_truncate_needs_a_maxlen(corpus):
    with pytest.raises(LodUsageError, match="maxlen"):
        lod_dask.read(corpus["folder"]).pad(truncate="head")
    with pytest.raises(LodUsageError, match="'head' or 'tail'"):
        lod_dask.read(corpus["folder"]).pad(maxlen=2, truncate="middle")


def test_pack_plan_matches_the_one_process_path(client, corpus):
    want = tasks.pack_plan(corpus["single"], level=1)
    got = lod_dask.read(corpus["folder"], partition_size=512).pack_plan(level=1).compute()
    for field in ("lengths", "sorted_indices", "unsorted_indices", "batch_sizes"):
        assert np.asarray(getattr(got, field)).tobytes() == np.asarray(getattr(want, field)).tobytes()


def _scale(t: LoDTensor, factor: float) -> LoDTensor:
    return LoDTensor._trusted((t.data * factor).astype(t.dtype), t.offsets, t.level_names)


def test_map_partitions_and_progress_count_partitions(client, corpus):
    bag = lod_dask.read(corpus["folder"], partition_size=512)
    seen = []
    got = bag.map_partitions(_scale, 2.0).reverse().compute(progress=lambda done, total: seen.append((done, total)))
    want = concat_tensors([_scale(corpus["tensor"], 2.0)])
    from lodtool.ops import sequence_reverse

    _same_bytes(got, sequence_reverse(want))
    assert seen[0] == (0, bag.npartitions) and seen[-1] == (bag.npartitions, bag.npartitions)


def test_local_schedulers_without_a_cluster(corpus):
    bag = lod_dask.read(corpus["folder"], partition_size=1024).pool("max")
    want = bag.compute(scheduler="sync")
    _same_bytes(bag.compute(scheduler="threads"), want)


def test_to_dask_awkward_types_without_reading(client, corpus, monkeypatch):
    dak = pytest.importorskip("dask_awkward")
    ak = pytest.importorskip("awkward")
    calls = []
    real = lod_dask.read_partition
    monkeypatch.setattr(lod_dask, "read_partition", lambda *a, **k: calls.append(a) or real(*a, **k))
    arr = lod_dask.read(corpus["folder"], partition_size=512).to_dask_awkward()
    assert isinstance(arr, dak.Array) and calls == []
    assert str(arr.type).endswith("var * var * float32")
    assert ak.to_list(arr.compute()) == corpus["tensor"].to_nested()


def _slow_partition(t: LoDTensor, seconds: float) -> LoDTensor:
    time.sleep(seconds)
    return t


def test_a_killed_worker_does_not_stop_the_job_or_leave_partial_shards(client, corpus, tmp_path):
    bag = lod_dask.read(corpus["folder"], partition_size=128).map_partitions(_slow_partition, 0.3).pool("sum")
    pids = client.run(os.getpid)
    out = str(tmp_path / "out")
    done = {}

    def job():
        done["manifest"] = bag.to_container(out)

    runner = threading.Thread(target=job)
    runner.start()
    time.sleep(1.5)  # a few partitions in, each worker busy with one
    os.kill(next(iter(pids.values())), signal.SIGKILL)
    runner.join(timeout=120)
    assert "manifest" in done
    assert validate_sharded(out).ok
    names = sorted(os.listdir(out))
    assert names == sorted([MANIFEST_NAME] + [s.file for s in done["manifest"].shards])  # no temp, no stray
    want = str(tmp_path / "want.lod.h5")
    tasks.pool(corpus["single"], want, pool_type="sum")
    with open_sharded(out) as f:
        _same_bytes(f.tensor().read(), load(want))
    client.wait_for_workers(2, timeout=60)


def _write_jsonl(path, seed: int, n: int) -> None:
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        for _ in range(n):
            f.write(str([[int(v) for v in rng.integers(0, 9, rng.integers(1, 5))]
                         for _ in range(rng.integers(1, 4))]) + "\n")


def test_parallel_pack_equals_one_process_pack(client, tmp_path):
    inputs = []
    for i, n in enumerate([30, 1, 12, 5]):
        inputs.append(str(tmp_path / f"{i}.jsonl"))
        _write_jsonl(inputs[-1], i, n)
    m = lod_dask.pack(inputs, tmp_path / "out", level_names=["doc", "sent"], dtype="int32")
    assert [s.tensors["tensor"].sequences for s in m.shards] == [30, 1, 12, 5]
    tasks.pack(inputs, str(tmp_path / "one.lod.h5"), level_names=["doc", "sent"], dtype="int32")
    with open_sharded(tmp_path / "out") as f:
        got = f.tensor().read()
    _same_bytes(got, load(tmp_path / "one.lod.h5"))
    assert got.level_names == ("doc", "sent")


@pytest.mark.parametrize("compression, chunk_bytes", [("none", 1 << 20), (None, 1 << 16)])
def test_parallel_pack_of_token_datasets_takes_the_chunks_pack_takes(tmp_path, compression, chunk_bytes):
    """Each shard is one pack of its dataset: uncompressed token ids in 1 MiB chunks, as the one-process sharded
    pack stores them."""
    import h5py

    from lodtool.io.megatron import write_megatron

    inputs = []
    for i in range(2):
        tokens = np.arange(i, i + 600_000, dtype=np.int32)
        inputs.append(str(tmp_path / f"c{i}"))
        write_megatron(LoDTensor(tokens, [[0, 1, 2], [0, 300_000, 600_000]]), inputs[-1])
    m = lod_dask.pack(inputs, tmp_path / "out", compression=compression, compute_kwargs={"scheduler": "sync"})
    assert len(m.shards) == 2
    for s in m.shards:
        with h5py.File(tmp_path / "out" / s.file, "r") as f:
            assert f["tensor/data"].chunks == (chunk_bytes // 4,)
    assert load(tmp_path / "out").data.tolist() == list(range(600_000)) + list(range(1, 600_001))


def test_parallel_pack_refuses_shards_of_different_dtypes(client, tmp_path):
    (tmp_path / "a.jsonl").write_text("[1, 2]\n")
    (tmp_path / "b.jsonl").write_text("[1.5]\n")
    with pytest.raises(LodUsageError, match=r"give dtype=\.\.\. \(and lod_level=\.\.\.\)"):
        lod_dask.pack([tmp_path / "a.jsonl", tmp_path / "b.jsonl"], tmp_path / "out")
    assert not os.path.exists(tmp_path / "out")  # the folder the job made goes with its shards


def _reader_loop(folder: str, ready, finished, queue) -> None:
    seen = []
    ready.set()
    while True:
        last = finished.is_set()  # one more full read after the writer is done
        try:
            with open_sharded(folder) as f:
                t = f.tensor()
                assert len(t.read()) == t.num_sequences(0)
                seen.append(len(f.manifest.shards))
        except Exception as exc:  # reported to the test
            queue.put(repr(exc))
            return
        if last:
            break
    queue.put(seen)


def test_a_reader_during_pack_append_sees_the_old_or_the_new_manifest(client, tmp_path):
    inputs = []
    for i in range(4):
        inputs.append(str(tmp_path / f"{i}.jsonl"))
        _write_jsonl(inputs[-1], 10 + i, 20)
    folder = str(tmp_path / "out")
    lod_dask.pack(inputs[:1], folder, dtype="int64")
    ctx = multiprocessing.get_context("spawn")
    queue, ready, finished = ctx.Queue(), ctx.Event(), ctx.Event()
    reader = ctx.Process(target=_reader_loop, args=(folder, ready, finished, queue))
    reader.start()
    assert ready.wait(timeout=60)
    for src in inputs[1:]:
        lod_dask.pack([src], folder, dtype="int64", append=True)
    finished.set()
    result = queue.get(timeout=60)
    reader.join(timeout=30)
    assert isinstance(result, list) and result, result
    assert set(result) <= {1, 2, 3, 4} and result == sorted(result) and result[-1] == 4
    assert len(read_manifest(folder).shards) == 4


def test_tasks_carry_absolute_paths_for_workers_in_other_folders(corpus, monkeypatch):
    monkeypatch.chdir(os.path.dirname(corpus["folder"]))
    parts, _ = lod_dask.plan(os.path.basename(corpus["folder"]), partition_size=512)
    assert parts and all(os.path.isabs(p.path) and os.path.isdir(p.path) for p in parts)  # the folder's path


def test_threads_scheduler_writes_many_small_shards_correctly(corpus, tmp_path):
    """Thread workers read partitions and write deflate shards side by side in one process (the race that
    container._h5.write_direct_chunk closes): a few seconds here, a minute under LODTOOL_TEST_PROFILE=long."""
    long_profile = os.environ.get("LODTOOL_TEST_PROFILE", "").lower() == "long"
    want = str(tmp_path / "want.lod.h5")
    tasks.reverse(corpus["single"], want)
    want = load(want)
    bag = lod_dask.read(corpus["folder"], partition_size=128).reverse()
    assert bag.npartitions >= 10
    end, runs = time.monotonic() + (60 if long_profile else 3), 0
    while time.monotonic() < end or not runs:
        out = str(tmp_path / f"out{runs}")
        bag.to_container(out, scheduler="threads", num_workers=2)
        with open_sharded(out) as f:
            _same_bytes(f.tensor().read(), want)
        runs += 1


# -- hostile folders and scheduler addresses: the one-process checks, one-line errors, bounded time -------------
def _broken_folder(tmp_path, kind: str) -> str:
    """A sharded folder whose shard 1 was swapped, lied about, or made a link to a file outside the folder."""
    import json
    import shutil

    folder = str(tmp_path / kind)
    with ShardWriter(folder, shard_size=64) as w:
        w.write(LoDTensor(np.arange(60, dtype=np.float32), [[0, 10, 30, 60]]))
    shard = os.path.join(folder, shard_name(1))
    if kind in ("dtype", "levels"):
        other = (LoDTensor(np.arange(20, dtype=np.int64), [[0, 20]]) if kind == "dtype" else
                 LoDTensor(np.arange(20, dtype=np.float32), [[0, 1], [0, 20]]))
        save(shard, other, force=True)
    elif kind == "outside":
        shutil.move(shard, tmp_path / "elsewhere.lod.h5")
        os.symlink(tmp_path / "elsewhere.lod.h5", shard)
    else:  # the manifest claims fewer rows for shard 1, or none at all
        with open(os.path.join(folder, MANIFEST_NAME)) as f:
            manifest = json.load(f)
        counts = manifest["shards"][1]["tensors"]["tensor"]
        counts.update({"rows": counts["rows"] - 5} if kind == "fewer" else
                      {"rows": 0, "sequences": 0, "level_sequences": [0]})
        with open(os.path.join(folder, MANIFEST_NAME), "w") as f:
            json.dump(manifest, f)
    return folder


@pytest.mark.parametrize("kind,message", [("dtype", "int64"), ("levels", "2 level"), ("fewer", "says 15"),
                                          ("zero", "says 0"), ("outside", "symbolic link")])
def test_dask_refuses_the_folders_one_process_refuses(tmp_path, kind, message):
    folder = _broken_folder(tmp_path, kind)
    shard = os.path.join(folder, shard_name(1))
    with pytest.raises(LodError, match=message) as one:
        tasks.pool(folder, str(tmp_path / "one.lod.h5"))
    with pytest.raises(LodError, match=message) as read:
        lod_dask.read(folder, partition_size=8).reverse().compute(scheduler="sync")
    with pytest.raises(LodError, match=message) as pooled:
        tasks.pool(folder, f"{tmp_path / 'out'}/", scheduler="sync")
    for exc in (one, read, pooled):
        assert shard in str(exc.value) and "\n" not in str(exc.value)
    assert not (tmp_path / "one.lod.h5").exists() and not (tmp_path / "out").exists()


def _listener(kind: str):
    """A TCP listener on 127.0.0.1 that is not a Dask scheduler: it sends garbage, nothing, or a huge frame."""
    import socket
    import struct

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    held = []

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)  # kept open (a silent listener never answers, never closes)
            if kind == "garbage":
                conn.sendall(b"HTTP/1.0 200 OK\r\n\r\n<html>not dask</html>")
            elif kind == "huge":
                conn.sendall(struct.pack("Q", 1 << 40))

    threading.Thread(target=serve, daemon=True).start()
    return f"tcp://127.0.0.1:{server.getsockname()[1]}", lambda: [s.close() for s in held + [server]]


@pytest.mark.parametrize("kind", ["nosuch://host:1", "not an address", "garbage", "silent", "huge"])
def test_a_bad_scheduler_address_is_one_line_in_bounded_time(tmp_path, monkeypatch, kind):
    from click.testing import CliRunner

    from lodtool.cli.main import cli

    save(tmp_path / "x.lod.h5", LoDTensor(np.arange(6.0), [[0, 2, 6]]))
    address, close = _listener(kind) if kind in ("garbage", "silent", "huge") else (kind, lambda: None)
    monkeypatch.setenv("LODTOOL_SCHEDULER_TIMEOUT", "1")
    start = time.monotonic()
    try:
        result = CliRunner().invoke(cli, ["pool", str(tmp_path / "x.lod.h5"), "-o", str(tmp_path / "p.lod.h5"),
                                          "--scheduler", address])
    finally:
        close()
    assert time.monotonic() - start < 15
    assert result.exit_code != 0 and not (tmp_path / "p.lod.h5").exists()
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lodtool: error:") and "internal error" not in lines[0], lines
    assert "Traceback" not in result.output


def test_connect_reaches_a_real_scheduler(client):
    c = lod_dask.connect(client.scheduler.address, timeout=10)
    try:
        assert c.scheduler_info()["workers"]
    finally:
        c.close()
