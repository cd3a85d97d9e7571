"""Text in and out through the CLI: ``pack --tokenizer``, ``unpack --detokenize``, ``head`` / ``tree --text``, and
every kind of bad text input as one line naming the file and the place, with nothing written."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from lodtool.cli.main import cli
from lodtool.container import open_file

pytest.importorskip("tokenizers")
pytest.importorskip("blingfire")

SAMPLES = os.path.join(os.path.dirname(__file__), os.pardir, "sample_data")
TOKENIZER = os.path.join(SAMPLES, "tokenizer.json")
CORPUS = os.path.join(SAMPLES, "text.jsonl")


def run(*args, input=None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=input)


def pack(src, out, *extra, input=None):
    result = run("pack", src, "--tokenizer", TOKENIZER, "-o", out, *extra, input=input)
    assert result.exit_code == 0, result.output
    with open_file(out) as f:
        return f.tensor().read(), f.tensor().tokens


def test_jsonl_packs_to_documents_of_uint16_ids_and_unpacks_to_the_same_text(tmp_path):
    out = tmp_path / "c.lod.h5"
    t, info = pack(CORPUS, out)
    docs = [json.loads(line)["text"] for line in open(CORPUS, encoding="utf-8")]
    assert t.dtype == np.uint16 and t.lod_level == 1 and len(t) == len(docs) and t.level_names == ("document",)
    assert info.vocab_size == 2048 and info.eos_id == 0 and info.tokenizer_json == open(TOKENIZER, "rb").read()
    assert run("validate", out).exit_code == 0
    result = run("unpack", out, "--to", "jsonl", "--detokenize", "-o", tmp_path / "back.jsonl")
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["text"] for line in open(tmp_path / "back.jsonl", encoding="utf-8")] == docs


def test_split_adds_a_level_and_add_eos_ends_each_document(tmp_path):
    t, info = pack(CORPUS, tmp_path / "s.lod.h5", "--split", "sentences", "--add-eos")
    assert t.lod_level == 2 and t.level_names == ("document", "sentence")
    assert t.num_sequences(1) > len(t)
    ends = np.asarray(t.offsets[1])[np.asarray(t.offsets[0])[1:]] - 1
    assert (t.data[ends] == info.eos_id).all() and (t.data == info.eos_id).sum() == len(t)
    back = json.loads(run("unpack", tmp_path / "s.lod.h5", "--detokenize", "--skip-special-tokens").stdout
                      .splitlines()[0])["text"]
    assert "".join(back) == json.loads(open(CORPUS, encoding="utf-8").readline())["text"]


def test_plain_text_per_file_per_line_and_from_stdin(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("First document.\nStill the first.\n")
    b.write_text("Second.\n")
    t, _ = pack(a, tmp_path / "f.lod.h5", "--documents", "file")
    assert len(t) == 1
    t2, _ = pack(a, tmp_path / "l.lod.h5", "--documents", "line")
    assert len(t2) == 2
    t3, _ = pack(a, tmp_path / "two.lod.h5")
    assert len(t3) == 1
    result = run("pack", a, b, "--tokenizer", TOKENIZER, "-o", tmp_path / "ab.lod.h5")
    assert result.exit_code == 0 and "packed 2 sequences" in result.output
    t4, _ = pack("-", tmp_path / "stdin.lod.h5", "--documents", "line", input="one\ntwo\nthree\n")
    assert len(t4) == 3
    t5, _ = pack("-", tmp_path / "stdin2.lod.h5", input='{"text": "one"}\n{"text": "two"}\n')
    assert len(t5) == 2
    lines = run("unpack", tmp_path / "stdin.lod.h5", "--detokenize").stdout.splitlines()
    assert [json.loads(x)["text"] for x in lines] == ["one", "two", "three"]


def test_a_parquet_text_column(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"body": ["Hello there.", "", "Bye."], "n": [1, 2, 3]}), tmp_path / "t.parquet")
    t, _ = pack(tmp_path / "t.parquet", tmp_path / "p.lod.h5", "--text-field", "body")
    assert len(t) == 3 and t.lengths(0)[1] == 0
    from lodtool import tasks
    from lodtool.io.text import TextOptions

    seen: list = []  # the progress bar's total is the file's size: the counts end there
    tasks.pack([tmp_path / "t.parquet"], tmp_path / "q.lod.h5", text=TextOptions(TOKENIZER, field="body"),
               progress=seen.append)
    assert seen[-1] == os.path.getsize(tmp_path / "t.parquet")
    result = run("pack", tmp_path / "t.parquet", "--tokenizer", TOKENIZER, "--text-field", "n", "-o", tmp_path / "x.h5")
    assert result.exit_code == 1 and "t.parquet: column 'n' holds int64, not strings" in result.stderr
    pq.write_table(pa.table({"text": ["a", None]}), tmp_path / "n.parquet")
    result = run("pack", tmp_path / "n.parquet", "--tokenizer", TOKENIZER, "-o", tmp_path / "x.h5")
    assert result.exit_code == 1 and "n.parquet: row 1: column 'text' is null" in result.stderr
    assert not (tmp_path / "x.h5").exists()


def test_the_tokenizer_by_hash_only_records_no_json_and_cannot_detokenize(tmp_path):
    out = tmp_path / "h.lod.h5"
    _, info = pack(CORPUS, out, "--no-tokenizer-json")
    assert info.tokenizer_json is None and info.tokenizer_hash.startswith("sha256:")
    result = run("unpack", out, "--detokenize")
    assert result.exit_code == 2 and len(result.stderr.splitlines()) == 1
    assert "stores no tokenizer" in result.stderr


def test_head_and_tree_show_the_text_beside_the_ids(tmp_path):
    out = tmp_path / "c.lod.h5"
    pack(CORPUS, out, "--split", "sentences")
    shown = run("head", out, "-n", 1, "--text", "--to", "tree").stdout
    assert "<0,0> sentence" in shown and "How lodtool is built" in shown
    assert "How lodtool is built" in run("tree", out, "--text", "-k", 2).stdout
    lines = run("head", out, "-n", 2, "--text", "--to", "jsonl").stdout.splitlines()
    assert len(lines) == 2 and json.loads(lines[0])["text"][0].startswith("# How lodtool")


@pytest.mark.parametrize("content, message", [
    (b'{"text": "ok"}\n{"text": "caf\xc3\xa9 \xff"}\n', "in.jsonl:2: invalid UTF-8 at byte 17 of the line (0xff)"),
    (b'{"text": "ok"}\n{"body": "x"}\n', "in.jsonl:2: no field 'text' (its fields: body)"),
    (b'{"text": "ok"}\n{"text": ["a"]}\n', "in.jsonl:2: field 'text' is a list, not a string"),
    (b'{"text": "ok"}\n[1, 2]\n', "in.jsonl:2: a JSON Lines text input holds one object per line"),
    (b'{"text": "ok"}\n{"text": \n', "in.jsonl:2: not JSON"),
])
def test_bad_jsonl_is_one_line_naming_the_line_and_nothing_is_written(tmp_path, content, message):
    src = tmp_path / "in.jsonl"
    src.write_bytes(content)
    result = run("pack", src, "--tokenizer", TOKENIZER, "-o", tmp_path / "out.lod.h5")
    assert result.exit_code == 1 and len(result.stderr.splitlines()) == 1, result.output
    assert message in result.stderr
    assert os.listdir(tmp_path) == ["in.jsonl"]


def test_invalid_utf8_in_a_plain_file_names_its_line_and_byte(tmp_path):
    src = tmp_path / "in.txt"
    src.write_bytes(b"good line\nbad \xe9 line\n")
    result = run("pack", src, "--tokenizer", TOKENIZER, "-o", tmp_path / "out.lod.h5")
    assert result.exit_code == 1 and "in.txt:2: invalid UTF-8 at byte 5 of the line (0xe9)" in result.stderr
    assert not (tmp_path / "out.lod.h5").exists()


def test_a_tokenizer_that_does_not_parse_and_a_dtype_too_narrow(tmp_path):
    bad = tmp_path / "tok.json"
    bad.write_text("{not json")
    result = run("pack", CORPUS, "--tokenizer", bad, "-o", tmp_path / "out.lod.h5")
    assert result.exit_code == 1 and len(result.stderr.splitlines()) == 1
    assert f"{bad}: not a tokenizer.json" in result.stderr
    result = run("pack", CORPUS, "--tokenizer", TOKENIZER, "--dtype", "uint8", "-o", tmp_path / "out.lod.h5")
    assert result.exit_code == 2 and "dtype uint8 holds ids up to 255, but the vocabulary has 2,048" in result.stderr
    result = run("pack", CORPUS, "--tokenizer", tmp_path / "missing.json", "-o", tmp_path / "out.lod.h5")
    assert result.exit_code != 0 and "missing.json: no such tokenizer file" in result.stderr
    assert sorted(os.listdir(tmp_path)) == ["tok.json"]


def test_text_options_without_a_tokenizer_are_refused(tmp_path):
    result = run("pack", CORPUS, "--split", "lines", "-o", tmp_path / "out.lod.h5")
    assert result.exit_code == 2 and "--split applies to text, packed with --tokenizer" in result.stderr
    result = run("pack", CORPUS, "--format", "text", "-o", tmp_path / "out.lod.h5")
    assert result.exit_code == 2 and "packing text needs a tokenizer" in result.stderr


def test_pack_into_a_folder_records_the_tokenizer_in_every_shard(tmp_path):
    from lodtool.container.shards import read_manifest

    folder = tmp_path / "corpus"
    result = run("pack", CORPUS, "--tokenizer", TOKENIZER, "-o", f"{folder}/", "--shard-size", "16KB")
    assert result.exit_code == 0, result.output
    _, whole = pack(CORPUS, tmp_path / "c.lod.h5")
    manifest = read_manifest(folder)
    assert len(manifest.shards) > 1 and manifest.tensors["tensor"].tokens == whole
    for shard in manifest.shards:  # each shard is a container readable alone, the tokenizer's JSON in it
        with open_file(folder / shard.file) as f:
            assert f.tensor().tokens == whole and f.tensor().tokens.tokenizer_json == whole.tokenizer_json
    for source, out in ((folder, "a.jsonl"), (tmp_path / "c.lod.h5", "b.jsonl")):
        assert run("unpack", source, "--to", "jsonl", "--detokenize", "-o", tmp_path / out).exit_code == 0
    assert (tmp_path / "a.jsonl").read_text() == (tmp_path / "b.jsonl").read_text()


def test_the_library_keywords_of_text_packing_show_as_the_flags_of_pack(tmp_path, monkeypatch):
    out = tmp_path / "out.lod.h5"
    result = run("pack", CORPUS, "--tokenizer", TOKENIZER, "--add-bos", "-o", out)
    assert result.exit_code == 2 and result.stderr.strip().endswith(
        "--add-bos: the tokenizer has no BOS token that lodtool knows by name; give --bos-id")
    result = run("pack", CORPUS, "--tokenizer", TOKENIZER, "--split", "lines", "--lod-level", "1", "-o", out)
    assert result.exit_code == 2 and "packs 2 LoD level(s), not --lod-level 1" in result.stderr
    src = tmp_path / "in.jsonl"
    src.write_bytes(b'{"body": "x"}\n')
    result = run("pack", src, "--tokenizer", TOKENIZER, "-o", out)
    assert result.exit_code == 1 and result.stderr.strip().endswith("(its fields: body); --text-field names it")
    monkeypatch.setitem(sys.modules, "blingfire", None)  # as if it were not installed
    result = run("pack", CORPUS, "--tokenizer", TOKENIZER, "--split", "sentences", "-o", out)
    assert result.exit_code != 0 and "--split sentences needs blingfire: pip install 'lodtool[text]'" in result.stderr
    assert sorted(os.listdir(tmp_path)) == ["in.jsonl"]
