"""``lodtool batch``: plan training batches from a stored tensor's offsets; show their waste; write them out."""

from __future__ import annotations

import click

from . import _options as opt

MODES = ["sorted", "megabatch", "buckets", "pack", "random", "chunks"]
def _int_list(ctx, param, value):
    if value is None:
        return None
    try:
        items = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a comma-separated list of integers") from None
    if not items:
        raise click.BadParameter("give at least one integer")
    return items


def _number(ctx, param, value):
    if value is None:
        return None
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    raise click.BadParameter(f"{value!r} is not a number")


@click.command("batch")
@click.argument("file", type=opt.PATH)
@opt.name_option
@click.option("--level", type=int, default=None, help="The LoD level whose sequences are batched (default 0).")
@click.option("--mode", type=click.Choice(MODES), default=None, help="How batches are made (default sorted).")
@click.option("--max-tokens", type=click.IntRange(min=1), default=None,
              help="Padded tokens (rows) per batch: sequences x longest; the row length in pack mode.")
@click.option("--max-sequences", type=click.IntRange(min=1), default=None, help="Sequences per batch.")
@click.option("--multiple-of", type=click.IntRange(min=1), default=None,
              help="Batch sizes are multiples of this (fairseq's required_batch_size_multiple).")
@click.option("--seed", type=click.IntRange(min=0), default=None, help="Random seed (default 0).")
@click.option("--epoch", type=click.IntRange(min=0), default=None, help="Epoch: reshuffles per epoch (default 0).")
@click.option("--num-replicas", type=click.IntRange(min=1), default=None, help="Data-parallel replicas (default 1).")
@click.option("--rank", type=click.IntRange(min=0), default=None, help="This replica's rank (default 0).")
@click.option("--drop-last", is_flag=True, default=None,
              help="Drop an incomplete last batch and the batches that would make the replicas uneven.")
@click.option("--max-length", type=click.IntRange(min=1), default=None,
              help="Clip longer sequences to this many rows (see --truncate).")
@click.option("--oversize", type=click.Choice(["error", "skip"]), default=None,
              help="A sequence longer than --max-tokens: an error (default) or skipped.")
@click.option("--boundaries", callback=_int_list, default=None, metavar="B1,B2,..",
              help="Bucket boundaries (buckets mode): len < B1, B1 <= len < B2, ...")
@click.option("--bucket-batch-sizes", callback=_int_list, default=None, metavar="N0,N1,..",
              help="Batch size per bucket, one more than the boundaries (default: from --max-tokens).")
@click.option("--pad-to-bucket-boundary", is_flag=True, default=None,
              help="Pad each batch to its bucket's boundary - 1 (fixed shapes).")
@click.option("--shuffle/--no-shuffle", default=None,
              help="Buckets: --no-shuffle keeps the file's order as the stream (tf.data without a shuffle before it).")
@click.option("--megabatch-mult", type=click.IntRange(min=1), default=None,
              help="Batches per megabatch (megabatch mode; default min(n / 4 batches, 50)).")
@click.option("--window", type=click.IntRange(min=1), default=None,
              help="Chunks whose sequences are shuffled together (chunks mode; default 16).")
@click.option("--plan", "plan_path", default=None, metavar="PLAN.npz", help="Use a saved plan instead of planning.")
@opt.output_option(help_="Where the plan goes (.npz), or the folder for --to npz.")
@click.option("--to", "to", type=click.Choice(["npz"]), default=None,
              help="Write the batches themselves, one NPZ per batch, into the -o folder.")
@click.option("--layout", type=click.Choice(["padded", "varlen", "jagged-numpy"]), default="padded",
              show_default=True, help="What each written batch holds (with --to).")
@click.option("--truncate", type=click.Choice(["head", "tail"]), default=None,
              help="Which end of a clipped sequence is dropped (with --to; default tail).")
@click.option("--pad-value", callback=_number, default=None, metavar="NUMBER",
              help="What fills the padding of --layout padded (default 0; must fit the data's dtype).")
@click.option("--overwrite", is_flag=True,
              help="Replace the -o plan file, or every batch file in the -o folder of --to npz.")
