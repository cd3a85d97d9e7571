"""The io registry: one entry per interchange format, read by pack, unpack, slice and the CLI's choices."""

from __future__ import annotations

import io

import numpy as np
import pytest
from click.testing import CliRunner

from lodtool import LoDTensor, io as formats
from lodtool.cli.main import cli
from lodtool.errors import LodUsageError


def test_every_entry_names_a_module_with_the_protocol():
    for fmt in formats.REGISTRY:
        impl = fmt._impl()
        for fn in ("read", "write", "write_stored"):
            assert callable(getattr(impl, fn)), f"lodtool.io.{fmt.module} lacks {fn}"
        assert all(ext.startswith(".") and ext == ext.lower() for ext in fmt.extensions)


def test_names_and_extensions_are_unique():
    names = [f.name for f in formats.REGISTRY]
    exts = formats.extensions()
    assert len(set(names)) == len(names) and len(set(exts)) == len(exts)


@pytest.mark.parametrize("name", formats.writable())
def test_each_writable_format_reads_back_what_it_writes(name):
    t = LoDTensor(np.array([1.5, 2.0, -3.0]), recursive_sequence_lengths=[[2, 1]])
    buf = io.BytesIO()
    formats.get(name).write(t, buf)
    chunks = list(formats.get(name).read([io.BytesIO(buf.getvalue())]))
    assert len(chunks) == 1 and chunks[0].equals(t)


def test_magic_bytes_name_the_binary_formats():
    buf = io.BytesIO()
    np.save(buf, np.arange(3))
    assert formats.format_of_bytes(buf.getvalue()[:16]).name == "npy"
    buf = io.BytesIO()
    formats.get("npz").write(LoDTensor(np.arange(3), [[0, 3]]), buf)
    assert formats.format_of_bytes(buf.getvalue()[:16]).name == "npz"
    assert formats.format_of_bytes(b"[[1, 2]]") is None


def test_unknown_and_read_only_formats_are_usage_errors():
    with pytest.raises(LodUsageError, match="unknown format 'xlsx'"):
        formats.get("xlsx")
    with pytest.raises(LodUsageError, match="reads npy but does not write it"):
        formats.get("npy").write(LoDTensor(np.arange(3), [[0, 3]]), io.BytesIO())


def test_the_cli_choices_come_from_the_registry():
    pack_help = CliRunner().invoke(cli, ["pack", "--help"]).output
    unpack_help = CliRunner().invoke(cli, ["unpack", "--help"]).output
    assert "[" + "|".join(formats.readable()) + "]" in pack_help
    assert "[" + "|".join(formats.writable()) + "]" in unpack_help


def test_importing_the_registry_loads_no_format():
    import subprocess
    import sys

    code = "import sys, lodtool.io as r; r.readable(); print(sorted(m for m in sys.modules if m.startswith('lodtool.io')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['lodtool.io']"
