"""The `mcp-preconditions` command: argument parsing, subcommand dispatch and the exit-code contract.

Each `*_cmds` module adds its subcommands with `register(subparsers)`; each subcommand's `func(args)`
returns the exit code. Bad input ends here as one `mcp-preconditions: error: ...` line, never a
traceback: 0 done, 1 findings, 2 bad input or usage.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from .. import __version__
from ..errors import PreconditionsError
from . import core_cmds, gateway_cmds, lint_cmd, policy_cmds, presentation_cmds, server_cmds
from ._output import BAD_INPUT, PROG, fail

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Enforce and inspect SEP-2487 execution.requirements on MCP tools.",
        epilog="Exit codes: 0 done, 1 findings (lint errors, failing policy tests), "
               "2 bad input or usage.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (core_cmds, lint_cmd, policy_cmds, presentation_cmds, server_cmds, gateway_cmds):
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (the console script exits with it)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version and usage errors: argparse has printed already
        return exc.code if isinstance(exc.code, int) else BAD_INPUT
    try:
        code: int = args.func(args)
    except PreconditionsError as exc:
        return fail(str(exc))
    except OSError as exc:  # a file the libraries read themselves; their own errors name it
        where = f"{exc.filename}: " if exc.filename else ""
        return fail(f"{where}{exc.strerror or exc}")
    except RecursionError:  # a parser below us met absurd nesting; still bad input, not a crash
        return fail("an input file is nested too deeply to read")
    except KeyboardInterrupt:
        return 130
    return code
