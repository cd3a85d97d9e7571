"""Megatron-Core / fairseq ``.bin/.idx``: the golden files megatron-core wrote, round trips, the real reader and
writer where megatron-core installs, validate's findings, and every kind of bad input."""

from __future__ import annotations

import json
import os
import shutil
import struct

import numpy as np
import pytest
from hypothesis import given

from lodtool import LoDTensor
from lodtool.errors import LodFileNotFoundError, LodFormatError, LodUsageError, LodValidationError
from lodtool.io import megatron as mg

from .strategies import lod_tensors

GOLDEN = os.path.join(os.path.dirname(__file__), "data", "llm")
EXPECTED = json.load(open(os.path.join(GOLDEN, "expected.json")))
MEGATRON_GOLDEN = sorted(k for k in EXPECTED if k.startswith("megatron_"))


def nested_tensor(documents, dtype) -> LoDTensor:
    tokens = [t for doc in documents for seq in doc for t in seq]
    lengths = [[len(doc) for doc in documents], [len(seq) for doc in documents for seq in doc]]
    return LoDTensor(np.array(tokens, dtype=dtype), recursive_sequence_lengths=lengths)


def copy_golden(tmp_path, name: str) -> str:
    for ext in (".bin", ".idx"):
        shutil.copy(os.path.join(GOLDEN, name + ext), tmp_path / (name + ext))
    return str(tmp_path / name)


def float_option(entry) -> dict:
    return {"token_dtype": entry["dtype"]} if entry["code"] in (6, 7) else {}


# -- what megatron-core's IndexedDatasetBuilder wrote --------------------------------------------------
@pytest.mark.parametrize("name", MEGATRON_GOLDEN)
def test_golden_reads_exactly(name):
    entry = EXPECTED[name]
    with mg.open_megatron(os.path.join(GOLDEN, name), **float_option(entry)) as f:
        t = f.tensor()
        assert (f.format, f.info["dtype_code"], t.dtype.name) == ("megatron", entry["code"], entry["dtype"])
        assert t.level_names == ("document", "sequence")
        assert t.read().equals(nested_tensor(entry["documents"], entry["dtype"]))
        assert t[1].lod == [[0]] and t[3].lod == [[0, 0, 3]]  # an empty document, an empty sequence
        assert f.validate() == []


@pytest.mark.parametrize("name", MEGATRON_GOLDEN)
def test_lodtool_writes_the_golden_bytes(tmp_path, name):
    entry = EXPECTED[name]
    if name.endswith("multimodal"):
        pytest.skip("lodtool writes no sequence modes")
    written = mg.write_megatron(nested_tensor(entry["documents"], entry["dtype"]), str(tmp_path / "x"))
    for path, ext in zip(written, (".bin", ".idx")):
        assert open(path, "rb").read() == open(os.path.join(GOLDEN, name + ext), "rb").read()


def test_the_float_codes_are_refused_without_token_dtype():
    with pytest.raises(LodFormatError, match=r"megatron_float32\.idx: byte 17: dtype code 7 means float32 or "
                                             r"float64 .*token_dtype"):
        mg.open_megatron(os.path.join(GOLDEN, "megatron_float32"))
    with pytest.raises(LodUsageError, match="dtype code 8 is uint16 in every fork"):
        mg.open_megatron(os.path.join(GOLDEN, "megatron_uint16"), token_dtype="int16")


def test_prefix_idx_and_bin_name_one_dataset():
    base = os.path.join(GOLDEN, "megatron_int32")
    for p in (base, base + ".idx", base + ".bin"):
        assert mg.kind_of(p) == "megatron"
        with mg.open_megatron(p) as f:
            assert f.files == [base + ".bin", base + ".idx"] and f.tensor().n_rows == 12


