"""``pack --dtype auto-int``: the narrowest integer dtype, widened while streaming, never losing a value."""

from __future__ import annotations

import json
import os
import tempfile

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from lodtool.cli.main import cli
from lodtool.container import load
from lodtool.container.writer import LodWriter, narrowest_int
from lodtool.errors import LodDtypeError
from lodtool.tasks import pack
from lodtool import LoDTensor

I64 = st.integers(-(1 << 63), (1 << 63) - 1)
values = st.one_of(st.integers(0, 300), st.integers(-200, 200), st.integers(-70_000, 70_000), I64)


def _expected(flat: list[int]) -> np.dtype:
    lo, hi = min(flat), max(flat)
    kinds = ["u1", "u2", "u4", "u8"] if lo >= 0 else ["i1", "i2", "i4", "i8"]
    for k in kinds:
        info = np.iinfo(np.dtype(k))
        if info.min <= lo and hi <= info.max:
            return np.dtype(k)
    raise AssertionError("unreachable for int64 values")


@settings(max_examples=60, deadline=None)
@given(seqs=st.lists(st.lists(values, min_size=1, max_size=6), min_size=1, max_size=25),
       chunk_bytes=st.sampled_from([16, 64, 1 << 20]))
def test_auto_int_keeps_every_value_in_the_narrowest_dtype(seqs, chunk_bytes):
    with tempfile.TemporaryDirectory() as d:
        src, out = os.path.join(d, "v.jsonl"), os.path.join(d, "v.lod.h5")
        with open(src, "w") as f:
            f.write("".join(json.dumps(s) + "\n" for s in seqs))
        r = pack([src], out, dtype="auto-int", chunk_bytes=chunk_bytes)  # small chunks: widened while streaming
        got = load(out)
        flat = [v for s in seqs for v in s]
        assert got.dtype == _expected(flat) == r.dtype
        assert got.data.astype(object).tolist() == flat
        assert got.lod == [np.cumsum([0] + [len(s) for s in seqs]).tolist()]
        assert r.bytes_saved == len(flat) * (8 - got.dtype.itemsize)


def test_widening_rewrites_what_was_already_written(tmp_path):
    path = str(tmp_path / "w.h5")
    big = np.arange(200_000, dtype=np.int64) % 200  # several chunks of uint8 first
    with LodWriter(path) as w:
        tw = w.add_tensor("t", dtype="auto-int", lod_level=1)
        tw.append(LoDTensor(big, [[0, big.size]]))
        assert tw.dtype == np.uint8
        tw.append(LoDTensor(np.array([-1, 40_000]), [[0, 2]]))
        assert tw.dtype == np.int32
    got = load(path)
    assert got.dtype == np.int32 and np.array_equal(got.data, np.concatenate([big, [-1, 40_000]]))


def test_auto_int_refuses_floats_and_impossible_ranges(tmp_path):
    with pytest.raises(LodDtypeError, match="auto-int takes integers"):
        with LodWriter(str(tmp_path / "f.h5")) as w:
            w.add_tensor("t", dtype="auto-int", lod_level=1).append(LoDTensor(np.array([1.5]), [[0, 1]]))
    assert not (tmp_path / "f.h5").exists()
    with pytest.raises(LodDtypeError):
        narrowest_int(-1, 1 << 64 - 1)


def test_the_cli_reports_the_bytes_saved(tmp_path):
    src = tmp_path / "ids.jsonl"
    src.write_text("[[1, 2], [300]]\n[[4, 5, 60000]]\n")
    out = tmp_path / "ids.lod.h5"
    result = CliRunner().invoke(cli, ["pack", str(src), "-o", str(out), "--dtype", "auto-int", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["dtype"] == "uint16" and summary["bytes_saved"] == 6 * 6
    result = CliRunner().invoke(cli, ["pack", str(src), "-o", str(out), "--dtype", "auto-int", "--force"])
    from lodtool.container.reader import open_file

    with open_file(out) as f:
        on_disk = f.tensor("tensor").storage_size
    assert summary["stored_bytes"] > 0
    assert f"uint16 holds every value: 36 bytes less than int64 before compression, {on_disk:,} bytes on disk" \
        in result.output
