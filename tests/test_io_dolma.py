"""OLMo / dolma headerless token arrays: the golden file dolma's MemmapWriter wrote, documents from the
``.csv.gz`` or from EOS tokens, round trips, and bad input."""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import shutil

import numpy as np
import pytest
from hypothesis import given

from lodtool import LoDTensor
from lodtool.errors import LodFileNotFoundError, LodFormatError, LodUsageError
from lodtool.io import dolma

from .strategies import lod_tensors

GOLDEN = os.path.join(os.path.dirname(__file__), "data", "llm")
EXPECTED = json.load(open(os.path.join(GOLDEN, "expected.json")))
NPY = os.path.join(GOLDEN, "dolma_uint16.npy")


def flat(documents, dtype) -> LoDTensor:
    return LoDTensor(np.array([t for d in documents for t in d], dtype=dtype),
                     recursive_sequence_lengths=[[len(d) for d in documents]])


def copy_golden(tmp_path) -> str:
    for ext in (".npy", ".csv.gz"):
        shutil.copy(os.path.join(GOLDEN, "dolma_uint16" + ext), tmp_path / ("dolma_uint16" + ext))
    return str(tmp_path / "dolma_uint16.npy")


def csv_rows(path: str) -> list[list[str]]:
    with gzip.open(path, "rt", newline="") as f:
        return list(csv.reader(f))


def write_rows(path: str, rows) -> None:
    with gzip.open(path, "wt", newline="") as f:
        csv.writer(f).writerows(rows)


def test_golden_reads_exactly():
    with dolma.open_dolma(NPY) as f:  # the dtype follows from the .csv.gz and the file size
        t = f.tensor()
        assert (f.info["boundaries"], t.dtype.name, t.level_names) == ("csv", "uint16", ("document",))
        assert t.read().equals(flat(EXPECTED["dolma_uint16.npy"]["documents"], "uint16"))
        assert f.validate() == [] and dolma.validate_dolma(NPY) == []
    with dolma.open_dolma(os.path.join(GOLDEN, "dolma_uint16.csv.gz"), token_dtype="uint16") as f:
        assert f.files == [NPY, os.path.join(GOLDEN, "dolma_uint16.csv.gz")]


def test_lodtool_writes_what_dolma_wrote(tmp_path):
    path = str(tmp_path / "dolma_uint16.npy")
    dolma.write_chunks([flat(EXPECTED["dolma_uint16.npy"]["documents"], "uint16")], path, source="golden.jsonl.gz")
    assert open(path, "rb").read() == open(NPY, "rb").read()
    theirs = [[a, b, src, loc] for a, b, _, src, loc in csv_rows(os.path.join(GOLDEN, "dolma_uint16.csv.gz"))]
    ours = [[a, b, src, loc] for a, b, _, src, loc in csv_rows(str(tmp_path / "dolma_uint16.csv.gz"))]
    assert ours == theirs  # the ids are dolma's own: lodtool numbers the documents


def test_documents_from_eos_tokens(tmp_path):
    path = str(tmp_path / "raw.npy")
    np.array([5, 0, 6, 7, 0, 0, 8], np.uint32).tofile(path)
    with dolma.open_dolma(path, token_dtype="uint32", eos_token_id=0) as f:
        assert f.info["boundaries"] == "eos"
        assert f.tensor().read().to_nested() == [[5, 0], [6, 7, 0], [0], [8]]
    with pytest.raises(LodUsageError, match="raw.npy: a dolma token array .* with no raw.csv.gz beside it; give eos_token_id"):
        dolma.open_dolma(path, token_dtype="uint32")
    with pytest.raises(LodUsageError, match="records no dtype; give token_dtype=..."):
        dolma.open_dolma(path, eos_token_id=0)
    with pytest.raises(LodUsageError, match="eos_token_id=70000 is not a uint16 value"):
        dolma.open_dolma(path, token_dtype="uint16", eos_token_id=70000)


@given(lod_tensors(min_levels=1, max_levels=1, dtypes=["uint16", "uint32", "uint64", "int32"], element_shapes=[()]))
def test_round_trip(tmp_path_factory, t):
    path = str(tmp_path_factory.mktemp("rt") / "c.npy")
    dolma.write_dolma(t, path)
    with dolma.open_dolma(path, token_dtype=t.dtype) as f:
        assert f.tensor().read().equals(t)


