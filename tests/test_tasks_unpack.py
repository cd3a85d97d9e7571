"""``tasks.unpack``: progress as the chunks are written, and a folder checked whole before the first byte."""

from __future__ import annotations

import io
import json
import os

import numpy as np
import pytest

from lodtool import LoDTensor, save
from lodtool.container.shards import MANIFEST_NAME, ShardWriter
from lodtool.errors import LodFormatError
from lodtool.tasks import unpack


def _tensor(n: int = 200) -> LoDTensor:
    rng = np.random.default_rng(5)
    return LoDTensor(rng.integers(0, 9, n * 3).astype("int16"), recursive_sequence_lengths=[[3] * n])


@pytest.mark.parametrize("to", ["jsonl", "npz", "parquet"])
def test_progress_reports_the_bytes_of_rows_written_after_each_chunk(tmp_path, to):
    t = _tensor()
    save(tmp_path / "a.lod.h5", t)
    seen = []
    r = unpack(tmp_path / "a.lod.h5", tmp_path / f"a.{to}", to=to, chunk_rows=60,
               progress=lambda done, total: seen.append((done, total)))
    total = t.n_rows * 2
    assert len(seen) == 10 and seen[-1] == (total, total) and r.rows == t.n_rows
    assert [d for d, _ in seen] == sorted(d for d, _ in seen) and {x for _, x in seen} == {total}


def test_a_folder_whose_manifest_says_zero_rows_is_refused(tmp_path):
    folder = tmp_path / "s"
    with ShardWriter(folder, shard_size=256) as w:
        w.write(_tensor())
    raw = json.loads((folder / MANIFEST_NAME).read_text())
    for s in raw["shards"]:
        s["tensors"]["tensor"].update(sequences=0, rows=0, level_sequences=[0])
    (folder / MANIFEST_NAME).write_text(json.dumps(raw))
    out = io.BytesIO()
    with pytest.raises(LodFormatError, match="says 0"):
        unpack(folder, out, to="jsonl")
    assert out.getvalue() == b""


def test_a_folder_is_checked_whole_before_the_first_byte(tmp_path):
    folder = tmp_path / "s"
    with ShardWriter(folder, shard_size=256) as w:
        w.write(_tensor())
    last = sorted(n for n in os.listdir(folder) if n != MANIFEST_NAME)[-1]
    save(folder / last, LoDTensor(np.zeros(3, "int16"), [[0, 1, 3]]), force=True)  # other counts than named
    out = io.BytesIO()
    with pytest.raises(LodFormatError, match=last):
        unpack(folder, out, to="json")
    assert out.getvalue() == b""


# -- the token formats of LLM training: several files from one output path ---------------------------------
from hypothesis import HealthCheck, given, settings  # noqa: E402

from lodtool import io as formats, open as open_source  # noqa: E402
from lodtool.errors import LodUsageError  # noqa: E402
from lodtool.tasks import pack  # noqa: E402

from .strategies import lod_tensors  # noqa: E402

#: the token dtypes each multi-file format stores and reads back without being told (fairseq's 9/10 need it)
TOKEN_DTYPES = {"megatron": ["uint8", "int8", "int16", "int32", "int64", "uint16"],
                "fairseq": ["uint8", "int8", "int16", "int32", "int64", "uint16"],
                "datatrove": ["uint16", "uint32"], "dolma": ["uint16", "uint32", "uint64"]}


def _stored(t: LoDTensor) -> LoDTensor:
    """A tensor as it reads back from a container (what the round trips compare)."""
    return LoDTensor(np.asarray(t), t.lod)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(t=lod_tensors(min_levels=2, max_levels=2, dtypes=TOKEN_DTYPES["megatron"], element_shapes=[()]))
def test_container_to_megatron_and_back_is_identical(tmp_path_factory, t):
    d = tmp_path_factory.mktemp("rt")
    save(d / "a.lod.h5", t)
    r = unpack(d / "a.lod.h5", str(d / "corpus"), to="megatron", chunk_rows=3)
    assert r.files == (str(d / "corpus.bin"), str(d / "corpus.idx")) and r.sequences == len(t)
    pack([str(d / "corpus")], d / "b.lod.h5")
    with open_source(d / "b.lod.h5") as f:
        back = f.tensor().read()
    assert back.dtype == t.dtype and back.lod == t.lod and np.asarray(back).tobytes() == np.asarray(t).tobytes()
    # and the other way: megatron -> container -> megatron gives the same bytes
    unpack(d / "b.lod.h5", str(d / "again"), to="megatron", chunk_rows=5)
    for suffix in (".bin", ".idx"):
        assert (d / f"again{suffix}").read_bytes() == (d / f"corpus{suffix}").read_bytes()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(t=lod_tensors(min_levels=1, max_levels=3, dtypes=TOKEN_DTYPES["megatron"], element_shapes=[()]),
       kind=__import__("hypothesis").strategies.sampled_from(["megatron", "fairseq"]))
