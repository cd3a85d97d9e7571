"""datatrove ``.ds`` + ``.ds.index`` (+ ``.ds.loss``, ``.ds.metadata``): the golden files datatrove wrote, round
trips, datatrove's own reader and writer where it installs, validate's findings and bad input."""

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
from lodtool.io import datatrove as dt

from .strategies import lod_tensors

GOLDEN = os.path.join(os.path.dirname(__file__), "data", "llm")
EXPECTED = json.load(open(os.path.join(GOLDEN, "expected.json")))


def flat(documents, dtype) -> LoDTensor:
    return LoDTensor(np.array([t for d in documents for t in d], dtype=dtype),
                     recursive_sequence_lengths=[[len(d) for d in documents]])


def copy_golden(tmp_path, name: str) -> str:
    for f in os.listdir(GOLDEN):
        if f.startswith(name):
            shutil.copy(os.path.join(GOLDEN, f), tmp_path / f)
    return str(tmp_path / name)


@pytest.mark.parametrize("name", ["datatrove_uint16.ds", "datatrove_uint32.ds"])
def test_golden_reads_exactly(name):
    entry = EXPECTED[name]
    with dt.open_datatrove(os.path.join(GOLDEN, name)) as f:
        t = f.tensor()
        assert t.dtype.name == entry["dtype"] and t.level_names == ("document",)
        assert t.read().equals(flat(entry["documents"], entry["dtype"]))
        assert f.validate() == [] and dt.validate_datatrove(os.path.join(GOLDEN, name)) == []
        if "loss" in entry:
            assert f.names == ["tokens", "loss"] and f.info["tokenizer"] == entry["tokenizer"]
            assert f["loss"].read().equals(flat(entry["loss"], np.bool_))
        else:
            assert f.names == ["tokens"]


def test_lodtool_writes_the_golden_bytes(tmp_path):
    entry = EXPECTED["datatrove_uint16.ds"]
    dt.write_datatrove(flat(entry["documents"], "uint16"), str(tmp_path / "x.ds"),
                       loss=flat(entry["loss"], np.bool_))
    for ext in ("", ".index", ".loss"):
        assert (tmp_path / ("x.ds" + ext)).read_bytes() == open(os.path.join(GOLDEN, "datatrove_uint16.ds" + ext),
                                                                "rb").read()


def test_the_side_files_name_the_dataset():
    base = os.path.join(GOLDEN, "datatrove_uint32.ds")
    for p in (base, base + ".index"):
        with dt.open_datatrove(p) as f:
            assert f.path == base and f.files == [base, base + ".index"]


@given(lod_tensors(min_levels=1, max_levels=1, dtypes=["uint16", "uint32"], element_shapes=[()]))
def test_round_trip(tmp_path_factory, t):
    path = str(tmp_path_factory.mktemp("rt") / "c.ds")
    dt.write_datatrove(t, path)
    with dt.open_datatrove(path, token_dtype=t.dtype if t.n_rows == 0 else None) as f:
        assert f.tensor().read().equals(t)


def test_two_levels_need_level(tmp_path):
    t = LoDTensor(np.arange(4, dtype=np.uint16), recursive_sequence_lengths=[[1, 1], [3, 1]])
    with pytest.raises(LodUsageError, match="2 LoD levels, but datatrove stores 1; .*level=..."):
        dt.write_datatrove(t, str(tmp_path / "x.ds"))
    assert os.listdir(tmp_path) == []
    dt.write_datatrove(t, str(tmp_path / "x"), level=1)
    with dt.open_datatrove(str(tmp_path / "x.ds")) as f:
        assert f.tensor().read().lod == [[0, 3, 4]]


def test_unwritable_dtype_writes_nothing(tmp_path):
    with pytest.raises(LodUsageError, match="datatrove stores uint16 or uint32 tokens, not int32"):
        dt.write_datatrove(LoDTensor(np.arange(3, dtype=np.int32), [[0, 3]]), str(tmp_path / "x.ds"))
    assert os.listdir(tmp_path) == []


def test_the_registry_reader(tmp_path):
    stats = {}
    chunks = list(dt.read("datatrove", [os.path.join(GOLDEN, "datatrove_uint16.ds")], chunk_bytes=4, stats=stats))
    assert [d for c in chunks for d in c.to_nested()] == EXPECTED["datatrove_uint16.ds"]["documents"]
    assert stats["bytes_read"] == 22


