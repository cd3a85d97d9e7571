"""pack_plan / to_time_major / from_time_major: plan rules, round trips, kernel == reference, torch."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lodtool import LoDTensor
from lodtool.errors import LodIndexError, LodShapeError, LodUsageError, LodValidationError
from lodtool.ops import from_time_major, pack_plan, to_time_major
from tests.test_ops_common import BACKENDS, OPS_SETTINGS, same_bits, same_tensor, tensors


@pytest.mark.parametrize("backend", BACKENDS)
def test_plan_example(backend):
    x = LoDTensor(np.arange(9), recursive_sequence_lengths=[[2, 3, 0, 3, 1]])
    plan = pack_plan(x, backend=backend)
    assert plan.lengths.tolist() == [2, 3, 0, 3, 1]
    assert plan.sorted_indices.tolist() == [1, 3, 0, 4, 2]  # stable: 1 before 3
    assert plan.unsorted_indices.tolist() == [2, 0, 4, 1, 3]
    assert plan.batch_sizes.tolist() == [4, 3, 2]
    assert plan.num_sequences == 5 and plan.num_steps == 3 and plan.n_rows == 9
    for field in ("lengths", "sorted_indices", "unsorted_indices", "batch_sizes", "row_offsets"):
        assert getattr(plan, field).dtype == np.int64
    data, _ = to_time_major(x, plan, backend=backend)
    # step 0: firsts of seqs 1, 3, 0, 4; step 1: seconds of 1, 3, 0; step 2: thirds of 1, 3
    assert data.tolist() == [2, 5, 0, 8, 3, 6, 1, 4, 7]
    assert [s.tolist() for s in plan.split(data)] == [[2, 5, 0, 8], [3, 6, 1], [4, 7]]
    assert same_tensor(from_time_major(data, plan, backend=backend), x)
    assert same_tensor(from_time_major(plan.split(data), plan, backend=backend), x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_upper_level(backend):
    x = LoDTensor(np.arange(12).reshape(6, 2), recursive_sequence_lengths=[[1, 2], [1, 2, 3]])
    plan = pack_plan(x, level=0, backend=backend)
    assert plan.lengths.tolist() == [1, 5] and plan.batch_sizes.tolist() == [2, 1, 1, 1, 1]
    data, _ = to_time_major(x, plan, backend=backend)
    assert data[:2].tolist() == [[2, 3], [0, 1]]
    assert same_tensor(from_time_major(data, plan), x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_all_empty(backend):
    x = LoDTensor(np.zeros((0, 3)), recursive_sequence_lengths=[[0, 0]])
    plan = pack_plan(x, backend=backend)
    assert plan.batch_sizes.tolist() == [] and plan.sorted_indices.tolist() == [0, 1]
    data, _ = to_time_major(x, plan, backend=backend)
    assert data.shape == (0, 3)
    assert same_tensor(from_time_major(data, plan, backend=backend), x)


def test_errors():
    x = LoDTensor(np.arange(3), recursive_sequence_lengths=[[1, 2]])
    plan = pack_plan(x)
    with pytest.raises(LodShapeError, match="not the one the plan"):
        to_time_major(LoDTensor(np.arange(3), recursive_sequence_lengths=[[2, 1]]), plan)
    with pytest.raises(LodShapeError, match="4 rows"):
        to_time_major(np.arange(4), plan)
    assert to_time_major(np.arange(3), plan)[0].tolist() == [1, 0, 2]
    with pytest.raises(LodShapeError, match="1 steps given"):
        from_time_major([np.arange(2)], plan)
    with pytest.raises(LodShapeError, match="step 1"):
        from_time_major([np.arange(2), np.arange(2)], plan)
    with pytest.raises(LodShapeError, match="plan covers 3"):
        from_time_major(np.arange(5), plan)
    with pytest.raises(LodShapeError, match="no LoD"):
        pack_plan(np.arange(3))
    with pytest.raises(LodUsageError):
        to_time_major(x, "not a plan")
    with pytest.raises(LodIndexError):
        pack_plan(x, level=1)


@pytest.mark.parametrize("field,value", [
    ("sorted_indices", [0, 0, 1]), ("sorted_indices", [0, 1, 5]), ("sorted_indices", [2, 0, 1]),
    ("unsorted_indices", [1, 0, 2]), ("batch_sizes", [3, 2, 2]), ("lengths", [1, 2, 3]),
    ("row_offsets", [0, 2, 5, 9]), ("batch_sizes", [3.0, 2.0, 1.0]),
])
def test_forged_plans_are_refused(field, value):
    x = LoDTensor(np.arange(6), recursive_sequence_lengths=[[3, 2, 1]])
    plan = dataclasses.replace(pack_plan(x), **{field: np.asarray(value)})
    with pytest.raises(LodValidationError):
        to_time_major(np.arange(6), plan)
    with pytest.raises(LodValidationError):
        from_time_major(np.arange(6), plan)


@OPS_SETTINGS
@given(tensors(), st.data())
def test_kernel_matches_reference(x, data):
    level = data.draw(st.integers(-x.lod_level, x.lod_level - 1))
    plan = pack_plan(x, level, backend="numba")
    ref = pack_plan(x, level, backend="numpy")
    for field in ("lengths", "sorted_indices", "unsorted_indices", "batch_sizes", "row_offsets"):
        assert np.array_equal(getattr(plan, field), getattr(ref, field)), field
    lengths = plan.lengths
    assert np.all(np.diff(lengths[plan.sorted_indices]) <= 0)
    assert np.array_equal(plan.sorted_indices[plan.unsorted_indices], np.arange(len(lengths)))
    assert plan.batch_sizes.sum() == x.n_rows
    steps, _ = to_time_major(x, plan, backend="numba")
    assert same_bits(steps, to_time_major(x, plan, backend="numpy")[0])
    for backend in BACKENDS:
        assert same_tensor(from_time_major(steps, plan, backend=backend), x)


def test_matches_torch_pack_sequence():
    torch = pytest.importorskip("torch")
    from torch.nn.utils.rnn import pack_sequence

    rng = np.random.default_rng(3)
    for lengths in ([3, 1, 4, 2, 6], rng.permutation(40)[:25] + 1):
        lengths = [int(n) for n in lengths]
        x = LoDTensor(rng.standard_normal((sum(lengths), 3)).astype(np.float32),
                      recursive_sequence_lengths=[lengths])
        seqs = [torch.from_numpy(np.asarray(x.branch(i).data)) for i in range(len(lengths))]
        packed = pack_sequence(seqs, enforce_sorted=False)
        plan = pack_plan(x)
        data, batch_sizes = to_time_major(x, plan)
        assert np.array_equal(batch_sizes, packed.batch_sizes.numpy())
        assert np.array_equal(plan.sorted_indices, packed.sorted_indices.numpy())
        assert np.array_equal(plan.unsorted_indices, packed.unsorted_indices.numpy())
        assert np.array_equal(data, packed.data.numpy())


def test_ties_against_torch():
    """With equal lengths torch's sort may order ties differently; steps and the round trip still agree."""
    torch = pytest.importorskip("torch")
    from torch.nn.utils.rnn import pack_sequence, pad_packed_sequence

    lengths = [2, 3, 2, 3, 1]
    x = LoDTensor(np.arange(11, dtype=np.float32), recursive_sequence_lengths=[lengths])
    packed = pack_sequence([torch.from_numpy(np.asarray(x.branch(i).data)) for i in range(5)],
                           enforce_sorted=False)
    plan = pack_plan(x)
    assert np.array_equal(plan.batch_sizes, packed.batch_sizes.numpy())
    padded, _ = pad_packed_sequence(packed, batch_first=True)
    for i, n in enumerate(lengths):
        assert padded[i, :n].numpy().tolist() == np.asarray(x.branch(i).data).tolist()
    data, _ = to_time_major(x, plan)
    ours = torch.nn.utils.rnn.PackedSequence(torch.from_numpy(data), torch.from_numpy(plan.batch_sizes),
                                             torch.from_numpy(plan.sorted_indices),
                                             torch.from_numpy(plan.unsorted_indices))
    padded2, _ = pad_packed_sequence(ours, batch_first=True)
    assert torch.equal(padded, padded2)
