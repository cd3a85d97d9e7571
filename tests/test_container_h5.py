"""lodtool.container._h5: reads through libhdf5, the inflation bound of compressed chunks, a file's identity."""

from __future__ import annotations

import os

import h5py
import numpy as np

from lodtool.container import _h5


def test_many_short_reads_bound_every_chunk_with_one_pass_over_the_index(tmp_path):
    path = tmp_path / "x.h5"
    data = np.random.default_rng(0).integers(0, 4, 300 * 1024).astype(np.int64)
    with h5py.File(path, "w") as f:
        f.create_dataset("d", data=data, chunks=(1024,), compression="gzip", shuffle=True)
    with h5py.File(path, "r") as f:
        ds = f["d"]
        limit = 1 << 20  # below what the whole file could inflate to: chunks are bounded, not waved through
        for c in range(0, 300, 2):  # one chunk a read, as random branches and batches read
            got = _h5.read_rows(ds, c * 1024 + 5, c * 1024 + 9, limit=limit)
            assert got.tolist() == data[c * 1024 + 5:c * 1024 + 9].tolist()
        info = ds.__dict__["_lodtool_inflation"]
        assert info.needs_look_below > limit
        # after as many lookups one by one as a long read would take, the index was read once for every chunk
        assert info.scanned and info.scanned_bound <= limit and len(info.bounds) == _h5._SCAN_FROM_CHUNKS


def test_a_file_identity_is_the_open_file_even_when_its_path_is_replaced(tmp_path):
    path, other = tmp_path / "a.h5", tmp_path / "b.h5"
    for p in (path, other):
        with h5py.File(p, "w") as f:
            f["d"] = np.arange(3)
    with h5py.File(path, "r") as f:
        before = _h5.file_identity(f)
        os.replace(other, path)
        assert _h5.file_identity(f) == before  # the handle still reads the file it opened
        with h5py.File(path, "r") as g:
            assert _h5.file_identity(g) != before
    with h5py.File(tmp_path / "m.h5", "w", driver="core", backing_store=False) as f:
        assert _h5.file_identity(f) is None  # not a file on disk
