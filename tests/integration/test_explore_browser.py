"""The policy explorer in a real browser (Debian's chromium, driven by Playwright) against the real
`mcp-preconditions explore` command: pick a caller and see the table change, try arguments, break the
policy and see the key-path error, fix it and see decisions return, give a tool a quota and see it
not asked for a refused caller (as `check` says), switch knowledge and see hidden
tools, load a decision log and see the chart's numbers match `log summarize`. Each view's screenshot
is saved under .run/explore/.

Interop: what is checked is what the page's script draws and does in a browser (the table as a
caller is picked, the chart's bars, a download); the command lines it is compared with run in this
process (tests/fixtures/explore_inprocess.py's `cli`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, Route, expect

from tests.fixtures.explore_inprocess import cli
from tests.fixtures.explorer import MISSION, shot
from tests.fixtures.mcp_servers import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.interop]
pytest_plugins = ["tests.fixtures.explorer_pages"]
POLICY_TEXT = (ROOT / "policies" / "mission-control.toml").read_text(encoding="utf-8")


@pytest.fixture
def page(mission_page: Page) -> Page:
    return mission_page


def decision(page: Page, tool: str) -> Any:
    return page.locator(f'#who-body tr.tool-row[data-tool="{tool}"] .decision')


def test_picking_a_caller_changes_the_table(page: Page) -> None:
    expect(page.locator("#caller-label")).to_have_text("alice (preset 'mission-control')")
    expect(decision(page, "abort_launch")).to_have_text("ALLOWED")
    expect(decision(page, "launch_rocket")).to_have_text("DEPENDS ON ARGUMENTS")
    # The operator's view names the confidential requirement, and marks it.
    expect(page.locator('tr.tool-row[data-tool="launch_rocket"] .chip.conf')).to_have_text(
        "state:weather.clear")
    expect(page.locator("#who-summary")).to_contain_text("3 of 7 tools allowed")
    shot(page, "who")

    page.select_option("#caller-preset", "observer")
    expect(page.locator("#caller-label")).to_have_text("bob (preset 'observer')")
    expect(decision(page, "abort_launch")).to_have_text("DENIED")
    expect(decision(page, "read_telemetry")).to_have_text("ALLOWED")
    page.select_option("#caller-preset", "")
    expect(page.locator("#caller-label")).to_have_text("anonymous (no access token)")
    expect(page.locator("#who-summary")).to_contain_text("1 of 7 tools allowed")

    page.fill("#caller-claims", '{"sub": "carol", "scope": "mission:admin", "role": "mission_control"}')
    expect(page.locator("#caller-label")).to_have_text("carol (claims typed on this page)")
    expect(decision(page, "abort_launch")).to_have_text("ALLOWED")  # mission:admin implies :write


def test_a_state_set_on_the_page_decides(page: Page) -> None:
    page.select_option('#facts-list select[aria-label="state:range.safety_officer_on_duty"]', "true")
    expect(decision(page, "fuel_status")).to_have_text("ALLOWED")
    expect(page.locator('tr.tool-row[data-tool="fuel_status"] .chip.whatif')).to_have_count(1)


def test_trying_arguments_decides_the_call(page: Page) -> None:
    page.click("#tab-call")
    page.select_option("#call-tool", "launch_rocket")
    result = page.locator("#call-result")
    expect(result.locator(".verdict .decision")).to_have_text("DENIED")
    expect(result).to_contain_text("grant #0: argument /vehicle is missing")
    page.fill('#call-form [name="vehicle"]', "Saturn V")
    expect(result).to_contain_text('grant #0: argument /vehicle is "Saturn V" (allowed: "Falcon 9", '
                                   '"Falcon Heavy", "Starship")')
    page.click('#call-hints button.value:has-text("Falcon Heavy")')  # a value the grant allows
    expect(result.locator(".verdict .decision")).to_have_text("ALLOWED")
    shot(page, "call")
    page.click("#call-as-json")
    expect(page.locator("#call-json")).to_have_value('{\n  "vehicle": "Falcon Heavy"\n}')
    page.fill("#call-json", '{"vehicle": "Starship", }')
    expect(result).to_contain_text("arguments: not valid JSON (line 1, column 25)")
    page.fill("#call-json", '{"vehicle": "starship"}')  # exact matching: case counts
    expect(result.locator(".verdict .decision")).to_have_text("DENIED")
    # What the caller is sent names the unmet requirement; the page's decision equals `check`'s.
    code, out, _ = cli("check", *MISSION, "--claims", "examples/claims/mission-control.json",
                       "--tool", "launch_rocket", "--arguments", '{"vehicle": "starship"}',
                       "--format", "json")
    reasons = [o["reason"] for o in json.loads(out)["tools"][0]["outcomes"]]
    assert code == 0
    expect(result.locator("td.reason")).to_contain_text(reasons)


# Each verdict the page draws in #call-result, in order, in window.verdicts, and how many in the
# result's data-verdicts attribute (what a locator waits for: a predicate string would be evaluated
# in the page, which the page's CSP forbids whenever its first look fails and it polls).
RECORD_VERDICTS = """() => {
  window.verdicts = [];
  const result = document.querySelector("#call-result");
  new MutationObserver(() => {
    const shown = document.querySelector("#call-result .verdict .decision");
    if (shown) {
      window.verdicts.push(shown.textContent.trim());
      result.dataset.verdicts = String(window.verdicts.length);
    }
  }).observe(result, { childList: true, subtree: true });
}"""


def test_an_answer_for_a_tool_no_longer_picked_never_shows(page: Page) -> None:
    """The Call tab asks about the first tool (launch_rocket: DENIED without arguments) as it
    opens, then about abort_launch (ALLOWED) once it is picked; the first answer, held back until
    the second is drawn, is dropped when it comes (it replaced the verdict of the tool picked with
    that of the one before: a slow answer on a loaded machine made test_explore_browser_per_call
    flake)."""
    held: list[Route] = []
    page.route("**/api/call", lambda route: route.continue_() if held else held.append(route))
    page.evaluate(RECORD_VERDICTS)
    assert page.locator("#call-tool").input_value() == "launch_rocket"
    page.click("#tab-call")  # asks about launch_rocket: held back
    page.select_option("#call-tool", "abort_launch")
    expect(page.locator("#call-result .verdict .decision")).to_have_text("ALLOWED")
    with page.expect_response("**/api/call"):
        held[0].continue_()  # the first answer, now
    page.click("#call-decide")  # asked again: its answer comes after the first one was read
    expect(page.locator("#call-result")).to_have_attribute("data-verdicts", "2")
    assert page.evaluate("window.verdicts") == ["ALLOWED", "ALLOWED"]


def test_breaking_the_policy_shows_the_key_path_and_fixing_it_brings_decisions_back(
        page: Page, tmp_path: Path) -> None:
    broken = POLICY_TEXT.replace('"launch_window.open" = true', '"launch_window.open" = "yes"')
    page.fill("#policy-text", broken)
    problem = page.locator("#policy-problems .line")
    expect(problem).to_have_count(1)
    expect(page.locator("#policy-status")).to_contain_text("1 problem")
    expect(page.locator("#who-body")).to_contain_text("Fix the policy's problems")
    # The same line `policy validate` prints, the file name aside.
    copy = tmp_path / "mission-control.toml"
    copy.write_text(broken, encoding="utf-8")
    code, _, err = cli("policy", "validate", str(copy))
    assert code == 2
    expected = err.strip().removeprefix(f"mcp-preconditions: error: {copy}: ")
    assert 'features.flags."launch_window.open": ' in expected
    expect(problem).to_have_text(f"policies/mission-control.toml: {expected}")
    shot(page, "edit-broken")

    fixed = POLICY_TEXT.replace('"telemetry.v2" = false', '"telemetry.v2" = true')
    page.fill("#policy-text", fixed)
    expect(problem).to_have_count(0)
    expect(decision(page, "stream_telemetry_v2")).to_have_text("ALLOWED")
    changed = page.locator('#who-body tr.tool-row.changed[data-tool="stream_telemetry_v2"]')
    expect(changed).to_contain_text("was denied")
    expect(page.locator("#policy-status")).to_contain_text("edited")
    shot(page, "edit")
    with page.expect_download() as download:
        page.click("#policy-download")
    assert download.value.suggested_filename == "mission-control.toml"
    assert Path(download.value.path()).read_text(encoding="utf-8") == fixed
    page.click("#policy-reset")
    expect(decision(page, "stream_telemetry_v2")).to_have_text("DENIED")
    expect(page.locator("#who-body tr.changed")).to_have_count(0)


ABORT = '["auth:oauth2", "capability:rocket.abort", "auth:scope:mission:write"]'
METERED = POLICY_TEXT.replace(ABORT, ABORT.replace('"auth:scope', '"quota:abort.hourly", "auth:scope')) \
    + '\n[quotas."abort.hourly"]\ncalls = 5\nper_seconds = 3600\n'
NOT_ASKED = "not asked: the call is refused for another requirement"


def test_a_refused_callers_quota_is_shown_as_not_asked(page: Page, tmp_path: Path) -> None:
    assert METERED.count('"quota:abort.hourly"') == 1  # abort_launch requires it now
    page.fill("#policy-text", METERED)
    page.select_option("#caller-preset", "observer")
    expect(decision(page, "abort_launch")).to_have_text("DENIED")
    row = page.locator('#who-body tr.tool-row[data-tool="abort_launch"]')
    # Refused for its capability and scope: no quota store was asked, and the page says so.
    expect(row.locator(".chip.notasked")).to_have_text("quota:abort.hourly")
    row.click()  # allowed for the first caller, so not opened at first sight
    expect(row).to_have_attribute("aria-expanded", "true")
    detail = page.locator('#who-body tr.tool-row[data-tool="abort_launch"] + tr.detail')
    quota = detail.locator("tr", has_text="quota:abort.hourly")
    expect(quota.locator(".status.not_asked")).to_have_text("not asked")
    expect(quota.locator("td.reason")).to_have_text(NOT_ASKED)
    expect(quota.locator(".was")).to_have_text("new")  # the edit added it: it is required now
    shot(page, "quota-not-asked")
    # The same lines as `check --tool` for this caller.
    edited = tmp_path / "mission-control.toml"
    edited.write_text(METERED, encoding="utf-8")
    code, out, _ = cli("check", "--policy", str(edited), "--tools", "examples/mission-control-tools.json",
                       "--claims", "examples/claims/observer.json", "--tool", "abort_launch",
                       "--format", "json")
    outcomes = json.loads(out)["tools"][0]["outcomes"]
    assert code == 0 and {"requirement": "quota:abort.hourly", "status": "not_asked",
                          "reason": NOT_ASKED} in outcomes
    expect(detail.locator("td.reason")).to_contain_text([o["reason"] for o in outcomes])
    # An allowed caller's call takes a unit: the quota is satisfied.
    page.select_option("#caller-preset", "mission-control")
    expect(decision(page, "abort_launch")).to_have_text("ALLOWED")
    expect(row.locator(".chip.sat", has_text="quota:abort.hourly")).to_have_count(1)
    expect(row.locator(".chip.notasked")).to_have_count(0)


def test_switching_knowledge_shows_what_a_strict_client_hides(page: Page) -> None:
    page.click("#tab-client")
    hidden = page.locator("#client-body tr.hidden-tool")
    # examples/knowledge.json is the first --knowledge preset, chosen at first.
    expect(hidden).to_have_count(1)
    # `filter` over the tools file: here the file's requirements are the policy's, and the one the
    # server leaves out of its listing (confidential) decides nothing for this knowledge.
    code, out, _ = cli("filter", "--tools", "examples/mission-control-tools.json", "--knowledge",
                       "examples/knowledge.json")
    assert code == 0
    names = [h["name"] for h in json.loads(out)["hidden"]]
    expect(hidden.locator("td.mono")).to_have_text(names)
    expect(page.locator('#client-body tr[data-tool="launch_rocket"]')).to_contain_text(
        "+1 confidential, not listed")
    shot(page, "client")
    page.select_option("#client-preset", "(nothing known)")
    expect(hidden).to_have_count(0)
    page.fill("#client-knowledge", '{"satisfied": ["auth:oauth2"], "unsatisfiable": ["env:staging", '
                                   '"auth:claim:realm_roles:engineer"]}')
    expect(page.locator('#client-body tr.hidden-tool[data-tool="schedule_maintenance"]')).to_have_count(1)
    page.click('#client-mode button[data-mode="demote"]')
    expect(hidden).to_have_count(0)
    expect(page.locator('#client-body tr[data-tool="schedule_maintenance"] .fate')).to_have_text("demoted")


def _records() -> list[dict[str, Any]]:
    """240 records over about 2.5 hours, and 11 without a time (counted in the totals, not in the
    chart's bars)."""
    out: list[dict[str, Any]] = []
    start = 1_780_000_000.0
    for i in range(251):
        tool = ["launch_rocket", "read_telemetry", "abort_launch", "get_weather"][i % 4]
        allowed = tool == "get_weather" or i % 3 != 0
        out.append({"time": start + i * 37, "tool": tool, "subject": "alice", "allowed": allowed,
                    "unmet": [] if allowed else [f"auth:scope:{i % 2}", "auth:oauth2"], "errors": {},
                    "revision": "rev-one" if i < 150 else "rev-two", "duration_us": 9.5,
                    "replica": f"gw-{i % 3}"})
        if i >= 240:
            del out[-1]["time"]
    return out


# Each bar of a lane: its title's counts and the heights of its allowed and denied rectangles.
_BARS = """(tool) => [...document.querySelectorAll(`#logs-chart g.lane[data-tool="${CSS.escape(tool)}"] > g`)]
  .map((g) => [g.querySelector("title").textContent,
               Number(g.querySelector("rect.ok")?.getAttribute("height") ?? 0),
               Number(g.querySelector("rect.no")?.getAttribute("height") ?? 0)])"""
_COUNTS = re.compile(r": ([0-9]+) allowed, ([0-9]+) denied$")
HALF = 46 / 2 - 4  # the tallest bar of a lane: half its height, less a margin (chart.py)


def _counts(title: str) -> tuple[int, int]:
    found = _COUNTS.search(title)
    assert found is not None, title
    return int(found[1]), int(found[2])


def _check_bars(page: Page, records: list[dict[str, Any]]) -> None:
    """The bars of each lane add up to the tool's timed records, allowed and denied, and each is
    drawn as high as its count (the lane's busiest bucket at full height)."""
    for tool in {r["tool"] for r in records}:
        timed = [r for r in records if r["tool"] == tool and "time" in r]
        bars = page.evaluate(_BARS, tool)
        counts = [_counts(title) for title, _, _ in bars]
        assert (sum(a for a, _ in counts), sum(d for _, d in counts)) == (
            sum(r["allowed"] for r in timed), sum(not r["allowed"] for r in timed))
        peak = max(max(a, d) for a, d in counts)
        for (a, d), (_, up, down) in zip(counts, bars, strict=True):
            assert (up, down) == (pytest.approx(HALF * a / peak, abs=0.051),
                                  pytest.approx(HALF * d / peak, abs=0.051))


def _lanes(page: Page) -> dict[str, tuple[int, int]]:
    lanes = page.locator("#logs-chart g.lane")
    return {lanes.nth(i).get_attribute("data-tool") or "": (
        int(lanes.nth(i).get_attribute("data-allowed") or -1),
        int(lanes.nth(i).get_attribute("data-denied") or -1)) for i in range(lanes.count())}


def _summarize(records: list[dict[str, Any]], path: Path) -> dict[str, Any]:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    code, out, _ = cli("log", "summarize", str(path), "--format", "json")
    assert code == 0
    summary: dict[str, Any] = json.loads(out)
    return summary


def test_a_loaded_log_charts_the_numbers_log_summarize_prints(page: Page, tmp_path: Path) -> None:
    records = _records()
    summary = _summarize(records, tmp_path / "decisions.jsonl")
    page.click("#tab-logs")
    expect(page.locator("#logs-body")).to_contain_text("No decision log yet")
    page.set_input_files("#logs-upload", str(tmp_path / "decisions.jsonl"))
    expect(page.locator("#logs-chart g.lane")).to_have_count(4)
    expected = {t["tool"]: (t["allowed"], t["denied"]) for t in summary["tools"]}
    assert _lanes(page) == expected
    for tool, (allowed, denied) in expected.items():
        expect(page.locator(f'#logs-chart g.lane[data-tool="{tool}"] text.total')).to_have_text(
            f"{allowed} · {denied}")
        row = page.locator(f'#logs-body tr[data-tool="{tool}"] td')
        top = next(t["top_unmet"] for t in summary["tools"] if t["tool"] == tool)
        expect(row.nth(1)).to_have_text(str(allowed))
        expect(row.nth(2)).to_have_text(str(denied))
        expect(row.nth(4)).to_have_text("".join(f"{u['requirement']} ({u['count']})" for u in top) or "—")
    expect(page.locator(".stat .n").first).to_have_text(str(summary["records"]))
    _check_bars(page, records)
    expect(page.locator("#logs-chart")).to_contain_text(
        "11 record(s) without a time: counted in the totals, not in the bars.")
    shot(page, "logs")

    # One replica, one revision: the numbers of `log summarize` over those records alone.
    page.select_option("#logs-replica", "gw-1")
    only = _summarize([r for r in records if r["replica"] == "gw-1"], tmp_path / "gw-1.jsonl")
    expect(page.locator(".stat .n").first).to_have_text(str(only["records"]))
    assert _lanes(page) == {t["tool"]: (t["allowed"], t["denied"]) for t in only["tools"]}
    _check_bars(page, [r for r in records if r["replica"] == "gw-1"])
    page.select_option("#logs-revision", "rev-two")
    both = _summarize([r for r in records if r["replica"] == "gw-1" and r["revision"] == "rev-two"],
                      tmp_path / "both.jsonl")
    expect(page.locator(".stat .n").first).to_have_text(str(both["records"]))
    assert _lanes(page) == {t["tool"]: (t["allowed"], t["denied"]) for t in both["tools"]}
    _check_bars(page, [r for r in records if r["replica"] == "gw-1" and r["revision"] == "rev-two"])