@click.option("--stats", is_flag=True,
              help="Show the plan's padding waste beside random batching, and the lengths (a sorted plan, or "
                   "buckets with --no-shuffle, over --max-memory: streamed, without the random baseline).")
@opt.max_memory_option
@opt.token_options
@opt.json_option
@click.pass_context
def batch(ctx, file, name, level, mode, max_tokens, max_sequences, multiple_of, seed, epoch, num_replicas, rank,
          drop_last, max_length, oversize, boundaries, bucket_batch_sizes, pad_to_bucket_boundary, shuffle,
          megabatch_mult, window, plan_path, output, to, layout, truncate, pad_value, overwrite, stats, max_memory,
          token_dtype, eos_token_id, as_json):
    """Plan training batches from FILE's offsets (no data is read), then save the
    plan, show its padding waste, or write each batch as an NPZ.  FILE is a
    container, a sharded folder (its shards in order, as one tensor) or a
    token dataset read in place (a Megatron or fairseq PREFIX, a datatrove
    .ds, a dolma .npy; --token-dtype and --eos-id say what it does not).

    \b
    sorted     fairseq's batch_by_size: sort by length, cut within --max-tokens
    megabatch  Hugging Face's group_by_length: sorted megabatches, longest first
    buckets    tf.data's bucket_by_sequence_length: --boundaries, sizes per bucket
    pack       first-fit-decreasing rows of --max-tokens (cu_seqlens, position_ids)
    random     the baseline
    chunks     shuffle the stored chunks, then the sequences of --window chunks:
               each chunk is decoded about once an epoch (MosaicML's py1b)
    Lengths count data rows of the sequences of --level.  An -o plan file, or
    batch files in the -o folder, are replaced only with --overwrite.

    \b
    Example:
      lodtool batch corpus.lod.h5 --level 1 --max-tokens 4096 --mode sorted -o plan.npz
      lodtool batch corpus.lod.h5 --level 1 --max-tokens 4096 --stats
      lodtool batch corpus.lod.h5 --plan plan.npz --to npz -o batches/
      lodtool batch shards/ --level 1 --max-tokens 4096 -o plan.npz
      lodtool batch corpus --level 1 --max-tokens 4096 -o plan.npz    # corpus.bin + corpus.idx
    """
    from .. import tasks

    values = dict(level=level, mode=mode, max_tokens=max_tokens, max_sequences=max_sequences,
                  multiple_of=multiple_of, seed=seed, epoch=epoch, num_replicas=num_replicas, rank=rank,
                  drop_last=drop_last, max_length=max_length, oversize=oversize, boundaries=boundaries,
                  bucket_batch_sizes=bucket_batch_sizes, pad_to_bucket_boundary=pad_to_bucket_boundary,
                  megabatch_mult=megabatch_mult, window=window, shuffle=shuffle)
    given = {k: v for k, v in values.items() if v is not None}
    if plan_path is not None and given:
        flags = ", ".join("--no-shuffle" if (k, v) == ("shuffle", False) else "--" + k.replace("_", "-")
                          for k, v in given.items())
        raise click.UsageError(f"--plan fixes the batches; drop {flags}")
    if to is not None and output is None:
        raise click.UsageError("--to npz needs -o FOLDER")
    if to is None and (truncate is not None or pad_value is not None
                       or ctx.get_parameter_source("layout").name != "DEFAULT"):
        raise click.UsageError("--layout, --truncate and --pad-value apply to --to npz")
    if output == "-":
        raise click.UsageError("-o needs a path (a plan is an .npz file; --to npz writes a folder)")
    writing = to == "npz"
    show = stats or output is None

    from ._render import progress

    with opt.input_path(file) as path, \
            progress(None, "batches", writing and not opt.is_quiet(ctx) and not as_json) as tick:
        result = tasks.batch(path, plan_path, tensor=name, save_to=None if writing else output,
                             write_to=output if writing else None, layout=layout, truncate=truncate,
                             pad_value=0 if pad_value is None else pad_value, report=show,
                             progress=tick if writing else None, overwrite=overwrite,
                             max_memory=opt.parse_size(max_memory), token_dtype=token_dtype,
                             eos_token_id=eos_token_id, **given)
    if writing:
        if as_json:
            opt.emit_json(result.written)
        else:
            n = result.written["files"]
            opt.message(ctx, f"wrote {n:,} batch{'' if n == 1 else 'es'} ({layout}) into {output}")
        return
    if result.saved is not None and not as_json:
        s = result.plan.stats()
        empty = f", {s['empty']:,} of them empty" if s["empty"] else ""
        opt.message(ctx, f"planned {s['batches']:,} batches of {s['sequences']:,} sequences{empty} "
                         f"({result.plan.mode}, padding waste {s['padding_waste']:.1%}) into {output}")
    if as_json:
        opt.emit_json(result.report if show else result.plan.stats())
    elif show:
        _render_report(result.report)


