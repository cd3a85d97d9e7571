"""BatchDataset (lodtool.interop._torch_batch): a torch IterableDataset over a container's batch plan."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import lodtool
from lodtool import LoDTensor
from lodtool.errors import LodInputError, LodUsageError
from lodtool.tasks._batch import batch_plan

torch = pytest.importorskip("torch")
from lodtool.interop._torch_batch import BatchDataset  # noqa: E402


@pytest.fixture()
def corpus(tmp_path):
    rng = np.random.default_rng(11)
    lengths = rng.integers(1, 30, 240)
    data = rng.standard_normal((int(lengths.sum()), 4)).astype(np.float32)
    path = tmp_path / "corpus.lod.h5"
    lodtool.save(str(path), LoDTensor(data, recursive_sequence_lengths=[list(lengths)]))
    rows = np.concatenate([[0], np.cumsum(lengths)])
    return str(path), lengths, data, rows


def _sequence(corpus, i):
    _, _, data, rows = corpus
    return data[rows[i]:rows[i + 1]]


def test_dataloader_with_two_workers_covers_every_batch(corpus):
    path, lengths, _, _ = corpus
    ds = BatchDataset(path, max_tokens=128, mode="sorted", output="padded")
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
    seen = []
    for b in loader:
        assert b["values"].shape[0] == b["mask"].shape[0] == b["lengths"].shape[0]
        assert b["values"].shape[0] * b["values"].shape[1] <= 128
        for k, s in enumerate(b["indices"].tolist()):
            n = int(b["lengths"][k])
            assert n == lengths[s] and int(b["mask"][k].sum()) == n
            assert np.array_equal(b["values"][k, :n].numpy(), _sequence(corpus, s))
        seen.extend(b["indices"].tolist())
    assert sorted(seen) == list(range(len(lengths)))
    assert len(seen) == len(ds.plan.indices)


def test_workers_after_the_main_process_read_open_their_own_file(corpus):
    path, lengths, _, _ = corpus
    ds = BatchDataset(path, max_tokens=128, mode="random", output="varlen")
    assert len(list(ds)) == len(ds)  # the main process opened the file first
    parent = ds._reader._source
    seen = [s for b in torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2) for s in b["indices"].tolist()]
    assert sorted(seen) == list(range(len(lengths))) and ds._reader._source is parent


def test_replicas_split_by_rank(corpus):
    path, lengths, _, _ = corpus
    seen = []
    counts = set()
    for rank in range(3):
        ds = BatchDataset(path, max_tokens=96, mode="pack", num_replicas=3, rank=rank, output="varlen")
        batches = list(ds)
        counts.add(len(batches))
        seen.extend(s for b in batches if not b["repeat"] for s in b["indices"].tolist())
    assert len(counts) == 1 and sorted(seen) == list(range(len(lengths)))


def test_outputs_varlen_jagged_packed(corpus):
    path, lengths, _, _ = corpus
    plan = batch_plan(path, max_tokens=128, mode="pack")
    varlen = next(iter(BatchDataset(path, plan, output="varlen")))
    idx = varlen["indices"].tolist()
    want = np.concatenate([_sequence(corpus, s) for s in idx])
    assert np.array_equal(varlen["values"].numpy(), want)
    assert varlen["cu_seqlens"].dtype == torch.int32 and varlen["max_seqlen"] == max(lengths[idx])
    assert varlen["position_ids"].tolist() == [p for s in idx for p in range(lengths[s])]
    jagged = next(iter(BatchDataset(path, plan, output="jagged")))
    assert jagged["values"].is_nested
    for k, t in enumerate(jagged["values"].unbind()):
        assert np.array_equal(t.numpy(), _sequence(corpus, idx[k]))
    packed = next(iter(BatchDataset(path, plan, output="packed")))["values"]
    assert isinstance(packed, torch.nn.utils.rnn.PackedSequence)
    padded, lens = torch.nn.utils.rnn.pad_packed_sequence(packed, batch_first=True)
    assert lens.tolist() == [lengths[s] for s in idx]
    assert np.array_equal(padded[0, :lens[0]].numpy(), _sequence(corpus, idx[0]))


def test_main_process_reuses_buffers_and_pickles_without_a_file(corpus):
    path, _, _, _ = corpus
    ds = BatchDataset(path, max_tokens=128, mode="sorted", output="varlen")
    it = iter(ds)
    a = next(it)["values"]
    b = next(it)["values"]
    assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    clone = pickle.loads(pickle.dumps(ds))
    assert clone._reader._source is None
    assert len(list(clone)) == len(ds)


def test_bad_output_and_usage(corpus):
    path, _, _, _ = corpus
    with pytest.raises(LodUsageError, match="output"):
        BatchDataset(path, max_tokens=64, output="ragged")
    with pytest.raises(LodUsageError, match="needs max_tokens"):
        BatchDataset(path, mode="pack")


def test_set_epoch_replans(corpus):
    path, lengths, _, _ = corpus
    ds = BatchDataset(path, max_tokens=128, mode="megabatch", output="varlen", seed=5)
    first = [b["indices"].tolist() for b in ds]
    ds.set_epoch(1)
    second = [b["indices"].tolist() for b in ds]
    assert first != second and sorted(sum(second, [])) == list(range(len(lengths)))
    ds.set_epoch(0)
    assert [b["indices"].tolist() for b in ds] == first
    fixed = BatchDataset(path, batch_plan(path, max_tokens=128))
    with pytest.raises(LodUsageError, match="fixed plan"):
        fixed.set_epoch(1)


def test_set_epoch_reshuffles_inside_persistent_workers(corpus):
    path, lengths, _, _ = corpus
    ds = BatchDataset(path, max_tokens=128, mode="sorted", output="varlen", seed=3)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)

    def epoch(e):
        ds.set_epoch(e)
        return [b["indices"].tolist() for b in loader]

    first, second = epoch(0), epoch(1)
    assert first != second  # the workers kept no copy of epoch 0's plan
    fresh = batch_plan(path, max_tokens=128, mode="sorted", seed=3, epoch=1)
    assert sorted(second) == sorted(b.tolist() for b in fresh)
    assert sorted(s for b in second for s in b) == list(range(len(lengths)))


def test_empty_sequences_in_each_output(tmp_path):
    lengths = [3, 0, 2, 0, 4]
    path = str(tmp_path / "empties.lod.h5")
    lodtool.save(path, LoDTensor(np.arange(9.0), recursive_sequence_lengths=[lengths]))
    with pytest.raises(LodInputError, match="sequence 1 is empty; a PackedSequence"):  # up front, not in a worker
        BatchDataset(path, max_sequences=5, mode="random", output="packed")
    for output in ("padded", "jagged", "varlen"):
        (b,) = list(BatchDataset(path, max_sequences=5, mode="random", output=output))
        assert b["lengths"].tolist() == [lengths[s] for s in b["indices"].tolist()]
        if output == "padded":
            assert b["mask"].sum(1).tolist() == b["lengths"].tolist()
        elif output == "jagged":
            assert [t.shape[0] for t in b["values"].unbind()] == b["lengths"].tolist()
        else:
            assert torch.diff(b["cu_seqlens"]).tolist() == b["lengths"].tolist()
