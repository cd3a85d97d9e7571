"""``lodtool verify``: recompute the checksums recorded in containers."""

from __future__ import annotations

import dataclasses

import click

from . import _options as opt


@click.command("verify")
@click.argument("files", nargs=-1, required=True, metavar="FILE...", type=opt.PATH)
@opt.json_option
@opt.isolate_option
@click.option("--timeout", type=float, default=600.0, show_default=True, help="Seconds per file with --isolate.")
@click.pass_context
def verify(ctx, files, as_json, isolate, timeout):
    """Recompute the checksum of every dataset and name each one that does not match
    (FILE:tensor checks the whole FILE; - reads a container from stdin).  A progress
    bar shows on a terminal.

    Exit 0: all match; 1: a mismatch (or a crash with --isolate); 2: unreadable.

    \b
    Example:
      lodtool verify articles.lod.h5
      lodtool verify --json *.lod.h5
    """
    from .. import tasks

    from ._render import no_progress, progress

    files = [opt.tensor_ref(f, None)[0] for f in files]  # FILE:tensor checks the whole FILE
    shown = not opt.is_quiet(ctx) and not as_json
    with opt.stdin_among(files) as (paths, spooled), progress(None, "verifying", shown) as tick:
        # the bytes to hash are added up first only for a bar that shows them (a pass over every tensor's metadata)
        reports = tasks.verify(paths, isolate=isolate, timeout=timeout, progress=None if tick is no_progress else tick)
    reports = [dataclasses.replace(r, path="-") if r.path == spooled else r for r in reports]
    if as_json:
        opt.emit_json([r.to_dict() for r in reports])
    else:
        from ._render import detail_line, status_line

        for r in reports:
            if r.error:
                status_line("unreadable", "red", f"{r.path}: {r.error}")
            elif r.nothing_to_verify:
                status_line("nothing to verify", "yellow", f"{r.path}: {r.nothing_to_verify}")
            elif r.ok:
                if not opt.is_quiet(ctx):
                    status_line("ok", "green", f"{r.path} ({r.checked} datasets)")
            else:
                status_line("mismatch", "red", r.path)
                for m in r.mismatches:
                    detail_line(f"{r.path}: {m}")
    if any(r.error for r in reports):
        ctx.exit(2)
    if any(not r.ok for r in reports):
        ctx.exit(1)
