"""``lodtool unpack``: a tensor back out as JSON, JSON Lines, NPZ, Parquet, Arrow or a Paddle tensor."""

from __future__ import annotations

import sys

import click

from . import _options as opt


@click.command("unpack")
@click.argument("file")
@opt.name_option
@opt.to_option()
@opt.output_option(default="-")
@click.pass_context
def unpack(ctx, file, name, to, output):
    """Write a tensor back out: the inverse of pack.

    json writes one nested list, jsonl one top-level sequence per line (both
    streamed), npz the arrays `data` and `offsets_0..`, parquet one row group
    per chunk, arrow an Arrow IPC file, pdtensor Paddle's serialized LoDTensor.

    \b
    Example:
      lodtool unpack articles.lod.h5 --to json
      lodtool unpack docs.lod.h5 --to jsonl | jq -c '.[0]'
      lodtool unpack articles.lod.h5 --to npz -o articles.npz
      lodtool unpack corpus.lod.h5 --to parquet -o corpus.parquet
    """
    from .. import tasks

    file, name = opt.tensor_ref(file, name)
    fmt = opt.output_format(output, to, "json")
    if fmt == "h5":
        raise click.UsageError("unpack writes interchange formats; use `lodtool slice` to copy into a container")
    with opt.input_path(file) as path:
        tasks.unpack(path, sys.stdout.buffer if output == "-" else output, name=name, to=fmt)
