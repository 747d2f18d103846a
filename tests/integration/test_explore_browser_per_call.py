"""The explorer in Chromium (Debian's, driven by Playwright) shows what only a call can decide as what
it is (issue 40 item 9): `mcp-preconditions explore --config gateway.toml` lists a server with
per-caller credentials (npm server-everything over streamable HTTP) and one without
(tests/fixtures/listed_server.py over stdio), live, under their visible names, each tool of the
first carrying the gateway's `credential:wiki`. A tool that needs it says NEEDS A CREDENTIAL (it
was ALLOWED), one that needs an approval NEEDS A PERSON (it was DEPENDS ON ARGUMENTS), and a call
tried says it is decided per call. Screenshots under .run/explore/.

Interop: what is checked is what the page's script draws in a browser, for tools listed live from
npm server-everything and a stdio server, real processes the explorer reaches.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.fixtures.explorer import Explorer, chromium, explorer, opened, shot
from tests.fixtures.upstreams import everything_http

pytestmark = [pytest.mark.integration, pytest.mark.interop]

POLICY = """environment = ["staging"]
[approvals.confirm]
approvers = "self"
[tools.plain__wipe]
requirements = ["approval:confirm"]
[tools.wiki__echo]
requirements = ["approval:confirm"]
[tools."wiki__get-env"]
requirements = ["env:production"]
"""


@pytest.fixture(scope="module")
def per_call(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Explorer]:
    directory = tmp_path_factory.mktemp("explore-per-call")
    (directory / "policy.toml").write_text(POLICY, encoding="utf-8")
    (directory / "secrets.json").write_text("{}", encoding="utf-8")
    (directory / "tools.json").write_text(json.dumps(
        [{"name": n, "inputSchema": {"type": "object"}} for n in ("wipe", "open")]), encoding="utf-8")
    with everything_http() as upstream:
        (directory / "gateway.toml").write_text(f"""policy = "policy.toml"
[servers.wiki]
url = "{upstream.url}"
[servers.wiki.credentials]
kind = "per-subject"
secrets = "secrets.json"
[servers.plain]
command = {json.dumps(sys.executable)}
args = ["-m", "tests.fixtures.listed_server", {json.dumps(str(directory / "tools.json"))},
        {json.dumps(str(directory / "ran.log"))}]
""", encoding="utf-8")
        with explorer("--policy", str(directory / "policy.toml"),
                      "--config", str(directory / "gateway.toml")) as page:
            yield page


@pytest.fixture
def page(per_call: Explorer) -> Iterator[Page]:
    with chromium() as browser, opened(browser, per_call.page) as opened_page:
        expect(opened_page.locator('#who-body tr.tool-row[data-tool="plain__open"]')).to_have_count(1)
        yield opened_page


def row(tool: str) -> str:
    return f'#who-body tr.tool-row[data-tool="{tool}"]'


def test_a_credential_and_an_approval_are_shown_as_decided_per_call(page: Page) -> None:
    expect(page.locator(f"{row('plain__open')} .decision")).to_have_text("ALLOWED")
    expect(page.locator(f"{row('plain__wipe')} .decision")).to_have_text("NEEDS A PERSON")
    expect(page.locator(f"{row('wiki__get-sum')} .decision")).to_have_text("NEEDS A CREDENTIAL")
    expect(page.locator(f"{row('wiki__echo')} .decision")).to_have_text("NEEDS A CREDENTIAL")
    expect(page.locator(f"{row('wiki__get-env')} .decision")).to_have_text("DENIED")
    expect(page.locator(f"{row('wiki__echo')} .chip.credential")).to_have_text("credential:wiki")
    expect(page.locator(f"{row('wiki__echo')} .chip.approval")).to_have_text("approval:confirm")
    expect(page.locator(f"{row('wiki__get-env')} .chip.notasked")).to_have_text("credential:wiki")
    summary = page.locator("#who-summary")
    expect(summary).to_contain_text("1 tool when a person approves")
    expect(summary).to_contain_text("tools with the caller's own credential")
    if page.locator(row("wiki__echo")).get_attribute("aria-expanded") != "true":  # (denied: opened)
        page.locator(row("wiki__echo")).click()
    detail = page.locator(row("wiki__echo") + " + tr.detail")
    expect(detail.locator(".status.needs_a_credential")).to_have_text("needs a credential")
    expect(detail).to_contain_text("a secret kept for the caller (kind per-subject) for server 'wiki'")
    expect(detail.locator(".status.asks_the_caller")).to_have_text("asks the caller")
    expect(detail).to_contain_text("once the caller's credential is obtained")
    shot(page, "who-per-call")


def test_a_call_tried_says_who_decides_it(page: Page) -> None:
    page.click("#tab-call")
    page.select_option("#call-tool", "plain__wipe")
    result = page.locator("#call-result")
    expect(result.locator(".verdict .decision")).to_have_text("NEEDS A PERSON")
    expect(result.locator(".per-call")).to_contain_text("Decided per call, by a person")
    page.select_option("#call-tool", "wiki__get-sum")
    expect(result.locator(".verdict .decision")).to_have_text("NEEDS A CREDENTIAL")
    expect(result.locator(".per-call")).to_contain_text("Decided per call, at the gateway")
    page.select_option("#call-tool", "wiki__get-env")
    expect(result.locator(".verdict .decision")).to_have_text("DENIED")
    expect(result.locator("pre")).to_contain_text("unmet requirements: env:production. Ask an operator.")
    shot(page, "call-per-call")


def test_the_tools_carry_the_gateways_credential(per_call: Explorer) -> None:
    """What the page decides on: each tool of the server with credentials carries it, as the
    gateway lists it; the other server's do not."""
    answer = httpx.post(per_call.url + "api/decisions", json={"policy": POLICY},
                        headers=per_call.headers, timeout=10).json()
    tools = {t["name"]: [o["requirement"] for o in t["outcomes"]] for t in answer["tools"]}
    assert tools["wiki__get-sum"] == ["credential:wiki"]
    assert tools["wiki__echo"] == ["credential:wiki", "approval:confirm"]
    assert tools["plain__open"] == []
