"""``lodtool unpack``: a tensor back out as JSON, JSON Lines, NPZ, Parquet, Arrow or a Paddle tensor."""

from __future__ import annotations

import os
import sys

import click

from . import _options as opt


@click.command("unpack")
@click.argument("file", type=opt.PATH)
@opt.name_option
@opt.to_option()
@opt.output_option(default="-")
@click.pass_context
def unpack(ctx, file, name, to, output):
    """Write a tensor back out: the inverse of pack.

    json writes one nested list, jsonl one top-level sequence per line (both
    streamed), npz the arrays `data` and `offsets_0..`, parquet one row group
    per chunk, arrow an Arrow IPC file, pdtensor Paddle's serialized LoDTensor.
    Without --to the format comes from -o's extension (another extension is
    refused), else json.  Binary formats are not written onto a terminal.

    \b
    Example:
      lodtool unpack articles.lod.h5 --to json
      lodtool unpack docs.lod.h5 --to jsonl | jq -c '.[0]'
      lodtool unpack articles.lod.h5 --to npz -o articles.npz
      lodtool unpack corpus.lod.h5 --to parquet -o corpus.parquet
    """
    from .. import tasks

    file, name = opt.tensor_ref(file, name)
    if to is None and output and output != "-" and \
            opt.extension_format(os.path.splitext(output)[1]) == "h5":
        raise click.UsageError("unpack writes interchange formats; use `lodtool slice` to copy into a container")
    fmt = opt.output_format(output, to, "json", choices=tuple(f for f in opt.FORMATS_OUT if f != "h5"))
    opt.refuse_binary_on_terminal(output, fmt)
    with opt.input_path(file) as path:
        tasks.unpack(path, sys.stdout.buffer if output == "-" else output, name=name, to=fmt)
