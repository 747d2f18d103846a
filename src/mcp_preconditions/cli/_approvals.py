"""The gateway's approvals (SPEC §15), wired from the command line: where the approval pages are (a
denial's `url` remedy names them), the refusal of a stdio gateway that has no pages while its
policy has an approval that approvers decide there (at start, exit 2; on a reload, the reload is
refused and the old policy stays), the pages a reload may add (`LaterPages`), and what a page
shows of a tool (`tool_facts`). Bad input is one line and exit 2.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..approvals import needing_pages
from ..errors import InputError, PolicyError, PreconditionsError
from ..policy.load import PolicySource
from ._credentials import own_url

if TYPE_CHECKING:
    from ..gateway import Gateway
    from ..gateway.downstream.app import ASGIApp, Receive, Scope, Send
    from ..guard import Guard
    from ..pages.approval_views import ToolFacts

log = logging.getLogger("mcp_preconditions.approvals")


def pages_url(args: argparse.Namespace, source: PolicySource, listen: tuple[str, int] | None
              ) -> str | None:
    """The base URL of the approval pages (`--public-url`, else the listener's or
    `--pages-listen`'s own). InputError for a stdio gateway without `--pages-listen` whose policy
    has an approval decided by approvers: nobody could reach the page to approve."""
    problem = _without_pages(args, source, listen)
    if problem is not None:
        raise InputError(f"{source.source}: {problem}")
    url: str | None = args.public_url or own_url(args, listen)
    return url.rstrip("/") if url else None


def reload_check(args: argparse.Namespace, listen: tuple[str, int] | None
                 ) -> Callable[[PolicySource], None]:
    """What a reload must pass (`PolicyReloader.add_check`): a stdio gateway without
    `--pages-listen` cannot serve the pages of an approval a new policy adds, so that policy is
    refused (PolicyError: the old one stays, the reload counts as failed, the reason is logged).
    A gateway that serves pages serves the new approvals' at once (`LaterPages`)."""
    def check(source: PolicySource) -> None:
        problem = _without_pages(args, source, listen)
        if problem is not None:
            raise PolicyError(source.source, [problem])
    return check


def _without_pages(args: argparse.Namespace, source: PolicySource,
                   listen: tuple[str, int] | None) -> str | None:
    name = needing_pages(source)
    if name is None or listen is not None or args.pages_listen is not None:
        return None
    return (f"approvals.{name}: approvers decide it on the gateway's approval pages, which a stdio "
            "gateway serves only with --pages-listen http://127.0.0.1:PORT")


def tool_facts(gateway: Gateway, name: str) -> ToolFacts | None:
    """What an approval page shows of the tool a caller called `name`: its server and its
    description, as the server listed it; None when no one server lists it now."""
    from ..pages.approval_views import ToolFacts

    fleet = gateway.fleet
    target = fleet.routes.tools.get(name)
    if target is None or name in fleet.routes.duplicates:
        return None
    tool = fleet.members[target.server].catalog.tools.get(target.name)
    if tool is None:
        return None
    description = tool.get("description")
    return ToolFacts(target.server, description if isinstance(description, str) else None)


class LaterPages:
    """The approval pages of a gateway whose policy had no approval decided by approvers when it
    started: built (`build`) the first time the policy in force has one, a reload having added it
    (SPEC §15: no restart). Until then `/approvals` is 404, and nothing of the pages is imported."""

    def __init__(self, build: Callable[[], ASGIApp], guard: Guard) -> None:
        self._build = build
        self._guard = guard
        self._app: ASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        from ..gateway.downstream.exchange import text

        app = self._app
        if app is None:
            if needing_pages(self._guard.snapshot.source) is None:
                await text(send, 404, b"Not Found")
                return
            try:
                app = self._app = self._build()
            except PreconditionsError as exc:  # (a pages key the new policy needs, not set)
                log.error("the approval pages cannot be served: %s", exc)
                await text(send, 503, b"Service Unavailable")
                return
        await app(scope, receive, send)
