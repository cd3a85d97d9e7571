"""Token metadata through the commands: ``pack`` records it, ``inspect`` shows it, ``validate`` checks the ids,
and every command that copies a tensor keeps it."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from click.testing import CliRunner

from lodtool.cli.main import cli
from lodtool.container import open_file
from lodtool.container.shards import open_sharded

GOLDEN = os.path.join(os.path.dirname(__file__), "data", "llm")


def run(*args, input=None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=input)


def packed(tmp_path, *extra):
    src = tmp_path / "ids.jsonl"
    src.write_text("[1, 2, 9]\n[3]\n[4, 5]\n")
    out = tmp_path / "ids.lod.h5"
    result = run("pack", src, "-o", out, "--dtype", "uint16", "--vocab-size", 10, "--eos-id", 9, "--pad-id", 0,
                 "--tokenizer-name", "tiny", *extra)
    assert result.exit_code == 0, result.output
    return out


def tokens_of(path, name=None):
    with open_file(path) as f:
        return f.tensor(name).tokens


def test_pack_records_the_options_and_inspect_shows_them(tmp_path):
    out = packed(tmp_path)
    info = tokens_of(out)
    assert (info.vocab_size, info.eos_id, info.pad_id, info.bos_id, info.tokenizer_name) == (10, 9, 0, None, "tiny")
    text = run("inspect", out).output
    assert "tokens: vocabulary 10, eos 9, pad 0, tokenizer tiny" in text
    entry = json.loads(run("inspect", "--json", out).output)["tensors"][0]["tokens"]
    assert entry["vocab_size"] == 10 and entry["tokenizer_json_bytes"] is None


def test_pack_refuses_an_id_option_past_the_vocabulary_and_a_dtype_too_narrow(tmp_path):
    src = tmp_path / "ids.jsonl"
    src.write_text("[1]\n")
    result = run("pack", src, "-o", tmp_path / "x.h5", "--vocab-size", 5, "--eos-id", 5)
    assert result.exit_code != 0 and "eos_id 5 is not under the vocabulary size 5" in result.stderr
    result = run("pack", src, "-o", tmp_path / "x.h5", "--vocab-size", 300, "--dtype", "uint8")
    assert result.exit_code != 0 and "--dtype uint8: dtype uint8 holds ids up to 255" in result.stderr
    assert not (tmp_path / "x.h5").exists()


def test_validate_names_the_first_id_past_the_vocabulary(tmp_path):
    src = tmp_path / "ids.jsonl"
    src.write_text("[1, 2]\n[7, 3]\n")
    out = tmp_path / "ids.lod.h5"
    assert run("pack", src, "-o", out, "--vocab-size", 5).exit_code == 0
    result = run("validate", out)
    assert result.exit_code == 1
    assert "index 2: data row 2: token id 7 is not under the vocabulary size 5" in result.output


def test_slice_head_operators_and_shard_keep_the_metadata(tmp_path):
    out = packed(tmp_path)
    want = tokens_of(out)
    assert run("slice", out, "0", "-o", tmp_path / "s.h5").exit_code == 0
    assert run("head", out, "-n", 2, "-o", tmp_path / "h.h5").exit_code == 0
    assert run("reverse", out, "-o", tmp_path / "r.h5").exit_code == 0
    assert run("concat", out, out, "-o", tmp_path / "c.h5").exit_code == 0
    for name in ("s", "h", "r", "c"):
        assert tokens_of(tmp_path / f"{name}.h5") == want, name
    result = run("shard", out, "-o", f"{tmp_path / 'folder'}/", "--shard-size", 16)
    assert result.exit_code == 0, result.output
    with open_sharded(tmp_path / "folder") as f:
        assert f.tensor().tokens == want
    assert "tokens: vocabulary 10" in run("inspect", tmp_path / "folder").output
    assert run("validate", tmp_path / "folder").exit_code == 0


def test_a_value_changing_operator_drops_the_metadata(tmp_path):
    out = packed(tmp_path)
    assert run("softmax", out, "-o", tmp_path / "p.h5").exit_code == 0
    assert tokens_of(tmp_path / "p.h5") is None


def test_pack_of_a_datatrove_file_records_its_tokenizer_name(tmp_path):
    for ext in ("", ".index", ".metadata"):
        shutil.copy(os.path.join(GOLDEN, "datatrove_uint16.ds" + ext), tmp_path / ("d.ds" + ext))
    name = (tmp_path / "d.ds.metadata").read_text().split("\n")[0].rpartition("|")[0]
    out = tmp_path / "d.lod.h5"
    assert run("pack", tmp_path / "d.ds", "-o", out).exit_code == 0
    assert tokens_of(out).tokenizer_name == name


@pytest.mark.parametrize("to", ["npz", "parquet", "arrow"])
def test_unpack_then_pack_keeps_the_metadata_and_the_tokenizer(tmp_path, to):
    if to != "npz":
        pytest.importorskip("pyarrow")
    src = tmp_path / "w.jsonl"
    src.write_text('[["the", "cat"], ["sat"]]\n[["the"]]\n')
    assert run("pack", src, "--words", "-o", tmp_path / "w.lod.h5").exit_code == 0
    want = tokens_of(tmp_path / "w.lod.h5")
    assert run("unpack", tmp_path / "w.lod.h5", "--to", to, "-o", tmp_path / f"w.{to}").exit_code == 0
    assert run("pack", tmp_path / f"w.{to}", "-o", tmp_path / "again.lod.h5").exit_code == 0
    got = tokens_of(tmp_path / "again.lod.h5")
    assert got == want and got.tokenizer_json == want.tokenizer_json
    lines = run("unpack", tmp_path / "again.lod.h5", "--detokenize").stdout.splitlines()
    assert [json.loads(x) for x in lines] == [[["the", "cat"], ["sat"]], [["the"]]]


def test_npz_token_metadata_that_does_not_parse_is_one_line(tmp_path):
    import numpy as np

    np.savez(tmp_path / "x.npz", data=np.arange(3), offsets_0=np.array([0, 3]),
             tokens=np.frombuffer(b'{"vocab_size": "many"}', np.uint8))
    result = run("pack", tmp_path / "x.npz", "-o", tmp_path / "x.lod.h5")
    assert result.exit_code == 1 and len(result.stderr.splitlines()) == 1
    assert "x.npz: its token metadata does not parse" in result.stderr and not (tmp_path / "x.lod.h5").exists()


def test_pack_into_a_sharded_folder_records_the_metadata_in_every_shard_and_the_manifest(tmp_path):
    src = tmp_path / "w.jsonl"
    src.write_text("".join('[["the", "cat"], ["sat"]]\n' for _ in range(300)))
    folder = f"{tmp_path / 'shards'}/"
    result = run("pack", src, "--words", "-o", folder, "--shard-size", "1KB")
    assert result.exit_code == 0, result.output
    with open_sharded(folder) as f:
        info = f.tensor().tokens
        assert f.tensor().n_shards > 1 and info.vocab_size == 4 and info.tokenizer_json is not None
        for i in range(f.tensor().n_shards):
            assert f.tensor().shard(i)[1].tokens.tokenizer_json == info.tokenizer_json
    lines = run("unpack", folder, "--detokenize").stdout.splitlines()
    assert len(lines) == 300 and json.loads(lines[0]) == [["the", "cat"], ["sat"]]
    ids = tmp_path / "ids.jsonl"
    ids.write_text("[1, 2]\n[3]\n")
    result = run("pack", ids, "-o", f"{tmp_path / 'ids'}/", "--vocab-size", 5)
    assert result.exit_code == 0 and open_sharded(tmp_path / "ids").tensor().tokens.vocab_size == 5
    result = run("pack", ids, "-o", f"{tmp_path / 'dask'}/", "--vocab-size", 5, "--scheduler", "threads")
    assert result.exit_code == 0 and open_sharded(tmp_path / "dask").tensor().tokens.vocab_size == 5
    result = run("pack", src, "--words", "-o", f"{tmp_path / 'words'}/", "--scheduler", "threads")
    assert result.exit_code != 0 and "its own ids" in result.stderr and not (tmp_path / "words").exists()
