"""Bad input to the running explorer: broken claims, a policy that does not parse, a huge log, a
request of the wrong shape. Each gets a clear message (as the JSON the page shows), never a server
traceback and never a 500.

In-process (tests/fixtures/explore_inprocess.py): `explore` runs as a user runs it up to serving, and
its app is called through the streaming bridge at the address and with the token it announced; the
command lines the answers are compared with (`lint`, `serve`) run in this process too. The page
showing these messages in Chromium: test_explore_bad_input_browser.py (interop).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.fixtures.explore_inprocess import Explored, cli, explored
from tests.fixtures.explorer import MISSION
from tests.fixtures.inprocess import held
from tests.fixtures.mcp_servers import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]
BOUND = 100_000  # MCP_PRECONDITIONS_MAX_FILE_BYTES for this explorer: a "huge" log is small to make
POLICY = (ROOT / "policies" / "mission-control.toml").read_text(encoding="utf-8")
LOG = {"content-type": "application/octet-stream"}  # what the page sends a log as
TOO_LARGE = (f"larger than {BOUND} bytes, the input size bound (set $MCP_PRECONDITIONS_MAX_FILE_BYTES "
             "to raise it; `mcp-preconditions log summarize` reads a log of any size)")


def huge_log(directory: Path) -> Path:
    """A decision log twice the size bound."""
    path = directory / "huge.jsonl"
    record = json.dumps({"time": 1.0, "tool": "t", "allowed": True, "unmet": []}) + "\n"
    path.write_text(record * (2 * BOUND // len(record)), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def big_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return huge_log(tmp_path_factory.mktemp("logs"))


@pytest.fixture(scope="module")
def bounded() -> Iterator[None]:
    """The explorer's environment: the size bound, the repository as the working folder (the
    paths on its command line are relative, as the messages show them)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MCP_PRECONDITIONS_MAX_FILE_BYTES", str(BOUND))
        patch.chdir(ROOT)
        yield


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(big_log: Path, bounded: None) -> AsyncIterator[Explored]:
    async with held(explored(*MISSION, "--claims", "examples/claims/observer.json", "--log",
                             str(big_log), "--log", "no-such-log.jsonl")) as page:
        yield page


async def post(server: Explored, path: str, **options: Any) -> Any:
    async with server.http() as http:
        return await http.post(server.url + path.lstrip("/"), **options)


async def ask(server: Explored, path: str, **body: Any) -> dict[str, Any]:
    response = await post(server, path, json={"policy": POLICY, **body}, headers=server.headers)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


@pytest.mark.parametrize(("claims", "message"), [
    ("{", "claims: not valid JSON (line 1, column 2): Expecting property name enclosed in double quotes"),
    ('{"sub": "a", "sub": "b"}', 'claims: not valid JSON: duplicate key "sub" in one object'),
    ("[1, 2]", "claims: expected a JSON object of claims, got array"),
    ('{"sub": NaN}', "claims: not valid JSON: NaN is not valid JSON"),
    ('{"sub": "\\ud800"}', "claims: sub: lone surrogate \\ud800: not Unicode text"),
    ("[" * 20_000, "claims: not usable JSON: nested too deeply"),
])
async def test_broken_claims_are_named(server: Explored, claims: str, message: str) -> None:
    answer = await ask(server, "/api/decisions", claims=claims)
    assert answer["caller"] == {"ok": False, "problem": message, "label": None}
    assert answer["tools"] is None and answer["policy"]["ok"]


async def test_an_unknown_preset_is_named(server: Explored) -> None:
    answer = await ask(server, "/api/decisions", preset="nobody")
    assert answer["caller"]["problem"] == "caller: no preset named 'nobody'"


