"""``lodtool slice`` / ``head`` / ``tail``: parts of a tensor, read lazily from disk."""

from __future__ import annotations

import sys

import click

from . import _options as opt
from ..lod import counted


#: the level a token format stores (the library's ``level=`` of its writer, unpack's --level), which slice's own
#: --level is not: the library's ``level=...`` reads ``--store-level`` on these commands
store_level_option = click.option(
    "--store-level", "store_level", type=click.IntRange(min=0), default=None, metavar="K",
    help="megatron, fairseq, datatrove, dolma: store level K's sequences, the levels under it flattened into their "
         "tokens (needed when the excerpt has more levels than the format; unpack's --level).")
OPTION_OF_KEYWORD = {"level": "store_level"}


def _write_result(ctx, tensor, output, fmt, name, overwrite=False, force=False, tokens=None, store_level=None,
                  decoder=None):
    from .. import tasks

    if fmt == "h5":
        if output is None:
            raise click.UsageError("a container needs -o PATH (or -o - for stdout)")
        with opt.container_output(output) as path:
            tasks.export(tensor, path, to="h5", name=name, overwrite=overwrite, force=force, tokens=tokens,
                         level=store_level)
    else:
        tasks.export(tensor, sys.stdout.buffer if output in (None, "-") else output, to=fmt, name=name,
                     level=store_level, decoder=decoder)


def _refuse_output_over(file, output, fmt):
    """JSON / NPZ over the input would replace it; a container output adds to it (the write rule)."""
    from ..atomic import refuse_output_over_input

    if fmt != "h5" and output is not None:
        refuse_output_over_input(output, [file])


@click.command("slice", context_settings={"ignore_unknown_options": True})
@click.argument("file", type=opt.PATH)
@click.argument("path", required=False)
@opt.name_option
@click.option("--level", type=int, default=None, help="With --range: slice this level instead of a branch.")
@click.option("--range", "range_", default=None, metavar="A:B",
              help="Sequences A..B of --level, as a Python slice (5:, :3, -2:; clamped to the level, and said so).")
@opt.to_option(opt.FORMATS_OUT)
@opt.output_option()
@opt.replace_options
@store_level_option
@opt.token_options
@click.pass_context
def slice_(ctx, file, path, name, level, range_, to, output, overwrite, force, store_level, token_dtype,
           eos_token_id):
    """Extract the <i,j,...>-slice (a branch and everything under it) as a tensor of its own.

    PATH is written 2, 2,0 or '<2,0>'; negative indices count from the end.
    Only a few offsets and one contiguous block of data are read from disk.
    The output is a container (-o x.h5 or --to h5) or what unpack writes.

    \b
    Example:
      lodtool slice articles.lod.h5 '<2>' --to json        # article 2: [[11,12],[13,14,15]]
      lodtool slice articles.lod.h5 2,0 -o sentence.lod.h5
      lodtool slice articles.lod.h5 --level 1 --range 2:4 --to jsonl
      lodtool slice books.lod.h5 --level 0 --range :100 --to datatrove --store-level 1 -o first100.ds
    """
    from .. import tasks

    if (level is None) != (range_ is None):
        raise click.UsageError("--level and --range go together")
    if level is not None and path is not None:
        raise click.UsageError("give a branch PATH or --level/--range, not both")
    if level is None and path is None:
        raise click.UsageError("give a branch PATH (e.g. 2,0) or --level L --range A:B")
    file, name = opt.tensor_ref(file, name)
    fmt = opt.output_format(output, to, "json")
    opt.refuse_binary_on_terminal(output, fmt)
    _refuse_output_over(file, output, fmt)
    begin, end = _literal_range(range_) if range_ is not None else (None, None)
    with opt.input_path(file) as src:
        part = tasks.slice(src, path, name=name, level=level, start=begin, stop=end, token_dtype=token_dtype,
                           eos_token_id=eos_token_id)
        if part.taken is not None and part.taken != (begin, end):
            opt.message(ctx, f"--range {range_} is sequences {part.taken[0]}:{part.taken[1]} of level {level} "
                             f"({counted(part.level_count, 'sequence')})")
        _write_result(ctx, part.tensor, output, fmt, part.name, overwrite, force, part.tokens, store_level)


