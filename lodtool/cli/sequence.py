"""Sequence-editing commands: concat, seq-slice, erase, enumerate, reshape, lod-reset.

Each is a thin wrapper over one function of lodtool's file-level operators
(Paddle's sequence_concat, sequence_slice, sequence_erase, sequence_enumerate,
sequence_reshape, lod_reset), and streams, so files larger than memory work.
"""

from __future__ import annotations

import os

import click
import numpy as np

from ..errors import LodInputError
from . import _options as opt
from .ops import options, run_task, writing


def _ints(text: str, what: str) -> np.ndarray | int:
    """An option's integers: ``3``, ``0,2,5``, or a ``.npy`` file of them."""
    text = text.strip()
    if text.endswith(".npy") or os.path.exists(text):
        try:
            arr = np.load(text, allow_pickle=False)
        except FileNotFoundError:
            raise LodInputError(f"{text}: no such file (for {what})") from None
        except Exception as exc:  # noqa: BLE001 (NumPy raises several types for a bad file)
            raise LodInputError(f"{text}: not a readable .npy file for {what} ({exc})") from None
        if arr.dtype.kind not in "iu" or arr.ndim > 2 or (arr.ndim == 2 and arr.shape[1] != 1):
            raise LodInputError(f"{text}: {what} must be integers of shape (n,) or (n, 1), got {arr.dtype} "
                                f"{arr.shape}")
        return arr.reshape(-1) if arr.ndim else int(arr)
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"{text!r} is not an integer, a comma-separated list of them or a .npy file",
                                 param_hint=what) from None
    if "," not in text and len(values) == 1:
        return values[0]
    return np.array(values, np.int64)


#: the options every command here takes; the operators also take the device and --json
_common = options(*writing(), opt.token_options)
_operator = options(*writing(), opt.token_options, opt.device_option, opt.json_option)


@click.command("concat")
@click.argument("files", nargs=-1, required=True, type=opt.PATH)
@_operator
@click.pass_context
def concat(ctx, files, output, max_memory, as_json, **options):
    """Join tensors sequence by sequence (Paddle's sequence_concat): sequence i of the output is sequence i of
    each input, in order.

    Takes two or more FILES (or FILE:tensor) with the same number of LoD
    levels, top-level sequences, dtype and row shape.  Streams ranges of
    top-level sequences from all inputs at once, so files larger than memory work.

    \b
    Example:
      lodtool concat questions.lod.h5 answers.lod.h5 -o dialogues.lod.h5
    """
    from ..tasks import concat as concat_files

    if len(files) < 2:
        raise click.UsageError("concat joins at least two files")
    refs = [opt.tensor_ref(f, None) for f in files]
    run_task(ctx, "joined", concat_files, [p for p, _ in refs], output, as_json, max_memory, names=[n for _, n in refs],
             **options)


@click.command("seq-slice")
@click.argument("file", type=opt.PATH)
@opt.name_option
@click.option("--offset", "offset", required=True,
              help="First row kept in each last-level sequence: an integer, a comma list or a .npy (one per sequence).")
@click.option("--length", "length", required=True,
              help="Rows kept from each sequence: an integer, a comma list or a .npy (one per sequence).")
@click.option("--clip", is_flag=True, help="Shorten slices that run past their sequence's end (else an error, "
                                           "as in Paddle).")
@_operator
@click.pass_context
def seq_slice(ctx, file, offset, length, output, max_memory, as_json, **options):
    """Cut rows OFFSET..OFFSET+LENGTH out of every last-level sequence (Paddle's sequence_slice).

    Not `lodtool slice`, which selects whole sequences: seq-slice cuts inside
    each one.  Upper levels are kept.  Streams chunks of top-level sequences.

    \b
    Example:
      lodtool seq-slice sentences.lod.h5 --offset 0 --length 16 --clip -o first16.lod.h5
      lodtool seq-slice sentences.lod.h5 --offset starts.npy --length lengths.npy -o spans.lod.h5
    """
    from ..tasks import seq_slice as seq_slice_file

    run_task(ctx, "sliced", seq_slice_file, file, output, as_json, max_memory, offset=_ints(offset, "--offset"),
             length=_ints(length, "--length"), **options)


