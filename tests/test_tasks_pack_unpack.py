"""The pack / unpack library calls: every input format into the container, back out, and failure atomicity."""

from __future__ import annotations

import io
import json
import os
import sys
import threading
from pathlib import Path

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings

from lodtool import LoDTensor, from_nested
from lodtool.errors import LodError, LodInputError, LodUsageError
from lodtool.container import load, save
from lodtool.io.npy import read_npz
from lodtool.tasks import pack
from lodtool.tasks import unpack

from .strategies import lod_tensors

SAMPLES = Path(__file__).resolve().parent.parent / "sample_data"
ARTICLES = json.loads((SAMPLES / "articles.json").read_text())


def leftovers(folder: Path, keep: set[str]) -> list[str]:
    return sorted(f for f in os.listdir(folder) if f not in keep)


# -- pack -------------------------------------------------------------------------------------------
def test_pack_json_with_level_names(tmp_path):
    out = tmp_path / "a.lod.h5"
    r = pack([SAMPLES / "articles.json"], out, level_names=["article", "sentence"])
    assert (r.sequences, r.rows, r.lod_level, r.dtype, r.name) == (3, 15, 2, np.dtype(np.int64), "tensor")
    assert r.bytes_read == (SAMPLES / "articles.json").stat().st_size and r.output == str(out)
    t = load(out)
    assert t.to_nested() == ARTICLES and t.level_names == ("article", "sentence")


def test_pack_jsonl_streams_in_chunks_and_promotes(tmp_path):
    src = tmp_path / "d.jsonl"
    lines = [[[i, i + 1], [i]] for i in range(200)] + [[[0.5]]]
    src.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    seen = []
    r = pack([src], tmp_path / "d.lod.h5", chunk_bytes=256, progress=seen.append, name="docs")
    assert r.dtype == np.float64 and r.sequences == 201 and seen[-1] == src.stat().st_size
    assert load(tmp_path / "d.lod.h5", "docs").equals(from_nested(lines))