@pytest.mark.parametrize(("policy", "start"), [
    ("[tools.x\n", "policies/mission-control.toml: (file): not valid TOML: "),
    ('environment = "prod"', "policies/mission-control.toml: environment: Input should be a valid list"),
    ('[tools.x]\nrequirements = ["nope:1"]', "policies/mission-control.toml: tools.x.requirements[0]: "),
    ("a = 1\n", "policies/mission-control.toml: a: unknown key"),
])
async def test_a_policy_that_does_not_parse_is_named_by_key_path(server: Explored, policy: str,
                                                            start: str) -> None:
    answer = await ask(server, "/api/decisions", policy=policy)
    assert answer["policy"]["ok"] is False and answer["tools"] is None
    assert answer["policy"]["problems"][0].startswith(start), answer["policy"]["problems"]


async def test_an_edit_that_names_code_to_run_is_refused(server: Explored) -> None:
    """Anyone who reaches the page can edit the policy: an edit may not name code to run, a host to
    reach or a file to read that the file as read does not (tests/unit/test_explore_reach.py)."""
    edited = (POLICY + '\n[state.callables]\nk = "os:getpid"\n[features.openfeature]\n'
              'path = "/etc/passwd"\n')
    answer = await ask(server, "/api/decisions", policy=edited)
    assert answer["tools"] is None and answer["policy"]["ok"] is False
    tail = "; edit the file and restart explore"
    assert answer["policy"]["problems"] == [
        f"policies/mission-control.toml: state.callables.k: an edit on the page cannot name code "
        f"to run{tail}",
        f"policies/mission-control.toml: features.openfeature: an edit on the page cannot read a "
        f"file{tail}"]


@pytest.mark.parametrize(("path", "body", "message"), [
    ("/api/call", {"tool": "nope"}, "tool: no tool named 'nope'"),
    ("/api/call", {"tool": "launch_rocket", "arguments": "[1]"},
     "arguments: the call's arguments must be a JSON object, got array"),
    ("/api/call", {"tool": "launch_rocket", "arguments": '{"vehicle": '},
     "arguments: not valid JSON (line 1, column 13): Expecting value"),
])
async def test_bad_arguments_are_named(server: Explored, path: str, body: dict[str, Any],
                                       message: str) -> None:
    assert (await ask(server, path, **body))["call"] == {"problem": message}


@pytest.mark.parametrize(("body", "message"), [
    ({"knowledge": '{"satisfied": "auth:oauth2"}'},
     "knowledge: invalid knowledge: satisfied: must be a list of strings, got str"),
    ({"knowledge": "{"}, "knowledge: not valid JSON (line 1, column 2): Expecting property name "
                         "enclosed in double quotes"),
    ({"knowledge_preset": "nope"}, "knowledge: no preset named 'nope'"),
])
async def test_bad_knowledge_is_named(server: Explored, body: dict[str, Any], message: str) -> None:
    assert (await ask(server, "/api/client", **body))["client"] == {"problem": message}


@pytest.mark.parametrize(("content", "headers", "status", "message"), [
    (b"{", {"content-type": "application/json"}, 400,
     "request: not valid JSON (line 1, column 2): Expecting property name enclosed in double quotes"),
    (b'{"policy": 1}', {"content-type": "application/json"}, 400,
     "request: policy: Input should be a valid string"),
    (b'{"policy": "", "extra": 1}', {"content-type": "application/json"}, 400,
     "request: extra: Extra inputs are not permitted"),
    (b'{"policy": "", "what_if": {"env:prod": true}}', {"content-type": "application/json"}, 400,
     "request: what_if: 'env:prod': only state: and feature: values can be set"),
    (b"policy=x", {"content-type": "application/x-www-form-urlencoded"}, 415,
     "the request must be JSON (Content-Type: application/json)"),
    (b"{" + b" " * BOUND + b"}", {"content-type": "application/json"}, 413,
     f"the request: {BOUND + 2} bytes, {TOO_LARGE}"),
])
async def test_requests_the_page_never_sends_get_one_line(server: Explored, content: bytes,
                                                    headers: dict[str, str], status: int,
                                                    message: str) -> None:
    response = await post(server, "api/decisions", content=content,
                          headers={**headers, **server.headers})
    assert (response.status_code, response.json()) == (status, {"error": message})


