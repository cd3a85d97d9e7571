"""The ``lodtool`` click group: global options, lazy command loading, error handling.

Commands live in their own modules and are imported only when run, so
``lodtool inspect`` never pays for numba or the operators.
"""

from __future__ import annotations

import difflib
import errno
import importlib
import os
import re
import signal
import sys
import threading
import warnings

import click

from ..errors import LodError, LodIsolationRequired

#: command name -> (module, function, one-line help shown in ``lodtool --help``)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "pack": ("pack", "pack", "Pack ragged JSON / NPY / NPZ / Parquet / Arrow / Paddle tensors or token datasets into a "
                        "container."),
    "unpack": ("unpack", "unpack", "Write a tensor back out as JSON, NPZ, Parquet, Arrow, a Paddle tensor or a token "
                            "dataset (Megatron, datatrove, dolma)."),
    "validate": ("validate", "validate", "Check containers against the format and the LoD rules."),
    "inspect": ("inspect", "inspect", "Show tensors, levels and length statistics (reads offsets only)."),
    "verify": ("verify", "verify", "Recompute the recorded checksums of every dataset."),
    "slice": ("slice", "slice_", "Extract a branch <i,j,...> or a level range as a tensor of its own."),
    "head": ("slice", "head", "The first K top-level sequences."),
    "tail": ("slice", "tail", "The last K top-level sequences."),
    "tree": ("tree", "tree", "Draw a tensor as a tree of branches (or as the seeds' bars)."),
    "expand": ("ops", "expand", "sequence_expand X by the LoD of Y (Paddle semantics)."),
    "pool": ("ops", "pool", "Reduce each last-level sequence (sum, average, sqrt, max, min, first, last)."),
    "softmax": ("ops", "softmax", "Softmax within each last-level sequence."),
    "pad": ("ops", "pad", "Pad the sequences of a level into a dense array (NPZ)."),
    "unpad": ("ops", "unpad", "Turn a padded NPZ (padded + lengths) back into a container."),
    "reverse": ("ops", "reverse", "Reverse each last-level sequence."),
    "pack-plan": ("ops", "pack_plan", "The RNN packing plan: sort by length, batch sizes per step."),
    "concat": ("sequence", "concat", "Join tensors sequence by sequence (Paddle's sequence_concat)."),
    "seq-slice": ("sequence", "seq_slice", "Cut OFFSET..OFFSET+LENGTH rows out of every sequence (sequence_slice)."),
    "erase": ("sequence", "erase", "Drop the rows holding given token ids (Paddle's sequence_erase)."),
    "enumerate": ("sequence", "enumerate_", "The n-gram window at every row (Paddle's sequence_enumerate)."),
    "reshape": ("sequence", "reshape", "Give the rows a new width, sequence by sequence (sequence_reshape)."),
    "lod-reset": ("sequence", "lod_reset", "Give the rows a new LoD, or append a level (lod_reset / lod_append)."),
    "batch": ("batch", "batch", "Plan training batches (sorted, megabatch, buckets, pack, chunks); show the waste; write them."),
    "shard": ("shard", "shard", "Split a container into a sharded folder (one logical tensor)."),
    "merge": ("shard", "merge", "Join a sharded folder into one container (or repack a container)."),
}


