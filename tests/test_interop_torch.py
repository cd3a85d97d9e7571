"""The PyTorch bridge: jagged nested tensors (zero-copy), PackedSequence identical to torch's, cu_seqlens, padding."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lodtool import LoDTensor, from_nested
from lodtool.errors import LodShapeError, LodValidationError
from tests.strategies import lod_tensors

torch = pytest.importorskip("torch")
from torch.nn.utils.rnn import pack_padded_sequence, pack_sequence, pad_sequence

from lodtool.interop.torch import cu_seqlens, from_torch, to_packed_sequence, to_padded, to_torch

DTYPES = ["int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64", "bool", "complex64"]


def shares(view, base) -> bool:
    """np.shares_memory, where an empty view (which has no memory to share) counts as shared."""
    return np.asarray(view).size == 0 or np.shares_memory(view, base)


def sequences(t: LoDTensor, level: int) -> list[np.ndarray]:
    """The data rows under each sequence of ``level``."""
    rows = t.offsets[level]
    for below in t.offsets[level + 1:]:
        rows = below[rows]
    return [np.asarray(t.data[a:b]) for a, b in zip(rows[:-1], rows[1:])]


@settings(max_examples=50)
@given(lod_tensors(min_levels=1, max_levels=3, dtypes=DTYPES), st.data())
def test_jagged_nested_tensor_is_a_view(t, data):
    level = data.draw(st.integers(0, t.lod_level - 1)) if t.lod_level > 1 else None
    nt = to_torch(t, level=level)
    assert nt.is_nested and nt.layout == torch.jagged
    assert shares(nt.values().numpy(), t.data)
    if level is None or level == t.lod_level - 1:
        assert shares(nt.offsets().numpy(), t.offsets[-1])
    expected = sequences(t, level or 0)
    assert nt.size(0) == len(expected)
    for got, want in zip(nt.unbind(), expected):
        np.testing.assert_array_equal(got.numpy(), want)
    back = from_torch(nt)
    assert shares(back.data, t.data)
    if t.lod_level == 1:
        assert back.equals(t)


@settings(max_examples=50)
@given(lod_tensors(min_levels=1, max_levels=2, dtypes=["float32", "int64", "float64"], allow_empty=False), st.data())
def test_packed_sequence_is_identical_to_pack_padded_sequence(t, data):
    level = data.draw(st.integers(0, t.lod_level - 1))
    seqs = [torch.from_numpy(s.copy()) for s in sequences(t, level)]
    lengths = torch.tensor([len(s) for s in seqs])
    padded = pad_sequence(seqs, batch_first=True)
    want = pack_padded_sequence(padded, lengths, batch_first=True, enforce_sorted=False)
    got = to_packed_sequence(t, level)
    assert torch.equal(got.data, want.data)
    assert torch.equal(got.batch_sizes, want.batch_sizes) and got.batch_sizes.dtype == torch.int64
    assert torch.equal(got.sorted_indices, want.sorted_indices)
    assert torch.equal(got.unsorted_indices, want.unsorted_indices)
    back = from_torch(got)
    assert [b.tolist() for b in sequences(back, 0)] == [s.tolist() for s in seqs]
    if t.lod_level == 1:
        assert back.equals(t)


def test_from_packed_sequence_of_torch():
    seqs = [torch.tensor([1, 2]), torch.tensor([3, 4, 5]), torch.tensor([6])]
    t = from_torch(pack_sequence(seqs, enforce_sorted=False))
    assert t.to_nested() == [[1, 2], [3, 4, 5], [6]]
    t = from_torch(pack_sequence([seqs[1], seqs[0], seqs[2]]))  # enforce_sorted: no sorted_indices
    assert t.to_nested() == [[3, 4, 5], [1, 2], [6]]


def test_empty_sequences_have_no_packed_form():
    with pytest.raises(LodValidationError, match="sequence 1 of level 0 is empty"):
        to_packed_sequence(LoDTensor(np.arange(3), [[0, 2, 2, 3]]))


@settings(max_examples=40)
@given(lod_tensors(min_levels=1, max_levels=3, dtypes=["float32"]), st.data())
def test_cu_seqlens_and_padding(t, data):
    level = data.draw(st.integers(0, t.lod_level - 1))
    expected = sequences(t, level)
    cu, longest = cu_seqlens(t, level)
    assert cu.dtype == torch.int32
    assert cu.tolist() == np.concatenate([[0], np.cumsum([len(s) for s in expected])]).tolist()
    assert longest == max((len(s) for s in expected), default=0)
    padded, mask = to_padded(t, -1.0, level=level)
    assert padded.shape[:2] == (len(expected), longest) and mask.dtype == torch.bool
    for row, m, want in zip(padded, mask, expected):
        np.testing.assert_array_equal(row[m].numpy(), want)
        assert bool((row[~m] == -1).all())


def test_non_contiguous_nested_tensors_are_gathered():
    holes = torch.nested.nested_tensor_from_jagged(torch.arange(10.0), torch.tensor([0, 4, 10]),
                                                   lengths=torch.tensor([2, 3]))
    assert holes.lengths() is not None
    assert from_torch(holes).to_nested() == [[0.0, 1.0], [4.0, 5.0, 6.0]]


def test_the_way_out_for_deep_tensors_and_plain_tensors():
    t = from_nested([[[1, 2], [3]], [[4]]])
    with pytest.raises(LodShapeError, match=r"pass level=0\.\.1 .* or convert branches"):
        to_torch(t)
    assert [x.tolist() for x in to_torch(t, level=0).unbind()] == [[1, 2, 3], [4]]
    assert [x.tolist() for x in to_torch(t.branch(0)).unbind()] == [[1, 2], [3]]
    flat = LoDTensor(np.arange(6.0).reshape(3, 2))
    dense = to_torch(flat, layout="strided")
    assert np.shares_memory(dense.numpy(), flat.data)
    assert from_torch(dense).equals(flat)
    with pytest.raises(LodShapeError, match="layout='strided'"):
        to_torch(flat)


@given(lod_tensors(min_levels=1, max_levels=1, dtypes=["int32", "int16", "float64"]))
def test_big_endian_data_is_copied_into_native_order(t):
    swapped = LoDTensor(t.data.astype(t.dtype.newbyteorder(">")), lod=t.offsets)
    assert [x.tolist() for x in to_torch(swapped).unbind()] == t.to_nested()
    padded, mask = to_padded(swapped)
    assert padded.tolist() == to_padded(t)[0].tolist()
    cu, _ = cu_seqlens(swapped)
    assert cu.tolist() == t.offsets[0].tolist()
    if all(len(s) for s in t.to_nested()):
        assert to_packed_sequence(swapped).data.tolist() == to_packed_sequence(t).data.tolist()


# -- SequenceDataset: a map-style dataset for DataLoader(shuffle=True) and DistributedSampler --------------------------
@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    import lodtool

    rng = np.random.default_rng(4)
    docs = rng.integers(0, 5, 40)
    lengths = rng.integers(0, 9, int(docs.sum()))
    t = lodtool.LoDTensor(np.arange(int(lengths.sum()), dtype=np.int32), [lodtool.lengths_to_offsets(docs),
                                                                          lodtool.lengths_to_offsets(lengths)])
    paths = {}
    for compression in ("none", "deflate"):
        paths[compression] = str(tmp_path_factory.mktemp("seq") / f"c-{compression}.lod.h5")
        lodtool.save(paths[compression], t, compression=compression)
    return t, paths


@pytest.mark.parametrize("compression", ["none", "deflate"])
@pytest.mark.parametrize("level", [0, 1])
def test_sequence_dataset_items_are_the_sequences(corpus, compression, level):
    from lodtool.interop.torch import SequenceDataset

    t, paths = corpus
    ds = SequenceDataset(paths[compression], level=level)
    assert len(ds) == t.num_sequences(level)
    for i in range(len(ds)):
        want = t.slice_level(level, i, i + 1).data
        got = ds[i]
        assert got.dtype == torch.int32 and got.tolist() == want.tolist()
    with pytest.raises(IndexError, match="out of range"):
        ds[len(ds)]


@pytest.mark.parametrize("level", [0, 1])
def test_sequence_dataset_holds_the_validated_row_offsets_where_they_fit_the_memory_limit(corpus, level):
    from lodtool.interop.torch import SequenceDataset

    t, paths = corpus
    held = SequenceDataset(paths["none"], level=level)
    rows = t.offsets[1] if level == 1 else t.offsets[1][t.offsets[0]]
    assert held._rows.tolist() == rows.tolist()
    tight = SequenceDataset(paths["none"], level=level, max_memory=1000)  # the offsets are 2 KB: read per item
    assert tight._rows is None
    for i in range(len(held)):
        want = t.slice_level(level, i, i + 1).data.tolist()
        assert held[i].tolist() == want and tight[i].tolist() == want
        assert held[-1 - i].tolist() == tight[-1 - i].tolist()
    held[0][:] = -1  # an item is the caller's own copy
    assert held[0].tolist() == t.slice_level(level, 0, 1).data.tolist()


@pytest.mark.parametrize("compression", ["none", "deflate"])
@pytest.mark.parametrize("level", [0, 1])
def test_sequence_dataset_fetches_a_batch_of_items_in_one_gather_into_a_new_array(corpus, compression, level):
    from lodtool.interop.torch import SequenceDataset

    t, paths = corpus
    ds = SequenceDataset(paths[compression], level=level)
    indices = list(np.random.default_rng(1).integers(-len(ds), len(ds), 60)) + [0, 0, len(ds) - 1]
    items = ds.__getitems__(indices)
    assert ds._gather is not None  # the batch was one gather, not items one by one
    assert [x.tolist() for x in items] == [ds[int(i)].tolist() for i in indices]
    assert all(x.dtype == torch.int32 for x in items) and ds.__getitems__([]) == []
    items[0][:] = -1  # the items are the caller's: no later read sees the change, nor do they share a read-only map
    assert ds[int(indices[0])].tolist() == t.slice_level(level, int(indices[0]) % len(ds),
                                                         int(indices[0]) % len(ds) + 1).data.tolist()
    for bad in ([0, len(ds)], [-len(ds) - 1]):
        with pytest.raises(IndexError, match=f"sequence {bad[-1]} is out of range"):
            ds.__getitems__(bad)
    with pytest.raises(IndexError, match="sequence 0.5 is out of range"):
        ds.__getitems__([0.5])
    tight = SequenceDataset(paths["none"], level=level, max_memory=1000)  # offsets not held: item by item
    assert [x.tolist() for x in tight.__getitems__(indices)] == [ds[int(i)].tolist() for i in indices]
    assert tight._gather is None


def test_sequence_dataset_under_a_shuffling_dataloader_with_workers(corpus):
    from torch.utils.data import DataLoader

    from lodtool.interop.torch import SequenceDataset

    t, paths = corpus
    ds = SequenceDataset(paths["none"], level=1)
    loader = DataLoader(ds, batch_size=4, shuffle=True, num_workers=2, collate_fn=SequenceDataset.collate,
                        generator=torch.Generator().manual_seed(0))
    seen = []
    for values, lengths in loader:
        assert values.shape[0] == lengths.shape[0]
        seen += [values[k, :int(n)].tolist() for k, n in enumerate(lengths)]
    expected = [t.slice_level(1, i, i + 1).data.tolist() for i in range(len(ds))]
    assert sorted(seen) == sorted(expected) and seen != expected  # every sequence once, in a shuffled order


def test_sequence_dataset_splits_across_ranks_with_a_distributed_sampler(corpus):
    from torch.utils.data import DistributedSampler

    from lodtool.interop.torch import SequenceDataset

    t, paths = corpus
    ds = SequenceDataset(paths["deflate"], level=0)
    parts = [list(DistributedSampler(ds, num_replicas=2, rank=r, shuffle=True, seed=1)) for r in (0, 1)]
    assert set(parts[0]) | set(parts[1]) == set(range(len(ds))) and len(parts[0]) == len(parts[1])
    assert [ds[i].tolist() for i in parts[0][:3]] == [t.branch(i).data.tolist() for i in parts[0][:3]]