def test_an_uncompressed_container_unpacks_to_the_bytes_a_compressed_one_gives(tmp_path_factory, t, kind):
    # the tokens of an uncompressed container are copied as stored; a compressed one's are decoded chunk by chunk
    d = tmp_path_factory.mktemp("copy")
    save(d / "plain.lod.h5", t, compression="none")
    save(d / "gzip.lod.h5", t, compression="gzip")
    level = t.lod_level - 1
    unpack(d / "plain.lod.h5", str(d / "copied"), to=kind, level=level)
    unpack(d / "gzip.lod.h5", str(d / "decoded"), to=kind, level=level, chunk_rows=4)
    for suffix in (".bin", ".idx"):
        assert (d / f"copied{suffix}").read_bytes() == (d / f"decoded{suffix}").read_bytes()
    # and the whole round trip of the benchmark: that dataset -> an uncompressed container -> the same bytes
    pack([str(d / "copied")], d / "again.lod.h5", format=kind, compression="none")
    unpack(d / "again.lod.h5", str(d / "again"), to=kind)
    for suffix in (".bin", ".idx"):
        assert (d / f"again{suffix}").read_bytes() == (d / f"copied{suffix}").read_bytes()


@pytest.mark.parametrize("to", ["fairseq", "datatrove", "dolma"])
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=__import__("hypothesis").strategies.data())
def test_container_to_one_level_formats_and_back_is_identical(tmp_path_factory, to, data):
    t = data.draw(lod_tensors(min_levels=1, max_levels=1, dtypes=TOKEN_DTYPES[to], element_shapes=[()]))
    d = tmp_path_factory.mktemp("rt")
    save(d / "a.lod.h5", t)
    r = unpack(d / "a.lod.h5", str(d / "out"), to=to, chunk_rows=2)
    # a file of no token cannot say its token size: the dtype is given, as a user of datatrove or dolma does
    pack([r.files[0]], d / "b.lod.h5", format=to, token_dtype=t.dtype.name)
    with open_source(d / "b.lod.h5") as f:
        back = f.tensor().read()
    assert back.dtype == t.dtype and back.lod == t.lod and np.asarray(back).tobytes() == np.asarray(t).tobytes()


def test_one_level_writes_each_sequence_as_its_own_document(tmp_path):
    save(tmp_path / "a.lod.h5", LoDTensor(np.arange(5, dtype=np.uint16), [[0, 2, 2, 5]]))
    unpack(tmp_path / "a.lod.h5", str(tmp_path / "c"), to="megatron")
    from lodtool.io.megatron import read_index

    assert read_index(str(tmp_path / "c")).document_indices.tolist() == [0, 1, 2, 3]


def test_a_deeper_lod_needs_level_and_is_flattened_by_it(tmp_path):
    t = LoDTensor(np.arange(6, dtype=np.uint16), [[0, 2, 3], [0, 1, 3, 4], [0, 2, 2, 5, 6]])
    save(tmp_path / "a.lod.h5", t)
    with pytest.raises(LodUsageError, match="3 LoD levels, but megatron stores 2; .*level=... \\(0..2\\)"):
        unpack(tmp_path / "a.lod.h5", str(tmp_path / "c"), to="megatron")
    assert sorted(os.listdir(tmp_path)) == ["a.lod.h5"]
    unpack(tmp_path / "a.lod.h5", str(tmp_path / "c"), to="megatron", level=1)
    with open_source(str(tmp_path / "c")) as f:  # documents = level 0, sequences = level 1 with their tokens
        assert f.tensor().read().lod == [[0, 2, 3], [0, 2, 5, 6]]
    unpack(tmp_path / "a.lod.h5", str(tmp_path / "d.ds"), to="datatrove", level=0)
    with open_source(str(tmp_path / "d.ds")) as f:  # sequences = level 0, every level under it flattened
        assert f.tensor().read().lod == [[0, 5, 6]]
    with pytest.raises(LodUsageError, match="level=... applies to writing megatron"):
        unpack(tmp_path / "a.lod.h5", tmp_path / "x.json", to="json", level=1)


def test_an_empty_tensor_writes_an_empty_dataset(tmp_path):
    save(tmp_path / "a.lod.h5", LoDTensor(np.zeros(0, np.int16), [[0], [0]]))
    unpack(tmp_path / "a.lod.h5", str(tmp_path / "c"), to="megatron")
    pack([str(tmp_path / "c")], tmp_path / "b.lod.h5")
    with open_source(tmp_path / "b.lod.h5") as f:
        back = f.tensor().read()
    assert back.lod == [[0], [0]] and back.dtype == np.int16


