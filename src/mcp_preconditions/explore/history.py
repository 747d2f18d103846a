"""What happened: decision logs read with the `log summarize` code (logsummary.py), for the page's
tables (the same numbers the command prints), its filters (one replica, one revision) and its chart
(allowed and denied per tool over time).

Logs are read line by line at each request, bounded like every input file: a log larger than the
input size bound gets a message naming it and the bound, never a long wait or a crash.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import IO, Any

from ..errors import InputError
from ..files import MAX_FILE_BYTES_ENV, max_file_bytes
from ..logsummary import BadLines, Summary, Timeline, read_records
from .chart import chart_svg


@dataclass(frozen=True)
class Filter:
    """Which records the tables and the chart count: all, or one replica's, or one revision's."""

    replica: str | None = None
    revision: str | None = None

    def matches(self, record: dict[str, Any]) -> bool:
        return ((self.replica is None or record.get("replica") == self.replica)
                and (self.revision is None or record.get("revision") == self.revision))


def too_large(name: str, size: int) -> str:
    bound = max_file_bytes()
    return (f"{name}: {size} bytes, larger than {bound} bytes, the input size bound (set "
            f"${MAX_FILE_BYTES_ENV} to raise it; `mcp-preconditions log summarize` reads a log of "
            "any size)")


def _opened(paths: Iterable[str], problems: list[str]) -> Iterable[tuple[str, IO[bytes]]]:
    bound = max_file_bytes()
    for path in paths:
        try:
            size = os.stat(path).st_size
            if size > bound:
                problems.append(too_large(path, size))
                continue
            with open(path, "rb") as stream:
                yield path, stream
        except OSError as exc:
            problems.append(f"{path}: cannot read: {exc.strerror or exc}")


def history(sources: Iterable[tuple[str, IO[bytes]]], chosen: Filter, top: int = 3,
            problems: list[str] | None = None) -> dict[str, Any]:
    """The page's JSON for these logs: every record counted for the filter choices, the chosen ones
    in the tables and the chart."""
    problems = [] if problems is None else problems
    everything, summary, timeline = Summary(), Summary(), Timeline()
    bad_lines: list[str] = []
    bad = BadLines(bad_lines.append)
    names = []
    for name, stream in sources:
        names.append(name)
        try:
            for record in read_records(name, stream, bad):
                everything.add(record)
                if chosen.matches(record):
                    summary.add(record)
                    timeline.add(record)
        except OSError as exc:  # the disk failed under a file being read: say so, keep the rest
            problems.append(f"{name}: cannot read: {exc.strerror or exc}")
    bad.report_rest()
    everything.skipped = sum(bad.per_file.values())
    return {"sources": names, "problems": problems, "bad_lines": bad_lines,
            "records": everything.records, "skipped": everything.skipped,
            "choices": {"replicas": sorted(everything.replicas), "revisions": list(everything.revisions)},
            "filter": {"replica": chosen.replica, "revision": chosen.revision},
            "summary": summary.to_json(top), "chart": chart_svg(timeline, summary)}


def history_of_files(paths: Iterable[str], chosen: Filter, top: int = 3) -> dict[str, Any]:
    """The `--log` files, read again now (a gateway may still be writing them)."""
    problems: list[str] = []
    return history(_opened(paths, problems), chosen, top, problems)


def history_of_upload(name: str, data: bytes, chosen: Filter, top: int = 3) -> dict[str, Any]:
    """A log loaded from the page (already bounded by the request's size)."""
    if not name:
        raise InputError("log: the uploaded file has no name")
    return history([(name, io.BytesIO(data))], chosen, top)
