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
