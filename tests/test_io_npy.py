"""NPY / NPZ ingest and export: shapes, dtypes, every malformed archive, and never unpickling."""

from __future__ import annotations

import io
import os

import numpy as np
import pytest
from hypothesis import given

from lodtool import LoDTensor
from lodtool.errors import LodFileNotFoundError, LodInputError, LodUsageError
from lodtool.io.npy import (iter_npy, load_npz_arrays, read_npy, read_npy_header, read_npz, write_npz,
                                  write_npz_parts)

from .strategies import lod_tensors


class Canary:
    """Unpickling this creates a file: proof that something unpickled."""

    path = ""

    def __reduce__(self):
        return (open, (self.path, "w"))


def canary_array(tmp_path) -> tuple[np.ndarray, str]:
    Canary.path = str(tmp_path / "UNPICKLED")
    arr = np.empty(2, dtype=object)
    arr[0], arr[1] = Canary(), Canary()
    return arr, Canary.path


def save(path, arr):
    np.save(path, arr)
    return path


# -- .npy -------------------------------------------------------------------------------------------
def test_npy_files_are_top_level_sequences(tmp_path):
    a = save(tmp_path / "a.npy", np.arange(6, dtype=np.float32).reshape(3, 2))
    b = save(tmp_path / "b.npy", np.zeros((0, 2), np.float32))
    c = save(tmp_path / "c.npy", np.ones((1, 2), np.float32))
    t = read_npy([a, b, c])
    assert t.lod == [[0, 3, 3, 4]] and t.shape == (4, 2) and t.dtype == np.float32
    assert np.array_equal(t.branch(0).data, np.load(a))


def test_npy_chunks_group_files(tmp_path):
    files = [save(tmp_path / f"{i}.npy", np.full((i + 1, 2), i, np.int16)) for i in range(5)]
    chunks = list(iter_npy(files, chunk_bytes=20))
    assert len(chunks) > 1 and sum(len(c) for c in chunks) == 5
    assert [c.dtype for c in chunks] == [np.int16] * len(chunks)


def test_npy_dtypes_promote_but_booleans_do_not_mix(tmp_path):
    a = save(tmp_path / "a.npy", np.arange(3, dtype=np.uint8))
    b = save(tmp_path / "b.npy", np.arange(2, dtype=np.int16))
    assert read_npy([a, b]).dtype == np.int16
    c = save(tmp_path / "c.npy", np.array([True]))
    with pytest.raises(LodInputError, match=r"c\.npy: has dtype bool.*cannot be mixed"):
        read_npy([a, c])
    assert read_npy([a, c], dtype="uint8").data.tolist() == [0, 1, 2, 1]


def test_npy_explicit_dtype_checks_values(tmp_path):
    a = save(tmp_path / "a.npy", np.array([1, 2, 300]))
    with pytest.raises(LodInputError, match=r"a\.npy: row 2: value 300 does not fit in uint8"):
        read_npy([a], dtype="uint8")


def test_npy_element_shape_mismatch_names_the_file(tmp_path):
    a = save(tmp_path / "a.npy", np.zeros((2, 3)))
    b = save(tmp_path / "b.npy", np.zeros((2, 4)))
    with pytest.raises(LodInputError, match=r"b\.npy: element shape \(4,\).*a\.npy has \(3,\)"):
        read_npy([a, b])


def test_object_npy_is_refused_without_unpickling(tmp_path):
    arr, canary = canary_array(tmp_path)
    p = tmp_path / "obj.npy"
    np.save(p, arr, allow_pickle=True)
    with pytest.raises(LodInputError, match=r"obj\.npy: holds Python objects.*never unpickles"):
        read_npy([p])
    assert not os.path.exists(canary)


def test_bad_npy_files(tmp_path):
    scalar = save(tmp_path / "s.npy", np.float64(3.0))
    with pytest.raises(LodInputError, match=r"s\.npy: is a 0-d array"):
        read_npy([scalar])
    text = save(tmp_path / "t.npy", np.array(["a", "b"]))
    with pytest.raises(LodInputError, match=r"t\.npy: has dtype <U1; lodtool stores numbers and bools only"):
        read_npy([text])
    junk = tmp_path / "j.npy"
    junk.write_bytes(b"not an npy file at all")
    with pytest.raises(LodInputError, match=r"j\.npy: not a readable \.npy file"):
        read_npy([junk])
    with pytest.raises(LodFileNotFoundError, match="missing.npy"):
        read_npy([tmp_path / "missing.npy"])
    with pytest.raises(LodUsageError):
        read_npy([])
    with pytest.raises(LodUsageError):
        list(iter_npy([save(tmp_path / "x.npy", np.zeros(2))], lod_level=2))


