"""Rendering for humans: rich tables and trees, the seeds' bars picture, progress bars.

rich is imported only here, and only when something is drawn, so commands that
print JSON start fast.  All drawing goes through one Console, which honours
NO_COLOR / FORCE_COLOR and drops colour when stdout is not a terminal.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from ..limits import human_bytes
from ..lod import format_path

_console = None


def console():
    global _console
    if _console is None:
        from rich.console import Console

        _console = Console(soft_wrap=False, highlight=False)
        if not _console.is_terminal and "COLUMNS" not in os.environ:
            # into a pipe or a file: rich would wrap at 80 columns; keep a report line whole instead
            _console.width = PIPE_WIDTH
    return _console


#: the width reports get when stdout is not a terminal (and COLUMNS does not say otherwise)
PIPE_WIDTH = 200


def printable(text: Any) -> str:
    """``text`` with every control character shown as its escape (``\\x1b``, ``\\n``, ``\\u202e``).

    Names and messages come from files: raw, an ESC or OSC sequence would retitle or clear the
    terminal, and a newline could forge an "ok" line.  Everything printed from a file goes through this.

    >>> printable("a\\x1b]0;pwned\\x07b\\nok")
    'a\\\\x1b]0;pwned\\\\x07b\\\\nok'
    """
    text = str(text)
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() or ch == " " else ch.encode("unicode_escape").decode("ascii")
                   for ch in text)


def markup_safe(text: Any) -> str:
    """:func:`printable`, then escaped for rich markup (a name like ``[red]`` is drawn as it is)."""
    from rich.markup import escape

    return escape(printable(text))


def print_(renderable: Any) -> None:
    console().print(renderable)


def plain_output() -> bool:
    """Whether line reports go out as plain text: stdout is not a terminal and no colour is forced.

    Plain lines skip rich's import (~25 ms for a command run in a shell loop)
    and are never wrapped, so a pipe gets one whole line per file or problem.
    """
    return not sys.stdout.isatty() and not os.environ.get("FORCE_COLOR")


def print_rows(lines: Sequence[str]) -> bool:
    """Rows whose columns line up (the bars picture): whole into a pipe; on a terminal each row longer
    than its width is cut at the same column and ends in ``…``, so what is shown stays aligned.

    Returns whether any row was cut.
    """
    con = console()
    if not con.is_terminal:
        sys.stdout.write("".join(f"{line}\n" for line in lines))
        return False
    from rich.cells import cell_len, set_cell_size

    width, cut = con.width, False
    for line in lines:
        if cell_len(line) > width:
            line, cut = set_cell_size(line, width - 1) + "…", True
        con.print(line, markup=False, highlight=False, crop=False)
    return cut


def status_line(tag: str, style: str, rest: str) -> None:
    """``tag rest`` on stdout, the tag in ``style`` on a terminal (``rest`` is never read as markup)."""
    rest = printable(rest)
    if plain_output():
        sys.stdout.write(f"{tag} {rest}\n")
        return
    from rich.markup import escape

    console().print(f"[{style}]{escape(tag)}[/] {escape(rest)}")


def detail_line(text: str) -> None:
    """An indented detail under a status line, never wrapped in a pipe, never read as markup."""
    text = printable(text)
    if plain_output():
        sys.stdout.write(f"  {text}\n")
    else:
        console().print(f"  {text}", markup=False)


# -- sizes -------------------------------------------------------------------------------------
# -- inspect -----------------------------------------------------------------------------------
def inspect_report(info: dict) -> None:
    con = console()
    version = f" v{markup_safe(info['format_version'])}" if info.get("format_version") else ""
    files = f", {len(info['files'])} files" if len(info.get("files", ())) > 1 else ""
    con.print(f"[bold]{markup_safe(info['path'])}[/]  {markup_safe(info.get('format', 'lodtool'))} format{version}"
              f"  ({human_bytes(info.get('file_size', 0))} on disk{files})")
    if info.get("layout"):
        page = f" (pages of {human_bytes(info['page_size'])})" if info.get("page_size") else ""
        ready = ("laid out for remote reading" if info.get("remote_ready") else
                 "not laid out for remote reading: lodtool merge FILE -o NEW --layout paged")
        con.print(f"layout {info['layout']}{page}: {ready}")
    for t in info["tensors"]:
        shape = "×".join(str(d) for d in t["element_shape"]) or "scalar"
        shared = f"  offsets shared with {markup_safe(', '.join(t['shared_lod_with']))}" \
            if t.get("shared_lod_with") else ""
        con.print(f"\n[bold cyan]{markup_safe(t['name'])}[/]  {t['dtype']}  element {shape}  {t['rows']:,} rows  "
                  f"{t['lod_level']} LoD level{'' if t['lod_level'] == 1 else 's'}  compression {t['compression']}"
                  f"{' (memory-mapped)' if t.get('memory_mapped') else ''}  "
                  f"{human_bytes(t['nbytes'])} data, {human_bytes(t['storage_size'])} stored{shared}")
        if t.get("tokens"):
            con.print(f"tokens: {markup_safe(tokens_text(t['tokens']))}")
        if not t["levels"]:
            continue
        rows = [(str(lv["level"]), printable(lv.get("name") or ""), f"{lv['sequences']:,}", _num(lv["min"]),
                 _num(lv["median"]), _num(lv["mean"], 2), _num(lv["max"]), f"{lv['empty']:,}") for lv in t["levels"]]
        con.print(levels_table(rows, con.width))


#: the columns of ``inspect``'s table of a tensor's levels (``name`` is left-justified, the numbers right-justified)
LEVEL_COLUMNS = ("level", "name", "sequences", "min", "median", "mean", "max", "empty")


def rich_levels_table(rows: Sequence[Sequence[str]]):
    """The table of levels as a rich ``Table`` (what :func:`levels_table` draws itself where the cells are plain)."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(show_edge=False, header_style="bold")
    for col in LEVEL_COLUMNS:
        table.add_column(col, justify="left" if col == "name" else "right")
    for row in rows:
        table.add_row(*(escape(cell) for cell in row))
    return table


