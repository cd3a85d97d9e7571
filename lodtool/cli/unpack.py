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
@click.option("--detokenize", is_flag=True,
              help="Write text, not ids (jsonl or json), decoded by the tokenizer the tensor stores.")
@click.option("--skip-special-tokens", is_flag=True, help="With --detokenize: leave special tokens (EOS ...) out.")
@click.pass_context
def unpack(ctx, file, name, to, output, detokenize, skip_special_tokens):
    """Write a tensor back out: the inverse of pack.

    json writes one nested list, jsonl one top-level sequence per line (both
    streamed), npz the arrays `data` and `offsets_0..`, parquet one row group
    per chunk, arrow an Arrow IPC file, pdtensor Paddle's serialized LoDTensor.
    Without --to the format comes from -o's extension (another extension is
    refused), else json.  Binary formats are not written onto a terminal.  A
    progress bar (on a terminal) and a one-line summary go to stderr.

    \b
    Example:
      lodtool unpack articles.lod.h5 --to json
      lodtool unpack docs.lod.h5 --to jsonl | jq -c '.[0]'
      lodtool unpack articles.lod.h5 --to npz -o articles.npz
      lodtool unpack corpus.lod.h5 --to parquet -o corpus.parquet
      lodtool unpack corpus.lod.h5 --to jsonl --detokenize     # {"text": ...} per document
    """
    from .. import tasks

    file, name = opt.tensor_ref(file, name)
    if to is None and output and output != "-" and \
            opt.extension_format(os.path.splitext(output)[1]) == "h5":
        raise click.UsageError("unpack writes interchange formats; use `lodtool slice` to copy into a container")
    from ._render import progress

    if skip_special_tokens and not detokenize:
        raise click.UsageError("--skip-special-tokens goes with --detokenize")
    fmt = opt.output_format(output, to, "jsonl" if detokenize else "json",
                            choices=tuple(f for f in opt.FORMATS_OUT if f != "h5"))
    opt.refuse_binary_on_terminal(output, fmt)
    # the bar and the summary go to stderr: stdout may be the data
    with opt.input_path(file) as path, progress(None, "unpacking", not opt.is_quiet(ctx)) as tick:
        result = tasks.unpack(path, sys.stdout.buffer if output == "-" else output, name=name, to=fmt,
                              progress=tick, detokenize=detokenize, skip_special_tokens=skip_special_tokens)
    where = "stdout" if output == "-" else output
    opt.message(ctx, f"unpacked {opt.plural(result.sequences, 'sequence')}, {opt.plural(result.rows, 'row')} of "
                     f"{file}:{result.name} as {fmt} to {where} ({result.bytes_written:,} bytes)")
