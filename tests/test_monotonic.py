"""The monotonicity checks (compiled; NumPy in cache-sized pieces, on two threads for long levels) agree
with a plain NumPy comparison, and validation finds the same problems with each."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import lodtool.lod as lod
from lodtool._monotonic import first_decrease


def _numpy_first_decrease(o: np.ndarray) -> int:
    bad = np.flatnonzero(o[1:] < o[:-1])
    return int(bad[0]) if bad.size else -1


@given(st.lists(st.integers(-3, 3), max_size=10_000), st.integers(0, 9_000))
def test_first_decrease_matches_numpy(steps, shift):
    o = np.cumsum(np.asarray(steps, dtype=np.int64) + 1, dtype=np.int64)  # mostly increasing, some drops
    o = o[shift % max(len(o), 1):]
    assert first_decrease(o) == _numpy_first_decrease(o)


@pytest.mark.parametrize("where", [3, 99_999, 100_000, 100_001, 150_001, 199_998])
@pytest.mark.parametrize("threaded_min", [2, 1 << 62])
def test_validation_uses_the_kernel_and_reports_the_same_problem(monkeypatch, where, threaded_min):
    import numba  # noqa: F401 (the compiled check runs only where Numba is loaded)

    o = np.arange(200_000, dtype=np.int64)
    o[where] = 1
    monkeypatch.setattr(lod, "_THREADED_MIN", threaded_min)  # 2: the halves on two threads
    monkeypatch.setattr(lod, "_KERNEL_MIN", 1)
    with_kernel = [str(p) for p in lod.find_lod_problems([o], n_rows=199_999)]
    monkeypatch.setattr(lod, "_KERNEL_MIN", 1 << 62)
    without = [str(p) for p in lod.find_lod_problems([o], n_rows=199_999)]
    assert with_kernel == without
    assert with_kernel[0] == f"level 0: offset[{where}]=1 < offset[{where - 1}]={where - 1} (offsets must not decrease)"


def _numpy_only(monkeypatch, compare_block: int, threaded_min: int) -> None:
    """Validation as in a process without Numba, with small pieces so that small arrays cross them."""
    monkeypatch.setattr(lod, "_KERNEL_MIN", 1 << 62)
    monkeypatch.setattr(lod, "_COMPARE_BLOCK", compare_block)
    monkeypatch.setattr(lod, "_THREADED_MIN", threaded_min)


@given(st.lists(st.integers(-3, 3), min_size=2, max_size=3_000), st.sampled_from([1, 2, 7, 64]),
       st.sampled_from([2, 100, 1 << 30]))
def test_the_numpy_check_finds_a_decrease_wherever_it_is(steps, compare_block, threaded_min):
    o = np.cumsum(np.asarray(steps, dtype=np.int64) + 1, dtype=np.int64)
    with pytest.MonkeyPatch.context() as mp:
        _numpy_only(mp, compare_block, threaded_min)
        assert lod._may_decrease(o) == (_numpy_first_decrease(o) >= 0)


@pytest.mark.parametrize("where", [1, 99, 100, 101, 4_999, 5_000, 5_001, 9_998])
@pytest.mark.parametrize("max_problems", [1, 3])
def test_validation_without_numba_reports_what_a_plain_comparison_finds(monkeypatch, where, max_problems):
    o = np.arange(10_000, dtype=np.int64)
    o[where] = o[where - 1] - 1  # one drop, in either half, at or beside a piece's edge
    expected = [str(p) for p in lod.find_lod_problems([o], n_rows=9_999, max_problems=max_problems)]
    _numpy_only(monkeypatch, 100, 2)
    assert [str(p) for p in lod.find_lod_problems([o], n_rows=9_999, max_problems=max_problems)] == expected
    assert expected[0] == f"level 0: offset[{where}]={where - 2} < offset[{where - 1}]={where - 1} " \
                          "(offsets must not decrease)"


def test_many_decreases_are_counted_past_the_reported_ones(monkeypatch):
    o = np.arange(3 * (1 << 20), dtype=np.int64)[::-1].copy()  # decreasing everywhere: every block reports
    o[0] = 0
    _numpy_only(monkeypatch, 1 << 17, 1 << 20)
    problems = [str(p) for p in lod.find_lod_problems([o], n_rows=1, max_problems=3)]
    assert problems[:3] == [f"level 0: offset[{i}]={len(o) - 1 - i} < offset[{i - 1}]={len(o) - i}"
                            " (offsets must not decrease)" for i in (2, 3, 4)]
    assert problems[3] == f"level 0: ... and {len(o) - 2 - 3} more problem(s)"
