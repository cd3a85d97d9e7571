"""``lodtool.tasks`` verbs on sharded folders: the shard-size floor, shared by ``pack -o DIR/`` and ``shard``."""

from __future__ import annotations

import numpy as np
import pytest

from lodtool import LoDTensor, save
from lodtool.errors import LodUsageError
from lodtool.tasks import shard


def test_shard_refuses_a_size_that_would_make_thousands_of_files(tmp_path):
    src = tmp_path / "x.lod.h5"
    data = np.random.default_rng(0).integers(0, 1 << 40, 100_000)  # about 500 KB stored
    save(str(src), LoDTensor(data, [np.arange(0, 100_001, 10)]))
    with pytest.raises(LodUsageError, match=r"a shard size of 64 B would cut .* shards, a file each"):
        shard(src, tmp_path / "s", shard_size=64)
    assert not (tmp_path / "s").exists()
    assert shard(src, tmp_path / "s", shard_size="64KB")["shards"] > 1