def levels_table(rows: Sequence[Sequence[str]], width: int):
    """``inspect``'s table of a tensor's levels (``rows`` of :data:`LEVEL_COLUMNS`, as printed): the lines rich's
    ``Table(show_edge=False, header_style="bold")`` draws, made directly where its layout is that simple one (plain
    ASCII cells, no ``:emoji:`` code or backslash, within ``width``), else that Table.  rich takes about 4 ms to
    lay out a table, which a file of 30,000 tensors paid for two minutes.

    >>> from rich.console import Console
    >>> rows = [("0", "doc", "3", "1", "2", "2.00", "3", "0")]
    >>> Console(width=80).print(levels_table(rows, 80))  # doctest: +NORMALIZE_WHITESPACE
     level ┃ name ┃ sequences ┃ min ┃ median ┃ mean ┃ max ┃ empty
    ━━━━━━━╇━━━━━━╇━━━━━━━━━━━╇━━━━━╇━━━━━━━━╇━━━━━━╇━━━━━╇━━━━━━━
         0 │ doc  │         3 │   1 │      2 │ 2.00 │   3 │     0
    """
    from rich.text import Text

    cells = [LEVEL_COLUMNS, *rows]
    widths = [max(len(row[c]) for row in cells) for c in range(len(LEVEL_COLUMNS))]
    simple = sum(widths) + 3 * len(widths) - 1 <= width and all(
        cell.isascii() and cell.isprintable() and ":" not in cell and "\\" not in cell for row in rows for cell in row)
    if not simple:
        return rich_levels_table(rows)

    def line(row: Sequence[str], separator: str) -> str:
        return separator.join(f" {cell.ljust(w) if name == 'name' else cell.rjust(w)} "
                              for cell, w, name in zip(row, widths, LEVEL_COLUMNS))

    header = line(LEVEL_COLUMNS, "┃")
    text = Text("\n".join([header, "╇".join("━" * (w + 2) for w in widths), *(line(row, "│") for row in rows)]),
                no_wrap=True)
    text.stylize("bold", 0, len(header))
    return text