def test_the_view_reads_windows_and_rows_in_place():
    with mg.open_megatron(os.path.join(GOLDEN, "megatron_int64")) as f:
        t = f.tensor()
        assert t.read_offsets(1, 2, 5).tolist() == [4, 5, 5]
        assert t.slice_level(1, 3, 5).lod == [[0, 0, 3]]
        assert t.head(1).to_nested() == [[[1, 2, 3], [4]]]
        assert t.tail(1).to_nested() == [[[9, 10, 11, 12]]]
        assert t[0, 1].data.tolist() == [4]
        assert [c.lod_level for c in t.iter_chunks(max_rows=4)] == [2, 2, 2]
        assert not t.read_rows(0, 3).flags.writeable


# -- round trips ----------------------------------------------------------------------------------------
@given(lod_tensors(min_levels=1, max_levels=2, dtypes=["uint8", "int16", "int32", "int64", "uint16"],
                   element_shapes=[()]))
def test_round_trip(tmp_path_factory, t):
    prefix = str(tmp_path_factory.mktemp("rt") / "c")
    mg.write_megatron(t, prefix)
    with mg.open_megatron(prefix) as f:
        back = f.tensor().read()
    if t.lod_level == 1:  # each sequence its own document
        assert back.lod == [list(range(len(t) + 1)), t.lod[0]]
    else:
        assert back.lod == t.lod
    assert back.dtype == t.dtype and np.array_equal(np.asarray(back), np.asarray(t))


@given(lod_tensors(min_levels=1, max_levels=1, dtypes=["uint8", "int32", "uint16", "uint32", "uint64"],
                   element_shapes=[()]))
def test_fairseq_round_trip(tmp_path_factory, t):
    prefix = str(tmp_path_factory.mktemp("rt") / "c")
    mg.write_megatron(t, prefix, kind="fairseq")
    dtype = {"token_dtype": t.dtype} if t.dtype.name in ("uint32", "uint64") else {}
    with mg.open_megatron(prefix, **dtype) as f:
        assert f.format == "fairseq" and f.tensor().read().equals(t)


def test_fairseq_layout_is_26_plus_12n_bytes(tmp_path):
    t = LoDTensor(np.array([7, 8, 9], np.uint16), [[0, 2, 2, 3]])
    _, idx = mg.write_megatron(t, str(tmp_path / "f"), kind="fairseq")
    raw = open(idx, "rb").read()
    assert len(raw) == 26 + 12 * 3
    assert raw[:26] == b"MMIDIDX\x00\x00" + struct.pack("<QBQ", 1, 8, 3)
    assert np.frombuffer(raw, "<i4", 3, 26).tolist() == [2, 0, 1]
    assert np.frombuffer(raw, "<i8", 3, 38).tolist() == [0, 4, 4]


def test_deeper_lod_is_refused_naming_level_or_flattened_by_it(tmp_path):
    t = LoDTensor(np.arange(6, dtype=np.int32), recursive_sequence_lengths=[[2, 1], [1, 2, 3], [2, 0, 1, 1, 1, 1]])
    with pytest.raises(LodUsageError, match="3 LoD levels, but megatron stores 2; .*level=..."):
        mg.write_megatron(t, str(tmp_path / "x"))
    assert os.listdir(tmp_path) == []
    mg.write_megatron(t, str(tmp_path / "x"), level=1)
    with mg.open_megatron(str(tmp_path / "x")) as f:
        assert f.tensor().read().lod == [[0, 2, 3], [0, 2, 3, 6]]
    mg.write_chunks([t], str(tmp_path / "y"), level=2)
    with mg.open_megatron(str(tmp_path / "y")) as f:
        assert f.tensor().read().lod == [[0, 3, 6], [0, 2, 2, 3, 4, 5, 6]]


@pytest.mark.parametrize("tensor, message", [
    (LoDTensor(np.arange(3, dtype=np.uint32), [[0, 3]]), "megatron cannot store uint32 tokens"),
    (LoDTensor(np.ones((2, 2), np.int32), [[0, 2]]), "one token per row"),
    (LoDTensor(np.arange(3, dtype=np.int32)), "no LoD level"),
])
def test_unwritable_tensors_write_nothing(tmp_path, tensor, message):
    with pytest.raises(LodUsageError, match=message):
        mg.write_megatron(tensor, str(tmp_path / "x"))
    assert os.listdir(tmp_path) == []


