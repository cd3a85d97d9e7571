"""The LoD index: conversions, Paddle's validation rules, branch resolution."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

from lodtool import LoDTensor
from lodtool.errors import LodIndexError, LodUsageError, LodValidationError
from lodtool.lod import (check_paddle_lod, extract_range, find_lod_problems, format_path, lengths_from_lod,
                         lengths_to_offsets, lod_from_lengths, memory_reader, offsets_to_lengths, paddle_valid,
                         parse_path, resolve_branch, validate_lod)

from .strategies import lod_lengths


def test_seed_offsets_examples():
    # design doc: 3 articles; user guide: 7 rows of [[2,1],[2,2,3]]
    assert [o.tolist() for o in lod_from_lengths([[3, 1, 2], [3, 2, 4, 1, 2, 3]])] == \
        [[0, 3, 4, 6], [0, 3, 5, 9, 10, 12, 15]]
    assert [o.tolist() for o in lod_from_lengths([[2, 1], [2, 2, 3]])] == [[0, 2, 3], [0, 2, 4, 7]]
    assert lengths_from_lod([[0, 2, 3], [0, 2, 4, 7]]) == [[2, 1], [2, 2, 3]]
    validate_lod(lod_from_lengths([[2, 1], [2, 2, 3]]), n_rows=7)


@given(st.lists(st.integers(0, 1000), max_size=50))
def test_lengths_offsets_round_trip(lengths):
    offsets = lengths_to_offsets(lengths)
    assert offsets.dtype == np.int64
    assert offsets[0] == 0
    assert offsets_to_lengths(offsets).tolist() == lengths


@given(lod_lengths())
def test_lengths_table_round_trip_and_valid(table):
    lod = lod_from_lengths(table)
    assert lengths_from_lod(lod) == table
    validate_lod(lod, n_rows=sum(table[-1]))


@pytest.mark.parametrize("lod, rows, message", [
    ([[0, 3, 5, 10, 9]], 9, "level 0: offset[4]=9 < offset[3]=10 (offsets must not decrease)"),
    ([[1, 3]], 3, "level 0: offset[0]=1 (the first offset must be 0)"),
    ([[]], 0, "level 0: has 0 offsets; a level needs at least the offset 0"),
    ([[0, 2]], 3, "level 0: offset[1]=2 but the data has 3 rows"),
    ([[0, 2, 3], [0, 2, 4]], 4, "level 0: offset[2]=3 but level 1 has 2 sequences"),
    ([[0, 1.5]], 2, "level 0: offsets must be integers, got dtype float64"),
    ([[0, 1], [[0, 1]]], 1, "level 1: offsets must be 1-D"),
])
def test_validation_messages(lod, rows, message):
    from lodtool import LoDTensor

    with pytest.raises(LodValidationError) as err:
        LoDTensor(np.zeros(rows), lod=lod)
    assert message in str(err.value)
    assert isinstance(err.value, ValueError)


def plain_rule_problems(lod, n_rows, least=1):
    """The rules written out in plain Python, one loop per rule (``least=2``: Paddle's)."""
    bad = []
    for k, level in enumerate(lod):
        if len(level) < least or (level and level[0] != 0):
            bad.append(k)
        elif any(b < a for a, b in zip(level, level[1:])):
            bad.append(k)
    for k in range(len(lod) - 1):
        if lod[k] and lod[k][-1] != len(lod[k + 1]) - 1:
            bad.append(k)
    if lod and lod[-1] and lod[-1][-1] != n_rows:
        bad.append(len(lod) - 1)
    return sorted(set(bad))


@given(st.lists(st.lists(st.integers(-3, 12), min_size=0, max_size=7), min_size=1, max_size=3),
       st.integers(0, 12))
def test_validation_matches_plain_rules(lod, n_rows):
    levels = [np.array(level, dtype=np.int64) for level in lod]
    problems = find_lod_problems(levels, n_rows)
    assert sorted({p.level for p in problems}) == plain_rule_problems(lod, n_rows)
    paddle = find_lod_problems(levels, n_rows, paddle=True)
    assert sorted({p.level for p in paddle}) == plain_rule_problems(lod, n_rows, least=2)
    assert paddle_valid(levels, n_rows) == (not paddle)


@pytest.mark.parametrize("lod,rows", [([[0]], 0), ([[0], [0]], 0), ([[0, 0], [0]], 0), ([[0, 0, 0], [0]], 0),
                                      ([[0, 2, 2], [0, 0, 0], [0]], 0)])
def test_zero_sequences_are_valid_but_not_for_paddle(lod, rows):
    levels = [np.array(o, np.int64) for o in lod]
    validate_lod(levels, rows)
    assert LoDTensor(np.zeros(rows), lod=lod).lod == lod
    assert not paddle_valid(levels, rows)
    with pytest.raises(LodValidationError, match="at least 2 .one sequence."):
        check_paddle_lod(levels, rows)


def test_paddle_rule_is_unchanged_for_everything_else():
    good = [np.array([0, 2, 3]), np.array([0, 1, 1, 4])]
    assert paddle_valid(good, 4) and not paddle_valid(good, 5)
    check_paddle_lod(good, 4)
    with pytest.raises(LodValidationError, match="offset\\[2\\]=1 < offset\\[1\\]=2"):
        check_paddle_lod([np.array([0, 2, 1])], 1)


def test_blockwise_validation_equals_whole():
    rng = np.random.default_rng(1)
    offsets = np.concatenate([[0], np.cumsum(rng.integers(0, 5, 3000))])
    offsets[1777] = offsets[1776] - 1
    whole = find_lod_problems([offsets], int(offsets[-1]))
    blocks = find_lod_problems([iter([offsets[:1000], offsets[1000:1777], offsets[1777:]])], int(offsets[-1]))
    assert [str(p) for p in whole] == [str(p) for p in blocks]
    assert "offset[1777]" in str(whole[0])


def test_problem_list_is_capped():
    offsets = np.array([0] + [5, 4] * 50 + [100], dtype=np.int64)
    problems = find_lod_problems([offsets], 100, max_problems=3)
    assert len([p for p in problems if "must not decrease" in p.message]) == 3
    assert "more problem" in problems[-1].message


def test_paths():
    assert parse_path("2") == (2,)
    assert parse_path("<2,0>") == (2, 0)
    assert parse_path(" 2, -1 ") == (2, -1)
    assert parse_path("<>") == ()
    assert format_path((2, 0)) == "<2,0>"
    with pytest.raises(LodUsageError, match="bad branch path"):
        parse_path("a,b")


def test_resolve_and_extract_seed_slices():
    lod = lod_from_lengths([[3, 1, 2], [3, 2, 4, 1, 2, 3]])
    sizes = [len(o) for o in lod]
    read = memory_reader(lod)
    # the <2>-slice covers sentences 4..6 and words 10..15
    assert resolve_branch((2,), read, sizes) == (1, 4, 6)
    levels, r0, r1 = extract_range(1, 4, 6, read, sizes)
    assert [o.tolist() for o in levels] == [[0, 2, 5]] and (r0, r1) == (10, 15)
    assert resolve_branch((2, 0), read, sizes) == (2, 10, 12)
    assert resolve_branch((-1, -2), read, sizes) == (2, 10, 12)


@pytest.mark.parametrize("path, message", [
    ((3,), "level 0: index 3 is out of range for the top level, which has 3 sequences (valid: -3..2)"),
    ((-4,), "index -4 is out of range"),
    ((1, 1), "level 1: index 1 is out of range for branch <1>, which has 1 sequence (valid: -1..0)"),
    ((0, 0, 0), "has 3 indices but the tensor has 2 LoD level(s)"),
])
def test_resolve_errors(path, message):
    lod = lod_from_lengths([[3, 1, 2], [3, 2, 4, 1, 2, 3]])
    with pytest.raises(LodIndexError) as err:
        resolve_branch(path, memory_reader(lod), [len(o) for o in lod])
    assert message in str(err.value)


def test_corrupt_window_is_caught():
    # a window whose offsets point past the level below is rejected before use
    lod = [np.array([0, 2, 99]), np.array([0, 1, 2])]
    with pytest.raises(LodValidationError, match="past the 2 sequences of level 1"):
        resolve_branch((1,), memory_reader(lod), [3, 3])
