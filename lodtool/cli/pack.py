"""``lodtool pack``: ragged JSON / JSON Lines / NPY / NPZ / Parquet / Arrow / Paddle tensors into a container."""

from __future__ import annotations

import os

import click

from . import _options as opt
from .. import io as formats
from ..lod import counted


def token_metadata_options(fn):
    """The token metadata recorded with the tensor (``docs/format.md``, *Token metadata*); ``--eos-id`` is
    :func:`lodtool.cli._options.token_options`'s, which token datasets read too."""
    options = (
        click.option("--vocab-size", type=click.IntRange(min=1), default=None,
                     help="The vocabulary size of the token ids (validate then checks every id is under it)."),
        click.option("--bos-id", type=click.IntRange(min=0), default=None, help="The beginning-of-sequence token id."),
        click.option("--pad-id", type=click.IntRange(min=0), default=None, help="The padding token id."),
        click.option("--tokenizer-name", default=None, help="The name of the tokenizer that made the ids."),
    )
    for option in reversed(options):
        fn = option(fn)
    return fn


def text_options(fn):
    """Text tokenized as it is packed (``docs/text.md``)."""
    options = (
        click.option("--tokenizer", default=None, type=opt.PATH, metavar="TOKENIZER.JSON",
                     help="Pack text: tokenize it with this local HuggingFace tokenizer.json (pip install "
                          "'lodtool[text]'); the tokenizer is stored in the container."),
        click.option("--text-field", default=None, metavar="NAME",
                     help="The JSON Lines field or Parquet column that holds the text.  [default: text]"),
        click.option("--documents", type=click.Choice(["file", "line"]), default=None,
                     help="Plain text: each file is a document, or each line.  [default: file]"),
        click.option("--split", type=click.Choice(["lines", "paragraphs", "sentences"]), default=None,
                     help="Add a level: documents > lines / paragraphs / sentences > tokens."),
        click.option("--add-bos", is_flag=True, help="Put the BOS token id before each document."),
        click.option("--add-eos", is_flag=True, help="Put the EOS token id after each document."),
        click.option("--special-tokens", is_flag=True,
                     help="Let the tokenizer add its own special tokens (its post-processor, e.g. [CLS] .. [SEP])."),
        click.option("--no-tokenizer-json", is_flag=True,
                     help="Record the tokenizer by name and hash only, not its JSON."),
        click.option("--words", is_flag=True,
                     help="The input is nested lists of words (strings): pack the ids of a word vocabulary, most "
                          "frequent first, stored in the container."),
        click.option("--vocab", default=None, type=opt.PATH, metavar="FILE",
                     help="With --words: use this vocabulary (a container packed with --words, a WordLevel "
                          "tokenizer.json, or one word per line), so that several files share ids."),
        click.option("--min-count", type=click.IntRange(min=1), default=None,
                     help="With --words: words seen fewer times become <unk> (id 0).  [default: 1]"),
    )
    for option in reversed(options):
        fn = option(fn)
    return fn


def _text_options(tokenizer, text_field, documents, split, add_bos, add_eos, special_tokens, no_tokenizer_json,
                  words, vocab, min_count):
    from ..io.text import TextOptions

    given = [name for name, value in (("--text-field", text_field), ("--documents", documents), ("--split", split),
                                      ("--add-bos", add_bos), ("--add-eos", add_eos),
                                      ("--special-tokens", special_tokens)) if value]
    words = words or vocab is not None
    if words:
        if tokenizer is not None or given:
            raise click.UsageError(f"--words packs nested lists of words; {given[0] if given else '--tokenizer'} "
                                   "applies to text")
        if vocab is not None and min_count is not None:
            raise click.UsageError("--min-count shapes a vocabulary built from the input; --vocab gives one")
        return TextOptions(None, words=True, vocabulary=vocab, min_count=min_count or 1,
                           store_json=not no_tokenizer_json)
    if min_count is not None:
        raise click.UsageError("--min-count applies to --words")
    if tokenizer is None:
        if given or no_tokenizer_json:
            raise click.UsageError(f"{(given or ['--no-tokenizer-json'])[0]} applies to text, packed with "
                                   "--tokenizer tokenizer.json")
        return None
    return TextOptions(tokenizer, field=text_field or "text", documents=documents or "file", split=split,
                       add_bos=add_bos, add_eos=add_eos, special_tokens=special_tokens,
                       store_json=not no_tokenizer_json)


