"""expand and pad on files, streamed: the same result as the operator in memory, in bounded chunks.

Each property test shrinks the chunk budget (``lodtool.tasks._pipe.CHUNK_ROWS``) and the
offsets window (``lodtool.tasks._pipe.OFFSET_WINDOW``) to a few rows and entries, so the
tensors of a handful of rows are cut into many chunks and windows, and
compares the streamed output with ``sequence_expand`` / ``sequence_pad`` on the
whole tensor: data bits, dtype, LoD, level names, and the errors.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
import threading
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from lodtool import LoDTensor, load, save
from lodtool.cli.main import cli
from lodtool.errors import LodError, LodIndexError, LodShapeError, LodValidationError
from lodtool.limits import STREAM_CHUNK_BYTES
from lodtool.container.reader import LazyTensor
from lodtool.ops import sequence_expand, sequence_mask, sequence_pad
from lodtool.ops._util import row_offsets
from lodtool.tasks import _operators as pipeline
from lodtool.tasks import _pipe
from tests.strategies import lod_lengths, lod_tensors
from tests.test_ops_common import arrays, same_bits, same_tensor

STREAM_SETTINGS = settings(max_examples=60, deadline=None)


@contextlib.contextmanager
def budget(chunk_rows: int, window: int):
    """Chunks of at most ``chunk_rows`` rows, offsets read ``window`` entries at a time."""
    with mock.patch.multiple(_pipe, CHUNK_ROWS=chunk_rows, OFFSET_WINDOW=window):
        yield


def lod_only(offsets) -> LoDTensor:
    """A y of int8 zeros: only its LoD matters (expand never reads y's data)."""
    n_rows = int(offsets[-1][-1])
    return LoDTensor._trusted(np.zeros(n_rows, np.int8), [np.asarray(o, np.int64) for o in offsets])


def in_memory_expand(x, y, ref_level):
    """``sequence_expand`` on the whole tensors: the result, or the error it raises."""
    try:
        return sequence_expand(x, y, ref_level)
    except LodError as exc:
        return exc


def streamed_expand(d: Path, x, y, ref_level, **kwargs):
    save(d / "x.h5", x, name="x")
    save(d / "y.h5", y, name="y")
    out = d / "out.h5"
    try:
        result = pipeline.expand(d / "x.h5", d / "y.h5", out, ref_level=ref_level, **kwargs)
    except LodError as exc:
        assert not out.exists()
        return exc, None
    return result, load(out)


def assert_same_expand(x, y, ref_level, **kwargs):
    expected = in_memory_expand(x, y, ref_level)
    with tempfile.TemporaryDirectory() as d:
        result, got = streamed_expand(Path(d), x, y, ref_level, **kwargs)
    if isinstance(expected, LodError):
        assert type(result) is type(expected) and str(result) == str(expected)
        return
    assert same_tensor(got, expected) and got.level_names == expected.level_names
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert (result.rows, result.sequences, result.lod_level, result.dtype) == \
        (expected.shape[0], len(expected), expected.lod_level, str(expected.dtype))


# -- expand ------------------------------------------------------------------------------------------------
@st.composite
def expand_cases(draw):
    """x (0, 1 or, to be refused, 2 levels) and a y whose ref level has one sequence per x sequence or row."""
    table = draw(lod_lengths(1, 3, max_seqs=8, max_len=6))
    y = lod_only(LoDTensor(np.zeros(sum(table[-1])), recursive_sequence_lengths=table).offsets)
    ref_level = draw(st.integers(-1, len(table) - 1))
    count = y.num_sequences(ref_level)
    kind = draw(st.sampled_from(["rows", "sequences", "sequences", "two levels"]))
    if kind == "rows":
        x = LoDTensor(draw(arrays(count)))
    else:
        lens = draw(st.lists(st.integers(0, 5), min_size=count, max_size=count))
        lod = [lens]
        if kind == "two levels":
            lod = [[1] * count, lens]
        names = draw(st.sampled_from([None, [f"level{k}" for k in range(len(lod))]]))
        x = LoDTensor(draw(arrays(sum(lens))), recursive_sequence_lengths=lod, level_names=names)
    return x, y, ref_level


@STREAM_SETTINGS
@given(expand_cases(), st.integers(1, 7), st.integers(1, 4))
def test_streamed_expand_is_the_operator(case, chunk_rows, window):
    x, y, ref_level = case
    with budget(chunk_rows, window):
        assert_same_expand(x, y, ref_level)


@pytest.mark.parametrize("x,y_offsets,ref_level", [
    # the seed example: x's sequences by y's level 0
    (LoDTensor(np.array([[1.1], [2.2], [3.3], [4.4]]), [[0, 1, 4]]), [[0, 1, 4], [0, 1, 3, 4, 6]], 0),
    # a middle level of a 3-level y
    (LoDTensor(np.arange(6.0), [[0, 2, 3, 6]]), [[0, 2, 3], [0, 1, 3, 5], [0, 1, 2, 3, 4, 6]], 1),
    # rows repeated 0 times, and x with 0 rows (every sequence empty)
    (np.arange(4, dtype=np.int16), [[0, 0, 3, 3, 5]], -1),
    (LoDTensor(np.zeros((0, 2), np.float32), [[0, 0, 0]]), [[0, 2, 3]], -1),
    # every row repeated 0 times: an empty output without a LoD
    (np.arange(3.0), [[0, 0, 0, 0]], -1),
    # every sequence repeated 0 times: zero sequences, the offsets [0]
    (LoDTensor(np.zeros(4), [[0, 1, 4]]), [[0, 0, 0]], -1),
])
@pytest.mark.parametrize("chunk_rows", [1, 2, 1 << 22])
def test_streamed_expand_edge_cases(x, y_offsets, ref_level, chunk_rows):
    x = x if isinstance(x, LoDTensor) else LoDTensor(x)
    with budget(chunk_rows, 2):
        assert_same_expand(x, lod_only(y_offsets), ref_level)


@pytest.mark.parametrize("x,y,ref_level,error", [
    (LoDTensor(np.zeros(4), [[0, 2, 4], [0, 1, 2, 3, 4]]), lod_only([[0, 1, 2]]), -1, LodShapeError),
    (LoDTensor(np.zeros(2)), LoDTensor(np.zeros(2)), -1, LodShapeError),
    (LoDTensor(np.zeros(2)), lod_only([[0, 1, 2], [0, 2, 6]]), -2, LodIndexError),
    (LoDTensor(np.zeros(3)), lod_only([[0, 1, 3]]), -1, LodShapeError),
    (LoDTensor(np.zeros(4), [[0, 1, 4]]), lod_only([[0, 1, 1, 2]]), -1, LodShapeError),
])
def test_streamed_expand_errors_are_the_operators(x, y, ref_level, error):
    with budget(2, 2):
        assert_same_expand(x, y, ref_level)
    with tempfile.TemporaryDirectory() as d:
        assert isinstance(streamed_expand(Path(d), x, y, ref_level)[0], error)


def test_expand_reads_and_writes_bounded_chunks(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    lens = rng.integers(0, 6, 300)
    reps = rng.integers(0, 4, 300)
    reps[7], lens[7] = 40, 3  # one sequence copied 40 times: 120 rows, written a few copies at a time
    reps[9], lens[9] = 2, 12  # two copies of 12 rows: written one copy at a time
    x = LoDTensor(rng.standard_normal((int(lens.sum()), 2)), recursive_sequence_lengths=[lens.tolist()])
    y = lod_only([np.concatenate([[0], np.cumsum(reps)])])
    save(tmp_path / "x.h5", x)
    save(tmp_path / "y.h5", y)
    runs = []  # per read: [rows read, rows of each chunk written from them...]
    read_rows, expand_by = LazyTensor.read_rows, pipeline.expand_by

    def recorded_chunk(*args, **kwargs):  # as each chunk is made (it is written on another thread, later)
        chunk = expand_by(*args, **kwargs)
        runs[-1].append(chunk.n_rows)
        return chunk

    monkeypatch.setattr(LazyTensor, "read_rows", lambda self, a, b: runs.append([b - a]) or read_rows(self, a, b))
    monkeypatch.setattr(pipeline, "expand_by", recorded_chunk)
    with budget(16, 64):
        pipeline.expand(tmp_path / "x.h5", tmp_path / "y.h5", tmp_path / "out.h5")
    assert same_tensor(load(tmp_path / "out.h5"), sequence_expand(x, y))
    assert len(runs) > 10 and sum(sum(written) for _, *written in runs) == int((lens * reps).sum())
    for read, *written in runs:  # the rows read and written stay within the budget, or one copy is written at a time
        assert all(read + w <= 16 for w in written) or written == [read] * len(written), (read, written)
    assert [12, 12, 12] in runs and max(len(r) for r in runs) > 4  # both long sequences were split


def test_expand_same_file_for_x_and_y(tmp_path):
    x = LoDTensor(np.arange(5.0), [[0, 2, 5]])
    y = lod_only([[0, 1, 3]])
    save(tmp_path / "xy.h5", {"x": x, "y": y})
    with budget(1, 1):
        pipeline.expand(f"{tmp_path / 'xy.h5'}", tmp_path / "xy.h5", tmp_path / "out.h5", x_name="x",
                             y_name="y")
    assert same_tensor(load(tmp_path / "out.h5"), sequence_expand(x, y))


def test_expand_refuses_an_invalid_y_before_writing(tmp_path):
    save(tmp_path / "x.h5", LoDTensor(np.zeros(2)))
    save(tmp_path / "y.h5", LoDTensor(np.zeros(3), [[0, 1, 3]]))
    import h5py

    with h5py.File(tmp_path / "y.h5", "r+") as f:
        f["tensor/lod/0"][1] = 5  # decreasing offsets
    with pytest.raises(LodValidationError, match="y.h5: tensor 'tensor'"):
        pipeline.expand(tmp_path / "x.h5", tmp_path / "y.h5", tmp_path / "out.h5")
    assert not (tmp_path / "out.h5").exists()


# -- pad -------------------------------------------------------------------------------------------------------
def in_memory_pad(x, pad_value, maxlen, level):
    try:
        padded, lengths = sequence_pad(x, pad_value=pad_value, maxlen=maxlen, level=level)
    except LodError as exc:
        return exc
    return {"padded": padded, "lengths": np.asarray(lengths), "mask": sequence_mask(lengths, padded.shape[1])}


def assert_same_pad(x, pad_value=0, maxlen=None, level=-1, *, stream=None):
    expected = in_memory_pad(x, pad_value, maxlen, level)
    with tempfile.TemporaryDirectory() as d:
        save(Path(d) / "x.h5", x)
        out = Path(d) / "out.npz" if stream is None else stream
        try:
            info = pipeline.pad(Path(d) / "x.h5", out, pad_value=pad_value, maxlen=maxlen, level=level)
        except LodError as exc:
            assert type(exc) is type(expected) and str(exc) == str(expected)
            assert not (out.exists() if stream is None else stream.getvalue())  # nothing written
            return
        assert not isinstance(expected, LodError), expected
        with np.load(io.BytesIO(out.read_bytes() if stream is None else stream.getvalue())) as got:
            assert got.files == ["padded", "lengths", "mask"]
            for key, want in expected.items():
                assert same_bits(got[key], want), key
    padded = expected["padded"]
    assert info == {"output": str(out) if stream is None else "-", "shape": list(padded.shape),
                    "sequences": padded.shape[0], "maxlen": padded.shape[1]}


@STREAM_SETTINGS
@given(lod_tensors(max_levels=3, allow_empty=True), st.data())
def test_streamed_pad_is_the_operator(x, data):
    level = data.draw(st.integers(-x.lod_level, x.lod_level - 1))
    longest = int(np.diff(row_offsets(x.offsets, level % x.lod_level)).max())
    maxlen = data.draw(st.sampled_from([None, longest, longest + 2, longest - 1]))  # -1 is refused too
    pad_value = data.draw(st.sampled_from([0, 7, -1, 0.5]))  # -1 and 0.5 do not fit every dtype
    with budget(data.draw(st.integers(1, 7)), data.draw(st.integers(1, 4))):
        assert_same_pad(x, pad_value, maxlen, level)


@pytest.mark.parametrize("level", [0, 1, -1])
@pytest.mark.parametrize("chunk_rows", [1, 3, 1 << 22])
def test_streamed_pad_levels_and_empty_parts(level, chunk_rows):
    # level 0 holds a sequence with no sentences; level 1 holds empty sentences
    x = LoDTensor(np.arange(12.0).reshape(6, 2), recursive_sequence_lengths=[[2, 0, 3], [2, 0, 1, 3, 0]])
    with budget(chunk_rows, 2):
        assert_same_pad(x, pad_value=-1, level=level)
        assert_same_pad(x, pad_value=[5, 6], maxlen=6, level=level)


def test_streamed_pad_errors_are_the_operators():
    x = LoDTensor(np.arange(5, dtype=np.uint8), [[0, 2, 5]])
    with budget(2, 2):
        assert_same_pad(LoDTensor(np.arange(3)))  # no LoD
        assert_same_pad(x, level=1)  # no such level
        assert_same_pad(x, maxlen=2)  # shorter than the longest
        assert_same_pad(x, pad_value=-1)  # uint8 cannot hold it
        assert_same_pad(x, pad_value=-1, stream=io.BytesIO())  # and a stream gets nothing


def test_all_sequences_empty_pads_to_zero_width():
    with budget(1, 1):
        assert_same_pad(LoDTensor(np.zeros((0, 3), np.float32), [[0, 0, 0]]))


class Pipe(io.RawIOBase):
    """A write-only stream that cannot seek or tell, like stdout into a pipe."""

    def __init__(self):
        self.buffer = bytearray()

    def writable(self):
        return True

    def write(self, b):
        self.buffer += bytes(b)
        return len(memoryview(b))

    def getvalue(self):
        return bytes(self.buffer)


@pytest.mark.parametrize("stream", [io.BytesIO, Pipe])
def test_pad_to_a_stream(stream):
    x = LoDTensor(np.arange(20, dtype=np.int32), recursive_sequence_lengths=[[3, 0, 9, 8]])
    with budget(4, 2):
        assert_same_pad(x, pad_value=-2, stream=stream())


def test_pad_reads_and_writes_bounded_chunks(tmp_path, monkeypatch):
    rng = np.random.default_rng(1)
    x = LoDTensor(rng.standard_normal(400).astype(np.float32), recursive_sequence_lengths=[[4] * 100])
    reads = []
    read_rows = LazyTensor.read_rows
    monkeypatch.setattr(LazyTensor, "read_rows", lambda self, a, b: reads.append(b - a) or read_rows(self, a, b))
    with budget(32, 1000):
        assert_same_pad(x)
    assert len(reads) == 25 and max(reads) == 16  # 4 sequences: 16 rows read, 16 padded


# -- chunk budget ---------------------------------------------------------------------------------------------
def test_chunk_rows_follow_the_row_size_and_the_memory_limit():
    assert _pipe.chunk_rows((), np.dtype(np.float32), 1 << 30) == _pipe.CHUNK_ROWS
    assert _pipe.chunk_rows((4096,), np.dtype(np.float32), 1 << 30) == STREAM_CHUNK_BYTES // (4096 * 4)
    assert _pipe.chunk_rows((), np.dtype(np.float64), 1 << 20) == (1 << 20) // 8 // 8
    assert _pipe.chunk_rows((0,), np.dtype(np.float64), 1 << 20) == (1 << 20) // 8  # empty rows count 1 byte
    assert _pipe.chunk_rows((1 << 20,), np.dtype(np.float64), 1 << 20) == 1


# -- the CLI, on files larger than --max-memory -------------------------------------------------------------
@pytest.fixture
def big_pair(tmp_path):
    """x: 3,000 sequences of float64 rows (about 2.4 MB of data); y: a LoD whose level 0 copies each 0..2 times."""
    rng = np.random.default_rng(2)
    lens = rng.integers(0, 200, 3000)
    reps = rng.integers(0, 3, 3000)
    x = LoDTensor(rng.standard_normal(int(lens.sum())), recursive_sequence_lengths=[lens.tolist()])
    y = lod_only([np.concatenate([[0], np.cumsum(reps)]), np.arange(int(reps.sum()) + 1)])
    save(tmp_path / "x.lod.h5", x, compression="none")
    save(tmp_path / "y.lod.h5", y)
    assert os.path.getsize(tmp_path / "x.lod.h5") > 2 << 20
    return tmp_path / "x.lod.h5", tmp_path / "y.lod.h5", x, y


def run_cli(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_cli_expand_out_of_core(big_pair, tmp_path):
    xp, yp, x, y = big_pair
    out = tmp_path / "out.lod.h5"
    result = run_cli("expand", xp, yp, "--ref-level", "0", "-o", out, "--max-memory", "1M", "--json")
    assert result.exit_code == 0, result.output
    assert same_tensor(load(out), sequence_expand(x, y, ref_level=0))
    with pytest.raises(LodError, match="memory limit"):  # the whole input does not fit under the limit
        load(xp, max_memory=1 << 20)


def test_cli_pad_out_of_core(big_pair, tmp_path):
    xp, _, x, _ = big_pair
    out = tmp_path / "out.npz"
    result = run_cli("pad", xp, "-o", out, "--pad-value", "-1", "--max-memory", "1M")
    assert result.exit_code == 0, result.output
    padded, lengths = sequence_pad(x, pad_value=-1.0)
    with np.load(out) as got:
        assert same_bits(got["padded"], padded) and same_bits(got["lengths"], lengths)
        assert same_bits(got["mask"], sequence_mask(lengths, padded.shape[1]))
    result = CliRunner().invoke(cli, ["pad", str(xp), "-o", "-", "--max-memory", "1M"])
    assert result.exit_code == 0, result.stderr
    with np.load(io.BytesIO(result.stdout_bytes)) as got:
        assert got.files == ["padded", "lengths", "mask"] and same_bits(got["padded"], sequence_pad(x)[0])


@pytest.mark.parametrize("op", ["pool", "expand"])
def test_a_failed_write_behind_stops_the_stream_and_leaves_no_output(tmp_path, monkeypatch, op):
    from lodtool.container.writer import TensorWriter

    x = LoDTensor(np.arange(400.0), recursive_sequence_lengths=[[4] * 100])
    save(tmp_path / "x.h5", x)
    save(tmp_path / "y.h5", lod_only([np.arange(101)]))
    append, calls = TensorWriter.append, []

    def failing_append(self, chunk):  # the third write fails, on the writer's thread
        calls.append(chunk.n_rows)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return append(self, chunk)

    monkeypatch.setattr(TensorWriter, "append", failing_append)
    out = tmp_path / "out.h5"
    with budget(8, 4), pytest.raises(OSError, match="No space left"):
        if op == "pool":
            pipeline.pool(tmp_path / "x.h5", out, pool_type="sum")
        else:
            pipeline.expand(tmp_path / "x.h5", tmp_path / "y.h5", out)
    assert len(calls) == 3  # no write after the failed one
    assert sorted(os.listdir(tmp_path)) == ["x.h5", "y.h5"]


def test_an_error_while_reading_waits_for_the_writes_in_flight(tmp_path, monkeypatch):
    x = LoDTensor(np.arange(400.0), recursive_sequence_lengths=[[4] * 100])
    save(tmp_path / "x.h5", x)
    slice_level, seen = LazyTensor.slice_level, []

    def failing_read(self, level, a, b):
        seen.append(a)
        if len(seen) == 5:
            raise LodValidationError("boom")
        return slice_level(self, level, a, b)

    monkeypatch.setattr(LazyTensor, "slice_level", failing_read)
    with budget(8, 4), pytest.raises(LodValidationError, match="boom"):
        pipeline.reverse(tmp_path / "x.h5", tmp_path / "out.h5")
    assert sorted(os.listdir(tmp_path)) == ["x.h5"]
    assert not [t for t in threading.enumerate() if t.name == "lodtool-read-ahead"]  # the pipe's second thread


# -- outputs and schedulers the command cannot use ------------------------------------------------------------
def test_a_folder_output_without_a_scheduler_says_once_what_is_wanted(tmp_path):
    save(tmp_path / "x.lod.h5", LoDTensor(np.arange(6.0), [[0, 2, 6]]))
    for made in (False, True):  # the same message before and after the folder exists
        if made:
            (tmp_path / "pooled").mkdir()
        result = run_cli("pool", tmp_path / "x.lod.h5", "-o", f"{tmp_path / 'pooled'}/")
        assert result.exit_code != 0 and "Traceback" not in result.output
        assert "is a folder" in result.output and "--scheduler" in result.output and "file name" in result.output
    assert os.listdir(tmp_path / "pooled") == []


def test_a_scheduler_without_dask_names_the_extra(tmp_path, monkeypatch):
    import sys

    save(tmp_path / "x.lod.h5", LoDTensor(np.arange(6.0), [[0, 2, 6]]))
    for module in ("dask", "distributed"):
        monkeypatch.setitem(sys.modules, module, None)  # as if not installed: importing it raises ImportError
    result = run_cli("pool", tmp_path / "x.lod.h5", "-o", tmp_path / "p.lod.h5", "--scheduler", "threads")
    assert result.exit_code != 0 and "internal error" not in result.output
    assert "pip install 'lodtool[dask]'" in result.output and not (tmp_path / "p.lod.h5").exists()


def test_a_streamed_operator_reports_the_rows_it_has_read(tmp_path):
    from lodtool import LoDTensor, save

    x = LoDTensor(np.arange(1000.0), recursive_sequence_lengths=[[10] * 100])
    save(tmp_path / "x.h5", x)
    heard = []
    with budget(64, 64):
        pipeline.pool(tmp_path / "x.h5", tmp_path / "out.h5", progress=lambda done, total: heard.append((done, total)))
    assert len(heard) > 3 and heard[-1] == (1000, 1000)
    assert all(a[0] <= b[0] for a, b in zip(heard, heard[1:])) and {t for _, t in heard} == {1000}