def test_npy_header_and_streams():
    buf = io.BytesIO()
    np.save(buf, np.zeros((4, 2), np.uint16))
    buf.seek(0)
    assert read_npy_header(buf) == ((4, 2), np.dtype(np.uint16), False)
    assert read_npy([buf]).shape == (4, 2)


# -- .npz -------------------------------------------------------------------------------------------
def npz(tmp_path, name="x.npz", **arrays):
    p = tmp_path / name
    np.savez(p, **arrays)
    return p


def test_npz_offsets_lengths_and_lod_names(tmp_path):
    data = np.arange(7.0)
    ref = LoDTensor(data, recursive_sequence_lengths=[[2, 1], [2, 2, 3]])
    assert read_npz(npz(tmp_path, data=data, offsets_0=[0, 2, 3], offsets_1=[0, 2, 4, 7])).equals(ref)
    assert read_npz(npz(tmp_path, data=data, lengths_0=[2, 1], lengths_1=[2, 2, 3])).equals(ref)
    assert read_npz(npz(tmp_path, data=data, lod_0=[0, 2, 3], lod_1=[0, 2, 4, 7])).equals(ref)
    zero = read_npz(npz(tmp_path, data=np.arange(3)))
    assert zero.lod_level == 0 and zero.n_rows == 3


def test_npz_level_names_and_lod_level(tmp_path):
    p = npz(tmp_path, data=np.arange(3), offsets_0=[0, 2, 3], level_names=np.array(["doc"]))
    assert read_npz(p).level_names == ("doc",)
    assert read_npz(p, level_names=["x"]).level_names == ("x",)
    with pytest.raises(LodInputError, match=r"x\.npz: has 1 LoD level\(s\), but lod_level=2"):
        read_npz(p, lod_level=2)


def test_npz_mismatched_arrays_name_the_array_and_index(tmp_path):
    with pytest.raises(LodInputError, match=r"x\.npz: offsets_0: offset\[2\]=6 but the data has 5 rows"):
        read_npz(npz(tmp_path, data=np.arange(5), offsets_0=[0, 2, 6]))
    with pytest.raises(LodInputError, match=r"x\.npz: offsets_0: offset\[2\]=1 < offset\[1\]=3"):
        read_npz(npz(tmp_path, data=np.arange(5), offsets_0=[0, 3, 1, 5]))
    with pytest.raises(LodInputError, match=r"x\.npz: offsets_0: offset\[2\]=3 but level 1 has 4 sequences"):
        read_npz(npz(tmp_path, data=np.arange(5), offsets_0=[0, 1, 3], offsets_1=[0, 1, 2, 3, 5]))
    with pytest.raises(LodInputError, match=r"lengths_0: length\[1\]=-1 is negative"):
        read_npz(npz(tmp_path, data=np.arange(5), lengths_0=[6, -1]))
    with pytest.raises(LodInputError, match=r"lengths_0 \(as offsets\): offset\[2\]=4 but the data has 5 rows"):
        read_npz(npz(tmp_path, data=np.arange(5), lengths_0=[2, 2]))


def test_npz_malformed_layouts(tmp_path):
    with pytest.raises(LodInputError, match="no array named 'data'"):
        read_npz(npz(tmp_path, offsets_0=[0, 1]))
    with pytest.raises(LodInputError, match="level 1 is missing"):
        read_npz(npz(tmp_path, data=np.arange(2), offsets_0=[0, 2], offsets_2=[0, 2]))
    with pytest.raises(LodInputError, match="mixes offsets_k and lengths_k"):
        read_npz(npz(tmp_path, data=np.arange(2), offsets_0=[0, 1], lengths_1=[2]))
    with pytest.raises(LodInputError, match="unexpected array 'offset_0'"):
        read_npz(npz(tmp_path, data=np.arange(2), offset_0=[0, 2]))
    with pytest.raises(LodInputError, match=r"x\.npz: offsets_0 must be integers, got dtype float64"):
        read_npz(npz(tmp_path, data=np.arange(2), offsets_0=[0.0, 2.0]))
    with pytest.raises(LodInputError, match="given twice"):
        read_npz(npz(tmp_path, data=np.arange(2), offsets_0=[0, 2], lod_0=[0, 2]))
    with pytest.raises(LodInputError, match="array 'data' is 0-d"):
        read_npz(npz(tmp_path, data=np.float64(1)))
    with pytest.raises(LodInputError, match="empty input"):
        read_npz(npz(tmp_path, data=np.zeros(0)))
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(LodInputError, match=r"junk\.npz: not a readable \.npz archive"):
        read_npz(junk)
    single = tmp_path / "single.npz"
    np.save(open(single, "wb"), np.arange(3))
    with pytest.raises(LodInputError, match="not an .npz archive"):
        read_npz(single)


