"""``lodtool pack``: ragged JSON / JSON Lines / NPY / NPZ into a container."""

from __future__ import annotations

import os

import click

from . import _options as opt
from .. import io as formats


@click.command("pack")
@click.argument("inputs", nargs=-1, required=True, metavar="INPUT...")
@opt.output_option(required=True, help_="The container to write (atomically), or - for stdout.")
@click.option("--format", "fmt", type=click.Choice(list(formats.readable())), default=None,
              help="Input format (default: from the extension; required for stdin).")
@click.option("--lod-level", type=click.IntRange(min=0), default=None,
              help="Number of LoD levels; deeper lists become the (uniform) element shape.")
@click.option("--dtype", default=None,
              help="Data dtype, e.g. int32, float32 (default: inferred); auto-int stores the narrowest integer "
                   "dtype that holds every value (e.g. uint16 for token ids below 65536).")
@click.option("--name", default="tensor", show_default=True, help="Tensor name inside the container.")
@click.option("--level-names", default=None, metavar="A,B,..", help="Names of the levels, e.g. article,sentence.")
@opt.compression_option
@click.option("--append", is_flag=True, help="Add the input's top-level sequences to an existing tensor.")
@opt.json_option
@click.pass_context
def pack(ctx, inputs, output, fmt, lod_level, dtype, name, level_names, compression, append, as_json):
    """Pack ragged data into a lodtool container.

    \b
    json   one nested list; its items are the top-level sequences
    jsonl  one top-level sequence per line (streamed: memory stays bounded)
    npy    several .npy files, each one sequence
    npz    arrays `data` plus `offsets_0..` or `lengths_0..` per level
    Use - to read stdin (then give --format).

    \b
    Example:
      lodtool pack sample_data/articles.json -o articles.lod.h5 --level-names article,sentence
      cat docs.jsonl | lodtool pack - --format jsonl -o docs.lod.h5
      lodtool pack docs.jsonl -o docs.lod.h5 --dtype auto-int
    """
    from .. import tasks

    if append and output == "-":
        raise click.UsageError("--append needs a file, not stdout")
    total = sum(os.path.getsize(p) for p in inputs if p != "-" and os.path.isfile(p)) or None
    from ._render import progress

    with progress(total, "packing", not opt.is_quiet(ctx) and not as_json) as tick, \
            opt.container_output(output) as path:
        result = tasks.pack(list(inputs), path, format=fmt, lod_level=lod_level, dtype=dtype, name=name,
                            level_names=opt.split_names(level_names), compression=compression, append=append,
                            progress=tick)
    summary = {"output": output, "name": result.name, "sequences": result.sequences, "rows": result.rows,
               "lod_level": result.lod_level, "dtype": str(result.dtype), "bytes_read": result.bytes_read,
               "bytes_saved": result.bytes_saved}
    if as_json:
        opt.emit_json(summary)
    elif output != "-":
        verb = "appended" if append else "packed"
        saved = f"; {result.bytes_saved:,} bytes saved against int64" if result.bytes_saved else ""
        opt.message(ctx, f"{verb} {result.sequences:,} sequences, {result.rows:,} rows ({result.dtype}, "
                         f"{result.lod_level} LoD levels) into {output}:{result.name}{saved}")