def tokens_text(tokens: dict) -> str:
    """``inspect``'s line for a tensor's token metadata (the ``tokens`` entry of ``inspect --json``)."""
    from ..tokens import describe_tokens

    return f"unreadable ({tokens['error']})" if "error" in tokens else describe_tokens(tokens)


def _num(v, digits: int = 0) -> str:
    if v is None:
        return "-"
    if digits and isinstance(v, float):
        return f"{v:,.{digits}f}"
    return f"{v:,.0f}" if isinstance(v, float) and v.is_integer() else f"{v:,}"


# -- validate / verify -------------------------------------------------------------------------
def validation_report(reports: Sequence[Any]) -> None:
    for rep in reports:
        if rep.error:
            status_line("unreadable", "red", f"{rep.path}: {rep.error}")
        elif rep.ok:
            status_line("ok", "green", rep.path)
        else:
            status_line("invalid", "red", f"{rep.path}: {len(rep.problems)} problem(s)")
            for p in rep.problems:
                detail_line(problem_text(p))


def problem_text(p: Any) -> str:
    where = [f"tensor {p.tensor!r}"] if getattr(p, "tensor", None) else []
    if getattr(p, "level", None) is not None:
        where.append(f"level {p.level}")
    if getattr(p, "index", None) is not None:
        where.append(f"index {p.index}")
    prefix = ", ".join(where)
    return f"{p.file}: {prefix}: {p.message}" if prefix else f"{p.file}: {p.message}"


# -- progress ----------------------------------------------------------------------------------
def no_progress(done: int, total: int | None = None) -> None:
    """The callback :func:`progress` gives where it draws no bar: a command given it need not learn a total."""


@contextlib.contextmanager
def progress(total: int | None, description: str, enabled: bool) -> Iterator[Callable[..., None]]:
    """A byte-progress bar on stderr; a no-op callback when disabled or stderr is no terminal.

    The callback takes the bytes done, and the total where it is learnt only as the work goes.
    """
    if not enabled or not sys.stderr.isatty():
        yield no_progress
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                  TimeRemainingColumn(), console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda done, total=None: bar.update(task, completed=done, total=total)


@contextlib.contextmanager
def partition_progress(description: str, enabled: bool) -> Iterator[Callable[[int, int], None]]:
    """A bar counting partitions (or shards) done on stderr; a no-op when disabled or stderr is no terminal."""
    if not enabled or not sys.stderr.isatty():
        yield lambda done, total: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


# -- trees -------------------------------------------------------------------------------------
class TreeSource:
    """What the tree and bars renderers need: offsets windows and a few rows of a leaf.

    Works over an in-memory LoDTensor or a lazy on-disk tensor, so drawing the
    top of a huge file reads only the offsets and rows it shows.
    """

    def __init__(self, tensor: Any, lazy: bool):
        self.t = tensor
        self.lazy = lazy
        self.lod_level = tensor.lod_level
        self.level_names = tensor.level_names
        self.element_shape = tuple(tensor.element_shape)
        if lazy:
            self.level_sizes = list(tensor.level_sizes)
        else:
            self.level_sizes = [len(o) for o in tensor.offsets]
        self.n_rows = tensor.n_rows if lazy else tensor.shape[0]

    def offsets(self, level: int, start: int, stop: int) -> np.ndarray:
        if self.lazy:
            return self.t.read_offsets(level, start, stop)
        return self.t.offsets[level][start:stop]

    def rows(self, seq: int, limit: int) -> tuple[np.ndarray, int]:
        """Up to ``limit`` rows of last-level sequence ``seq``, and its full length."""
        o = self.offsets(self.lod_level - 1, seq, seq + 2)
        begin, end = int(o[0]), int(o[1])
        if self.lazy:
            data = self.t.slice_level(self.lod_level - 1, seq, seq + 1).data[:limit] if end > begin else \
                np.empty((0,) + self.element_shape)
        else:
            data = self.t.data[begin:min(end, begin + limit)]
        return np.asarray(data), end - begin