def test_pack_several_inputs_concatenate(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("[[1, 2]]\n")
    b.write_text("[[3]]\n[[4, 5]]\n")
    r = pack([a, b], tmp_path / "o.lod.h5", dtype="int32")
    assert r.sequences == 3 and r.dtype == np.int32 and r.bytes_read == 9 + 15
    t = load(tmp_path / "o.lod.h5")
    assert t.to_nested() == [[[1, 2]], [[3]], [[4, 5]]] and t.dtype == np.int32


def test_pack_inputs_must_agree(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("[[1, 2]]\n")
    b.write_text("[[3]]\n[[[4]]]\n")
    with pytest.raises(LodInputError, match=r"b\.jsonl:2:"):
        pack([a, b], tmp_path / "o.lod.h5")
    assert leftovers(tmp_path, {"a.jsonl", "b.jsonl"}) == []
    b.write_text("\n")  # an empty input among others adds nothing
    assert pack([a, b], tmp_path / "o.lod.h5").sequences == 1


def test_pack_npy_and_npz(tmp_path):
    videos = sorted((SAMPLES / "videos").glob("*.npy"))
    r = pack(videos, tmp_path / "v.lod.h5")
    assert (r.sequences, r.rows, r.lod_level, r.dtype) == (3, 6, 1, np.dtype(np.uint8))
    t = load(tmp_path / "v.lod.h5")
    assert t.element_shape == (48, 64) and np.array_equal(t.branch(1).data, np.load(videos[1]))
    z = tmp_path / "x.npz"
    np.savez(z, data=np.arange(5.0), lengths_0=[2, 3], level_names=np.array(["seq"]))
    r = pack([z, z], tmp_path / "z.lod.h5")
    assert r.sequences == 4 and load(tmp_path / "z.lod.h5").level_names == ("seq",)


def test_pack_from_stdin_and_streams(tmp_path, monkeypatch):
    class Stdin:
        buffer = io.BytesIO(b"[[1], [2, 3]]\n")

    monkeypatch.setattr(sys, "stdin", Stdin)
    pack(["-"], tmp_path / "s.lod.h5", format="jsonl")
    assert load(tmp_path / "s.lod.h5").to_nested() == [[[1], [2, 3]]]
    pack([io.BytesIO(b"[[[1, 2]], [[3]]]")], tmp_path / "b.lod.h5", format="json")
    assert load(tmp_path / "b.lod.h5").lod == [[0, 1, 2], [0, 2, 3]]


def test_pack_usage_errors(tmp_path):
    with pytest.raises(LodUsageError, match="stdin: cannot tell the format from the first bytes; give format="):
        pack(["-"], tmp_path / "o.h5")
    with pytest.raises(LodUsageError, match="cannot tell the format"):
        pack([tmp_path / "x.txt"], tmp_path / "o.h5")
    with pytest.raises(LodUsageError, match="mix formats"):
        pack([tmp_path / "a.json", tmp_path / "b.jsonl"], tmp_path / "o.h5")
    with pytest.raises(LodUsageError, match="unknown input format"):
        pack([tmp_path / "a.json"], tmp_path / "o.h5", format="csv")
    with pytest.raises(LodUsageError, match="no input"):
        pack([], tmp_path / "o.h5")
    with pytest.raises(LodUsageError, match="1 level name"):
        pack([SAMPLES / "articles.json"], tmp_path / "o.h5", level_names=["only"])
    assert leftovers(tmp_path, set()) == []


def test_failed_pack_leaves_no_output_and_keeps_the_old_one(tmp_path):
    src = tmp_path / "d.jsonl"
    src.write_bytes(b"[[1, 2]]\n" * 500 + b"[[3,, 4]]\n")
    out = tmp_path / "d.lod.h5"
    with pytest.raises(LodInputError, match=r"d\.jsonl:501:5: expected a number"):
        pack([src], out, chunk_bytes=64)  # earlier chunks were already appended
    assert not out.exists() and leftovers(tmp_path, {"d.jsonl"}) == []
    save(out, LoDTensor(np.arange(3), [[0, 3]]))
    before = out.read_bytes()
    with pytest.raises(LodInputError):
        pack([src], out, chunk_bytes=64, force=True)
    assert out.read_bytes() == before and leftovers(tmp_path, {"d.jsonl", "d.lod.h5"}) == []


def test_append(tmp_path):
    out = tmp_path / "a.lod.h5"
    pack([SAMPLES / "articles.json"], out)
    r = pack([SAMPLES / "articles.json"], out, append=True)
    assert r.sequences == 3 and load(out).to_nested() == ARTICLES + ARTICLES
    before = out.read_bytes()
    with pytest.raises(LodError):
        pack([SAMPLES / "sentences.json"], out, append=True, lod_level=1)  # float vectors: another shape
    assert out.read_bytes() == before


def test_errors_stop_the_reader_thread(tmp_path):
    src = tmp_path / "d.jsonl"
    src.write_bytes(b"[[1, 2]]\n" * 2000)
    before = threading.active_count()
    with pytest.raises(LodUsageError):
        pack([src], tmp_path / "o.h5", level_names=["a", "b", "c"], chunk_bytes=64)
    assert threading.active_count() <= before + 8  # the scan pool may stay; the reader thread is gone
    assert not [t for t in threading.enumerate() if t.name == "lodtool-read-ahead"]


# -- unpack -----------------------------------------------------------------------------------------
@pytest.fixture
def articles(tmp_path) -> Path:
    out = tmp_path / "a.lod.h5"
    pack([SAMPLES / "articles.json"], out, level_names=["article", "sentence"])
    return out


def test_unpack_json_is_the_input_again(articles, tmp_path):
    out = tmp_path / "a.json"
    r = unpack(articles, out, to="json")
    assert out.read_bytes() == (SAMPLES / "articles.json").read_bytes()
    assert (r.rows, r.sequences, r.to, r.bytes_written) == (15, 3, "json", out.stat().st_size)


def test_unpack_jsonl_in_small_chunks_to_a_stream(articles):
    buf = io.BytesIO()
    unpack(articles, buf, to="jsonl", chunk_rows=2)
    assert [json.loads(x) for x in buf.getvalue().splitlines()] == ARTICLES


def test_unpack_to_stdout(articles, monkeypatch):
    class Stdout:
        buffer = io.BytesIO()

    monkeypatch.setattr(sys, "stdout", Stdout)
    assert unpack(articles, "-", to="jsonl").output == "-"
    assert Stdout.buffer.getvalue().count(b"\n") == 3


def test_npz_pack_unpack_npz_round_trip(tmp_path):
    z = tmp_path / "in.npz"
    np.savez(z, data=np.arange(14.0).reshape(7, 2), offsets_0=[0, 2, 3], offsets_1=[0, 2, 4, 7],
             level_names=np.array(["doc", "sent"]))
    pack([z], tmp_path / "z.lod.h5")
    unpack(tmp_path / "z.lod.h5", tmp_path / "out.npz", to="npz", chunk_rows=3)
    with np.load(z) as a, np.load(tmp_path / "out.npz") as b:
        assert sorted(a.files) == sorted(b.files)
        assert all(np.array_equal(a[k], b[k]) and a[k].dtype == b[k].dtype for k in a.files)


def test_unpack_floats_and_nan_pack_again(tmp_path):
    src = tmp_path / "f.json"
    src.write_text("[[0.1, NaN], [-Infinity, 1e-320]]")
    pack([src], tmp_path / "f.lod.h5", dtype="float32")
    buf = io.BytesIO()
    unpack(tmp_path / "f.lod.h5", buf, to="json")
    assert buf.getvalue() == b"[[0.1,NaN],[-Infinity,0.0]]\n"
    pack([src], tmp_path / "g.lod.h5")
    buf = io.BytesIO()
    unpack(tmp_path / "g.lod.h5", buf, to="jsonl")
    assert buf.getvalue() == b"[0.1,NaN]\n[-Infinity,1e-320]\n"


def test_unpack_usage_errors(articles, tmp_path):
    with pytest.raises(LodUsageError, match="unknown output format"):
        unpack(articles, tmp_path / "x", to="csv")
    with pytest.raises(LodUsageError, match="chunk_rows"):
        unpack(articles, tmp_path / "x", chunk_rows=0)
    with pytest.raises(LodError):
        unpack(articles, tmp_path / "x", name="nope")
    assert leftovers(tmp_path, {"a.lod.h5"}) == []


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lod_tensors(min_levels=1, dtypes=["int16", "int64", "uint8", "float32", "float64", "bool"]))
def test_container_to_json_and_back(tmp_path, t):
    if t.n_rows == 0 and t.element_shape:
        return  # JSON with no rows cannot carry an element shape
    src, back = tmp_path / "t.lod.h5", tmp_path / "b.lod.h5"
    save(src, t, force=True)
    for to in ("jsonl", "json", "npz"):
        out = tmp_path / f"t.{to}"
        unpack(src, out, to=to, chunk_rows=3)
        kw = {} if to == "npz" else {"lod_level": t.lod_level, "dtype": t.dtype}
        pack([out], back, force=True, **kw)
        assert load(back).equals(t)
    if t.dtype.kind == "f" or t.dtype == np.int64 or t.dtype.kind == "b":  # what inference gives back
        unpack(src, tmp_path / "t.json", to="json")
        pack([tmp_path / "t.json"], back, lod_level=t.lod_level, force=True)
        got = load(back)
        assert got.lod == t.lod and np.array_equal(np.asarray(got, dtype=np.float64),
                                                   np.asarray(t, dtype=np.float64), equal_nan=True)


def test_read_npz_of_unpack_keeps_level_names(articles, tmp_path):
    unpack(articles, tmp_path / "a.npz", to="npz")
    assert read_npz(tmp_path / "a.npz").level_names == ("article", "sentence")


def test_pack_and_pack_sharded_share_one_preparation():
    import inspect

    from lodtool.tasks import _shards

    source = inspect.getsource(_shards.pack_sharded)
    assert "PackSource.open(" in source and "_pack._" not in source


def test_the_shared_preparation_checks_before_reading(tmp_path):
    from lodtool.tasks._pack import PackSource

    src = tmp_path / "a.jsonl"
    src.write_text("[[1, 2]]\n")
    with pytest.raises(LodUsageError, match="lod_level must be a non-negative integer"):
        PackSource.open([src], lod_level=-1)
    source = PackSource.open([src], level_names=["doc", "sentence"])
    assert (source.format, source.detected, source.bytes_read) == ("jsonl", False, 0)  # nothing read yet
    chunk = next(source.chunks)
    assert source.names_for(chunk) == ["doc", "sentence"]


def test_packing_a_small_token_dataset_uncompressed_leaves_numba_unimported(tmp_path):
    """Below DIRECT_FROM_BYTES of input, libhdf5's fletcher32 costs less than importing Numba."""
    import subprocess

    from lodtool.io.megatron import write_megatron

    prefix = str(tmp_path / "corpus")
    tokens = np.arange(3_000_000, dtype=np.int32)  # 12 MB, written in blocks above DIRECT_MIN_BYTES
    write_megatron(LoDTensor(tokens, [[0, 1_000_000, 3_000_000]]), prefix)
    out = str(tmp_path / "c.lod.h5")
    code = ("import sys; from lodtool.tasks import pack\n"
            f"pack([{prefix!r}], {out!r}, compression='none')\n"
            "assert 'numba' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    back = str(tmp_path / "back")
    unpack(out, to="megatron", output=back)
    for ext in (".bin", ".idx"):
        assert Path(back + ext).read_bytes() == Path(prefix + ext).read_bytes()


def test_packing_a_token_dataset_uncompressed_writes_directly_without_numba(tmp_path):
    """libhdf5's own checksum function makes the direct chunk path pay at any size, with no Numba import."""
    import subprocess

    from lodtool.io.megatron import write_megatron

    prefix = str(tmp_path / "corpus")
    write_megatron(LoDTensor(np.arange(3_000_000, dtype=np.int32), [[0, 1_000_000, 3_000_000]]), prefix)
    out = str(tmp_path / "c.lod.h5")
    code = ("import sys; from lodtool.container import writer; from lodtool.tasks import pack\n"
            "calls = []; direct = writer._write_chunks_direct\n"
            "writer._write_chunks_direct = lambda *a: calls.append(1) or direct(*a)\n"
            f"pack([{prefix!r}], {out!r}, compression='none')\n"
            "assert calls and 'numba' not in sys.modules, (calls, 'numba' in sys.modules)\n")
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    from lodtool.container import verify_file

    assert verify_file(out) == []


@pytest.mark.parametrize("fmt, compression, chunk_bytes", [("megatron", "none", 1 << 20), ("megatron", None, 1 << 16),
                                                           ("jsonl", "none", 1 << 16)])
def test_uncompressed_token_datasets_are_packed_in_large_memory_mapped_chunks(tmp_path, fmt, compression,
                                                                             chunk_bytes):
    import h5py

    from lodtool.container import open_file
    from lodtool.io.megatron import write_megatron

    tensor = LoDTensor(np.arange(600_000, dtype=np.int32), [[0, 2, 3], [0, 10, 250_000, 600_000]])
    src = str(tmp_path / "corpus")
    if fmt == "megatron":
        write_megatron(tensor, src)
    else:
        src += ".jsonl"
        Path(src).write_text("\n".join(json.dumps(d) for d in tensor.to_nested()) + "\n")
    out = tmp_path / "c.lod.h5"
    pack([src], out, compression=compression, dtype="int32")
    with h5py.File(out, "r") as f:
        assert f["tensor/data"].chunks == (chunk_bytes // 4,)
    with open_file(out) as f:
        t = f.tensor()
        assert t.mappable == (compression == "none")
        assert t[1].data.tolist() == list(range(250_000, 600_000))
    back = str(tmp_path / "back")
    unpack(out, to="megatron", output=back)
    if fmt == "megatron":
        for ext in (".bin", ".idx"):
            assert Path(back + ext).read_bytes() == Path(src + ext).read_bytes()


def test_pack_messages_name_library_keywords_not_command_line_options(tmp_path):
    from lodtool.tokens import TokenInfo

    src = tmp_path / "ids.jsonl"
    src.write_text("[1]\n")
    with pytest.raises(LodUsageError) as refused:
        pack([src], tmp_path / "x.h5", dtype="uint8", tokens=TokenInfo(vocab_size=300))
    assert str(refused.value).startswith("dtype='uint8': dtype uint8 holds ids up to 255") and "--" not in str(refused.value)
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(LodInputError) as empty:
        pack([tmp_path / "empty.jsonl"], tmp_path / "y.h5")
    assert "give lod_level=... (and dtype=...) to store zero sequences" in str(empty.value)
    assert "--" not in str(empty.value)
