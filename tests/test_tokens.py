"""Token metadata (``lodtool.tokens``): the info, its checks, and the container's record of it."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from hypothesis import given, strategies as st

from lodtool import LoDTensor
from lodtool.container import LodWriter, open_file, validate_file, verify_file
from lodtool.container.shards import ShardWriter, open_sharded, read_manifest
from lodtool.errors import LodUsageError, LodVersionError
from lodtool.container.spec import check_writable_version
from lodtool.tokens import TokenInfo, dtype_problem, out_of_vocabulary, tokenizer_hash

INFO = TokenInfo(vocab_size=10, eos_id=9, bos_id=8, pad_id=0, tokenizer_name="tiny", tokenizer_json=b'{"v": 1}')


def write(path, data=(1, 2, 3), lod=((0, 2, 3),), tokens=INFO, dtype="uint16"):
    with LodWriter(path) as w:
        w.add_tensor("ids", dtype=dtype, lod_level=len(lod), tokens=tokens).append(
            LoDTensor(np.array(data), [list(x) for x in lod]))


def test_an_info_is_checked_when_made():
    with pytest.raises(LodUsageError, match="pad_id 10 is not under the vocabulary size 10"):
        TokenInfo(vocab_size=10, pad_id=10)
    with pytest.raises(LodUsageError, match="vocab_size must be an integer"):
        TokenInfo(vocab_size=0)
    with pytest.raises(LodUsageError, match="is not the hash of the tokenizer JSON"):
        TokenInfo(tokenizer_json=b"{}", tokenizer_hash="sha256:00")
    assert TokenInfo(tokenizer_json=b"{}").tokenizer_hash == tokenizer_hash(b"{}")
    assert INFO == INFO.without_json() and INFO.without_json().tokenizer_json is None


@given(st.integers(1, 1 << 40))
def test_the_smallest_dtype_holds_every_id_and_no_narrower_one_does(vocab):
    dtype = TokenInfo(vocab_size=vocab).smallest_dtype()
    assert dtype_problem(dtype, vocab) is None
    narrower = {2: np.uint8, 4: np.uint16, 8: np.uint32}.get(dtype.itemsize)
    assert narrower is None or dtype_problem(narrower, vocab) is not None


@given(st.lists(st.integers(-3, 12), max_size=50), st.integers(1, 10))
def test_out_of_vocabulary_finds_exactly_the_ids_outside_it(ids, vocab):
    arr = np.array(ids, np.int64)
    assert out_of_vocabulary(arr, vocab).tolist() == [i for i, v in enumerate(ids) if not 0 <= v < vocab]


def test_the_container_records_the_metadata_and_the_tokenizer(tmp_path):
    p = tmp_path / "t.lod.h5"
    write(p)
    with open_file(p) as f:
        assert f.format_version == "1.1"
        got = f["ids"].tokens
    assert got == INFO and got.tokenizer_json == b'{"v": 1}'
    with h5py.File(p, "r") as h5:  # plain attributes and a uint8 dataset: any HDF5 reader sees them
        assert h5["ids"].attrs["vocab_size"] == 10 and h5["ids"].attrs["tokenizer_name"] == "tiny"
        assert bytes(h5["ids/_tokenizer"][()]) == b'{"v": 1}'
    assert validate_file(p).ok and verify_file(p) == []


def test_a_file_without_metadata_stays_format_1_0(tmp_path):
    p = tmp_path / "plain.lod.h5"
    write(p, tokens=None)
    with open_file(p) as f:
        assert f.format_version == "1.0" and f["ids"].tokens is None
    with pytest.raises(LodVersionError, match="this lodtool writes 1.1"):
        check_writable_version("1.2", str(p))


def test_appending_keeps_the_metadata_and_refuses_another(tmp_path):
    p = tmp_path / "t.lod.h5"
    write(p)
    with LodWriter(p, append=True) as w:
        w.add_tensor("ids", lod_level=1).append(LoDTensor(np.array([4], np.uint16), [[0, 1]]))
    with open_file(p) as f:
        assert f["ids"].tokens == INFO and f["ids"].read().to_nested() == [[1, 2], [3], [4]]
    with pytest.raises(LodUsageError, match="holds ids of vocabulary 10.*cannot append ids of vocabulary 11"):
        with LodWriter(p, append=True) as w:
            w.add_tensor("ids", lod_level=1, tokens=TokenInfo(vocab_size=11))


def test_validate_names_the_first_id_past_the_vocabulary_and_a_narrow_dtype(tmp_path):
    p = tmp_path / "bad.lod.h5"
    write(p, data=(1, 12, 3, 10), lod=((0, 2, 4),), tokens=TokenInfo(vocab_size=10))
    problems = validate_file(p).problems
    assert [(x.index, x.message) for x in problems] == [
        (1, "data row 1: token id 12 is not under the vocabulary size 10"),
        (3, "data row 3: token id 10 is not under the vocabulary size 10")]
    write(tmp_path / "narrow.lod.h5", data=(1,), lod=((0, 1),), tokens=TokenInfo(vocab_size=300), dtype="uint8")
    assert "dtype uint8 holds ids up to 255" in validate_file(tmp_path / "narrow.lod.h5").problems[0].message


def test_metadata_that_does_not_parse_is_a_problem_not_a_crash(tmp_path):
    p = tmp_path / "t.lod.h5"
    write(p)
    with h5py.File(p, "r+") as h5:
        h5["ids"].attrs["eos_id"] = "nine"
    report = validate_file(p)
    assert not report.ok and "attribute 'eos_id' is 'nine'; expected an integer" in report.problems[0].message
    with open_file(p) as f:  # the ids still read
        assert f["ids"].read().to_nested() == [[1, 2], [3]]


def test_a_sharded_folder_keeps_the_metadata_in_its_manifest_and_shards(tmp_path):
    src = tmp_path / "t.lod.h5"
    write(src, data=tuple(range(9)), lod=((0, 2, 3, 5, 9),))
    with open_file(src) as f, ShardWriter(tmp_path / "s", shard_size=4) as w:
        w.write(f["ids"])
    spec = read_manifest(tmp_path / "s").tensors["tensor"]
    assert spec.tokens == INFO and spec.tokens.tokenizer_json is None  # the JSON is in each shard only
    with open_sharded(tmp_path / "s") as f:
        assert f["tensor"].tokens.tokenizer_json == INFO.tokenizer_json
