"""Printing for the subcommands: errors and warnings on stderr, JSON and aligned tables on stdout.

Every message is one line per problem with control, bidi and invisible characters escaped, so a
hostile file name or tool name can neither forge a line nor reorder what a terminal shows.
Exit codes: 0 done, 1 findings (lint errors, failing policy tests), 2 bad input or usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..visible import escape, hidden_characters

__all__ = ["BAD_INPUT", "FINDINGS", "OK", "PROG", "add_format", "escape", "fail", "hidden_characters",
           "print_json", "table", "warn"]

PROG = "mcp-preconditions"
OK, FINDINGS, BAD_INPUT = 0, 1, 2


def _say(kind: str, lines: Iterable[str], command: str | None = None) -> None:
    if sys.stderr is None:  # stderr closed: the exit code is all that is left to say it with
        return
    prog = PROG if command is None else f"{PROG} {command}"
    for line in lines:
        print(f"{prog}: {kind}: {escape(line)}", file=sys.stderr)


def fail(message: str | Sequence[str], command: str | None = None) -> int:
    """Report bad input on stderr, one line per problem (`mcp-preconditions COMMAND: error: ...`
    with a command: a usage error, as argparse says it); returns the exit code 2."""
    _say("error", [message] if isinstance(message, str) else message, command)
    return BAD_INPUT


def warn(message: str) -> None:
    _say("warning", [message])


def print_json(payload: Mapping[str, Any]) -> None:
    """JSON on stdout, UTF-8 as is; a string no encoding can carry (a lone surrogate that came in
    through a verified token's claims, say) switches the document to ASCII escapes, never a crash."""
    text = json.dumps(payload, indent=2, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(payload, indent=2, ensure_ascii=True)
    print(text)


def table(rows: Sequence[Sequence[str]]) -> list[str]:
    """Rows as lines with every column but the last padded to its widest cell (cells escaped)."""
    if not rows:
        return []
    rows = [[escape(cell) for cell in row] for row in rows]
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]) - 1)]
    return ["  ".join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[-1]]).rstrip()
            for row in rows]


def add_format(parser: argparse.ArgumentParser, default: str = "table") -> None:
    parser.add_argument("--format", choices=("table", "json"), default=default,
                        help=f"output format (default: {default})")
