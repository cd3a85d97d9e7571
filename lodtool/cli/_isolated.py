"""Run a command again in a child process, for decoding with opted-in plugin filters.

A crafted chunk can crash a native decoder (SIGSEGV, SIGABRT).  The reader
raises :class:`~lodtool.errors.LodIsolationRequired` before the first chunk a
plugin would decode; the CLI then runs the same command line in a child with
``LODTOOL_PLUGIN_ISOLATION=child``, streams its stdout, and keeps the one-line
error rule whatever the child does: a signal becomes one line naming it, and
codec chatter on stderr (bzip2's ``BUG: ...``) is dropped when the command fails.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

from ..container.filters import ISOLATION_ENV


def run_isolated_command(argv: list[str], why: str) -> tuple[int, str | None]:
    """Run ``lodtool ARGV`` in a child; return its exit code and the one error line to show (``None``: none).

    stdout streams through; stderr is kept: shown as it is when the child succeeds, reduced to its
    ``lodtool: error:`` line when it fails.
    """
    import signal  # here, not at import: every command loads this module, few run a child
    import subprocess

    env = {**os.environ, ISOLATION_ENV: "child"}
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, "-m", "lodtool", *argv], stdout=subprocess.PIPE, stderr=err,
                                env=env)
        try:
            shutil.copyfileobj(proc.stdout, sys.stdout.buffer)
            sys.stdout.buffer.flush()
        finally:
            proc.stdout.close()
            code = proc.wait()
        err.seek(0)
        text = err.read().decode("utf-8", "replace")
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else f"signal {-code}"
        return 1, (f"{why}: the plugin decoder crashed ({name}) in an isolated child process; "
                   "nothing was written")
    if code == 0:
        sys.stderr.write(text)
        return 0, None
    errors = [line for line in text.splitlines() if line.startswith("lodtool: error: ")]
    if errors:
        return code, errors[-1].removeprefix("lodtool: error: ")
    return code, f"{why}: the isolated child failed (exit {code}) without an error message"


__all__ = ["run_isolated_command", "ISOLATION_ENV"]
