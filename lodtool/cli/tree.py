"""``lodtool tree``: a tensor drawn as the tree of its branches, or as the seeds' bars."""

from __future__ import annotations

import click

from . import _options as opt
from ..errors import LodUsageError
from ..lod import format_path, parse_path, resolve_branch

#: --style bars draws every element mark; beyond this it would not fit a screen
MAX_BARS_ROWS = 2000


@click.command("tree")
@click.argument("file")
@opt.name_option
@click.option("--depth", "-d", type=click.IntRange(min=1), default=3, show_default=True,
              help="How many levels to expand.")
@click.option("--max-children", "-k", type=click.IntRange(min=1), default=10, show_default=True,
              help="Children shown per node; the rest become '… N more'.")
@click.option("--path", "-p", "branch", default=None, metavar="P", help="Draw only the sub-tree under <P>.")
@click.option("--style", type=click.Choice(["tree", "bars"]), default="tree", show_default=True,
              help="tree: branches with lengths and previews; bars: the seeds' rows of lengths over |||.")
def tree(file, name, depth, max_children, branch, style):
    """Draw a tensor as a tree: each node shows its branch <i,j>, its length and, at
    the leaves, a preview of the elements.  Only what is shown is read from disk.

    \b
    Example:
      lodtool tree articles.lod.h5
      lodtool tree docs.lod.h5 --path 38000 --depth 2 --max-children 5
      lodtool tree articles.lod.h5 --style bars
    """
    from ..format.container import open_file
    from ._render import TreeSource, bars, build_tree, console, print_

    path = parse_path(branch) if branch else ()
    with opt.input_path(file) as src, open_file(src) as f:
        t = f.tensor(name)
        source = TreeSource(t, lazy=True)
        if not t.lod_level and path:
            raise LodUsageError("a 0-level tensor has no branches; drop --path")
        if t.lod_level:
            level, begin, end = resolve_branch(path, t.read_offsets, source.level_sizes, t.n_rows)
        else:
            level, begin, end = 0, 0, t.n_rows
        if style == "bars":
            rows = _row_count(t, level, begin, end)
            if rows > MAX_BARS_ROWS:
                raise LodUsageError(f"{rows:,} elements are too many to draw as bars (limit {MAX_BARS_ROWS}); "
                                    "pick a smaller part with --path")
            part = t.branch(*path) if path else t.read()
            lengths = part.recursive_sequence_lengths or [[part.shape[0]]]
            for line in bars(lengths, len(part.element_shape)):
                console().print(line, markup=False, highlight=False)
            return
        shape = "×".join(map(str, t.element_shape)) or "scalar"
        title = (f"[bold]{t.name}[/] {format_path(path) if path else ''} "
                 f"[dim]{t.dtype} {shape}, {t.lod_level - level} level(s), {end - begin:,} "
                 f"{'sequences' if level < t.lod_level else 'rows'}[/]")
        print_(build_tree(source, title, path, level, begin, end, depth=depth, max_children=max_children))


def _row_count(t, level: int, begin: int, end: int) -> int:
    for k in range(level, t.lod_level):
        begin = int(t.read_offsets(k, begin, begin + 1)[0])
        end = int(t.read_offsets(k, end, end + 1)[0])
    return end - begin
