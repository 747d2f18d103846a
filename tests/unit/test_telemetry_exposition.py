"""The exposition holds SPEC §13's series and nothing more: no `_created` series (prometheus_client's
Counter adds one per label set), in the Prometheus text format and in OpenMetrics, without
switching `_created` off for other registries of the process.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.openmetrics import exposition as openmetrics

from mcp_preconditions.outcomes import Decision, Outcome, Status
from mcp_preconditions.telemetry import Metrics

# prometheus_client leaves its OpenMetrics exposition unannotated
generate_openmetrics = cast(Callable[[CollectorRegistry], bytes], openmetrics.generate_latest)

SPEC_SERIES = {  # SPEC §13, as exposed (counters with `_total`, histograms with their parts)
    "mcp_preconditions_decisions_total", "mcp_preconditions_unmet_total",
    "mcp_preconditions_decision_seconds_bucket", "mcp_preconditions_decision_seconds_sum",
    "mcp_preconditions_decision_seconds_count", "mcp_preconditions_upstream_seconds_bucket",
    "mcp_preconditions_upstream_seconds_sum", "mcp_preconditions_upstream_seconds_count",
    "mcp_preconditions_upstream_up", "mcp_preconditions_upstream_restarts_total",
    "mcp_preconditions_policy_info", "mcp_preconditions_policy_reloads_total",
    "mcp_preconditions_quota_exhausted_total", "mcp_preconditions_http_refused_total",
    "mcp_preconditions_upstream_dropped_total"}  # (SPEC §14)


def busy() -> Metrics:
    """Every series of the object moved at least once."""
    m = Metrics()
    m.declare("s", {"launch": ["auth:oauth2", "quota:hourly"]})
    used_up = Outcome("quota:hourly", Status.UNSATISFIED, "no unit", transient=True,
                      retry_after_seconds=3.0)
    m.observe_decision("s", Decision("launch", False, (Outcome.satisfied("auth:oauth2"), used_up)))
    m.observe_decision("s", Decision("launch", True, (Outcome.satisfied("auth:oauth2"),)))
    m.observe_unlisted("s", "nope")
    m.observe_upstream("s", 0.01)
    m.upstream_up("s", True)
    m.upstream_restarted("s")
    m.upstream_dropped("s", "duplicate")
    m.policy_loaded("r1")
    m.policy_reload("success")
    m.policy_reload("failure")
    m.policy_reload("unusable")
    m.http_refused("token_missing")
    return m


def sample_names(text: str) -> set[str]:
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines()
            if line and not line.startswith("#")}


def test_the_text_format_has_the_spec_series_and_no_created() -> None:
    text = generate_latest(busy().registry).decode()
    assert "_created" not in text
    assert sample_names(text) == SPEC_SERIES


def test_openmetrics_has_no_created_either() -> None:
    text = generate_openmetrics(busy().registry).decode()
    assert "_created" not in text
    assert {n.removesuffix("_total") for n in sample_names(text) if n != "EOF"} == {
        n.removesuffix("_total") for n in SPEC_SERIES}


def test_restarts_and_reloads_count_from_zero() -> None:
    m = Metrics()
    assert m.registry.get_sample_value("mcp_preconditions_policy_reloads_total",
                                       {"result": "failure"}) == 0
    m.upstream_up("s", False)
    assert m.registry.get_sample_value("mcp_preconditions_upstream_restarts_total",
                                       {"server": "s"}) == 0
    m.upstream_restarted("s")
    m.upstream_restarted("s")
    m.policy_reload("success")
    assert m.registry.get_sample_value("mcp_preconditions_upstream_restarts_total",
                                       {"server": "s"}) == 2
    assert m.registry.get_sample_value("mcp_preconditions_policy_reloads_total",
                                       {"result": "success"}) == 1


def test_other_registries_of_the_process_keep_their_created_series() -> None:
    busy()
    theirs = CollectorRegistry()
    Counter("their_requests", "Someone else's counter.", registry=theirs).inc()
    assert "their_requests_created" in generate_latest(theirs).decode()
