"""Bad input shown on the explorer's page, in Debian's Chromium against the real `mcp-preconditions
explore` command: broken claims, a policy that does not parse and a huge log each get their message
on the page; tool names that are HTML or hold a bidi override are shown as text.

Interop: what is checked is what the page's script draws (the message under the field, the text of
a name never run as markup), which only a browser running it shows. The same inputs' JSON answers
are checked in-process in test_explore_bad_input.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Dialog, expect

from tests.fixtures.explorer import MISSION, SCREENSHOTS, Explorer, chromium, explorer
from tests.integration.test_explore_bad_input import BOUND, POLICY, TOO_LARGE, huge_log

pytestmark = [pytest.mark.integration, pytest.mark.interop]


@pytest.fixture(scope="module")
def big_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return huge_log(tmp_path_factory.mktemp("logs"))


@pytest.fixture(scope="module")
def server(big_log: Path) -> Iterator[Explorer]:
    with explorer(*MISSION, "--claims", "examples/claims/observer.json", "--log", str(big_log),
                  "--log", "no-such-log.jsonl", MCP_PRECONDITIONS_MAX_FILE_BYTES=str(BOUND)) as proc:
        yield proc


def test_the_page_shows_each_message(server: Explorer, big_log: Path) -> None:
    with chromium() as browser:
        _page_messages(browser, server, big_log)


def _page_messages(browser: Browser, server: Explorer, big_log: Path) -> None:
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    page.goto(server.page)
    expect(page.locator("#who-body tr.tool-row")).to_have_count(7)
    page.fill("#caller-claims", '{"sub": "mallory",}')
    problem = page.locator("#caller-problem")
    expect(problem).to_have_text("claims: not valid JSON (line 1, column 19): Expecting property name "
                                 "enclosed in double quotes")
    expect(page.locator("#who-body")).to_contain_text("Fix the caller's claims")
    page.select_option("#caller-preset", "observer")
    expect(problem).to_be_hidden()
    page.fill("#policy-text", POLICY + "\n[tools.launch_rocket\n")
    expect(page.locator("#policy-problems .line")).to_contain_text(
        "policies/mission-control.toml: (file): not valid TOML: ")
    page.click("#tab-logs")
    expect(page.locator("#logs-problems .line").first).to_have_text(
        f"{big_log}: {big_log.stat().st_size} bytes, {TOO_LARGE}")
    page.set_input_files("#logs-upload", str(big_log))
    expect(page.locator("#logs-problems .line")).to_have_text(
        f"huge.jsonl: {big_log.stat().st_size} bytes, {TOO_LARGE}")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "bad-input.png"), full_page=True)
    page.close()


def test_hostile_names_are_shown_as_text(tmp_path: Path) -> None:
    """A tool name that is HTML, or that holds a bidi override, is shown as text, escaped."""
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps({"tools": [
        {"name": "<img src=x onerror=alert(1)>", "inputSchema": {"properties": "garbage"},
         "execution": {"requirements": ["auth:oauth2"]}},
        {"name": "safe\u202etxt.exe", "inputSchema": {"type": "object", "properties": {
            "<b>": {"type": "string", "description": "<script>alert(2)</script>"}}}}]}),
        encoding="utf-8")
    with explorer("--policy", "policies/minimal.toml", "--tools", str(tools)) as proc, \
            chromium() as browser:
        page = browser.new_page()
        dialogs: list[str] = []

        def dismissed(dialog: Dialog) -> None:
            dialogs.append(dialog.message)
            dialog.dismiss()

        page.on("dialog", dismissed)
        page.goto(proc.page)
        rows = page.locator("#who-body tr.tool-row td:first-child")
        expect(rows).to_contain_text(["<img src=x onerror=alert(1)>", "safe\\u202etxt.exe"])
        page.click("#tab-call")
        page.select_option("#call-tool", index=1)
        expect(page.locator("#call-form label")).to_contain_text("<script>alert(2)</script>")
        page.select_option("#call-tool", index=0)
        expect(page.locator("#call-form")).to_have_text("This tool's inputSchema lists no arguments.")
        assert dialogs == [] and page.locator("img").count() == 0
