"""The README's shell examples run top to bottom, in order, in a scratch folder, and print what it shows.

Which lines are examples (the rule a README edit has to keep):

* In a fenced block that has ``$ `` prompts, each ``$ `` line is a command, and the lines under it up to the
  next prompt or the fence's end are what it prints (stdout and stderr, as a terminal shows them), compared
  exactly where any are shown.
* In a ```` ```bash ```` block without prompts, every line is a command (its output is not shown).
* Steps that install or run the test suite (``pip install ...``, ``pytest ...``) are dropped from a line,
  since this environment is already the installed one and this is the suite; a line whose programs are
  not installed here (``jq``) is skipped.  Everything else runs and must exit 0.
* A line runs under bash, or under the shell its comment starts with (``# zsh: ...``), skipped where that
  shell is not installed.

``lodtool`` is this checkout's CLI and ``python`` this interpreter.  A line of plain ``lodtool`` calls (joined
by ``&&``; no pipe, redirection or substitution) runs in this process through CliRunner, call by call,
after the shell's quoting, comments and globbing; any other line runs under its shell.
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner

from lodtool.cli.main import cli

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Example:
    line: int  # in README.md, for the failure message
    command: str
    output: list[str] | None = field(default=None)  # None: not shown


def examples(text: str) -> list[Example]:
    """The examples of a README, in order, by the rule above."""
    found: list[Example] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"^```(\w*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        body = list(enumerate(lines[i + 1:end], start=i + 2))
        if any(line.startswith("$ ") for _, line in body):
            current = None
            for number, line in body:
                if line.startswith("$ "):
                    current = Example(number, line[2:], [])
                    found.append(current)
                elif current is not None:
                    current.output.append(line)
        elif fence[1] == "bash":
            found += [Example(number, line) for number, line in body if line.strip()]
        i = end + 1
    return found


def _words(command: str) -> list[str]:
    """The shell's words and operators of a line (quotes and comments as the shell reads them)."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    return list(lexer)


def _is_operator(word: str) -> bool:
    return set(word) <= set("|&;<>()")


def _programs(command: str) -> list[str]:
    """The program each command of a line runs (after its ``NAME=value`` assignments)."""
    programs, starting = [], True
    for word in _words(command):
        if _is_operator(word):
            starting = word in ("|", "||", "&&", ";")
        elif starting and not re.match(r"^[A-Za-z_]\w*=", word):
            programs.append(word)
            starting = False
    return programs


def _runnable(command: str) -> str | None:
    """The line without its pip and pytest steps (installing is done, and the suite is what runs this);
    None if nothing is left or a program it needs is not installed."""
    steps = [step for step in command.split(" && ") if _programs(step)[:1] not in ([], ["pip"], ["pytest"])]
    if not steps or shutil.which(_shell(command)) is None:
        return None
    if any(p not in ("lodtool", "python", "eval", "mkdir") and shutil.which(p) is None
           for step in steps for p in _programs(step)):
        return None
    return " && ".join(steps)


def _shell(command: str) -> str:
    named = re.search(r"#\s*(bash|zsh|fish)\b", command)
    return named[1] if named else "bash"


def _one_lodtool_call(command: str) -> list[str] | None:
    """The arguments of a line that is a single lodtool call, as the shell would pass them; else None."""
    words = _words(command)
    if not words or words[0] != "lodtool" or any(_is_operator(w) for w in words) or "$" in command:
        return None
    expanded = []
    for word in words[1:]:
        matches = sorted(glob.glob(word)) if any(c in word for c in "*?[") else []
        expanded += matches or [word]
    return expanded


@pytest.fixture
def scratch(tmp_path, monkeypatch) -> dict:
    """The environment of a bash line; the current folder (for CliRunner's lines too) is the scratch folder."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, line in (("lodtool", f'exec "{sys.executable}" -m lodtool "$@"'),
                       ("python", f'exec "{sys.executable}" "$@"')):
        (bin_dir / name).write_text(f"#!/bin/sh\n{line}\n")
        (bin_dir / name).chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    (work / "sample_data").symlink_to(ROOT / "sample_data")
    (tmp_path / "home").mkdir()
    monkeypatch.chdir(work)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "HOME": str(tmp_path / "home"),
           "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    env.pop("COLUMNS", None)
    return env


def test_the_rule_finds_the_examples():
    found = examples((ROOT / "README.md").read_text())
    commands = [e.command for e in found]
    assert any(c.startswith("pip install . && lodtool pack") for c in commands)  # the first two commands
    assert sum(c.startswith("lodtool pack sample_data/articles.json") for c in commands) >= 1
    assert all(e.output is None or not any(line.startswith("$ ") for line in e.output) for e in found)


def test_the_readme_runs_top_to_bottom(scratch, monkeypatch):
    from lodtool.cli import _render

    monkeypatch.setattr(_render, "_console", None)  # a fresh console for CliRunner's non-terminal output
    monkeypatch.delenv("COLUMNS", raising=False)
    ran = 0
    for example in examples((ROOT / "README.md").read_text()):
        command = _runnable(example.command)
        if command is None:
            continue
        where = f"README.md:{example.line}: {example.command}"
        calls = [_one_lodtool_call(step) for step in command.split(" && ")]
        if all(args is not None for args in calls):
            code, printed = 0, ""
            for args in calls:
                result = CliRunner().invoke(cli, args, prog_name="lodtool")
                code, printed = result.exit_code, printed + result.output
                if code:
                    break
        else:
            done = subprocess.run([_shell(command), "-c", command], env=scratch, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, timeout=120)
            code, printed = done.returncode, done.stdout
        assert code == 0, f"{where}\nexit {code}\n{printed}"
        if example.output:
            assert printed.splitlines() == example.output, where
        ran += 1
    assert ran >= 15  # the rule still finds the examples
