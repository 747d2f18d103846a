"""The explorer says what a server would do with the policy as edited (issue 29), in Debian's chromium
against the real `explore` command: a `[tools.NAME]` near miss is refused as a server refuses it (no
decisions drawn as if the rule were absent, Download asks first); an edit lists who gains or loses a
tool for every preset caller, as `check` decides it for each; `--servers` explores a desktop config's
servers live, as the gateway lists them.

Interop: what is checked is what the page's script draws and asks in a browser (the refusal, the
dialog before a download, who gains or loses); the command lines it is compared with run in this
process (tests/fixtures/explore_inprocess.py's `cli`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Dialog, Download, Page, expect

from tests.fixtures.explore_inprocess import cli
from tests.fixtures.explorer import explorer, opened, shot
from tests.fixtures.mcp_servers import ROOT
from tests.fixtures.upstreams import filesystem_stdio, time_stdio

pytestmark = [pytest.mark.integration, pytest.mark.interop]
pytest_plugins = ["tests.fixtures.explorer_pages"]
POLICY_TEXT = (ROOT / "policies" / "mission-control.toml").read_text(encoding="utf-8")
NEAR_MISS = POLICY_TEXT + '\n[tools.Launch_rocket]\nrequirements = ["auth:oauth2"]\n'
# The observer may no longer read telemetry; the v2 stream opens to every signed-in caller.
READ = '["auth:oauth2", "capability:telemetry.read", "auth:scope:mission:read"]'
EDITED = POLICY_TEXT.replace('"telemetry.v2" = false', '"telemetry.v2" = true').replace(
    READ, READ.replace('"auth:oauth2"', '"auth:oauth2", "auth:claim:role:mission_control"'))
CALLERS = {"mission-control": "alice (preset 'mission-control')", "observer": "bob (preset 'observer')",
           "": "anonymous (no access token)"}


@pytest.fixture
def page(mission_page: Page) -> Page:
    return mission_page


def test_a_near_miss_is_refused_as_a_server_refuses_it(page: Page, tmp_path: Path) -> None:
    status = page.locator("#policy-status")
    expect(status).to_contain_text("✓ servers run it · rev ")
    page.fill("#policy-text", NEAR_MISS)
    expect(status).to_contain_text("✗ servers refuse it · 1 problem")
    # The line `serve` stops with, for a server holding these tools.
    copy = tmp_path / "mission-control.toml"
    copy.write_text(NEAR_MISS, encoding="utf-8")
    code, _, err = cli("serve", "--policy", str(copy))
    assert code == 2
    line = err.strip().removeprefix("mcp-preconditions: error: ").replace(
        str(copy), "policies/mission-control.toml")
    expect(page.locator("#policy-problems .line")).to_have_text([line])
    expect(page.locator("#policy-problems .title")).to_have_text(
        "A server or the gateway would refuse this policy. The command line reports the same lines:")
    # No decision drawn as if [tools.Launch_rocket] were not there.
    expect(page.locator("#who-body tr.tool-row")).to_have_count(0)
    expect(page.locator("#who-body")).to_have_text(
        "A server would refuse this policy. Fix the policy's problems (left) to see decisions.")
    page.click("#tab-call")
    expect(page.locator("#call-result")).to_have_text("Fix the policy's problems (left) to decide a call.")
    shot(page, "edit-near-miss")

    # Download asks first: declined, nothing is saved; accepted, the text as edited.
    asked: list[str] = []
    downloads: list[Download] = []
    page.on("download", lambda d: downloads.append(d))
    download = page.locator("#policy-download")
    expect(download).to_have_class("warn")

    def decline(dialog: Dialog) -> None:
        asked.append(dialog.message)
        dialog.dismiss()
    page.once("dialog", decline)
    download.click()
    page.once("dialog", lambda dialog: dialog.accept())
    with page.expect_download() as saved:
        download.click()
    assert asked == ["A server or the gateway would refuse this policy (1 problem, listed below the "
                     "editor). Download it anyway?"]
    assert Path(saved.value.path()).read_text(encoding="utf-8") == NEAR_MISS
    assert len(downloads) == 1

    page.click("#policy-reset")
    expect(status).to_contain_text("✓ servers run it")
    expect(download).not_to_have_class("warn")


def _allowed(policy: Path, preset: str) -> set[str]:
    """The tools `check` allows this caller under `policy`."""
    claims = ["--claims", f"examples/claims/{preset}.json"] if preset else []
    code, out, err = cli("check", "--policy", str(policy), "--tools",
                         "examples/mission-control-tools.json", *claims, "--format", "json")
    assert code == 0, err
    return {t["name"] for t in json.loads(out)["tools"] if t["allowed"]}


def test_an_edit_shows_who_gains_or_loses_for_every_preset(page: Page, tmp_path: Path) -> None:
    edited = tmp_path / "edited.toml"
    edited.write_text(EDITED, encoding="utf-8")
    expected = {}
    for preset, label in CALLERS.items():
        before, after = _allowed(ROOT / "policies" / "mission-control.toml", preset), _allowed(edited, preset)
        parts = [f"gains {', '.join(sorted(after - before))}" if after - before else "",
                 f"loses {', '.join(sorted(before - after))}" if before - after else ""]
        if any(parts):
            expected[preset] = f"{label}: {'; '.join(p for p in parts if p)}"
    assert expected == {
        "mission-control": "alice (preset 'mission-control'): gains stream_telemetry_v2",
        "observer": "bob (preset 'observer'): gains stream_telemetry_v2; loses read_telemetry"}

    access = page.locator("#who-access")
    expect(access).to_be_hidden()  # the file as read: nothing changed
    page.fill("#policy-text", EDITED)
    # alice is the caller selected; bob's changes are listed all the same.
    expect(page.locator("#caller-label")).to_have_text(CALLERS["mission-control"])
    expect(access.locator(".title")).to_have_text("Your edit changes who can call what:")
    expect(access.locator(".access-line")).to_have_text(list(expected.values()))
    expect(access.locator('.access-line[data-preset="observer"] .loses')).to_have_text("loses read_telemetry")
    shot(page, "edit-access")
    page.select_option("#caller-preset", "")  # another caller selected: the same list
    expect(access.locator(".access-line")).to_have_text(list(expected.values()))
    page.fill("#policy-text", POLICY_TEXT + "\n# a comment changes nobody's access\n")
    expect(access).to_have_text("Your edit changes no caller's access.")
    page.click("#policy-reset")
    expect(access).to_be_hidden()


def test_servers_explores_a_desktop_configs_servers_live(explorer_browser: Browser, tmp_path: Path) -> None:
    (tmp_path / "files").mkdir()
    fs, clock = filesystem_stdio(tmp_path / "files"), time_stdio()
    servers = tmp_path / "servers.json"
    servers.write_text(json.dumps({"mcpServers": {"fs": {"command": fs[0], "args": fs[1:]},
                                                  "clock": {"command": clock[0], "args": clock[1:]}}}),
                       encoding="utf-8")
    policy = tmp_path / "policy.toml"
    policy.write_text('[tools.fs__write_file]\nrequirements = ["auth:claim:role:editor"]\n', encoding="utf-8")
    with explorer("--policy", str(policy), "--servers", str(servers)) as proc, \
            opened(explorer_browser, proc.page) as page:
        rows = page.locator("#who-body tr.tool-row")
        expect(rows.first).to_be_visible()
        names = rows.evaluate_all("(rows) => rows.map((r) => r.dataset.tool)")
        assert "fs__write_file" in names and "clock__get_current_time" in names
        assert all(n.startswith(("fs__", "clock__")) for n in names)
        expect(page.locator(".sources")).to_contain_text(f"tools {servers} ({len(names)})")
        decision = '#who-body tr.tool-row[data-tool="{}"] .decision'
        expect(page.locator(decision.format("fs__write_file"))).to_have_text("DENIED")
        expect(page.locator(decision.format("clock__get_current_time"))).to_have_text("ALLOWED")
        shot(page, "servers")
