"""Shared option decorators and small I/O helpers for the commands."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
from typing import Iterator

import click

from .. import io as formats
from ..errors import LodFileNotFoundError, LodUsageError

#: what slice, head and tail write: every writable io format, then the container
FORMATS_OUT = [*formats.writable(), "h5"]
COMPRESSIONS = ["deflate", "gzip", "lzf", "none", "zstd", "blosc", "lz4"]


def json_option(f):
    return click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON on stdout, nothing else.")(f)


def name_option(f):
    return click.option("--name", "name", default=None, metavar="TENSOR",
                        help="Tensor inside the file (default: the only one).")(f)


def output_option(required: bool = False, default: str | None = None, help_: str = "Output file, or - for stdout."):
    def deco(f):
        return click.option("-o", "--output", "output", required=required, default=default, metavar="PATH",
                            help=help_)(f)
    return deco


def to_option(choices=formats.writable(), default=None):
    def deco(f):
        return click.option("--to", "to", type=click.Choice(list(choices)), default=default,
                            help="Output format (default: from -o's extension, else "
                                 f"{default or choices[0]}).")(f)
    return deco


def compression_option(f):
    return click.option("--compression", type=click.Choice(COMPRESSIONS), default=None,
                        help="Data compression (default: deflate, i.e. shuffle + deflate, which every HDF5 reader has; "
                             "zstd/blosc/lz4 need hdf5plugin).")(f)


def max_memory_option(f):
    return click.option("--max-memory", type=str, default=None, metavar="SIZE",
                        help="Refuse files that would need more memory than this (e.g. 2G, 512M).")(f)


def device_option(f):
    return click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True,
                        help="Where the operator's kernel runs.")(f)


def isolate_option(f):
    return click.option("--isolate", is_flag=True,
                        help="Open each file in a child process with a timeout (for untrusted files).")(f)


def parse_size(text: str | None) -> int | None:
    """``2G`` / ``512M`` / ``1000`` -> bytes."""
    if text is None:
        return None
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    body = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = body[-1:] if body[-1:] in units else ""
    try:
        value = float(body[: len(body) - len(unit)])
    except ValueError:
        raise LodUsageError(f"bad size {text!r}: write it as 512M, 2G or a number of bytes") from None
    if value <= 0:
        raise LodUsageError(f"bad size {text!r}: must be positive")
    return int(value * units[unit])


def split_names(text: str | None) -> list[str] | None:
    if text is None:
        return None
    return [part.strip() for part in text.split(",")]


def parse_file_ref(ref: str) -> tuple[str, str | None]:
    """``FILE:tensor`` -> (FILE, tensor); a plain existing path keeps its colons."""
    if ref != "-" and not os.path.exists(ref) and ":" in ref:
        path, _, name = ref.rpartition(":")
        return path, name or None
    return ref, None


def output_format(output: str | None, to: str | None, default: str) -> str:
    """The output format: --to, else -o's extension, else the default."""
    if to:
        return to
    if output and output != "-":
        if os.path.splitext(output)[1].lower() in (".h5", ".hdf5"):
            return "h5"
        found = formats.format_of_path(output)
        return found.name if found is not None and found.writes else default
    return default


@contextlib.contextmanager
def input_path(path: str) -> Iterator[str]:
    """A real file path for an input; ``-`` spools stdin to a temp file (HDF5 needs seeking)."""
    if path != "-":
        if not os.path.exists(path):
            raise LodFileNotFoundError(f"{path}: no such file")
        yield path
        return
    fd, tmp = tempfile.mkstemp(prefix="lodtool-stdin-", suffix=".h5")
    try:
        with os.fdopen(fd, "wb") as out:
            shutil.copyfileobj(sys.stdin.buffer, out, 1 << 20)
        yield tmp
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


@contextlib.contextmanager
def container_output(output: str) -> Iterator[str]:
    """A path to write a container to; ``-`` writes a temp file, then copies it to stdout."""
    if output != "-":
        yield output
        return
    tmpdir = tempfile.mkdtemp(prefix="lodtool-out-")
    tmp = os.path.join(tmpdir, "out.lod.h5")
    try:
        yield tmp
        with open(tmp, "rb") as src:
            shutil.copyfileobj(src, sys.stdout.buffer, 1 << 20)
        sys.stdout.buffer.flush()
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


def emit_json(obj) -> None:
    """Write one JSON document to stdout."""
    click.echo(json.dumps(obj, indent=None, separators=(",", ":"), default=_json_default))


def _json_default(obj):
    import numpy as np

    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, tuple):
        return list(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def is_quiet(ctx: click.Context) -> bool:
    return bool((ctx.find_root().obj or {}).get("quiet"))


def message(ctx: click.Context, text: str) -> None:
    """A human message on stderr (silenced by -q)."""
    if not is_quiet(ctx):
        click.echo(text, err=True)
