"""``container._copy``: a tensor's uncompressed data copied out as stored, checked by its recorded digest."""

from __future__ import annotations

import errno
import os

import h5py
import numpy as np
import pytest

from lodtool import LoDTensor, save
from lodtool.container import open_file
from lodtool.container._copy import stored_copier
from lodtool.errors import LodChecksumError
from lodtool.io.megatron import write_megatron
from lodtool.tasks import unpack


def _corpus(n_docs: int = 600, seed: int = 3) -> LoDTensor:
    """Documents over sentences over int32 tokens: several 64 KiB chunks, the last one short."""
    rng = np.random.default_rng(seed)
    sentences = rng.integers(0, 6, n_docs)
    lengths = rng.integers(0, 120, int(sentences.sum()))
    tokens = rng.integers(0, 50_000, int(lengths.sum())).astype(np.int32)
    return LoDTensor(tokens, [np.concatenate(([0], np.cumsum(sentences))), np.concatenate(([0], np.cumsum(lengths)))])


def _copy_to(path, out) -> int:
    with open_file(path) as f, open(out, "wb") as o:
        copy = stored_copier(f.tensor())
        assert copy is not None
        return copy(o, None)


def test_the_copy_is_the_stored_rows_and_says_how_many_bytes(tmp_path):
    t = _corpus()
    save(tmp_path / "a.lod.h5", t, compression="none")
    assert _copy_to(tmp_path / "a.lod.h5", tmp_path / "t.bin") == t.data.nbytes > 3 * 65536
    assert (tmp_path / "t.bin").read_bytes() == t.data.tobytes()


def test_compressed_data_is_not_copied(tmp_path):
    save(tmp_path / "a.lod.h5", _corpus(), compression="gzip")
    with open_file(tmp_path / "a.lod.h5") as f:
        assert stored_copier(f.tensor()) is None


def test_where_the_kernel_cannot_copy_the_rows_are_written_from_the_map(tmp_path, monkeypatch):
    t = _corpus()
    save(tmp_path / "a.lod.h5", t, compression="none")

    def refuse(*args, **kwargs):
        raise OSError(errno.EXDEV, "cross-device")

    monkeypatch.setattr(os, "copy_file_range", refuse)
    _copy_to(tmp_path / "a.lod.h5", tmp_path / "t.bin")
    assert (tmp_path / "t.bin").read_bytes() == t.data.tobytes()


@pytest.mark.parametrize("threads", ["1", "2"])  # copied in this thread, or in a second one beside the LoD read
def test_bytes_that_do_not_match_the_recorded_digest_are_refused_and_nothing_is_published(tmp_path, monkeypatch,
                                                                                         threads):
    monkeypatch.setenv("LODTOOL_NUM_THREADS", threads)
    t = _corpus()
    save(tmp_path / "a.lod.h5", t, compression="none")
    with h5py.File(tmp_path / "a.lod.h5", "r+") as h:  # a damaged digest stands for damaged bytes
        h["tensor/data"].attrs["checksum"] = "xxh3_64:0000000000000000"
    with pytest.raises(LodChecksumError, match="a.lod.h5: tensor 'tensor' data does not match its recorded checksum"):
        unpack(tmp_path / "a.lod.h5", str(tmp_path / "c"), to="megatron")
    assert sorted(os.listdir(tmp_path)) == ["a.lod.h5"]


@pytest.mark.parametrize("threads", ["1", "2"])  # the LoD read before the copy, or while it runs
def test_an_invalid_lod_read_beside_the_copy_fails_the_unpack_and_nothing_is_published(tmp_path, monkeypatch,
                                                                                      threads):
    from lodtool.errors import LodValidationError

    monkeypatch.setenv("LODTOOL_NUM_THREADS", threads)
    save(tmp_path / "a.lod.h5", _corpus(), compression="none")
    with h5py.File(tmp_path / "a.lod.h5", "r+") as h:
        offsets = h["tensor/lod/1"]
        offsets[5] = offsets[4] - 1  # sentence 4 ends before it starts
    with pytest.raises(LodValidationError, match=r"a\.lod\.h5: tensor 'tensor': level 1: offset\[5\]"):
        unpack(tmp_path / "a.lod.h5", str(tmp_path / "c"), to="megatron")
    assert sorted(os.listdir(tmp_path)) == ["a.lod.h5"]


@pytest.mark.parametrize("kind", ["megatron", "fairseq"])
def test_unpack_of_an_uncompressed_container_gives_the_bytes_of_the_decoding_writer(tmp_path, kind):
    t = _corpus()
    save(tmp_path / "a.lod.h5", t, compression="none")
    seen = []
    unpack(tmp_path / "a.lod.h5", str(tmp_path / "c"), to=kind, level=1,
           progress=lambda done, total: seen.append((done, total)))
    write_megatron(t, str(tmp_path / "ref"), kind=kind, level=1)
    for suffix in (".bin", ".idx"):
        assert (tmp_path / f"c{suffix}").read_bytes() == (tmp_path / f"ref{suffix}").read_bytes()
    assert seen[-1] == (t.data.nbytes, t.data.nbytes) and [d for d, _ in seen] == sorted(d for d, _ in seen)
