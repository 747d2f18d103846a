"""The metrics object: every series of SPEC §13, label values bounded (unlisted tools, withheld and
undeclared requirements), results classified, policy revisions and reloads, `/metrics` served.
"""

from __future__ import annotations

import asyncio
import re
import threading
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest
from starlette.testclient import TestClient

from mcp_preconditions.drivers.reload import PolicyReloader
from mcp_preconditions.guard import Guard
from mcp_preconditions.outcomes import Decision, Outcome, Status
from mcp_preconditions.policy.load import load_policy
from mcp_preconditions.telemetry import Metrics, MetricsListener, metrics_app, watch_policy
from mcp_preconditions.telemetry.labels import result_of

SECRET = "state:secret.door"
TOOLS = {"open_door": ["env:production"],
         "closed_door": ["env:staging", "auth:scope:mission:write", SECRET],
         "launch": ["auth:oauth2", "quota:launch.hourly"],
         "hidden_quota": ["quota:night.shift"]}
CONFIDENTIAL = frozenset({SECRET, "quota:night.shift"})


def metrics() -> Metrics:
    m = Metrics()
    m.declare("small", TOOLS, CONFIDENTIAL)
    return m


def decision(tool: str, *outcomes: Outcome, subject: str | None = "alice") -> Decision:
    allowed = bool(outcomes) and all(o.ok for o in outcomes)
    return Decision(tool, allowed, outcomes, subject=subject, revision="r1", duration_ns=2_000,
                    confidential=CONFIDENTIAL)


def value(m: Metrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, labels)


def label_values(m: Metrics, label: str) -> set[str]:
    return {s.labels[label] for family in m.registry.collect() for s in family.samples
            if label in s.labels}


DENIED = decision("closed_door", Outcome.unsatisfied("env:staging", "no"),
                  Outcome.satisfied("auth:scope:mission:write"), Outcome.unsatisfied(SECRET, "no"))
ERRORED = decision("closed_door", Outcome.error("env:staging", "down"),
                   Outcome.satisfied("auth:scope:mission:write"), Outcome.error(SECRET, "down"))


def test_each_result_is_counted_under_its_tool() -> None:
    m = metrics()
    m.observe_decision("small", decision("open_door", Outcome.satisfied("env:production")))
    m.observe_decision("small", DENIED)
    m.observe_decision("small", DENIED)
    m.observe_decision("small", ERRORED)
    assert value(m, "mcp_preconditions_decisions_total", server="small", tool="open_door",
                 result="allowed") == 1
    assert value(m, "mcp_preconditions_decisions_total", server="small", tool="closed_door",
                 result="denied") == 2
    assert value(m, "mcp_preconditions_decisions_total", server="small", tool="closed_door",
                 result="error") == 1
    assert value(m, "mcp_preconditions_decision_seconds_count") == 4
    assert value(m, "mcp_preconditions_decision_seconds_sum") == pytest.approx(4 * 2e-6)


def test_a_denial_is_an_error_only_when_every_unmet_requirement_errored() -> None:
    assert result_of(ERRORED) == "error"
    assert result_of(DENIED) == "denied"
    mixed = decision("closed_door", Outcome.error("env:staging", "down"),
                     Outcome.unsatisfied(SECRET, "no"))
    assert result_of(mixed) == "denied"  # the caller lacks something whatever the backend says
    assert result_of(decision("open_door")) == "denied"  # no outcomes: never allowed
    assert result_of(DENIED, listed=False) == "unlisted"


def test_unmet_requirements_are_counted_with_confidential_ones_withheld() -> None:
    m = metrics()
    m.observe_decision("small", DENIED)
    m.observe_decision("small", ERRORED)
    assert value(m, "mcp_preconditions_unmet_total", requirement="env:staging") == 2
    assert value(m, "mcp_preconditions_unmet_total", requirement="(withheld)") == 2
    assert value(m, "mcp_preconditions_unmet_total", requirement="auth:scope:mission:write") == 0
    text = generate_latest(m.registry).decode()
    assert "secret.door" not in text and "night.shift" not in text and "alice" not in text