# -- validate and bad input ------------------------------------------------------------------------------
def test_a_decreasing_index_is_named(tmp_path):
    path = copy_golden(tmp_path, "datatrove_uint16.ds")
    with open(path + ".index", "r+b") as f:
        f.seek(8 * 3)
        f.write(struct.pack("<Q", 2))
    [p] = dt.validate_datatrove(path)
    assert (p.file, p.index) == (path + ".index", 3)
    assert str(p) == (f"{path}.index: document_ends[3]: document 3 ends at token 2, before document 2 ends (at 4); "
                      "the ends must not decrease")
    with dt.open_datatrove(path) as f, pytest.raises(LodValidationError, match=r"document_ends\[3\]: document 3"):
        f.tensor().read()
    with pytest.raises(LodValidationError, match="document 3 ends at token 2"):
        list(dt.read("datatrove", [path]))


def test_a_truncated_ds_names_the_first_document_past_it(tmp_path):
    path = copy_golden(tmp_path, "datatrove_uint16.ds")
    with open(path, "r+b") as f:
        f.truncate(10)
    with pytest.raises(LodFormatError) as exc:
        dt.open_datatrove(path, token_dtype="uint16")
    assert str(exc.value) == (f"{path}.index: document_ends[3]: document 3 ends at token 9, but {path} holds 5 "
                              "uint16 tokens (a truncated .ds, or ends past it)")
    with pytest.raises(LodFormatError, match="neither 2 nor 4 bytes a token"):
        os.remove(path + ".metadata")
        dt.open_datatrove(path)


def test_a_truncated_index_and_a_short_loss(tmp_path):
    path = copy_golden(tmp_path, "datatrove_uint16.ds")
    with open(path + ".loss", "r+b") as f:
        f.truncate(7)
    with pytest.raises(LodFormatError, match=r"\.ds\.loss: 7 loss bytes for 11 tokens"):
        dt.open_datatrove(path)
    with open(path + ".index", "r+b") as f:
        f.truncate(13)
    with pytest.raises(LodFormatError, match=r"\.ds\.index: byte 8: 13 bytes is not a whole number"):
        dt.open_datatrove(path)


def test_metadata_that_contradicts_the_sizes(tmp_path):
    path = copy_golden(tmp_path, "datatrove_uint16.ds")
    with open(path + ".metadata", "w") as f:
        f.write("gpt2|4\n11\n11 T")
    with pytest.raises(LodFormatError, match=r"\.ds\.metadata says uint32 tokens, but 11 tokens take 22 bytes"):
        dt.open_datatrove(path)
    with open(path + ".metadata", "w") as f:
        f.write("gpt2|2\n12\n12 T")
    [p] = dt.validate_datatrove(path)
    assert p.file == path + ".metadata" and "counts 12 tokens, but the index ends at 11" in p.message
    with pytest.raises(LodFormatError, match="token_dtype says uint32"):
        dt.open_datatrove(path, token_dtype="uint32")


def test_vocabulary_and_trailing_bytes(tmp_path):
    path = os.path.join(GOLDEN, "datatrove_uint32.ds")
    [p] = dt.validate_datatrove(path, vocab_size=100_000)
    assert (p.index, p.message) == (3, "token id 4294967295 is not under the vocabulary size 100,000")
    local = copy_golden(tmp_path, "datatrove_uint32.ds")
    with open(local, "ab") as f:
        f.write(b"\0" * 4)
    [p] = dt.validate_datatrove(local, token_dtype="uint32")  # 20 bytes for 4 tokens: the size cannot tell
    assert p.file == local and p.message.startswith("4 bytes after the last document's end")


def test_missing_index(tmp_path):
    path = copy_golden(tmp_path, "datatrove_uint32.ds")
    os.remove(path + ".index")
    with pytest.raises(LodFileNotFoundError, match=r"\.ds\.index: no such index file"):
        dt.open_datatrove(path)


