"""``lodtool unpack``: a tensor back out as JSON, JSON Lines, NPZ, Parquet, Arrow, a Paddle tensor or a token
dataset of LLM training (Megatron, fairseq, datatrove, dolma)."""

from __future__ import annotations

import os
import sys

import click

from . import _options as opt
from ..lod import counted


@click.command("unpack")
@click.argument("file", type=opt.PATH)
@opt.name_option
@opt.to_option()
@opt.output_option(default="-", help_="Output file, or - for stdout; for megatron, fairseq, datatrove and dolma "
                                       "the path their files are named from (corpus: corpus.bin + corpus.idx).")
@click.option("--level", type=click.IntRange(min=0), default=None,
              help="megatron, fairseq, datatrove, dolma: store this level's sequences, the levels under it "
                   "flattened into their tokens (needed when the tensor has more levels than the format).")
@click.option("--dtype", default=None, metavar="DTYPE",
              help="Cast the values, refusing any the dtype cannot hold (e.g. uint16 or uint32 for datatrove).")
@click.option("--detokenize", is_flag=True,
              help="Write text, not ids (jsonl or json), decoded by the tokenizer the tensor stores.")
@click.option("--skip-special-tokens", is_flag=True, help="With --detokenize: leave special tokens (EOS ...) out.")
@opt.token_options
@click.pass_context
def unpack(ctx, file, name, to, output, level, dtype, detokenize, skip_special_tokens, token_dtype, eos_token_id):
    """Write a tensor back out: the inverse of pack.

    json writes one nested list, jsonl one top-level sequence per line (both
    streamed), npz the arrays `data` and `offsets_0..`, parquet one row group
    per chunk, arrow an Arrow IPC file, pdtensor Paddle's serialized LoDTensor.
    megatron (PREFIX.bin + PREFIX.idx: documents over sequences; a 1-level
    tensor is one sequence per document), fairseq (PREFIX.bin + PREFIX.idx,
    one level), datatrove (NAME.ds + NAME.ds.index) and dolma (NAME.npy
    without an NPY header + NAME.csv.gz) are several files named from -o,
    written together or not at all; --level picks the level they store.
    Without --to the format comes from -o's extension (another extension is
    refused), else json.  Binary formats are not written onto a terminal.  A
    progress bar (on a terminal) and a one-line summary go to stderr.

    \b
    Example:
      lodtool unpack articles.lod.h5 --to json
      lodtool unpack docs.lod.h5 --to jsonl | jq -c '.[0]'
      lodtool unpack articles.lod.h5 --to npz -o articles.npz
      lodtool unpack corpus.lod.h5 --to parquet -o corpus.parquet
      lodtool unpack corpus.lod.h5 --to megatron -o corpus   # corpus.bin + corpus.idx
      lodtool unpack books.lod.h5 --to datatrove --level 1 -o books.ds
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
                              progress=tick, level=level, dtype=dtype, token_dtype=token_dtype,
                              eos_token_id=eos_token_id, detokenize=detokenize,
                              skip_special_tokens=skip_special_tokens)
    where = " + ".join(result.files) if result.files else "stdout" if output == "-" else output
    opt.message(ctx, f"unpacked {counted(result.sequences, 'sequence')}, {counted(result.rows, 'row')} of "
                     f"{file}:{result.name} as {fmt} to {where} ({result.bytes_written:,} bytes)")