def _token_info(vocab_size, bos_id, pad_id, tokenizer_name):
    from ..tokens import TokenInfo

    info = TokenInfo(vocab_size=vocab_size, bos_id=bos_id, pad_id=pad_id,
                     tokenizer_name=tokenizer_name)
    return None if info.empty else info


@click.command("pack")
@click.argument("inputs", nargs=-1, required=True, metavar="INPUT...", type=opt.PATH)
@opt.output_option(required=True, help_="The container to write (atomically), or - for stdout.")
@click.option("--format", "fmt", type=click.Choice(list(formats.readable())), default=None,
              help="Input format (default: from the extension, else from the first bytes, stdin's too).")
@click.option("--lod-level", type=click.IntRange(min=0), default=None,
              help="Number of LoD levels; deeper lists become the (uniform) element shape.")
@click.option("--dtype", default=None,
              help="Data dtype, e.g. int32, float32 (default: inferred); auto-int stores the narrowest integer "
                   "dtype that holds every value (e.g. uint16 for token ids below 65536).")
@click.option("--name", default="tensor", show_default=True, help="Tensor name inside the container.")
@click.option("--level-names", default=None, metavar="A,B,..", help="Names of the levels, e.g. article,sentence.")
@opt.compression_option
@click.option("--append", is_flag=True, help="Add the input's top-level sequences to an existing tensor "
                                               "(into a folder: new shards).")
@click.option("--column", default=None, help="The column of a Parquet or Arrow table (default: its only column).")
@click.option("--shard-size", default=None, metavar="SIZE",
              help="Write a sharded folder (-o DIR/) with shards of about SIZE bytes (256MB, 1GB).")