def test_a_real_npy_is_refused(tmp_path):
    path = str(tmp_path / "a.npy")
    np.save(path, np.arange(3, dtype=np.uint16))
    with pytest.raises(LodFormatError, match=r"a\.npy: byte 0: this is a real \.npy"):
        dolma.open_dolma(path, token_dtype="uint16", eos_token_id=0)


def test_rows_that_do_not_tile_name_the_line(tmp_path):
    path = copy_golden(tmp_path)
    meta = path[:-4] + ".csv.gz"
    rows = csv_rows(meta)
    rows[2][0] = "2"
    write_rows(meta, rows)
    with pytest.raises(LodFormatError) as exc:
        dolma.open_dolma(path, token_dtype="uint16")
    assert str(exc.value) == (f"{meta}: line 3: document 2 starts at token 2, but the document before it ends at 3 "
                              "(documents must tile the token array)")
    write_rows(meta, [["1", "3"]])
    with pytest.raises(LodFormatError, match="line 1: document 0 starts at token 1, but the array starts at "
                                             "token 0"):
        dolma.open_dolma(path, token_dtype="uint16")
    write_rows(meta, [["0", "x"]])
    with pytest.raises(LodFormatError, match=r"line 1: \['0', 'x'\] is not START,END"):
        dolma.open_dolma(path, token_dtype="uint16")
    with open(meta, "wb") as f:
        f.write(b"not gzip")
    with pytest.raises(LodFormatError, match="cannot read it as a gzipped CSV"):
        dolma.open_dolma(path, token_dtype="uint16")


def test_a_truncated_npy_names_the_first_document_past_it(tmp_path):
    path = copy_golden(tmp_path)
    with open(path, "r+b") as f:
        f.truncate(12)
    with pytest.raises(LodFormatError) as exc:
        dolma.open_dolma(path, token_dtype="uint16")
    assert str(exc.value).startswith(f"{path[:-4]}.csv.gz: line 4: document 3 ends at token 9, but {path} holds 6 "
                                     "uint16 tokens")
    with pytest.raises(LodUsageError, match="records no dtype"):  # the size no longer tells it
        dolma.open_dolma(path)


def test_validate_trailing_tokens_and_vocabulary(tmp_path):
    path = copy_golden(tmp_path)
    with open(path, "ab") as f:
        f.write(b"\1\0")
    [p] = dolma.validate_dolma(path, token_dtype="uint16")
    assert p.file == path and p.message.startswith("2 bytes after the last document's end")
    found = dolma.validate_dolma(NPY, vocab_size=108)
    assert [(x.index, x.message) for x in found][:2] == [(7, "token id 108 is not under the vocabulary size 108"),
                                                        (8, "token id 109 is not under the vocabulary size 108")]


def test_the_registry_reader_and_missing_files(tmp_path):
    chunks = list(dolma.read("dolma", [NPY], chunk_bytes=4))
    assert [d for c in chunks for d in c.to_nested()] == EXPECTED["dolma_uint16.npy"]["documents"]
    with pytest.raises(LodFileNotFoundError, match=r"x\.npy: no such token file"):
        dolma.open_dolma(str(tmp_path / "x.npy"), token_dtype="uint16", eos_token_id=0)
    with pytest.raises(LodUsageError, match="not from a stream"):
        list(dolma.read("dolma", [io.BytesIO(b"")]))


def test_unwritable_tensors_write_nothing(tmp_path):
    with pytest.raises(LodUsageError, match="dolma token arrays hold .* not float32"):
        dolma.write_dolma(LoDTensor(np.ones(2, np.float32), [[0, 2]]), str(tmp_path / "x.npy"))
    with pytest.raises(LodUsageError, match="level=..."):
        dolma.write_dolma(LoDTensor(np.ones(2, np.uint16), [[0, 1], [0, 2]]), str(tmp_path / "x.npy"))
    assert os.listdir(tmp_path) == []


def test_a_name_with_dots_keeps_them(tmp_path):
    p = str(tmp_path / "web.tokens.npy")
    assert dolma.write_dolma(LoDTensor(np.array([1, 2, 3], np.uint16), [[0, 1, 3]]), p) == [
        p, str(tmp_path / "web.tokens.csv.gz")]
    with dolma.open_dolma(str(tmp_path / "web.tokens.csv.gz")) as f:
        assert f.tensor().read().lod == [[0, 1, 3]]