def test_a_failed_write_leaves_an_existing_prefix_as_it_was(tmp_path):
    save(tmp_path / "a.lod.h5", LoDTensor(np.arange(3, dtype=np.uint16), [[0, 1, 3]]))
    save(tmp_path / "f.lod.h5", LoDTensor(np.ones(3, np.float16), [[0, 1, 3]]))
    unpack(tmp_path / "a.lod.h5", str(tmp_path / "c"), to="megatron")
    before = {p: (tmp_path / p).read_bytes() for p in ("c.bin", "c.idx")}
    with pytest.raises(LodUsageError, match="megatron cannot store float16"):
        unpack(tmp_path / "f.lod.h5", str(tmp_path / "c"), to="megatron")
    assert {p: (tmp_path / p).read_bytes() for p in ("c.bin", "c.idx")} == before
    assert sorted(os.listdir(tmp_path)) == ["a.lod.h5", "c.bin", "c.idx", "f.lod.h5"]


def test_a_token_dataset_is_not_written_over_itself(tmp_path):
    save(tmp_path / "a.lod.h5", LoDTensor(np.arange(3, dtype=np.uint16), [[0, 1, 3]]))
    unpack(tmp_path / "a.lod.h5", str(tmp_path / "c"), to="megatron")
    with pytest.raises(LodUsageError, match="same file as the input"):
        unpack(str(tmp_path / "c"), str(tmp_path / "c.idx"), to="megatron")


def test_several_files_need_a_path_not_a_stream(tmp_path):
    save(tmp_path / "a.lod.h5", LoDTensor(np.arange(3, dtype=np.uint16), [[0, 1, 3]]))
    with pytest.raises(LodUsageError, match="give an output path prefix, not a stream"):
        unpack(tmp_path / "a.lod.h5", io.BytesIO(), to="megatron")
    assert formats.get("megatron").writes_files


def test_datatrove_side_files_of_other_tokens_are_refused(tmp_path):
    save(tmp_path / "a.lod.h5", LoDTensor(np.arange(3, dtype=np.uint16), [[0, 1, 3]]))
    (tmp_path / "x.ds.loss").write_bytes(b"\x01")
    with pytest.raises(LodUsageError, match="x.ds.loss: exists beside the output"):
        unpack(tmp_path / "a.lod.h5", str(tmp_path / "x.ds"), to="datatrove")
    assert sorted(os.listdir(tmp_path)) == ["a.lod.h5", "x.ds.loss"]


def test_dtype_casts_to_what_a_format_stores_and_refuses_what_does_not_fit(tmp_path):
    from lodtool.errors import LodInputError

    save(tmp_path / "a.lod.h5", LoDTensor(np.array([1, 2, 70_000]), [[0, 2, 3]]))  # int64, as JSON packs
    with pytest.raises(LodUsageError, match="datatrove stores uint16 or uint32 tokens, not int64; cast them with "
                                            "dtype=..."):
        unpack(tmp_path / "a.lod.h5", str(tmp_path / "x.ds"), to="datatrove")
    with pytest.raises(LodInputError, match="a.lod.h5:tensor: row 2: value 70000 does not fit in uint16"):
        unpack(tmp_path / "a.lod.h5", str(tmp_path / "x.ds"), to="datatrove", dtype="uint16")
    assert sorted(os.listdir(tmp_path)) == ["a.lod.h5"]
    unpack(tmp_path / "a.lod.h5", str(tmp_path / "x.ds"), to="datatrove", dtype="uint32", chunk_rows=1)
    with open_source(str(tmp_path / "x.ds")) as f:
        back = f.tensor().read()
    assert back.dtype == np.uint32 and back.to_nested() == [[1, 2], [70_000]]
    out = io.BytesIO()
    unpack(tmp_path / "a.lod.h5", out, to="jsonl", dtype="float32")
    assert out.getvalue() == b"[1.0,2.0]\n[70000.0]\n"


def test_detokenize_to_a_binary_format_is_refused_in_the_librarys_words(tmp_path):
    from lodtool.errors import LodUsageError

    path = str(tmp_path / "x.lod.h5")
    save(path, _tensor(4))
    with pytest.raises(LodUsageError, match=r"^detokenize=True writes text as jsonl or json, not npz$"):
        unpack(path, str(tmp_path / "y.npz"), to="npz", detokenize=True)
    assert not os.path.exists(tmp_path / "y.npz")
