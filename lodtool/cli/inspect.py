"""``lodtool inspect``: tensors, levels and length statistics, from the offsets alone."""

from __future__ import annotations

import click

from . import _options as opt


@click.command("inspect")
@click.argument("file")
@opt.json_option
@opt.isolate_option
@click.option("--timeout", type=float, default=60.0, show_default=True, help="Seconds with --isolate.")
@click.pass_context
def inspect(ctx, file, as_json, isolate, timeout):
    """Show the format version and, per tensor, dtype, element shape, rows, levels
    (with names), sequences per level and length statistics (min / median / mean /
    max / empty), compression and sizes.  Reads the offsets, never the data.

    \b
    Example:
      lodtool inspect articles.lod.h5
      lodtool inspect --json articles.lod.h5 | jq '.tensors[].levels'
    """
    from .. import tasks

    with opt.input_path(file) as path:
        info = tasks.inspect(path, isolate=isolate, timeout=timeout)
    if file == "-":
        info["path"] = "-"
    if as_json:
        opt.emit_json(info)
    else:
        from ._render import inspect_report

        inspect_report(info)