# -- the real library ---------------------------------------------------------------------------------------
def test_datatrove_reads_what_lodtool_wrote(tmp_path):
    pytest.importorskip("torch")
    merger = pytest.importorskip("datatrove.pipeline.tokens.merger")
    dataset = pytest.importorskip("datatrove.utils.dataset")
    documents = [[1, 2, 3], [], [4], [5, 6, 7, 8, 9], [10, 11, 12, 13]]
    path = str(tmp_path / "x.ds")
    dt.write_datatrove(flat(documents, "uint32"), path)
    ends = merger.load_doc_ends(open(path + ".index", "rb"))
    assert ends.tolist() == [3, 3, 4, 9, 13]
    # datatrove's positions repeat an end for an empty document and then go wrong: none here
    dt.write_datatrove(flat([d for d in documents if d], "uint32"), path)
    ds = dataset.DatatroveFileDataset(path, seq_len=5, token_size=4, return_positions=True)
    assert ds[0]["input_ids"].tolist() == [1, 2, 3, 4, 5, 6]
    assert ds[0]["positions"].tolist() == [0, 1, 2, 0, 0, 1]


@pytest.mark.parametrize("token_size", [2, 4])
def test_lodtool_reads_what_datatrove_wrote(tmp_path, token_size):
    tokenizer = pytest.importorskip("datatrove.pipeline.tokens.tokenizer")
    documents = [[1, 2], [], [3], [65535 if token_size == 2 else 2 ** 32 - 1]]
    f = tokenizer.TokenizedFile(str(tmp_path), "y.ds", save_loss_metadata=True, token_size=token_size)
    for d in documents:
        f.write(d, np.ones(len(d), bool))
    f.close()
    with dt.open_datatrove(str(tmp_path / "y.ds")) as opened:
        assert opened.tensor().read().equals(flat(documents, f"uint{8 * token_size}"))
        assert opened["loss"].read().data.all() and opened.validate() == []


# -- in object storage: the index and metadata read whole, the tokens and loss mask by ranged requests ---------
from .s3_server import s3, s3_endpoint  # noqa: E402,F401 - fixtures


def test_a_datatrove_file_in_object_storage_is_read_in_place(s3, tmp_path):
    import s3fs

    import lodtool
    from lodtool.io.token_datasets import format_of, validate_dataset

    server, root = s3
    rng = np.random.default_rng(4)
    documents = [rng.integers(0, 60_000, int(n)).tolist() for n in rng.integers(0, 400, 4000)]  # ~1.6 MB of ids
    tokens = flat(documents, "uint16")
    loss = LoDTensor(rng.integers(0, 2, tokens.n_rows).astype(bool), tokens.lod)
    local = str(tmp_path / "x.ds")
    dt.write_datatrove(tokens, local, loss=loss)
    with open(local + ".metadata", "w") as f:
        f.write(f"gpt2|2\n{tokens.n_rows}\n{tokens.n_rows / 1e6}M\n")
    fs = s3fs.S3FileSystem()
    for suffix in ("", ".index", ".loss", ".metadata"):
        fs.put(local + suffix, f"{root}/x.ds{suffix}")
    for name in ("x.ds", "x.ds.index", "x.ds.loss"):
        assert format_of(f"{root}/{name}") == "datatrove"
    last = len(documents) - 2
    with lodtool.open(f"{root}/x.ds") as f:
        assert f.format == "datatrove" and f.info["tokenizer"] == "gpt2"
        assert f.files == [f"{root}/x.ds", f"{root}/x.ds.index", f"{root}/x.ds.loss", f"{root}/x.ds.metadata"]
        server.mark()
        branch = f.tensor()[last]
        ranged = [r for r in server.since_mark() if r.path.endswith("x.ds")]
        assert branch.data.tolist() == documents[last]
        assert ranged and all(r.range for r in ranged) and sum(r.nbytes for r in ranged) < os.path.getsize(local)
        assert f["loss"][last].data.tolist() == loss.data[tokens.offsets[0][last]:tokens.offsets[0][last + 1]].tolist()
        assert f.tensor().read().equals(tokens) and f["loss"].read().equals(loss)
        assert f.tensor().tokens.tokenizer_name == "gpt2"
    assert validate_dataset(f"{root}/x.ds") == []
    found = validate_dataset(f"{root}/x.ds", vocab_size=10)
    assert found and found[0].array == "tokens" and str(found[0]).startswith(f"{root}/x.ds: tokens[")


def test_a_datatrove_file_in_object_storage_without_its_index_is_a_one_line_error(s3, tmp_path):
    import s3fs

    import lodtool

    server, root = s3
    local = str(tmp_path / "x.ds")
    dt.write_datatrove(flat([[1, 2], [3]], "uint16"), local)
    s3fs.S3FileSystem().put(local, f"{root}/x.ds")
    with pytest.raises(LodFileNotFoundError, match=r"x\.ds\.index"):
        lodtool.open(f"{root}/x.ds")
