"""``lodtool shard`` / ``merge``: a container to a sharded folder (one logical tensor) and back."""

from __future__ import annotations

import click

from . import _options as opt


def _report(ctx, info: dict, as_json: bool, verb: str) -> None:
    if as_json:
        opt.emit_json(info)
        return
    shards = f" in {info['shards']:,} shards" if "shards" in info else ""
    opt.message(ctx, f"{verb} {info['sequences']:,} sequences, {info['rows']:,} rows ({info['dtype']}, "
                     f"{info['lod_level']} LoD levels){shards} -> {info['output']}")


@click.command("shard")
@click.argument("file", type=opt.PATH)
@opt.output_option(required=True, help_="The folder to write: DIR/part-00000.lod.h5 ... and DIR/lodtool.json.")
@click.option("--shard-size", default="1GB", show_default=True, metavar="SIZE",
              help="Bytes of rows per shard (256MB, 1GB, ...); shards end at top-level sequence boundaries.")
@opt.name_option
@opt.compression_option
@click.option("--append", is_flag=True, help="Add the shards after those already in the folder.")
@opt.replace_options
@opt.max_memory_option
@opt.token_options
@opt.json_option
@click.pass_context
def shard(ctx, file, output, shard_size, name, compression, append, overwrite, force, max_memory, token_dtype,
          eos_token_id, as_json):
    """Split a container (or a token dataset) into a sharded folder that every reading command takes as one tensor.

    Each shard is a whole container, readable alone; the manifest
    (lodtool.json) is written last and atomically.  Every tensor of the file is
    sharded (they need the same number of top-level sequences), or only --name.
    A folder that holds a sharded container already needs --append (add
    shards) or --overwrite (replace it).  FILE - reads the container from stdin.
    A token dataset (Megatron, fairseq, datatrove, dolma) is read as pack
    reads it: its tokens become tensor `tokens`, with the token metadata pack
    records (--eos-id is recorded as the EOS id).

    \b
    Example:
      lodtool shard corpus.lod.h5 -o corpus/ --shard-size 1GB
      lodtool slice corpus/ 123456 --to json
      lodtool shard part-0.npy --token-dtype uint32 --eos-id 50279 -o part-0/
    """
    from .. import tasks

    with opt.input_path(file) as path:
        info = tasks.shard(path, output, shard_size=opt.parse_size(shard_size), name=name, compression=compression,
                           append=append, overwrite=overwrite, force=force, max_memory=opt.parse_size(max_memory),
                           token_dtype=token_dtype, eos_token_id=eos_token_id)
    _report(ctx, info, as_json, "sharded")


@click.command("merge")
@click.argument("folder", type=opt.PATH)
@opt.output_option(required=True, help_="The container to write (atomically).")
@opt.replace_options
@opt.compression_option
@opt.max_memory_option
@opt.json_option
@click.pass_context
def merge(ctx, folder, output, overwrite, force, compression, max_memory, as_json):
    """Join a sharded folder into one container (level names kept), streamed shard by shard.

    FOLDER may also be a container file: it is copied tensor by tensor (a repack), e.g. into the paged layout
    that object storage reads in few requests (--layout paged), or into another --compression.

    \b
    Example:
      lodtool merge corpus/ -o corpus.lod.h5
      lodtool merge corpus.lod.h5 -o s3://bucket/corpus.lod.h5      # paged, uploaded whole
      lodtool merge old.lod.h5 -o new.lod.h5 --layout paged
    """
    from .. import tasks

    info = tasks.merge(folder, output, compression=compression, max_memory=opt.parse_size(max_memory),
                       overwrite=overwrite, force=force)
    _report(ctx, info, as_json, "merged")
