"""pack_plan / to_time_major / from_time_major: plan rules, round trips, kernel == reference, torch."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lodtool import LoDTensor
from lodtool.errors import LodIndexError, LodShapeError, LodUsageError, LodValidationError
from lodtool.ops import (array_to_lod_tensor, from_time_major, lod_tensor_to_array, pack_plan,
                         reorder_lod_tensor_by_rank, shrink_memory, to_time_major)
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
def test_upper_level_steps_are_sequences_of_the_next_level(backend):
    # Paddle's lod_rank_table: one step at level k is one sequence of level k+1
    x = LoDTensor(np.arange(12).reshape(6, 2), recursive_sequence_lengths=[[1, 2], [1, 2, 3]])
    plan = pack_plan(x, level=0, backend=backend)
    assert plan.lengths.tolist() == [1, 2] and plan.batch_sizes.tolist() == [2, 1]
    assert plan.sorted_indices.tolist() == [1, 0] and plan.unit_offsets.tolist() == [0, 1, 3, 6]
    data, _ = to_time_major(x, plan, backend=backend)
    # step 0: sentence 1 (rows 1, 2) of document 1, sentence 0 (row 0) of document 0; step 1: sentence 2
    assert data[:, 0].tolist() == [2, 4, 0, 6, 8, 10]
    assert [s[:, 0].tolist() for s in plan.split(data)] == [[2, 4, 0], [6, 8, 10]]
    assert plan.step_row_offsets().tolist() == [0, 3, 6]
    assert same_tensor(from_time_major(data, plan, backend=backend), x)
    assert same_tensor(from_time_major(plan.split(data), plan, backend=backend), x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_issue_example_ranks_in_sequences(backend):
    x = LoDTensor(np.zeros((17, 1)), recursive_sequence_lengths=[[1, 2], [5, 1, 1], [3, 1, 5, 1, 3, 3, 1]])
    plan = pack_plan(x, level=1, backend=backend)
    assert list(zip(plan.sorted_indices.tolist(), plan.lengths[plan.sorted_indices].tolist())) == \
        [(0, 5), (1, 1), (2, 1)]
    assert plan.batch_sizes.tolist() == [3, 1, 1, 1, 1]
    assert pack_plan(x, level=0, backend=backend).lengths.tolist() == [1, 2]
    assert pack_plan(x, level=2, backend=backend).lengths.tolist() == [3, 1, 5, 1, 3, 3, 1]


def test_lod_tensor_to_array_and_back():
    x = LoDTensor(np.arange(17), recursive_sequence_lengths=[[1, 2], [5, 1, 1], [3, 1, 5, 1, 3, 3, 1]])
    plan = pack_plan(x, level=1)
    steps = lod_tensor_to_array(x, plan)
    assert [s.to_nested() for s in steps] == [[[0, 1, 2], [13, 14, 15], [16]], [[3]], [[4, 5, 6, 7, 8]], [[9]],
                                              [[10, 11, 12]]]
    assert same_tensor(array_to_lod_tensor(steps, plan), x)
    last = pack_plan(x)  # the last level: each step is rows, a 0-level tensor
    steps = lod_tensor_to_array(x, last)
    assert [s.lod_level for s in steps] == [0] * 5 and [s.n_rows for s in steps] == last.batch_sizes.tolist()
    assert same_tensor(array_to_lod_tensor(steps, last), x)
    with pytest.raises(LodShapeError, match="2 steps given"):
        array_to_lod_tensor(steps[:2], last)
    with pytest.raises(LodShapeError, match="step 1"):
        array_to_lod_tensor(lod_tensor_to_array(x, plan)[:1] + [LoDTensor(np.zeros(2), [[0, 1, 2]])] * 4, plan)


def test_reorder_by_rank_and_shrink_memory():
    x = LoDTensor(np.arange(6), recursive_sequence_lengths=[[1, 3, 2]])
    plan = pack_plan(x)  # sorted: 1, 2, 0; batch sizes 3, 2, 1
    state = np.array([[0.0], [1.0], [2.0]])  # one row per sequence, in input order
    ranked = reorder_lod_tensor_by_rank(state, plan)
    assert ranked.data.ravel().tolist() == [1.0, 2.0, 0.0]
    assert [shrink_memory(ranked, t, plan).data.ravel().tolist() for t in range(3)] == [[1, 2, 0], [1, 2], [1]]
    nested = LoDTensor(np.arange(6), recursive_sequence_lengths=[[2, 1, 3]])
    ranked = reorder_lod_tensor_by_rank(nested, plan)
    assert ranked.to_nested() == [[2], [3, 4, 5], [0, 1]]
    assert shrink_memory(ranked, 1, plan).to_nested() == [[2], [3, 4, 5]]
    with pytest.raises(LodShapeError, match="the plan ranks 3"):
        reorder_lod_tensor_by_rank(np.zeros(2), plan)
    with pytest.raises(LodUsageError, match="step"):
        shrink_memory(ranked, 3, plan)
    with pytest.raises(LodShapeError, match="keeps 3"):
        shrink_memory(np.zeros(2), 0, plan)


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
    lvl = level % x.lod_level
    assert plan.batch_sizes.sum() == (x.n_rows if lvl == x.lod_level - 1 else x.num_sequences(lvl + 1))
    steps, _ = to_time_major(x, plan, backend="numba")
    assert same_bits(steps, to_time_major(x, plan, backend="numpy")[0])
    for backend in BACKENDS:
        assert same_tensor(from_time_major(steps, plan, backend=backend), x)
    parts = lod_tensor_to_array(x, plan)
    assert [len(p) if p.lod_level else p.n_rows for p in parts] == plan.batch_sizes.tolist()
    if parts:
        assert same_tensor(array_to_lod_tensor(parts, plan), x)


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


# Paddle's own unit test of lod_rank_table / lod_tensor_to_array / array_to_lod_tensor
# (test/legacy_test/test_lod_tensor_array_ops.py): (lengths, level, expected steps, their lengths, max_len)
PADDLE_ARRAY_CASES = [
    ([[3, 6, 1]], 0, [[3, 0, 9], [4, 1], [5, 2], [6], [7], [8]], [[]] * 6, 6),
    ([[3, 6, 0, 1]], 0, [[3, 0, 9], [4, 1], [5, 2], [6], [7], [8]], [[]] * 6, 6),
    ([[2, 3], [3, 6, 2, 6, 3]], 0,
     [[9, 10, 0, 1, 2], [11, 12, 13, 14, 15, 16, 3, 4, 5, 6, 7, 8], [17, 18, 19]], [[[2, 3]], [[6, 6]], [[3]]], 3),
    ([[3, 2, 4, 2], [3, 4, 4, 0, 1, 5, 2, 2, 2, 7, 1]], 0,
     [[12, 13, 14, 15, 16, 0, 1, 2, 23, 24, 25, 26, 27, 28, 29], [17, 18, 3, 4, 5, 6, 11, 30], [19, 20, 7, 8, 9, 10],
      [21, 22]], [[[5, 3, 0, 7]], [[2, 4, 1, 1]], [[2, 4]], [[2]]], 4),
    ([[2, 3, 1], [2, 3, 1, 4, 2, 1], [3, 4, 4, 6, 4, 1, 1, 4, 4, 8, 6, 1, 4]], 0,
     [[21, 0, 1, 2, 3, 4, 5, 6, 46, 47, 48, 49], list(range(22, 39)) + list(range(7, 21)), list(range(39, 46))],
     [[[1, 2, 1], [1, 3, 4, 4]], [[4, 3], [1, 4, 4, 8, 4, 6, 4]], [[2], [6, 1]]], 3),
    ([[2, 3, 1], [2, 3, 1, 4, 2, 1], [3, 4, 4, 6, 4, 1, 1, 4, 4, 8, 6, 1, 4]], 1, None, None, 4),
]


@pytest.mark.parametrize("lengths,level,expect,expect_lod,max_len", PADDLE_ARRAY_CASES)
def test_paddle_lod_tensor_array_unit_tests(lengths, level, expect, expect_lod, max_len):
    n = sum(lengths[-1])
    x = LoDTensor(np.arange(n, dtype=np.int32).reshape(n, 1), recursive_sequence_lengths=lengths)
    plan = pack_plan(x, level)
    assert plan.num_steps == max_len  # Paddle's max_sequence_len
    steps = lod_tensor_to_array(x, plan)
    if expect is not None:
        assert [s.data.ravel().tolist() for s in steps] == expect
        assert [s.recursive_sequence_lengths for s in steps] == expect_lod
    assert same_tensor(array_to_lod_tensor(steps, plan), x)
