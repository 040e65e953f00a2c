"""The `kernelblaster` command line: one parser whose sub-commands live beside the code they drive.

Each command group module exposes `add_commands(subparsers)` and declares its commands with
`tools.options.add_command` (flags validated into a pydantic model before the command runs). Building the
parser imports no torch, LangGraph or Chroma, so `--help` and light commands answer at once.
Errors meant for the user (`UserFacingError`) print one line and exit with the error's status (2, or 4 for a
problem too large for the GPU); nothing prints a traceback for them. Output into a pipe its reader closed
(`kernelblaster kb export - | head`) ends the command quietly, as it ends other Unix tools.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from kernelblaster.eval import cli as bench_cli
from kernelblaster.graph.app import export_cli, run_cli, runs_cli
from kernelblaster.harness import cli as harness_cli
from kernelblaster.kb import cli as kb_cli
from kernelblaster.tools.errors import UserFacingError
from kernelblaster.tools.options import CommandLineParser
from kernelblaster.tools.untrusted_text import for_terminal

PROGRAM = "kernelblaster"
EXIT_BROKEN_PIPE = 128 + 13  # the status of a program that SIGPIPE ended, as a shell reports it


def build_parser() -> argparse.ArgumentParser:
    parser = CommandLineParser(
        prog=PROGRAM,
        description="Make PyTorch workloads faster with verified CUDA written by LLM agents that learn.",
    )
    parser.add_argument("--version", action=_PrintVersion, help="print the installed version and exit")
    subparsers = parser.add_subparsers(dest="command_name", required=True, metavar="COMMAND")
    harness_cli.add_commands(subparsers)
    kb_cli.add_commands(subparsers)
    run_cli.add_commands(subparsers)
    runs_cli.add_commands(subparsers)
    export_cli.add_commands(subparsers)
    bench_cli.add_commands(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        status = int(args.command(args))
        sys.stdout.flush()  # a closed pipe is met here, not when Python flushes at exit
        return status
    except UserFacingError as error:
        # An error may quote a file or an answer: its control characters are shown, never obeyed.
        print(for_terminal(f"{PROGRAM}: {error}"), file=sys.stderr)
        return error.exit_status
    except KeyboardInterrupt:
        print(f"{PROGRAM}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        _discard_unwritten_output()
        return EXIT_BROKEN_PIPE


def _discard_unwritten_output() -> None:
    # What is still buffered for the closed pipe would fail again when Python flushes stdout at exit.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


class _PrintVersion(argparse.Action):
    """`--version`, looked up only when asked for (reading package metadata takes a while)."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        from importlib import metadata

        try:
            version = metadata.version(PROGRAM)
        except metadata.PackageNotFoundError:
            version = "(not installed)"
        print(f"{PROGRAM} {version}")
        parser.exit()


if __name__ == "__main__":
    sys.exit(main())
