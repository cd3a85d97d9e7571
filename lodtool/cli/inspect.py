"""``lodtool inspect``: tensors, levels and length statistics, from the offsets alone."""

from __future__ import annotations

import click

from . import _options as opt


@click.command("inspect")
@click.argument("files", nargs=-1, required=True, metavar="FILE...", type=opt.PATH)
@opt.name_option
@opt.json_option
@opt.isolate_option
@click.option("--timeout", type=float, default=60.0, show_default=True, help="Seconds with --isolate.")
@opt.token_options
@click.pass_context
def inspect(ctx, files, name, as_json, isolate, timeout, token_dtype, eos_token_id):
    """Show the format version and, per tensor, dtype, element shape, rows, levels
    (with names), sequences per level and length statistics (min / median / mean /
    max / empty), compression and sizes.  Reads the offsets, never the data.

    A token dataset of LLM training (a Megatron or fairseq PREFIX, a datatrove
    .ds, a dolma .npy) is described in place: its format, files and levels.

    FILE:tensor (or --name) shows that tensor only.  With --json one file gives one JSON
    object; several files give one object per line (JSON Lines).

    \b
    Example:
      lodtool inspect articles.lod.h5
      lodtool inspect --json articles.lod.h5 | jq '.tensors[].levels'
      lodtool inspect *.lod.h5
    """
    from .. import tasks
    from ..errors import LodFileNotFoundError

    only = name
    for ref in files:
        file, name = opt.tensor_ref(ref, only)
        with opt.input_path(file) as path:  # every tensor summarised before a byte of this file's report is written
            info = tasks.inspect(path, isolate=isolate, timeout=timeout, token_dtype=token_dtype,
                                 eos_token_id=eos_token_id, spooled=True)
        if file == "-":
            info["path"] = "-"
        if name is not None:
            info["tensors"] = [t for t in info["tensors"] if t["name"] == name]
            if not info["tensors"]:
                raise LodFileNotFoundError(f"{file}: no tensor named {name!r}")
        if as_json:
            opt.emit_json(info)
        else:
            from ._render import inspect_report

            inspect_report(info)

