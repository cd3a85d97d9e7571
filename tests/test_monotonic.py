"""The compiled monotonicity check agrees with NumPy, and validation finds the same problems with it."""

from __future__ import annotations

import numpy as np
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


def test_validation_uses_the_kernel_and_reports_the_same_problem(monkeypatch):
    import numba  # noqa: F401 (the compiled check runs only where Numba is loaded)

    o = np.arange(200_000, dtype=np.int64)
    o[150_001] = 3
    monkeypatch.setattr(lod, "_KERNEL_MIN", 1)
    with_kernel = [str(p) for p in lod.find_lod_problems([o], n_rows=199_999)]
    monkeypatch.setattr(lod, "_KERNEL_MIN", 1 << 62)
    without = [str(p) for p in lod.find_lod_problems([o], n_rows=199_999)]
    assert with_kernel == without
    assert with_kernel[0] == "level 0: offset[150001]=3 < offset[150000]=150000 (offsets must not decrease)"
