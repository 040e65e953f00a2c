"""The `kernelblaster` command line: one parser whose sub-commands live beside the code they drive.

Each command group module exposes `add_commands(subparsers)`, setting `func(args) -> int` on its parsers.
Errors meant for the user (`UserFacingError`) print one line and exit with the error's status (2, or 4 for a
problem too large for the GPU); nothing prints a traceback for them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from kernelblaster.tools.errors import UserFacingError


def build_parser() -> argparse.ArgumentParser:
    from kernelblaster.graph import run_cli
    from kernelblaster.harness import cli as harness_cli
    from kernelblaster.kb import cli as kb_cli

    parser = argparse.ArgumentParser(
        prog="kernelblaster",
        description="Make PyTorch workloads faster with verified CUDA written by LLM agents that learn.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    harness_cli.add_commands(subparsers)
    kb_cli.add_commands(subparsers)
    run_cli.add_commands(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except UserFacingError as error:
        print(f"kernelblaster: {error}", file=sys.stderr)
        return error.exit_status
    except KeyboardInterrupt:
        print("kernelblaster: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
