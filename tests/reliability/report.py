"""Reports the reliability counts at the end of a run that included tests/reliability (and writes them
to `.run/reliability.json`, the numbers the README's reliability paragraph quotes). Under pytest-xdist
each worker hands its counts to the controller, which adds them up and reports them once.
"""

from __future__ import annotations

from typing import Any

import pytest

from .tally import ARTEFACT, TALLY

WORKER_KEY = "reliability_tally"


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput: dict[str, Any] | None = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: the controller reports
        workeroutput[WORKER_KEY] = TALLY.export()


@pytest.hookimpl(optionalhook=True)  # an xdist hook: unknown (and never called) without xdist
def pytest_testnodedown(node: Any, error: Any) -> None:
    TALLY.merge(getattr(node, "workeroutput", {}).get(WORKER_KEY, {}))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if hasattr(terminalreporter.config, "workeroutput") or not TALLY.suites:
        return
    TALLY.write()
    terminalreporter.section("reliability")
    for line in TALLY.lines():
        terminalreporter.write_line(line)
    terminalreporter.write_line(f"(written to {ARTEFACT})")
