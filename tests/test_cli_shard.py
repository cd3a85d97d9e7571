"""The CLI on sharded folders: shard, merge, pack into a folder, the reading commands, --scheduler."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from click.testing import CliRunner

from lodtool import LoDTensor, load, save
from lodtool.cli.main import cli
from lodtool.container.shards import MANIFEST_NAME, read_manifest


@pytest.fixture
def corpus(tmp_path):
    rng = np.random.default_rng(3)
    docs = rng.integers(1, 4, 80)
    sents = rng.integers(1, 5, int(docs.sum()))
    t = LoDTensor(rng.integers(0, 1000, int(sents.sum())).astype("int32"),
                  recursive_sequence_lengths=[docs.tolist(), sents.tolist()], level_names=["doc", "sent"])
    save(tmp_path / "one.lod.h5", t)
    return tmp_path, t


def run(*args, ok=True):
    result = CliRunner().invoke(cli, [str(a) for a in args])
    if ok:
        assert result.exit_code == 0, result.output
    return result


def test_shard_then_every_reading_command_takes_the_folder(corpus):
    d, t = corpus
    run("shard", d / "one.lod.h5", "-o", d / "s", "--shard-size", "512B")
    assert len(read_manifest(d / "s").shards) > 3
    for args in (["validate"], ["verify"], ["tree"]):
        run(*args, d / "s")
    info = json.loads(run("inspect", d / "s", "--json").stdout)
    assert info["format"] == "lodtool-sharded" and info["tensors"][0]["rows"] == t.n_rows
    assert json.loads(run("slice", d / "s", "57", "--to", "json").stdout) == t.branch(57).to_nested()
    assert json.loads(run("slice", d / "s", "--level", "1", "--range", "3:90", "--to", "json").stdout) == \
        t.slice_level(1, 3, 90).to_nested()
    tail = run("tail", d / "s", "-n", "2", "--to", "jsonl").stdout.splitlines()
    assert [json.loads(x) for x in tail] == t.tail(2).to_nested()
    lines = run("unpack", d / "s", "--to", "jsonl").stdout.splitlines()
    assert [json.loads(x) for x in lines] == t.to_nested()
    run("merge", d / "s", "-o", d / "back.lod.h5")
    assert load(d / "back.lod.h5").equals(t) and load(d / "back.lod.h5").level_names == ("doc", "sent")


def test_operators_on_a_folder_and_on_dask_threads_give_the_same_bytes(corpus):
    d, t = corpus
    run("shard", d / "one.lod.h5", "-o", d / "s", "--shard-size", "512B")
    run("pool", d / "one.lod.h5", "--type", "average", "-o", d / "want.lod.h5")
    run("pool", d / "s", "--type", "average", "-o", d / "got.lod.h5")
    run("pool", d / "s", "--type", "average", "-o", d / "dask.lod.h5", "--scheduler", "threads", "--workers", "2")
    run("pool", d / "s", "--type", "average", "-o", f"{d / 'dask_dir'}/", "--scheduler", "threads")
    want = load(d / "want.lod.h5")
    for got in (load(d / "got.lod.h5"), load(d / "dask.lod.h5")):
        assert got.data.tobytes() == want.data.tobytes() and got.lod == want.lod
    assert validate_ok(d / "dask_dir")
    plan = json.loads(run("pack-plan", d / "s", "--json", "--scheduler", "threads").stdout)
    assert plan == json.loads(run("pack-plan", d / "one.lod.h5", "--json").stdout)


def test_partition_size_sets_the_dask_partitions_and_needs_a_scheduler(corpus):
    d, t = corpus
    run("pool", d / "one.lod.h5", "--type", "sum", "-o", d / "want.lod.h5")
    counts = []
    for size in ("256B", "64MB"):
        out = d / f"parts-{size}"
        run("pool", d / "one.lod.h5", "--type", "sum", "-o", f"{out}/", "--scheduler", "threads",
            "--partition-size", size)
        counts.append(len(read_manifest(out).shards))
        got = load(out)  # a sharded folder loads as one tensor
        assert got.data.tobytes() == load(d / "want.lod.h5").data.tobytes()
    assert counts[0] > counts[1] == 1
    bad = run("pool", d / "one.lod.h5", "--type", "sum", "-o", d / "x.lod.h5", "--partition-size", "1MB", ok=False)
    assert bad.exit_code == 2 and "--scheduler" in bad.output and not (d / "x.lod.h5").exists()
    bad = run("reverse", d / "one.lod.h5", "-o", f"{d / 'y'}/", "--scheduler", "threads", "--partition-size", "lots",
              ok=False)
    assert bad.exit_code != 0 and "bad size 'lots'" in bad.output and "Traceback" not in bad.output


def validate_ok(path) -> bool:
    return run("validate", path, ok=False).exit_code == 0


def test_pack_into_a_folder_append_and_refusals(corpus, tmp_path):
    d, t = corpus
    run("unpack", d / "one.lod.h5", "--to", "jsonl", "-o", d / "a.jsonl")
    run("pack", d / "a.jsonl", "-o", f"{d / 'p'}/", "--shard-size", "1KB", "--dtype", "int32",
        "--level-names", "doc,sent")
    n = len(read_manifest(d / "p").shards)
    run("pack", d / "a.jsonl", "-o", d / "p", "--append", "--dtype", "int32", "--level-names", "doc,sent")
    assert len(read_manifest(d / "p").shards) == n + 1
    lines = run("unpack", d / "p", "--to", "jsonl").stdout.splitlines()
    assert len(lines) == 2 * len(t)
    bad = run("pack", d / "a.jsonl", "-o", d / "p", "--append", "--dtype", "int64", ok=False)
    assert bad.exit_code != 0 and "int32" in bad.output and len(read_manifest(d / "p").shards) == n + 1
    (d / "other").mkdir()
    (d / "other" / "notes.txt").write_text("mine")
    bad = run("pack", d / "a.jsonl", "-o", f"{d / 'other'}/", ok=False)
    assert bad.exit_code != 0 and "not shards" in bad.output
    assert sorted(os.listdir(d / "other")) == ["notes.txt"]
    missing = run("inspect", d / "other", ok=False)
    assert missing.exit_code != 0 and MANIFEST_NAME in missing.output and "Traceback" not in missing.output
    narrowed = run("pack", d / "a.jsonl", "-o", f"{d / 'narrow'}/", "--dtype", "auto-int", ok=False)
    assert narrowed.exit_code != 0 and "one dtype for every shard" in narrowed.output
    assert not (d / "narrow").exists()


def _uneven(d, t: LoDTensor):
    """``d/u``: t in shards of 50, 1 and the rest top-level sequences, with an empty shard after the first."""
    from lodtool.container.shards import ShardWriter, TensorSpec, commit_manifest, shard_name, write_shard

    folder = d / "u"
    with ShardWriter(folder, shard_size="1GB") as w:
        for a, b in ((0, 50), (50, 51), (51, len(t))):
            w.write(t.slice_level(0, a, b))
            w.end_shard()
    m = read_manifest(folder)
    empty = LoDTensor._trusted(np.zeros(0, t.dtype), (np.zeros(1, np.int64),) * 2, t.level_names)
    extra = write_shard(folder / shard_name(len(m.shards)), {"tensor": empty})
    commit_manifest(folder, {"tensor": TensorSpec.of(t)}, m.shards[:1] + [extra] + m.shards[1:])
    return folder


def test_pool_index_on_dask_gives_the_one_process_bytes(corpus):
    d, t = corpus
    u = _uneven(d, t)
    assert [s.tensors["tensor"].sequences for s in read_manifest(u).shards] == [50, 0, 1, len(t) - 51]
    run("pool", d / "one.lod.h5", "--type", "max", "--index", "-o", d / "want.lod.h5")
    run("pool", u, "--type", "max", "--index", "-o", d / "got.lod.h5", "--scheduler", "threads", "--workers", "2")
    run("pool", u, "--type", "max", "--index", "-o", f"{d / 'got_dir'}/", "--scheduler", "threads")
    for name in ("tensor", "tensor_index"):
        want = load(d / "want.lod.h5", name)
        for got in (load(d / "got.lod.h5", name), _read_folder(d / "got_dir", name)):
            assert got.dtype == want.dtype and got.data.tobytes() == want.data.tobytes() and got.lod == want.lod
    first_shard_rows = read_manifest(u).shards[0].tensors["tensor"].rows
    assert load(d / "want.lod.h5", "tensor_index").data.max() > first_shard_rows  # global rows, not per shard


def _read_folder(folder, name):
    from lodtool.container.shards import open_sharded

    with open_sharded(folder) as f:
        return f.tensor(name).read()


@pytest.mark.parametrize("truncate", ["head", "tail"])
def test_pad_truncate_on_dask_gives_the_one_process_bytes(corpus, truncate):
    d, t = corpus
    u = _uneven(d, t)
    run("pad", d / "one.lod.h5", "--maxlen", "2", "--truncate", truncate, "-o", d / "want.npz")
    run("pad", u, "--maxlen", "2", "--truncate", truncate, "-o", d / "got.npz", "--scheduler", "threads")
    want, got = np.load(d / "want.npz"), np.load(d / "got.npz")
    for key in ("padded", "lengths", "mask"):
        assert got[key].dtype == want[key].dtype and got[key].tobytes() == want[key].tobytes()


def test_pack_a_parquet_column_into_a_folder(corpus):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    d, t = corpus
    nested = t.to_nested()
    inputs = []
    for i, (a, b) in enumerate(((0, 30), (30, 31), (31, len(t)))):
        inputs.append(d / f"{i}.parquet")
        pq.write_table(pa.table({"label": list(range(a, b)), "tokens": nested[a:b]}), inputs[-1], row_group_size=7)
    run("pack", *inputs, "--column", "tokens", "--dtype", "int32", "-o", d / "want.lod.h5")
    run("pack", *inputs, "--column", "tokens", "--dtype", "int32", "-o", f"{d / 'streamed'}/", "--shard-size", "1KB")
    run("pack", *inputs, "--column", "tokens", "--dtype", "int32", "-o", f"{d / 'parallel'}/",
        "--scheduler", "threads", "--workers", "2")
    assert [s.tensors["tensor"].sequences for s in read_manifest(d / "parallel").shards] == [30, 1, len(t) - 31]
    want = load(d / "want.lod.h5")
    for folder in ("streamed", "parallel"):
        got = _read_folder(d / folder, "tensor")
        assert got.dtype == want.dtype and got.data.tobytes() == want.data.tobytes() and got.lod == want.lod
    bad = run("pack", *inputs, "--column", "nope", "-o", f"{d / 'bad'}/", ok=False)
    assert bad.exit_code != 0 and "nope" in bad.output and "Traceback" not in bad.output
    empty = d / "empty.parquet"  # refused alike by all three paths, and nothing is left behind
    pq.write_table(pa.table({"label": pa.array([], pa.int64()), "tokens": pa.array([], pa.list_(pa.list_(pa.int32())))}),
                   empty)
    for out, extra in ((d / "e.lod.h5", []), (f"{d / 'e1'}/", []), (f"{d / 'e2'}/", ["--scheduler", "threads"])):
        bad = run("pack", inputs[0], empty, "--column", "tokens", "--dtype", "int32", "-o", out, *extra, ok=False)
        assert bad.exit_code != 0 and "empty input" in bad.output and "Traceback" not in bad.output
    assert not any(os.path.exists(d / n) for n in ("e.lod.h5", "e1", "e2"))


def test_an_existing_output_is_replaced_only_when_asked(corpus):
    d, t = corpus
    run("shard", d / "one.lod.h5", "-o", d / "s", "--shard-size", "512B")
    before = read_manifest(d / "s")
    again = run("shard", d / "one.lod.h5", "-o", d / "s", "--shard-size", "1KB", ok=False)
    assert again.exit_code != 0 and "--overwrite" in again.output and "Traceback" not in again.output
    assert read_manifest(d / "s").shards == before.shards
    run("shard", d / "one.lod.h5", "-o", d / "s", "--shard-size", "1KB", "--overwrite")
    assert len(read_manifest(d / "s").shards) < len(before.shards)
    for args in (["pool", d / "s", "-o", d / "p.lod.h5"], ["pool", d / "s", "-o", f"{d / 'pd'}/"],
                 ["merge", d / "s", "-o", d / "m.lod.h5"]):
        dask = ["--scheduler", "threads"] if args[0] == "pool" else []
        run(*args, *dask)
        refused = run(*args, *dask, ok=False)
        assert refused.exit_code != 0 and "--overwrite" in refused.output and "Traceback" not in refused.output
        run(*args, *dask, "--overwrite")
    assert load(d / "m.lod.h5").equals(t)
    bad = run("pack", d / "one.lod.h5", "-o", f"{d / 'x'}/", "--append", "--force", ok=False)
    assert bad.exit_code == 2 and "--force" in bad.output


def test_a_failed_parallel_pack_leaves_no_shard_of_a_task_that_finished_later(tmp_path):
    # the bad input fails at once; the big one is still being packed then, and writes its shard afterwards:
    # the scheduler is joined before the sweep, so that late shard goes too
    (tmp_path / "bad.jsonl").write_text('[1, "x"]\n')
    (tmp_path / "big.jsonl").write_text("[[1, 2, 3], [4, 5]]\n" * 40_000)
    out = tmp_path / "out"
    bad = run("pack", tmp_path / "bad.jsonl", tmp_path / "big.jsonl", "-o", f"{out}/", "--scheduler", "threads",
              "--workers", "2", ok=False)
    assert bad.exit_code != 0 and "bad.jsonl" in bad.output and "Traceback" not in bad.output
    assert not out.exists()
    run("pack", tmp_path / "big.jsonl", "-o", f"{out}/", "--shard-size", "1MB")
    before = sorted(os.listdir(out))
    bad = run("pack", tmp_path / "bad.jsonl", tmp_path / "big.jsonl", "-o", out, "--append", "--scheduler", "threads",
              "--workers", "2", ok=False)
    assert bad.exit_code != 0 and sorted(os.listdir(out)) == before  # the folder's own shards stay


def test_a_refused_write_names_only_the_options_of_its_command(corpus):
    d, _ = corpus
    run("shard", d / "one.lod.h5", "-o", d / "s", "--shard-size", "512B")
    for args in (["merge", d / "s", "-o", d / "m.lod.h5"], ["pool", d / "one.lod.h5", "-o", d / "p.lod.h5"]):
        run(*args)
        refused = run(*args, ok=False).output
        assert "--overwrite" in refused and "--force" in refused
        assert "--append" not in refused and "--name" not in refused  # neither command has them
    (d / "in.jsonl").write_text("[[1, 2], [3]]\n")
    run("pack", d / "in.jsonl", "-o", d / "k.lod.h5")
    refused = run("pack", d / "in.jsonl", "-o", d / "k.lod.h5", ok=False).output
    assert "--append" in refused and "--name" in refused


# -- a folder never reads or writes outside itself ------------------------------------------------------------
def _linked_manifest_writes(d):
    """Every command that writes a folder, each with its own output folder ``d/<key>``."""
    (d / "a.jsonl").write_text("[[1, 2], [3]]\n[[4]]\n")
    run("shard", d / "one.lod.h5", "-o", d / "src", "--shard-size", "1KB")
    return {"pack": ["pack", d / "a.jsonl", "-o"], "shard": ["shard", d / "one.lod.h5", "-o"],
            "dask-pack": ["pack", d / "a.jsonl", d / "a.jsonl", "--scheduler", "threads", "-o"],
            "pool": ["pool", d / "src", "--scheduler", "threads", "-o"]}


@pytest.mark.parametrize("dangling", [True, False], ids=["dangling", "into-another-folder"])
def test_no_folder_write_follows_a_manifest_symlink(corpus, dangling):
    d, t = corpus
    run("shard", d / "one.lod.h5", "-o", d / "victim", "--shard-size", "1KB")
    victim = (d / "victim" / MANIFEST_NAME).read_bytes()
    for key, args in _linked_manifest_writes(d).items():
        out = d / key
        out.mkdir()
        target = d / "planted.json" if dangling else d / "victim" / MANIFEST_NAME
        os.symlink(target, out / MANIFEST_NAME)
        bad = run(*args, f"{out}/", "--overwrite", ok=False)  # a manifest is there: replacing it is asked for
        assert bad.exit_code != 0 and "symbolic link" in bad.output and "Traceback" not in bad.output, (key, bad.output)
        assert sorted(os.listdir(out)) == [MANIFEST_NAME] and os.path.islink(out / MANIFEST_NAME), key
        assert not (d / "planted.json").exists(), key
        assert (d / "victim" / MANIFEST_NAME).read_bytes() == victim and validate_ok(d / "victim"), key


def test_a_shard_linked_to_a_file_outside_is_refused_by_every_reader(corpus):
    d, t = corpus
    run("shard", d / "one.lod.h5", "-o", d / "s", "--shard-size", "1KB")
    os.rename(d / "s" / "part-00001.lod.h5", d / "outside.lod.h5")
    os.symlink(d / "outside.lod.h5", d / "s" / "part-00001.lod.h5")
    for args in (["pool", d / "s", "--scheduler", "threads", "-o", d / "p.lod.h5"],
                 ["reverse", d / "s", "--scheduler", "threads", "-o", d / "r.lod.h5"],
                 ["pool", d / "s", "-o", d / "p1.lod.h5"], ["unpack", d / "s", "--to", "jsonl"]):
        bad = run(*args, ok=False)
        assert bad.exit_code != 0 and "symbolic link" in bad.output and "Traceback" not in bad.output, args
        assert bad.stdout == ""
    assert not any((d / n).exists() for n in ("p.lod.h5", "r.lod.h5", "p1.lod.h5"))
    from lodtool.errors import LodFormatError
    from lodtool.interop import dask as lodtool_dask

    with pytest.raises(LodFormatError, match="symbolic link"):
        lodtool_dask.read(d / "s")


def _edit_manifest(folder, fn):
    path = os.path.join(folder, MANIFEST_NAME)
    raw = json.load(open(path))
    fn(raw)
    json.dump(raw, open(path, "w"))


def _swap_shard(d, folder, t):
    """Replace shard 1 by one of the same counts but another dtype and level count."""
    info = read_manifest(folder).shards[1].tensors["tensor"]
    flat = LoDTensor(np.zeros(info.rows, np.float32), [[0, info.rows]] if info.rows else [[0]])
    save(folder / "part-00001.lod.h5", flat, force=True)


def _all_zero(m):
    for s in m["shards"]:
        s["tensors"]["tensor"].update(sequences=0, rows=0, level_sequences=[0, 0])


def _fewer(m):
    c = m["shards"][1]["tensors"]["tensor"]
    c.update(rows=c["rows"] - 1)


@pytest.mark.parametrize("damage", ["zero rows", "fewer rows", "swapped shard"])
def test_a_manifest_that_lies_is_refused_by_every_reader_before_a_byte_is_written(corpus, damage):
    d, t = corpus
    run("shard", d / "one.lod.h5", "-o", d / "s", "--shard-size", "1KB")
    if damage == "swapped shard":
        _swap_shard(d, d / "s", t)
    else:
        _edit_manifest(d / "s", _all_zero if damage == "zero rows" else _fewer)
    for args in (["unpack", d / "s", "--to", "jsonl"], ["unpack", d / "s", "--to", "json"],
                 ["pool", d / "s", "--scheduler", "threads", "-o", d / "p.lod.h5"],
                 ["reverse", d / "s", "--scheduler", "threads", "-o", d / "r.lod.h5"]):
        bad = run(*args, ok=False)
        assert bad.exit_code != 0 and MANIFEST_NAME in bad.output and "Traceback" not in bad.output, (args, bad.output)
        assert bad.stdout == "", args  # nothing streamed before the check
    assert not (d / "p.lod.h5").exists() and not (d / "r.lod.h5").exists()


def test_unpack_of_a_folder_with_a_broken_last_shard_streams_nothing(corpus):
    d, t = corpus
    run("shard", d / "one.lod.h5", "-o", d / "s", "--shard-size", "1KB")
    last = read_manifest(d / "s").shards[-1].file
    (d / "s" / last).write_bytes(b"not a container")
    bad = run("unpack", d / "s", "--to", "jsonl", ok=False)
    assert bad.exit_code != 0 and last in bad.output and bad.stdout == ""


def test_verify_never_opens_a_shard_linked_outside(corpus):
    d, t = corpus
    run("shard", d / "one.lod.h5", "-o", d / "s", "--shard-size", "1KB")
    os.unlink(d / "s" / "part-00001.lod.h5")
    (d / "outside.txt").write_text("not a container")
    os.symlink(d / "outside.txt", d / "s" / "part-00001.lod.h5")
    bad = run("verify", d / "s", ok=False)
    assert bad.exit_code == 1 and "mismatch" in bad.output and "not an HDF5 file" not in bad.output, bad.output