@opt.scheduler_options
@opt.max_memory_option
@opt.replace_options
@opt.json_option
@opt.token_options
@token_metadata_options
@text_options
@click.pass_context
def pack(ctx, inputs, output, fmt, lod_level, dtype, name, level_names, compression, append, column, shard_size,
         scheduler, workers, max_memory, overwrite, force, as_json, token_dtype, eos_token_id, vocab_size, bos_id,
         pad_id, tokenizer_name, tokenizer, text_field, documents, split, add_bos, add_eos, special_tokens,
         no_tokenizer_json, words, vocab, min_count):
    """Pack ragged data into a lodtool container.

    \b
    json      one nested list; its items are the top-level sequences
    jsonl     one top-level sequence per line (streamed: memory stays bounded)
    npy       several .npy files, each one sequence
    npz       arrays `data` plus `offsets_0..` or `lengths_0..` per level
    parquet   a column of nested lists (--column), read row group by row group
    arrow     an Arrow IPC / Feather file or stream, a record batch at a time
    pdtensor  Paddle's serialized LoDTensor (save_dense_tensor), one per file
    megatron  Megatron-Core PREFIX.bin + PREFIX.idx (give PREFIX or either file)
    fairseq   fairseq's PREFIX.bin + PREFIX.idx (told from Megatron by the .idx size)
    datatrove NAME.ds + NAME.ds.index
    dolma     NAME.npy without an NPY header + NAME.csv.gz (else --eos-id)
    Token datasets are read in place; --token-dtype says a dtype they do not.
    Use - to read stdin.  Without --format, the format comes from the
    extension, else from the first bytes (NPY, NPZ and the other binary
    formats; JSON when the input is one value, JSON Lines when a second line
    starts another).

    Into an existing container the tensor --name is added and the file's
    other tensors are kept; a tensor of that name already there needs
    --append (add sequences to it), --overwrite (replace it) or --force
    (replace the whole file).

    \b
    Example:
      lodtool pack sample_data/articles.json -o articles.lod.h5 --level-names article,sentence
      cat docs.jsonl | lodtool pack - --format jsonl -o docs.lod.h5
      lodtool pack corpus.parquet --column tokens -o corpus.lod.h5
      lodtool pack shards/*.jsonl -o corpus/ --shard-size 1GB
      lodtool pack shards/*.jsonl -o corpus/ --scheduler processes --workers 8   # one shard per input
      lodtool pack docs.jsonl -o docs.lod.h5 --dtype auto-int
      lodtool pack corpus -o corpus.lod.h5            # corpus.bin + corpus.idx (Megatron)
      lodtool pack part-0.npy --token-dtype uint32 --eos-id 50279 -o part-0.lod.h5
      lodtool pack corpus.jsonl --tokenizer tokenizer.json -o corpus.lod.h5 --split sentences --add-eos
      lodtool pack words.jsonl --words -o words.lod.h5 --min-count 2     # [["the","cat"],["sat"]] per line
    """
    from .. import tasks

    if append and overwrite:
        raise click.UsageError("--append adds to the tensor and --overwrite replaces it: give one of them")
    if append and force:
        raise click.UsageError("--append adds to a file and --force replaces it: give one of them")
    tokens = _token_info(vocab_size, bos_id, pad_id, tokenizer_name)
    text = _text_options(tokenizer, text_field, documents, split, add_bos, add_eos, special_tokens, no_tokenizer_json,
                         words, vocab, min_count)
    if shard_size or scheduler or output.endswith(("/", os.sep)) or os.path.isdir(output):
        _pack_sharded(ctx, inputs, output, fmt, lod_level, dtype, name, level_names, compression, append,
                      shard_size, scheduler, workers, column, max_memory, overwrite, force, as_json,
                      token_dtype=token_dtype, eos_token_id=eos_token_id, tokens=tokens, text=text)
        return

    if append and output == "-":
        raise click.UsageError("--append needs a file, not stdout")
    from ..io.token_datasets import input_bytes

    total = sum(input_bytes(p) or 0 for p in inputs if p != "-") or None
    from ._render import progress

    with progress(total, "packing", not opt.is_quiet(ctx) and not as_json) as tick, \
            opt.container_output(output) as path:
        result = tasks.pack(list(inputs), path, format=fmt, lod_level=lod_level, dtype=dtype, name=name,
                            level_names=opt.split_names(level_names), compression=compression, append=append,
                            progress=tick, column=column, max_memory=opt.parse_size(max_memory),
                            overwrite=overwrite, force=force, token_dtype=token_dtype, eos_token_id=eos_token_id,
                            tokens=tokens, text=text)
    summary = {"output": output, "name": result.name, "sequences": result.sequences, "rows": result.rows,
               "lod_level": result.lod_level, "dtype": str(result.dtype), "bytes_read": result.bytes_read,
               "bytes_saved": result.bytes_saved, "stored_bytes": result.stored_bytes}
    if as_json:
        opt.emit_json(summary)
        return
    if result.detected_format:
        opt.message(ctx, f"read the input as {result.detected_format} (from its first bytes; --format chooses)")
    if output != "-":
        verb = "appended" if append else "packed"
        saved = ""
        if result.bytes_saved:  # compression takes much of what a narrower dtype saves: say both
            saved = (f"; {result.dtype} holds every value: {result.bytes_saved:,} bytes less than int64 before "
                     f"compression, {result.stored_bytes:,} bytes on disk")
        opt.message(ctx, f"{verb} {counted(result.sequences, 'sequence')}, {counted(result.rows, 'row')} "
                         f"({result.dtype}, {counted(result.lod_level, 'LoD level')}) into "
                         f"{output}:{result.name}{saved}")


def _pack_sharded(ctx, inputs, output, fmt, lod_level, dtype, name, level_names, compression, append, shard_size,
                  scheduler, workers, column, max_memory, overwrite, force, as_json, **token_metadata):
    """``pack -o DIR/``: a sharded folder, streamed in order, or one shard per input on Dask (--scheduler)."""
    from .. import tasks
    from ._render import partition_progress

    if output == "-":
        raise click.UsageError("a sharded folder cannot go to stdout; give -o DIR/")
    with partition_progress("packing shards", not opt.is_quiet(ctx) and not as_json) as tick:
        info = tasks.pack_sharded(list(inputs), output, shard_size=opt.parse_size(shard_size or "1GB"),
                                  append=append, scheduler=scheduler, workers=workers, progress=tick, format=fmt,
                                  lod_level=lod_level, dtype=dtype, name=name,
                                  level_names=opt.split_names(level_names), compression=compression,
                                  column=column, max_memory=opt.parse_size(max_memory), overwrite=overwrite,
                                  force=force, **token_metadata)
    if as_json:
        opt.emit_json(info)
    else:
        what = (f"{counted(info['sequences'], 'sequence')}, {counted(info['rows'], 'row')} ({info['dtype']}, "
                f"{counted(info['lod_level'], 'LoD level')}) in {counted(info['shards'], 'shard')}")
        opt.message(ctx, f"appended to {output}: now {what}" if append else f"packed {what} into {output}")
