"""Shared CLI options: required arguments and options are enforced by click, whatever its version."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from lodtool.cli.main import COMMANDS, cli


def _required(command: click.Command) -> list[click.Parameter]:
    return [p for p in command.params if p.required]


def _placeholder(p: click.Parameter) -> str:
    """A value of the parameter's type that is never used (parsing stops at the missing one)."""
    if isinstance(p.type, click.Choice):
        return str(p.type.choices[0])
    if isinstance(p.type, (click.types.IntParamType, click.types.FloatParamType)):
        return "1"
    return "never-read.lod.h5"


def _invocation(params: list[click.Parameter], left_out: click.Parameter) -> list[str]:
    """Arguments that give every required parameter but ``left_out`` a (never read) value."""
    args: list[str] = []
    for p in params:
        if p is left_out:
            continue
        if isinstance(p, click.Option):
            args += [p.opts[0], _placeholder(p)]
        else:
            args.append(_placeholder(p))
    return args


CASES = [(name, p.name) for name in sorted(COMMANDS)
         for p in _required(cli.get_command(None, name))]


def test_the_commands_that_write_require_an_output():
    required_outputs = {name for name, param in CASES if param == "output"}
    assert {"pack", "pool", "softmax", "reverse", "expand", "pad", "unpad"} <= required_outputs