REFUSED = ("this page needs the token of the URL that `mcp-preconditions explore` printed "
           "(http://HOST:PORT/?token=...)")


@pytest.mark.parametrize("query", ["", "?token=", "?token=nope", "?token=TOKEN-but-longer"])
async def test_the_page_needs_the_announced_token(server: Explored, query: str) -> None:
    """The page (which holds the whole policy) is answered only at the URL the command announced."""
    async with server.http() as http:
        response = await http.get(server.url + query.replace("TOKEN", server.token))
        assert (response.status_code, response.text) == (403, REFUSED + "\n")
        assert (await http.get(server.page)).status_code == 200
        assert (await http.get(server.url + "static/explore.js")).status_code == 200  # public code


@pytest.mark.parametrize("headers", [{}, {"x-explore-token": ""}, {"x-explore-token": "nope"},
                                     {"x-explore-token": "TOKENx"}, {"x-other": "TOKEN"}])
@pytest.mark.parametrize("path", ["api/decisions", "api/history?name=l.jsonl", "api/nowhere", "x"])
async def test_every_request_but_static_files_needs_the_token_header(server: Explored, path: str,
                                                               headers: dict[str, str]) -> None:
    """A request without the run's token in its header is refused before its body is read: a cross-
    site form or simple POST (no custom header possible) gets nothing, and parses nothing."""
    sent = {k: v.replace("TOKEN", server.token) for k, v in headers.items()}
    url = server.url + path + ("&" if "?" in path else "?") + f"token={server.token}"  # not a header
    response = await post(server, url, content=b"{" * 1_000_000,
                          headers={**sent, "content-type": "text/plain"})
    assert (response.status_code, response.json()) == (403, {"error": REFUSED})


async def test_a_foreign_host_name_is_refused(server: Explored) -> None:
    """A page on loopback answers loopback names only: a rebinding DNS name cannot read the policy."""
    async with server.http() as http:
        response = await http.get(server.page, headers={"host": "attacker.example:8088"})
    assert (response.status_code, response.text) == (400, "Invalid host header")


async def test_a_huge_log_is_a_message_never_a_crash(server: Explored, big_log: Path) -> None:
    async with server.http() as http:
        answer = (await http.get(server.url + "api/history", headers=server.headers)).json()
    size = big_log.stat().st_size
    assert answer["problems"] == [f"{big_log}: {size} bytes, {TOO_LARGE}",
                                  "no-such-log.jsonl: cannot read: No such file or directory"]
    response = await post(server, "api/history?name=huge.jsonl", content=big_log.read_bytes(),
                          headers={**server.headers, **LOG})
    assert (response.status_code, response.json()) == (
        413, {"error": f"huge.jsonl: {size} bytes, {TOO_LARGE}"})


@pytest.mark.parametrize("content_type", ["", "text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x", "application/json"])
async def test_a_log_is_taken_only_as_bytes(server: Explored, content_type: str) -> None:
    """What a form could send is refused, unread, whatever it holds."""
    response = await post(server, "api/history?name=l.jsonl", content=b'{"tool": "t"}\n',
                          headers={**server.headers, "content-type": content_type})
    assert (response.status_code, response.json()) == (415, {
        "error": "a log must be sent as bytes (Content-Type: application/octet-stream)"})


