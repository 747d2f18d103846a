"""The shipped alerting rules (examples/prometheus/alerts.yml) pass `promtool check rules`, and their
unit tests (alerts.test.yml) pass `promtool test rules`: run here so `make test` fails when they do.
Every series an alert reads is one the metrics object exports.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from mcp_preconditions.telemetry import Metrics
from tests.fixtures.prometheus import binary

RULES = Path(__file__).resolve().parents[2] / "examples" / "prometheus"


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([binary("promtool"), *args], cwd=RULES, capture_output=True, text=True,
                          timeout=10)


def test_promtool_checks_the_rules() -> None:
    done = promtool("check", "rules", "alerts.yml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 8 rules found" in done.stdout


def test_promtool_runs_the_rules_unit_tests() -> None:
    done = promtool("test", "rules", "alerts.test.yml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_series_the_rules_read_is_exported() -> None:
    exported = {family.name for family in Metrics().registry.collect()}
    read = set(re.findall(r"mcp_preconditions_[a-z_]+", (RULES / "alerts.yml").read_text()))
    counters = {name.removesuffix("_total") for name in read}
    assert read and counters <= exported, counters - exported