slice_.option_of_keyword = OPTION_OF_KEYWORD


def _literal_range(text: str) -> tuple[int | None, int | None]:
    try:
        a, b = text.split(":")
        return (int(a) if a.strip() else None), (int(b) if b.strip() else None)
    except ValueError:
        raise click.BadParameter(f"{text!r}: write the range as A:B (either may be left out, as in Python: "
                                 "5:, :3, -2:)", param_hint="--range") from None


def _head_tail(which: str):
    @click.command(which)
    @click.argument("file", type=opt.PATH)
    @click.option("-n", "--count", "count", type=click.IntRange(min=1), default=5, show_default=True,
                  help="How many top-level sequences.")
    @opt.name_option
    @opt.to_option(("tree", *opt.FORMATS_OUT))
    @opt.output_option()
    @opt.replace_options
    @click.option("--json", "as_json", is_flag=True, help="The sequences as one JSON document (as --to json).")
    @store_level_option
    @opt.token_options
    @click.option("--text", "as_text", is_flag=True,
                  help="Text beside the ids (a tree), or text instead of ids (jsonl, json), decoded by the "
                       "tokenizer the tensor stores.")
    @click.pass_context
    def command(ctx, file, count, name, to, output, overwrite, force, as_json, store_level, token_dtype, eos_token_id,
                as_text):
        from .. import tasks

        if as_json:
            if to not in (None, "json"):
                raise click.UsageError(f"--json writes json; it contradicts --to {to}")
            to = "json"
        default = "tree" if output is None and sys.stdout.isatty() else "jsonl"
        file, name = opt.tensor_ref(file, name)
        fmt = opt.output_format(output, to, default)
        opt.refuse_binary_on_terminal(output, fmt)
        _refuse_output_over(file, output, fmt)
        if as_text and fmt not in ("tree", "jsonl", "json"):
            raise click.UsageError(f"--text shows text in a tree, jsonl or json, not {fmt}")
        if store_level is not None and fmt == "tree":
            raise click.UsageError("--store-level chooses the level a token format stores; a tree shows every level")
        with opt.input_path(file) as src:
            excerpt = (tasks.head if which == "head" else tasks.tail)(src, count, name=name, token_dtype=token_dtype,
                                                                      eos_token_id=eos_token_id)
            part = excerpt.tensor
            decoder = None
            if as_text:
                from ..text import decoder_for

                decoder = decoder_for(excerpt.tokens, f"{file}: tensor {excerpt.name!r}")
            if fmt == "tree":
                from ._render import TreeSource, build_tree, markup_safe, print_

                first = 0 if which == "head" or not part.lod_level else excerpt.total - len(part)
                src_ = TreeSource(part, lazy=False)
                title = f"[bold]{markup_safe(excerpt.name)}[/] {which} {len(part)} of {excerpt.total:,}"
                top = src_.level_sizes[0] - 1 if part.lod_level else part.shape[0]
                print_(build_tree(src_, title, (), 0, 0, top, depth=part.lod_level or 1, max_children=count,
                                  first_label=first, decoder=decoder))
            else:
                _write_result(ctx, part, output, fmt, excerpt.name, overwrite, force, excerpt.tokens, store_level,
                              decoder)

    command.option_of_keyword = OPTION_OF_KEYWORD
    command.help = (f"The {'first' if which == 'head' else 'last'} K top-level sequences: a tree on a terminal, "
                    "jsonl when piped.\n\n\b\nExample:\n"
                    f"  lodtool {which} docs.lod.h5 -n 3\n  lodtool {which} docs.lod.h5 -n 3 --to jsonl | jq length")
    return command


head = _head_tail("head")
tail = _head_tail("tail")