@pytest.mark.parametrize(("command", "param_name"), CASES)
def test_leaving_out_a_required_parameter_is_a_usage_error(command, param_name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cmd = cli.get_command(None, command)
    params = _required(cmd)
    (left_out,) = [p for p in params if p.name == param_name]
    result = CliRunner().invoke(cli, [command, *_invocation(params, left_out)])
    assert result.exit_code == 2, result.output
    assert "Missing" in result.output and "internal error" not in result.output
    assert list(tmp_path.iterdir()) == []


# -- FILE:tensor everywhere, the same as --name ------------------------------------------------------------
import json  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import lodtool  # noqa: E402
from lodtool import LoDTensor, save  # noqa: E402


def run(*args, input=None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=input)


@pytest.fixture
def multi(tmp_path) -> Path:
    out = tmp_path / "multi.h5"
    save(str(out), {"tokens": LoDTensor(np.arange(5), [[0, 2, 5]]),
                    "feats": LoDTensor(np.arange(6.0), [[0, 1, 3, 6]])})
    return out


@pytest.mark.parametrize("args", [
    ["unpack", "{ref}", "--to", "json"],
    ["slice", "{ref}", "1", "--to", "json"],
    ["head", "{ref}", "-n", "1", "--to", "jsonl"],
    ["tail", "{ref}", "-n", "1", "--to", "jsonl"],
    ["tree", "{ref}"],
    ["inspect", "{ref}", "--json"],
    ["pack-plan", "{ref}", "--json"],
    ["pool", "{ref}", "-o", "{out}"],
    ["softmax", "{ref}", "-o", "{out}"],
    ["reverse", "{ref}", "-o", "{out}"],
    ["pad", "{ref}", "-o", "{npz}"],
    ["validate", "{ref}"],
    ["verify", "{ref}"],
], ids=lambda a: a[0])
def test_file_colon_tensor_names_the_tensor_like_name(args, multi, tmp_path):
    fill = {"out": tmp_path / "o.h5", "npz": tmp_path / "p.npz"}
    by_ref = run(*[a.format(ref=f"{multi}:feats", **fill) for a in args])
    assert by_ref.exit_code == 0, by_ref.output
    for p in fill.values():
        p.unlink(missing_ok=True)
    if args[0] not in ("validate", "verify"):
        by_name = run(*[a.format(ref=multi, **fill) for a in args], "--name", "feats")
        assert by_name.exit_code == 0, by_name.output
        assert by_ref.stdout.replace(f"{multi}:feats", str(multi)) == by_name.stdout
    if args[0] == "unpack":
        assert json.loads(by_ref.stdout) == [[0.0], [1.0, 2.0], [3.0, 4.0, 5.0]]
    if args[0] == "inspect":
        assert [t["name"] for t in json.loads(by_ref.stdout)["tensors"]] == ["feats"]


def test_file_colon_tensor_and_a_different_name_contradict(multi):
    result = run("unpack", f"{multi}:feats", "--name", "tokens")
    assert result.exit_code == 2 and "but --name tokens names another" in result.stderr


def test_a_missing_tensor_is_named(multi):
    result = run("unpack", f"{multi}:nope")
    assert result.exit_code != 0 and "nope" in result.stderr and "no such file" not in result.stderr


def test_a_real_file_name_with_a_colon_still_works(tmp_path):
    odd = tmp_path / "run:1.h5"
    save(str(odd), LoDTensor(np.arange(3), [[0, 3]]))
    assert run("unpack", odd, "--to", "json").stdout.strip() == "[[0,1,2]]"
    assert lodtool.load(str(odd)).to_nested() == [[0, 1, 2]]
    assert lodtool.load(f"{odd}:tensor").to_nested() == [[0, 1, 2]]


def test_load_and_open_take_file_colon_tensor(multi):
    assert lodtool.load(f"{multi}:tokens").to_nested() == [[0, 1], [2, 3, 4]]
    with lodtool.open(f"{multi}:feats") as f:
        assert f.tensor().name == "feats" and f.names == ["tokens", "feats"]
    with pytest.raises(lodtool.LodUsageError):
        lodtool.load(f"{multi}:tokens", "feats")


def test_several_tensors_without_a_name_says_how_to_name_one(multi):
    result = run("unpack", multi)
    assert result.exit_code == 2
    assert f"{multi}:tokens" in result.stderr and "--name tokens" in result.stderr and "name=" not in result.stderr


def test_inspect_takes_several_files(multi, tmp_path):
    other = tmp_path / "o.h5"
    save(str(other), LoDTensor(np.arange(3), [[0, 3]]))
    result = run("inspect", multi, other, "--json")
    assert result.exit_code == 0
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [info["path"] for info in lines] == [str(multi), str(other)]
    human = run("inspect", multi, other)
    assert str(multi) in human.stdout and str(other) in human.stdout


# -- plurals -------------------------------------------------------------------------------------------------
def test_messages_use_singulars_for_one(tmp_path):
    src = tmp_path / "one.json"
    src.write_text("[[1]]")
    result = run("pack", src, "-o", tmp_path / "one.h5")
    assert "packed 1 sequence, 1 row (int64, 1 LoD level) into" in result.stderr
    result = run("pool", tmp_path / "one.h5", "-o", tmp_path / "p.h5")
    assert "1 sequence, 1 row" in result.stderr and "0 LoD levels" in result.stderr
    assert "1 LoD level " in run("inspect", tmp_path / "one.h5").stdout


# -- smaller frictions of the first hour ------------------------------------------------------------------
def test_stdin_format_is_detected_from_the_first_bytes(tmp_path):
    out = tmp_path / "s.h5"
    result = run("pack", "-", "-o", out, input="[1, 2]\n[3]\n")
    assert result.exit_code == 0 and "read the input as jsonl" in result.stderr
    assert lodtool.load(str(out)).to_nested() == [[1, 2], [3]]
    result = run("pack", "-", "-o", out, "--force", input="[[1, 2], [3]]")
    assert result.exit_code == 0 and "read the input as json" in result.stderr
    assert lodtool.load(str(out)).to_nested() == [[1, 2], [3]]
    result = run("pack", "-", "-o", tmp_path / "t.h5", input=out.read_bytes())
    assert result.exit_code == 2 and "is an HDF5 file" in result.stderr
    result = run("pack", "-", "-o", tmp_path / "t.h5", input="hello")
    assert result.exit_code == 2 and "give --format" in result.stderr and "format=" not in result.stderr


def test_unpack_takes_the_format_from_the_extension_or_refuses(multi, tmp_path):
    assert run("unpack", f"{multi}:tokens", "-o", tmp_path / "t.jsonl").exit_code == 0
    assert (tmp_path / "t.jsonl").read_text() == "[0,1]\n[2,3,4]\n"
    result = run("unpack", f"{multi}:tokens", "-o", tmp_path / "t.csv")
    assert result.exit_code == 2 and "cannot tell the output format" in result.stderr
    assert not (tmp_path / "t.csv").exists()
    assert run("unpack", f"{multi}:tokens", "-o", tmp_path / "t.csv", "--to", "json").exit_code == 0


@pytest.mark.parametrize("args", [
    ["unpack", "{ref}", "--to", "npz"],
    ["slice", "{ref}", "0", "--to", "npz"],
    ["head", "{ref}", "--to", "h5", "-o", "-"],
    ["pad", "{ref}", "-o", "-"],
    ["pool", "{ref}", "-o", "-"],
    ["pack", "{json}", "-o", "-"],
], ids=lambda a: a[0])
def test_binary_output_is_not_written_onto_a_terminal(args, multi, tmp_path, monkeypatch):
    from lodtool.cli import _options

    src = tmp_path / "x.json"
    src.write_text("[[1]]")
    monkeypatch.setattr(_options, "stdout_is_terminal", lambda: True)
    result = run(*[a.format(ref=f"{multi}:feats", json=src) for a in args])
    assert result.exit_code == 2 and "to a terminal" in result.stderr
    assert result.stdout == ""
    monkeypatch.setattr(_options, "stdout_is_terminal", lambda: False)
    assert run(*[a.format(ref=f"{multi}:feats", json=src) for a in args]).exit_code == 0


def test_integers_beyond_uint64_get_a_float_hint(tmp_path):
    src = tmp_path / "big.json"
    src.write_text("[[100000000000000000000000]]")
    result = run("pack", src, "-o", tmp_path / "b.h5")
    assert result.exit_code == 1 and "--dtype float64" in result.stderr and "--dtype uint64" not in result.stderr
    src.write_text("[[10000000000000000000]]")  # fits uint64
    assert "--dtype uint64" in run("pack", src, "-o", tmp_path / "b.h5").stderr


def test_q_and_v_work_after_the_command_name(tmp_path):
    src = tmp_path / "x.json"
    src.write_text("[[1]]")
    result = run("pack", src, "-o", tmp_path / "x.h5", "-q")
    assert result.exit_code == 0 and result.stderr == ""
    assert run("validate", tmp_path / "x.h5", "-q").stdout == ""
    assert run("unpack", tmp_path / "x.h5", "-v", "--to", "json").stdout.strip() == "[[1]]"


def test_unpad_of_a_container_says_what_it_is(multi, tmp_path):
    result = run("unpad", multi, "-o", tmp_path / "u.h5")
    assert result.exit_code == 1 and "is an HDF5 file" in result.stderr and "pickle" not in result.stderr


def test_range_takes_open_ends_and_says_what_it_clamped(multi):
    result = run("slice", f"{multi}:feats", "--level", "0", "--range", "1:", "--to", "jsonl")
    assert result.exit_code == 0 and result.stdout == "[1.0,2.0]\n[3.0,4.0,5.0]\n"
    assert "sequences 1:3 of level 0" in result.stderr
    result = run("slice", f"{multi}:feats", "--level", "0", "--range", "-1:99", "--to", "jsonl")
    assert result.stdout == "[3.0,4.0,5.0]\n" and "2:3" in result.stderr
    assert run("slice", f"{multi}:feats", "--level", "0", "--range", "0:2", "--to", "jsonl").stderr == ""
    result = run("slice", f"{multi}:feats", "--level", "0", "--range", "5:9", "--to", "json")
    assert result.exit_code == 0 and result.stdout.strip() == "[]"  # zero sequences, clamped, and said so
    assert "sequences 3:3 of level 0" in result.stderr


def test_tree_and_head_have_json(multi):
    result = run("tree", f"{multi}:feats", "--json")
    info = json.loads(result.stdout)
    assert info["length"] == 3 and [c["length"] for c in info["children"]] == [1, 2, 3]
    assert info["children"][2]["values"] == [3.0, 4.0, 5.0] and info["more"] == 0
    result = run("head", f"{multi}:feats", "-n", "2", "--json")
    assert json.loads(result.stdout) == [[0.0], [1.0, 2.0]]


def test_slicing_a_tensor_by_top_level_sequences(multi):
    t = lodtool.from_nested([[1, 2], [3], [4, 5, 6]])
    assert t[0:2].to_nested() == [[1, 2], [3]] and t[-1:].to_nested() == [[4, 5, 6]]
    with lodtool.open(f"{multi}:feats") as f:
        assert f.tensor()[1:].to_nested() == [[1.0, 2.0], [3.0, 4.0, 5.0]]
    with pytest.raises(lodtool.LodIndexError):
        t[::2]


def test_from_nested_takes_a_list_of_2d_arrays():
    feats = [np.ones((3, 4), np.float32), np.zeros((1, 4), np.float32)]
    t = lodtool.from_nested(feats)
    assert t.lod == [[0, 3, 4]] and t.element_shape == (4,) and t.dtype == np.float32
    with pytest.raises(lodtool.LodShapeError, match="array 1"):
        lodtool.from_nested([np.ones((3, 4)), np.ones((2, 5))])


@pytest.mark.parametrize(("extra", "padded"), [
    (["--truncate"], [[0.0, 0.0], [1.0, 2.0], [3.0, 4.0]]),
    (["--truncate", "tail"], [[0.0, 0.0], [1.0, 2.0], [4.0, 5.0]]),
])
def test_pad_truncates_longer_sequences_on_request(extra, padded, multi, tmp_path):
    out = tmp_path / "p.npz"
    result = run("pad", f"{multi}:feats", "-o", out, "--maxlen", "2")
    assert result.exit_code == 1 and "--truncate" in result.stderr and not out.exists()
    assert run("pad", f"{multi}:feats", "-o", out, "--maxlen", "2", *extra).exit_code == 0
    arrays = np.load(out)
    assert arrays["padded"].tolist() == padded
    assert arrays["lengths"].tolist() == [1, 2, 2] and arrays["mask"].sum(axis=1).tolist() == [1, 2, 2]


# -- empty input ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "text"), [("e.jsonl", ""), ("e.jsonl", "\n \n"), ("e.json", "[]"), ("e.json", "")])
def test_empty_input_asks_for_the_level_count(name, text, tmp_path):
    src = tmp_path / name
    src.write_text(text)
    result = run("pack", src, "-o", tmp_path / "e.h5")
    assert result.exit_code == 1 and "give --lod-level (and --dtype)" in result.stderr and "empty input" in result.stderr
    assert not (tmp_path / "e.h5").exists()


def test_empty_input_with_a_level_count_gives_an_empty_valid_container(tmp_path):
    src = tmp_path / "e.jsonl"
    src.write_text("")
    out = tmp_path / "e.h5"
    result = run("pack", src, "-o", out, "--lod-level", "0", "--dtype", "int32")
    assert result.exit_code == 0, result.output
    t = lodtool.load(str(out))
    assert t.n_rows == 0 and t.dtype == np.int32 and t.lod_level == 0
    assert run("validate", out).exit_code == 0 and run("unpack", out).stdout.strip() == "[]"
    result = run("pack", "-", "--format", "jsonl", "-o", tmp_path / "s.h5", "--lod-level", "0", input="")
    assert result.exit_code == 0


def test_appending_an_empty_batch_changes_nothing(tmp_path):
    out = tmp_path / "a.h5"
    assert run("pack", "-", "--format", "jsonl", "-o", out, input="[[1, 2]]\n").exit_code == 0
    result = run("pack", "-", "--format", "jsonl", "-o", out, "--append", input="")
    assert result.exit_code == 0, result.output
    assert lodtool.load(str(out)).to_nested() == [[[1, 2]]]


def test_shell_completion_completes_commands_and_options():
    def complete(words: str, cword: int) -> str:
        env = {"_LODTOOL_COMPLETE": "bash_complete", "COMP_WORDS": words, "COMP_CWORD": str(cword)}
        return CliRunner().invoke(cli, [], env=env, prog_name="lodtool").output

    assert "plain,inspect" in complete("lodtool ins", 1)
    assert "plain,--overwrite" in complete("lodtool pack --ov", 2)
    assert "_lodtool_completion" in CliRunner().invoke(cli, [], env={"_LODTOOL_COMPLETE": "bash_source"},
                                                       prog_name="lodtool").output