def _render_report(report: dict) -> None:
    from rich.table import Table
    from rich.text import Text

    from ._render import print_

    plan, base = report["plan"], report["random"]
    title = f"{plan['mode']} batches" + (" beside random at the same mean batch size" if base is not None else "")
    table = Table(title=title, title_justify="left")
    for head in ("", "batches", "sequences/batch", "tokens/batch", "padded tokens", "padding waste", "fill rate"):
        table.add_column(head, justify="left" if not head else "right")
    for label, s in ((plan["mode"], plan), ("random", base)) if base is not None else ((plan["mode"], plan),):
        table.add_row(label, f"{s['batches']:,}", f"{s['sequences_per_batch']['mean']:,.1f}",
                      f"{s['tokens_per_batch']['mean']:,.0f}", f"{s['padded_tokens']:,}", f"{s['padding_waste']:.1%}",
                      f"{s['fill_rate']:.1%}")
    print_(table)
    extra = []
    if plan["repeats"]:
        extra.append(f"{plan['repeats']} batch(es) repeated to even out the replicas")
    if plan["skipped"]:
        extra.append(f"{plan['skipped']:,} sequence(s) longer than --max-tokens skipped")
    if plan["empty"]:
        extra.append(f"{plan['empty']:,} empty sequence(s) batched: they cost no tokens, so only --max-sequences "
                     "bounds how many share a batch")
    if extra:
        print_(Text("; ".join(extra)))
    if "streamed" in report:
        print_(Text(report["streamed"]))
    if "chunks" in report:
        _render_chunks(report["chunks"], plan["mode"])
    print_(Text(histogram_text(report["histogram"]["edges"], report["histogram"]["counts"])))


def _render_chunks(chunks: dict, mode: str) -> None:
    from rich.table import Table

    from ._render import print_

    table = Table(title=f"chunk reads per epoch ({chunks['chunks']:,} chunks of {chunks['chunk_rows']:,} rows, a "
                        f"reader's cache of {chunks['cache_chunks']:,})", title_justify="left")
    for head in ("", "decodes", "decodes/chunk", "chunks/batch", "mixing"):
        table.add_column(head, justify="left" if not head else "right")
    for label, c, mixing in ((mode, chunks, chunks["mixing"]), ("true shuffle", chunks["shuffled"], 1.0)):
        table.add_row(label, f"{c['decodes']:,}", f"{c['decodes_per_chunk']:,.2f}", f"{c['chunks_per_batch']:,.1f}",
                      f"{mixing:.2f}")
    print_(table)


def histogram_text(edges, counts, width: int = 40) -> str:
    """The length histogram as text bars, one line per bin (``[lo, hi)`` rows).

    >>> print(histogram_text([1, 2, 4], [3, 6], width=4))
    sequence lengths (rows)
        1  ██    3
      2-3  ████  6
    """
    top = max(counts) if counts else 0
    lines = ["sequence lengths (rows)"]
    labels = [f"{lo:,}" if hi - 1 == lo else f"{lo:,}-{hi - 1:,}" for lo, hi in zip(edges[:-1], edges[1:])]
    label_width = max(map(len, labels), default=0)
    for label, n in zip(labels, counts):
        bar = "█" * (round(width * n / top) if top else 0)
        lines.append(f"  {label:>{label_width}}  {bar:<{width}}  {n:,}")
    return "\n".join(lines)
