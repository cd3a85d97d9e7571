"""The ``lodtool`` group itself: exit codes, command names, completion, and how library errors reach the user."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import click
import numpy as np
import pytest
from click.testing import CliRunner

import lodtool
from lodtool import tasks
from lodtool.cli.main import COMMANDS, OPTION_OF_KEYWORD, cli, in_flags
from lodtool.errors import LodExistsError, LodFormatError

ROOT = Path(__file__).resolve().parent.parent


def run(*args, **kwargs):
    return CliRunner().invoke(cli, [str(a) for a in args], **kwargs)


def error_line(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


@pytest.fixture
def container(tmp_path) -> Path:
    path = tmp_path / "t.lod.h5"
    lodtool.save(str(path), lodtool.LoDTensor(np.arange(6), [[0, 2, 6]]))
    return path


# -- Ctrl-C ------------------------------------------------------------------------------------------------------
def test_ctrl_c_exits_130_not_1_as_bad_data_does(container, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(tasks, "inspect", interrupted)
    result = run("inspect", container)
    assert result.exit_code == 130
    assert error_line(result) == "lodtool: error: interrupted"


def test_ctrl_c_after_the_output_was_committed_exits_0(container, tmp_path, monkeypatch):
    out = tmp_path / "out.json"

    def committed_then_interrupted(*args, **kwargs):
        out.write_text("[]")
        exc = KeyboardInterrupt()
        exc.committed = str(out)  # what the library sets once the atomic rename is done
        raise exc

    monkeypatch.setattr(tasks, "unpack", committed_then_interrupted)
    result = run("unpack", container, "-o", out)
    assert result.exit_code == 0
    assert f"interrupted after {out} was written" in error_line(result)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_the_process_shuts_down_after_a_write_keeps_exit_0(tmp_path, sig):
    src, out = tmp_path / "x.jsonl", tmp_path / "x.lod.h5"
    src.write_text("[1, 2]\n[3]\n")
    code = ("import atexit, time; atexit.register(time.sleep, 3)  # the shutdown a signal arrives in\n"
            "from lodtool.cli.main import main\n"
            f"main(['pack', {str(src)!r}, '-o', {str(out)!r}])\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stderr.readline().startswith("packed ")
    time.sleep(0.5)
    proc.send_signal(sig)
    rest = proc.stderr.read()
    assert proc.wait(timeout=30) == 0, rest
    assert "Traceback" not in rest and "Exception ignored" not in rest and lodtool.load(str(out)).n_rows == 3


# -- command names -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("typed, meant", [("inpsect", "inspect"), ("vrify", "verify"), ("unpak", "unpack"),
                                          ("seq-slcie", "seq-slice")])
def test_a_mistyped_command_gets_a_did_you_mean(typed, meant):
    result = run(typed, "x.lod.h5")
    assert result.exit_code == 2
    assert f"No such command {typed!r}. Did you mean {meant!r}" in result.stderr


def test_a_command_like_nothing_gets_no_suggestion():
    result = run("zzzz")
    assert result.exit_code == 2 and "No such command 'zzzz'." in result.stderr and "Did you mean" not in result.stderr


# -- shell completion --------------------------------------------------------------------------------------------
def complete(words: str, env: dict | None = None) -> list[tuple[str, str]]:
    """What bash gets from click's completion machinery for the command line ``words`` (cursor at its end)."""
    parts = words.split(" ")
    result = CliRunner().invoke(cli, [], prog_name="lodtool", env={
        "_LODTOOL_COMPLETE": "bash_complete", "COMP_WORDS": words, "COMP_CWORD": str(len(parts) - 1), **(env or {})})
    assert result.exit_code == 0, result.output
    return [tuple(line.split(",", 1)) for line in result.stdout.splitlines() if line]


@pytest.mark.parametrize("words", [
    "lodtool inspect sam", "lodtool validate a.h5 sam", "lodtool verify sam", "lodtool tree sam",
    "lodtool unpack sam", "lodtool slice sam", "lodtool head sam", "lodtool tail sam", "lodtool shard sam",
    "lodtool merge sam", "lodtool unpack a.h5 -o sam", "lodtool pack in.json -o sam", "lodtool pool a.h5 -o sam",
    "lodtool concat a.h5 b.h5 -o sam", "lodtool batch a.h5 -o sam", "lodtool pack sam", "lodtool batch sam",
    "lodtool pool sam", "lodtool expand a.h5 sam", "lodtool unpad sam", "lodtool pack-plan sam", "lodtool concat sam",
    "lodtool erase sam", "lodtool lod-reset a.h5 --like sam"])
def test_bash_completes_file_names_where_a_path_goes(words):
    assert complete(words) == [("file", "sam")]


def test_bash_completes_command_names_and_options_as_before():
    assert ("plain", "inspect") in complete("lodtool insp")
    assert ("plain", "--max-children") in complete("lodtool tree a.h5 --max-ch")


def test_a_branch_path_is_not_completed_as_a_file():
    assert complete("lodtool slice a.h5 2") == []


