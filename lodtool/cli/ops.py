"""Operator commands: expand, pool, softmax, pad, unpad, reverse, pack-plan.

Each is a thin wrapper over one function of :mod:`lodtool.tasks.operators`, and takes
``--device cpu|cuda`` (where the operator's kernels run).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import sys

import click

from . import _options as opt
from ..lod import counted


def _report(ctx, result, as_json: bool, verb: str) -> None:
    if as_json:
        opt.emit_json(dataclasses.asdict(result))
    elif result.output != "-":
        opt.message(ctx, f"{verb}: {counted(result.sequences, 'sequence')}, {counted(result.rows, 'row')} "
                         f"({result.dtype}, {counted(result.lod_level, 'LoD level')}) -> "
                         f"{result.output}:{result.name}")


@contextlib.contextmanager
def _scheduled(ctx, verb: str, scheduler, workers, partition_size, output, as_json: bool):
    """The tasks operator's Dask options for ``--scheduler`` (with a bar counting partitions); without one, a
    bar counting the rows read."""
    from ._render import partition_progress

    if not scheduler:
        with partition_progress(f"{verb} rows", not opt.is_quiet(ctx) and not as_json and output != "-") as tick:
            yield {"progress": tick}
        return
    if output == "-":
        raise click.UsageError("--scheduler writes files or folders, not stdout")

    with partition_progress(f"{verb} partitions", not opt.is_quiet(ctx) and not as_json) as tick:
        yield {"scheduler": scheduler, "workers": workers, "partition_size": opt.parse_size(partition_size),
               "progress": tick}


def options(*decorators):
    """The click ``decorators`` applied as if stacked above a command in this order."""
    return lambda f: functools.reduce(lambda g, d: d(g), reversed(decorators), f)


def writing(out_name_help: str = "Tensor name in the output (default: the input's).") -> list:
    """The options of a command that writes a tensor: ``-o``, ``--out-name``, the replace flags, ``--compression``
    and ``--max-memory``."""
    return [opt.output_option(required=True, help_="The container to write, or - for stdout."),
            click.option("--out-name", default=None, help=out_name_help),
            opt.replace_options, opt.compression_option, opt.max_memory_option]


#: the options of an operator that Dask can run, after the device and before ``--json``
SCHEDULED = (opt.device_option, opt.scheduler_options, opt.partition_size_option, opt.token_options, opt.json_option)


def run_task(ctx, verb: str, operator, inputs, output: str, as_json: bool, max_memory, scheduled=None,
             **options) -> None:
    """``operator(inputs, output, **options)`` of :mod:`lodtool.tasks` (``-`` read and written through temp files),
    inside ``scheduled`` (:func:`_scheduled`'s Dask options, added to ``options``), then reported."""
    with contextlib.ExitStack() as stack:
        dask = stack.enter_context(scheduled) if scheduled is not None else {}
        paths = [stack.enter_context(opt.input_path(p)) for p in ([inputs] if isinstance(inputs, str) else inputs)]
        dst = stack.enter_context(opt.container_output(output))
        result = operator(paths[0] if isinstance(inputs, str) else paths, dst, max_memory=opt.parse_size(max_memory),
                          **options, **dask)
    result.output = output
    _report(ctx, result, as_json, verb)


def _file_op(name: str, verb: str, fn_name: str, doc: str, extra=()):
    @click.command(name)
    @click.argument("file", type=opt.PATH)
    @options(opt.name_option, *writing(), *SCHEDULED)
    @click.pass_context
    def command(ctx, file, name, output, max_memory, scheduler, workers, partition_size, as_json, **options):
        from .. import tasks

        file, name = opt.tensor_ref(file, name)
        run_task(ctx, verb, getattr(tasks, fn_name), file, output, as_json, max_memory,
                 _scheduled(ctx, fn_name, scheduler, workers, partition_size, output, as_json), name=name, **options)

    for decorator in extra:
        command = decorator(command)
    command.help = doc
    return command


pool = _file_op(
    "pool", "pooled", "pool",
    """Reduce each last-level sequence to one row (Paddle's sequence_pool); upper levels stay as the LoD.

    Empty sequences get --pad-value (on float64 data through float32, as
    Paddle's attribute).  --index (max, min) also writes Paddle's MaxIndex: the
    data row each value came from, -1 for an empty sequence, as tensor
    NAME_index.  Streams chunks of top-level sequences, so files larger than
    memory work (with --device cuda each chunk goes to the GPU and back).

    \b
    Example:
      lodtool pool sentences.lod.h5 --type average -o sentence_vectors.lod.h5
      lodtool pool sentences.lod.h5 --type max --device cuda -o maxed.lod.h5
      lodtool pool sentences.lod.h5 --type max --index -o maxed.lod.h5
    """,
    extra=[click.option("--type", "pool_type", default="sum", show_default=True,
                        type=click.Choice(["sum", "average", "sqrt", "max", "min", "first", "last"])),
           click.option("--pad-value", type=float, default=0.0, show_default=True,
                        help="Value for empty sequences."),
           click.option("--index", is_flag=True, help="Also write the argmax/argmin rows (Paddle's MaxIndex).")])

softmax = _file_op(
    "softmax", "softmax", "softmax",
    """Softmax within each last-level sequence (numerically stable), for data of width 1.

    \b
    Example:
      lodtool softmax scores.lod.h5 -o probs.lod.h5
    """)

reverse = _file_op(
    "reverse", "reversed", "reverse",
    """Reverse the rows of each last-level sequence; the LoD is unchanged.

    \b
    Example:
      lodtool reverse articles.lod.h5 -o reversed.lod.h5
    """)


@click.command("expand")
@click.argument("x", type=opt.PATH)
@click.argument("y", type=opt.PATH)
@click.option("--ref-level", type=int, default=-1, show_default=True, help="Level of Y's LoD to expand by.")
@options(*writing("Tensor name in the output (default: X's)."), *SCHEDULED)
@click.pass_context
def expand(ctx, x, y, output, max_memory, scheduler, workers, partition_size, as_json, **options):
    """sequence_expand: repeat X's rows (or X's sequences) by the lengths of Y's LoD at --ref-level.

    X and Y are files or FILE:tensor.  Y's data is never read.  Results are
    exactly Paddle's sequence_expand.  Streams runs of X's sequences (a
    sequence with very many copies a few copies at a time), so files larger
    than memory work.

    \b
    Example:
      lodtool pack sample_data/expand_x.json --lod-level 1 -o x.lod.h5
      lodtool pack sample_data/expand_y.json --lod-level 2 -o y.lod.h5
      lodtool expand x.lod.h5 y.lod.h5 --ref-level 0 -o out.lod.h5
    """
    from .. import tasks

    (x_path, x_name), (y_path, y_name) = opt.tensor_ref(x, None), opt.tensor_ref(y, None)
    run_task(ctx, "expanded", lambda paths, dst, **kw: tasks.expand(*paths, dst, **kw), [x_path, y_path], output,
             as_json, max_memory, _scheduled(ctx, "expand", scheduler, workers, partition_size, output, as_json),
             x_name=x_name, y_name=y_name, **options)


@click.command("pad")
@click.argument("file", type=opt.PATH)
@opt.name_option
@opt.output_option(required=True, help_="The NPZ to write (padded, lengths, mask), or - for stdout.")
@click.option("--pad-value", type=float, default=0.0, show_default=True)
@click.option("--maxlen", type=click.IntRange(min=1), default=None, help="Padded length (default: the longest).")
@click.option("--truncate", type=click.Choice(["head", "tail"]), default=None, is_flag=False, flag_value="head",
              help="Cut sequences longer than --maxlen: keep their head (the default of a bare --truncate) "
                   "or their tail. Without it a longer sequence is an error, as in Paddle.")
@click.option("--level", type=int, default=-1, show_default=True, help="Which level's sequences to pad.")
@options(opt.max_memory_option, *SCHEDULED)
@click.pass_context
def pad(ctx, file, name, output, max_memory, scheduler, workers, partition_size, as_json, **options):
    """Pad the sequences of a level into a dense (sequences, maxlen, *element) array.

    Writes an NPZ with `padded`, `lengths` and a boolean `mask`.  The lengths
    come from the offsets alone and the padded rows are written block by block,
    so inputs larger than memory work (the NPZ itself is as large as the padding
    makes it).

    \b
    Example:
      lodtool pad articles.lod.h5 -o padded.npz --level 1
      lodtool pad docs.lod.h5 -o first64.npz --maxlen 64 --truncate
      lodtool unpad padded.npz -o back.lod.h5
    """
    from .. import tasks

    file, name = opt.tensor_ref(file, name)
    opt.refuse_binary_on_terminal(output, "npz")
    with _scheduled(ctx, "pad", scheduler, workers, partition_size, output, as_json) as dask, \
            opt.input_path(file) as src:
        info = tasks.pad(src, sys.stdout.buffer if output == "-" else output, name=name,
                         max_memory=opt.parse_size(max_memory), **options, **dask)
    if as_json:
        opt.emit_json(info)
    elif output != "-":
        opt.message(ctx, f"padded {counted(info['sequences'], 'sequence')} to {tuple(info['shape'])} -> {output}")


@click.command("unpad")
@click.argument("npz", type=opt.PATH)
@opt.output_option(required=True, help_="The container to write, or - for stdout.")
@click.option("--name", default="tensor", show_default=True, help="Tensor name in the output.")
@opt.replace_options
@opt.compression_option
@opt.max_memory_option
@opt.device_option
@opt.json_option
@click.pass_context
def unpad(ctx, npz, output, max_memory, as_json, **options):
    """Turn a padded NPZ (arrays `padded` and `lengths`) back into a 1-level LoD tensor.

    \b
    Example:
      lodtool unpad padded.npz -o back.lod.h5
    """
    from .. import tasks

    run_task(ctx, "unpadded", tasks.unpad, npz, output, as_json, max_memory, **options)


@click.command("pack-plan")
@click.argument("file", type=opt.PATH)
@opt.name_option
@click.option("--level", type=int, default=-1, show_default=True, help="Which level's sequences to plan.")
@options(*SCHEDULED)
@click.pass_context
def pack_plan(ctx, file, name, scheduler, workers, partition_size, as_json, **options):
    """The RNN packing plan of a level: sequences sorted by decreasing length
    (stable), the batch size of each time step, and the indices that restore
    the order (as torch's PackedSequence).  Reads the offsets only.  A length
    counts time steps: rows at the last level, sequences of the next level
    above it (Paddle's lod_rank_table: an outer RNN steps over sentences).

    \b
    Example:
      lodtool pack-plan articles.lod.h5 --level 1 --json
      lodtool pack-plan articles.lod.h5 --level 0     # articles, in sentences
    """
    from .. import tasks

    file, name = opt.tensor_ref(file, name)
    with _scheduled(ctx, "pack-plan", scheduler, workers, partition_size, None, True) as dask, \
            opt.input_path(file) as src:  # with a scheduler the partitions' offsets are read in parallel
        dask.pop("progress", None)
        with tasks.pack_plan_stream(src, name=name, **options, **dask) as plan:
            _show_plan(plan, as_json)


def _show_plan(plan, as_json: bool) -> None:
    """The plan's arrays (each an iterator of pieces, written as they come: any number of sequences in
    bounded memory) as one JSON document, or a summary with their ends."""
    if as_json:
        opt.emit_json_arrays(plan.arrays())
        return
    from ._render import console

    con = console()
    con.print(f"{counted(plan.num_sequences, 'sequence')}, {counted(plan.num_steps, 'time step')} (the "
              f"longest sequence's), {plan.total_steps:,} steps in all")
    elided = False
    for key, pieces in plan.arrays().items():
        shown, cut = _elided(pieces)
        elided |= cut
        con.print(f"{key}: {shown}", markup=False)
    if elided:
        con.print("(long arrays are shown cut; --json gives every entry)", markup=False)


#: entries of an array shown in full by pack-plan's summary (longer ones show their ends)
SHOWN_ENTRIES = 20


def _elided(pieces) -> tuple[str, bool]:
    """``[a, b, ..., y, z]`` for a long array given as pieces (only its ends are kept), and whether it was cut."""
    head: list[int] = []
    tail: list[int] = []
    count = 0
    for piece in pieces:
        head += piece[:SHOWN_ENTRIES - len(head)].tolist()
        tail = (tail + piece[-SHOWN_ENTRIES:].tolist())[-SHOWN_ENTRIES:]
        count += len(piece)
    if count <= SHOWN_ENTRIES:
        return str(head), False
    ends = ", ".join(map(str, head[:10])), ", ".join(map(str, tail[-5:]))
    return f"[{ends[0]}, ... {count - 15:,} more ..., {ends[1]}]", True
