"""``lodtool pack``: what a user sees for overflowing floats, appending to folders, tiny shards and a full disk."""

from __future__ import annotations

import os
import subprocess

import pytest
from click.testing import CliRunner

from lodtool.cli.main import cli
from lodtool.container.shards import read_manifest


def run(*args, input=None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=input)


def test_a_float_beyond_float64_is_refused_with_its_place(tmp_path):
    src = tmp_path / "f.jsonl"
    src.write_text("[0.5, 1]\n[2, 1e400]\n")
    result = run("pack", src, "-o", tmp_path / "f.lod.h5")
    assert result.exit_code == 1 and len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith(f"lodtool: error: {src}:2:5: 1e400 is beyond float64's range")
    assert "write Infinity" in result.stderr and not (tmp_path / "f.lod.h5").exists()
    src.write_text("[0.5, 1]\n[2, Infinity]\n")  # an infinite value, written as one, still packs
    assert run("pack", src, "-o", tmp_path / "f.lod.h5").exit_code == 0


def test_appending_to_a_folder_takes_its_level_names_and_dtype(tmp_path):
    src = tmp_path / "a.jsonl"
    src.write_text("[[1, 2], [3]]\n[[4]]\n")
    folder = f"{tmp_path / 'shards'}/"
    assert run("pack", src, "-o", folder, "--level-names", "doc,sent", "--dtype", "int32").exit_code == 0
    result = run("pack", src, "-o", folder, "--append")
    assert result.exit_code == 0, result.output
    manifest = read_manifest(folder)
    assert len(manifest.shards) == 2 and manifest.tensors["tensor"].level_names == ("doc", "sent")
    assert str(manifest.tensors["tensor"].dtype) == "int32"
    # names given that differ are still refused, as for a file
    assert run("pack", src, "-o", folder, "--append", "--level-names", "a,b").exit_code != 0


def test_a_shard_size_that_makes_thousands_of_files_is_refused_before_anything_is_written(tmp_path):
    src = tmp_path / "docs.jsonl"
    src.write_text("[[1, 2, 3], [4, 5]]\n" * 3000)  # 60 KB: 1 KB shards would be about 60 files, 16 B ones 3,750
    result = run("pack", src, "-o", f"{tmp_path / 'tiny'}/", "--shard-size", "16B")
    assert result.exit_code == 2 and "would cut" in result.stderr and "3,750 shards" in result.stderr
    assert "give a shard size of at least" in result.stderr and not (tmp_path / "tiny").exists()
    assert run("pack", src, "-o", f"{tmp_path / 'fine'}/", "--shard-size", "1KB").exit_code == 0


def _small_filesystem(path) -> bool:
    """Mount a 1 MiB tmpfs at ``path`` (root only); whether it worked."""
    os.makedirs(path, exist_ok=True)
    if os.geteuid() != 0:
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(path)],
                          capture_output=True).returncode == 0


def test_a_full_disk_says_so_and_names_the_output(tmp_path):
    disk = tmp_path / "disk"
    if not _small_filesystem(disk):
        pytest.skip("needs root to mount a small tmpfs")
    try:
        src = tmp_path / "ids.jsonl"
        src.write_text("".join(f"[{', '.join(str(i * 7919 + k) for k in range(64))}]\n" for i in range(20000)))
        out = disk / "ids.lod.h5"
        result = run("pack", src, "-o", out, "--compression", "none")
        assert result.exit_code == 1 and len(result.stderr.splitlines()) == 1
        assert result.stderr == f"lodtool: error: {out}: no space left on device\n"
        assert os.listdir(disk) == []
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)


# -- token datasets of LLM training, read in place -------------------------------------------------------
def _token_dataset(tmp_path):
    import numpy as np

    from lodtool import LoDTensor
    from lodtool.io.megatron import write_megatron

    t = LoDTensor(np.array([5, 6, 7, 8], np.uint16), [[0, 1, 3], [0, 2, 2, 4]])
    write_megatron(t, str(tmp_path / "corpus"))
    return t


@pytest.mark.parametrize("given", ["corpus", "corpus.idx", "corpus.bin"])
def test_pack_takes_a_megatron_prefix_or_either_file(tmp_path, given):
    from lodtool import load

    t = _token_dataset(tmp_path)
    result = run("pack", tmp_path / given, "-o", tmp_path / "c.lod.h5")
    assert result.exit_code == 0, result.output
    back = load(str(tmp_path / "c.lod.h5"))
    assert back.lod == t.lod and back.dtype == t.dtype and back.level_names == ("document", "sequence")


def test_pack_of_a_dolma_array_takes_token_dtype_and_eos_id(tmp_path):
    import numpy as np

    from lodtool import load

    np.array([5, 6, 0, 7, 0, 9], np.uint32).tofile(tmp_path / "raw.npy")
    result = run("pack", tmp_path / "raw.npy", "-o", tmp_path / "r.lod.h5")
    assert result.exit_code == 2 and "with no raw.csv.gz beside it; give --eos-id" in result.stderr
    result = run("pack", tmp_path / "raw.npy", "--eos-id", "0", "-o", tmp_path / "r.lod.h5")
    assert result.exit_code == 2 and "records no dtype; give --token-dtype" in result.stderr
    assert not (tmp_path / "r.lod.h5").exists()
    result = run("pack", tmp_path / "raw.npy", "--eos-id", "0", "--token-dtype", "uint32", "-o", tmp_path / "r.lod.h5")
    assert result.exit_code == 0, result.output
    assert load(str(tmp_path / "r.lod.h5")).lod == [[0, 3, 5, 6]]


def test_pack_of_a_fairseq_fork_code_takes_token_dtype(tmp_path):
    import numpy as np

    from lodtool import LoDTensor, load
    from lodtool.io.megatron import write_megatron

    write_megatron(LoDTensor(np.array([1, 2, 3], np.uint32), [[0, 1, 3]]), str(tmp_path / "f"), kind="fairseq")
    result = run("pack", tmp_path / "f", "-o", tmp_path / "f.lod.h5")
    assert result.exit_code == 1 and "dtype code 9 means uint32 depending on which fork" in result.stderr
    assert "--token-dtype" in result.stderr
    assert run("pack", tmp_path / "f", "--token-dtype", "uint32", "-o", tmp_path / "f.lod.h5").exit_code == 0
    assert load(str(tmp_path / "f.lod.h5")).dtype == np.uint32


def test_token_options_are_refused_for_other_inputs(tmp_path):
    (tmp_path / "a.json").write_text("[[1]]")
    result = run("pack", tmp_path / "a.json", "--token-dtype", "uint16", "-o", tmp_path / "a.lod.h5")
    assert result.exit_code == 2 and "--token-dtype applies to megatron, fairseq, datatrove, dolma inputs, not " \
                                      "json" in result.stderr
    result = run("pack", tmp_path / "a.json", "--token-dtype", "uint16", "-o", str(tmp_path / "d") + "/")
    assert result.exit_code == 2 and "--token-dtype applies to megatron" in result.stderr
    assert not (tmp_path / "d").exists()
