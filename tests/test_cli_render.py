"""Rendering for humans: inspect's table of levels is drawn as rich's Table draws it."""

from __future__ import annotations

import io
import re

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from rich.table import Table
from rich.text import Text

from lodtool.cli._render import levels_table, rich_levels_table

_numbers = st.one_of(st.just("-"), st.integers(0, 10**13).map(lambda n: f"{n:,}"),
                     st.floats(0, 1e6, allow_nan=False).map(lambda v: f"{v:,.2f}"))
_names = st.one_of(st.text(alphabet="abcdefgh_- .0123456789", max_size=30),
                   st.text(max_size=12))  # anything: brackets, backslashes, colons, wide and control characters
_row = st.tuples(st.integers(0, 9).map(str), _names, _numbers, _numbers, _numbers, _numbers, _numbers, _numbers)




def _drawn(renderable, width: int, terminal: bool) -> str:
    out = io.StringIO()
    Console(file=out, width=width, soft_wrap=False, highlight=False, force_terminal=terminal,
            color_system="standard" if terminal else None).print(renderable)
    return re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue())  # a terminal's styles: the same text either way


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(_row, min_size=1, max_size=4), width=st.sampled_from([40, 80, 120, 200]))
def test_levels_table_draws_what_richs_table_draws(rows, width):
    printable_rows = [tuple(cell.encode("unicode_escape").decode() if not cell.isprintable() else cell for cell in row)
                      for row in rows]  # what inspect passes: names already made printable
    for terminal in (False, True):
        assert _drawn(levels_table(printable_rows, width), width, terminal) == _drawn(
            rich_levels_table(printable_rows), width, terminal)


def test_levels_table_is_drawn_directly_when_it_is_plain_and_fits():
    plain = [("0", "doc", "3", "1", "2", "2.00", "3", "0"),
             ("1", "sentence", "1,234,567", "0", "1.5", "2.33", "9", "1")]
    assert isinstance(levels_table(plain, 200), Text)
    assert isinstance(levels_table(plain, 40), Table)  # narrower than the table: rich lays it out
    assert isinstance(levels_table([("0", ":smile:", "1", "1", "1", "1.00", "1", "0")], 200), Table)
