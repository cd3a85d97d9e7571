"""Random valid and flawed LoD tables against the plain-Python rule, in memory and in files.

``tests/test_lod.py`` compares the validator with the plain rule on small random
integers; these tables start valid and get one realistic flaw (a negative or
enormous offset, a decrease, a wrong first or last offset, a level too short),
and the same tables are written into containers, raw, to check what
``validate``, ``inspect``, ``load`` and the partial reads make of them.
``LODTOOL_TEST_PROFILE=long`` runs 10,000 examples of each.
"""

from __future__ import annotations

import os
import tempfile

import h5py
import numpy as np
import pytest
from hypothesis import given, strategies as st

from lodtool import LoDTensor
from lodtool.errors import LodError, LodValidationError
from lodtool.container import checksum
from lodtool.container import inspect_file, load, open_file, save, validate_file
from lodtool.lod import find_lod_problems, lod_from_lengths, validate_lod

from .strategies import lod_lengths
from .test_lod import plain_rule_problems

FLAWS = ("none", "negative", "decrease", "first", "last", "enormous", "short", "extra")


@st.composite
def flawed_tables(draw):
    """``(offsets per level, n_rows, flaw)``: a valid table, then at most one flaw in one level."""
    lod = [o.copy() for o in lod_from_lengths(draw(lod_lengths(max_levels=3, max_seqs=5, max_len=4)))]
    n_rows = int(lod[-1][-1])
    flaw = draw(st.sampled_from(FLAWS))
    k = draw(st.integers(0, len(lod) - 1))
    o = lod[k]
    j = draw(st.integers(0, len(o) - 1))
    if flaw == "negative":
        o[j] = -draw(st.sampled_from([1, 2, 1 << 40, 1 << 62]))
    elif flaw == "decrease" and len(o) > 1:
        j = max(j, 1)
        o[j] = o[j - 1] - draw(st.integers(1, 3))
    elif flaw == "first":
        o[0] = draw(st.sampled_from([1, 2, -1]))
    elif flaw == "last":
        o[-1] += draw(st.sampled_from([1, -1, 5]))
    elif flaw == "enormous":
        o[j:] = 1 << 62
    elif flaw == "short":
        lod[k] = o[: draw(st.integers(0, 1))]
    elif flaw == "extra":
        lod[k] = np.append(o, o[-1] + draw(st.integers(0, 2)))
    return lod, n_rows, flaw


def bad_levels(lod, n_rows) -> list[int]:
    return plain_rule_problems([[int(v) for v in level] for level in lod], n_rows)


@given(flawed_tables(), st.integers(1, 4))
def test_validator_matches_the_plain_rule(table, block):
    lod, n_rows, _ = table
    expected = bad_levels(lod, n_rows)
    problems = find_lod_problems(lod, n_rows)
    assert sorted({p.level for p in problems}) == expected
    # fed in blocks of any size, the check finds exactly the same problems
    blocks = [iter([o[i:i + block] for i in range(0, len(o), block)]) for o in lod]
    assert [str(p) for p in find_lod_problems(blocks, n_rows, level_sizes=[len(o) for o in lod])] == \
        [str(p) for p in problems]
    data = np.zeros(n_rows)
    if expected:
        with pytest.raises(LodValidationError) as err:
            LoDTensor(data, lod=lod)
        assert int(str(err.value).split(":")[0].removeprefix("level ")) in expected
    else:
        assert LoDTensor(data, lod=lod).lod == [o.tolist() for o in lod]


_TMP = tempfile.TemporaryDirectory(prefix="lodtool-props-")
_COUNT = iter(range(1 << 62))


def raw_container(lod, n_rows, dtype="int64") -> str:
    """A container whose offsets are written raw with h5py, bypassing every check of the writer."""
    path = os.path.join(_TMP.name, f"{next(_COUNT)}.lod.h5")
    depth = len(lod)
    save(path, LoDTensor(np.arange(n_rows or 1), recursive_sequence_lengths=[[1]] * (depth - 1) + [[n_rows or 1]]))
    with h5py.File(path, "r+") as f:
        group = f["tensor/lod"]
        for k, offsets in enumerate(lod):
            del group[str(k)]
            ds = group.create_dataset(str(k), data=np.asarray(offsets, dtype=dtype), maxshape=(None,), chunks=(64,))
            ds.attrs["checksum"] = checksum.format_digest(checksum.hash_dataset(ds))
        if not n_rows:
            data = f["tensor/data"]
            data.resize(0, axis=0)
            data.attrs["checksum"] = checksum.format_digest(checksum.hash_dataset(data))
    return path


@given(flawed_tables())
def test_files_with_flawed_offsets(table):
    lod, n_rows, _ = table
    expected = bad_levels(lod, n_rows)
    path = raw_container(lod, n_rows)
    report = validate_file(path)
    assert report.ok == (not expected), report
    assert {p.level for p in report.problems} <= set(expected)
    whole_reads = (load, inspect_file)
    for read in whole_reads:
        if expected:
            with pytest.raises(LodError):
                read(path)
        else:
            read(path)
    partial_reads_are_valid_or_refused(path, lod, n_rows, valid=not expected)


def partial_reads_are_valid_or_refused(path, lod, n_rows, valid: bool) -> None:
    """Every head, tail and branch is a valid tensor (the in-memory one, if the file is valid) or an error."""
    whole = LoDTensor(np.arange(n_rows), lod=lod) if valid else None
    with open_file(path) as f:
        try:
            t = f.tensor()
        except LodError:  # the layout alone shows the flaw (a level with fewer than 2 offsets)
            assert not valid
            return
        top = max(t.level_sizes[0] - 1, 0)
        reads = [("head", k) for k in (1, 2, top + 1)] + [("tail", k) for k in (1, top)] + \
            [("branch", i) for i in range(-1, min(top, 8))]
        for kind, arg in reads:
            try:
                part = getattr(t, kind)(arg)
            except LodError as exc:
                if whole is not None:  # a valid file refuses only what memory refuses too
                    with pytest.raises(type(exc)):
                        getattr(whole, kind)(arg)
                continue
            validate_lod(part.offsets, part.shape[0])
            assert part.shape[0] <= n_rows
            if whole is not None:
                assert part.equals(getattr(whole, kind)(arg))


@given(flawed_tables(), st.sampled_from(["int8", "int32", "uint16", "uint64"]))
def test_files_with_narrow_or_unsigned_offsets(table, dtype):
    """Readers take any integer dtype; values that wrap or do not fit make the LoD invalid, never wrong."""
    lod, n_rows, flaw = table
    stored = [np.asarray(o).astype(dtype) for o in lod]  # wraps, as a foreign writer might
    path = raw_container(stored, n_rows, dtype)
    beyond_int64 = any(s.dtype == np.uint64 and s.max(initial=0) >= 1 << 63 for s in stored)
    as_read = [s.astype(np.int64) for s in stored]
    expected = ["beyond int64"] if beyond_int64 else bad_levels(as_read, n_rows)
    assert validate_file(path).ok == (not expected)
    if expected:
        with pytest.raises(LodError):
            load(path)
    else:
        assert load(path).lod == [a.tolist() for a in as_read]
