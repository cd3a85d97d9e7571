"""``lodtool validate``: check containers against the format and the LoD rules."""

from __future__ import annotations

import dataclasses

import click

from . import _options as opt


@click.command("validate")
@click.argument("files", nargs=-1, required=True, metavar="FILE...", type=opt.PATH)
@opt.json_option
@opt.isolate_option
@click.option("--timeout", type=float, default=60.0, show_default=True, help="Seconds per file with --isolate.")
@opt.max_memory_option
@opt.token_options
@click.option("--vocab-size", type=click.IntRange(min=1), default=None, metavar="N",
              help="Check every token id is under N (reads the data, in blocks; default: the vocabulary a "
                   "container records).")
@click.pass_context
def validate(ctx, files, as_json, isolate, timeout, max_memory, token_dtype, eos_token_id, vocab_size):
    """Validate containers: the format, every dataset's shape and dtype, and the LoD.

    Every problem is listed with file, tensor, level and index (FILE:tensor
    checks the whole FILE; - reads a container from stdin).  Reads the
    offsets, and the data only to check token ids.  A token dataset of LLM
    training (a Megatron or fairseq PREFIX, a datatrove .ds, a dolma .npy) is
    checked in place by its format's rules, each violation named by file,
    array and index.  With --vocab-size N (or a vocabulary the container
    records) every token id is checked under N, block by block, the first bad
    rows named.  Exit 0: all valid; 1: a file is invalid; 2: a file is
    unreadable (missing, not HDF5, not a lodtool container).

    \b
    Example:
      lodtool validate articles.lod.h5
      lodtool validate --json *.lod.h5 | jq '.[] | select(.ok | not)'
      lodtool validate corpus --vocab-size 50304         # corpus.bin + corpus.idx
    """
    from .. import tasks

    files = [opt.tensor_ref(f, None)[0] for f in files]  # FILE:tensor checks the whole FILE
    with opt.stdin_among(files) as (paths, spooled):
        reports = tasks.validate(paths, max_memory=opt.parse_size(max_memory), isolate=isolate, timeout=timeout,
                                 token_dtype=token_dtype, eos_token_id=eos_token_id, vocab_size=vocab_size)
    reports = [_from_stdin(r) if r.path == spooled else r for r in reports]
    if as_json:
        opt.emit_json([r.to_dict() for r in reports])
    elif not opt.is_quiet(ctx) or any(not r.ok for r in reports):
        from ._render import validation_report

        validation_report(reports)
    if any(r.error for r in reports):
        ctx.exit(2)
    if any(not r.ok for r in reports):
        ctx.exit(1)


def _from_stdin(report):
    """A report on the file stdin was spooled to, naming it ``-``."""
    problems = [dataclasses.replace(p, file="-") for p in report.problems]
    return dataclasses.replace(report, path="-", problems=problems)
