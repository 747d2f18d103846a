"""The page's chart, drawn on the server as SVG: per tool, one lane of bars over time (allowed above
the line, denied below), with the tool's totals from the summary, so the numbers beside each lane are
the ones `log summarize` prints. Geometry is computed here; templates/chart.svg draws it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..logsummary import Summary, Timeline
from ..visible import escape
from .render import render

MAX_LANES = 20  # more tools than this: the busiest ones are drawn, the table has every tool
WIDTH, LABELS, TOTALS, LANE, AXIS = 960, 200, 170, 46, 40
PLOT = WIDTH - LABELS - TOTALS


@dataclass(frozen=True)
class Bar:
    x: float
    width: float
    up: float  # height of the allowed bar above the lane's middle line
    down: float  # height of the denied bar below it
    title: str


@dataclass(frozen=True)
class Lane:
    tool: str
    label: str  # the name as shown: characters a reader cannot see written as escapes
    y: float
    allowed: int  # the summary's totals, every record of the tool (with or without a time)
    denied: int
    peak: int
    bars: list[Bar]


def _when(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(seconds))


def _span(width: int) -> str:
    for unit, size in (("week", 604800), ("day", 86400), ("h", 3600), ("min", 60)):
        if width >= size and width % size == 0:
            return f"{width // size} {unit}"
    return f"{width} s"


def _lane(tool: str, y: float, summary: Summary, timeline: Timeline, starts: list[int]) -> Lane:
    counts = [timeline.counts.get(s, {}).get(tool, [0, 0]) for s in starts]
    peak = max((max(a, d) for a, d in counts), default=0)
    half = LANE / 2 - 4
    step = PLOT / max(len(starts), 1)
    bars = [Bar(LABELS + i * step + 1, max(step - 2, 1), half * a / peak if peak else 0,
                half * d / peak if peak else 0,
                f"{escape(tool)}, {_when(s)} UTC + {_span(timeline.width)}: {a} allowed, {d} denied")
            for i, (s, (a, d)) in enumerate(zip(starts, counts, strict=True)) if a or d]
    totals = summary.tools[tool]
    return Lane(tool, escape(tool), y, totals.allowed, totals.denied, peak, bars)


def chart_svg(timeline: Timeline, summary: Summary) -> str | None:
    """The chart, or None when there is nothing to draw."""
    if not summary.tools:
        return None
    starts = timeline.buckets()
    busiest = sorted(summary.tools, key=lambda t: (-(summary.tools[t].allowed
                                                      + summary.tools[t].denied), t))[:MAX_LANES]
    lanes = [_lane(tool, 28 + i * LANE, summary, timeline, starts) for i, tool in enumerate(busiest)]
    height = 28 + len(lanes) * LANE + AXIS
    first = _when(starts[0]) + " UTC" if starts else None
    last = _when(starts[-1] + timeline.width) + " UTC" if starts else None
    return render("chart.svg", width=WIDTH, height=height, labels=LABELS, plot=PLOT, lane_height=LANE,
                  lanes=lanes, first=first, last=last, span=_span(timeline.width),
                  untimed=timeline.untimed, more=len(summary.tools) - len(lanes))
