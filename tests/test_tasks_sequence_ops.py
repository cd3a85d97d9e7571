"""lodtool.tasks' concat, seq_slice, erase, enumerate, reshape and lod_reset: streamed in tiny chunks, they give
exactly the in-memory operators' results."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lodtool import LoDTensor, load, save
from lodtool.ops import (
    lod_append,
    lod_reset,
    sequence_concat,
    sequence_enumerate,
    sequence_erase,
    sequence_reshape,
    sequence_slice,
)
from lodtool.tasks import _operators as files
from tests.test_ops_common import INTS, same_tensor, tensors


@pytest.fixture
def tiny_chunks(monkeypatch):
    """Chunks of at most 3 rows and offsets windows of 2, so every case spans many chunks."""
    monkeypatch.setattr(files, "chunk_rows", lambda *a: 3)
    monkeypatch.setattr(files, "offset_window", lambda *a: 2)


STREAM = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@STREAM
@given(tensors(dtypes=INTS, element_shapes=[(), (1,)], values="small"), st.lists(st.integers(-5, 60), max_size=6),
       st.integers(2, 4))
def test_streamed_erase_and_enumerate(tmp_path_factory, tiny_chunks, x, tokens, win):
    d = tmp_path_factory.mktemp("s")
    save(d / "x.h5", x)
    files.erase(str(d / "x.h5"), str(d / "e.h5"), tokens=tokens)
    assert same_tensor(load(d / "e.h5"), sequence_erase(x, tokens))
    files.enumerate(str(d / "x.h5"), str(d / "n.h5"), win_size=win, pad_value=1)
    assert same_tensor(load(d / "n.h5"), sequence_enumerate(x, win, 1))


@STREAM
@given(tensors(), st.data())
def test_streamed_seq_slice_and_reshape(tmp_path_factory, tiny_chunks, x, data):
    d = tmp_path_factory.mktemp("s")
    save(d / "x.h5", x)
    lens = x.lengths(-1)
    offset = [data.draw(st.integers(0, int(n))) for n in lens]
    length = [data.draw(st.integers(0, int(n) - o)) for n, o in zip(lens, offset)]
    files.seq_slice(str(d / "x.h5"), str(d / "s.h5"), offset=offset, length=length)
    assert same_tensor(load(d / "s.h5"), sequence_slice(x, offset, length))
    files.seq_slice(str(d / "x.h5"), str(d / "c.h5"), offset=1, length=2, clip=True)
    clipped_off = np.minimum(1, lens)
    assert same_tensor(load(d / "c.h5"), sequence_slice(x, clipped_off, np.minimum(2, lens - clipped_off)))
    files.reshape(str(d / "x.h5"), str(d / "r.h5"), new_dim=1)
    assert same_tensor(load(d / "r.h5"), sequence_reshape(x, 1))


@STREAM
@given(tensors(max_levels=2), st.data())
def test_streamed_concat(tmp_path_factory, tiny_chunks, x, data):
    d = tmp_path_factory.mktemp("s")
    y = LoDTensor(x.data[::-1].copy(), x.offsets)  # the same LoD, other rows
    save(d / "x.h5", x)
    save(d / "y.h5", y)
    files.concat([str(d / "x.h5"), str(d / "y.h5"), str(d / "x.h5")], str(d / "c.h5"))
    assert same_tensor(load(d / "c.h5"), sequence_concat([x, y, x]))


@STREAM
@given(tensors(max_levels=2), st.lists(st.integers(0, 3), min_size=1, max_size=6))
def test_streamed_lod_reset(tmp_path_factory, tiny_chunks, x, lengths):
    d = tmp_path_factory.mktemp("s")
    save(d / "x.h5", x)
    lengths[-1] += max(0, x.n_rows - sum(lengths))
    target = np.concatenate([[0], np.cumsum(lengths)])
    if target[-1] == x.n_rows:
        files.lod_reset(str(d / "x.h5"), str(d / "r.h5"), target_lod=target)
        assert same_tensor(load(d / "r.h5"), lod_reset(x, target_lod=target))
    per_row = np.arange(x.n_rows + 1)
    if int(x.offsets[-1][-1]) == x.n_rows and x.n_rows == len(x.offsets[-1]) - 1:
        files.lod_reset(str(d / "x.h5"), str(d / "a.h5"), target_lod=per_row, append=True)
        assert same_tensor(load(d / "a.h5"), lod_append(x, per_row))


def test_errors_name_the_file_and_the_global_sequence(tmp_path, tiny_chunks):
    from lodtool.errors import LodDtypeError, LodIndexError, LodShapeError, LodUsageError

    lens = [2] * 7 + [3] + [2] * 4
    x = LoDTensor(np.arange(sum(lens), dtype=np.int32), recursive_sequence_lengths=[lens])
    save(tmp_path / "x.h5", x)
    src, out = str(tmp_path / "x.h5"), str(tmp_path / "out.h5")
    with pytest.raises(LodShapeError, match=r"x\.h5: tensor 'tensor': sequence_reshape: sequence 7 of the last"):
        files.reshape(src, out, new_dim=2)
    with pytest.raises(LodIndexError, match=r"x\.h5: tensor 'tensor': sequence_slice: sequence 7 has 3 rows"):
        files.seq_slice(src, out, offset=[0] * 7 + [2] + [0] * 4, length=2)
    with pytest.raises(LodIndexError, match=r"length\[9\]=-1 is negative"):
        files.seq_slice(src, out, offset=0, length=[1] * 9 + [-1, 1, 1], clip=True)
    with pytest.raises(LodShapeError, match=r"x\.h5: tensor 'tensor': sequence_slice: offset has 2 entries"):
        files.seq_slice(src, out, offset=[0, 0], length=1)
    save(tmp_path / "f.h5", LoDTensor(np.zeros(4, np.float32), [[0, 4]]))
    with pytest.raises(LodDtypeError, match=r"f\.h5: tensor 'tensor': sequence_erase: x must hold integer"):
        files.erase(str(tmp_path / "f.h5"), out, tokens=[1])
    with pytest.raises(LodUsageError, match=r"x\.h5: tensor 'tensor': sequence_enumerate: win_size"):
        files.enumerate(src, out, win_size=1)
    assert not (tmp_path / "out.h5").exists()
