"""The CLI end to end with CliRunner: pack / inspect / validate / unpack / slice / tree / ops."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from lodtool import load
from lodtool.cli.main import cli

SAMPLES = Path(__file__).resolve().parent.parent / "sample_data"
ARTICLES = json.loads((SAMPLES / "articles.json").read_text())


def run(*args, input=None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=input)


def one_line_error(result) -> str:
    text = result.stderr if hasattr(result, "stderr") else result.output
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    assert "Traceback" not in text
    return lines[0]


@pytest.fixture
def articles(tmp_path) -> Path:
    out = tmp_path / "articles.lod.h5"
    result = run("pack", SAMPLES / "articles.json", "-o", out, "--level-names", "article,sentence")
    assert result.exit_code == 0, result.output
    return out


def test_pack_inspect_validate_unpack_round_trip(articles):
    info = json.loads(run("inspect", articles, "--json").stdout)
    (tensor,) = info["tensors"]
    assert tensor["name"] == "tensor" and tensor["rows"] == 15 and tensor["lod_level"] == 2
    assert tensor["level_names"] == ["article", "sentence"]
    assert [lv["sequences"] for lv in tensor["levels"]] == [3, 6]
    assert tensor["levels"][1]["max"] == 4 and tensor["levels"][0]["min"] == 1
    assert run("validate", articles).exit_code == 0
    result = run("unpack", articles, "--to", "json")
    assert result.exit_code == 0 and json.loads(result.stdout) == ARTICLES
    t = load(articles)
    assert t.recursive_sequence_lengths == [[3, 1, 2], [3, 2, 4, 1, 2, 3]]


def test_inspect_human_output(articles):
    result = run("inspect", articles)
    assert result.exit_code == 0
    assert "article" in result.stdout and "sentence" in result.stdout and "median" in result.stdout


def test_pack_jsonl_from_stdin(tmp_path):
    out = tmp_path / "docs.lod.h5"
    lines = "\n".join(json.dumps(a) for a in ARTICLES) + "\n"
    result = run("pack", "-", "--format", "jsonl", "-o", out, input=lines)
    assert result.exit_code == 0, result.output
    assert load(out).to_nested() == ARTICLES
    result = run("unpack", out, "--to", "jsonl")
    assert [json.loads(line) for line in result.stdout.splitlines()] == ARTICLES


def test_pack_npy_videos(tmp_path):
    out = tmp_path / "videos.lod.h5"
    files = sorted((SAMPLES / "videos").glob("*.npy"))
    assert run("pack", *files, "-o", out).exit_code == 0
    t = load(out)
    assert t.recursive_sequence_lengths == [[3, 1, 2]] and t.element_shape == (48, 64) and t.dtype == np.uint8
    assert np.array_equal(t.branch(2).data, np.load(files[2]))


def test_pack_lod_level_makes_element_shape(tmp_path):
    out = tmp_path / "p.lod.h5"
    assert run("pack", SAMPLES / "paddle_lod.json", "--lod-level", "2", "-o", out).exit_code == 0
    t = load(out)
    assert t.lod == [[0, 2, 3], [0, 2, 4, 7]] and t.shape == (7, 2)


def test_append(tmp_path, articles):
    assert run("pack", SAMPLES / "articles.json", "-o", articles, "--append").exit_code == 0
    assert load(articles).to_nested() == ARTICLES + ARTICLES


def test_malformed_json_is_one_line_with_position_and_no_output(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("[[[1, 2], [3,, 4]]]")
    out = tmp_path / "out.lod.h5"
    result = run("pack", bad, "-o", out)
    assert result.exit_code == 1
    line = one_line_error(result)
    assert "bad.json" in line and ":1:" in line
    assert not out.exists()
    assert not list(tmp_path.glob(".*tmp*"))


def test_ragged_elements_name_the_position(tmp_path):
    bad = tmp_path / "ragged.json"
    bad.write_text("[[[1, 2], [3]]]")
    result = run("pack", bad, "--lod-level", "1", "-o", tmp_path / "o.h5")
    assert result.exit_code == 1
    assert "<0,1>" in one_line_error(result) or "1:" in one_line_error(result)


def test_missing_file_and_foreign_files(tmp_path):
    result = run("inspect", tmp_path / "nope.h5")
    assert result.exit_code != 0 and "nope.h5" in one_line_error(result)
    text = tmp_path / "text.h5"
    text.write_text("not hdf5")
    result = run("inspect", text)
    assert result.exit_code == 1 and "text.h5" in one_line_error(result)
    foreign = tmp_path / "foreign.h5"
    with h5py.File(foreign, "w") as f:
        f["x"] = np.arange(3)
    result = run("inspect", foreign)
    assert result.exit_code == 1 and "not a lodtool container" in one_line_error(result)


def test_validate_exit_codes_and_problem_listing(tmp_path, articles):
    broken = tmp_path / "broken.lod.h5"
    broken.write_bytes(articles.read_bytes())
    with h5py.File(broken, "r+") as f:
        (offsets_name,) = [n for n in _datasets(f) if n.endswith("1") and "lod" in n]
        f[offsets_name][4] = 2  # level 1: offset[4]=2 < offset[3]=9
    result = run("validate", articles, broken)
    assert result.exit_code == 1
    assert "level 1" in result.stdout and "offset[4]=2" in result.stdout and "broken.lod.h5" in result.stdout
    report = json.loads(run("validate", "--json", broken).stdout)
    assert report[0]["ok"] is False and report[0]["problems"][0]["level"] == 1
    assert run("validate", tmp_path / "missing.h5").exit_code == 2
    not_h5 = tmp_path / "x.h5"
    not_h5.write_bytes(b"\0" * 100)
    assert run("validate", not_h5).exit_code == 2
    assert run("validate", articles, "--isolate").exit_code == 0


def _datasets(f):
    names = []
    f.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) else None)
    return names


def test_slice_seed_examples(articles, tmp_path):
    assert json.loads(run("slice", articles, "<2>", "--to", "json").stdout) == [[11, 12], [13, 14, 15]]
    assert json.loads(run("slice", articles, "2,0", "--to", "json").stdout) == [11, 12]
    assert json.loads(run("slice", articles, "-1,-1", "--to", "json").stdout) == [13, 14, 15]
    out = tmp_path / "two.lod.h5"
    assert run("slice", articles, "2", "-o", out).exit_code == 0
    assert load(out).lod == [[0, 2, 5]]
    result = run("slice", articles, "--level", "1", "--range", "2:4", "--to", "jsonl")
    assert [json.loads(x) for x in result.stdout.splitlines()] == [[6, 7, 8, 9], [10]]


@pytest.mark.parametrize("path, code, text", [
    ("3", 1, "out of range"), ("0,5", 1, "out of range"), ("0,0,0", 1, "has 3 indices"), ("a", 2, "bad branch"),
])
def test_slice_errors(articles, path, code, text):
    result = run("slice", articles, path, "--to", "json")
    assert result.exit_code == code
    assert text in one_line_error(result)


def test_head_tail(articles):
    result = run("head", articles, "-n", "2", "--to", "jsonl")
    assert [json.loads(x) for x in result.stdout.splitlines()] == ARTICLES[:2]
    result = run("tail", articles, "-n", "1", "--to", "jsonl")
    assert [json.loads(x) for x in result.stdout.splitlines()] == ARTICLES[-1:]
    result = run("tail", articles, "-n", "1", "--to", "tree")
    assert "<2>" in result.stdout


def test_tree_and_bars(articles):
    result = run("tree", articles, "--max-children", "2")
    assert result.exit_code == 0
    assert "<0>" in result.stdout and "<0,1>" in result.stdout and "1 more" in result.stdout
    assert "[4, 5]" in result.stdout
    result = run("tree", articles, "--style", "bars")
    assert result.stdout.splitlines() == ["3           1 2", "3   2  4    1 2  3", "||| || |||| | || |||"]
    result = run("tree", articles, "--style", "bars", "--path", "2")
    assert result.stdout.splitlines() == ["2  3", "|| |||"]


def test_expand_seed_example(tmp_path):
    x, y, out = tmp_path / "x.h5", tmp_path / "y.h5", tmp_path / "out.h5"
    assert run("pack", SAMPLES / "expand_x.json", "--lod-level", "1", "--dtype", "float32", "-o", x).exit_code == 0
    assert run("pack", SAMPLES / "expand_y.json", "--lod-level", "2", "-o", y).exit_code == 0
    result = run("expand", x, y, "--ref-level", "0", "-o", out)
    assert result.exit_code == 0, result.output
    t = load(out)
    assert t.lod == [[0, 1, 4, 7, 10]]
    assert np.allclose(t.data.ravel(), [1.1, 2.2, 3.3, 4.4, 2.2, 3.3, 4.4, 2.2, 3.3, 4.4])


def test_pool_pad_unpad_reverse_pack_plan(articles, tmp_path):
    out = tmp_path / "pool.h5"
    assert run("pool", articles, "--type", "sum", "-o", out).exit_code == 0
    pooled = load(out)
    assert pooled.lod == [[0, 3, 4, 6]] and pooled.data.tolist() == [6, 9, 30, 10, 23, 42]
    npz = tmp_path / "pad.npz"
    assert run("pad", articles, "-o", npz).exit_code == 0
    arrays = np.load(npz)
    assert arrays["padded"].shape == (6, 4) and arrays["lengths"].tolist() == [3, 2, 4, 1, 2, 3]
    assert arrays["mask"].sum() == 15
    back = tmp_path / "back.h5"
    assert run("unpad", npz, "-o", back).exit_code == 0
    assert load(back).to_nested() == [s for a in ARTICLES for s in a]
    rev = tmp_path / "rev.h5"
    assert run("reverse", articles, "-o", rev).exit_code == 0
    assert load(rev).to_nested()[0][0] == [3, 2, 1]
    plan = json.loads(run("pack-plan", articles, "--level", "1", "--json").stdout)
    assert plan["sorted_indices"] == [2, 0, 5, 1, 4, 3] and plan["batch_sizes"] == [6, 5, 3, 1]


def test_container_to_stdout_and_back(articles):
    result = CliRunner().invoke(cli, ["slice", str(articles), "2", "--to", "h5", "-o", "-"])
    assert result.exit_code == 0 and result.stdout_bytes[:8] == b"\x89HDF\r\n\x1a\n"
    result = CliRunner().invoke(cli, ["unpack", "-", "--to", "json"], input=result.stdout_bytes)
    assert json.loads(result.stdout) == [[11, 12], [13, 14, 15]]


# -- stdin for validate and verify, as for every other reading command -------------------------------------------
def test_validate_reads_stdin(articles):
    result = run("validate", "-", articles, input=articles.read_bytes())
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["ok -", f"ok {articles}"]
    report = json.loads(run("validate", "--json", "-", input=articles.read_bytes()).stdout)
    assert [(r["path"], r["ok"]) for r in report] == [("-", True)]


def test_validate_names_stdin_in_its_problems(tmp_path, articles):
    bad = tmp_path / "bad.lod.h5"
    bad.write_bytes(articles.read_bytes())
    with h5py.File(bad, "r+") as f:
        f["tensor/lod/1"][3] = 2  # offsets that go down
    result = run("validate", "--json", "-", input=bad.read_bytes())
    assert result.exit_code == 1
    (report,) = json.loads(result.stdout)
    assert report["path"] == "-" and report["problems"] and {p["file"] for p in report["problems"]} == {"-"}
    result = run("validate", "-", input=b"not a container")
    assert result.exit_code == 2 and result.stdout.startswith("unreadable -: not an HDF5 file")


def test_verify_reads_stdin(articles):
    result = run("verify", "-", input=articles.read_bytes())
    assert result.exit_code == 0, result.output
    assert result.stdout == "ok - (3 datasets)\n"
    (report,) = json.loads(run("verify", "--json", "-", input=articles.read_bytes()).stdout)
    assert report["path"] == "-" and report["ok"]


# -- verify shows progress ---------------------------------------------------------------------------------------
def test_verify_drives_a_progress_bar_up_to_the_bytes_it_hashes(articles, tmp_path, monkeypatch):
    import contextlib

    from lodtool.cli import _render

    calls, seen = [], []

    @contextlib.contextmanager
    def recording(total, description, enabled):
        calls.append((description, enabled))
        yield lambda done, total=None: seen.append((done, total))

    monkeypatch.setattr(_render, "progress", recording)
    second = tmp_path / "second.lod.h5"
    second.write_bytes(articles.read_bytes())
    assert run("verify", articles, second).exit_code == 0
    one_file = 15 * 8 + 4 * 8 + 7 * 8  # the data and the two offsets datasets, int64
    assert calls == [("verifying", True)] and seen[-1] == (2 * one_file, 2 * one_file)
    assert [done for done, _ in seen] == sorted(done for done, _ in seen)
    calls.clear()
    assert run("verify", "-q", articles).exit_code == 0 and calls == [("verifying", False)]


# -- bars wider than the terminal --------------------------------------------------------------------------------
def _one_article(tmp_path, lengths) -> tuple[Path, list[str]]:
    """A container of one article of sentences of ``lengths``, and its bars picture drawn whole."""
    from lodtool import LoDTensor, save
    from lodtool.cli._render import bars

    path = tmp_path / "wide.lod.h5"
    offsets = np.concatenate([[0], np.cumsum(lengths)]).tolist()
    save(str(path), LoDTensor(np.arange(offsets[-1]), [[0, len(lengths)], offsets]))
    return path, bars([[len(lengths)], lengths], 0)


def test_bars_wider_than_the_terminal_are_cut_at_one_column(tmp_path, monkeypatch):
    from rich.cells import cell_len

    from lodtool.cli import _render

    path, full = _one_article(tmp_path, [30, 25, 40, 12, 33, 27])
    monkeypatch.setenv("FORCE_COLOR", "1")  # rich draws as on a terminal
    monkeypatch.setenv("COLUMNS", "60")
    monkeypatch.setattr(_render, "_console", None)
    result = run("tree", path, "--style", "bars")
    assert result.exit_code == 0, result.output
    shown = result.stdout.splitlines()
    assert len(shown) == len(full) == 3  # each row once: none wrapped onto a second line
    assert shown[0] == full[0] == "6"  # a row that fits is whole
    for whole, cut in zip(full[1:], shown[1:]):  # the others end at the same column, so the labels stay over their bars
        assert cell_len(cut) == 60 and cut.endswith("…") and whole.startswith(cut[:-1])
    assert "cut at the terminal's edge" in result.stderr


def test_bars_into_a_pipe_are_whole_rows(tmp_path, monkeypatch):
    from lodtool.cli import _render

    path, full = _one_article(tmp_path, [150, 120])  # wider than the 200 columns a pipe gets for reports
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(_render, "_console", None)
    result = run("tree", path, "--style", "bars")
    assert result.stdout.splitlines() == full and result.stderr == ""


def test_bars_of_many_empty_sequences_are_refused_before_any_offsets_are_read(tmp_path, monkeypatch):
    from lodtool import LoDTensor, save
    from lodtool.container.reader import LazyTensor

    path = tmp_path / "empty.lod.h5"
    save(str(path), LoDTensor(np.zeros(0, np.int64), [np.zeros(100_001, np.int64)]))  # no rows, 10^5 sequences
    monkeypatch.setattr(LazyTensor, "read", lambda self, *a, **k: pytest.fail("bars read the whole tensor"))
    result = run("tree", path, "--style", "bars")
    assert result.exit_code != 0
    assert "100,000 sequences and elements are too many to draw as bars" in one_line_error(result)


def test_shard_reads_stdin(articles, tmp_path):
    result = run("shard", "-", "-o", tmp_path / "s", "--shard-size", "64B", input=articles.read_bytes())
    assert result.exit_code == 0, result.output
    assert load(tmp_path / "s").to_nested() == ARTICLES


def test_pack_plan_summarises_long_arrays_and_json_gives_them_all(tmp_path):
    from lodtool import LoDTensor, save

    path = tmp_path / "many.lod.h5"
    lengths = np.arange(1, 1001) % 7 + 1
    save(path, LoDTensor(np.zeros(int(lengths.sum())), recursive_sequence_lengths=[lengths.tolist()]))
    shown = run("pack-plan", path)
    assert shown.exit_code == 0 and "1,000 sequences, 7 time steps" in shown.stdout
    assert "985 more" in shown.stdout and "--json gives every entry" in shown.stdout
    assert len(shown.stdout) < 2000
    full = json.loads(run("pack-plan", path, "--json").stdout)
    assert len(full["lengths"]) == 1000


def test_pack_plan_json_streams_the_same_document_as_the_whole_plan(tmp_path, monkeypatch):
    from lodtool import LoDTensor, save
    from lodtool.ops import pack_plan
    from lodtool.tasks import _operators

    monkeypatch.setattr(_operators, "PLAN_WINDOW", 7)  # many pieces, several passes for the sorted indices
    monkeypatch.setattr(_operators, "PLAN_BLOCK", 20)
    rng = np.random.default_rng(5)
    lengths = rng.integers(0, 6, 101)
    x = LoDTensor(np.zeros(int(lengths.sum())), recursive_sequence_lengths=[lengths.tolist()])
    save(tmp_path / "x.lod.h5", x)
    plan = pack_plan(x)
    whole = {key: getattr(plan, key).tolist() for key in ("sorted_indices", "unsorted_indices", "lengths",
                                                         "batch_sizes")}
    result = run("pack-plan", tmp_path / "x.lod.h5", "--json")
    assert result.exit_code == 0 and result.stdout == json.dumps(whole, separators=(",", ":")) + "\n"
    shown = run("pack-plan", tmp_path / "x.lod.h5").stdout.splitlines()
    assert shown[1] == f"sorted_indices: [{', '.join(map(str, whole['sorted_indices'][:10]))}, ... 86 more ..., " \
                       f"{', '.join(map(str, whole['sorted_indices'][-5:]))}]"
    save(tmp_path / "empty.lod.h5", LoDTensor(np.zeros(0), [[0]]))
    assert json.loads(run("pack-plan", tmp_path / "empty.lod.h5", "--json").stdout) == \
        {"sorted_indices": [], "unsorted_indices": [], "lengths": [], "batch_sizes": []}


# -- inspect of many tensors -------------------------------------------------------------------------------------
def _many_tensors(path: Path) -> None:
    from lodtool import LoDTensor, save

    tensors = {f"t{i}": LoDTensor(np.arange(i + 2, dtype=np.float32), [[0, 1, i + 2]], level_names=["doc"])
               for i in range(40)}
    tensors["shares"] = LoDTensor(np.ones(7, np.int8), tensors["t5"].lod)
    save(path, tensors)


def test_inspect_json_writes_tensor_by_tensor_the_document_of_inspect_file(tmp_path):
    from lodtool.cli._options import _json_default
    from lodtool.container.checks import inspect_file

    path = tmp_path / "many.lod.h5"
    _many_tensors(path)
    result = run("inspect", "--json", path, path)
    assert result.exit_code == 0, result.output
    whole = json.dumps(inspect_file(path), indent=None, separators=(",", ":"), default=_json_default)
    assert result.stdout == 2 * (whole + "\n")  # byte for byte what emit_json of the whole document writes
    assert json.loads(whole)["tensors"][5]["shared_lod_with"] == ["shares"]
    one = run("inspect", "--json", f"{path}:t7")
    assert [t["name"] for t in json.loads(one.stdout)["tensors"]] == ["t7"]


@pytest.mark.parametrize("as_json", [True, False])
def test_inspect_of_a_broken_tensor_past_the_first_writes_nothing_of_the_file(tmp_path, as_json):
    path = tmp_path / "many.lod.h5"
    _many_tensors(path)
    with h5py.File(path, "r+") as f:
        f["t30/lod/0"][1] = 99  # past the tensor's rows
    result = run("inspect", *(["--json"] if as_json else []), path)
    assert result.exit_code != 0 and result.stdout == ""  # every tensor is summarised before the first is written
    assert "t30" in one_line_error(result)
