"""Issue 17's edges end to end: the empty value (zero sequences) through every command; pack-plan's unit."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from lodtool import LoDTensor, load, save
from lodtool.container import open_file
from lodtool.cli.main import cli
from lodtool.lod import check_paddle_lod, paddle_valid
from lodtool.ops import sequence_pool


def run(*args, input=None):
    result = CliRunner().invoke(cli, [str(a) for a in args], input=input)
    assert "Traceback" not in (result.stderr or ""), result.stderr
    return result


@pytest.fixture
def docs(tmp_path):
    """Three documents; the second has no sentences."""
    src = tmp_path / "docs.json"
    src.write_text("[[[1, 2], [3]], [], [[4]]]")
    out = tmp_path / "docs.lod.h5"
    assert run("pack", src, "-o", out).exit_code == 0
    return out


@pytest.fixture
def empty(tmp_path):
    """A tensor of zero documents (offsets [0] at both levels)."""
    src = tmp_path / "empty.json"
    src.write_text("[]")
    out = tmp_path / "empty.lod.h5"
    result = run("pack", src, "--lod-level", "2", "--dtype", "int32", "-o", out)
    assert result.exit_code == 0, result.output
    return out


def test_a_document_with_no_sentences_slices_to_an_empty_list(docs):
    result = run("slice", docs, "1")
    assert result.exit_code == 0 and json.loads(result.stdout) == []
    assert json.loads(run("slice", docs, "0").stdout) == [[1, 2], [3]]
    with open_file(docs) as f:
        part = f.tensor().branch(1)
    assert part.lod == [[0]] and part.shape == (0,) and part.to_nested() == []
    assert load(docs).branch(1).to_nested() == []


def test_empty_input_needs_the_lod_level(tmp_path):
    src = tmp_path / "empty.json"
    src.write_text("[]")
    result = run("pack", src, "-o", tmp_path / "x.lod.h5")
    assert result.exit_code == 1 and "--lod-level" in result.stderr and not (tmp_path / "x.lod.h5").exists()


def test_zero_sequences_pack_inspect_validate(empty):
    t = load(empty)
    assert t.lod == [[0], [0]] and t.shape == (0,) and t.dtype == np.int32 and t.to_nested() == []
    info = json.loads(run("inspect", empty, "--json").stdout)
    assert [lv["sequences"] for lv in info["tensors"][0]["levels"]] == [0, 0]
    (report,) = json.loads(run("validate", "--json", empty).stdout)
    assert report["ok"] is True and report["paddle_valid"] is False  # valid; Paddle's set_lod would refuse it
    assert run("validate", empty).exit_code == 0 and run("verify", empty).exit_code == 0


def test_paddle_valid_in_validate_json(docs, tmp_path):
    (report,) = json.loads(run("validate", "--json", docs).stdout)
    assert report["ok"] is True and report["paddle_valid"] is True
    one_empty_level = tmp_path / "e.lod.h5"
    save(one_empty_level, LoDTensor(np.zeros(0), [[0, 0], [0]]))  # one document, no sentences
    (report,) = json.loads(run("validate", "--json", one_empty_level).stdout)
    assert report["ok"] is True and report["paddle_valid"] is False
    assert not paddle_valid([np.array([0, 0]), np.array([0])], 0)
    with pytest.raises(ValueError):
        check_paddle_lod([np.array([0, 0]), np.array([0])], 0)


def test_every_operator_command_on_zero_sequences(empty, tmp_path):
    def out(name):
        return tmp_path / name

    assert run("pool", empty, "--type", "max", "-o", out("pool.lod.h5")).exit_code == 0
    pooled = load(out("pool.lod.h5"))
    assert pooled.lod == [[0]] and pooled.shape == (0,) and pooled.dtype == np.int32
    for command in ("softmax", "reverse"):
        result = run(command, empty, "-o", out(f"{command}.lod.h5"))
        assert result.exit_code == 0, result.output
        assert load(out(f"{command}.lod.h5")).lod == [[0], [0]]
    assert run("pad", empty, "-o", out("pad.npz")).exit_code == 0
    with np.load(out("pad.npz")) as arrays:
        assert arrays["padded"].shape == (0, 0) and arrays["lengths"].shape == (0,) and arrays["mask"].shape == (0, 0)
    assert run("unpad", out("pad.npz"), "-o", out("unpad.lod.h5")).exit_code == 0
    assert load(out("unpad.lod.h5")).lod == [[0]]
    plan = json.loads(run("pack-plan", empty, "--json").stdout)
    assert plan == {"sorted_indices": [], "unsorted_indices": [], "lengths": [], "batch_sizes": []}
    assert run("unpack", empty, "--to", "json").stdout.strip() == "[]"
    assert run("slice", empty, "--level", "0", "--range", "0:0").stdout.strip() == "[]"
    assert run("tree", empty).exit_code == 0


def test_expand_where_every_repeat_is_zero(tmp_path):
    x, y = tmp_path / "x.lod.h5", tmp_path / "y.lod.h5"
    save(x, LoDTensor(np.arange(4.0), [[0, 1, 4]]))
    save(y, LoDTensor(np.zeros(0), [[0, 0, 0]]))
    result = run("expand", x, y, "-o", tmp_path / "out.lod.h5")
    assert result.exit_code == 0, result.output
    out = load(tmp_path / "out.lod.h5")
    assert out.lod == [[0]] and out.shape == (0,)


def test_pack_plan_above_the_last_level_counts_sequences(tmp_path):
    src = tmp_path / "a.json"
    src.write_text("[[[1, 2, 3], [4]], [[5]], [[6, 7], [8], [9, 10]]]")
    out = tmp_path / "a.lod.h5"
    assert run("pack", src, "-o", out).exit_code == 0
    plan = json.loads(run("pack-plan", out, "--level", "0", "--json").stdout)
    assert plan["lengths"] == [2, 1, 3] and plan["sorted_indices"] == [2, 0, 1] and plan["batch_sizes"] == [3, 2, 1]
    plan = json.loads(run("pack-plan", out, "--level", "1", "--json").stdout)
    assert plan["lengths"] == [3, 1, 1, 2, 1, 2]


def test_pool_pad_value_on_float64_goes_through_float32(tmp_path):
    src = tmp_path / "x.lod.h5"
    save(src, LoDTensor(np.array([1.0, 2.0]), [[0, 0, 2]]))
    result = run("pool", src, "--type", "sum", "--pad-value", "0.3", "-o", tmp_path / "out.lod.h5")
    assert result.exit_code == 0, result.output
    assert load(tmp_path / "out.lod.h5").data.tolist() == [0.30000001192092896, 3.0]  # as Paddle's float attribute


def test_pool_index_is_paddles_max_index_over_a_streamed_file(tmp_path):
    rng = np.random.default_rng(5)
    lengths = rng.integers(0, 5, 3000).tolist()  # about 6000 rows: 6 chunks of 1024 rows at 64 KiB
    x = LoDTensor(rng.integers(0, 9, (sum(lengths), 2)).astype(np.float32), recursive_sequence_lengths=[lengths])
    src = tmp_path / "x.lod.h5"
    save(src, x)
    want, want_index = sequence_pool(x, "max", return_index=True)
    out = tmp_path / "out.lod.h5"
    # a small memory budget: many chunks, whose row indices must count from the file's first row
    result = run("pool", src, "--type", "max", "--index", "--max-memory", "64KiB", "-o", out)
    assert result.exit_code == 0, result.output
    assert load(out, "tensor").equals(want)
    index = load(out, "tensor_index")
    assert index.dtype == np.int32 and np.array_equal(index.data, want_index) and index.lod == want.lod
    result = run("pool", src, "--type", "sum", "--index", "-o", tmp_path / "bad.lod.h5")
    assert result.exit_code != 0 and "MaxIndex" in result.stderr and not (tmp_path / "bad.lod.h5").exists()
