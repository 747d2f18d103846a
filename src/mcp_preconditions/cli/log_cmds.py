"""The `log summarize` subcommand: JSONL decision logs from many replicas, summarised per tool, per
policy revision and per replica. Argument parsing and printing only (the logic is logsummary.py).

Exit codes: 0 done; 1 done, but some lines were not decision records (each named on stderr as a
warning, at most MAX_WARNINGS per file); 2 a file cannot be read.
"""

from __future__ import annotations

import argparse
import time

from ..logsummary import BadLines, Summary, summarize, top_unmet
from ._output import FINDINGS, OK, add_format, fail, print_json, table, warn


def run_summarize(args: argparse.Namespace) -> int:
    if args.top < 1:
        return fail(f"--top must be 1 or more, got {args.top}")
    bad = BadLines(warn)
    summary = summarize(args.files, bad)
    bad.report_rest()
    if args.format == "json":
        print_json(summary.to_json(args.top))
    else:
        print("\n".join(summary_lines(summary, args.top)))
    return FINDINGS if summary.skipped else OK


def summary_lines(summary: Summary, top: int) -> list[str]:
    """The summary as three aligned tables: tools, revisions, replicas."""
    lines = table([("tool", "allowed", "denied", "errors", "top unmet", "revisions"),
                   *((name, str(t.allowed), str(t.denied), str(t.errors),
                      ", ".join(f"{r} ({n})" for r, n in top_unmet(t, top)) or "-",
                      ", ".join(t.revisions) or "-")
                     for name, t in sorted(summary.tools.items()))])
    if summary.revisions:
        lines += ["", *table([("revision", "records", "first seen (UTC)", "last seen (UTC)", "replicas"),
                              *((name, str(r.records), _when(r.first_time), _when(r.last_time),
                                 ", ".join(r.replicas) or "-")
                                for name, r in summary.revisions.items())])]
    if summary.replicas:
        lines += ["", *table([("replica", "records", "last revision", "revisions"),
                              *((name, str(r.records), r.last_revision or "-", ", ".join(r.revisions))
                                for name, r in sorted(summary.replicas.items()))])]
    skipped = f"; {summary.skipped} line(s) skipped" if summary.skipped else ""
    lines += ["", f"{summary.records} decision record(s){skipped}"]
    return lines


def _when(seconds: float | None) -> str:
    return "-" if seconds is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `log summarize` to the main parser."""
    log = subparsers.add_parser("log", help="read decision logs",
                                description="Read JSONL decision logs (decision_log.jsonl_path).")
    commands = log.add_subparsers(dest="log_command", required=True, metavar="COMMAND")
    summarize_parser = commands.add_parser(
        "summarize", help="per tool, revision and replica counts from JSONL decision logs",
        description="Summarise JSONL decision records from one or more replicas, streaming: per tool "
                    "the allowed and denied counts, the top unmet requirements and the policy "
                    "revisions seen; per revision when and where it was seen; per replica the "
                    "revision of its latest record. A line that is not a decision record is named "
                    "on stderr and skipped, and the exit code is then 1.")
    summarize_parser.add_argument("files", nargs="+", metavar="FILE",
                                  help="JSONL decision log ('-' reads standard input)")
    summarize_parser.add_argument("--top", type=int, default=3, metavar="N",
                                  help="unmet requirements shown per tool (default 3)")
    add_format(summarize_parser)
    summarize_parser.set_defaults(func=run_summarize)


__all__ = ["register", "run_summarize", "summary_lines"]
