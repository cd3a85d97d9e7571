"""Shared option decorators and small I/O helpers for the commands."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import sys
import tempfile
from typing import Iterable, Iterator, Sequence

import click

from .. import io as formats
from .. import limits, storage
from ..errors import LodFileNotFoundError, LodUsageError
from ..lod import counted

#: what slice, head and tail write: every writable io format, then the container
FORMATS_OUT = [*formats.writable(), "h5"]
COMPRESSIONS = ["deflate", "gzip", "lzf", "none", "zstd", "blosc", "lz4"]


def json_option(f):
    return click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON on stdout, nothing else.")(f)


def name_option(f):
    return click.option("--name", "name", default=None, metavar="TENSOR",
                        help="Tensor inside the file, the same as FILE:TENSOR (default: the only one).")(f)


def tensor_ref(file: str, name: str | None) -> tuple[str, str | None]:
    """``FILE:tensor`` and ``--name`` -> (FILE, tensor); both given must agree."""
    from ..container.spec import resolve_tensor_ref

    return resolve_tensor_ref(file, name)


class PathType(click.ParamType):
    """A file or folder name, taken as given (each command's one-line errors say what is wrong with it);
    shell completion completes it as a file name."""

    name = "path"

    def shell_complete(self, ctx, param, incomplete):
        from click.shell_completion import CompletionItem

        return [CompletionItem(incomplete, type="file")]


#: the type of every argument and option that names a file or folder
PATH = PathType()

#: the key of ``ctx.meta`` that holds the command's -o (errors about the output name it: a full disk)
OUTPUT_META = "lodtool.output"


def _remember_output(ctx: click.Context, _param, value):
    ctx.meta[OUTPUT_META] = value
    return value


def output_option(required: bool = False, default: str | None = None, help_: str = "Output file, or - for stdout."):
    # click 8.3+ no longer enforces required=True on an option that also sets default=None: pass a default
    # only where the option is optional
    def deco(f):
        extra = {} if required else {"default": default}
        return click.option("-o", "--output", "output", type=PATH, required=required, metavar="PATH", help=help_,
                            callback=_remember_output, **extra)(f)
    return deco


def to_option(choices=formats.writable(), default=None):
    def deco(f):
        return click.option("--to", "to", type=click.Choice(list(choices)), default=default,
                            help="Output format (default: from -o's extension, else "
                                 f"{default or choices[0]}).")(f)
    return deco


def replace_options(f):
    """--overwrite and --force: the one rule for writing into a container that exists (see docs/cli.md)."""
    f = click.option("--force", is_flag=True,
                     help="Replace the whole output file (its other tensors too, or a file that is no container).")(f)
    return click.option("--overwrite", is_flag=True,
                        help="Replace the output's tensor of the same name (other tensors are kept).")(f)


def compression_option(f):
    """``--compression`` and ``--layout``: how every command that writes a container stores it."""
    f = click.option("--layout", type=click.Choice(["compact", "paged"]), default=None, expose_value=False,
                     callback=_enter_layout,
                     help="Where the container keeps its metadata: paged puts it in whole 1 MiB pages, the first one "
                          "first, so object storage opens the file in few requests (default: paged for an s3://... "
                          "output, compact, the smallest file, for a local one; see docs/remote.md).")(f)
    return click.option("--compression", type=click.Choice(COMPRESSIONS), default=None,
                        help="Data compression (default: deflate, i.e. shuffle + deflate, which every HDF5 reader has; "
                             "zstd/blosc/lz4 need hdf5plugin).")(f)


def _enter_layout(ctx: click.Context, _param, value):
    if value is not None and not ctx.resilient_parsing:
        from ..container._h5 import write_layout

        ctx.with_resource(write_layout(value))  # for every file the command creates, until it ends
    return value


def _enter_storage_options(ctx: click.Context, _param, values):
    """``--storage-option k=v`` (repeatable): in force for every URL the command opens; ``-v`` counts requests."""
    if ctx.resilient_parsing:
        return values
    given = dict(storage.parse_option(v) for v in values or ())
    if given:
        ctx.with_resource(storage.options(given))
    before = storage.requests_made()

    def report() -> None:
        made = storage.requests_made()
        if made.requests > before.requests and (ctx.find_root().obj or {}).get("verbose"):
            from ..limits import human_bytes

            click.echo(f"lodtool: {counted(made.requests - before.requests, 'request')} to object storage, "
                       f"{human_bytes(made.bytes - before.bytes)} read", err=True)

    ctx.call_on_close(report)
    return values


def storage_option() -> click.Option:
    """``--storage-option KEY=VALUE``, which every command takes (added with -q and -v)."""
    return click.Option(["--storage-option", "storage_options"], multiple=True, metavar="KEY=VALUE",
                        expose_value=False, callback=_enter_storage_options,
                        help="For s3://, gs://, https:// ... inputs and outputs: an fsspec storage option "
                             "(endpoint_url=..., anon=true, timeout=SECONDS; repeatable). Credentials also come from "
                             "the environment and config files; none is ever printed.")


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
    """``2G`` / ``512M`` / ``1000`` -> bytes; ``None`` stays ``None`` (the option was not given)."""
    return None if text is None else limits.parse_size(text)


def split_names(text: str | None) -> list[str] | None:
    if text is None:
        return None
    return [part.strip() for part in text.split(",")]


def extension_format(ext: str) -> str | None:
    """The output format an extension names (``.h5`` is the container), or None.

    >>> extension_format(".ndjson"), extension_format(".h5"), extension_format(".csv")
    ('jsonl', 'h5', None)
    """
    if ext.lower() in (".h5", ".hdf5"):
        return "h5"
    found = formats.format_of_path("x" + ext)
    return found.name if found is not None and found.writes else None


#: formats that are bytes, not text: never written onto a terminal
BINARY_FORMATS = ("npz", "h5", "parquet", "arrow", "pdtensor")


def output_format(output: str | None, to: str | None, default: str, choices=None) -> str:
    """The output format: --to, else -o's extension, else (stdout, or a device) the default.

    An -o file whose extension names no format this command writes is refused
    rather than filled with something its name does not promise.
    """
    if to:
        return to
    if output and output != "-":
        ext = os.path.splitext(output)[1].lower()
        fmt = extension_format(ext)
        if fmt is not None and (choices is None or fmt in choices):
            return fmt
        from ..atomic import is_stream_target

        if ext or not is_stream_target(output):
            allowed = [e for e in [*formats.extensions(), ".h5", ".hdf5"]
                       if extension_format(e) is not None and (choices is None or extension_format(e) in choices)]
            raise LodUsageError(f"{output}: cannot tell the output format from the extension "
                                f"{ext or '(none)'}; name the file {' '.join(allowed)}, or give --to")
    return default


def stdout_is_terminal() -> bool:
    """Whether stdout is a terminal (binary output is refused there, as gzip does)."""
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def refuse_binary_on_terminal(output: str | None, fmt: str) -> None:
    if fmt in BINARY_FORMATS and output in (None, "-") and stdout_is_terminal():
        kind = {"npz": "an NPZ archive", "h5": "a container"}.get(fmt, f"{fmt} output")
        raise LodUsageError(f"refusing to write {kind} (binary) to a terminal; redirect stdout or give -o FILE")


@contextlib.contextmanager
def input_path(path: str) -> Iterator[str]:
    """A real file path (or a token dataset's prefix) for an input; ``-`` spools stdin to a temp file (HDF5 needs
    seeking)."""
    if path != "-":
        from ..io.token_datasets import format_of

        path = storage.local_path(path)
        if storage.is_url(path):  # opened through fsspec, which names what is missing
            yield path
            return
        if not os.path.exists(path) and format_of(path) is None:
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
def stdin_among(files: Sequence[str]) -> Iterator[tuple[list[str], str | None]]:
    """``files`` with ``-`` (stdin, read once) replaced by the temp file it is spooled to, and that file's path.

    The other names are passed on unchecked: commands that report on many files report a missing one.
    """
    if "-" not in files:
        yield list(files), None
        return
    with input_path("-") as spooled:
        yield [spooled if f == "-" else f for f in files], spooled


@contextlib.contextmanager
def container_output(output: str) -> Iterator[str]:
    """A path to write a container to; ``-`` writes a temp file, then copies it to stdout (a URL is the writer's:
    it uploads the finished file whole)."""
    if output != "-":
        yield output
        return
    refuse_binary_on_terminal(output, "h5")
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
    """Write one JSON document to stdout.  A dict whose last value is an iterable that is not a list (entries read
    back one at a time) has that value written as an array a few entries at a time, so a long report is never whole
    in memory: the same bytes."""
    encode = functools.partial(json.dumps, indent=None, separators=(",", ":"), default=_json_default)
    last = list(obj)[-1] if isinstance(obj, dict) and obj else None
    if last is None or isinstance(obj[last], (list, tuple, dict, str)) or not isinstance(obj[last], Iterable):
        click.echo(encode(obj))
        return
    head = encode({**obj, last: []})
    pieces, size = [head[:-len("[]}")] + "["], 0
    for i, entry in enumerate(obj[last]):
        pieces.append(("," if i else "") + encode(entry))
        size += len(pieces[-1])
        if size >= JSON_ARRAY_PIECE:
            click.echo("".join(pieces), nl=False)
            pieces, size = [], 0
    pieces.append("]}")
    click.echo("".join(pieces))


#: entries of an array that :func:`emit_json_arrays` turns into text at a time (and characters that
#: :func:`emit_json` holds of a streamed array)
JSON_ARRAY_PIECE = 1 << 16


def emit_json_arrays(arrays) -> None:
    """Write one JSON object of integer arrays to stdout, each given as an iterator of pieces (NumPy arrays),
    so an array longer than memory streams out; the same bytes as :func:`emit_json` of the whole arrays."""
    write = click.get_text_stream("stdout").write
    for i, (key, pieces) in enumerate(arrays.items()):
        write(("{" if i == 0 else "],") + json.dumps(key) + ":[")
        first = True
        for piece in pieces:
            for start in range(0, len(piece), JSON_ARRAY_PIECE):  # as text, a piece takes ~60 B an entry
                write(("" if first else ",") + ",".join(map(str, piece[start:start + JSON_ARRAY_PIECE].tolist())))
                first = False
    write("]}\n" if arrays else "{}\n")


def _json_default(obj):
    import numpy as np

    if isinstance(obj, (np.generic, np.ndarray)):  # NumPy scalars and arrays as Python's
        return obj.tolist()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def is_quiet(ctx: click.Context) -> bool:
    return bool((ctx.find_root().obj or {}).get("quiet"))


def message(ctx: click.Context, text: str) -> None:
    """A human message on stderr (silenced by -q); names from files in it are shown escaped."""
    if not is_quiet(ctx):
        from ._render import printable

        click.echo(printable(text), err=True)


def partition_size_option(f):
    """``--partition-size SIZE``: the bytes of rows in one Dask partition, refused without ``--scheduler``."""

    @functools.wraps(f)  # keeps the options declared so far (click keeps them on the function)
    def command(*args, **kwargs):
        if kwargs.get("partition_size") is not None and not kwargs.get("scheduler"):
            raise click.UsageError("--partition-size sizes the Dask partitions: give it with --scheduler")
        return f(*args, **kwargs)

    return click.option("--partition-size", default=None, metavar="SIZE",
                        help="With --scheduler: about this many bytes of rows per partition, whole top-level "
                             "sequences (default 64MB; each partition also costs ~24 ms of opening, planning and "
                             "writing its shard, see docs/scale.md).")(command)


def scheduler_options(f):
    """``--scheduler processes|threads|ADDRESS`` and ``--workers N``: run on Dask instead of in this process."""
    f = click.option("--workers", type=click.IntRange(min=1), default=None,
                     help="Dask workers for --scheduler processes|threads (default: one per core).")(f)
    return click.option("--scheduler", default=None, metavar="processes|threads|ADDRESS",
                        help="Run on Dask: local process workers, local threads, or a scheduler address "
                             "(tcp://host:8786). Without it: today's single-process path.")(f)


# -- what a token dataset of LLM training cannot say itself ----------------------------------------------
def token_options(f):
    """--token-dtype and --eos-id: passed as ``token_dtype`` / ``eos_token_id`` to the task, which passes them to
    :func:`lodtool.open` (a container ignores them)."""
    f = click.option("--eos-id", "eos_token_id", type=click.IntRange(min=0), default=None, metavar="ID",
                     help="A dolma array without its .csv.gz: each document ends after this token id (pack also "
                          "records it as the tensor's EOS id).")(f)
    return click.option("--token-dtype", "token_dtype", default=None, metavar="DTYPE",
                        help="The tokens' dtype where a token dataset does not say it: a dolma array, a .ds "
                             "without .ds.metadata and no token, a Megatron / fairseq dtype code that differs "
                             "between forks (6, 7, 9, 10).")(f)
