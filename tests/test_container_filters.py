"""Container compression filters: options, argument errors, missing plugins."""

from __future__ import annotations

import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

from lodtool import LoDTensor
from lodtool.container import filters, load, open_file, save, verify_file
from lodtool.errors import LodUsageError

from .container_helpers import ARTICLES, ROOT, articles, path, raises_same, same, small_chunks, tmpfile  # noqa: F401


# -- compression ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("compression,level,filter_name", [
    (None, None, "gzip"), ("deflate", 3, "gzip"), ("lzf", None, "lzf"), ("gzip", 1, "gzip"), ("gzip", None, "gzip"),
    ("none", None, None),
    ("zstd", 5, "zstd"), ("blosc", None, "blosc"), ("lz4", None, "lz4")])
def test_compression_options(path, compression, level, filter_name):
    pytest.importorskip("hdf5plugin")
    t = LoDTensor(np.tile(np.arange(1000), 20), recursive_sequence_lengths=[[10000, 10000]])
    save(path, t, compression=compression, compression_level=level)
    assert load(path).equals(t)
    with open_file(path) as f:
        x = f.tensor()
        assert x.compression == (compression or filters.DEFAULT_COMPRESSION)
        assert x.storage_size < x.nbytes or compression == "none"
        assert filters.describe(f.h5["tensor/data"]) == (filter_name or "none")
        assert f.h5["tensor/data"].fletcher32
        lod_filter = filters.describe(f.h5["tensor/lod/0"])
        assert lod_filter in ("lzf", "gzip", "none")  # offsets never need a plugin
    assert verify_file(path) == []


def test_compression_argument_errors(path):
    with pytest.raises(LodUsageError, match="unknown compression"):
        save(path, articles(), compression="brotli")
    with pytest.raises(LodUsageError, match="takes no level"):
        save(path, articles(), compression="lzf", compression_level=3)
    with pytest.raises(LodUsageError, match="0..9"):
        save(path, articles(), compression="gzip", compression_level=12)
    save(path, articles(), fletcher32=False)
    with h5py.File(path) as f:
        assert not f["tensor/data"].fletcher32


def test_missing_plugin_is_a_clear_error(path):
    pytest.importorskip("hdf5plugin")
    save(path, articles(), compression="zstd")
    code = ("import sys; sys.modules['hdf5plugin'] = None\n"
            "from lodtool.container import load, inspect_file\n"
            "from lodtool.errors import LodFormatError\n"
            f"info = inspect_file({path!r}); assert info['tensors'][0]['compression'] == 'zstd'\n"
            "try:\n"
            f"    load({path!r})\n"
            "except LodFormatError as e:\n"
            "    print(e)\n"
            "from lodtool.container import save, LodWriter\n"
            "from lodtool.errors import LodUsageError\n"
            "try:\n"
            f"    LodWriter({path!r} + '.new', compression='lz4')\n"
            "except LodUsageError as e:\n"
            "    print(e)\n")
    env = {k: v for k, v in os.environ.items() if k != "HDF5_PLUGIN_PATH"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"{path}: tensor 'tensor' is compressed with zstd; pip install hdf5plugin",
                                        "compression 'lz4' needs hdf5plugin; pip install hdf5plugin"]
    assert not os.path.exists(path + ".new")


def test_appending_to_a_file_whose_filter_is_missing_names_the_fix(path):
    pytest.importorskip("hdf5plugin")
    save(path, articles(), compression="zstd")
    before = open(path, "rb").read()
    code = ("import sys; sys.modules['hdf5plugin'] = None\n"
            "from lodtool.container import LodWriter\n"
            "from lodtool.errors import LodFormatError\n"
            "from lodtool import LoDTensor\n"
            "import numpy as np\n"
            "try:\n"
            f"    with LodWriter({path!r}, append=True) as w:\n"
            "        w.write('tensor', LoDTensor(np.arange(2), [[0, 1], [0, 2]]))\n"
            "except LodFormatError as e:\n"
            "    print(e)\n")
    env = {k: v for k, v in os.environ.items() if k != "HDF5_PLUGIN_PATH"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{path}: tensor 'tensor': /tensor/data is compressed with zstd; pip install hdf5plugin"
    assert open(path, "rb").read() == before


