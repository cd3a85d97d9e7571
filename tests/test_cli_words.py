"""``pack --words``: nested lists of strings packed with a word vocabulary built while streaming (most frequent
first, ``--min-count``), stored in the container, shared with ``--vocab``, and read back by ``unpack --detokenize``."""

from __future__ import annotations

import io
import json
import os

import numpy as np
from click.testing import CliRunner
from hypothesis import given, settings, strategies as st

from lodtool import tasks
from lodtool.cli.main import cli
from lodtool.container import open_file
from lodtool.io.text import TextOptions

WORD = st.text(min_size=1, max_size=6)
ITEMS = st.lists(st.lists(st.lists(WORD, max_size=4), max_size=3), min_size=1, max_size=6)


def run(*args, input=None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=input)


def read(path):
    with open_file(path) as f:
        t = f.tensor()
        return t.read(), t.tokens


@settings(max_examples=25, deadline=None)
@given(ITEMS)
def test_nested_words_round_trip_exactly(tmp_path_factory, items):
    d = tmp_path_factory.mktemp("w")
    src = d / "w.jsonl"
    src.write_text("".join(json.dumps(x) + "\n" for x in items), encoding="utf-8")
    tasks.pack([src], d / "w.lod.h5", text=TextOptions(None, words=True))
    out = io.BytesIO()
    tasks.unpack(d / "w.lod.h5", out, to="jsonl", detokenize=True)
    assert [json.loads(line) for line in out.getvalue().decode().split("\n")[:-1]] == items


def test_ids_are_most_frequent_first_after_unk_and_min_count_drops_rare_words(tmp_path):
    src = tmp_path / "w.jsonl"
    src.write_text('[["the", "cat"], ["sat"]]\n[["the", "mat"], ["the", "cat"]]\n')
    assert run("pack", src, "--words", "-o", tmp_path / "a.lod.h5").exit_code == 0
    t, info = read(tmp_path / "a.lod.h5")
    assert t.dtype == np.uint8 and t.lod_level == 2 and info.vocab_size == 5 and info.tokenizer_name == "words"
    assert t.data.tolist() == [1, 2, 3, 1, 4, 1, 2]  # <unk> 0, the 1, cat 2, sat 3, mat 4
    assert run("pack", src, "--words", "--min-count", 2, "-o", tmp_path / "b.lod.h5").exit_code == 0
    t, info = read(tmp_path / "b.lod.h5")
    assert info.vocab_size == 3 and t.data.tolist() == [1, 2, 0, 1, 0, 1, 2]
    lines = run("unpack", tmp_path / "b.lod.h5", "--detokenize").stdout.splitlines()
    assert json.loads(lines[0]) == [["the", "cat"], ["<unk>"]]
    assert "'the cat'" in run("head", tmp_path / "b.lod.h5", "--text", "--to", "tree").stdout


def test_vocab_fixes_the_ids_so_files_share_them(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text('[["the", "cat"]]\n[["the"]]\n')
    b.write_text('[["cat", "dog", "the"]]\n')
    assert run("pack", a, "--words", "-o", tmp_path / "a.lod.h5").exit_code == 0
    assert run("pack", b, "--vocab", tmp_path / "a.lod.h5", "-o", tmp_path / "b.lod.h5").exit_code == 0
    (_, ia), (tb, ib) = read(tmp_path / "a.lod.h5"), read(tmp_path / "b.lod.h5")
    assert ia == ib and tb.data.tolist() == [2, 0, 1]
    words = tmp_path / "words.txt"
    words.write_text("the\ncat\ndog\n")  # a word list without <unk>: every word must be in it
    assert run("pack", b, "--vocab", words, "-o", tmp_path / "c.lod.h5").exit_code == 0
    assert read(tmp_path / "c.lod.h5")[0].data.tolist() == [1, 2, 0]
    b.write_text('[["the"]]\n[["cow"]]\n')
    result = run("pack", b, "--vocab", words, "-o", tmp_path / "d.lod.h5")
    assert result.exit_code == 1 and len(result.stderr.splitlines()) == 1
    assert "b.jsonl:2: word 'cow' is not in" in result.stderr and not (tmp_path / "d.lod.h5").exists()


def test_words_from_stdin_and_from_one_json_document(tmp_path):
    result = run("pack", "-", "--words", "-o", tmp_path / "s.lod.h5", input='[["a", "b"]]\n[["b"]]\n')
    assert result.exit_code == 0, result.output
    t, info = read(tmp_path / "s.lod.h5")
    assert t.data.tolist() == [2, 1, 1] and info.vocab_size == 3  # b is the more frequent
    (tmp_path / "doc.json").write_text('[["the", "cat"], ["sat"]]')
    assert run("pack", tmp_path / "doc.json", "--words", "-o", tmp_path / "d.lod.h5").exit_code == 0
    assert run("unpack", tmp_path / "d.lod.h5", "--detokenize", "--to", "json").stdout.strip() == \
        '[["the","cat"],["sat"]]'


def test_bad_words_are_one_line_naming_the_place_and_nothing_is_written(tmp_path):
    cases = [(b'[["a"]]\n[["b", 3]]\n', "w.jsonl:2: a number where a word (a string) belongs"),
             (b'[["a"]]\n["b"]\n', "w.jsonl:2: a word 1 list(s) deep, where words nest 2 deep (as in "),
             (b'[["a"]]\n[["\xff"]]\n', "w.jsonl:2: invalid UTF-8 at byte 4 of the line (0xff)"),
             (b'[["a"]]\n{"a": 1}\n', "w.jsonl:2: an item of words is a list, not an object"),
             (b'[["a"]]\n[["a"\n', "w.jsonl:2: not JSON")]
    for content, message in cases:
        src = tmp_path / "w.jsonl"
        src.write_bytes(content)
        result = run("pack", src, "--words", "-o", tmp_path / "out.lod.h5")
        assert result.exit_code == 1 and len(result.stderr.splitlines()) == 1, (content, result.output)
        assert message in result.stderr, (content, result.stderr)
        assert sorted(os.listdir(tmp_path)) == ["w.jsonl"]
    result = run("pack", src, "--words", "--tokenizer", "t.json", "-o", tmp_path / "out.lod.h5")
    assert result.exit_code == 2 and "--words packs nested lists of words" in result.stderr
