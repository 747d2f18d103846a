"""The reliability suite's counts (cases tried, calls made, calls wrongly allowed, tracebacks,
confidential requirement names a caller saw), kept for the run and written to
`.run/reliability.json` and the terminal summary for docs/testing.md.

The suite runs in both tiers (tests/fixtures/tiers.py), which `make test` runs as two pytest runs:
each tier's counts are written to `.run/reliability-TIER.json` (`default`, `interop`), and
`.run/reliability.json` holds both tiers' counts added up (the suite's whole count) once both have
been written; a run of neither tier alone (no `-m`) writes its own counts there.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

ARTEFACT = Path(__file__).resolve().parents[2] / ".run" / "reliability.json"
TIERS = ("default", "interop")


def tier_file(tier: str, artefact: Path = ARTEFACT) -> Path:
    """Where one tier's counts are written, beside the artefact."""
    return artefact.with_name(f"{artefact.stem}-{tier}{artefact.suffix}")


@dataclass
class Counts:
    cases: int = 0
    calls: int = 0
    wrongly_allowed: int = 0
    tracebacks: int = 0
    confidential_seen: int = 0


@dataclass
class Tally:
    suites: dict[str, Counts] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, suite: str, *, cases: int = 0, calls: int = 0, wrongly_allowed: int = 0,
            tracebacks: int = 0, confidential_seen: int = 0) -> None:
        with self._lock:
            counts = self.suites.setdefault(suite, Counts())
            counts.cases += cases
            counts.calls += calls
            counts.wrongly_allowed += wrongly_allowed
            counts.tracebacks += tracebacks
            counts.confidential_seen += confidential_seen

    def export(self) -> dict[str, dict[str, int]]:
        """The counts as plain data (what an xdist worker sends its controller)."""
        with self._lock:
            return {name: asdict(c) for name, c in self.suites.items()}

    def merge(self, suites: Mapping[str, Mapping[str, int]]) -> None:
        """Add counts from `export()` of another process."""
        for name, counts in suites.items():
            self.add(name, **counts)

    def total(self) -> Counts:
        out = Counts()
        for c in self.suites.values():
            out.cases += c.cases
            out.calls += c.calls
            out.wrongly_allowed += c.wrongly_allowed
            out.tracebacks += c.tracebacks
            out.confidential_seen += c.confidential_seen
        return out

    def lines(self) -> list[str]:
        rows = [f"{name}: {_line(c)}" for name, c in sorted(self.suites.items())]
        rows.append(f"total: {_line(self.total())}")
        return rows

    def payload(self) -> dict[str, object]:
        return {"suites": {k: asdict(v) for k, v in sorted(self.suites.items())},
                "total": asdict(self.total())}

    def write(self, path: Path = ARTEFACT, tier: str | None = None) -> Tally | None:
        """Write this run's counts: to `path` for a run of both tiers (`tier` None), else to the
        tier's own file and, once the other tier's is there too, both added up to `path` (which
        is returned: None when `path` was not written)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        if tier is None:
            _write(path, {**self.payload(), "tiers": "both, in one run"})
            return self
        _write(tier_file(tier, path), {**self.payload(), "written": time.time()})
        files = [tier_file(t, path) for t in TIERS]
        if not all(f.exists() for f in files):
            return None
        both = Tally()
        written = {}
        for t, f in zip(TIERS, files, strict=True):
            found = json.loads(f.read_text(encoding="utf-8"))
            both.merge(found["suites"])
            written[t] = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(found["written"]))
        _write(path, {**both.payload(), "tiers": written})
        return both


def _write(path: Path, payload: Mapping[str, object]) -> None:
    path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")


def _line(c: Counts) -> str:
    return (f"{c.cases} cases, {c.calls} calls, {c.wrongly_allowed} wrongly allowed, "
            f"{c.tracebacks} tracebacks, {c.confidential_seen} confidential names seen")


TALLY = Tally()
