"""Batch plans (lodtool.tasks._batch; its kernels in lodtool.ops.batching): the anchors' semantics, budgets,
replicas, packing, and the reader."""

from __future__ import annotations

import json
import os
import random
import re

import h5py
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lodtool
from lodtool import LoDTensor
from lodtool.errors import LodFormatError, LodIndexError, LodInputError, LodUsageError, LodValidationError
from lodtool.ops import batching as K
from lodtool.tasks import _batch as B

lengths_st = st.lists(st.integers(0, 40), min_size=0, max_size=120).map(lambda v: np.array(v, dtype=np.int64))


# -- fairseq's greedy pass -----------------------------------------------------------------------------
@pytest.mark.parametrize("lengths, max_tokens, max_sequences, multiple, ends", [
    # cost = n * max_len within 6: [1 1 2] costs 6, [2 3] 6, [3 3] 6, [5] 5
    ([1, 1, 2, 2, 3, 3, 3, 5], 6, 0, 1, [3, 5, 7, 8]),
    # sizes stay below the multiple or a multiple of it; the last batch is what is left
    ([1, 1, 1, 1, 1], 3, 0, 2, [2, 4, 5]),
    # the tail [1 1 4] alone breaks the budget: the batch and the tail without pos are closed together
    ([1, 1, 1, 1, 1, 1, 4, 4], 8, 0, 4, [4, 6, 8]),
    # max_sentences only: consecutive runs of that many
    ([1] * 7, 0, 3, 1, [3, 6, 7]),
    ([1] * 7, 0, 8, 4, [4, 7]),
    ([], 10, 0, 1, []),
])
def test_greedy_fixed_cases(lengths, max_tokens, max_sequences, multiple, ends):
    got = K.greedy_batch_ends(np.array(lengths, dtype=np.int64), max_tokens, max_sequences, multiple)
    assert got.tolist() == ends
    assert K._greedy_ends_reference(np.array(lengths), [len(lengths)] if lengths else [], max_tokens,
                                    max_sequences, multiple).tolist() == ends


@given(lengths_st, st.integers(0, 120), st.integers(0, 9), st.integers(1, 5), st.integers(1, 4), st.booleans())
def test_greedy_kernel_matches_reference(lengths, budget, max_sequences, multiple, n_segments, sort):
    if sort:
        lengths = np.sort(lengths)
    max_tokens = max(budget, int(lengths.max())) if lengths.size and budget else budget
    if max_tokens == 0 and max_sequences == 0:
        max_sequences = 4
    cuts = np.sort(np.random.default_rng(len(lengths)).integers(0, len(lengths) + 1, n_segments - 1))
    segments = np.concatenate([cuts, [len(lengths)]]).astype(np.int64)
    segments = np.unique(segments) if lengths.size else np.array([0], np.int64)
    want = K._greedy_ends_reference(lengths, segments.tolist(), max_tokens, max_sequences, multiple)
    got = K.greedy_batch_ends(lengths, max_tokens, max_sequences, multiple, segments)
    assert got.tolist() == want.tolist()
    starts = np.concatenate([[0], got[:-1]])
    for a, b in zip(starts, got):
        n = b - a
        assert n > 0
        assert n < multiple or n % multiple == 0
        if max_tokens:
            assert n * lengths[a:b].max() <= max_tokens
        if max_sequences:
            assert n <= max_sequences


@given(lengths_st.filter(lambda a: a.size > 0), st.data())
def test_first_short_batch_matches_reference(lengths, data):
    n = data.draw(st.integers(0, 60))
    indices = np.array(data.draw(st.lists(st.integers(0, lengths.size - 1), min_size=n, max_size=n)), np.int64)
    cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=8)))
    offsets = np.array([0, *cuts, n], np.int64)
    padded = np.array(data.draw(st.lists(st.integers(0, 45), min_size=offsets.size - 1, max_size=offsets.size - 1)),
                      np.int64)
    want = K._first_short_batch_reference(lengths, indices, offsets, padded)
    assert K.first_short_batch(lengths, indices, offsets, padded) == want


# -- first-fit decreasing ------------------------------------------------------------------------------
@given(st.lists(st.integers(0, 64), max_size=150), st.integers(64, 200))
def test_ffd_kernel_matches_reference(values, capacity):
    lengths = np.sort(np.array(values, dtype=np.int64))[::-1].copy()
    bins, used = K.first_fit_decreasing(lengths, capacity)
    assert bins.tolist() == K._ffd_reference(lengths, capacity).tolist()
    assert used == (int(bins.max()) + 1 if bins.size else 0)
    assert np.all(np.bincount(bins, weights=lengths, minlength=used) <= capacity)