def test_an_unlisted_tool_counts_as_unlisted_and_a_stray_requirement_as_other() -> None:
    m = metrics()
    stray = decision("not_a_tool", Outcome.unsatisfied("env:from_nowhere", "no"))
    m.observe_decision("small", stray)
    m.observe_unlisted("small", "another_stranger")
    m.observe_unlisted("small", "open_door")  # listed, but refused without a decision
    assert value(m, "mcp_preconditions_decisions_total", server="small", tool="(unlisted)",
                 result="unlisted") == 2
    assert value(m, "mcp_preconditions_decisions_total", server="small", tool="open_door",
                 result="unlisted") == 1
    assert value(m, "mcp_preconditions_unmet_total", requirement="(other)") == 1
    assert "not_a_tool" not in label_values(m, "tool")
    assert "env:from_nowhere" not in label_values(m, "requirement")


def used_up(requirement: str) -> Outcome:
    """A quota that had no unit left, as the quota resolver reports it."""
    return Outcome(requirement, Status.UNSATISFIED, "no unit left", transient=True,
                   retry_after_seconds=12.5)


def test_an_exhausted_quota_is_counted_by_name_and_a_failing_store_is_not() -> None:
    m = metrics()
    exhausted = decision("launch", Outcome.satisfied("auth:oauth2"), used_up("quota:launch.hourly"))
    down = decision("launch", Outcome.satisfied("auth:oauth2"),
                    Outcome.error("quota:launch.hourly", "redis down"))
    # Unsatisfied without a refill time: refused by form (an undefined quota in a lenient guard),
    # not used up.
    refused = decision("launch", Outcome.satisfied("auth:oauth2"),
                       Outcome.unsatisfied("quota:launch.hourly", "form rejected by resolver"))
    secret = decision("hidden_quota", used_up("quota:night.shift"))
    for d in (exhausted, exhausted, down, refused, secret):
        m.observe_decision("small", d)
    assert value(m, "mcp_preconditions_quota_exhausted_total", quota="launch.hourly") == 2
    assert value(m, "mcp_preconditions_quota_exhausted_total", quota="(withheld)") == 1
    assert label_values(m, "quota") == {"launch.hourly", "(withheld)"}
    assert value(m, "mcp_preconditions_decisions_total", server="small", tool="launch",
                 result="error") == 1


def test_series_start_at_zero_for_every_listed_tool_and_declared_requirement() -> None:
    m = metrics()
    for tool in TOOLS:
        for result in ("allowed", "denied", "error"):
            assert value(m, "mcp_preconditions_decisions_total", server="small", tool=tool,
                         result=result) == 0
    assert value(m, "mcp_preconditions_quota_exhausted_total", quota="launch.hourly") == 0
    assert value(m, "mcp_preconditions_policy_reloads_total", result="failure") == 0
    assert label_values(m, "requirement") == {
        "env:production", "env:staging", "auth:scope:mission:write", "auth:oauth2",
        "quota:launch.hourly", "(withheld)"}


def test_a_requirement_made_confidential_loses_its_series() -> None:
    m = Metrics()
    m.declare("small", TOOLS, frozenset())
    m.observe_decision("small", Decision("closed_door", False, (Outcome.unsatisfied(SECRET, "no"),)))
    assert value(m, "mcp_preconditions_unmet_total", requirement=SECRET) == 1
    m.declare("small", TOOLS, CONFIDENTIAL)
    assert SECRET not in label_values(m, "requirement")
    m.observe_decision("small", Decision("closed_door", False, (Outcome.unsatisfied(SECRET, "no"),)))
    assert SECRET not in label_values(m, "requirement")  # a decision of the old snapshot: (other)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.text(), st.lists(st.text(), max_size=3), st.booleans()), max_size=30))
def test_no_call_can_add_a_label_value(calls: list[tuple[str, list[str], bool]]) -> None:
    m = metrics()
    before = {label: label_values(m, label) for label in ("tool", "requirement", "quota")}
    for tool, requirements, errored in calls:
        outcomes = tuple(Outcome.error(r, "x") if errored else Outcome.unsatisfied(r, "x")
                         for r in requirements)
        m.observe_decision("small", Decision(tool, False, outcomes, confidential=CONFIDENTIAL))
        m.observe_unlisted("small", tool)
    after = {label: label_values(m, label) for label in ("tool", "requirement", "quota")}
    assert after["tool"] == before["tool"]
    assert after["requirement"] <= before["requirement"] | {"(other)"}
    assert after["quota"] <= before["quota"] | {"(other)"}