def test_a_failing_stream_of_chunks_leaves_neither_file(tmp_path):
    def chunks():
        yield LoDTensor(np.arange(3, dtype=np.int32), [[0, 3]])
        raise OSError("disk gone")

    (tmp_path / "x.idx").write_bytes(b"old")
    with pytest.raises(OSError, match="disk gone"):
        mg.write_chunks(chunks(), str(tmp_path / "x"))
    assert sorted(os.listdir(tmp_path)) == ["x.idx"] and (tmp_path / "x.idx").read_bytes() == b"old"


def test_the_registry_reader_yields_chunks_of_whole_documents(tmp_path):
    stats = {}
    chunks = list(mg.read("megatron", [os.path.join(GOLDEN, "megatron_int16")], chunk_bytes=8, stats=stats,
                          dtype="int32"))
    whole = nested_tensor(EXPECTED["megatron_int16"]["documents"], "int32")
    assert sum(len(c) for c in chunks) == len(whole) and all(c.dtype == np.int32 for c in chunks)
    assert [d for c in chunks for d in c.to_nested()] == whole.to_nested()
    assert stats["bytes_read"] == 24
    with pytest.raises(LodFormatError, match="fairseq"):
        list(mg.read("fairseq", [os.path.join(GOLDEN, "megatron_int16")]))
    with pytest.raises(LodUsageError, match="not from a stream"):
        list(mg.read("megatron", [open(os.path.join(GOLDEN, "megatron_int16.bin"), "rb")]))


def test_the_registry_writer_needs_a_prefix(tmp_path):
    import io

    from lodtool import io as formats

    t = LoDTensor(np.arange(3, dtype=np.int32), [[0, 3]])
    fmt = formats.get("megatron")
    with pytest.raises(LodUsageError, match="give an output path prefix"):
        fmt.write_files([t], io.BytesIO())
    with pytest.raises(LodUsageError, match="several files from one output path"):
        fmt.write(t, io.BytesIO())
    with pytest.raises(LodUsageError, match="level=... applies to writing megatron, fairseq, datatrove or dolma"):
        formats.get("jsonl").check_write_options({"level": 1})
    assert fmt.write_files([t], str(tmp_path / "out.idx")) == fmt.output_files(str(tmp_path / "out"))
    assert sorted(os.listdir(tmp_path)) == ["out.bin", "out.idx"]