class LodClickError(click.ClickException):
    """A LodError as click prints it: one line on stderr, the error's exit code."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code

    def show(self, file=None) -> None:
        click.echo(f"lodtool: error: {self.format_message()}", err=True)


class LazyGroup(click.Group):
    """Loads a command's module on first use and turns domain errors into one-line messages."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, attr, _ = COMMANDS[name]
        return _with_global_options(getattr(importlib.import_module(f"{__package__}.{module}"), attr))

    def resolve_command(self, ctx: click.Context, args: list[str]):
        name = args[0] if args else ""
        if name not in COMMANDS and not name.startswith("-") and not ctx.resilient_parsing:
            close = difflib.get_close_matches(name, COMMANDS, n=2)
            hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            raise click.UsageError(f"No such command {name!r}.{hint}", ctx)
        return super().resolve_command(ctx, args)

    def _in_flags(self, ctx: click.Context, text: str) -> str:
        """A library message in the words of the command that was run (see :func:`in_flags`)."""
        command = self.get_command(ctx, ctx.invoked_subcommand) if ctx.invoked_subcommand in COMMANDS else None
        return in_flags(text, command) if command is not None else text

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # list commands without importing each module
        with formatter.section("Commands"):
            formatter.write_dl([(name, help_) for name, (_, _, help_) in COMMANDS.items()])

    def invoke(self, ctx: click.Context):
        from .. import atomic

        reported, atomic.report_dropped_interrupts = atomic.report_dropped_interrupts, False  # one line, no traceback
        with warnings.catch_warnings():
            if not ctx.params.get("verbose"):
                # a library warning (numpy on an old .npy header, h5py deprecations) is not the user's to act
                # on, and would break the one-line error contract; -v shows them
                warnings.simplefilter("ignore")
            try:
                return self._invoke(ctx)
            except KeyboardInterrupt as exc:  # also while an isolated child runs
                _interrupted(ctx, exc)
            finally:
                atomic.report_dropped_interrupts = reported

    def _invoke(self, ctx: click.Context):
        from ._isolated import ISOLATION_ENV

        words = [*getattr(ctx, "_protected_args", []), *ctx.args]
        if words[:1] != ["pack"]:  # the process's choice, never the library's (see lodtool._memory)
            from .._memory import keep_large_buffers_unpooled

            keep_large_buffers_unpooled()
        argv = [*(["-q"] if ctx.params.get("quiet") else []), *(["-v"] if ctx.params.get("verbose") else []),
                *words]  # for a rerun in an isolated child
        isolation = os.environ.get(ISOLATION_ENV)
        if isolation is None:  # the CLI decodes opted-in plugin filters in a child (library calls do not)
            os.environ[ISOLATION_ENV] = "1"
        try:
            return super().invoke(ctx)
        except LodIsolationRequired as exc:
            from ._isolated import run_isolated_command

            code, message = run_isolated_command(argv, one_line(exc).split(": ")[0])
            if message is not None:
                raise LodClickError(message, code) from None
            ctx.exit(code)
        except LodError as exc:
            full = _disk_full(ctx, exc)  # never a usage error, whatever the writer raised it as
            raise LodClickError(full or self._in_flags(ctx, one_line(exc)), 1 if full else exc.exit_code) from None
        except MemoryError:
            raise LodClickError("out of memory; try --max-memory or a smaller chunk") from None
        except BrokenPipeError:
            # the reader of stdout went away (`| head`): stop quietly, as cat does
            _silence_stdout()
            ctx.exit(0)
        except OSError as exc:
            raise LodClickError(_disk_full(ctx, exc) or one_line(exc)) from None
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except Exception as exc:  # a bug: still one line, the traceback only with -v
            if ctx.find_root().params.get("verbose"):
                raise
            raise LodClickError(f"internal error: {type(exc).__name__}: {one_line(exc)} "
                                "(run with -v for the traceback)") from None
        finally:
            if isolation is None:
                os.environ.pop(ISOLATION_ENV, None)


#: the exit status of a command stopped by Ctrl-C: 128 + SIGINT, what a shell reports for a program it interrupts
EXIT_INTERRUPTED = 130


def _interrupted(ctx: click.Context, exc: KeyboardInterrupt) -> None:
    """Ctrl-C: exit 130, or 0 when the library says the output was already complete when it came.

    The library marks the second case by setting ``committed`` on the KeyboardInterrupt to the path it
    finished writing (the atomic rename had happened, so the output is whole and in place).
    """
    committed = getattr(exc, "committed", None)
    if committed:
        from ._render import printable

        click.echo(f"lodtool: interrupted after {printable(os.fspath(committed))} was written (it is complete)",
                   err=True)
        ctx.exit(0)
    raise LodClickError("interrupted", EXIT_INTERRUPTED) from None


def _disk_full(ctx: click.Context, exc: BaseException) -> str | None:
    """``OUTPUT: no space left on device`` when ``exc`` is, or was raised while handling, a full disk (errno 28).

    The output named is the file the failed write was for: the error's own file name unless it is one of
    lodtool's temp files, else the command's ``-o`` file; written to stdout, the folder of the temp file
    that took the room.
    """
    from ..atomic import is_temp_path
    from ._options import OUTPUT_META

    seen = exc
    while seen is not None and not (isinstance(seen, OSError) and seen.errno == errno.ENOSPC):
        seen = seen.__cause__ or seen.__context__
    if seen is None:
        return None
    name = seen.filename
    if name is not None and not is_temp_path(str(name)):
        return single_line(f"{name}: no space left on device")
    output = ctx.meta.get(OUTPUT_META)
    if output not in (None, "-"):
        where = output
    elif name is not None:  # the temp file of an output bound for stdout: the folder it filled
        where = os.path.dirname(str(name))
    else:
        where = "stdout" if output == "-" else "the output"
    return single_line(f"{where}: no space left on device")


#: library keywords whose command-line option has another Python name (``--format`` is ``fmt``); a command
#: whose own option of a keyword's name means something else says so in its attribute ``option_of_keyword``
OPTION_OF_KEYWORD = {"format": "fmt", "vocabulary": "vocab", "field": "text_field"}

