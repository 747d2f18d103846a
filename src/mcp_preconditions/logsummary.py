"""Summaries of JSONL decision logs from many replicas: per tool, allowed and denied counts, the top
unmet requirements, and the revisions and replicas seen; per revision and per replica, convergence;
and per tool over time (`Timeline`, the explorer's chart).

Files are read line by line: memory grows with the distinct tools, requirements, revisions and
replicas, never with the number of lines, and a line longer than MAX_LINE_BYTES is skipped unread.
"""

from __future__ import annotations

import json
import math
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from .errors import InputError

MAX_LINE_BYTES = 1 << 20  # a decision record is a few hundred bytes; 1 MiB is not one
MAX_WARNINGS = 5  # bad lines named per file: a wrong file passed by mistake must not flood anyone
OnBadLine = Callable[[str, int, str], None]  # (file, line number, problem)
STDIN = "-"


@dataclass
class ToolSummary:
    """One tool's decisions: counts, unmet requirements, and where they were decided."""

    allowed: int = 0
    denied: int = 0
    errors: int = 0  # denials in which at least one requirement ended as `error`
    unmet: Counter[str] = field(default_factory=Counter)
    revisions: dict[str, None] = field(default_factory=dict)  # an ordered set: first seen first
    replicas: dict[str, None] = field(default_factory=dict)


@dataclass
class RevisionSummary:
    """One policy revision: how many records carry it, when, and from which replicas."""

    records: int = 0
    first_time: float | None = None
    last_time: float | None = None
    replicas: dict[str, None] = field(default_factory=dict)


@dataclass
class ReplicaSummary:
    """One replica: its records, the revisions it decided by, and the revision of its latest record
    (by record time): equal across replicas once they have converged."""

    records: int = 0
    revisions: dict[str, None] = field(default_factory=dict)
    last_time: float | None = None
    last_revision: str | None = None


@dataclass
class Summary:
    """The running totals over every record read so far."""

    records: int = 0
    skipped: int = 0
    tools: dict[str, ToolSummary] = field(default_factory=dict)
    revisions: dict[str, RevisionSummary] = field(default_factory=dict)
    replicas: dict[str, ReplicaSummary] = field(default_factory=dict)

    def add(self, record: Mapping[str, Any]) -> None:
        """Count one well-formed record (see `problem_of`)."""
        self.records += 1
        tool = self.tools.setdefault(record["tool"], ToolSummary())
        revision, replica = record.get("revision"), record.get("replica")
        when = time_of(record)
        if record["allowed"]:
            tool.allowed += 1
        else:
            tool.denied += 1
            tool.errors += 1 if record.get("errors") else 0
            tool.unmet.update(dict.fromkeys(record["unmet"], 1))  # a requirement counts once a call
        if isinstance(revision, str):
            tool.revisions.setdefault(revision, None)
            rev = self.revisions.setdefault(revision, RevisionSummary())
            rev.records += 1
            rev.first_time = _min(rev.first_time, when)
            rev.last_time = _max(rev.last_time, when)
            if isinstance(replica, str):
                rev.replicas.setdefault(replica, None)
        if isinstance(replica, str):
            tool.replicas.setdefault(replica, None)
            rep = self.replicas.setdefault(replica, ReplicaSummary())
            rep.records += 1
            if isinstance(revision, str):
                rep.revisions.setdefault(revision, None)
                # The latest by record time; records without a time count in reading order.
                if when is None or rep.last_time is None or when >= rep.last_time:
                    rep.last_revision = revision
                    rep.last_time = when if when is not None else rep.last_time

    def to_json(self, top: int = 3) -> dict[str, Any]:
        """The summary as JSON: tools by name, revisions by first appearance, replicas by name."""
        return {
            "records": self.records,
            "skipped": self.skipped,
            "tools": [{"tool": name, "allowed": t.allowed, "denied": t.denied, "errors": t.errors,
                       "top_unmet": [{"requirement": r, "count": n} for r, n in top_unmet(t, top)],
                       "revisions": list(t.revisions), "replicas": list(t.replicas)}
                      for name, t in sorted(self.tools.items())],
            "revisions": [{"revision": name, "records": r.records, "first_time": r.first_time,
                           "last_time": r.last_time, "replicas": list(r.replicas)}
                          for name, r in self.revisions.items()],
            "replicas": [{"replica": name, "records": r.records, "revisions": list(r.revisions),
                          "last_revision": r.last_revision}
                         for name, r in sorted(self.replicas.items())],
        }


def time_of(record: Mapping[str, Any]) -> float | None:
    """A record's `time` (seconds since the epoch), or None when it has no usable one."""
    when = record.get("time")
    if isinstance(when, int | float) and not isinstance(when, bool):
        try:
            seconds = float(when)
        except OverflowError:  # an integer too large for a float
            return None
        return seconds if math.isfinite(seconds) else None
    return None


def top_unmet(tool: ToolSummary, top: int) -> list[tuple[str, int]]:
    """The `top` most frequent unmet requirements, ties in code point order."""
    return sorted(tool.unmet.items(), key=lambda item: (-item[1], item[0]))[:top]


def _min(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)