def test_object_npz_member_is_refused_without_unpickling(tmp_path):
    arr, canary = canary_array(tmp_path)
    p = tmp_path / "obj.npz"
    np.savez(p, data=arr, offsets_0=np.array([0, 2]))
    with pytest.raises(LodInputError, match=r"obj\.npz: array 'data' holds Python objects.*never unpickles"):
        read_npz(p)
    assert not os.path.exists(canary)


def test_load_npz_arrays_for_other_commands(tmp_path):
    p = npz(tmp_path, padded=np.zeros((2, 3)), lengths=np.array([3, 1]))
    assert sorted(load_npz_arrays(p, required=("padded", "lengths"))) == ["lengths", "padded"]
    with pytest.raises(LodInputError, match="no array named 'mask'"):
        load_npz_arrays(p, required=("mask",))


# -- writing ----------------------------------------------------------------------------------------
def test_write_npz_arrays_and_atomic_path(tmp_path):
    t = LoDTensor(np.arange(7.0).reshape(7, 1), recursive_sequence_lengths=[[2, 1], [2, 2, 3]],
                  level_names=["doc", "sent"])
    p = tmp_path / "t.npz"
    write_npz(t, p)
    with np.load(p) as z:
        assert sorted(z.files) == ["data", "level_names", "offsets_0", "offsets_1"]
        assert z["offsets_1"].tolist() == [0, 2, 4, 7] and z["data"].shape == (7, 1)
    assert read_npz(p).equals(t) and read_npz(p).level_names == ("doc", "sent")
    assert not [f for f in os.listdir(tmp_path) if f != "t.npz"]


def test_write_npz_parts_streams_to_a_pipe_like_stream():
    class Pipe:  # write-only, no tell or seek: like stdout into a pipe
        def __init__(self):
            self.buf = io.BytesIO()

        def write(self, b):
            return self.buf.write(b)

        def flush(self):
            pass

    out = Pipe()
    write_npz_parts(out, shape=(5,), dtype=np.dtype(np.int32), data_blocks=[np.arange(2), np.arange(2, 5)],
                    offsets=[[np.array([0, 2]), np.array([5])]], level_sizes=[3])
    t = read_npz(io.BytesIO(out.buf.getvalue()))
    assert t.lod == [[0, 2, 5]] and t.data.tolist() == [0, 1, 2, 3, 4] and t.dtype == np.int32


@given(lod_tensors())
def test_write_read_round_trip(t):
    buf = io.BytesIO()
    write_npz(t, buf)
    buf.seek(0)
    back = read_npz(buf)
    assert back.equals(t) and back.dtype == t.dtype


def test_token_info_refuses_a_tokens_member_claiming_too_much(tmp_path, monkeypatch):
    # the claim was checked inside the handler that skips unreadable archives, so it was skipped too
    from lodtool.io import npy
    from lodtool.tokens import TokenInfo

    p = tmp_path / "ids.npz"
    npy.write_npz_parts(p, shape=(2,), dtype=np.dtype("uint8"), data_blocks=[np.array([1, 2], np.uint8)],
                        offsets=[[np.array([0, 2])]], level_sizes=[2], tokens=TokenInfo(vocab_size=3))
    assert npy.token_info("npz", [str(p)]).vocab_size == 3
    monkeypatch.setattr(npy, "MAX_TOKENIZER_BYTES", -4096)
    with pytest.raises(LodInputError, match=r"ids\.npz: member 'tokens' claims \d+ bytes$"):
        npy.token_info("npz", [str(p)])