def test_two_metrics_objects_never_collide() -> None:
    one, two = metrics(), metrics()
    one.observe_decision("small", DENIED)
    assert value(two, "mcp_preconditions_decisions_total", server="small", tool="closed_door",
                 result="denied") == 0


def test_only_the_revision_in_force_has_policy_info() -> None:
    m = Metrics()
    m.policy_loaded("aaa")
    m.policy_loaded("bbb")
    m.policy_loaded("bbb")
    assert label_values(m, "revision") == {"bbb"}
    assert value(m, "mcp_preconditions_policy_info", revision="bbb") == 1
    with pytest.raises(ValueError, match=r"^policy_reload: result must be one of success, failure, "
                                         r"unusable, got 'ok'$"):
        m.policy_reload("ok")  # type: ignore[arg-type]


def test_http_refusals_count_by_reason_from_zero_and_take_no_other_reason() -> None:
    m = Metrics()
    reasons = ("token_missing", "token_invalid", "session", "host", "over_cap")
    assert {r: value(m, "mcp_preconditions_http_refused_total", reason=r) for r in reasons} == \
        dict.fromkeys(reasons, 0)
    m.http_refused("host")
    m.http_refused("host")
    m.http_refused("over_cap")
    assert value(m, "mcp_preconditions_http_refused_total", reason="host") == 2
    assert value(m, "mcp_preconditions_http_refused_total", reason="over_cap") == 1
    with pytest.raises(ValueError, match=r"^http_refused: reason must be one of token_missing, "
                                         r"token_invalid, session, host, over_cap, got 'x'$"):
        m.http_refused("x")  # type: ignore[arg-type]
    assert label_values(m, "reason") == set(reasons)  # a caller adds no series


def test_upstream_series() -> None:
    m = Metrics()
    m.upstream_up("everything", True)
    m.upstream_up("everything", False)
    m.upstream_restarted("everything")
    m.observe_upstream("everything", 0.02)
    assert value(m, "mcp_preconditions_upstream_up", server="everything") == 0
    assert value(m, "mcp_preconditions_upstream_restarts_total", server="everything") == 1
    assert value(m, "mcp_preconditions_upstream_seconds_bucket", server="everything", le="0.025") == 1


