"""tasks.slice / head / tail / tree: parts of a stored tensor, read lazily, with the stored tensor's name and size."""

from __future__ import annotations

import numpy as np
import pytest

from lodtool import LoDTensor, save, tasks
from lodtool.errors import LodIndexError, LodUsageError

ARTICLES = LoDTensor(np.arange(1, 16), recursive_sequence_lengths=[[3, 1, 2], [3, 2, 4, 1, 2, 3]])


@pytest.fixture
def stored(tmp_path):
    p = str(tmp_path / "a.lod.h5")
    save(p, {"tokens": ARTICLES})
    return p


@pytest.mark.parametrize("branch", ["2,0", "<2,0>", (2, 0), "<-1,0>"])
def test_slice_a_branch_in_any_spelling(stored, branch):
    part = tasks.slice(stored, branch)
    assert part.tensor.equals(ARTICLES.branch(2, 0)) and (part.name, part.total) == ("tokens", 3)


def test_slice_a_level_range(stored):
    assert tasks.slice(stored, level=1, start=2, stop=4).tensor.equals(ARTICLES.slice_level(1, 2, 4))


@pytest.mark.parametrize("kwargs", [{}, {"start": 0}, {"branch": "0", "level": 0, "start": 0, "stop": 1}])
def test_slice_needs_a_branch_or_a_range(stored, kwargs):
    with pytest.raises(LodUsageError):
        tasks.slice(stored, **kwargs)


def test_a_level_range_follows_python_slices(stored):
    part = tasks.slice(stored, level=1, start=4)  # an open end
    assert part.tensor.equals(ARTICLES.slice_level(1, 4, 6)) and part.taken == (4, 6) and part.level_count == 6
    assert tasks.slice(stored, level=1, start=-2, stop=99).taken == (4, 6)  # negatives count from the end; clamped
    assert tasks.slice(stored, level=0).taken == (0, 3)


def test_slice_out_of_range_is_an_index_error(stored):
    with pytest.raises(LodIndexError):
        tasks.slice(stored, "9")


def test_head_and_tail_count_from_each_end(stored):
    head, tail = tasks.head(stored, 2), tasks.tail(stored, 2)
    assert head.tensor.equals(ARTICLES.head(2)) and tail.tensor.equals(ARTICLES.tail(2))
    assert head.total == tail.total == 3


def test_tree_resolves_the_branch_and_counts_its_rows(stored):
    with tasks.tree(stored, branch="2") as view:
        assert (view.path, view.level, view.begin, view.end) == ((2,), 1, 4, 6)
        assert view.rows() == 5 and view.read().equals(ARTICLES.branch(2))
    with tasks.tree(stored) as view:
        assert (view.level, view.begin, view.end) == (0, 0, 3) and view.read().equals(ARTICLES)


def test_tree_of_a_zero_level_tensor_has_no_branches(tmp_path):
    p = str(tmp_path / "flat.lod.h5")
    save(p, LoDTensor(np.arange(4), []))
    with tasks.tree(p) as view:
        assert (view.level, view.begin, view.end) == (0, 0, 4)
    with pytest.raises(LodUsageError, match=r"no branches; leave out branch=\.\.\.$"):  # the library's words
        with tasks.tree(p, branch="1"):
            pass