def preview(rows: np.ndarray, total: int, element_shape: tuple, limit: int) -> str:
    if total == 0:
        return "[]"
    if element_shape and int(np.prod(element_shape)) > 4:
        return f"{total} × {element_shape} {rows.dtype}"
    items = [_fmt_element(r) for r in rows[:limit]]
    more = f", … +{total - limit}" if total > limit else ""
    return "[" + ", ".join(items) + more + "]"


def _fmt_element(r) -> str:
    if np.ndim(r) == 0:
        return repr(r.item()) if isinstance(r.item(), float) else str(r.item())
    return "[" + ", ".join(_fmt_element(x) for x in r) + "]"


def _level_name(src: TreeSource, level: int) -> str:
    if src.level_names and level < len(src.level_names):
        return src.level_names[level]
    return ""


#: token ids ``--text`` decodes for a leaf's preview
TEXT_PREVIEW_IDS = 24


def build_tree(src: TreeSource, title: str, path: Sequence[int], level: int, begin: int, end: int,
               depth: int, max_children: int, preview_items: int = 8, first_label: int = 0, decoder=None):
    """A rich Tree of entries ``begin..end`` of ``level``, ``depth`` levels deep.

    ``path`` is the branch the entries sit under; the top entries are labelled
    from ``first_label`` (tail numbers them from the end of the file).  Nodes are
    expanded with an explicit stack (no recursion); each level is cut to
    ``max_children``.  With a ``decoder`` (``--text``) each leaf also shows the
    text of its first :data:`TEXT_PREVIEW_IDS` ids.
    """
    from rich.markup import escape
    from rich.tree import Tree

    root = Tree(title)
    # (parent rich node, level, begin, end, path of parent, remaining depth)
    stack = [(root, level, begin, end, tuple(path), depth)]
    while stack:
        node, lv, b, e, ppath, remaining = stack.pop()
        shown = min(e - b, max_children)
        if lv == src.lod_level:  # rows of a 0-level view
            rows = src.t.data[b:b + shown] if not src.lazy else src.t.head(shown).data
            node.add(escape(preview(np.asarray(rows), e - b, src.element_shape, preview_items)))
            continue
        window = src.offsets(lv, b, b + shown + 1) if shown else np.zeros(1, np.int64)
        pending = []
        for k in range(shown):
            cpath = ppath + (k + (first_label if lv == level else 0),)
            length = int(window[k + 1] - window[k])
            name = _level_name(src, lv)
            label = f"[bold]{escape(format_path(cpath))}[/]" + (f" {markup_safe(name)}" if name else "")
            label += f"  [dim]len[/] {length}"
            if lv == src.lod_level - 1:
                rows, total = src.rows(b + k, preview_items)
                label += "  " + escape(preview(rows, total, src.element_shape, preview_items))
                if decoder is not None:
                    ids, total = src.rows(b + k, TEXT_PREVIEW_IDS)
                    label += "  [green]" + escape(repr(decoder.preview(ids, total > len(ids)))) + "[/]"
                node.add(label)
            else:
                child = node.add(label)
                if remaining > 1 and length:
                    pending.append((child, lv + 1, int(window[k]), int(window[k + 1]), cpath, remaining - 1))
        if e - b > shown:
            node.add(f"[dim]… {e - b - shown:,} more[/]")
        stack.extend(reversed(pending))
    return root


