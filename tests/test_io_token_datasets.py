"""The one entry to the token formats: which format a path is, open and validate whatever it is."""

from __future__ import annotations

import os

import numpy as np
import pytest

from lodtool.errors import LodUsageError
from lodtool.io.token_datasets import format_of, open_dataset, validate_dataset

GOLDEN = os.path.join(os.path.dirname(__file__), "data", "llm")


@pytest.mark.parametrize("name, fmt", [
    ("megatron_int32", "megatron"), ("megatron_int32.idx", "megatron"), ("megatron_int32.bin", "megatron"),
    ("datatrove_uint16.ds", "datatrove"), ("datatrove_uint16.ds.index", "datatrove"),
    ("dolma_uint16.npy", "dolma"), ("dolma_uint16.csv.gz", "dolma"),
    ("expected.json", None), ("no_such_prefix", None),
])
def test_format_of_the_golden_files(name, fmt):
    assert format_of(os.path.join(GOLDEN, name)) == fmt


def test_fairseq_real_npy_and_other_files(tmp_path):
    from lodtool import LoDTensor
    from lodtool.io.megatron import write_megatron

    write_megatron(LoDTensor(np.arange(2, dtype=np.int32), [[0, 2]]), str(tmp_path / "f"), kind="fairseq")
    assert format_of(tmp_path / "f") == "fairseq"
    np.save(tmp_path / "real.npy", np.arange(3))
    assert format_of(tmp_path / "real.npy") is None
    (tmp_path / "x.idx").write_bytes(b"TNTIDX\x00\x00")
    assert format_of(tmp_path / "x.idx") is None


@pytest.mark.parametrize("name, fmt, rows", [("megatron_uint16.idx", "megatron", 12),
                                              ("datatrove_uint32.ds", "datatrove", 4),
                                              ("dolma_uint16.npy", "dolma", 11)])
def test_open_and_validate_whatever_it_is(name, fmt, rows):
    path = os.path.join(GOLDEN, name)
    with open_dataset(path) as f:
        assert (f.format, f.tensor().n_rows) == (fmt, rows)
    assert validate_dataset(path) == []
    assert validate_dataset(path, vocab_size=2)[0].array == "tokens"


def test_anything_else_is_a_usage_error(tmp_path):
    with pytest.raises(LodUsageError, match="not a Megatron or fairseq dataset"):
        open_dataset(tmp_path / "x.json")
    with pytest.raises(LodUsageError, match="not a Megatron or fairseq dataset"):
        validate_dataset(tmp_path / "x.json")


def test_the_reading_commands_take_a_megatron_dataset_in_place(tmp_path):
    from click.testing import CliRunner

    from lodtool import LoDTensor
    from lodtool.cli.main import cli
    from lodtool.io.megatron import write_megatron

    prefix = str(tmp_path / "corpus")
    write_megatron(LoDTensor(np.arange(20, dtype=np.int32), [[0, 2, 3, 5], [0, 3, 7, 8, 12, 20]]), prefix)
    runner = CliRunner()
    assert runner.invoke(cli, ["head", prefix + ".idx", "-n", "1"]).output.splitlines()[0] == "[[0,1,2],[3,4,5,6]]"
    assert runner.invoke(cli, ["slice", prefix + ".bin", "1"]).output.strip() == "[[7]]"
    assert runner.invoke(cli, ["validate", prefix + ".idx"]).exit_code == 0
    shown = runner.invoke(cli, ["inspect", prefix, "--json"])
    assert shown.exit_code == 0 and '"format":"megatron"' in shown.output.replace(" ", "")
    assert '"sequences":5' in shown.output.replace(" ", "") and "corpus.bin" in shown.output
    verified = runner.invoke(cli, ["verify", prefix + ".idx"])
    assert verified.exit_code == 0 and "records no checksums" in verified.output
    idx = bytearray((tmp_path / "corpus.idx").read_bytes())
    idx[-8:] = (2).to_bytes(8, "little")  # the last document index no longer ends at the sequence count
    (tmp_path / "corpus.idx").write_bytes(bytes(idx))
    result = runner.invoke(cli, ["validate", prefix + ".idx"])
    assert result.exit_code == 1 and "document_indices[3]" in result.output


def test_a_loop_of_branch_reads_holds_the_validated_levels():
    import numpy as np

    from lodtool.io._tokens import TokenTensor
    from lodtool.tensor import RESIDENT_AFTER

    offsets = np.arange(0, 201, 2)
    calls = []

    def window(a, b):
        calls.append((a, b))
        return offsets[a:b]

    t = TokenTensor("x.bin", np.arange(200, dtype=np.uint16), [window], [offsets.size])
    assert t[3].data.tolist() == [6, 7] and calls  # a one-shot read checks its own window
    for i in range(RESIDENT_AFTER):
        t[i]
    calls.clear()
    assert [t[i].data.tolist() for i in (5, 99)] == [[10, 11], [198, 199]] and calls == []


def _fairseq(tmp_path) -> str:
    from lodtool import LoDTensor
    from lodtool.io.megatron import write_megatron

    write_megatron(LoDTensor(np.arange(6, dtype=np.int32), [[0, 2, 6]]), str(tmp_path / "f"), kind="fairseq")
    return str(tmp_path / "f")


@pytest.mark.parametrize("source", ["megatron_int32", "fairseq", "datatrove_uint16.ds", "dolma_uint16.npy"])
@pytest.mark.parametrize("eos", [None, 1])
def test_an_operator_that_keeps_the_ids_records_what_pack_records_of_the_source(tmp_path, source, eos):
    from lodtool.container import open_file
    from lodtool.tasks import pack, reverse, seq_slice

    path = _fairseq(tmp_path) if source == "fairseq" else os.path.join(GOLDEN, source)
    pack([path], tmp_path / "packed.lod.h5", eos_token_id=eos)
    reverse(path, str(tmp_path / "reversed.lod.h5"), eos_token_id=eos)
    seq_slice(path, str(tmp_path / "sliced.lod.h5"), offset=0, length=1, clip=True, eos_token_id=eos)
    recorded = []
    for name in ("packed", "reversed", "sliced"):
        with open_file(tmp_path / f"{name}.lod.h5") as f:
            recorded.append(f.tensor().tokens)
    assert recorded[1] == recorded[0] and recorded[2] == recorded[0]
    if eos is not None:
        assert recorded[0].eos_id == eos
    if source.startswith("datatrove"):
        assert recorded[0].tokenizer_name == "gpt2"
    elif eos is None:
        assert recorded[0] is None


def test_atomic_files_hold_a_signal_between_their_renames(tmp_path, monkeypatch):
    """SIGINT between the .bin's rename and the .idx's waits for both: the pair is new, never new beside old."""
    import signal

    from lodtool.atomic import AtomicPath, InterruptedAfterCommit
    from lodtool.io._tokens import atomic_files

    targets = [str(tmp_path / "d.bin"), str(tmp_path / "d.idx")]
    for t in targets:
        with open(t, "wb") as f:
            f.write(b"old")
    commit = AtomicPath.commit
    renamed = []

    def commit_then_interrupt(self):
        commit(self)
        renamed.append(self.target)
        if len(renamed) == 1:
            os.kill(os.getpid(), signal.SIGINT)  # arrives between the two renames

    monkeypatch.setattr(AtomicPath, "commit", commit_then_interrupt)
    with pytest.raises(InterruptedAfterCommit):
        with atomic_files(targets) as tmps:
            for tmp in tmps:
                with open(tmp, "wb") as f:
                    f.write(b"new")
    assert renamed == targets
    assert [open(t, "rb").read() for t in targets] == [b"new", b"new"]
