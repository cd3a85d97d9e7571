"""``lodtool tree``: a tensor drawn as the tree of its branches, or as the seeds' bars."""

from __future__ import annotations

import click

from . import _options as opt
from ..errors import LodUsageError
from ..lod import counted, format_path

#: --style bars draws every length label and element mark; beyond this many it would not fit a screen
MAX_BARS_ITEMS = 2000


@click.command("tree")
@click.argument("file", type=opt.PATH)
@opt.name_option
@click.option("--depth", "-d", type=click.IntRange(min=1), default=3, show_default=True,
              help="How many levels to expand.")
@click.option("--max-children", "-k", type=click.IntRange(min=1), default=10, show_default=True,
              help="Children shown per node; the rest become '… N more'.")
@click.option("--path", "-p", "branch", default=None, metavar="P", help="Draw only the sub-tree under <P>.")
@click.option("--style", type=click.Choice(["tree", "bars"]), default="tree", show_default=True,
              help="tree: branches with lengths and previews; bars: the seeds' rows of lengths over |||.")
@opt.json_option
@opt.token_options
@click.option("--text", "as_text", is_flag=True,
              help="Show each leaf's text beside its ids, decoded by the tokenizer the tensor stores.")
@click.pass_context
def tree(ctx, file, name, depth, max_children, branch, style, as_json, token_dtype, eos_token_id, as_text):
    """Draw a tensor as a tree: each node shows its branch <i,j>, its length and, at
    the leaves, a preview of the elements.  Only what is shown is read from disk.

    With --style bars, rows wider than the terminal are cut at its edge (…), and
    whole when piped.

    \b
    Example:
      lodtool tree articles.lod.h5
      lodtool tree docs.lod.h5 --path 38000 --depth 2 --max-children 5
      lodtool tree articles.lod.h5 --style bars
      lodtool tree articles.lod.h5 --json | jq '.children[0].length'
    """
    from .. import tasks
    from ._render import TreeSource, bars, build_tree, markup_safe, print_, print_rows

    file, name = opt.tensor_ref(file, name)
    with opt.input_path(file) as src, tasks.tree(src, name=name, branch=branch, token_dtype=token_dtype,
                                                 eos_token_id=eos_token_id) as view:
        t, path, level, begin, end = view.tensor, view.path, view.level, view.begin, view.end
        source = TreeSource(t, lazy=True)
        if as_json:
            from ._render import tree_json

            info = tree_json(source, path, level, begin, end, depth=depth, max_children=max_children)
            opt.emit_json({"name": t.name, "dtype": str(t.dtype), "element_shape": list(t.element_shape),
                           "lod_level": t.lod_level, **info})
            return
        if style == "bars":
            items = sum(view.counts())
            if items > MAX_BARS_ITEMS:  # checked from the offsets at the branch's edges, before anything is read
                raise LodUsageError(f"{items:,} sequences and elements are too many to draw as bars "
                                    f"(limit {MAX_BARS_ITEMS}); pick a smaller part with --path")
            part = view.read()
            lengths = part.recursive_sequence_lengths or [[part.shape[0]]]
            if print_rows(bars(lengths, len(part.element_shape))):
                opt.message(ctx, "rows cut at the terminal's edge (…): draw a part with --path, or pipe the output "
                                 "for whole rows")
            return
        shape = "×".join(map(str, t.element_shape)) or "scalar"
        title = (f"[bold]{markup_safe(t.name)}[/] {format_path(path) if path else ''} "
                 f"[dim]{t.dtype} {shape}, {counted(t.lod_level - level, 'level')}, "
                 f"{counted(end - begin, 'sequence' if level < t.lod_level else 'row')}[/]")
        decoder = None
        if as_text:
            from ..text import decoder_for

            decoder = decoder_for(t.tokens, f"{file}: tensor {t.name!r}")
        print_(build_tree(source, title, path, level, begin, end, depth=depth, max_children=max_children,
                          decoder=decoder))
