"""Reports the reliability counts at the end of a run that included this folder (and writes them to
`.run/reliability.json`, the numbers the README's reliability paragraph quotes).
"""

from __future__ import annotations

import pytest

from .tally import ARTEFACT, TALLY


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not TALLY.suites:
        return
    TALLY.write()
    terminalreporter.section("reliability")
    for line in TALLY.lines():
        terminalreporter.write_line(line)
    terminalreporter.write_line(f"(written to {ARTEFACT})")
