"""Regenerate docs/cli.md from the commands' own --help (so the reference cannot go stale).

    python docs/gen_cli_reference.py          # rewrite docs/cli.md
    python docs/gen_cli_reference.py --check  # exit 1 if docs/cli.md is out of date
"""

from __future__ import annotations

import sys
from pathlib import Path

from click.testing import CliRunner

from lodtool.cli.main import COMMANDS, cli

TARGET = Path(__file__).resolve().parent / "cli.md"


def render() -> str:
    runner = CliRunner()
    parts = ["# lodtool command reference\n",
             "Generated from `--help` by `python docs/gen_cli_reference.py`; do not edit by hand.\n",
             "```\n$ lodtool --help\n" + runner.invoke(cli, ["--help"], terminal_width=100).output + "```\n"]
    for name in COMMANDS:
        text = runner.invoke(cli, [name, "--help"], terminal_width=100).output
        parts.append(f"## lodtool {name}\n\n```\n$ lodtool {name} --help\n{text}```\n")
    return "\n".join(parts)


def main() -> int:
    text = render()
    if "--check" in sys.argv:
        if not TARGET.exists() or TARGET.read_text() != text:
            print(f"{TARGET} is out of date: run python docs/gen_cli_reference.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