def tree_json(src: TreeSource, path: Sequence[int], level: int, begin: int, end: int, depth: int,
              max_children: int, preview_items: int = 8) -> dict:
    """What :func:`build_tree` draws, as JSON: nested nodes with branch, length and leaf values.

    Each node holds ``branch`` (the path), ``length`` and either ``children``
    (cut to ``max_children``, the rest counted in ``more``) or, at the last
    level, ``values`` (the first ``preview_items`` rows; ``more_values``).
    """
    def rows_of(lv: int, b: int, e: int) -> dict:
        shown = min(e - b, preview_items)
        data = src.t.data[b:b + shown] if not src.lazy else src.t.read_rows(b, b + shown)
        return {"values": np.asarray(data).tolist(), "more_values": e - b - shown}

    def children(lv: int, b: int, e: int, ppath: tuple, remaining: int, first: int = 0) -> dict:
        if lv == src.lod_level:
            return rows_of(lv, b, e)
        shown = min(e - b, max_children)
        window = src.offsets(lv, b, b + shown + 1) if shown else np.zeros(1, np.int64)
        nodes = []
        for k in range(shown):
            cpath = ppath + (k + first,)
            lo, hi = int(window[k]), int(window[k + 1])
            node = {"branch": list(cpath), "level": lv, "level_name": _level_name(src, lv) or None, "length": hi - lo}
            if lv == src.lod_level - 1:
                rows, total = src.rows(b + k, preview_items)
                node.update({"values": np.asarray(rows).tolist(), "more_values": total - len(rows)})
            elif remaining > 1:
                node.update(children(lv + 1, lo, hi, cpath, remaining - 1))
            nodes.append(node)
        return {"children": nodes, "more": e - b - shown}

    return {"branch": list(path), "level": level, "length": end - begin,
            **children(level, begin, end, tuple(path), depth)}


# -- the seeds' bars picture -------------------------------------------------------------------
def bars(lengths_per_level: Sequence[Sequence[int]], element_ndim: int) -> list[str]:
    """The seeds' picture of a LoD: one row of lengths per level over the element marks.

    Each label sits over the first column of its span, as in the user guide.

    >>> print("\\n".join(bars([[3, 1, 2], [3, 2, 4, 1, 2, 3]], 0)))
    3           1 2
    3   2  4    1 2  3
    ||| || |||| | || |||
    """
    mark = "口" if element_ndim >= 2 else "|"
    mark_width = _cell_width(mark)
    n_levels = len(lengths_per_level)
    # widths bottom-up: a leaf spans its marks; a node spans its children and its label
    widths: list[list[int]] = [[] for _ in range(n_levels)]
    last = lengths_per_level[-1]
    widths[-1] = [max(len(str(n)), n * mark_width, 1) for n in last]
    for lv in range(n_levels - 2, -1, -1):
        child_w = widths[lv + 1]
        pos = 0
        row = []
        for n in lengths_per_level[lv]:
            span = sum(child_w[pos:pos + n]) + max(n - 1, 0)
            label = len(str(n))
            if label > span and n:
                child_w[pos + n - 1] += label - span  # widen the last child; keeps the columns aligned
                _widen_down(widths, lengths_per_level, lv + 1, pos + n - 1, label - span)
                span = label
            row.append(max(span, label))
            pos += n
        widths[lv] = row
    lines = []
    for lv in range(n_levels):
        lines.append(_bars_row(lengths_per_level, widths, lv, None))
    lines.append(_bars_row(lengths_per_level, widths, n_levels - 1, mark))
    return [line.rstrip() for line in lines]


def _widen_down(widths, lengths, lv: int, index: int, extra: int) -> None:
    # widening node `index` of level lv widens its last child below, down to the leaves
    while lv + 1 < len(widths):
        start = sum(lengths[lv][:index])
        n = lengths[lv][index]
        if n == 0:
            return
        index = start + n - 1
        lv += 1
        widths[lv][index] += extra


def _bars_row(lengths, widths, target: int, mark: str | None) -> str:
    """Row of level ``target`` (labels) or, with ``mark``, the element marks under the last level."""
    def walk(lv: int, begin: int, end: int) -> list[str]:
        out = []
        child = sum(lengths[lv][:begin]) if lv + 1 < len(lengths) else 0
        for j in range(begin, end):
            n, w = lengths[lv][j], widths[lv][j]
            if lv == target:
                text = (mark * n) if mark else str(n)
                cells_used = n * _cell_width(mark) if mark else len(text)
                out.append(text + " " * (w - cells_used))
            else:
                inner = " ".join(walk(lv + 1, child, child + n))
                out.append(inner.ljust(w))
            child += n
        return out

    return " ".join(walk(0, 0, len(lengths[0])))


def _cell_width(mark: str) -> int:
    return 2 if mark == "口" else 1
