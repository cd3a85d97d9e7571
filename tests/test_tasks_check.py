"""``lodtool.tasks`` checks: validate, inspect and verify over files."""

from __future__ import annotations

import h5py

from lodtool import tasks
from lodtool.container.reader import LodFile

from .test_container_checks import many_tensors


def test_verify_counts_the_datasets_of_many_tensors_holding_one_open_at_a_time(tmp_path, monkeypatch):
    path = str(tmp_path / "many.lod.h5")
    many_tensors(path, 300)
    open_datasets = []
    describe = LodFile.describe

    def counting(self, name):  # verify counts as it hashes, describing each tensor once
        open_datasets.append(h5py.h5f.get_obj_count(self.h5.id, h5py.h5f.OBJ_DATASET))
        return describe(self, name)

    monkeypatch.setattr(LodFile, "describe", counting)
    [report] = tasks.verify([path])
    assert report.ok and report.checked == 600
    assert len(open_datasets) >= 300 and max(open_datasets) <= 4  # not two per tensor counted so far
