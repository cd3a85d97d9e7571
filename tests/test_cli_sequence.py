"""The sequence-editing commands (concat, seq-slice, erase, enumerate, reshape, lod-reset): results, options and
clear one-line errors (nothing written when a check fails)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from lodtool import LoDTensor, load, save
from lodtool.cli.main import cli
from lodtool.ops import (
    sequence_enumerate,
)
from tests.test_ops_common import same_tensor


def run(*args, code=0):
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert result.exit_code == code, result.output
    return result


@pytest.fixture
def ids(tmp_path):
    p = tmp_path / "ids.lod.h5"
    save(p, LoDTensor(np.array([2, 2, 6, 1, 3, 9, 6, 1, 0, 1], np.int64), [[0, 3, 6, 10]]))
    return p


def test_erase(tmp_path, ids):
    r = run("erase", ids, "--tokens", "2,3,5", "-o", tmp_path / "out.h5", "--json")
    assert json.loads(r.stdout)["rows"] == 7
    out = load(tmp_path / "out.h5")
    assert out.data.tolist() == [6, 1, 9, 6, 1, 0, 1] and out.lod == [[0, 1, 3, 7]]
    np.save(tmp_path / "tokens.npy", np.array([6, 1]))
    run("erase", ids, "--tokens", tmp_path / "tokens.npy", "-o", tmp_path / "out2.h5")
    assert load(tmp_path / "out2.h5").to_nested() == [[2, 2], [3, 9], [0]]


def test_enumerate(tmp_path, ids):
    run("enumerate", ids, "--win-size", "2", "-o", tmp_path / "out.h5")
    out = load(tmp_path / "out.h5")
    assert same_tensor(out, sequence_enumerate(load(ids), 2))
    r = run("enumerate", ids, "--win-size", "1", "-o", tmp_path / "bad.h5", code=2)
    assert "win_size must be an integer >= 2" in r.output and not (tmp_path / "bad.h5").exists()


def test_seq_slice(tmp_path, ids):
    run("seq-slice", ids, "--offset", "1", "--length", "2", "-o", tmp_path / "a.h5")
    assert load(tmp_path / "a.h5").to_nested() == [[2, 6], [3, 9], [1, 0]]
    run("seq-slice", ids, "--offset", "0,1,2", "--length", "1,1,2", "-o", tmp_path / "b.h5")
    assert load(tmp_path / "b.h5").to_nested() == [[2], [3], [0, 1]]
    r = run("seq-slice", ids, "--offset", "0", "--length", "4", "-o", tmp_path / "c.h5", code=1)
    assert "runs past its end" in r.output and not (tmp_path / "c.h5").exists()
    run("seq-slice", ids, "--offset", "0", "--length", "4", "--clip", "-o", tmp_path / "c.h5")
    assert load(tmp_path / "c.h5").to_nested() == [[2, 2, 6], [1, 3, 9], [6, 1, 0, 1]]
    r = run("seq-slice", ids, "--offset", "0,1", "--length", "1", "-o", tmp_path / "d.h5", code=1)
    assert "offset has 2 entries but the tensor has 3" in r.output
    r = run("seq-slice", ids, "--offset", "x", "--length", "1", "-o", tmp_path / "d.h5", code=2)
    assert "--offset" in r.output


def test_concat(tmp_path, ids):
    other = tmp_path / "other.h5"
    save(other, {"words": LoDTensor(np.array([7, 8], np.int64), [[0, 0, 2, 2]])})
    run("concat", ids, f"{other}:words", ids, "-o", tmp_path / "out.h5")
    out = load(tmp_path / "out.h5")
    assert out.to_nested() == [[2, 2, 6, 2, 2, 6], [1, 3, 9, 7, 8, 1, 3, 9], [6, 1, 0, 1, 6, 1, 0, 1]]
    r = run("concat", ids, "-o", tmp_path / "one.h5", code=2)
    assert "at least two" in r.output
    save(tmp_path / "f.h5", LoDTensor(np.zeros(10), [[0, 3, 6, 10]]))
    r = run("concat", ids, tmp_path / "f.h5", "-o", tmp_path / "bad.h5", code=1)
    assert "dtype" in r.output and "f.h5:tensor" in r.output and not (tmp_path / "bad.h5").exists()


def test_reshape(tmp_path):
    save(tmp_path / "x.h5", LoDTensor(np.arange(1, 13, dtype=np.float32).reshape(6, 2), [[0, 2, 6]]))
    run("reshape", tmp_path / "x.h5", "--new-dim", "4", "-o", tmp_path / "out.h5")
    out = load(tmp_path / "out.h5")
    assert out.lod == [[0, 1, 3]] and out.data.tolist() == [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]]
    r = run("reshape", tmp_path / "x.h5", "--new-dim", "3", "-o", tmp_path / "bad.h5", code=1)
    assert "--new-dim 3" in r.output and not (tmp_path / "bad.h5").exists()


def test_lod_reset(tmp_path, ids):
    run("lod-reset", ids, "--target-lod", "0,4,7,10", "-o", tmp_path / "a.h5")
    out = load(tmp_path / "a.h5")
    assert out.lod == [[0, 4, 7, 10]] and out.data.tolist() == load(ids).data.tolist()
    save(tmp_path / "y.h5", LoDTensor(np.zeros(10), [[0, 1, 2], [0, 5, 10]]))
    run("lod-reset", ids, "--like", tmp_path / "y.h5", "-o", tmp_path / "b.h5")
    assert load(tmp_path / "b.h5").lod == [[0, 1, 2], [0, 5, 10]]
    np.save(tmp_path / "level.npy", np.arange(11))
    run("lod-reset", ids, "--append", "--target-lod", tmp_path / "level.npy", "-o", tmp_path / "c.h5")
    assert load(tmp_path / "c.h5").lod == [[0, 3, 6, 10], list(range(11))]
    r = run("lod-reset", ids, "--append", "--target-lod", "0,10", "-o", tmp_path / "d.h5", code=1)
    assert "appended level does not fit" in r.output and not (tmp_path / "d.h5").exists()
    r = run("lod-reset", ids, "-o", tmp_path / "d.h5", code=2)
    assert "--target-lod or --like" in r.output


@pytest.mark.parametrize("args", [["erase", "--tokens", "1"], ["enumerate", "--win-size", "2"],
                                  ["reshape", "--new-dim", "1"], ["seq-slice", "--offset", "0", "--length", "0"],
                                  ["lod-reset", "--target-lod", "0,1"]])
def test_missing_input_is_one_line(tmp_path, args):
    r = run(args[0], tmp_path / "nope.h5", *args[1:], "-o", tmp_path / "out.h5", code=1)
    assert "no such file" in r.output and "Traceback" not in r.output