def test_pack_fill_cu_seqlens_and_positions():
    lengths = np.clip(np.random.default_rng(3).lognormal(3.5, 1.0, 20_000).astype(np.int64), 1, 512)
    plan = B.batch_plan(lengths, max_tokens=2048, mode="pack")
    tokens = plan.batch_tokens
    assert tokens.max() <= 2048
    assert plan.stats()["fill_rate"] >= 0.98
    assert sorted(plan.indices.tolist()) == list(range(lengths.size))
    for i in (0, len(plan) // 2, len(plan) - 1):
        lens = lengths[plan.batch(i)]
        cu = plan.cu_seqlens(i)
        assert cu.dtype == np.int32 and cu[0] == 0 and np.all(np.diff(cu) == lens)
        assert plan.position_ids(i).tolist() == [p for n in lens.tolist() for p in range(n)]
        assert np.all(np.diff(lens) <= 0)  # placed longest first


# -- plan properties across modes and replicas ---------------------------------------------------------
def _options(mode, lengths, budget):
    top = int(lengths.max()) if lengths.size else 1
    max_tokens = max(top, budget, 1)
    if mode == "buckets":
        return {"boundaries": [4, 12, 30], "max_tokens": max(max_tokens, 64)}
    if mode == "pack":
        return {"max_tokens": max_tokens}
    if mode == "chunks":
        return {"max_tokens": max_tokens, "max_sequences": 8, "chunk_rows": 16, "window": 2}
    return {"max_tokens": max_tokens, "max_sequences": 8}


@given(lengths_st, st.sampled_from(B.MODES), st.integers(1, 4), st.integers(0, 200), st.integers(0, 3),
       st.booleans())
def test_replicas_disjoint_cover_and_even(lengths, mode, replicas, budget, seed, drop_last):
    opts = _options(mode, lengths, budget)
    plans = [B.batch_plan(lengths, mode=mode, seed=seed, num_replicas=replicas, rank=r, drop_last=drop_last, **opts)
             for r in range(replicas)]
    assert len({len(p) for p in plans}) == 1  # every rank the same number of batches
    real = np.concatenate([p.sequences() for p in plans]) if plans else np.zeros(0)
    assert len(set(real.tolist())) == real.size  # disjoint
    if not drop_last:
        assert sorted(real.tolist()) == list(range(lengths.size))  # every sequence once
        for p in plans:  # repeats are copies of real batches
            assert p.repeat.sum() < replicas
    for p in plans:
        if not p.indices.size:
            continue
        lens = p.lengths[p.indices]
        padded = p.padded_tokens
        if mode == "pack":
            assert np.all(p.batch_tokens <= opts["max_tokens"])
        elif mode != "buckets":
            assert np.all(padded <= opts["max_tokens"])
            assert np.all(p.batch_sizes <= opts["max_sequences"])
        assert np.all(p.padded_lengths >= K.segment_max(lens, p.offsets))


@given(lengths_st.filter(lambda a: a.size > 0), st.sampled_from(B.MODES), st.integers(0, 5), st.integers(0, 3))
def test_deterministic_for_seed_and_epoch(lengths, mode, seed, epoch):
    opts = _options(mode, lengths, 50)
    a = B.batch_plan(lengths, mode=mode, seed=seed, epoch=epoch, **opts)
    b = B.batch_plan(lengths.copy(), mode=mode, seed=seed, epoch=epoch, **opts)
    assert a.indices.tolist() == b.indices.tolist() and a.offsets.tolist() == b.offsets.tolist()


def test_sorted_keeps_batches_and_shuffles_their_order_per_epoch():
    lengths = np.random.default_rng(0).integers(1, 100, 5000)
    e0 = B.batch_plan(lengths, max_tokens=1024, seed=7, epoch=0)
    e1 = B.batch_plan(lengths, max_tokens=1024, seed=7, epoch=1)
    assert sorted(map(tuple, e0)) == sorted(map(tuple, e1))  # fairseq: one composition from the seed
    assert [tuple(b) for b in e0] != [tuple(b) for b in e1]
    assert e0.stats()["padding_waste"] < 0.25 * e0.random_baseline().stats()["padding_waste"]


@given(st.lists(st.integers(1, 30), min_size=1, max_size=200), st.sampled_from([2, 4, 8]))
def test_multiple_of_respected(values, multiple):
    lengths = np.array(values)
    for mode in ("sorted", "random", "megabatch"):
        plan = B.batch_plan(lengths, max_tokens=max(64, lengths.max()), mode=mode, multiple_of=multiple)
        sizes = plan.batch_sizes
        assert np.all((sizes % multiple == 0) | (sizes < multiple))
        dropped = B.batch_plan(lengths, max_tokens=max(64, lengths.max()), mode=mode, multiple_of=multiple,
                               drop_last=True)
        if len(dropped):
            last = dropped.batch_sizes
            assert sorted(dropped.indices.tolist()) != [] and np.all((last % multiple == 0) | (last < multiple))


# -- Hugging Face's group_by_length ---------------------------------------------------------------------
def _hf_get_length_grouped_indices(lengths, perm, batch_size, mega_batch_mult):
    """The documented algorithm of transformers' get_length_grouped_indices, given its permutation."""
    size = mega_batch_mult * batch_size
    megabatches = [perm[i:i + size] for i in range(0, len(lengths), size)]
    megabatches = [sorted(m, key=lambda i: lengths[i], reverse=True) for m in megabatches]
    maxima = [lengths[m[0]] for m in megabatches]
    k = int(np.argmax(maxima))
    megabatches[0][0], megabatches[k][0] = megabatches[k][0], megabatches[0][0]
    return [i for m in megabatches for i in m]


@given(st.lists(st.integers(0, 25), min_size=1, max_size=300), st.integers(1, 8), st.integers(1, 6))
def test_megabatch_order_matches_transformers(values, batch_size, mult):
    lengths = np.array(values)
    perm = np.random.default_rng(len(values)).permutation(len(values))
    order, _ = K.megabatch_order(lengths, perm, batch_size * mult)
    assert order.tolist() == _hf_get_length_grouped_indices(lengths.tolist(), perm.tolist(), batch_size, mult)


def test_megabatch_longest_first_like_transformers_test():
    # transformers' test_group_by_length: 100 lengths below 25, one of 50, batch size 4
    lengths = np.random.default_rng(0).integers(0, 25, 100)
    lengths[32] = 50
    plan = B.batch_plan(lengths, max_sequences=4, mode="megabatch")
    assert plan.batch(0)[0] == 32
    assert sorted(plan.indices.tolist()) == list(range(100))
    assert set(plan.batch_sizes.tolist()) == {4}


# -- tf.data's bucket_by_sequence_length ---------------------------------------------------------------
def test_buckets_fixed_case():
    lengths = np.array([1, 4, 2, 6, 1, 3, 7, 2, 8])
    plan = B.batch_plan(lengths, mode="buckets", boundaries=[3, 6], bucket_batch_sizes=[2, 2, 2], shuffle=False)
    # a bucket's batch leaves when it fills, in stream order; the partial ones at the end
    assert [b.tolist() for b in plan] == [[0, 2], [1, 5], [3, 6], [4, 7], [8]]
    assert plan.padded_lengths.tolist() == [2, 4, 7, 2, 8]
    fixed = B.batch_plan(lengths, mode="buckets", boundaries=[3, 6, 10], bucket_batch_sizes=[2, 2, 2, 2],
                         shuffle=False, pad_to_bucket_boundary=True)
    assert fixed.padded_lengths.tolist() == [2, 5, 9, 2, 9]  # boundary - 1
    dropped = B.batch_plan(lengths, mode="buckets", boundaries=[3, 6], bucket_batch_sizes=[2, 2, 2],
                           shuffle=False, drop_last=True)
    assert [b.tolist() for b in dropped] == [[0, 2], [1, 5], [3, 6], [4, 7]]
    with pytest.raises(LodInputError, match="below the last boundary"):  # the data, not the options: exit 1
        B.batch_plan(lengths, mode="buckets", boundaries=[3, 6], max_tokens=12, pad_to_bucket_boundary=True)


def test_buckets_sizes_from_a_token_budget():
    lengths = np.random.default_rng(1).integers(1, 64, 3000)
    plan = B.batch_plan(lengths, mode="buckets", boundaries=[8, 16, 32], max_tokens=256, pad_to_bucket_boundary=False)
    assert np.all(plan.padded_tokens <= 256)
    assert sorted(plan.indices.tolist()) == list(range(3000))


# -- usage, oversize, truncation -----------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, message", [
    ({"mode": "bogus", "max_tokens": 8}, "mode 'bogus'"),
    ({"mode": "sorted"}, r"needs max_tokens=\.\.\. or max_sequences=\.\.\."),  # keywords, which the CLI shows as flags
    ({"mode": "pack"}, "needs max_tokens"),
    ({"mode": "pack", "max_tokens": 8, "max_sequences": 2}, "tokens only"),
    ({"mode": "buckets", "max_tokens": 8}, "needs boundaries"),
    ({"max_tokens": 0}, "positive integer"),
    ({"max_sequences": 6, "multiple_of": 4}, "not a multiple"),
    ({"max_tokens": 8, "num_replicas": 2, "rank": 2}, r"rank=\.\.\. must be"),
    ({"max_tokens": 8, "shuffle": False}, "buckets' only"),
    ({"max_tokens": 8, "boundaries": [3]}, "buckets' only"),
])
def test_usage_errors(kwargs, message):
    with pytest.raises(LodUsageError, match=message):
        B.batch_plan(np.array([1, 4, 2]), **kwargs)


def test_a_sequence_above_the_budget_is_a_data_error():
    with pytest.raises(LodInputError, match="more than max_tokens=3"):  # exit 1, as bad data
        B.batch_plan(np.array([1, 4, 2]), max_tokens=3)


def test_oversize_skip_and_max_length():
    lengths = np.array([1, 9, 2, 3])
    skipped = B.batch_plan(lengths, max_tokens=4, oversize="skip")
    assert sorted(skipped.indices.tolist()) == [0, 2, 3] and skipped.stats()["skipped"] == 1
    clipped = B.batch_plan(lengths, max_tokens=4, max_length=4)
    assert clipped.lengths.tolist() == [1, 4, 2, 3]
    with pytest.raises(LodUsageError):
        B.batch_plan(np.array([[1, 2]]), max_tokens=4)
    with pytest.raises(LodUsageError, match="negative"):
        B.batch_plan(np.array([1, -2]), max_tokens=4)


# -- files ---------------------------------------------------------------------------------------------
def test_save_load_round_trip_and_damage(tmp_path):
    plan = B.batch_plan(np.arange(1, 50), max_tokens=100, num_replicas=3, rank=1)
    path = tmp_path / "plan.npz"
    plan.save(path)
    back = B.BatchPlan.load(path)
    assert back.mode == plan.mode and back.options == plan.options
    for name in ("lengths", "indices", "offsets", "padded_lengths", "repeat"):
        assert np.array_equal(getattr(back, name), getattr(plan, name))
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(LodFormatError, match="not a batch plan"):
        B.BatchPlan.load(tmp_path / "junk.npz")
    bad = dict(np.load(path))
    bad["indices"] = bad["indices"] + 1000
    np.savez(tmp_path / "bad.npz", **bad)
    with pytest.raises(LodFormatError, match="outside"):
        B.BatchPlan.load(tmp_path / "bad.npz")