# -- validate -------------------------------------------------------------------------------------------
def patch(path: str, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


N, D = 6, 6  # the golden datasets: 6 sequences, 6 document_indices entries
LENGTHS, POINTERS, DOCS = 34, 34 + 4 * N, 34 + 12 * N


@pytest.mark.parametrize("where, data, array, index, message", [
    (POINTERS + 8 * 2, struct.pack("<q", 2), "sequence_pointers", 2, "it decreases"),
    (POINTERS + 8 * 3, struct.pack("<q", 14), "sequence_pointers", 3, "it leaves a gap"),
    (POINTERS + 8 * 3, struct.pack("<q", 8), "sequence_pointers", 3, "it overlaps"),
    (POINTERS, struct.pack("<q", 4), "sequence_pointers", 0, "must start at byte 0"),
    (LENGTHS + 4 * 2, struct.pack("<i", -1), "sequence_lengths", 2, "cannot be negative"),
    (DOCS + 8 * 3, struct.pack("<q", 1), "document_indices", 3, "must not decrease"),
    (DOCS, struct.pack("<q", 1), "document_indices", 0, "the first entry must be 0"),
    (DOCS + 8 * 5, struct.pack("<q", 5), "document_indices", 5, "has 6 sequences"),
])
def test_validate_names_the_array_and_index(tmp_path, where, data, array, index, message):
    prefix = copy_golden(tmp_path, "megatron_int16")
    patch(prefix + ".idx", where, data)
    found = mg.validate_megatron(prefix)
    assert found, "the damage was not found"
    first = next(p for p in found if p.array == array)
    assert (first.file, first.index) == (prefix + ".idx", index) and message in first.message
    with mg.open_megatron(prefix) as f, pytest.raises(LodValidationError, match=rf"{array}\[{index}\]"):
        f.tensor().read()


def test_validate_reports_trailing_bytes_in_the_bin(tmp_path):
    prefix = copy_golden(tmp_path, "megatron_int16")
    with open(prefix + ".bin", "ab") as f:
        f.write(b"\0\0\0\0")
    [p] = mg.validate_megatron(prefix)
    assert p.file == prefix + ".bin" and "4 bytes after the end of the last sequence" in p.message


def test_validate_checks_token_ids_against_the_vocabulary():
    path = os.path.join(GOLDEN, "megatron_uint8")
    assert mg.validate_megatron(path, vocab_size=13) == []
    found = mg.validate_megatron(path, vocab_size=10)
    assert [(p.array, p.index) for p in found] == [("tokens", 9), ("tokens", 10), ("tokens", 11)]
    assert "token id 10 is not under the vocabulary size 10" in found[0].message
    [p] = mg.validate_megatron(path, vocab_size=300)
    assert "uint8 holds ids up to 255, but the vocabulary has 300" in p.message


def test_validate_stops_at_max_problems(tmp_path):
    prefix = str(tmp_path / "c")
    mg.write_megatron(LoDTensor(np.arange(100, dtype=np.int32), [list(range(101))]), prefix)
    assert len(mg.validate_megatron(prefix, vocab_size=10, max_problems=3)) == 3


# -- bad input ------------------------------------------------------------------------------------------
def one_line(exc) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


def test_truncated_bin_names_the_first_sequence_cut(tmp_path):
    prefix = copy_golden(tmp_path, "megatron_int16")
    with open(prefix + ".bin", "r+b") as f:
        f.truncate(10)
    with pytest.raises(LodFormatError) as exc:
        mg.open_megatron(prefix)
    assert one_line(exc).startswith(f"{prefix}.idx: sequence_pointers[4]: sequence 4 spans bytes 10..16")
    assert "truncated .bin" in str(exc.value)
    [p] = [p for p in mg.validate_megatron(prefix) if "spans" in p.message]
    assert p.index == 4


def test_pointers_past_the_bin_are_named(tmp_path):
    prefix = copy_golden(tmp_path, "megatron_int16")
    patch(prefix + ".idx", POINTERS + 8 * 4, struct.pack("<q", 1 << 40))
    message = r"megatron_int16\.idx: sequence_pointers\[4\]: sequence 4 spans bytes 1,099,511,627,776"
    with mg.open_megatron(prefix) as f, pytest.raises(LodValidationError, match=message):
        f.tensor().read()  # opening looks at the last sequence only; a whole read checks every one
    with pytest.raises(LodValidationError, match=message):
        list(mg.read("megatron", [prefix]))
    assert str(mg.validate_megatron(prefix)[0]).startswith(f"{prefix}.idx: sequence_pointers[4]: sequence 4 spans")


@pytest.mark.parametrize("code", [0, 11, 255])
def test_a_dtype_code_that_does_not_exist(tmp_path, code):
    prefix = copy_golden(tmp_path, "megatron_int16")
    patch(prefix + ".idx", 17, bytes([code]))
    with pytest.raises(LodFormatError) as exc:
        mg.open_megatron(prefix, token_dtype="int16")
    assert one_line(exc) .startswith(f"{prefix}.idx: byte 17: dtype code {code} does not exist")


def test_codes_9_and_10_need_token_dtype(tmp_path):
    prefix = str(tmp_path / "f")
    mg.write_megatron(LoDTensor(np.array([70000], np.uint32), [[0, 1]]), prefix, kind="fairseq")
    with pytest.raises(LodFormatError, match="dtype code 9 means uint32 .*token_dtype"):
        mg.open_megatron(prefix)
    with mg.open_megatron(prefix, token_dtype="uint32") as f:
        assert f.tensor().read().data.tolist() == [70000]


def test_fairseq_read_as_megatron_and_back(tmp_path):
    fs = str(tmp_path / "fs")
    mg.write_megatron(LoDTensor(np.arange(4, dtype=np.int32), [[0, 1, 4]]), fs, kind="fairseq")
    with pytest.raises(LodFormatError) as exc:
        mg.open_megatron(fs, kind="megatron")
    assert one_line(exc) == (f"{fs}.idx: byte 26: this is a fairseq MMIDIDX index (no document count: 26 + 12n "
                             "bytes), not a megatron one; read it as fairseq")
    with pytest.raises(LodFormatError, match="this is a Megatron-Core index .*not a fairseq one; read it as megatron"):
        mg.open_megatron(os.path.join(GOLDEN, "megatron_int32"), kind="fairseq")
    assert mg.kind_of(fs) == "fairseq"


@pytest.mark.parametrize("damage, message", [
    (lambda p: patch(p, 0, b"NOTANIDX"), r"byte 0: not an MMIDIDX index"),
    (lambda p: patch(p, 9, struct.pack("<Q", 2)), r"byte 9: version 2"),
    (lambda p: open(p, "r+b").truncate(100), r"the file has 100 bytes, but its header \(n=6 sequences, d=6\)"),
    (lambda p: open(p, "r+b").truncate(20), r"byte 20: the header is cut short"),
    (lambda p: patch(p, 18, struct.pack("<Q", 1 << 60)), r"the file has 154 bytes"),
])
def test_damaged_idx_is_one_line_naming_the_byte(tmp_path, damage, message):
    prefix = copy_golden(tmp_path, "megatron_int16")
    damage(prefix + ".idx")
    with pytest.raises(LodFormatError, match=message) as exc:
        mg.open_megatron(prefix)
    assert one_line(exc).startswith(f"{prefix}.idx: ")


def test_missing_files(tmp_path):
    with pytest.raises(LodFileNotFoundError, match=r"x\.idx: no such index file"):
        mg.open_megatron(str(tmp_path / "x"))
    prefix = copy_golden(tmp_path, "megatron_int16")
    os.remove(prefix + ".bin")
    with pytest.raises(LodFileNotFoundError, match=r"megatron_int16\.bin: no such token file"):
        mg.open_megatron(prefix)


def test_an_empty_dataset(tmp_path):
    prefix = str(tmp_path / "e")
    mg.write_megatron(LoDTensor(np.empty(0, np.uint16), [[0]]), prefix)
    assert os.path.getsize(prefix + ".bin") == 0
    with mg.open_megatron(prefix) as f:
        t = f.tensor()
        assert (len(t), t.n_rows, f.validate()) == (0, 0, [])


# -- the real library ---------------------------------------------------------------------------------------
def megatron_core():
    pytest.importorskip("torch")
    return pytest.importorskip("megatron.core.datasets.indexed_dataset")


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int16", "int32", "int64", "float64", "float32", "uint16"])
def test_megatron_core_reads_what_lodtool_wrote(tmp_path, dtype):
    idx = megatron_core()
    documents = EXPECTED["megatron_int32"]["documents"] + [[[]], [[13] * 5, [14]]]
    t = nested_tensor(documents, dtype)
    prefix = str(tmp_path / "c")
    mg.write_megatron(t, prefix)
    ds = idx.IndexedDataset(prefix)
    assert ds.index.dtype == np.dtype(dtype).type
    assert ds.document_indices.tolist() == t.lod[0]
    seqs = [s for d in documents for s in d]
    assert len(ds) == len(seqs)
    for i, seq in enumerate(seqs):
        assert ds[i].tolist() == seq and ds.get(i, 0, len(seq)).tolist() == seq


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int16", "int32", "int64", "float64", "float32", "uint16"])
@pytest.mark.parametrize("multimodal", [False, True])
def test_lodtool_reads_what_megatron_core_wrote(tmp_path, dtype, multimodal):
    idx = megatron_core()
    import torch

    documents = [[[1, 2], [], [3]], [], [[4, 5, 6]], [[]], [[7]]]
    prefix = str(tmp_path / "c")
    builder = idx.IndexedDatasetBuilder(prefix + ".bin", dtype=getattr(np, dtype), multimodal=multimodal)
    for doc in documents:
        for seq in doc:
            builder.add_item(torch.tensor(seq, dtype=torch.int64), mode=1)
        builder.end_document()
    builder.finalize(prefix + ".idx")
    option = {"token_dtype": dtype} if dtype.startswith("float") else {}
    with mg.open_megatron(prefix, **option) as f:
        assert f.info["multimodal"] == multimodal and f.validate() == []
        assert f.tensor().read().equals(nested_tensor(documents, dtype))


# -- in object storage: the .idx read whole, the tokens by ranged requests ----------------------------------
from .s3_server import s3, s3_endpoint  # noqa: E402,F401 - fixtures


def _corpus_on_s3(root: str, tmp_path, kind: str = "megatron"):
    import s3fs

    rng = np.random.default_rng(9)
    sentences = rng.integers(0, 5, 2000)  # about 3 MB of tokens: more than the head a remote file reads first
    lengths = rng.integers(0, 200, int(sentences.sum()))
    t = LoDTensor(rng.integers(0, 50_000, int(lengths.sum())).astype(np.int32),
                  [np.concatenate(([0], np.cumsum(sentences))), np.concatenate(([0], np.cumsum(lengths)))])
    mg.write_megatron(t, str(tmp_path / "corpus"), kind=kind, level=1)
    fs = s3fs.S3FileSystem()
    for suffix in (".bin", ".idx"):
        fs.put(str(tmp_path / f"corpus{suffix}"), f"{root}/corpus{suffix}")
    return t


@pytest.mark.parametrize("kind", ["megatron", "fairseq"])
def test_a_dataset_in_object_storage_is_read_in_place(s3, tmp_path, kind):
    import lodtool
    from lodtool.io.token_datasets import format_of, validate_dataset

    server, root = s3
    t = _corpus_on_s3(root, tmp_path, kind)
    local = str(tmp_path / "corpus")
    for name in ("corpus", "corpus.idx", "corpus.bin"):
        assert format_of(f"{root}/{name}") == kind
    assert format_of(f"{root}/corpus.lod.h5") is None and format_of(f"{root}/missing") is None
    with lodtool.open(local) as f:
        expected = f.tensor().read()
        last = len(f.tensor()) - 3
        branch = f.tensor()[last]
    bin_size = (tmp_path / "corpus.bin").stat().st_size
    with lodtool.open(f"{root}/corpus") as f:
        server.mark()
        got = f.tensor()[last]
        ranged = [r for r in server.since_mark() if r.path.endswith("corpus.bin")]
        assert got.lod == branch.lod and got.data.tolist() == branch.data.tolist()
        assert ranged and all(r.range for r in ranged) and sum(r.nbytes for r in ranged) < bin_size
        whole = f.tensor().read()
    assert whole.lod == expected.lod and whole.data.tobytes() == expected.data.tobytes() == t.data.tobytes()
    assert validate_dataset(f"{root}/corpus") == []
    assert validate_dataset(f"{root}/corpus", vocab_size=10)[0].array == "tokens"


def test_inspect_of_a_dataset_in_object_storage(s3, tmp_path):
    from .test_cli import run

    server, root = s3
    _corpus_on_s3(root, tmp_path)
    result = run("inspect", "--json", f"{root}/corpus")
    assert result.exit_code == 0, result.output
    import json

    report = json.loads(result.output)
    size = sum((tmp_path / f"corpus{s}").stat().st_size for s in (".bin", ".idx"))
    assert report["format"] == "megatron" and report["file_size"] == size
    assert report["files"] == [f"{root}/corpus.bin", f"{root}/corpus.idx"]
