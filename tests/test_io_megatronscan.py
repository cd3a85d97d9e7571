"""The one-pass consistency check of an MMIDIDX index: the kernel and NumPy against a plain definition."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lodtool.io._megatronscan import arrays_consistent


def _plain(lengths, pointers, docs, itemsize) -> bool:
    n = len(lengths)
    chained = np.array_equal(pointers[1:], pointers[:-1] + lengths[:-1].astype(np.int64) * itemsize)
    return bool((lengths >= 0).all() and (n == 0 or pointers[0] == 0) and chained
                and (docs is None or ((len(docs) == 0 or docs[0] == 0) and (np.diff(docs) >= 0).all())))


@st.composite
def indexes(draw):
    """Consistent arrays, then (often) one entry of one array changed."""
    lengths = np.array(draw(st.lists(st.integers(0, 50), max_size=40)), np.int32)
    itemsize = draw(st.sampled_from([1, 2, 4, 8]))
    pointers = np.concatenate([[0], np.cumsum(lengths.astype(np.int64) * itemsize)[:-1]]).astype(np.int64)
    pointers = pointers[:len(lengths)]
    docs = None
    if draw(st.booleans()):
        cuts = sorted(draw(st.lists(st.integers(0, len(lengths)), max_size=10)))
        docs = np.array([0, *cuts, len(lengths)], np.int64)
    which = draw(st.sampled_from(["none", "lengths", "pointers", "docs"]))
    target = {"lengths": lengths, "pointers": pointers, "docs": docs}.get(which)
    if target is not None and len(target):
        i = draw(st.integers(0, len(target) - 1))
        target[i] += draw(st.integers(-60, 60))
    return lengths, pointers, docs, itemsize


@given(indexes())
def test_kernel_and_numpy_agree_with_the_definition(index):
    want = _plain(*index)
    assert arrays_consistent(*index, compiled=False) == want
    assert arrays_consistent(*index, compiled=True) == want


@pytest.mark.parametrize("array", ["lengths", "pointers", "docs"])
@pytest.mark.parametrize("at", [1, (1 << 14) - 1, 1 << 14, (1 << 17) - 1, 1 << 17, 300_000 - 1])
def test_one_bad_entry_anywhere_in_a_long_index_is_seen(array, at):
    """Past the first block of either path, and at the last entry."""
    lengths = np.full(300_000, 3, np.int32)
    pointers = np.arange(300_000, dtype=np.int64) * 12
    docs = np.arange(300_001, dtype=np.int64)
    for compiled in (False, True):
        assert arrays_consistent(lengths, pointers, docs, 4, compiled=compiled)
    {"lengths": lengths, "pointers": pointers, "docs": docs}[array][at] = -1
    for compiled in (False, True):
        assert not arrays_consistent(lengths, pointers, docs, 4, compiled=compiled)


def _chain(lengths, itemsize, unsigned=False) -> np.ndarray:
    """Pointers chained from 0 by ``lengths`` (read as uint32 with ``unsigned``)."""
    widened = lengths.view(np.uint32).astype(np.int64) if unsigned else lengths.astype(np.int64)
    return np.concatenate([[0], np.cumsum(widened * itemsize)[:-1]]).astype(np.int64)


@pytest.mark.parametrize("lengths, unsigned, want", [
    ([3, -1, 2], False, False),  # pointers that follow a negative length go down
    ([2, -(2**31) + 5, 2], True, False),  # pointers that follow it read unsigned: past itemsize * 2**31
    ([2**31 - 1, 2**31 - 1, 5], False, True),  # the last pointer past that bound, every length fine
    ([2, 3, -4], False, False),  # the last length, which no pointer follows
    ([7], False, True),
])
def test_negative_lengths_are_found_whatever_the_pointers_follow(lengths, unsigned, want):
    """The NumPy path reads the lengths unsigned and relies on the chain below itemsize * 2**31 of pointers."""
    lengths = np.array(lengths, np.int32)
    pointers = _chain(lengths, 4, unsigned)
    docs = np.array([0, len(lengths)], np.int64)
    assert _plain(lengths, pointers, docs, 4) == want
    for compiled in (False, True):
        assert arrays_consistent(lengths, pointers, docs, 4, compiled=compiled) == want