def _container(tmp_path, lengths, *, width=None, name="c.lod.h5", compression="default", dtype=np.int32):
    rng = np.random.default_rng(len(lengths))
    n = int(np.sum(lengths))
    data = rng.integers(1, 1000, size=(n,) if width is None else (n, width)).astype(dtype)
    outer = [2] * (len(lengths) // 2) + [1] * (len(lengths) % 2)
    t = LoDTensor(data, recursive_sequence_lengths=[outer, list(lengths)])
    path = tmp_path / name
    lodtool.save(str(path), t, **({} if compression == "default" else {"compression": compression}))
    return str(path), t


def test_plan_from_container_reads_offsets(tmp_path):
    lengths = np.random.default_rng(2).integers(0, 30, 101)
    path, _ = _container(tmp_path, lengths)
    from_file = B.batch_plan(path, level=1, max_tokens=64)
    assert from_file.lengths.tolist() == lengths.tolist()
    assert from_file.indices.tolist() == B.batch_plan(lengths, max_tokens=64).indices.tolist()
    top = B.batch_plan(path, level=0, max_tokens=128)
    assert top.lengths.tolist() == [int(lengths[i:i + 2].sum()) for i in range(0, 101, 2)]
    with lodtool.open(path) as f:
        assert B.batch_plan(f.tensor(), level=-1, max_tokens=64).lengths.tolist() == lengths.tolist()
    with pytest.raises(LodIndexError, match="level 2 is out of range"):  # as every operator says it (exit 1)
        B.batch_plan(path, level=2, max_tokens=64)


def test_plan_refuses_bad_offsets(tmp_path):
    path, _ = _container(tmp_path, [3, 1, 2, 2])
    with h5py.File(path, "r+") as h:
        ds = h["tensor/lod/1"]
        v = ds[...]
        v[2] = v[1] - 1
        ds[...] = v
    with pytest.raises((LodValidationError, LodFormatError)):
        B.batch_plan(path, level=1, max_tokens=64)


# -- the chunk-aware shuffle ---------------------------------------------------------------------------
@given(st.lists(st.integers(0, 9), min_size=1, max_size=60), st.integers(1, 5), st.integers(1, 6))
def test_chunk_reads_kernel_matches_reference(spans, batch, slots):
    first = np.array(spans, np.int64)
    last = first + np.array([(7 * k) % 3 - 1 for k in range(len(spans))])  # -1: an empty sequence touches nothing
    offsets = np.append(np.arange(0, len(spans), batch), len(spans)).astype(np.int64)
    want = K._chunk_reads_reference(first.tolist(), last.tolist(), offsets.tolist(), 12, slots)
    assert K.chunk_reads(first, last, offsets, 12, slots) == want


def test_chunks_mode_shuffles_chunks_and_the_sequences_of_a_window():
    lengths = np.random.default_rng(3).integers(1, 40, 20_000)
    kw = {"max_tokens": 512, "mode": "chunks", "chunk_rows": 1000, "window": 8}
    plan = B.batch_plan(lengths, **kw)
    assert sorted(plan.sequences().tolist()) == list(range(lengths.size))
    assert plan.stats()["padding_waste"] < 0.25 * plan.random_baseline().stats()["padding_waste"]
    starts = np.cumsum(lengths) - lengths
    run = starts // 1000 // B.CHUNK_RUN
    windows = [np.unique(run[b]) for b in plan]
    assert max(len(w) for w in windows) <= 8 // B.CHUNK_RUN  # a batch draws from one window's chunks
    assert B.batch_plan(lengths, epoch=1, **kw).indices.tolist() != plan.indices.tolist()  # reshuffled per epoch
    c = B.chunk_locality(plan, cache_chunks=32)
    assert c["decodes_per_chunk"] <= 2 and c["shuffled"]["decodes_per_chunk"] > 2 and 0 < c["mixing"] < 1
    with pytest.raises(LodUsageError, match="chunk_rows"):
        B.batch_plan(lengths, max_tokens=512, mode="chunks")
    with pytest.raises(LodUsageError, match="window"):
        B.batch_plan(lengths, max_tokens=512, mode="sorted", window=4)


def test_chunks_mode_decodes_each_chunk_at_most_twice_an_epoch(tmp_path):
    lengths = np.random.default_rng(8).integers(1, 300, 4000)  # ~37 chunks of 64 KiB, compressed
    path, t = _container(tmp_path, lengths)
    rows = np.concatenate([[0], np.cumsum(lengths)])
    plan = B.batch_plan(path, level=1, max_tokens=2000, mode="chunks", window=8, seed=4)
    assert plan.options["chunk_rows"] == 16384
    with B.BatchReader(path, plan, output="varlen", cache_bytes=10 * (64 << 10)) as reader:
        for b in reader:
            want = np.concatenate([t.data[rows[s]:rows[s + 1]] for s in b["indices"]])
            assert np.array_equal(b["values"], want)
        cache = reader._source.chunks
        assert cache.decodes <= 2 * cache.n_blocks
        assert cache.decodes == B.chunk_locality(plan, cache.slots)["decodes"]  # the report counts what it reads


# -- reading batches -----------------------------------------------------------------------------------
@pytest.mark.parametrize("width", [None, 3])
@pytest.mark.parametrize("mode", ["sorted", "pack", "megabatch"])
def test_batches_padded_and_varlen_hold_the_data(tmp_path, width, mode):
    lengths = np.random.default_rng(5).integers(0, 40, 301)
    path, t = _container(tmp_path, lengths, width=width)
    flat = t.data
    rows = np.concatenate([[0], np.cumsum(lengths)])
    plan = B.batch_plan(path, level=1, max_tokens=128, mode=mode)
    seen = []
    for b in lodtool.batches(path, plan, output="padded", pad_value=-1):
        for k, seq in enumerate(b["indices"]):
            n = lengths[seq]
            assert b["lengths"][k] == n
            assert np.array_equal(b["values"][k, :n], flat[rows[seq]:rows[seq + 1]])
            assert np.all(b["values"][k, n:] == -1)
            assert b["mask"][k].sum() == n and b["mask"][k, :n].all()
        seen.extend(b["indices"].tolist())
    assert sorted(seen) == list(range(301))
    for b in lodtool.batches(path, plan, output="varlen"):
        want = np.concatenate([flat[rows[s]:rows[s + 1]] for s in b["indices"]])
        assert np.array_equal(b["values"], want)
        assert np.diff(b["cu_seqlens"]).tolist() == lengths[b["indices"]].tolist()
        assert b["max_seqlen"] == lengths[b["indices"]].max()
        assert b["position_ids"].tolist() == [p for s in b["indices"] for p in range(lengths[s])]
    for b in lodtool.batches(path, plan, output="jagged-numpy"):
        assert np.diff(b["offsets"]).tolist() == lengths[b["indices"]].tolist()


# the compiled gather against its NumPy reference: chunks stored out of order, clipped sequences, padded rows
@given(st.data())
def test_gather_kernel_matches_reference(data):
    draw = data.draw
    lengths = np.array(draw(st.lists(st.integers(0, 12), min_size=1, max_size=30)), np.int64)
    rows = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    chunk_rows = draw(st.integers(1, 9))
    row_items = draw(st.integers(1, 3))
    word = draw(st.sampled_from([1, 2, 4, 8]))
    n_chunks = max(-(-int(rows[-1]) // chunk_rows), 1)
    order = np.random.default_rng(draw(st.integers(0, 99))).permutation(n_chunks)
    stride = chunk_rows * row_items + draw(st.integers(0, 3))  # chunks apart, in another order, with gaps
    table = (order * stride * word).astype(np.int64)
    src = np.random.default_rng(1).integers(0, 250, n_chunks * stride + 8).astype(f"u{word}")
    seqs = np.array(draw(st.lists(st.integers(0, len(lengths) - 1), max_size=12)), np.int64)
    clipped = np.minimum(lengths, draw(st.integers(0, 12))) if draw(st.booleans()) else np.zeros(0, np.int64)
    head, varlen = draw(st.booleans()), draw(st.booleans())
    used = clipped if clipped.size else lengths
    width = 0 if varlen else int(used[seqs].max(initial=0)) + draw(st.integers(0, 2))
    if draw(st.booleans()):
        table[draw(st.integers(0, n_chunks - 1))] = -1  # a chunk not ready
    outs = []
    for fn in (K._gather_batch_reference, K.gather_batch):
        values = np.full(max(len(seqs) * width, int(used[seqs].sum())) * row_items + 1, 7, f"u{word}")
        sizes, cu = np.zeros(len(seqs), np.int64), np.zeros(len(seqs) + 1, np.int32)
        positions = np.zeros(int(used[seqs].sum()) if varlen else 0, np.int64)
        mask, chunks = np.zeros(len(seqs) * width, bool), np.zeros(2 * len(seqs) + 20, np.int64)
        got = fn(src, table, word, chunk_rows, row_items, seqs, rows, clipped, head, width, values, sizes, cu,
                 positions, mask, chunks)
        outs.append((got, values, sizes, cu, positions, mask, chunks[:max(-got, 0)]))
    want, got = outs
    assert want[0] == got[0]
    if got[0] < 0:
        assert np.array_equal(want[6], got[6])
        assert (got[1] == 7).all()  # nothing written
    else:
        for w, g in zip(want[1:6], got[1:6]):
            assert np.array_equal(w, g)


# several batches in one call of the compiled gather against the NumPy reference, batch by batch
@settings(deadline=None)
@given(st.data())
def test_gather_of_several_batches_matches_reference(data):
    draw = data.draw
    lengths = np.array(draw(st.lists(st.integers(0, 9), min_size=1, max_size=25)), np.int64)
    rows = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    chunk_rows, row_items = draw(st.integers(1, 7)), draw(st.integers(1, 2))
    n_chunks = max(-(-int(rows[-1]) // chunk_rows), 1)
    table = (np.random.default_rng(draw(st.integers(0, 9))).permutation(n_chunks) * chunk_rows * row_items * 8)
    src = np.random.default_rng(2).integers(0, 250, n_chunks * chunk_rows * row_items).astype(np.uint64)
    # a plan of batches (some empty), read in an order of its own, some twice
    sizes = draw(st.lists(st.integers(0, 4), min_size=1, max_size=8))
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    indices = np.array(draw(st.lists(st.integers(-1 if draw(st.booleans()) else 0, len(lengths) - 1),
                                     min_size=int(offsets[-1]), max_size=int(offsets[-1]))), np.int64)
    batches = np.array(draw(st.lists(st.integers(0, len(sizes) - 1 + draw(st.integers(0, 1))), max_size=6)),
                       np.int64)
    clipped = np.minimum(lengths, draw(st.integers(0, 9))) if draw(st.booleans()) else np.zeros(0, np.int64)
    used = clipped if clipped.size else lengths
    safe = np.clip(indices, 0, None)
    tokens = np.array([int(used[safe[offsets[b]:offsets[b + 1]]].sum()) for b in range(len(sizes))], np.int64)
    if draw(st.booleans()):
        tokens[draw(st.integers(0, len(sizes) - 1))] += 1  # a batch that is not the one the plan counts
    padded, varlen, head, check = (draw(st.booleans()) for _ in range(4))
    widths = np.array([int(used[safe[offsets[b]:offsets[b + 1]]].max(initial=0)) + draw(st.integers(0, 1))
                       for b in range(len(sizes))], np.int64) if padded else np.zeros(0, np.int64)
    if check and draw(st.booleans()):
        table[draw(st.integers(0, n_chunks - 1))] = -1  # a chunk not ready
    room_rows = draw(st.integers(0, 40))  # outputs of every size: short ones are refused, not written past
    room_seqs = draw(st.integers(0, 20))
    expected = tokens if draw(st.booleans()) else np.zeros(0, np.int64)
    outs = []
    for fn in (K._gather_batches_reference, K.gather_batches):
        values = np.full(room_rows * row_items + 1, 7, np.uint64)
        out_sizes, cu = np.full(room_seqs + 1, -1, np.int64), np.full(room_seqs + len(batches) + 1, -1, np.int64)
        positions = np.full(room_rows + 1 if varlen and not padded else 0, -1, np.int64)
        mask = np.zeros(room_rows + 1 if padded else 0, bool)
        chunks, longest = np.zeros(2 * len(indices) + 20, np.int64), np.full(len(batches) + 1, -1, np.int64)
        got = fn(src, table, 8, chunk_rows, row_items, batches, offsets, indices, expected, widths, rows, clipped,
                 head, values[:-1], out_sizes[:-1], cu[:-1], positions[:-1], mask[:-1], chunks, check, longest[:-1])
        assert values[-1] == 7 and out_sizes[-1] == -1 and cu[-1] == -1 and longest[-1] == -1
        assert (not positions.size or positions[-1] == -1) and (not mask.size or not mask[-1])
        outs.append((got, values, out_sizes, cu, positions, mask, longest, chunks[:max(-got, 0)]))
    want, got = outs
    assert want[0] == got[0]
    if 0 > got[0] > K.GATHER_MISMATCH:
        assert np.array_equal(want[7], got[7])
        assert (got[1] == 7).all()  # nothing written
    elif got[0] >= 0:
        assert got[0] == len(batches)
        for w, g in zip(want[1:7], got[1:7]):
            assert np.array_equal(w, g)


@pytest.mark.parametrize("output", ["padded", "varlen", "jagged-numpy"])
@pytest.mark.parametrize("dtype, width", [(np.int32, None), (np.float16, 3), (np.complex128, None), (np.bool_, 2)])
def test_batches_of_an_uncompressed_container_are_gathered_from_its_map(tmp_path, output, dtype, width):
    lengths = np.random.default_rng(7).integers(0, 300, 700)  # many 64 KiB chunks; sequences cross them
    path, t = _container(tmp_path, lengths, width=width, compression="none", dtype=dtype)
    rows = np.concatenate([[0], np.cumsum(lengths)])
    for truncate, max_length in (("tail", None), ("head", 100)):
        plan = B.batch_plan(path, level=1, max_tokens=2000, mode="sorted", max_length=max_length)
        seen = 0
        with B.BatchReader(path, plan, output=output, truncate=truncate) as reader:
            for b in reader:
                assert isinstance(reader._source.chunks, B._MappedChunks)  # no cache: the map itself
                want = [t.data[rows[s]:rows[s + 1]] for s in b["indices"]]
                want = [w if max_length is None else w[-max_length:] for w in want]
                if output == "padded":
                    got = [b["values"][k, :n] for k, n in enumerate(b["lengths"])]
                    assert (b["mask"].sum(axis=1) == b["lengths"]).all()
                else:
                    bounds = b["offsets"] if output == "jagged-numpy" else b["cu_seqlens"]
                    got = [b["values"][bounds[k]:bounds[k + 1]] for k in range(len(b["indices"]))]
                assert all(np.array_equal(g, w) for g, w in zip(got, want))
                seen += len(b["indices"])
        assert seen == len(lengths)


def test_the_batch_reader_checks_each_chunk_of_the_map_and_refuses_a_damaged_one(tmp_path):
    lengths = np.full(400, 100)
    path, t = _container(tmp_path, lengths, compression="none")
    with lodtool.open(path) as f:
        name = f.names[0]
    with h5py.File(path, "r") as f:
        ds = f[f"{name}/data"]
        assert ds.fletcher32
        info = ds.id.get_chunk_info(1)
    with open(path, "r+b") as fh:  # one bit of the second chunk flipped
        fh.seek(info.byte_offset + 9)
        byte = fh.read(1)
        fh.seek(info.byte_offset + 9)
        fh.write(bytes([byte[0] ^ 1]))
    plan = B.batch_plan(path, level=1, max_tokens=1000, mode="random", seed=3)
    with pytest.raises(LodFormatError):
        for _ in lodtool.batches(path, plan, output="varlen"):
            pass


def test_a_file_changed_under_the_batch_reader_is_an_error(tmp_path, monkeypatch):
    from lodtool.container import _mmap

    monkeypatch.setattr(_mmap, "STAT_EVERY", 0.0)
    path, _ = _container(tmp_path, np.full(50, 10), compression="none")
    reader = B.BatchReader(path, B.batch_plan(path, level=1, max_tokens=100), output="varlen")
    reader.read(0)
    with open(path, "ab") as fh:  # another program appends to the file in place
        fh.write(b"\0" * 4096)
    with pytest.raises(LodFormatError, match="changed on disk"):
        reader.read(1)
    reader.close()


def test_batches_reuse_buffers_and_small_cache(tmp_path):
    lengths = np.random.default_rng(6).integers(1, 50, 400)
    path, t = _container(tmp_path, lengths)
    rows = np.concatenate([[0], np.cumsum(lengths)])
    plan = B.batch_plan(path, level=1, max_tokens=200)
    reader = B.BatchReader(path, plan, output="varlen", cache_bytes=0)  # forces evictions between batches
    first = reader.read(0)["values"]
    second = reader.read(1)["values"]
    assert np.shares_memory(first, second)  # one buffer, reused
    for i in range(len(plan)):
        b = reader.read(i)
        want = np.concatenate([t.data[rows[s]:rows[s + 1]] for s in b["indices"]])
        assert np.array_equal(b["values"], want)
    reader.close()
    import pickle

    clone = pickle.loads(pickle.dumps(reader))  # never carries the open file
    assert np.array_equal(clone.read(3)["values"], reader.read(3)["values"])


@pytest.mark.parametrize("side", ["head", "tail"])
def test_batches_truncate(tmp_path, side):
    lengths = np.array([10, 3, 7, 1])
    path, t = _container(tmp_path, lengths)
    rows = np.concatenate([[0], np.cumsum(lengths)])
    plan = B.batch_plan(path, level=1, max_tokens=8, max_length=4)
    for b in lodtool.batches(path, plan, output="padded", truncate=side):
        for k, s in enumerate(b["indices"]):
            seq = t.data[rows[s]:rows[s + 1]]
            keep = seq[:4] if side == "tail" else seq[-4:]
            assert np.array_equal(b["values"][k, :b["lengths"][k]], keep)


def test_batches_refuses_a_plan_for_another_file(tmp_path):
    path, _ = _container(tmp_path, [3, 1, 2, 2])
    plan = B.batch_plan(np.array([3, 1, 2]), max_tokens=8)
    with pytest.raises(LodInputError, match="plan is for 3"):  # a data condition (exit 1), no longer a usage error
        next(lodtool.batches(path, plan, tensor=None))
    with pytest.raises(LodUsageError, match="output"):
        next(lodtool.batches(path, max_tokens=8, level=1, output="nope"))


@pytest.mark.parametrize("mode, output", [("sorted", "padded"), ("random", "varlen"), ("pack", "jagged-numpy")])
def test_reader_across_many_chunks_with_evictions(tmp_path, mode, output):
    # ~37 data chunks of 64 KiB; a cache of 2 chunks grows to what one batch needs, and evicts between batches
    lengths = np.random.default_rng(9).integers(1, 400, 3000)
    path, t = _container(tmp_path, lengths)
    rows = np.concatenate([[0], np.cumsum(lengths)])
    options = {"max_tokens": 4000} if mode == "pack" else {"max_tokens": 4000, "max_sequences": 8}
    plan = B.batch_plan(path, level=1, mode=mode, seed=2, **options)
    reader = B.BatchReader(path, plan, output=output, cache_bytes=2 * (64 << 10))
    seen = 0
    with reader:
        for b in reader:
            want = [t.data[rows[s]:rows[s + 1]] for s in b["indices"]]
            if output == "padded":
                got = [b["values"][k, :n] for k, n in enumerate(b["lengths"])]
            else:
                bounds = b["offsets"] if output == "jagged-numpy" else b["cu_seqlens"]
                got = [b["values"][bounds[k]:bounds[k + 1]] for k in range(len(b["indices"]))]
            assert all(np.array_equal(g, w) for g, w in zip(got, want))
            seen += len(b["indices"])
        cache = reader._source.chunks  # a compressed file: its cache of decoded chunks
        assert cache.slots >= 2
        if mode != "pack":  # packed rows gather short sequences from everywhere: the cache may grow to all
            assert cache.slots < cache.n_blocks  # so it evicted
    assert seen == 3000


def test_pad_value_must_fit_the_dtype(tmp_path):
    path, _ = _container(tmp_path, [3, 1, 2, 2])  # int32 data
    with pytest.raises(LodUsageError, match="does not fit"):
        next(lodtool.batches(path, level=1, max_tokens=8, pad_value=2 ** 40))
    with pytest.raises(LodUsageError, match="does not fit"):
        next(lodtool.batches(path, level=1, max_tokens=8, pad_value=0.5))
    pads = np.concatenate([b["values"][~b["mask"]] for b in lodtool.batches(path, level=1, max_tokens=8,
                                                                          pad_value=-7)])
    assert pads.size and (pads == -7).all()


# -- a sharded folder as the source --------------------------------------------------------------------
@pytest.mark.parametrize("output", ["padded", "varlen"])
def test_sharded_folder_is_one_source(tmp_path, output):
    from lodtool.container.shards import ShardWriter

    lengths = np.random.default_rng(8).integers(0, 25, 203)
    path, t = _container(tmp_path, lengths)
    folder = str(tmp_path / "shards")
    with ShardWriter(folder, shard_size="300B") as w:  # uneven shards, one of them empty
        w.write(_top(t, 0, 40))
        w.end_shard()
        w.write(_top(t, 40, 40))
        w.end_shard()
        w.write(_top(t, 40, t.num_sequences(0)))
    assert len(lodtool.container.shards.read_manifest(folder).shards) > 3
    for mode in ("sorted", "pack", "buckets"):
        extra = {"boundaries": [8, 16], "bucket_batch_sizes": [9, 5, 3]} if mode == "buckets" else {}
        budget = {} if mode == "buckets" else {"max_tokens": 96}
        a = B.batch_plan(path, level=1, mode=mode, **budget, **extra)
        b = B.batch_plan(folder, level=1, mode=mode, **budget, **extra)
        assert a.indices.tolist() == b.indices.tolist() and a.offsets.tolist() == b.offsets.tolist()
        for x, y in zip(lodtool.batches(path, a, output=output), lodtool.batches(folder, b, output=output),
                        strict=True):
            assert x.keys() == y.keys()
            for key in x:
                assert np.array_equal(x[key], y[key]), key


def _top(t, a, b):
    """Top-level sequences [a, b) of a 2-level tensor, as a LoDTensor of its own (possibly empty)."""
    o0 = np.asarray(t.lod[0])
    o1 = np.asarray(t.lod[1])
    lo, hi = int(o0[a]), int(o0[b])
    rows = o1[lo:hi + 1]
    return LoDTensor(t.data[int(rows[0]):int(rows[-1])], [list(o0[a:b + 1] - o0[a]), list(rows - rows[0])])


# -- hostile plans and sources -------------------------------------------------------------------------
def test_a_plan_for_another_file_of_as_many_sequences_is_refused(tmp_path):
    a, _ = _container(tmp_path, [3, 1, 2, 2], name="a.lod.h5")
    b, _ = _container(tmp_path, [3, 2, 2, 2], name="b.lod.h5")  # every sequence as long or longer: it used to pass
    plan = B.batch_plan(a, level=1, max_tokens=8)
    plan.save(tmp_path / "plan.npz")
    with pytest.raises(LodInputError, match="made for another source"):
        next(lodtool.batches(b, str(tmp_path / "plan.npz")))
    # lengths that differ only above max_length clip to the same plan: the fingerprint still tells them apart
    c, _ = _container(tmp_path, [3, 1, 2, 5], name="c.lod.h5")
    clipped = B.batch_plan(a, level=1, max_tokens=8, max_length=2)
    assert np.array_equal(clipped.lengths, B.batch_plan(c, level=1, max_tokens=8, max_length=2).lengths)
    with pytest.raises(LodInputError, match="made for another source"):
        next(lodtool.batches(c, clipped))
    assert len(list(lodtool.batches(a, clipped))) == len(clipped)
    # the random baseline of a clipped plan keeps the source's fingerprint
    assert len(list(lodtool.batches(a, clipped.random_baseline()))) == len(clipped.random_baseline())


@pytest.mark.parametrize("output", ["padded", "jagged-numpy", "varlen"])
@pytest.mark.parametrize("compression", ["none", "default"])
@pytest.mark.parametrize("reuse", [True, False])
def test_a_plan_changed_after_the_reader_checked_it_is_refused_not_written_past_its_buffers(tmp_path, output,
                                                                                            compression, reuse):
    path, _ = _container(tmp_path, [3, 1, 2, 9, 4, 1], compression=compression)
    plan = B.batch_plan(path, level=1, max_sequences=2, mode="random", seed=3)
    original = plan.indices.copy()
    # every batch holding the longest sequence twice (more rows than the plan counts), the shortest twice (fewer),
    # or a sequence the file does not have
    for changed in (3, 1, 6, -1, 2**40):
        with B.BatchReader(path, plan, output=output, reuse_buffers=reuse) as reader:
            reader.read(0)  # checked against the file, buffers sized from its lengths
            plan.indices[:] = changed
            with pytest.raises(LodInputError) as err:
                for i in range(len(plan)):
                    reader.read(i)
            plan.indices[:] = original
        assert "no longer matches tensor" in str(err.value) and "\n" not in str(err.value)
        assert str(err.value).startswith(path)


@pytest.mark.parametrize("output", ["padded", "jagged-numpy", "varlen"])
def test_a_plan_changed_after_the_check_is_refused_naming_its_batch_when_batches_are_gathered_together(tmp_path,
                                                                                                      output):
    path, _ = _container(tmp_path, [3, 1, 2, 9, 4, 1, 5, 2], compression="none")
    plan = B.batch_plan(path, level=1, max_sequences=2, mode="random", seed=3)
    with B.BatchReader(path, plan, output=output) as reader:
        reader.read(0)
        first_long = int(np.argmax(plan.lengths[plan.indices] != 9)) // 2  # the first batch of other lengths
        plan.indices[:] = 3  # the longest sequence everywhere: its own batches hold what the plan counts
        seen = []
        with pytest.raises(LodInputError, match=f"batch {first_long} of the plan holds other rows"):
            for b in reader:
                seen.append(b["batch"])
    assert seen == list(range(first_long))


def test_batch_numbers_outside_the_plan_are_refused_before_any_batch_is_read(tmp_path):
    path, _ = _container(tmp_path, [3, 1, 2, 9], compression="none")
    plan = B.batch_plan(path, level=1, max_sequences=1)
    with B.BatchReader(path, plan) as reader:
        assert [b["batch"] for b in reader.iter_batches([-1, 0])] == [3, 0]
        for ids, message in (([0, 4], "batch 4 is outside the plan's 4 batches"),
                             ([-5], "batch -5 is outside"), ([0.5], "must be integers")):
            with pytest.raises(LodUsageError, match=message):
                next(reader.iter_batches(ids))


@pytest.mark.parametrize("output", ["padded", "jagged-numpy", "varlen"])
@pytest.mark.parametrize("compression", ["none", "default"])
def test_small_batches_are_gathered_several_a_call_and_equal_the_ones_read_one_by_one(tmp_path, monkeypatch, output,
                                                                                      compression):
    lengths = np.random.default_rng(5).integers(0, 40, 3000)
    path, _ = _container(tmp_path, lengths, width=2, compression=compression)
    plan = B.batch_plan(path, level=1, max_tokens=64, mode="sorted", max_length=30)
    calls = []
    gather = B.compiled_gather_batches()
    monkeypatch.setattr(B, "compiled_gather_batches", lambda: lambda *a: calls.append(len(a[6])) or gather(*a))
    ids = list(range(len(plan)))[::-1] + [3, 3, 0]
    with B.BatchReader(path, plan, output=output, truncate="head") as reader:
        together = [{k: np.copy(v) for k, v in b.items()} for b in reader.iter_batches(ids)]
    calls_together = list(calls)
    alone = [{k: np.copy(v) for k, v in b.items()}
             for b in B.BatchReader(path, plan, output=output, truncate="head", reuse_buffers=False).iter_batches(ids)]
    assert len(together) == len(alone) == len(ids)
    for a, b in zip(together, alone):
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    assert max(calls[len(calls_together):]) == 1  # fresh arrays for every batch: a batch a call
    if compression == "none":  # from the map: a call gathers many batches (once more after checking their chunks)
        assert len(calls_together) < len(ids) / 10
    else:  # through the cache of decoded chunks, a chunk may be missing: a batch a call
        assert max(calls_together) == 1


def test_the_gather_refuses_a_batch_that_does_not_fit_its_outputs_or_source_without_touching_past_them():
    src, table = np.arange(10, 20), np.array([0])
    rows = np.array([0, 4, 10])
    none = np.zeros(0, np.int64)
    for fn in (K._gather_batch_reference, K.gather_batch):
        for width, room, n_sizes, n_positions in ((0, 9, 2, 0), (0, 10, 1, 0), (5, 10, 2, 0), (0, 10, 2, 9)):
            values = np.full(12, -1, np.int64)
            sizes, cu = np.zeros(n_sizes + 1, np.int64), np.zeros(n_sizes + 2, np.int64)
            positions = np.full(n_positions + 1, -1, np.int64)
            mask = np.zeros(2 * width + 1, bool)
            got = fn(src, table, 8, 16, 1, np.array([0, 1]), rows, none, False, width, values[:room],
                     sizes[:n_sizes], cu[:n_sizes + 1], positions[:n_positions], mask[:2 * width],
                     np.zeros(8, np.int64))
            assert got == K.GATHER_MISMATCH
            assert (values[room:] == -1).all() and sizes[n_sizes:].tolist() == [0] and cu[-1] == 0
            assert positions[-1] == -1 and not mask[-1]
        # a sequence the rows do not have, or clipped to more rows than it has
        for seqs, clipped in (([0, 2], none), ([-1], none), ([1], np.array([4, 7])), ([0], np.array([4]))):
            got = fn(src, table, 8, 16, 1, np.array(seqs), rows, clipped, False, 0, np.zeros(20, np.int64),
                     np.zeros(2, np.int64), np.zeros(3, np.int64), none, np.zeros(0, bool), np.zeros(8, np.int64))
            assert got == K.GATHER_MISMATCH
        # the same batch with room for it
        values, sizes, cu = np.zeros(10, np.int64), np.zeros(2, np.int64), np.zeros(3, np.int64)
        assert fn(src, table, 8, 16, 1, np.array([0, 1]), rows, none, False, 0, values, sizes, cu, none,
                  np.zeros(0, bool), np.zeros(8, np.int64)) == 6
        assert values.tolist() == list(range(10, 20)) and cu.tolist() == [0, 4, 10]


def test_a_plan_read_again_from_the_same_unchanged_file_is_not_checked_again_but_a_replaced_file_is(tmp_path,
                                                                                                   monkeypatch):
    import pickle

    path, _ = _container(tmp_path, [3, 1, 2, 2, 5, 1], compression="none")
    plan = B.batch_plan(path, level=1, max_tokens=8)
    first = [b["values"].tolist() for b in lodtool.batches(path, plan, output="varlen")]
    assert "_checked_against" not in pickle.loads(pickle.dumps(plan)).__dict__  # it stays in this process
    calls, original = [], B.sequence_rows
    monkeypatch.setattr(B, "sequence_rows", lambda *a, **k: calls.append(a) or original(*a, **k))
    assert [b["values"].tolist() for b in lodtool.batches(path, plan, output="varlen")] == first
    assert calls == []  # an epoch's reader of the same file reads and validates no offsets again
    other, _ = _container(tmp_path, [3, 2, 2, 2, 5, 1], name="other.lod.h5", compression="none")
    os.replace(other, path)  # the path replaced by another file, as lodtool's own writes replace one
    with pytest.raises(LodInputError, match="made for another source"):
        next(lodtool.batches(path, plan))


def test_a_plan_saved_without_a_fingerprint_is_read_when_its_lengths_match(tmp_path):
    a, _ = _container(tmp_path, [3, 1, 2, 2], name="a.lod.h5")
    b, _ = _container(tmp_path, [2, 2, 3, 1], name="b.lod.h5")
    plan = B.batch_plan(a, level=1, max_tokens=8)
    del plan.options["source_digest"]  # as lodtool wrote plans before it kept one
    plan.save(tmp_path / "old.npz")
    old = B.BatchPlan.load(tmp_path / "old.npz")
    assert len(list(lodtool.batches(a, old))) == len(old)
    with pytest.raises(LodInputError, match="made for another source"):
        next(lodtool.batches(b, old))


def _saved(tmp_path, **changes):
    plan = B.batch_plan(np.array([3, 1, 2, 2]), max_tokens=8)
    arrays = {k: getattr(plan, k) for k in B.PLAN_ARRAYS}
    meta = {"version": B.PLAN_VERSION, "mode": plan.mode, "options": plan.options}
    for key, value in changes.items():
        if key in arrays:
            arrays[key] = value
        else:
            meta["options"] = {**meta["options"], key: value}
    path = tmp_path / "hostile.npz"
    np.savez(path, meta=np.array(json.dumps(meta) if "raw_meta" not in changes else changes["raw_meta"]), **arrays)
    return path


@pytest.mark.parametrize("changes, message", [
    ({"seed": "7"}, "option seed"),
    ({"epoch": -1}, "option epoch"),
    ({"max_tokens": [[[]]]}, "option max_tokens"),
    ({"padded_lengths": np.array([2 ** 62] * 2)}, "too large"),
    ({"lengths": np.array([2 ** 62, 1, 2, 2])}, "too large"),
])
def test_hostile_saved_plans_are_one_line_format_errors(tmp_path, changes, message):
    with pytest.raises(LodFormatError, match=message):
        B.BatchPlan.load(_saved(tmp_path, **changes))


def test_deeply_nested_plan_metadata_is_a_format_error(tmp_path):
    path = tmp_path / "deep.npz"
    arrays = {k: getattr(B.batch_plan(np.array([1]), max_tokens=8), k) for k in B.PLAN_ARRAYS}
    np.savez(path, meta=np.array("[" * 100_000 + "]" * 100_000), **arrays)
    with pytest.raises(LodFormatError, match="no readable metadata"):
        B.BatchPlan.load(path)


def test_plan_options_of_the_wrong_kind_are_usage_errors():
    lengths = np.array([3, 1, 2])
    for kwargs, message in [({"seed": "7"}, "seed=... must be"), ({"epoch": -1}, "epoch=... must be"),
                            ({"seed": -3}, "seed=... must be"), ({"max_tokens": 2 ** 64}, "max_tokens=... must be"),
                            ({"mode": "buckets", "boundaries": [[1]]}, "boundaries=... must be"),
                            ({"mode": "buckets", "boundaries": "12"}, "boundaries=... must be")]:
        with pytest.raises(LodUsageError, match=re.escape(message)):
            B.batch_plan(lengths, **{"max_tokens": 8, **kwargs})


def _npy_member(shape, dtype="<i8", body=b""):
    import io

    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": dtype, "fortran_order": False, "shape": shape})
    return buf.getvalue() + body


def test_a_plan_claiming_huge_arrays_is_refused_before_allocating(tmp_path):
    import tracemalloc
    import zipfile

    good = B.batch_plan(np.array([3, 1]), max_tokens=8)
    good.save(tmp_path / "good.npz")
    claims = tmp_path / "claims.npz"  # a lengths header claiming 2**40 entries, with no data behind it
    bomb = tmp_path / "bomb.npz"  # a lengths member that inflates to 64 MiB of zeros from 64 KiB
    with zipfile.ZipFile(tmp_path / "good.npz") as z, zipfile.ZipFile(claims, "w") as c, \
            zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as d:
        for info in z.infolist():
            data = z.read(info)
            if info.filename == "lengths.npy":
                c.writestr(info.filename, _npy_member((2 ** 40,)))
                d.writestr(info.filename, _npy_member((8 << 20,), body=bytes(64 << 20)))
            else:
                c.writestr(info.filename, data)
                d.writestr(info.filename, data)
    tracemalloc.start()
    with pytest.raises(lodtool.LodMemoryError, match="memory limit"):
        B.BatchPlan.load(claims)
    with pytest.raises(lodtool.LodMemoryError, match="memory limit"):
        B.BatchPlan.load(bomb, max_memory=16 << 20)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 4 << 20


def test_planning_memory_is_bounded_and_checked_up_front(tmp_path):
    import tracemalloc

    n = 200_000  # every sequence empty: the costliest kind per sequence
    path = str(tmp_path / "empty.lod.h5")
    lodtool.save(path, LoDTensor(np.zeros(0, np.int32), [np.zeros(n + 1, np.int64)]))
    tracemalloc.start()
    result = B.batch(path, max_tokens=64, report=True)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert result.report["plan"]["empty"] == n
    assert peak <= B.PLAN_BYTES_PER_SEQUENCE["sorted"] * n + (1 << 20)
    small = B.PLAN_BYTES_PER_SEQUENCE["sorted"] * n // 2
    with pytest.raises(lodtool.LodMemoryError, match="batch plan of 200,000 sequences"):
        B.batch_plan(path, max_tokens=64, max_memory=small)
    with pytest.raises(lodtool.LodMemoryError, match="batch plan of 200,000 sequences"):
        B.batch(path, max_tokens=64, report=True, save_to=str(tmp_path / "plan.npz"), max_memory=small)
    # a report alone streams (sorted), or names the mode that cannot
    assert B.batch(path, max_tokens=64, report=True, max_memory=small).report["plan"] == result.report["plan"]
    with pytest.raises(lodtool.LodMemoryError, match="report of mode 'random' needs its whole plan of 200,000"):
        B.batch(path, max_tokens=64, mode="random", report=True, max_memory=small)


@pytest.mark.parametrize("mode, options", [("sorted", {}), ("random", {}), ("megabatch", {}), ("pack", {}),
                                           ("chunks", {}), ("buckets", {"boundaries": [8, 16, 32, 64]}),
                                           ("random", {"num_replicas": 3})])
def test_every_mode_plans_and_reports_within_its_memory_bound(tmp_path, mode, options):
    import tracemalloc

    n = 50_000  # one sequence a batch, clipped: the most arrays per sequence
    lengths = np.random.default_rng(1).integers(33, 65, n)
    path = str(tmp_path / "one.lod.h5")
    lodtool.save(path, LoDTensor(np.zeros(int(lengths.sum()), np.int8), [np.concatenate([[0], np.cumsum(lengths)])]),
                 compression="none")
    kwargs = {"max_tokens": 64, "mode": mode, "max_length": 63, **options}
    B.batch(path, report=True, **kwargs)  # compiled outside the measure
    tracemalloc.start()
    B.batch(path, report=True, **kwargs)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak <= B.PLAN_BYTES_PER_SEQUENCE[mode] * n + (1 << 20)
    # the report of a saved plan is held to the same bound
    B.batch_plan(path, **kwargs).save(tmp_path / "plan.npz")
    with pytest.raises(lodtool.LodMemoryError, match=f"batch plan of {n:,} sequences"):
        B.batch(path, str(tmp_path / "plan.npz"), report=True, max_memory=B.PLAN_BYTES_PER_SEQUENCE[mode] * n - 1)


def test_damaged_in_memory_plan_is_refused_by_the_reader(tmp_path):
    path, _ = _container(tmp_path, [3, 1, 2, 2])
    plan = B.batch_plan(path, level=1, max_tokens=8)
    plan.padded_lengths[:] = 2 ** 62
    with pytest.raises(LodUsageError, match="damaged batch plan"):
        B.BatchReader(path, plan)
    plan = B.batch_plan(path, level=1, max_sequences=1, mode="buckets", boundaries=[2 ** 40],
                        pad_to_bucket_boundary=True)
    with pytest.raises(lodtool.LodMemoryError, match="largest batch"):  # 2**40 - 1 rows of padding
        next(lodtool.batches(path, plan))


def test_a_float_pad_value_follows_the_operators_rule(tmp_path):
    path = str(tmp_path / "f.lod.h5")
    lodtool.save(path, LoDTensor(np.arange(4, dtype=np.float32), recursive_sequence_lengths=[[3, 1]]))
    (b,) = list(lodtool.batches(path, max_sequences=2, pad_value=0.1))  # 0.1 is no float32, yet fills as one
    assert b["values"][~b["mask"]].tolist() == [np.float32(0.1)] * 2
    with pytest.raises(LodUsageError, match="does not fit"):
        next(lodtool.batches(path, max_sequences=2, pad_value=[1, 2]))


def test_an_in_memory_tensor_is_a_source_as_its_file_is(tmp_path):
    lengths = np.random.default_rng(5).integers(0, 20, 41)
    path, t = _container(tmp_path, lengths)
    in_memory = B.batch_plan(t, level=1, max_tokens=40)
    from_file = B.batch_plan(path, level=1, max_tokens=40)
    assert in_memory.indices.tolist() == from_file.indices.tolist()
    assert in_memory.options["source_digest"] == from_file.options["source_digest"]
    assert len(list(lodtool.batches(path, in_memory))) == len(in_memory)


FUZZ_SEED = int(os.environ.get("LODTOOL_FUZZ_SEED", "0"))
#: sizes a swapped word claims: negative, past 2**31, gigabytes, far past any memory
HOSTILE_INTS = (-1, -(1 << 40), (1 << 31) - 1, 1 << 31, 3 << 30, 1 << 40, 1 << 62, (1 << 63) - 1)


def _mangled_bytes(blob: bytes, rng: random.Random) -> bytes:
    data = bytearray(blob)
    kind = rng.choice(("flip", "cut", "word", "word", "dup"))
    at = rng.randrange(len(data))
    if kind == "flip":
        data[at] ^= 1 << rng.randrange(8)
    elif kind == "cut":
        del data[at:]
    elif kind == "word":  # a value, or a header's size
        at -= at % 8
        data[at:at + 8] = rng.choice(HOSTILE_INTS).to_bytes(8, "little", signed=True)
    else:
        data[at:at] = data[at:at + rng.randrange(1, 64)]
    return bytes(data)


def _mangle_plan(path, rng: random.Random) -> None:
    """Mangle one member of a saved plan and zip it again (most variants), or the zip's own bytes."""
    import zipfile

    if rng.random() < 0.2:
        path.write_bytes(_mangled_bytes(path.read_bytes(), rng))
        return
    with zipfile.ZipFile(path) as z:
        members = {name: z.read(name) for name in z.namelist()}
    victim = rng.choice(sorted(members))
    members[victim] = _mangled_bytes(members[victim], rng)
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)


@pytest.mark.parametrize("variant", range(200 if os.environ.get("LODTOOL_TEST_PROFILE") == "long" else 40))
def test_fuzzed_saved_plans_load_and_read_or_fail_in_one_line(tmp_path, variant):
    # the seed is in pytest's header (LODTOOL_FUZZ_SEED); a failure names the variant
    path, _ = _container(tmp_path, [3, 1, 2, 2, 0, 5, 4])
    plan_file = tmp_path / "plan.npz"
    B.batch_plan(path, level=1, max_tokens=8, num_replicas=2, rank=1).save(plan_file)
    _mangle_plan(plan_file, random.Random(FUZZ_SEED * 100_003 + variant))
    try:
        plan = B.BatchPlan.load(plan_file, max_memory=16 << 20)
        for output in B.OUTPUTS:
            for _ in lodtool.batches(path, plan, output=output, max_memory=16 << 20):
                pass
    except lodtool.LodError as exc:
        assert "\n" not in str(exc) and str(exc), f"seed {FUZZ_SEED}, variant {variant}"


# -- the streamed report: a sorted plan's figures from length counts -----------------------------------
@given(st.lists(st.tuples(st.integers(0, 70_000), st.integers(1, 9)), max_size=12),
       st.integers(0, 40), st.integers(0, 9), st.integers(1, 5))
def test_greedy_run_figures_match_the_expanded_reference(runs, budget, max_sequences, multiple):
    counts = {}
    for value, count in runs:  # lengths past DENSE_LENGTHS too: the sparse side of LengthCounts
        counts[value % 50 if value < K.DENSE_LENGTHS else value] = counts.get(value, 0) + count
    length_counts = K.LengthCounts()
    length_counts.add(np.repeat(np.array(list(counts), np.int64), list(counts.values())))
    values, n = length_counts.runs()
    assert values.tolist() == sorted(counts) and n.tolist() == [counts[v] for v in sorted(counts)]
    max_tokens = max(budget, int(values.max())) if values.size and budget else budget
    want = dict(zip(K.RUN_FIGURES, K._greedy_run_figures_reference(values, n, max_tokens, max_sequences,
                                                                   multiple).tolist()))
    assert K.greedy_run_figures(values, n, max_tokens, max_sequences, multiple) == want


@settings(max_examples=50)  # a container written per example
@given(lengths_st, st.integers(0, 120), st.integers(0, 9), st.integers(1, 4), st.booleans(),
       st.sampled_from([None, 3, 17]), st.integers(0, 3))
def test_streamed_report_equals_the_plan_report(tmp_path_factory, lengths, budget, max_sequences, multiple,
                                                drop_last, max_length, seed):
    path = str(tmp_path_factory.mktemp("streamed") / "c.lod.h5")
    lodtool.save(path, LoDTensor(np.zeros(int(lengths.sum()), np.int32), [np.concatenate([[0], np.cumsum(lengths)])]))
    options = {"max_tokens": budget or None, "max_sequences": max_sequences * multiple or None,
               "multiple_of": multiple, "drop_last": drop_last, "max_length": max_length, "seed": seed,
               "oversize": "skip"}
    if options["max_tokens"] is None and options["max_sequences"] is None:
        options["max_sequences"] = 4 * multiple
    want = B.plan_report(B.batch_plan(path, **options))
    got = B.streamed_report(path, **options)
    assert got["plan"] == want["plan"] and got["histogram"] == want["histogram"]
    assert got["random"] is None and got["streamed"] == B.STREAMED_NOTE


@settings(max_examples=60, deadline=None)  # a container written per example
@given(lengths_st, st.lists(st.integers(1, 40), min_size=1, max_size=3, unique=True), st.integers(0, 120),
       st.integers(0, 9), st.integers(1, 3), st.booleans(), st.sampled_from([None, 3, 17]), st.booleans(),
       st.booleans(), st.integers(1, 9))
def test_streamed_report_of_buckets_in_file_order_equals_the_plan_report(tmp_path_factory, lengths, boundaries,
                                                                         budget, max_sequences, multiple, drop_last,
                                                                         max_length, pad, explicit, window):
    from unittest import mock

    path = str(tmp_path_factory.mktemp("streamed") / "c.lod.h5")
    lodtool.save(path, LoDTensor(np.zeros(int(lengths.sum()), np.int32), [np.concatenate([[0], np.cumsum(lengths)])]))
    options = {"mode": "buckets", "shuffle": False, "boundaries": sorted(boundaries), "multiple_of": multiple,
               "drop_last": drop_last, "max_length": max_length, "pad_to_bucket_boundary": pad}
    if explicit:
        options["bucket_batch_sizes"] = [1 + (budget + k) % 7 for k in range(len(boundaries) + 1)]
    else:
        options.update(max_tokens=budget or None, max_sequences=max_sequences * multiple or None)
        if options["max_tokens"] is None and options["max_sequences"] is None:
            options["max_sequences"] = 4 * multiple
    try:
        want = B.plan_report(B.batch_plan(path, **options))
    except LodInputError as planned:  # a length past the last boundary with pad_to_bucket_boundary
        with pytest.raises(LodInputError) as streamed:
            B.streamed_report(path, **options)
        assert str(streamed.value) == str(planned)
        return
    with mock.patch("lodtool.tasks._pipe.offset_window", lambda limit: window):  # many windows, batches across them
        got = B.streamed_report(path, **options)
    assert got["plan"] == want["plan"] and got["histogram"] == want["histogram"]
    assert got["random"] is None and got["streamed"] == B.STREAMED_NOTE


def test_streamed_report_refuses_as_the_plan_does(tmp_path):
    path, _ = _container(tmp_path, [3, 9, 2, 12])
    with pytest.raises(LodInputError) as planned:
        B.batch_plan(path, level=1, max_tokens=8)
    with pytest.raises(LodInputError) as streamed:
        B.streamed_report(path, level=1, max_tokens=8)
    assert str(streamed.value) == str(planned.value)
    for options, why in (({"mode": "random"}, "one random permutation of every sequence"),
                         ({"mode": "buckets", "boundaries": [4]}, "one random permutation of every sequence"),
                         ({"mode": "pack"}, "keeps every row open"), ({"num_replicas": 2}, "dealt in a random order")):
        with pytest.raises(LodUsageError, match="only mode 'sorted' on one replica streams") as err:
            B.streamed_report(path, level=1, max_tokens=16, **options)
        assert why in str(err.value)
    with pytest.raises(LodUsageError, match="reads a path"):
        B.streamed_report(np.array([3, 9]), max_tokens=16)


def test_stats_past_the_plan_limit_stream_in_flat_memory(tmp_path):
    import time
    import tracemalloc

    n = 10 ** 7  # every sequence empty; the whole plan is held to PLAN_BYTES_PER_SEQUENCE["sorted"] * n (1.44 GB)
    path = str(tmp_path / "empty.lod.h5")
    lodtool.save(path, LoDTensor(np.zeros(0, np.int32), [np.zeros(n + 1, np.int64)]))
    limit = 64 << 20
    K.greedy_run_figures(np.zeros(1, np.int64), np.ones(1, np.int64), 0, 1)  # compiled outside the measure
    start = time.perf_counter()
    tracemalloc.start()
    result = B.batch(path, max_sequences=1000, report=True, max_memory=limit)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert time.perf_counter() - start < 5
    assert result.plan is None and result.report["random"] is None
    plan = result.report["plan"]
    assert (plan["batches"], plan["sequences"], plan["empty"], plan["padded_tokens"]) == (n // 1000, n, n, 0)
    assert plan["sequences_per_batch"] == {"mean": 1000.0, "min": 1000, "max": 1000}
    assert result.report["histogram"]["counts"][0] == n
    assert peak < 32 << 20  # the offsets validated a block at a time; the plan would be 30 times this
    with pytest.raises(lodtool.LodMemoryError, match="report of mode 'megabatch' needs its whole plan"):
        B.batch(path, max_sequences=1000, mode="megabatch", report=True, max_memory=limit)


def test_drop_last_pads_the_last_kept_batch_to_its_own_longest():
    # the dropped batch's sequences stay in the sorted order; the kept batch before them must not pad to them
    plan = B.batch_plan(np.array([0, 1]), max_tokens=1, multiple_of=2, drop_last=True)
    assert plan.sequences().tolist() == [0] and plan.padded_lengths.tolist() == [0]
    plan = B.batch_plan(np.array([2, 2, 9]), max_sequences=2, drop_last=True)
    assert plan.padded_lengths.tolist() == [2] and plan.stats()["padded_tokens"] == 4


def test_streamed_report_of_a_sharded_folder_and_of_a_level_above_the_last(tmp_path):
    from lodtool.container.shards import ShardWriter

    lengths = np.random.default_rng(9).integers(0, 25, 203)
    path, t = _container(tmp_path, lengths)
    folder = str(tmp_path / "shards")
    with ShardWriter(folder, shard_size="300B") as w:
        w.write(_top(t, 0, 40))
        w.end_shard()
        w.write(_top(t, 40, t.num_sequences(0)))
    for source in (path, folder):
        for level in (0, 1):  # level 0's lengths are its sub-sequences' rows, mapped down through level 1
            want = B.plan_report(B.batch_plan(source, level=level, max_sequences=8))
            got = B.streamed_report(source, level=level, max_sequences=8, max_memory=4 << 20)
            assert got["plan"] == want["plan"] and got["histogram"] == want["histogram"]