def test_completion_through_a_real_shell_environment(tmp_path):
    # the console script's own path: the environment bash's completion function sets, in a fresh process
    env = {**os.environ, "PYTHONPATH": str(ROOT), "_LODTOOL_COMPLETE": "bash_complete",
           "COMP_WORDS": "lodtool verify art", "COMP_CWORD": "2"}
    out = subprocess.run([sys.executable, "-c", "from lodtool.cli.main import main; main()"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.splitlines() == ["file,art"], out


# -- a full disk -------------------------------------------------------------------------------------------------
def test_a_full_disk_is_said_plainly_naming_the_output(container, tmp_path, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tasks, "unpack", full)
    result = run("unpack", container, "-o", tmp_path / "out.json")
    assert result.exit_code == 1
    assert error_line(result) == f"lodtool: error: {tmp_path / 'out.json'}: no space left on device"


def test_a_full_disk_inside_hdf5_names_the_output_not_the_temp_file(container, tmp_path, monkeypatch):
    from lodtool.container._h5 import translate

    out = tmp_path / "out.lod.h5"

    def full(*args, **kwargs):  # what the container writer raises when HDF5's write fails on a full disk
        with translate(str(out), "cannot write tensor 'tensor'"):
            raise OSError(errno.ENOSPC, "Can't write data (file write failed: errno = 28, error message = 'No "
                                        "space left on device')", str(tmp_path / ".out.lod.h5.lodtmp-0123456789ab"))

    monkeypatch.setattr(tasks, "slice", full)
    result = run("slice", container, "0", "-o", out)
    assert result.exit_code == 1
    assert error_line(result) == f"lodtool: error: {out}: no space left on device"


def test_a_full_disk_is_bad_luck_not_bad_usage(container, tmp_path, monkeypatch):
    from lodtool.errors import LodUsageError

    def full(*args, **kwargs):  # how the atomic writer's commit reports a failed fsync or rename
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as exc:
            raise LodUsageError(f"out.json: cannot write here ({exc.strerror})") from None

    monkeypatch.setattr(tasks, "unpack", full)
    result = run("unpack", container, "-o", tmp_path / "out.json")
    assert result.exit_code == 1 and error_line(result).endswith("out.json: no space left on device")


def test_a_full_temp_folder_under_output_to_stdout_is_named(container, tmp_path, monkeypatch):
    from lodtool.container._h5 import translate

    spool = tmp_path / "spool"

    def full(*args, **kwargs):
        with translate("out.lod.h5", "cannot write tensor 'tensor'"):
            raise OSError(errno.ENOSPC, "Can't write data", str(spool / ".out.lod.h5.lodtmp-0123456789ab"))

    monkeypatch.setattr(tasks, "slice", full)
    result = run("slice", container, "0", "--to", "h5", "-o", "-")
    assert result.exit_code == 1 and error_line(result) == f"lodtool: error: {spool}: no space left on device"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_stdout_on_a_full_device(container):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with open("/dev/full", "wb") as full:
        out = subprocess.run([sys.executable, "-m", "lodtool", "unpack", str(container), "--to", "jsonl"],
                             stdout=full, stderr=subprocess.PIPE, env=env, text=True, timeout=60)
    assert out.returncode == 1 and out.stderr == "lodtool: error: stdout: no space left on device\n"


def test_other_os_errors_keep_their_message(container, monkeypatch):
    def denied(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", "/x/out.json")

    monkeypatch.setattr(tasks, "unpack", denied)
    assert error_line(run("unpack", container, "-o", "out.json")) == "lodtool: error: /x/out.json: Permission denied"


# -- library words -> command-line words -------------------------------------------------------------------------
def test_a_library_message_reaches_the_user_in_flags(container, monkeypatch):
    def exists(*args, **kwargs):
        raise LodExistsError("out.lod.h5 already holds tensor 'tensor': pass overwrite=True to replace it, or "
                             "force=True to replace the whole file")

    monkeypatch.setattr(tasks, "slice", exists)
    result = run("slice", container, "0", "-o", "out.lod.h5")
    assert result.exit_code == 2
    assert error_line(result) == ("lodtool: error: out.lod.h5 already holds tensor 'tensor': add --overwrite to "
                                  "replace it, or --force to replace the whole file")


def test_a_library_keyword_named_otherwise_on_the_command_line(tmp_path):
    flat = tmp_path / "flat.lod.h5"
    lodtool.save(str(flat), lodtool.LoDTensor(np.arange(4), []))
    result = run("tree", flat, "--path", "1")  # tasks.tree's branch= is tree's --path
    assert result.exit_code == 2
    assert error_line(result) == "lodtool: error: a 0-level tensor has no branches; leave out --path"


def test_library_words_for_a_command_without_that_option_stay_as_they_are(container, monkeypatch):
    def refused(*args, **kwargs):
        raise LodFormatError("x.h5: over the limit (raise it with max_memory=...)")

    monkeypatch.setattr(tasks, "inspect", refused)  # inspect has no --max-memory: nothing to translate into
    expected = "lodtool: error: x.h5: over the limit (raise it with max_memory=...)"
    assert error_line(run("inspect", container)) == expected


@pytest.fixture(scope="module")
def commands() -> dict[str, click.Command]:
    return {name: cli.get_command(None, name) for name in COMMANDS}


@pytest.mark.parametrize("library, command_line", [
    ("pass overwrite=True to replace it", "add --overwrite to replace it"),
    ("needs max_tokens=... or max_sequences=...", "needs --max-tokens or --max-sequences"),
    ("give max_tokens=4096 at least", "give --max-tokens 4096 at least"),
    ("pass dtype='float64' to keep them", "give --dtype float64 to keep them"),
    ("(dtype=uint64)", "(--dtype uint64)"),
    ("append=True never changes the stored dtype", "--append never changes the stored dtype"),
    ("pass append=False", "leave out --append"),
    ("format=... names the input format", "--format names the input format"),
    ("a = b, x==y and t.dtype=int are no mentions", "a = b, x==y and t.dtype=int are no mentions"),
    ("pass validate=False (no such option)", "pass validate=False (no such option)"),
])
def test_in_flags_translates_keyword_mentions(commands, library, command_line):
    command = commands["batch"] if "max_" in library else commands["pack"]
    assert in_flags(library, command) == command_line


def test_every_keyword_alias_names_a_real_option(commands):
    options = {p.name for c in commands.values() for p in c.params if isinstance(p, click.Option)}
    assert set(OPTION_OF_KEYWORD.values()) <= options
