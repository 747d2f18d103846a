"""What an approval leaves behind (records, metrics): moved to lifecycle.py (a request's life, from
its binding to its record). These names stay importable from here."""

from __future__ import annotations

from .lifecycle import (
    METRIC,
    METRIC_HELP,
    METRIC_LABELS,
    RESULTS,
    ApprovalNote,
    Count,
    Event,
    Observe,
    counting,
    events_of,
)

__all__ = ["METRIC", "METRIC_HELP", "METRIC_LABELS", "RESULTS", "ApprovalNote", "Count", "Event",
           "Observe", "counting", "events_of"]
