"""The committed v1.0 golden file: lodtool and plain h5py must read it, value for value, forever."""

from __future__ import annotations

import importlib.util
import os

import h5py
import numpy as np
import pytest

from lodtool.container import inspect_file, load, open_file, validate_file, verify_file

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
GOLDEN_V1 = os.path.join(DATA, "golden_v1.h5")

TOKENS = list(range(1, 16))
LABELS = [1, 2, 3, 1, 2, 1, 2, 2, 3, 1, 1, 2, 1, 2, 3]
LOD = [[0, 3, 4, 6], [0, 3, 5, 9, 10, 12, 15]]
PADDLE_LOD = [[0, 2, 3], [0, 2, 4, 7]]
PADDLE = [[i / 2, (i + 1) / 2] for i in range(0, 14, 2)]


def test_golden_v1_with_lodtool():
    with open_file(GOLDEN_V1) as f:
        assert f.format_version == "1.0"
        assert f.names == ["tokens", "labels", "paddle"]
        tokens = f["tokens"]
        assert (tokens.dtype, tokens.lod_level, tokens.level_names) == (np.dtype("int64"), 2, ("article", "sentence"))
        assert tokens.branch(2).to_nested() == [[11, 12], [13, 14, 15]]
        assert tokens.branch(2, 0).data.tolist() == [11, 12]
        assert tokens.slice_level(1, 2, 4).to_nested() == [[6, 7, 8, 9], [10]]
        assert f.shared_lod_with("labels") == ["tokens"]
    t = load(GOLDEN_V1, "tokens")
    assert t.lod == LOD and t.data.tolist() == TOKENS
    assert t.recursive_sequence_lengths == [[3, 1, 2], [3, 2, 4, 1, 2, 3]]
    labels = load(GOLDEN_V1, "labels")
    assert labels.dtype == np.int8 and labels.lod == LOD and labels.data.tolist() == LABELS
    paddle = load(GOLDEN_V1, "paddle")
    assert paddle.dtype == np.float32 and paddle.shape == (7, 2) and paddle.lod == PADDLE_LOD
    assert paddle.data.tolist() == PADDLE and paddle.level_names is None
    assert validate_file(GOLDEN_V1).ok
    assert verify_file(GOLDEN_V1) == []
    info = inspect_file(GOLDEN_V1)
    assert [lv["sequences"] for lv in info["tensors"][0]["levels"]] == [3, 6]


def test_golden_v1_with_plain_h5py():
    with h5py.File(GOLDEN_V1, "r") as f:
        assert f.attrs["lodtool_format"] == "lodtool" and f.attrs["lodtool_format_version"] == "1.0"
        assert f.attrs["lodtool_checksum"] == "xxh3_64"
        g = f["tokens"]
        assert int(g.attrs["lod_level"]) == 2 and list(g.attrs["level_names"]) == ["article", "sentence"]
        assert g.attrs["dtype"] == "<i8"
        assert g["data"][...].tolist() == TOKENS
        assert [g[f"lod/{k}"][...].tolist() for k in range(2)] == LOD
        assert g["lod/0"].dtype == np.int64
        assert f["labels/data"][...].tolist() == LABELS
        assert f["labels/lod/1"] == f["tokens/lod/1"]  # one dataset, two hard links
        assert f["paddle/data"][...].tolist() == PADDLE
        # the doc's example: branch <2> from three partial reads
        o0, o1, data = g["lod/0"], g["lod/1"], g["data"]
        s0, s1 = o0[2:4]
        words = o1[s0:s1 + 1]
        rows = data[words[0]:words[-1]]
        assert [rows[a - words[0]:b - words[0]].tolist() for a, b in zip(words[:-1], words[1:])] == \
            [[11, 12], [13, 14, 15]]


def test_golden_v1_checksums_by_hand():
    xxhash = pytest.importorskip("xxhash")
    with h5py.File(GOLDEN_V1, "r") as f:
        for name in ("tokens/data", "tokens/lod/0", "tokens/lod/1", "labels/data", "paddle/data", "paddle/lod/1"):
            ds = f[name]
            digest = xxhash.xxh3_64_hexdigest(np.ascontiguousarray(ds[...]).tobytes())
            assert ds.attrs["checksum"] == f"xxh3_64:{digest}", name


def test_generator_script_reproduces_the_contents(tmp_path):
    spec = importlib.util.spec_from_file_location("make_golden_v1", os.path.join(DATA, "make_golden_v1.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = str(tmp_path / "again.h5")
    module.main(out)
    for name in ("tokens", "labels", "paddle"):
        again, golden = load(out, name), load(GOLDEN_V1, name)
        assert again.equals(golden) and again.level_names == golden.level_names
    with h5py.File(out, "r") as a, h5py.File(GOLDEN_V1, "r") as b:
        for name in ("tokens/data", "tokens/lod/0", "labels/data", "paddle/data"):
            assert a[name].attrs["checksum"] == b[name].attrs["checksum"]
