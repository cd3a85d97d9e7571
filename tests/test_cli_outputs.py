"""Where the commands write: the one rule for an existing container, and outputs that are not plain files."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from lodtool import LoDTensor, load, open as open_container, save
from lodtool.cli.main import cli
from lodtool.errors import LodExistsError

SAMPLES = Path(__file__).resolve().parent.parent / "sample_data"


def run(*args, input=None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=input)


def names(path) -> list[str]:
    with open_container(str(path)) as f:
        return list(f.names)


@pytest.fixture
def multi(tmp_path) -> Path:
    """A container holding one tensor, ``tokens``."""
    out = tmp_path / "multi.h5"
    save(str(out), {"tokens": LoDTensor(np.arange(5), [[0, 2, 5]])})
    return out


@pytest.fixture
def feats(tmp_path) -> Path:
    src = tmp_path / "feats.json"
    src.write_text("[[1.5, 2.5], [3.5]]")
    return src


# -- the rule: --name adds, --overwrite replaces that tensor, --force replaces the file ----------------------
def test_pack_with_a_new_name_adds_the_tensor_and_keeps_the_others(multi, feats):
    result = run("pack", feats, "-o", multi, "--name", "feats")
    assert result.exit_code == 0, result.output
    assert names(multi) == ["tokens", "feats"]
    assert load(str(multi), "tokens").to_nested() == [[0, 1], [2, 3, 4]]
    assert load(str(multi), "feats").to_nested() == [[1.5, 2.5], [3.5]]


def test_pack_over_an_existing_tensor_is_refused_and_changes_nothing(multi, feats):
    before = multi.read_bytes()
    result = run("pack", feats, "-o", multi, "--name", "tokens")
    assert result.exit_code == 2
    assert "already holds tensor 'tokens'" in result.stderr and "--overwrite" in result.stderr
    assert multi.read_bytes() == before
    assert [p.name for p in multi.parent.iterdir() if ".lodtmp-" in p.name] == []


def test_pack_overwrite_replaces_just_that_tensor(multi, feats, tmp_path):
    save(str(multi), {"other": LoDTensor(np.arange(2), [[0, 2]])})
    result = run("pack", feats, "-o", multi, "--name", "tokens", "--overwrite")
    assert result.exit_code == 0, result.output
    assert sorted(names(multi)) == ["other", "tokens"]
    assert load(str(multi), "tokens").to_nested() == [[1.5, 2.5], [3.5]]
    assert load(str(multi), "other").to_nested() == [[0, 1]]
    assert run("validate", multi).exit_code == 0 and run("verify", multi).exit_code == 0


def test_pack_force_replaces_the_whole_file(multi, feats):
    result = run("pack", feats, "-o", multi, "--force")
    assert result.exit_code == 0, result.output
    assert names(multi) == ["tensor"]


def test_a_file_that_is_not_a_container_is_replaced_only_with_force(tmp_path, feats):
    notes = tmp_path / "notes.h5"
    notes.write_text("my notes")
    result = run("pack", feats, "-o", notes)
    assert result.exit_code == 2 and "is not a lodtool container" in result.stderr and "--force" in result.stderr
    assert notes.read_text() == "my notes"
    assert run("pack", feats, "-o", notes, "--force").exit_code == 0
    empty = tmp_path / "empty.h5"
    empty.touch()  # mktemp's empty file needs no --force
    assert run("pack", feats, "-o", empty).exit_code == 0 and names(empty) == ["tensor"]


def test_append_and_overwrite_or_force_contradict(multi, feats):
    assert run("pack", feats, "-o", multi, "--append", "--overwrite").exit_code == 2
    assert run("pack", feats, "-o", multi, "--append", "--force").exit_code == 2


@pytest.mark.parametrize("op", ["pool", "softmax", "reverse"])
def test_an_operator_adds_its_output_to_an_existing_container(op, tmp_path):
    src = tmp_path / "x.h5"
    save(str(src), {"x": LoDTensor(np.arange(5.0), [[0, 2, 5]])})
    out = tmp_path / "out.h5"
    save(str(out), {"keep": LoDTensor(np.arange(3), [[0, 3]])})
    assert run(op, src, "-o", out).exit_code == 0
    assert names(out) == ["keep", "x"]
    result = run(op, src, "-o", out)
    assert result.exit_code == 2 and "already holds tensor 'x'" in result.stderr
    assert run(op, src, "-o", out, "--overwrite").exit_code == 0 and names(out) == ["keep", "x"]
    assert run(op, src, "-o", out, "--force").exit_code == 0 and names(out) == ["x"]


def test_expand_slice_head_and_unpad_follow_the_rule(tmp_path):
    x = tmp_path / "x.h5"
    assert run("pack", SAMPLES / "expand_x.json", "--lod-level", "1", "-o", x).exit_code == 0
    y = tmp_path / "y.h5"
    assert run("pack", SAMPLES / "expand_y.json", "--lod-level", "2", "-o", y).exit_code == 0
    out = tmp_path / "out.h5"
    save(str(out), {"keep": LoDTensor(np.arange(3), [[0, 3]])})
    assert run("expand", x, y, "--ref-level", "0", "-o", out, "--out-name", "e").exit_code == 0
    assert run("slice", y, "0", "-o", out).exit_code == 0
    assert run("head", y, "-n", "1", "-o", out, "--to", "h5").exit_code == 2
    assert run("head", y, "-n", "1", "-o", out, "--to", "h5", "--overwrite").exit_code == 0
    padded = tmp_path / "p.npz"
    assert run("pad", x, "-o", padded).exit_code == 0
    assert run("unpad", padded, "-o", out, "--name", "u").exit_code == 0
    assert run("unpad", padded, "-o", out, "--name", "u").exit_code == 2
    assert names(out) == ["keep", "e", "tensor", "u"]
    assert load(str(out), "keep").to_nested() == [[0, 1, 2]]


def test_save_follows_the_same_rule(tmp_path):
    p = str(tmp_path / "s.h5")
    a, b = LoDTensor(np.arange(3), [[0, 3]]), LoDTensor(np.arange(2), [[0, 1, 2]])
    save(p, {"a": a})
    save(p, {"b": b})
    assert names(p) == ["a", "b"]
    with pytest.raises(LodExistsError, match="already holds tensor 'a'"):
        save(p, {"a": b})
    with pytest.raises(FileExistsError):  # also the builtin a Python user catches
        save(p, {"a": b})
    save(p, {"a": b}, overwrite=True)
    assert load(p, "a").equals(b) and load(p, "b").equals(b)
    save(p, a, force=True)
    assert names(p) == ["tensor"]


def test_overwriting_a_tensor_that_shares_its_offsets_keeps_the_other_intact(tmp_path):
    p = str(tmp_path / "s.h5")
    tokens = LoDTensor(np.arange(5), [[0, 2, 5]])
    save(p, {"tokens": tokens, "labels": LoDTensor(np.ones(5, "int8"), tokens.lod)})  # labels links tokens' lod
    save(p, {"tokens": LoDTensor(np.arange(3), [[0, 3]])}, overwrite=True)
    assert load(p, "labels").lod == [[0, 2, 5]] and load(p, "tokens").lod == [[0, 3]]
    assert run("verify", p).exit_code == 0 and run("validate", p).exit_code == 0


def test_json_summary_of_an_added_tensor(multi, feats):
    result = run("pack", feats, "-o", multi, "--name", "feats", "--json")
    assert json.loads(result.stdout)["name"] == "feats"


# -- --append keeps the stored dtype --------------------------------------------------------------------------
def test_append_of_floats_to_an_int_tensor_is_refused_naming_both_dtypes(tmp_path):
    out = tmp_path / "f.h5"
    assert run("pack", "-", "--format", "jsonl", "-o", out, input="[[1, 2]]\n").exit_code == 0
    before = out.read_bytes()
    result = run("pack", "-", "--format", "jsonl", "-o", out, "--append", input="[[1.5]]\n")
    assert result.exit_code == 1
    (line,) = result.stderr.splitlines()
    assert "stores int64" in line and "float64" in line and "--dtype float64" in line
    assert out.read_bytes() == before
    result = run("pack", "-", "--format", "jsonl", "-o", out, "--append", input="[[3.0]]\n")
    assert result.exit_code == 0, result.output
    t = load(str(out))
    assert t.dtype == np.int64 and t.to_nested() == [[[1, 2]], [[3]]]


def test_append_of_ints_to_a_float32_tensor_keeps_float32(tmp_path):
    out = tmp_path / "f.h5"
    assert run("pack", "-", "--format", "jsonl", "--dtype", "float32", "-o", out, input="[[0.5]]\n").exit_code == 0
    assert run("pack", "-", "--format", "jsonl", "-o", out, "--append", input="[[1, 2]]\n").exit_code == 0
    assert load(str(out)).dtype == np.float32
    result = run("pack", "-", "--format", "jsonl", "-o", out, "--append", "--dtype", "float64", input="[[1]]\n")
    assert result.exit_code == 1 and "never changes the stored dtype" in result.stderr


# -- an -o that exists and is not a regular file is written into, never replaced -------------------------------
@pytest.fixture
def articles(tmp_path) -> Path:
    out = tmp_path / "a.lod.h5"
    assert run("pack", SAMPLES / "articles.json", "-o", out).exit_code == 0
    return out


WRITERS = {
    "unpack": lambda src, out: ["unpack", src, "--to", "json", "-o", out],
    "pool": lambda src, out: ["pool", src, "-o", out],
    "pad": lambda src, out: ["pad", src, "-o", out],
    "slice": lambda src, out: ["slice", src, "0", "--to", "npz", "-o", out],
    "slice-h5": lambda src, out: ["slice", src, "0", "--to", "h5", "-o", out],
    "pack": lambda src, out: ["pack", SAMPLES / "articles.json", "-o", out],
}


@pytest.mark.parametrize("command", sorted(WRITERS))
@pytest.mark.parametrize("via_symlink", [False, True], ids=["direct", "symlink"])
def test_dev_null_is_written_into_not_replaced(command, via_symlink, articles, tmp_path):
    target = Path(os.devnull)
    if via_symlink:
        link = tmp_path / "null-link"
        link.symlink_to(os.devnull)
        target = link
    before = os.stat(os.devnull)
    result = run(*WRITERS[command](articles, target))
    assert result.exit_code == 0, result.output
    after = os.stat(os.devnull)
    assert stat.S_ISCHR(after.st_mode) and (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)
    assert not via_symlink or os.path.islink(tmp_path / "null-link")
    assert [n for n in os.listdir(tmp_path) if ".lodtmp-" in n] == []


@pytest.mark.parametrize("command", sorted(WRITERS))
def test_a_fifo_is_streamed_into(command, articles, tmp_path):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    got = {}

    def read() -> None:
        with open(fifo, "rb") as f:
            got["bytes"] = f.read()

    reader = threading.Thread(target=read)
    reader.start()
    result = run(*WRITERS[command](articles, fifo))
    reader.join(timeout=30)
    assert result.exit_code == 0, result.output
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert got["bytes"]
    if command == "unpack":
        assert json.loads(got["bytes"]) == json.loads((SAMPLES / "articles.json").read_text())


def test_a_socket_is_refused(articles, tmp_path):
    path = tmp_path / "s.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    try:
        result = run("unpack", articles, "--to", "json", "-o", path)
        assert result.exit_code == 2 and "is a socket" in result.stderr
        assert stat.S_ISSOCK(os.stat(path).st_mode)
    finally:
        server.close()


# -- an output that is the same file as an input -----------------------------------------------------------
@pytest.mark.parametrize("args", [
    ["unpack", "{a}", "--to", "json", "-o", "{a}"],
    ["pad", "{a}", "-o", "{a}"],
    ["slice", "{a}", "0", "--to", "npz", "-o", "{a}"],
    ["head", "{a}", "--to", "jsonl", "-o", "{a}"],
    ["tail", "{a}", "--to", "json", "-o", "{link}"],
], ids=["unpack", "pad", "slice", "head", "tail-via-link"])
def test_output_over_the_input_is_refused(args, articles, tmp_path):
    link = tmp_path / "link.h5"
    link.symlink_to(articles)
    before = articles.read_bytes()
    result = run(*[a.format(a=articles, link=link) for a in args])
    assert result.exit_code == 2 and "is the same file as the input" in result.stderr, result.output
    assert articles.read_bytes() == before


def test_pack_and_unpad_refuse_their_input_as_output(tmp_path):
    src = tmp_path / "d.json"
    src.write_text("[[1, 2]]")
    assert run("pack", src, "-o", src, "--force").exit_code == 2 and src.read_text() == "[[1, 2]]"
    save(str(tmp_path / "x.h5"), LoDTensor(np.arange(3.0), [[0, 3]]))
    assert run("pad", tmp_path / "x.h5", "-o", tmp_path / "p.npz").exit_code == 0
    before = (tmp_path / "p.npz").read_bytes()
    result = run("unpad", tmp_path / "p.npz", "-o", tmp_path / "p.npz", "--force")
    assert result.exit_code == 2 and (tmp_path / "p.npz").read_bytes() == before


def test_an_operator_may_add_its_result_to_its_own_input(articles):
    # documented in place: the result is added beside the input tensor, atomically
    assert run("reverse", articles, "-o", articles, "--out-name", "reversed").exit_code == 0
    assert names(articles) == ["tensor", "reversed"]
    assert load(str(articles), "reversed").to_nested()[0][0] == [3, 2, 1]
    assert run("validate", articles).exit_code == 0 and run("verify", articles).exit_code == 0


# -- concurrent appends and shared datasets ----------------------------------------------------------------
def _append_loop(target: str, src: str, times: int) -> subprocess.Popen:
    """A process that appends ``src`` to ``target`` ``times`` times (one interpreter: no start-up per append)."""
    script = ("from lodtool.cli.main import main\n"
              f"for _ in range({times}):\n"
              "    try:\n"
              f"        main(['pack', {src!r}, '-o', {target!r}, '--append'])\n"
              "    except SystemExit as exc:\n"
              "        if exc.code: raise\n")
    return subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})


def test_concurrent_appends_lose_no_rows(tmp_path):
    target = tmp_path / "t.h5"
    assert run("pack", "-", "--format", "jsonl", "-o", target, input="[0]\n").exit_code == 0
    sources = []
    for value in (1, 2):
        sources.append(tmp_path / f"in{value}.jsonl")
        sources[-1].write_text(f"[{value}, {value}]\n")
    procs = [_append_loop(str(target), str(src), 4) for src in sources]
    for proc in procs:
        assert proc.wait(timeout=120) == 0, proc.stderr.read()
    rows = load(str(target)).to_nested()
    assert sorted(map(tuple, rows)) == [(0,)] + [(1, 1)] * 4 + [(2, 2)] * 4
    assert run("verify", target).exit_code == 0
    assert sorted(os.listdir(tmp_path)) == ["in1.jsonl", "in2.jsonl", "t.h5"]


def test_append_to_a_tensor_whose_data_another_tensor_links(tmp_path):
    p = str(tmp_path / "linked.h5")
    save(p, {"a": LoDTensor(np.arange(4), [[0, 1, 4]])})
    with h5py.File(p, "r+") as f:  # b: the same data and offsets datasets as a (hard links): a valid file
        b = f.create_group("b")
        for key, value in f["a"].attrs.items():
            b.attrs[key] = value
        b["data"] = f["a/data"]
        b["lod"] = f["a/lod"]
    assert run("verify", p).exit_code == 0
    assert run("pack", "-", "--format", "jsonl", "-o", p, "--name", "a", "--append", input="[7, 8]\n").exit_code == 0
    assert load(p, "a").to_nested() == [[0], [1, 2, 3], [7, 8]]
    assert load(p, "b").to_nested() == [[0], [1, 2, 3]]
    assert run("validate", p).exit_code == 0 and run("verify", p).exit_code == 0


def test_a_target_created_by_another_writer_meanwhile_is_not_replaced(tmp_path):
    from lodtool.container.writer import LodWriter

    target = tmp_path / "new.h5"
    writer = LodWriter(str(target))  # started while there is no target
    writer.write("a", LoDTensor(np.arange(3), [[0, 3]]))
    save(str(target), {"b": LoDTensor(np.arange(2), [[0, 2]])})  # another writer finishes first
    with pytest.raises(LodExistsError, match="another writer created it"):
        writer.commit()
    assert names(target) == ["b"]
    assert [p.name for p in tmp_path.iterdir()] == ["new.h5"]


@pytest.mark.parametrize("args", [["reshape", "--new-dim", "1"], ["erase", "--tokens", "2"], ["concat", "{src}"]],
                         ids=lambda a: a[0])
def test_the_sequence_operators_follow_the_rule(args, tmp_path):
    src = tmp_path / "x.h5"
    save(str(src), {"x": LoDTensor(np.arange(5), [[0, 2, 5]])})
    out = tmp_path / "out.h5"
    save(str(out), {"keep": LoDTensor(np.arange(3), [[0, 3]])})
    command, *extra = args
    call = [command, src, *[a.format(src=src) for a in extra], "-o", out]
    assert run(*call).exit_code == 0 and names(out) == ["keep", "x"]
    result = run(*call)
    assert result.exit_code == 2 and "already holds tensor 'x'" in result.stderr
    assert run(*call, "--overwrite").exit_code == 0 and names(out) == ["keep", "x"]
    assert run(*call, "--force").exit_code == 0 and names(out) == ["x"]