def _max(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


# -- over time -------------------------------------------------------------------------------------
# Bucket widths in seconds, each a multiple of the one before, so buckets merge without splitting.
_WIDTHS = (1, 5, 10, 30, 60, 300, 600, 1800, 3600, 7200, 21600, 86400, 604800)


@dataclass
class Timeline:
    """Allowed and denied counts per tool per time bucket, in at most `max_buckets` buckets: when the
    records span more, the buckets widen (1 s, 5 s, ... a week, then doubling) and merge. Memory
    grows with buckets times tools, never with the number of records."""

    max_buckets: int = 60
    width: int = 1
    counts: dict[int, dict[str, list[int]]] = field(default_factory=dict)  # start -> tool -> [a, d]
    untimed: int = 0  # records without a usable time, counted in the summary but not here

    def add(self, record: Mapping[str, Any]) -> None:
        when = time_of(record)
        if when is None:
            self.untimed += 1
            return
        start = math.floor(when / self.width) * self.width
        per_tool = self.counts.setdefault(start, {})
        pair = per_tool.setdefault(record["tool"], [0, 0])
        pair[0 if record["allowed"] else 1] += 1
        while len(self.counts) > 1 and \
                (max(self.counts) - min(self.counts)) // self.width >= self.max_buckets:
            self._widen()

    def _widen(self) -> None:
        wider = next((w for w in _WIDTHS if w > self.width), self.width * 2)
        merged: dict[int, dict[str, list[int]]] = {}
        for start, per_tool in self.counts.items():
            into = merged.setdefault(start // wider * wider, {})
            for tool, (allowed, denied) in per_tool.items():
                pair = into.setdefault(tool, [0, 0])
                pair[0] += allowed
                pair[1] += denied
        self.width, self.counts = wider, merged

    def buckets(self) -> list[int]:
        """Every bucket start from the first to the last, empty ones included."""
        if not self.counts:
            return []
        return list(range(min(self.counts), max(self.counts) + self.width, self.width))


class BadLines:
    """An `OnBadLine` that tells `say` about the first MAX_WARNINGS bad lines of each file, as
    `FILE:LINE: problem; line skipped`, and counts the rest (`report_rest` tells those)."""

    def __init__(self, say: Callable[[str], None], most: int = MAX_WARNINGS) -> None:
        self.say = say
        self.most = most
        self.per_file: Counter[str] = Counter()

    def __call__(self, name: str, number: int, problem: str) -> None:
        self.per_file[name] += 1
        if self.per_file[name] <= self.most:
            self.say(f"{name}:{number}: {problem}; line skipped")

    def report_rest(self) -> None:
        for name, count in self.per_file.items():
            if count > self.most:
                self.say(f"{name}: {count - self.most} more bad line(s) skipped")


# -- reading ---------------------------------------------------------------------------------------
def problem_of(record: Any) -> str | None:
    """Why a parsed line is not a decision record (`decision_record` in decisions.py), or None."""
    if not isinstance(record, dict):
        return "not a JSON object"
    if not isinstance(record.get("tool"), str):
        return 'not a decision record: no "tool" string'
    if not isinstance(record.get("allowed"), bool):
        return 'not a decision record: no "allowed" true/false'
    unmet = record.get("unmet")
    if not isinstance(unmet, list) or not all(isinstance(r, str) for r in unmet):
        return 'not a decision record: "unmet" is not a list of strings'
    for key in ("revision", "replica"):
        if key in record and not isinstance(record[key], str):
            return f'not a decision record: "{key}" is not a string'
    return None


def _lines(stream: IO[bytes]) -> Iterator[bytes | None]:
    """Each line of a binary stream, or None for one longer than MAX_LINE_BYTES (read past in
    bounded pieces, never held whole)."""
    while True:
        line = stream.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        if len(line) <= MAX_LINE_BYTES:
            yield line
            continue
        while line and not line.endswith(b"\n"):
            line = stream.readline(MAX_LINE_BYTES)
        yield None


def read_records(name: str, stream: IO[bytes], on_bad: OnBadLine) -> Iterator[dict[str, Any]]:
    """The decision records of one JSONL stream; blank lines are ignored, every other line that is
    not a record is reported to `on_bad(name, line_number, problem)` and skipped."""
    for number, line in enumerate(_lines(stream), start=1):
        if line is None:
            on_bad(name, number, f"longer than {MAX_LINE_BYTES} bytes")
            continue
        if not line.strip():
            continue
        try:
            record = json.loads(line.decode("utf-8"))
        except UnicodeDecodeError:
            on_bad(name, number, "not UTF-8")
            continue
        except json.JSONDecodeError as exc:
            on_bad(name, number, f"not JSON ({exc.msg} at column {exc.colno})")
            continue
        except RecursionError:
            on_bad(name, number, "not usable JSON: nested too deeply")
            continue
        problem = problem_of(record)
        if problem is not None:
            on_bad(name, number, problem)
            continue
        yield record


def summarize(paths: Sequence[str], on_bad: OnBadLine) -> Summary:
    """Read every file in turn (`-` is standard input) into one Summary. Raises InputError naming a
    file that cannot be opened or read."""
    summary = Summary()

    def bad(name: str, number: int, problem: str) -> None:
        summary.skipped += 1
        on_bad(name, number, problem)

    for path in paths:
        try:
            if path == STDIN:
                for record in read_records("<stdin>", sys.stdin.buffer, bad):
                    summary.add(record)
                continue
            with open(path, "rb") as stream:
                for record in read_records(path, stream, bad):
                    summary.add(record)
        except OSError as exc:
            raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return summary