def test_watch_policy_follows_a_reloader(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_text('environment = ["production"]\n', encoding="utf-8")
    guard = Guard(load_policy(path), entry_points=False)
    reloader = PolicyReloader(guard, path)
    m = Metrics()
    watch_policy(m, reloader)
    first = guard.revision
    assert label_values(m, "revision") == {first}
    path.write_text("environment = [\n", encoding="utf-8")  # broken: the old policy stays
    reloader.reload()
    reloader.reload()  # retried, and failing, at every attempt
    assert value(m, "mcp_preconditions_policy_reloads_total", result="failure") == 2
    assert label_values(m, "revision") == {first}
    path.write_text('environment = ["staging"]\n', encoding="utf-8")
    reloader.reload()
    assert value(m, "mcp_preconditions_policy_reloads_total", result="success") == 1
    assert label_values(m, "revision") == {guard.revision} != {first}


async def test_watch_policy_counts_a_swap_as_what_applying_it_says(tmp_path: Path) -> None:
    """A gateway applies each swap to its servers first (their tool names against the new policy):
    a swap that leaves one unusable counts as `unusable`, not `success`."""
    path = tmp_path / "policy.toml"
    path.write_text('environment = ["production"]\n', encoding="utf-8")
    guard = Guard(load_policy(path), entry_points=False)
    reloader = PolicyReloader(guard, path)
    m = Metrics()
    verdicts: list[Literal["success", "unusable"]] = ["unusable", "success"]

    async def applied(_change: object) -> Literal["success", "unusable"]:
        await asyncio.sleep(0)  # applied after the swap, as a gateway's re-check is
        return verdicts.pop(0)

    watch_policy(m, reloader, applied)
    for count, environment in enumerate(("staging", "production"), 1):
        path.write_text(f'environment = ["{environment}"]\n', encoding="utf-8")
        reloader.reload()
        for _ in range(500):  # the count moves once `applied` has run
            if sum(value(m, "mcp_preconditions_policy_reloads_total", result=r) or 0
                   for r in ("success", "unusable")) == count:
                break
            await asyncio.sleep(0.01)
    assert value(m, "mcp_preconditions_policy_reloads_total", result="unusable") == 1
    assert value(m, "mcp_preconditions_policy_reloads_total", result="success") == 1
    assert label_values(m, "revision") == {guard.revision}


def test_the_metrics_app_serves_get_metrics_only() -> None:
    m = metrics()
    m.observe_decision("small", DENIED)
    client = TestClient(metrics_app(m))
    page = client.get("/metrics")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert ('mcp_preconditions_decisions_total{result="denied",server="small",tool="closed_door"} '
            '1.0') in page.text
    openmetrics = client.get("/metrics", headers={"Accept": "application/openmetrics-text"})
    assert openmetrics.headers["content-type"].startswith("application/openmetrics-text")
    assert openmetrics.text.endswith("# EOF\n")
    assert client.post("/metrics").status_code == 405
    assert client.get("/mcp").status_code == 404


def test_the_listener_serves_metrics_on_its_own_port() -> None:
    m = metrics()
    listener = MetricsListener(m, "127.0.0.1", 0)
    try:
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/metrics", listener.url)
        page = httpx.get(listener.url, timeout=10)
        other = httpx.get(listener.url.removesuffix("/metrics") + "/", timeout=10)
    finally:
        listener.close()
    assert page.status_code == 200 and "mcp_preconditions_decisions_total" in page.text
    assert other.status_code == 404


# -- counts against a tiny reference model ---------------------------------------------------------
NAMES = ("open_door", "closed_door", "launch", "ghost")
REQUIREMENTS = ("env:production", "env:staging", SECRET, "quota:launch.hourly", "env:nowhere")
outcome_st = st.builds(lambda r, s: Outcome(r, s, "why"), st.sampled_from(REQUIREMENTS),
                       st.sampled_from(list(Status)))
step_st = st.one_of(
    st.tuples(st.just("declare"), st.lists(st.sampled_from(NAMES), unique=True)),
    st.tuples(st.just("call"), st.sampled_from(NAMES), st.lists(outcome_st, max_size=3)),
    st.tuples(st.just("unlisted"), st.sampled_from(NAMES)))


@settings(max_examples=150, deadline=None)
@given(st.lists(step_st, max_size=40))
def test_counts_match_a_reference_model(steps: list[tuple[Any, ...]]) -> None:
    m = Metrics()
    listed: set[str] = set()
    expected: dict[tuple[str, str], int] = {}
    for step in steps:
        if step[0] == "declare":
            listed = set(step[1])
            m.declare("s", {name: TOOLS.get(name, []) for name in listed}, CONFIDENTIAL)
            # A tool no longer listed has no series any more; the others keep their counts.
            expected = {k: n for k, n in expected.items() if k[0] in listed | {"(unlisted)"}}
            continue
        tool = step[1]
        label = tool if tool in listed else "(unlisted)"
        if step[0] == "unlisted":
            m.observe_unlisted("s", tool)
            result = "unlisted"
        else:
            outcomes = tuple(step[2])
            allowed = bool(outcomes) and all(o.status is Status.SATISFIED for o in outcomes)
            unmet = [o.status for o in outcomes if o.status is not Status.SATISFIED]
            result = ("unlisted" if tool not in listed else "allowed" if allowed
                      else "error" if unmet and all(s is Status.ERROR for s in unmet) else "denied")
            m.observe_decision("s", Decision(tool, allowed, outcomes, confidential=CONFIDENTIAL))
        expected[(label, result)] = expected.get((label, result), 0) + 1
    counted = {(s.labels["tool"], s.labels["result"]): s.value
               for f in m.registry.collect() for s in f.samples
               if s.name == "mcp_preconditions_decisions_total" and s.value}
    assert counted == expected


def test_counts_from_many_threads_are_exact() -> None:
    m = metrics()
    allowed = decision("open_door", Outcome.satisfied("env:production"))

    def count() -> None:
        for _ in range(2_000):
            m.observe_decision("small", allowed)
            m.observe_decision("small", DENIED)

    threads = [threading.Thread(target=count) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert value(m, "mcp_preconditions_decisions_total", server="small", tool="open_door",
                 result="allowed") == 16_000
    assert value(m, "mcp_preconditions_unmet_total", requirement="(withheld)") == 16_000
    assert value(m, "mcp_preconditions_decision_seconds_count") == 32_000