async def test_a_request_from_the_page_is_bounded_below_a_log(
        bounded: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A JSON request holds a policy, a caller and arguments: 4 MiB here (8 times the policy file
    when that is more), where a log may take the input size bound (64 MiB)."""
    monkeypatch.delenv("MCP_PRECONDITIONS_MAX_FILE_BYTES")  # this explorer's bound: the default
    body = json.dumps({"policy": POLICY + "#" * 5_000_000}).encode()
    records = json.dumps({"tool": "t", "allowed": True, "unmet": []}).encode() + b"\n"
    async with explored(*MISSION) as page:
        response = await post(page, "api/decisions", content=body,
                              headers={**page.headers, "content-type": "application/json"})
        log = await post(page, "api/history?name=big.jsonl", content=records * 150_000,
                         headers={**page.headers, **LOG})
    assert (response.status_code, response.json()) == (413, {"error": (
        f"the request: {len(body)} bytes, larger than 4194304 bytes, the bound of a request from this "
        "page (8 times the policy file, at least 4 MiB)")})
    assert (log.status_code, log.json()["records"]) == (200, 150_000)


async def test_bad_lines_of_a_log_are_named_as_log_summarize_names_them(server: Explored) -> None:
    lines = b'{"tool": "t", "allowed": true, "unmet": []}\nnot json\n\xff\n[]\n' + b"{}\n" * 9
    answer = (await post(server, "api/history?name=odd.jsonl", content=lines,
                         headers={**server.headers, **LOG})).json()
    assert (answer["records"], answer["skipped"]) == (1, 12)
    assert answer["bad_lines"] == [
        "odd.jsonl:2: not JSON (Expecting value at column 1); line skipped",
        "odd.jsonl:3: not UTF-8; line skipped", "odd.jsonl:4: not a JSON object; line skipped",
        'odd.jsonl:5: not a decision record: no "tool" string; line skipped',
        'odd.jsonl:6: not a decision record: no "tool" string; line skipped',
        "odd.jsonl: 7 more bad line(s) skipped"]


async def test_lint_findings_are_the_lines_lint_prints(server: Explored, tmp_path: Path) -> None:
    """Rules that can never match: the page lists what `lint --policy` prints, decisions still
    shown as `check` does (a server runs with such a policy)."""
    answer = await ask(server, "/api/decisions", policy=POLICY)
    copy = tmp_path / "mission-control.toml"
    copy.write_text(POLICY, encoding="utf-8")
    code, out, _ = cli("lint", "--policy", str(copy), "--tools", "examples/mission-control-tools.json")
    assert code == 0
    printed = out.splitlines()[:-1]  # the last line counts them
    assert answer["policy"]["warnings"] == [line.replace(str(copy), "policies/mission-control.toml")
                                            for line in printed]
    assert any("no caller can ever be allowed: env:staging" in w for w in answer["policy"]["warnings"])
    assert answer["policy"]["ok"] and answer["tools"] is not None


async def test_a_near_miss_is_refused_as_a_server_refuses_it(server: Explored, tmp_path: Path) -> None:
    """`[tools.Launch_rocket]` beside the tool `launch_rocket`: a server with these tools refuses to
    start (Guard.know_tools); the page says so in the line `serve` prints, and decides nothing as if
    the rule were absent."""
    policy = POLICY + '\n[tools.Launch_rocket]\nrequirements = ["auth:oauth2"]\n'
    answer = await ask(server, "/api/decisions", policy=policy)
    copy = tmp_path / "mission-control.toml"
    copy.write_text(policy, encoding="utf-8")
    code, _, err = cli("serve", "--policy", str(copy))
    assert code == 2
    line = err.strip().removeprefix("mcp-preconditions: error: ").replace(
        str(copy), "policies/mission-control.toml")
    assert 'tools."Launch_rocket": names no tool, but nearly matches the tool "launch_rocket"' in line
    assert answer["policy"]["problems"] == [line]
    assert (answer["policy"]["ok"], answer["tools"], answer.get("access")) == (False, None, None)
    assert not [w for w in answer["policy"]["warnings"] if ": error: " in w]  # said once, as a problem
    call = await ask(server, "/api/call", policy=policy, tool="launch_rocket", arguments="")
    assert call["call"] is None
