"""``lodtool batch``: plans, --stats, saved plans, NPZ batches, and its errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

import lodtool
from lodtool import LoDTensor
from lodtool.cli.main import cli
from lodtool.tasks._batch import BatchPlan, batch_plan


@pytest.fixture()
def corpus(tmp_path):
    rng = np.random.default_rng(4)
    lengths = rng.integers(1, 60, 300)
    data = rng.integers(0, 30000, int(lengths.sum()))
    docs = [3] * 100
    path = tmp_path / "corpus.lod.h5"
    lodtool.save(str(path), LoDTensor(data, recursive_sequence_lengths=[docs, list(lengths)]))
    return str(path), lengths, data


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_plan_saved_matches_the_library(corpus, tmp_path):
    path, lengths, _ = corpus
    out = tmp_path / "plan.npz"
    r = run("batch", path, "--level", 1, "--max-tokens", 256, "--mode", "sorted", "--seed", 3, "-o", out)
    assert r.exit_code == 0, r.output
    saved = BatchPlan.load(out)
    want = batch_plan(path, level=1, max_tokens=256, seed=3)
    assert saved.indices.tolist() == want.indices.tolist() and saved.offsets.tolist() == want.offsets.tolist()
    assert "planned" in r.output


def test_stats_table_histogram_and_json(corpus):
    path, lengths, _ = corpus
    r = run("batch", path, "--level", 1, "--max-tokens", 512, "--stats")
    assert r.exit_code == 0, r.output
    assert "random" in r.output and "padding waste" in r.output and "sequence lengths" in r.output
    r = run("batch", path, "--level", 1, "--max-tokens", 512, "--mode", "pack", "--stats", "--json")
    report = json.loads(r.output)
    assert report["plan"]["mode"] == "pack" and report["plan"]["fill_rate"] > 0.9
    assert report["random"]["padding_waste"] > report["plan"]["padding_waste"]
    assert sum(report["histogram"]["counts"]) == len(lengths)


def test_stats_count_chunk_reads_beside_a_true_shuffle(corpus):
    path, lengths, _ = corpus
    r = run("batch", path, "--level", 1, "--max-tokens", 512, "--mode", "chunks", "--window", 4, "--stats")
    assert r.exit_code == 0, r.output
    assert "chunk reads per epoch" in r.output and "true shuffle" in r.output and "mixing" in r.output
    r = run("batch", path, "--level", 1, "--max-tokens", 512, "--mode", "chunks", "--stats", "--json")
    chunks = json.loads(r.output)["chunks"]
    assert chunks["decodes_per_chunk"] <= 2 and set(chunks["shuffled"]) == {"decodes", "decodes_per_chunk",
                                                                             "chunks_per_batch"}
    r = run("batch", path, "--level", 1, "--max-tokens", 512, "--window", 4, "--stats")
    assert r.exit_code == 2 and "window" in r.output


def test_buckets_and_replica_options(corpus):
    path, _, _ = corpus
    r = run("batch", path, "--level", 1, "--mode", "buckets", "--boundaries", "8,16,32", "--max-tokens", 256,
            "--num-replicas", 2, "--rank", 1, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["plan"]["batches"] > 0


def test_write_batches_as_npz(corpus, tmp_path):
    path, lengths, data = corpus
    plan_file = tmp_path / "plan.npz"
    assert run("batch", path, "--level", 1, "--max-tokens", 256, "-o", plan_file).exit_code == 0
    out = tmp_path / "batches"
    r = run("batch", path, "--plan", plan_file, "--to", "npz", "-o", out, "--layout", "varlen")
    assert r.exit_code == 0, r.output
    plan = BatchPlan.load(plan_file)
    files = sorted(out.iterdir())
    assert len(files) == len(plan)
    rows = np.concatenate([[0], np.cumsum(lengths)])
    with np.load(files[0]) as z:
        want = np.concatenate([data[rows[s]:rows[s + 1]] for s in z["indices"]])
        assert np.array_equal(z["values"], want)
        assert np.diff(z["cu_seqlens"]).tolist() == lengths[z["indices"]].tolist()
    padded = tmp_path / "padded"
    r = run("batch", path, "--plan", plan_file, "--to", "npz", "-o", padded, "--pad-value", "-1", "--json")
    assert r.exit_code == 0 and json.loads(r.output)["files"] == len(plan)
    with np.load(padded / files[0].name) as z:
        assert (z["values"][~z["mask"]] == -1).all() and z["values"].dtype == data.dtype


@pytest.mark.parametrize("args, message", [
    (["--plan", "PLAN", "--max-tokens", "5"], "--plan fixes the batches"),
    (["--max-tokens", "64", "--to", "npz"], "needs -o"),
    (["--max-tokens", "64", "--truncate", "head"], "apply to --to npz"),
    (["--max-tokens", "64", "--pad-value", "-1"], "apply to --to npz"),
    (["--max-tokens", "64", "--to", "npz", "-o", "OUT", "--pad-value", "x"], "not a number"),
    (["--max-tokens", "0"], "0"),
    (["--mode", "sideways", "--max-tokens", "4"], "sideways"),
    (["--boundaries", "a,b", "--mode", "buckets"], "comma-separated"),
    (["--level", "1", "--mode", "pack"], "needs --max-tokens"),  # the flags, not the library's parameter names
    (["--level", "1"], "needs --max-tokens or --max-sequences"),
    (["--level", "1", "--max-sequences", "6", "--multiple-of", "4"], "--max-sequences 6 is not a multiple of"),
])
def test_usage_errors_exit_2(corpus, tmp_path, args, message):
    path, _, _ = corpus
    plan_file = tmp_path / "p.npz"
    batch_plan(path, level=1, max_tokens=256).save(plan_file)
    swap = {"PLAN": str(plan_file), "OUT": str(tmp_path / "out")}
    r = run("batch", path, *[swap.get(a, a) for a in args])
    assert r.exit_code == 2, r.output
    assert message in r.output


def test_bad_files_are_one_line_errors(corpus, tmp_path):
    path, _, _ = corpus
    missing = run("batch", tmp_path / "none.h5", "--max-tokens", 4)
    assert missing.exit_code == 1 and "no such file" in missing.output
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"junk")
    r = run("batch", path, "--plan", junk, "--to", "npz", "-o", tmp_path / "o")
    assert r.exit_code == 1 and "not a batch plan" in r.output and "Traceback" not in r.output
    other = tmp_path / "other.npz"
    batch_plan(np.array([1, 2]), max_tokens=4).save(other)
    r = run("batch", path, "--plan", other, "--to", "npz", "-o", tmp_path / "o2")
    assert r.exit_code == 1 and "plan is for 2" in r.output  # a data condition: 1 (2 is click's usage error)
    assert not (tmp_path / "o2").exists()


def test_a_sharded_folder_batches_like_its_file(corpus, tmp_path):
    path, lengths, data = corpus
    folder = tmp_path / "shards"
    assert run("shard", path, "-o", folder, "--shard-size", "4KB").exit_code == 0
    assert len(lodtool.container.shards.read_manifest(folder).shards) > 1
    plans = []
    for source, name in ((path, "a.npz"), (folder, "b.npz")):
        r = run("batch", source, "--level", 1, "--max-tokens", 256, "-o", tmp_path / name)
        assert r.exit_code == 0, r.output
        plans.append(BatchPlan.load(tmp_path / name))
    assert plans[0].indices.tolist() == plans[1].indices.tolist()
    r = run("batch", folder, "--plan", tmp_path / "b.npz", "--to", "npz", "-o", tmp_path / "out")
    assert r.exit_code == 0, r.output
    rows = np.concatenate([[0], np.cumsum(lengths)])
    first = np.load(tmp_path / "out" / sorted(p.name for p in (tmp_path / "out").iterdir())[0])
    for k, seq in enumerate(first["indices"]):
        n = lengths[seq]
        assert np.array_equal(first["values"][k, :n], data[rows[seq]:rows[seq + 1]])


HUGE = "99999999999999999999"


@pytest.mark.parametrize("args", [
    ["--max-tokens", HUGE], ["--max-sequences", HUGE], ["--multiple-of", HUGE], ["--seed", HUGE], ["--seed", "-1"],
    ["--epoch", HUGE], ["--epoch", "-1"], ["--num-replicas", HUGE], ["--rank", HUGE], ["--max-length", HUGE],
    ["--mode", "megabatch", "--megabatch-mult", HUGE], ["--level", HUGE], ["--mode", "buckets", "--boundaries", HUGE],
    ["--mode", "buckets", "--boundaries", "4", "--bucket-batch-sizes", f"1,{HUGE}"],
])
def test_every_numeric_option_is_range_checked(corpus, args):
    path, _, _ = corpus
    r = run("batch", path, "--max-tokens", 256, *args) if "--max-tokens" not in args else run("batch", path, *args)
    assert r.exit_code == 2, r.output
    assert "internal error" not in r.output and "Traceback" not in r.output
    assert args[-2] in r.output  # the flag given the bad value


def test_an_existing_plan_file_is_replaced_only_with_overwrite(corpus, tmp_path):
    path, _, _ = corpus
    out = tmp_path / "plan.npz"
    assert run("batch", path, "--level", 1, "--max-tokens", 256, "-o", out).exit_code == 0
    before = out.read_bytes()
    r = run("batch", path, "--level", 1, "--max-tokens", 512, "-o", out)
    assert r.exit_code == 2 and "--overwrite" in r.output and "overwrite=True" not in r.output
    assert out.read_bytes() == before
    assert run("batch", path, "--level", 1, "--max-tokens", 512, "-o", out, "--overwrite").exit_code == 0
    assert BatchPlan.load(out).options["max_tokens"] == 512


def test_a_batch_folder_is_replaced_wholly_and_only_with_overwrite(corpus, tmp_path):
    path, lengths, _ = corpus
    out = tmp_path / "batches"
    small, large = tmp_path / "small.npz", tmp_path / "large.npz"
    batch_plan(path, level=1, max_tokens=128).save(small)
    batch_plan(path, level=1, max_tokens=1024, seed=1).save(large)
    assert run("batch", path, "--plan", small, "--to", "npz", "-o", out).exit_code == 0
    first = sorted(p.name for p in out.iterdir())
    r = run("batch", path, "--plan", large, "--to", "npz", "-o", out)
    assert r.exit_code == 2 and "--overwrite" in r.output
    assert sorted(p.name for p in out.iterdir()) == first
    r = run("batch", path, "--plan", large, "--to", "npz", "-o", out, "--overwrite")
    assert r.exit_code == 0, r.output
    plan = BatchPlan.load(large)
    files = sorted(out.iterdir())
    assert len(files) == len(plan) < len(first)  # none of the first plan's batches is left
    seen = sorted(s for f in files for s in np.load(f)["indices"].tolist())
    assert seen == list(range(len(lengths)))  # every sentence once: no mix of two plans


def test_stats_names_empty_sequences_and_keeps_to_the_memory_limit(tmp_path):
    path = tmp_path / "empties.lod.h5"
    lodtool.save(str(path), LoDTensor(np.arange(3), recursive_sequence_lengths=[[0, 2, 0, 0, 1]]))
    r = run("batch", path, "--max-tokens", 4, "--stats")
    assert r.exit_code == 0, r.output
    assert "3 empty sequence(s) batched" in r.output
    r = run("batch", path, "--max-tokens", 4, "-o", tmp_path / "plan.npz")
    assert r.exit_code == 0 and "5 sequences, 3 of them empty" in r.output
    r = run("batch", path, "--max-tokens", 4, "--stats", "--max-memory", "100")
    assert r.exit_code == 1 and "memory limit" in r.output and "--max-memory" in r.output
    assert len(r.output.strip().splitlines()) == 1


def test_hostile_plans_are_one_line_errors(corpus, tmp_path):
    path, _, _ = corpus
    plan = batch_plan(path, level=1, max_tokens=256)
    arrays = {k: getattr(plan, k) for k in ("lengths", "indices", "offsets", "padded_lengths", "repeat")}
    for options in ({**plan.options, "seed": "x"}, {**plan.options, "epoch": -1}):
        hostile = tmp_path / "hostile.npz"
        np.savez(hostile, meta=np.array(json.dumps({"version": 1, "mode": plan.mode, "options": options})), **arrays)
        r = run("batch", path, "--plan", hostile, "--stats")
        assert r.exit_code == 1 and "damaged batch plan" in r.output and len(r.output.strip().splitlines()) == 1


def test_stats_past_the_plan_limit_stream_for_sorted_and_name_the_mode_otherwise(tmp_path):
    n = 50_000  # over a 2 MB limit as a whole plan (PLAN_BYTES_PER_SEQUENCE["sorted"] each)
    lengths = np.random.default_rng(5).integers(0, 30, n)
    path = tmp_path / "many.lod.h5"
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    lodtool.save(str(path), LoDTensor(np.zeros(int(lengths.sum()), np.int32), [offsets]))
    r = run("batch", path, "--max-tokens", 64, "--stats", "--json", "--max-memory", "2M")
    assert r.exit_code == 0, r.output
    streamed = json.loads(r.output)
    r = run("batch", path, "--max-tokens", 64, "--stats", "--json")
    whole = json.loads(r.output)
    assert streamed["plan"] == whole["plan"] and streamed["histogram"] == whole["histogram"]
    assert streamed["random"] is None and whole["random"] is not None
    r = run("batch", path, "--max-tokens", 64, "--stats", "--max-memory", "2M")
    assert r.exit_code == 0 and "streamed from length counts" in r.output and "beside random" not in r.output
    for mode in ("random", "pack"):
        r = run("batch", path, "--max-tokens", 64, "--mode", mode, "--stats", "--max-memory", "2M")
        assert r.exit_code == 1 and f"mode '{mode}' needs its whole plan of 50,000 sequences" in r.output
        assert "--max-memory" in r.output and len(r.output.strip().splitlines()) == 1


def test_stats_of_buckets_in_file_order_stream_in_memory_that_does_not_grow_with_the_sequences(tmp_path):
    import tracemalloc

    options = ["--mode", "buckets", "--boundaries", "8,16,24", "--max-tokens", 256, "--no-shuffle", "--stats",
               "--json"]
    peaks, reports = [], []
    for n in (100_000, 400_000):  # plans of 17 MB and 70 MB (PLAN_BYTES_PER_SEQUENCE["buckets"] each), over 8 MB
        lengths = np.random.default_rng(n).integers(0, 30, n)
        path = tmp_path / f"{n}.lod.h5"
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        lodtool.save(str(path), LoDTensor(np.zeros(int(offsets[-1]), np.int8), [offsets]))
        run("batch", path, *options, "--max-memory", "8M")  # imports and compiled kernels outside the measure
        tracemalloc.start()
        r = run("batch", path, *options, "--max-memory", "8M")
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert r.exit_code == 0, r.output
        reports.append(json.loads(r.output))
    assert peaks[1] < 1.25 * peaks[0] and peaks[1] < 8 << 20  # four times the sequences, not more memory
    whole = batch_plan(str(tmp_path / "100000.lod.h5"), mode="buckets", boundaries=[8, 16, 24], max_tokens=256,
                       shuffle=False)
    assert reports[0]["plan"] == whole.stats() and reports[0]["random"] is None
    assert reports[1]["plan"]["sequences"] == 400_000
    r = run("batch", tmp_path / "100000.lod.h5", *options[:-2], "--stats", "--max-memory", "8M")
    assert r.exit_code == 0 and "streamed" in r.output
    # shuffled buckets order every sequence at random: refused past the limit, saying why
    r = run("batch", tmp_path / "100000.lod.h5", *options[:6], "--stats", "--max-memory", "8M")
    assert r.exit_code == 1 and "mode 'buckets' needs its whole plan" in r.output
    assert "random permutation of every sequence" in r.output and "'buckets' with --no-shuffle" in r.output
    r = run("batch", tmp_path / "100000.lod.h5", "--plan", tmp_path / "p.npz", "--no-shuffle")
    assert r.exit_code == 2 and "drop --no-shuffle" in r.output


def test_stats_of_a_saved_plan_are_held_to_the_plan_limit(tmp_path):
    n = 50_000  # the saved plan's arrays (33 bytes a sequence) fit 4 MB; the plan and its report do not
    lengths = np.random.default_rng(5).integers(0, 30, n)
    path = tmp_path / "many.lod.h5"
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    lodtool.save(str(path), LoDTensor(np.zeros(int(lengths.sum()), np.int32), [offsets]))
    for mode in ("random", "buckets"):
        options = ["--boundaries", "8,16"] if mode == "buckets" else []
        r = run("batch", path, "--max-tokens", 64, "--mode", mode, *options, "-o", tmp_path / f"{mode}.npz")
        assert r.exit_code == 0, r.output
        r = run("batch", path, "--plan", tmp_path / f"{mode}.npz", "--stats", "--max-memory", "4M")
        assert r.exit_code == 1 and "the batch plan of 50,000 sequences" in r.output, r.output
        assert str(path) in r.output and len(r.output.strip().splitlines()) == 1
        assert run("batch", path, "--plan", tmp_path / f"{mode}.npz", "--stats").exit_code == 0