@click.command("erase")
@click.argument("file", type=opt.PATH)
@opt.name_option
@click.option("--tokens", required=True, help="Token ids to drop: a comma list (0,2,5) or a .npy.")
@_operator
@click.pass_context
def erase(ctx, file, tokens, output, max_memory, as_json, **options):
    """Drop the rows whose token id is one of --tokens (Paddle's sequence_erase); the LoD shrinks to match.

    For integer ids, one per row.  Upper levels are kept.  Streams chunks of
    top-level sequences.

    \b
    Example:
      lodtool erase token_ids.lod.h5 --tokens 0,1,2 -o without_specials.lod.h5
    """
    from ..tasks import erase as erase_file

    run_task(ctx, "erased", erase_file, file, output, as_json, max_memory, tokens=_ints(tokens, "--tokens"), **options)


@click.command("enumerate")
@click.argument("file", type=opt.PATH)
@opt.name_option
@click.option("--win-size", type=int, required=True, help="Rows per window (at least 2, as in Paddle).")
@click.option("--pad-value", type=float, default=0, show_default=True,
              help="Value past the end of a sequence (must fit the dtype).")
@_operator
@click.pass_context
def enumerate_(ctx, file, pad_value, output, max_memory, as_json, **options):
    """The n-gram window starting at every row, padded past its sequence's end (Paddle's sequence_enumerate).

    For one value per row; the output has --win-size values per row and the
    input's LoD.  Streams chunks of top-level sequences.

    \b
    Example:
      lodtool enumerate token_ids.lod.h5 --win-size 3 -o trigrams.lod.h5
    """
    from ..tasks import enumerate as enumerate_file

    pad = int(pad_value) if float(pad_value).is_integer() else pad_value
    run_task(ctx, "enumerated", enumerate_file, file, output, as_json, max_memory, pad_value=pad, **options)


@click.command("reshape")
@click.argument("file", type=opt.PATH)
@opt.name_option
@click.option("--new-dim", type=int, required=True, help="Values per output row.")
@_operator
@click.pass_context
def reshape(ctx, file, output, max_memory, as_json, **options):
    """Give the rows a new width; each last-level sequence keeps its values (Paddle's sequence_reshape).

    A sequence of L rows of width M becomes L*M/NEW_DIM rows, which must be
    whole for every sequence.  Streams chunks of top-level sequences.

    \b
    Example:
      lodtool reshape frames.lod.h5 --new-dim 80 -o stacked.lod.h5
    """
    from ..tasks import reshape as reshape_file

    run_task(ctx, "reshaped", reshape_file, file, output, as_json, max_memory, **options)


@click.command("lod-reset")
@click.argument("file", type=opt.PATH)
@opt.name_option
@click.option("--target-lod", default=None, help="The new level's offsets: a comma list (0,4,7,10) or a .npy.")
@click.option("--like", default=None, type=opt.PATH,
              help="Take the LoD of this container's tensor (FILE or FILE:tensor).")
@click.option("--append", is_flag=True, help="Add the level below the tensor's own (lod_append).")
@_common
@opt.json_option
@click.pass_context
def lod_reset(ctx, file, target_lod, like, output, max_memory, as_json, **options):
    """Give the rows a new LoD (Paddle's lod_reset), or one more level below the old (--append: lod_append).

    The data is copied unchanged.  The new level must start at 0, never
    decrease and end at the row count; an appended level must fit the levels
    above.  Reads only offsets to build and check it, then copies the rows in
    chunks, so files larger than memory work.

    \b
    Example:
      lodtool lod-reset words.lod.h5 --target-lod 0,4,7,10 -o regrouped.lod.h5
      lodtool lod-reset chars.lod.h5 --like words.lod.h5 -o chars_by_word.lod.h5
      lodtool lod-reset docs.lod.h5 --append --target-lod sentences.npy -o docs2.lod.h5
    """
    from ..tasks import lod_reset as lod_reset_file

    if (target_lod is None) == (like is None):
        raise click.UsageError("give the new level as --target-lod or --like (one of them)")
    target = None if target_lod is None else np.atleast_1d(_ints(target_lod, "--target-lod"))
    like_path, like_name = opt.tensor_ref(like, None) if like else (None, None)
    run_task(ctx, "reset", lod_reset_file, file, output, as_json, max_memory, target_lod=target, like=like_path,
             like_name=like_name, **options)
