"""Every reading command on the token datasets of LLM training in place: a Megatron prefix, a datatrove .ds, a
dolma array.  Each answer is compared with the same command on a container holding the same tensor."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

import lodtool
from lodtool import LoDTensor
from lodtool.cli.main import cli
from lodtool.io.datatrove import write_datatrove
from lodtool.io.dolma import write_dolma
from lodtool.io.megatron import write_megatron

DOCUMENTS = LoDTensor(np.array([1, 2, 3, 4, 5, 6], np.uint16), [[0, 1, 3], [0, 2, 2, 6]])
SEQUENCES = LoDTensor(np.array([1, 2, 3, 4, 5, 6], np.uint16), [[0, 2, 2, 6]])


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def ok(*args):
    result = run(*args)
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """The three formats and, beside each, the container ``pack`` makes of it (tensor ``tokens``)."""
    d = tmp_path_factory.mktemp("tokens")
    write_megatron(DOCUMENTS, str(d / "corpus"))
    write_datatrove(SEQUENCES, str(d / "web.ds"))
    write_dolma(SEQUENCES, str(d / "part.npy"))
    for source, packed in (("corpus", "corpus.lod.h5"), ("web.ds", "web.lod.h5"), ("part.npy", "part.lod.h5")):
        ok("pack", d / source, "--name", "tokens", "-o", d / packed)
    return d


SOURCES = {"megatron": ("corpus", "corpus.lod.h5"), "datatrove": ("web.ds", "web.lod.h5"),
           "dolma": ("part.npy", "part.lod.h5")}


@pytest.mark.parametrize("fmt", sorted(SOURCES))
def test_lodtool_open_and_load_read_them_in_place(data, fmt):
    source, packed = SOURCES[fmt]
    expected = lodtool.load(str(data / packed))
    with lodtool.open(str(data / source)) as f:
        t = f.tensor()
        assert f.format == fmt and t.mappable and t.read().equals(expected)
        assert t.branch(len(t) - 1).equals(expected.branch(len(t) - 1))
    assert lodtool.load(str(data / source)).equals(expected)


@pytest.mark.parametrize("fmt", sorted(SOURCES))
def test_inspect_describes_them_in_place(data, fmt):
    source, packed = SOURCES[fmt]
    info = json.loads(ok("inspect", "--json", data / source).stdout)
    assert info["format"] == fmt and len(info["files"]) >= 2
    (tensor,) = info["tensors"]
    (stored,) = json.loads(ok("inspect", "--json", data / packed).stdout)["tensors"]
    assert tensor["levels"] == stored["levels"] and tensor["dtype"] == stored["dtype"]
    assert "memory-mapped" in ok("inspect", data / source).stdout


@pytest.mark.parametrize("fmt", sorted(SOURCES))
def test_validate_and_verify(data, fmt):
    source, _ = SOURCES[fmt]
    assert ok("validate", data / source).stdout.startswith("ok ")
    out = ok("verify", data / source).stdout
    assert "nothing to verify" in out and "records no checksums" in out


@pytest.mark.parametrize("fmt", sorted(SOURCES))
@pytest.mark.parametrize("command", [["slice", "1"], ["slice", "--level", "0", "--range", "1:"], ["head", "-n", "2"],
                                     ["tail", "-n", "1"]])
def test_the_sequence_commands_give_what_they_give_on_the_container(data, fmt, command):
    source, packed = SOURCES[fmt]
    name, *rest = command
    assert ok(name, data / source, *rest, "--to", "jsonl").stdout == ok(name, data / packed, *rest, "--to",
                                                                        "jsonl").stdout


@pytest.mark.parametrize("fmt", sorted(SOURCES))
def test_tree(data, fmt):
    source, packed = SOURCES[fmt]
    tree = json.loads(ok("tree", data / source, "--json").stdout)
    assert tree["children"] == json.loads(ok("tree", data / packed, "--json").stdout)["children"]


@pytest.mark.parametrize("fmt", sorted(SOURCES))
def test_batch(data, fmt, tmp_path):
    source, packed = SOURCES[fmt]
    ok("batch", data / source, "--max-tokens", "4", "-o", tmp_path / "a.npz")
    ok("batch", data / packed, "--max-tokens", "4", "-o", tmp_path / "b.npz")
    a, b = np.load(tmp_path / "a.npz"), np.load(tmp_path / "b.npz")
    assert a.files == b.files and "indices" in a.files
    for key in a.files:
        if key != "meta":  # it names the source and its digest
            assert np.array_equal(a[key], b[key]), key
    ok("batch", data / source, "--max-tokens", "4", "--to", "npz", "-o", tmp_path / "batches")
    assert sorted(p.name for p in (tmp_path / "batches").iterdir())


def _operator_args(command: str, x: str, y: str, out: str) -> list[str]:
    return {"pool": [x, "-o", out], "softmax": [x, "-o", out], "reverse": [x, "-o", out], "pad": [x, "-o", out],
            "pack-plan": [x], "expand": [x, y, "-o", out], "concat": [x, x, "-o", out],
            "seq-slice": [x, "--offset", "0", "--length", "1", "--clip", "-o", out],
            "erase": [x, "--tokens", "2", "-o", out], "enumerate": [x, "--win-size", "2", "-o", out],
            "reshape": [x, "--new-dim", "1", "-o", out], "lod-reset": [x, "--target-lod", "0,6", "-o", out]}[command]


def _result(path) -> object:
    if str(path).endswith(".npz"):
        with np.load(path) as z:
            return {k: z[k].tolist() for k in z.files}
    return lodtool.load(str(path)).to_nested()


OPERATORS = ["concat", "enumerate", "erase", "expand", "lod-reset", "pack-plan", "pad", "pool", "reshape", "reverse",
             "seq-slice", "softmax"]


@pytest.mark.parametrize("command", OPERATORS)
@pytest.mark.parametrize("fmt", ["datatrove", "megatron"])
def test_every_operator_takes_them_as_input(data, tmp_path, command, fmt):
    source, packed = SOURCES[fmt]
    if command == "expand":  # x must have 1 level: the datatrove file, expanded by the dataset
        x_source, x_packed = SOURCES["datatrove"]
    else:
        x_source, x_packed = source, packed
    suffix = ".npz" if command == "pad" else ".lod.h5"
    direct = ok(command, *_operator_args(command, str(data / x_source), str(data / source), str(tmp_path / f"a{suffix}")))
    packed_run = ok(command, *_operator_args(command, str(data / x_packed), str(data / packed),
                                             str(tmp_path / f"b{suffix}")))
    if command == "pack-plan":
        assert direct.stdout == packed_run.stdout
    else:
        assert _result(tmp_path / f"a{suffix}") == _result(tmp_path / f"b{suffix}")


#: a dolma array without its .csv.gz: uint32 tokens (24 bytes, which uint16 would fit too), documents ending at 9
BARE = LoDTensor(np.array([1, 9, 9, 2, 3, 9], np.uint32), [[0, 2, 3, 6]])
BARE_FLAGS = ["--token-dtype", "uint32", "--eos-id", "9"]


@pytest.fixture(scope="module")
def bare(tmp_path_factory):
    """``(the array, the container pack makes of it)``: the array has no .csv.gz, so reading it takes the flags."""
    d = tmp_path_factory.mktemp("bare")
    write_dolma(BARE, str(d / "bare.npy"))
    (d / "bare.csv.gz").unlink()
    ok("pack", d / "bare.npy", *BARE_FLAGS, "--name", "tokens", "-o", d / "bare.lod.h5")
    assert lodtool.load(str(d / "bare.lod.h5")).to_nested() == BARE.to_nested()
    return d / "bare.npy", d / "bare.lod.h5"


@pytest.mark.parametrize("command", OPERATORS)
def test_every_operator_takes_the_token_flags(bare, tmp_path, command):
    array, packed = bare
    suffix = ".npz" if command == "pad" else ".lod.h5"
    without = run(command, *_operator_args(command, str(array), str(array), str(tmp_path / f"c{suffix}")))
    assert without.exit_code == 2 and "give --eos-id" in without.stderr  # the library's eos_token_id=..., as a flag
    assert not (tmp_path / f"c{suffix}").exists()
    direct = ok(command, *_operator_args(command, str(array), str(array), str(tmp_path / f"a{suffix}")), *BARE_FLAGS)
    packed_run = ok(command, *_operator_args(command, str(packed), str(packed), str(tmp_path / f"b{suffix}")))
    if command == "pack-plan":
        assert direct.stdout == packed_run.stdout
    else:
        assert _result(tmp_path / f"a{suffix}") == _result(tmp_path / f"b{suffix}")


@pytest.mark.parametrize("command", ["pool", "pad", "expand", "pack-plan"])
def test_the_operators_on_dask_read_them_with_the_flags(bare, tmp_path, command):
    pytest.importorskip("dask")
    array, packed = bare
    suffix = ".npz" if command == "pad" else ".lod.h5"
    direct = ok(command, *_operator_args(command, str(array), str(array), str(tmp_path / f"a{suffix}")), *BARE_FLAGS,
                "--scheduler", "threads")
    packed_run = ok(command, *_operator_args(command, str(packed), str(packed), str(tmp_path / f"b{suffix}")))
    if command == "pack-plan":
        assert direct.stdout == packed_run.stdout
    else:
        assert _result(tmp_path / f"a{suffix}") == _result(tmp_path / f"b{suffix}")


def test_batch_takes_the_token_flags(bare, tmp_path):
    array, packed = bare
    assert "give --eos-id" in run("batch", array, "--max-tokens", "4", "-o", tmp_path / "x.npz").stderr
    ok("batch", array, *BARE_FLAGS, "--max-tokens", "4", "-o", tmp_path / "a.npz")
    for mode in ("sorted", "chunks"):  # the report reads the source's chunks, with the flags too
        report = json.loads(ok("batch", array, *BARE_FLAGS, "--max-tokens", "4", "--mode", mode, "--stats",
                               "--json").stdout)
        assert report["plan"]["sequences"] == len(BARE)
    ok("batch", packed, "--max-tokens", "4", "-o", tmp_path / "b.npz")
    with np.load(tmp_path / "a.npz") as a, np.load(tmp_path / "b.npz") as b:
        assert all(np.array_equal(a[k], b[k]) for k in a.files if k != "meta")
    ok("batch", array, *BARE_FLAGS, "--plan", tmp_path / "a.npz", "--to", "npz", "-o", tmp_path / "from_array")
    ok("batch", packed, "--plan", tmp_path / "b.npz", "--to", "npz", "-o", tmp_path / "from_container")
    written = sorted(p.name for p in (tmp_path / "from_array").iterdir())
    assert written == sorted(p.name for p in (tmp_path / "from_container").iterdir()) and written
    for name in written:
        assert _result(tmp_path / "from_array" / name) == _result(tmp_path / "from_container" / name)


def _tokens(path):
    with lodtool.open(str(path)) as f:
        return f.tensor().tokens


@pytest.mark.parametrize("fmt", sorted(SOURCES))
def test_shard_reads_them_and_keeps_what_pack_records(data, tmp_path, fmt):
    source, packed = SOURCES[fmt]
    ok("shard", data / source, "-o", f"{tmp_path / 's'}/", "--shard-size", "4B")
    from lodtool.container.shards import read_manifest

    manifest = read_manifest(tmp_path / "s")
    assert len(manifest.shards) > 1 and list(manifest.tensors) == ["tokens"]
    assert lodtool.load(str(tmp_path / "s")).equals(lodtool.load(str(data / packed)))
    assert _tokens(tmp_path / "s") == _tokens(data / packed)
    result = run("shard", data / source, "--name", "loss", "-o", f"{tmp_path / 'other'}/")
    assert result.exit_code == 2 and "is sharded by its tokens (tensor 'tokens'), not tensor 'loss'" in result.stderr


def test_shard_and_pack_into_a_folder_take_the_token_flags_and_record_them(bare, tmp_path):
    from lodtool.container import open_file
    from lodtool.container.shards import read_manifest

    array, packed = bare
    assert "give --eos-id" in run("shard", array, "-o", f"{tmp_path / 'x'}/").stderr
    ok("shard", array, *BARE_FLAGS, "-o", f"{tmp_path / 's'}/", "--shard-size", "8B")
    ok("pack", array, *BARE_FLAGS, "--vocab-size", "10", "--bos-id", "8", "--tokenizer-name", "tiny", "-o",
       f"{tmp_path / 'p'}/", "--shard-size", "8B")
    for folder, vocab in (("s", None), ("p", 10)):
        manifest = read_manifest(tmp_path / folder)
        want = _tokens(packed).merged(vocab_size=vocab, **({"bos_id": 8, "tokenizer_name": "tiny"} if vocab else {}))
        assert len(manifest.shards) == 3 and manifest.tensors[manifest.names[0]].tokens == want
        for shard in manifest.shards:  # each shard, a container readable alone, records it too
            with open_file(tmp_path / folder / shard.file) as f:
                assert f.tensor().tokens == want
        assert lodtool.load(str(tmp_path / folder)).to_nested() == BARE.to_nested()
        assert _tokens(tmp_path / folder).eos_id == 9


def test_pack_into_a_folder_on_dask_records_the_token_metadata(bare, tmp_path):
    pytest.importorskip("dask")
    array, packed = bare
    ok("pack", array, array, *BARE_FLAGS, "--vocab-size", "10", "-o", f"{tmp_path / 'p'}/", "--scheduler", "threads")
    assert _tokens(tmp_path / "p") == _tokens(packed).merged(vocab_size=10)
    assert lodtool.load(str(tmp_path / "p")).to_nested() == BARE.to_nested() * 2


def test_unpack_reads_them_and_writes_another(data, tmp_path):
    ok("unpack", data / "corpus", "--to", "datatrove", "--level", "1", "-o", tmp_path / "x.ds")
    with lodtool.open(str(tmp_path / "x.ds")) as f:
        assert f.tensor().read().lod == [DOCUMENTS.lod[1]]


# -- bad input: one line naming the file and the index, a non-zero exit, nothing written ------------------
def _damaged(d, damage: str) -> tuple[str, str]:
    """A damaged dataset in ``d``: ``(its path, what the one-line error must say)``."""
    import struct

    import numpy as np

    t = LoDTensor(np.arange(1, 11, dtype=np.uint16), [[0, 2, 4], [0, 2, 5, 7, 10]])
    if damage == "decreasing .ds.index":
        write_datatrove(LoDTensor(t.data, [t.lod[1]]), str(d / "x.ds"))
        ends = np.fromfile(d / "x.ds.index", "<u8")
        ends[1] = 1
        ends.tofile(d / "x.ds.index")
        return str(d / "x.ds"), "x.ds.index: document_ends[1]: document 1 ends at token 1, before document 0"
    if damage == "fairseq as megatron":
        write_megatron(LoDTensor(t.data, [t.lod[1]]), str(d / "x"), kind="fairseq")
        return str(d / "x"), "x.idx: byte 26: this is a fairseq MMIDIDX index"
    write_megatron(t, str(d / "x"))
    if damage == "truncated .bin":
        with open(d / "x.bin", "r+b") as f:
            f.truncate(14)
        return str(d / "x"), "x.idx: sequence_pointers[3]: sequence 3 spans bytes 14..20 of "
    if damage == "pointers past the .bin":
        with open(d / "x.idx", "r+b") as f:
            f.seek(34 + 4 * 4 + 8 * 2)
            f.write(struct.pack("<q", 100))
        return str(d / "x"), "x.idx: sequence_pointers[2]: sequence 2 spans bytes 100..104 of "
    assert damage == "a dtype code that does not exist"
    with open(d / "x.idx", "r+b") as f:
        f.seek(17)
        f.write(bytes([12]))
    return str(d / "x"), "x.idx: byte 17: dtype code 12 does not exist"


DAMAGES = ["truncated .bin", "pointers past the .bin", "a dtype code that does not exist", "fairseq as megatron",
           "decreasing .ds.index"]
READERS = [["pack", "{x}", "-o", "{out}/o.lod.h5"], ["inspect", "{x}"], ["head", "{x}", "--to", "jsonl"],
           ["tail", "{x}", "--to", "jsonl"], ["slice", "{x}", "1"], ["tree", "{x}"],
           ["unpack", "{x}", "--to", "megatron", "-o", "{out}/good"], ["pool", "{x}", "-o", "{out}/p.lod.h5"]]


def _cases():
    for damage in DAMAGES:
        for command in READERS:
            if damage != "fairseq as megatron" or command[0] == "pack":
                yield pytest.param(damage, command, id=f"{damage}-{command[0]}")


@pytest.mark.parametrize("damage, command", list(_cases()))
def test_bad_input_is_one_line_naming_the_file_and_index_and_writes_nothing(tmp_path, damage, command):
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    out.mkdir()
    x, expected = _damaged(src, damage)
    write_megatron(DOCUMENTS, str(out / "good"))  # an existing prefix that a failed unpack must leave as it was
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    args = [a.format(x=x, out=out) for a in command]
    if damage == "fairseq as megatron":  # read in place, the .idx is told as fairseq by its size: --format insists
        args += ["--format", "megatron"]
    result = run(*args)
    assert result.exit_code == 1, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("lodtool: error: ") and expected in line and "Traceback" not in result.output
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


@pytest.mark.parametrize("damage", [d for d in DAMAGES if d != "fairseq as megatron"])
def test_validate_names_the_first_violation(tmp_path, damage):
    x, expected = _damaged(tmp_path, damage)
    result = run("validate", x)
    assert result.exit_code in (1, 2) and expected in result.stdout + result.stderr


def test_head_tail_and_slice_write_token_datasets_too(data, tmp_path):
    ok("head", data / "corpus", "-n", "1", "--to", "megatron", "-o", tmp_path / "h")
    assert lodtool.load(str(tmp_path / "h")).to_nested() == DOCUMENTS.head(1).to_nested()
    ok("tail", data / "web.ds", "-n", "2", "-o", tmp_path / "t.ds")  # the format from the extension
    assert lodtool.load(str(tmp_path / "t.ds")).to_nested() == SEQUENCES.tail(2).to_nested()
    ok("slice", data / "corpus.lod.h5", "1", "--to", "fairseq", "-o", tmp_path / "s")
    assert lodtool.load(str(tmp_path / "s")).to_nested() == DOCUMENTS.branch(1).to_nested()
    result = run("head", data / "corpus", "--to", "megatron")
    assert result.exit_code == 2 and "give an output path prefix, not a stream" in result.stderr


DEEP = LoDTensor(np.arange(10, dtype=np.uint16), [[0, 1, 2], [0, 2, 3], [0, 3, 6, 10]])


EXCERPTS = {"slice-range": (["slice", "--level", "0", "--range", "0:2"], {"level": 0, "start": 0, "stop": 2}),
            "slice-branch": (["slice", "0"], {"branch": "0"}), "head": (["head"], {}), "tail": (["tail"], {})}


@pytest.mark.parametrize("excerpt", sorted(EXCERPTS))
def test_an_excerpt_deeper_than_the_format_names_store_level_and_store_level_flattens(tmp_path, excerpt):
    from lodtool import tasks

    deep = str(tmp_path / "deep.lod.h5")
    lodtool.save(deep, DEEP)
    (name, *rest), library = EXCERPTS[excerpt]
    result = run(name, deep, *rest, "--to", "fairseq", "-o", tmp_path / "x")
    assert result.exit_code == 2 and "choose the level whose sequences it keeps with --store-level (0.." in result.stderr
    assert "--level" not in result.stderr and not list(tmp_path.glob("x.*"))
    ok(name, deep, *rest, "--to", "fairseq", "--store-level", "1", "-o", tmp_path / "x")
    part = getattr(tasks, name)(deep, **library).tensor
    want = [part.branch(*path).data.tolist() for path in _level_items(part, 1)]
    assert lodtool.load(str(tmp_path / "x")).to_nested() == want and want


def _level_items(t, level):
    """The index paths of the sequences of ``level``, in order."""
    paths = [(i,) for i in range(len(t))]
    for _ in range(level):
        paths = [p + (j,) for p in paths for j in range(len(t.branch(*p)))]
    return paths


def test_store_level_is_refused_where_the_format_keeps_every_level(tmp_path):
    lodtool.save(str(tmp_path / "deep.lod.h5"), DEEP)
    for args in (["--to", "jsonl"], ["-o", tmp_path / "y.lod.h5"], ["--to", "tree"]):
        result = run("head", tmp_path / "deep.lod.h5", "--store-level", "1", *args)
        assert result.exit_code == 2 and "--store-level" in result.stderr, args
    assert not (tmp_path / "y.lod.h5").exists()


@pytest.mark.parametrize("fmt", sorted(SOURCES))
def test_validate_vocab_size_names_the_first_id_past_it_in_place_packed_and_sharded(data, tmp_path, fmt):
    source, packed = SOURCES[fmt]
    assert ok("validate", data / source, "--vocab-size", "7").stdout.startswith("ok ")
    first = int(np.flatnonzero(lodtool.load(str(data / packed)).data >= 5)[0])  # id 5, the first one past 5
    result = run("validate", data / source, "--vocab-size", "5", "--json")
    (report,) = json.loads(result.stdout)
    assert result.exit_code == 1 and f"[{first}]: token id 5 is not under the vocabulary size 5" in \
        report["problems"][0]["message"]
    result = run("validate", data / packed, "--vocab-size", "5")
    assert result.exit_code == 1 and f"data row {first}: token id 5 is not under the vocabulary size 5" in result.stdout
    ok("shard", data / source, "-o", f"{tmp_path / 's'}/")
    result = run("validate", tmp_path / "s", "--vocab-size", "5")
    assert result.exit_code == 1 and f"data row {first}: token id 5 is not under" in result.stdout


def test_validate_uses_the_recorded_vocabulary_unless_given_and_the_library_takes_it(bare, tmp_path):
    from lodtool import tasks

    array, _ = bare
    ok("pack", array, *BARE_FLAGS, "--vocab-size", "12", "-o", tmp_path / "v.lod.h5")
    assert ok("validate", tmp_path / "v.lod.h5").stdout.startswith("ok ")
    result = run("validate", tmp_path / "v.lod.h5", "--vocab-size", "9")
    assert result.exit_code == 1 and "data row 1: token id 9 is not under the vocabulary size 9" in result.stdout
    (report,) = tasks.validate([str(array)], vocab_size=9, token_dtype="uint32", eos_token_id=9)
    assert not report.ok and "tokens[1]: token id 9" in str(report.problems[0])
    with pytest.raises(lodtool.errors.LodUsageError, match="vocab_size must be a positive integer"):
        tasks.validate([str(array)], vocab_size=0)


@pytest.mark.parametrize("fmt, tokens_file", [("megatron", "corpus.bin"), ("datatrove", "web.ds"),
                                              ("dolma", "part.npy")])
def test_pack_counts_its_progress_up_to_the_size_of_the_tokens(data, tmp_path, monkeypatch, fmt, tokens_file):
    import contextlib

    from lodtool.cli import _render

    seen = []

    @contextlib.contextmanager
    def progress(total, description, enabled):
        seen.append(total)
        yield lambda done, total=None: seen.append(done)

    monkeypatch.setattr(_render, "progress", progress)
    source, _ = SOURCES[fmt]
    ok("pack", data / source, "-o", tmp_path / "x.lod.h5")
    size = (data / tokens_file).stat().st_size
    assert seen[0] == size and seen[-1] == size  # the total, and the bytes read at the end


def test_a_tiny_shard_size_is_refused_for_a_prefix_by_the_size_of_its_tokens(tmp_path):
    write_megatron(LoDTensor(np.arange(3000, dtype=np.uint16), [list(range(0, 3001, 3))]), str(tmp_path / "big"))
    result = run("shard", tmp_path / "big", "-o", f"{tmp_path / 's'}/", "--shard-size", "1B")
    assert result.exit_code == 2 and "would cut 5.9 KiB of input" in result.stderr and not (tmp_path / "s").exists()


def test_batch_help_says_it_reads_token_datasets():
    assert "token dataset read in place" in " ".join(ok("batch", "--help").stdout.split())
