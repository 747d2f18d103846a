"""The approval pages of a gateway that serves pages but whose policy needs none yet (SPEC §15):
nothing of them is imported (the idle RSS bench_gateway holds to 60 MB), `/approvals` answers 404,
and once a reload puts an approver-decided approval in force the pages are built and served, once.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import pytest

from mcp_preconditions.cli._approvals import LaterPages
from mcp_preconditions.guard import Guard
from mcp_preconditions.policy.load import parse_policy

HEAVY = ("starlette", "cryptography", "httpx2", "mcp_preconditions.pages.approvals")
APPROVED = b'[approvals.payout]\napprovers = ["auth:claim:role:treasury"]\n'


@pytest.mark.interop
def test_an_http_gateway_without_approvals_imports_none_of_the_pages() -> None:
    """Interop: it needs a fresh interpreter (`python -c`), since this process has imported the
    pages' stacks already and cannot show what wiring the gateway alone loads."""
    code = (
        "import argparse, sys\n"
        "from mcp_preconditions.cli import _pages\n"
        "from mcp_preconditions.cli._credentials import Wired\n"
        "from mcp_preconditions.guard import Guard\n"
        "from mcp_preconditions.policy.load import parse_policy\n"
        "source = parse_policy(b'', 'p.toml')\n"
        "args = argparse.Namespace(pages_listen=None, public_url=None)\n"
        "found = _pages.pages(args, Wired(), Guard(source, {}, entry_points=False), source,\n"
        "                     ('127.0.0.1', 8080))\n"
        "assert found is not None and found.serves('/approvals/x'), found\n"
        f"print(sorted(m for m in sys.modules if m.startswith({HEAVY!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_pages_come_when_the_policy_in_force_needs_them() -> None:
    guard = Guard(parse_policy(b"", "p.toml"), {}, entry_points=False)
    built: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"pages"})

    def build() -> Any:
        built.append("pages")
        return app

    later = LaterPages(build, guard)

    async def status() -> int:
        sent: list[dict[str, Any]] = []

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b""}
        await later({"type": "http", "path": "/approvals", "headers": []}, receive, send)
        return int(sent[0]["status"])

    assert asyncio.run(status()) == 404 and built == []
    guard.reload(parse_policy(APPROVED, "p.toml"))
    assert asyncio.run(status()) == 200 and asyncio.run(status()) == 200
    assert built == ["pages"]  # built once
    guard.reload(parse_policy(b"", "p.toml"))
    assert asyncio.run(status()) == 200  # (the pages follow the policy: none is listed now)


def test_pages_a_reload_builds_follow_the_cookie_rule(monkeypatch: Any) -> None:
    """A gateway that served no pages at start (no oauth server, no approvals) and whose public
    URL is https: the approval pages a reload puts in force set `__Host-` Secure cookies too
    (SPEC §14), as every page the gateway built at start does."""
    import argparse

    from mcp_preconditions.cli import _pages
    from mcp_preconditions.cli._credentials import Wired

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"set-cookie", b"flow=1; HttpOnly; Path=/; SameSite=lax")]})
        await send({"type": "http.response.body", "body": b"pages"})

    monkeypatch.setattr(_pages, "_approval_app", lambda *a: app)
    source = parse_policy(b"", "p.toml")
    guard = Guard(source, {}, entry_points=False)
    args = argparse.Namespace(pages_listen=None, public_url="https://gw.example")
    found = _pages.pages(args, Wired(), guard, source, ("127.0.0.1", 8080))
    assert found is not None
    guard.reload(parse_policy(APPROVED, "p.toml"))

    async def cookie() -> str:
        sent: list[dict[str, Any]] = []

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b""}
        await found.app({"type": "http", "path": "/approvals", "headers": []}, receive, send)
        return str(dict(sent[0]["headers"])[b"set-cookie"].decode())

    assert asyncio.run(cookie()).startswith("__Host-flow=1;")
    assert "Secure" in asyncio.run(cookie())
