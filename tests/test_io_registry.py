"""The io registry: one entry per interchange format, read by pack, unpack, slice and the CLI's choices."""

from __future__ import annotations

import io
import os

import numpy as np
import pytest
from click.testing import CliRunner

from lodtool import LoDTensor, io as formats
from lodtool.cli.main import cli
from lodtool.errors import LodUsageError


def test_every_entry_names_a_module_with_the_protocol():
    for fmt in formats.REGISTRY:
        impl = fmt._impl()
        writers = ("output_files", "write_files") if fmt.writes_files else ("write", "write_stored")
        for fn in ("read", *writers):
            assert callable(getattr(impl, fn)), f"lodtool.io.{fmt.module} lacks {fn}"
        assert all(ext.startswith(".") and ext == ext.lower() for ext in fmt.extensions)


def test_names_and_extensions_are_unique():
    names = [f.name for f in formats.REGISTRY]
    exts = formats.extensions()
    assert len(set(names)) == len(names) and len(set(exts)) == len(exts)


@pytest.mark.parametrize("name", [f for f in formats.writable() if not formats.get(f).writes_files])
def test_each_writable_format_reads_back_what_it_writes(name):
    t = LoDTensor(np.array([1.5, 2.0, -3.0]), recursive_sequence_lengths=[[2, 1]])
    buf = io.BytesIO()
    formats.get(name).write(t, buf)
    chunks = list(formats.get(name).read([io.BytesIO(buf.getvalue())]))
    assert len(chunks) == 1 and chunks[0].equals(t)


@pytest.mark.parametrize("name", [f for f in formats.writable() if formats.get(f).writes_files])
def test_each_format_of_several_files_reads_back_what_it_writes(tmp_path, name):
    t = LoDTensor(np.array([7, 8, 9], np.uint16), recursive_sequence_lengths=[[2, 0, 1]])
    fmt = formats.get(name)
    out = str(tmp_path / "out")
    files = fmt.write_files([t], out)
    assert files == fmt.output_files(out) and all(os.path.isfile(f) for f in files)
    assert formats.input_format([out if name in ("megatron", "fairseq") else files[0]]).name == name
    (back,) = fmt.read([files[0]])
    expected = LoDTensor(t.data, [[0, 1, 2, 3], t.lod[0]]) if name == "megatron" else t  # documents over sequences
    assert back.equals(expected)
    with pytest.raises(LodUsageError, match="not a stream"):
        fmt.write(t, io.BytesIO())


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


# -- detection: the registry decides every input's format ---------------------------------------------------
def test_detect_knows_extensions_first_bytes_and_containers(tmp_path):
    from lodtool import save

    (tmp_path / "lines.txt").write_text("[1, 2]\n[3]\n")
    (tmp_path / "doc.txt").write_text("[[1, 2], [3]]")
    save(str(tmp_path / "c.lod.h5"), LoDTensor(np.arange(3), [[0, 3]]))
    assert formats.detect(tmp_path / "lines.txt") == formats.Detection("jsonl", True)
    assert formats.detect(tmp_path / "doc.txt") == formats.Detection("json", True)
    assert formats.detect(tmp_path / "c.lod.h5") == formats.Detection(formats.CONTAINER, True)
    assert formats.detect("x.parquet") == formats.Detection("parquet", False)
    assert formats.detect(tmp_path / "missing.bin") is None
    with pytest.raises(LodUsageError, match=r"c\.lod\.h5 is an HDF5 file.*container is packed already"):
        formats.input_format([tmp_path / "c.lod.h5"])


def test_stdin_is_peeked_once_and_keeps_every_byte(monkeypatch):
    import sys

    class Stdin:
        buffer = io.BytesIO(b"[1]\n[2, 3]\n")

    monkeypatch.setattr(sys, "stdin", Stdin)
    assert formats.input_format(["-"]) == formats.Detection("jsonl", True)
    assert [c.to_nested() for c in formats.get("jsonl").read(["-"])] == [[[1], [2, 3]]]


def test_pack_decides_formats_only_through_the_registry():
    import lodtool.tasks._pack as pack_module

    for private in ("sniff_format", "_sniff", "_peek_stdin", "_input_format", "HDF5_MAGIC"):
        assert not hasattr(pack_module, private), private
