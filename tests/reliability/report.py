"""Reports the reliability counts at the end of a run that included tests/reliability (and writes them
to `.run/reliability.json`, the numbers docs/testing.md's reliability paragraph quotes: both tiers' counts
added up, tally.py). Under pytest-xdist each worker hands its counts to the controller, which adds
them up and reports them once.
"""

from __future__ import annotations

from typing import Any

import pytest

from .tally import ARTEFACT, TALLY, tier_file

WORKER_KEY = "reliability_tally"


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput: dict[str, Any] | None = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: the controller reports
        workeroutput[WORKER_KEY] = TALLY.export()


@pytest.hookimpl(optionalhook=True)  # an xdist hook: unknown (and never called) without xdist
def pytest_testnodedown(node: Any, error: Any) -> None:
    TALLY.merge(getattr(node, "workeroutput", {}).get(WORKER_KEY, {}))


def tier_of(config: pytest.Config) -> str | None:
    """The tier this run is (tests/fixtures/tiers.py): `-m "not interop"` or `-m interop`; None
    for any other selection (both tiers, or a part of the suite)."""
    return {"not interop": "default", "interop": "interop"}.get(
        " ".join((config.option.markexpr or "").split()))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if hasattr(terminalreporter.config, "workeroutput") or not TALLY.suites:
        return
    tier = tier_of(terminalreporter.config)
    both = TALLY.write(tier=tier)
    terminalreporter.section("reliability" if tier is None else f"reliability: the {tier} tier")
    for line in TALLY.lines():
        terminalreporter.write_line(line)
    if tier is None:
        terminalreporter.write_line(f"(written to {ARTEFACT})")
        return
    terminalreporter.write_line(f"(written to {tier_file(tier)})")
    if both is not None:
        terminalreporter.write_line(f"both tiers: {both.lines()[-1].removeprefix('total: ')}")
        terminalreporter.write_line(f"(written to {ARTEFACT})")
