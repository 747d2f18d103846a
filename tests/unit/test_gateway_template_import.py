"""The first resource routed by a template imports the MCP SDK's URI template matcher in a worker
thread, never on the gateway's event loop: its package took 1.3-3.4 s to import on two loaded
cores, during which the gateway answered nobody (with a slow server behind it, the refused read of
test_credentials_every_path missed its client's 10 s under load).

The gateway in-process, served to the SDK's client, in front of two wire doubles (two servers, so
the URI is routed by the templates they list); the matcher is imported afresh, and whichever thread
imports it is seen.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import anyio
import mcp.shared
import pytest
from mcp import Client

from mcp_preconditions.gateway import Gateway, ServerSpec, route
from mcp_preconditions.guard import Guard
from mcp_preconditions.policy.load import parse_policy
from mcp_preconditions.principal import ANONYMOUS
from tests.fixtures.inprocess import served
from tests.fixtures.wire_double import wire_double


class _Importers(importlib.abc.MetaPathFinder):
    """Notes the thread that imports the matcher; finds nothing itself."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname == route.MATCHER:
            self.threads.append(threading.current_thread())
        return None


async def test_the_first_template_match_imports_its_matcher_off_the_event_loop(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """On the old code the matcher was imported in `Routes._matches`, on the event loop's thread."""
    importers = _Importers()
    monkeypatch.setattr(mcp.shared, "uri_template", sys.modules[route.MATCHER])  # (restored after)
    monkeypatch.delitem(sys.modules, route.MATCHER)
    monkeypatch.setattr(route, "_LOADED", set())
    monkeypatch.setattr(sys, "meta_path", [importers, *sys.meta_path])
    async with wire_double() as a, wire_double() as b:
        a.scheme, b.scheme = "a", "b"
        gateway = Gateway(Guard(parse_policy(b"", "policy.toml")),
                          [ServerSpec("a", "a__", url=a.url), ServerSpec("b", "b__", url=b.url)],
                          lambda _call: ANONYMOUS)
        async with served(gateway) as url, Client(url, mode="legacy") as client:
            with anyio.fail_after(10):
                read: Any = await client.read_resource("b://someone")  # b's template b://{who}
    assert read.contents[0].text == "None"  # (the double answers whose request it was)
    assert [p.params["uri"] for p in b.calls("resources/read")] == ["b://someone"]
    assert a.calls("resources/read") == []
    assert importers.threads  # imported afresh, as the gateway's first match does
    assert threading.current_thread() not in importers.threads
