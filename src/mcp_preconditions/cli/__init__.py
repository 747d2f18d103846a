"""The `mcp-preconditions` command: argument parsing, subcommand dispatch and the exit-code contract.

Each `*_cmds` module adds its subcommands with `register(subparsers)`; each subcommand's `func(args)`
returns the exit code. Bad input ends here as one `mcp-preconditions: error: ...` line, never a
traceback: 0 done, 1 findings, 2 bad input or usage.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from .. import __version__
from ..errors import PreconditionsError, UsageError
from ._extras import extra_behind, missing, needs_line
from ._output import BAD_INPUT, PROG, escape, fail

__all__ = ["build_parser", "main"]
# What writing our output can fail with; the commands' own file reads name their file instead.
_WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EPIPE})
# Each module adds its subcommands, in this order in `--help`.
MODULES = ("core_cmds", "lint_cmd", "policy_cmds", "presentation_cmds", "server_cmds", "demo_cmd",
           "gateway_cmds", "config_cmds", "tools_cmd", "log_cmds", "explore_cmd", "pdp_cmd")
# A long-running command loads its module alone (the others cost a gateway 2 MB of memory, for
# parsers it never uses).
ALONE = {"gateway": "gateway_cmds", "pdp": "pdp_cmd"}


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error printed as one line like every other error (no usage block:
    `--help` shows it). Subcommand parsers are built with the same class."""

    def error(self, message: str) -> NoReturn:
        self.exit(BAD_INPUT, f"{self.prog}: error: {escape(message)}\n")


def build_parser(modules: Sequence[str] = MODULES) -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG, description="Enforce and inspect SEP-2487 execution.requirements on MCP tools.",
        epilog="Exit codes: 0 done, 1 findings (lint errors, failing policy tests), "
               "2 bad input or usage.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in modules:
        importlib.import_module(f"{__name__}.{module}").register(subparsers)
    for name, subparser in subparsers.choices.items():  # `command` is also the upstream's argv
        subparser.set_defaults(subcommand=name, usage_error=subparser.error)
    return parser


def _needs_stdout(args: argparse.Namespace) -> bool:
    """Every command prints its result on stdout but `serve` over HTTP and `explore` (they announce
    on stderr)."""
    return not ((args.command == "serve" and args.transport == "http") or args.command == "explore")


def _output_lost(exc: OSError) -> int:
    """stdout went away (a closed pipe, a full disk): say so once, and keep the interpreter's own
    flush at exit from failing again with a traceback."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, AttributeError, ValueError):
        pass
    return fail(f"standard output: cannot write: {exc.strerror or exc}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (the console script exits with it)."""
    given = list(sys.argv[1:] if argv is None else argv)
    alone = ALONE.get(given[0]) if given else None
    parser = build_parser((alone,) if alone is not None else MODULES)
    try:
        args, unknown = parser.parse_known_args(argv)
        if unknown:  # said by the command's own parser, so the line names the command
            args.usage_error(f"unrecognized arguments: {' '.join(unknown)}")
    except SystemExit as exc:  # --help, --version and usage errors: argparse has printed already
        return exc.code if isinstance(exc.code, int) else BAD_INPUT
    if sys.stdout is None and _needs_stdout(args):  # started with stdout closed (`>&-`)
        return fail("standard output is closed; there is nowhere to print the result")
    absent = missing(args.subcommand)
    if absent is not None:
        return fail(needs_line(*absent), args.subcommand)
    try:
        code: int = args.func(args)
        if sys.stdout is not None:
            sys.stdout.flush()  # a write error surfaces here, not in the interpreter's exit
    except ModuleNotFoundError as exc:  # installed, but not importable: the same line
        if (extra := extra_behind(args.subcommand, exc)) is None:
            raise
        return fail(needs_line(extra, [(exc.name or "").partition(".")[0]]), args.subcommand)
    except UsageError as exc:
        return fail(exc.lines(), args.subcommand)
    except PreconditionsError as exc:
        return fail(exc.lines())
    except (BrokenPipeError, ConnectionResetError) as exc:
        return _output_lost(exc)
    except OSError as exc:
        if exc.filename is None and exc.errno in _WRITE_ERRNOS:  # stdout on a full disk, /dev/full
            return _output_lost(exc)
        # a file the libraries read themselves; their own errors name it
        where = f"{exc.filename}: " if exc.filename else ""
        return fail(f"{where}{exc.strerror or exc}")
    except RecursionError:  # a parser below us met absurd nesting; still bad input, not a crash
        return fail("an input file is nested too deeply to read")
    except KeyboardInterrupt:
        return 130
    return code
