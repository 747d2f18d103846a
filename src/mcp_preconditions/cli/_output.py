"""Printing for the core subcommands: errors and warnings on stderr, JSON and aligned tables on stdout.

Exit codes: 0 done, 1 findings (lint errors, failing policy tests), 2 bad input or usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

PROG = "mcp-preconditions"
OK, FINDINGS, BAD_INPUT = 0, 1, 2


def fail(message: str) -> int:
    """Report bad input on stderr; returns the exit code 2."""
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return BAD_INPUT


def warn(message: str) -> None:
    print(f"{PROG}: warning: {message}", file=sys.stderr)


def print_json(payload: Mapping[str, Any]) -> None:
    print(json.dumps(payload, indent=2, ensure_ascii=False))


def table(rows: Sequence[Sequence[str]]) -> list[str]:
    """Rows as lines with every column but the last padded to its widest cell."""
    if not rows:
        return []
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]) - 1)]
    return ["  ".join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[-1]]).rstrip()
            for row in rows]


def add_format(parser: argparse.ArgumentParser, default: str = "table") -> None:
    parser.add_argument("--format", choices=("table", "json"), default=default,
                        help=f"output format (default: {default})")
