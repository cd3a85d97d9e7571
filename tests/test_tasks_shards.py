"""``lodtool.tasks`` verbs on sharded folders: the shard-size floor, shared by ``pack -o DIR/`` and ``shard``."""

from __future__ import annotations

import numpy as np
import pytest

from lodtool import LoDTensor, load, save
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


def test_replacing_a_sharded_folder_is_refused_in_the_library_words_and_the_command_says_its_flags(tmp_path):
    from click.testing import CliRunner

    from lodtool.cli.main import cli
    from lodtool.errors import LodExistsError

    src = tmp_path / "x.lod.h5"
    save(str(src), LoDTensor(np.arange(10), [[0, 4, 10]]))
    shard(src, tmp_path / "s", shard_size="64KB")
    with pytest.raises(LodExistsError, match=r"pass overwrite=True to replace it, or append=True to add shards"):
        shard(src, tmp_path / "s", shard_size="64KB")
    result = CliRunner().invoke(cli, ["shard", str(src), "-o", str(tmp_path / "s"), "--shard-size", "64KB"])
    assert result.exit_code != 0 and "=True" not in result.output
    assert "add --overwrite to replace it" in result.output


@pytest.mark.parametrize("compression, chunk_bytes", [("none", 1 << 20), (None, 1 << 16)])
def test_a_sharded_pack_of_a_token_dataset_takes_the_chunks_pack_takes(tmp_path, compression, chunk_bytes):
    import h5py

    from lodtool.container.shards import read_manifest
    from lodtool.io.megatron import write_megatron
    from lodtool.tasks import pack_sharded

    tensor = LoDTensor(np.arange(1_200_000, dtype=np.int32), [[0, 2, 4], [0, 10, 600_000, 600_010, 1_200_000]])
    src = str(tmp_path / "corpus")
    write_megatron(tensor, src)
    folder = str(tmp_path / "out")
    pack_sharded([src], folder, shard_size="2MB", compression=compression)
    shards = read_manifest(folder).shards
    assert len(shards) == 2
    for s in shards:
        with h5py.File(f"{folder}/{s.file}", "r") as f:
            assert f["tensor/data"].chunks == (chunk_bytes // 4,)
    assert load(folder).data.tolist() == list(range(1_200_000))