#: a library parameter as a message names it: ``overwrite=True``, ``max_tokens=...``, ``dtype='float64'``,
#: optionally after the verb "pass"
_KEYWORD_MENTION = re.compile(
    r"(?<![\w.=-])(?P<verb>pass )?(?P<name>[a-z_][a-z0-9_]*)="
    r"(?P<value>True|False|None|\.\.\.|'[^']*'|\"[^\"]*\"|-?[0-9][\w.]*|[a-z][\w.]*)")


def in_flags(text: str, command: click.Command) -> str:
    """A library message with each ``keyword=value`` it names written as ``command``'s option.

    The library speaks Python: ``pass overwrite=True``, ``max_tokens=...`` (any value),
    ``dtype='float64'``.  On the command line those are ``add --overwrite``, ``--max-tokens``,
    ``--dtype float64``; ``pass flag=False`` becomes ``leave out --flag``.  A keyword the command
    has no option for is left as it is.

    >>> cmd = click.Command("x", params=[click.Option(["--overwrite"], is_flag=True),
    ...                                   click.Option(["--max-tokens"], type=int)])
    >>> in_flags("t exists: pass overwrite=True to replace it", cmd)
    't exists: add --overwrite to replace it'
    >>> in_flags("needs max_tokens=... or max_sequences=...", cmd)
    'needs --max-tokens or max_sequences=...'
    """
    options = {p.name: p for p in command.params if isinstance(p, click.Option)}
    renamed = {**OPTION_OF_KEYWORD, **getattr(command, "option_of_keyword", {})}

    def flag(match: re.Match) -> str:
        option = options.get(renamed.get(match["name"], match["name"]))
        if option is None:
            return match[0]
        long = next((o for o in option.opts if o.startswith("--")), option.opts[0])
        value, verb = match["value"], match["verb"]
        if option.is_flag and value in ("True", "False"):
            if value == "True":
                return ("add " if verb else "") + long
            negation = next((o for o in option.secondary_opts if o.startswith("--")), None)
            if negation:
                return ("add " if verb else "") + negation
            return ("leave out " if verb else "without ") + long
        shown = "" if value == "..." else " " + value.strip("'\"")
        return ("give " if verb else "") + long + shown

    return _KEYWORD_MENTION.sub(flag, text)


def _set_global(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """-q / -v given after the command name: the same as before it."""
    if value and not ctx.resilient_parsing:
        root = ctx.find_root()
        root.obj = root.obj or {}
        root.obj[param.name] = True
        root.params[param.name] = True
        if param.name == "verbose":
            warnings.simplefilter("default")


def _with_global_options(command: click.Command) -> click.Command:
    """Let a command also take the group's -q/--quiet and -v/--verbose, and --storage-option (added once per command)."""
    if not any(p.name == "quiet" for p in command.params):
        command.params.append(click.Option(["-q", "--quiet"], is_flag=True, expose_value=False, callback=_set_global,
                                           help="Print nothing but data and errors (as before the command)."))
        command.params.append(click.Option(["-v", "--verbose"], is_flag=True, expose_value=False,
                                           callback=_set_global, help="More detail; tracebacks for internal errors."))
        from ._options import storage_option

        command.params.append(storage_option())
    return command


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (file names first where the error has them)."""
    if isinstance(exc, OSError) and not isinstance(exc, LodError) and exc.filename:
        text = f"{exc.filename}: {exc.strerror or exc}"
    else:
        text = str(exc) or type(exc).__name__
    return single_line(text)


def single_line(text: str) -> str:
    """``text`` on one line, and nothing from a file in it can drive the terminal: control characters escaped."""
    from ._render import printable

    return printable(" ".join(text.split()))


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _print_version(ctx: click.Context, _param, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        from .._version import __version__

        click.echo(f"lodtool {__version__}")
        ctx.exit()


@click.group("lodtool", cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show the version and exit.")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but data and errors.")
@click.option("-v", "--verbose", is_flag=True, help="More detail; tracebacks for internal errors.")
@click.pass_context
def cli(ctx: click.Context, quiet: bool, verbose: bool) -> None:
    """lodtool: LoD tensors (nested variable-length sequences) in a versioned HDF5 container.

    \b
    Example:
      lodtool pack sample_data/articles.json -o articles.lod.h5
      lodtool inspect articles.lod.h5
      lodtool tree articles.lod.h5
      lodtool slice articles.lod.h5 '<2,0>' --to json
    """
    ctx.obj = {"quiet": quiet, "verbose": verbose}


def main(argv: list[str] | None = None) -> None:
    """Console entry point."""
    try:
        cli.main(args=argv, prog_name="lodtool")
    except SystemExit:
        # The command has finished: its output is committed or was never made, and the exit status says which.
        # Ctrl-C or SIGTERM while the interpreter shuts down (thread pools joining, modules torn down) must not
        # turn a committed write's 0 into a death by signal.
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise


if __name__ == "__main__":  # pragma: no cover
    main()
