"""The chunk planner: ranges of whole top-level sequences and windows of row offsets, from offsets alone."""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from lodtool import LoDTensor, save
from lodtool.container import open_file
from lodtool.planner import last_true, row_offset_windows, runs, sequence_ranges
from lodtool.ops._util import row_offsets
from tests.strategies import lod_tensors

SETTINGS = settings(max_examples=40, deadline=None)


def _reader(t: LoDTensor):
    return lambda level, start, stop: t.offsets[level][start:stop]


@SETTINGS
@given(lod_tensors(min_levels=1, max_levels=3, allow_empty=True), st.integers(1, 12))
def test_sequence_ranges_cover_every_sequence_in_valid_chunks(t, max_rows):
    count = len(t.offsets[0]) - 1
    ranges = list(sequence_ranges(_reader(t), t.lod_level, count, max_rows))
    assert [a for a, _ in ranges] == [0] + [b for _, b in ranges[:-1]] and (not ranges or ranges[-1][1] == count)
    rows = row_offsets(t.offsets, 0)
    for a, b in ranges:
        assert b > a
        chunk = t.slice_level(0, a, b)  # raises if a level below the top were left empty
        if b - a > 1 and all(len(o) > 1 for o in chunk.offsets[1:]):
            # more than one sequence only when they fit, or when empty neighbours had to join
            assert rows[b] - rows[a] <= max_rows or any(rows[i + 1] == rows[i] for i in range(a, b))
    assert sum(t.slice_level(0, a, b).shape[0] for a, b in ranges) == t.shape[0]


def test_sequence_ranges_keep_an_oversized_sequence_whole():
    t = LoDTensor(np.arange(10), recursive_sequence_lengths=[[1, 7, 2]])
    assert list(sequence_ranges(_reader(t), 1, 3, max_rows=3)) == [(0, 1), (1, 2), (2, 3)]


def test_runs_respect_every_cost():
    assert list(runs([np.array([2, 2, 5, 1, 1])], 4)) == [(0, 2), (2, 3), (3, 5)]
    assert list(runs([np.array([1, 1, 1]), np.array([0, 3, 1])], 3)) == [(0, 2), (2, 3)]
    assert list(runs([np.zeros(0, np.int64)], 3)) == []


def test_last_true_gallops_to_the_boundary():
    assert [last_true(0, 50, lambda i, k=k: i <= k) for k in (0, 1, 17, 50)] == [0, 1, 17, 50]


@SETTINGS
@given(lod_tensors(min_levels=2, max_levels=3, allow_empty=True))
def test_row_offset_windows_map_every_level_down_to_the_rows(x):
    with tempfile.TemporaryDirectory() as d:
        save(Path(d) / "x.h5", x)
        with open_file(Path(d) / "x.h5") as f:
            t = f.tensor()
            for level in range(x.lod_level):
                expected = row_offsets(x.offsets, level)
                for window in range(1, 6):
                    got = list(row_offset_windows(t, level, window))
                    assert all(len(w) <= window + 1 for w in got)
                    assert all(a[-1] == b[0] for a, b in itertools.pairwise(got))  # consecutive windows share an entry
                    assert np.concatenate([got[0]] + [w[1:] for w in got[1:]]).tolist() == expected.tolist()


def test_empty_sequences_are_cut_into_bounded_ranges():
    levels = [np.zeros(100_001, np.int64)]  # 100,000 empty sequences: no rows at all
    read = lambda level, start, stop: levels[level][start:stop]  # noqa: E731
    ranges = list(sequence_ranges(read, 1, 100_000, max_rows=1000))
    assert len(ranges) == 100 and all(b - a == 1000 for a, b in ranges)
    assert ranges[0][0] == 0 and ranges[-1][1] == 100_000
