"""The gateway's pages, composed (SPEC §14, §15): the credential pages of `oauth` servers and the
approval pages of approvals with approvers, one app on the HTTP listener or a stdio gateway's
`--pages-listen`, signing people in with one `[auth.sign_in]` and verifying bearer tokens by the
policy in force. Bad input is one line and exit 2.

The sign-in cookies (and the sign-in flows' records, and the forms' CSRF tokens) are sealed with
the key in $MCP_PRECONDITIONS_PAGES_KEY (32 bytes, base64): replicas that share their flows in
Redis must share it too; without it each process draws its own. The sign-in flows under way are
bounded (credentials.signin.MAX_FLOWS) in memory or Redis alike. Every cookie of every page follows
one rule (pages/cookies.py): `__Host-` and Secure when the public URL is https.
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from ..approvals import PAGES_PATH, needing_pages
from ..errors import InputError, PolicyError
from ..policy.load import PolicySource
from ..principal import Credentials, Identity
from ._approvals import LaterPages
from ._credentials import PAGES_KEY, Wired, own_url
from ._credentials import pages as credential_pages
from ._sockets import http_address, listening_socket

if TYPE_CHECKING:
    from ..credentials import SignIn
    from ..gateway.downstream.app import ASGIApp, Pages, Receive, Scope, Send
    from ..guard import Guard
    from ..pages.approvals import Describe


def pages(args: argparse.Namespace, wired: Wired, guard: Guard, source: PolicySource,
          listen: tuple[str, int] | None, describe: Describe | None = None) -> Pages | None:
    """Every page the gateway serves (None: it has none). Sets `wired.base_url` (where browsers
    reach them) and, for a stdio gateway, `wired.pages_sock` (`--pages-listen`). A gateway that
    serves pages serves the approval pages a reload adds (`_approvals.LaterPages`); `describe`
    tells them what the gateway knows of a tool."""
    approvals = needing_pages(source) is not None
    flow = wired.resolver.connect if wired.resolver is not None else None
    served = listen is not None or args.pages_listen is not None
    if flow is None and not approvals and not served:
        return None
    from ..gateway.downstream.app import Pages

    base_url = wired.base_url or args.public_url or own_url(args, listen)
    assert base_url is not None  # wire() and _approvals.pages_url refused a gateway without pages
    wired.base_url = base_url.rstrip("/")
    later = (PAGES_PATH,)
    if flow is None and not approvals:  # (nothing below is imported then: starlette, cryptography)
        base = wired.base_url  # (the rule wraps the app a reload builds: no import before)
        return Pages(later, LaterPages(
            lambda: _cookies(_approval_app(wired, guard, None, describe), base), guard))
    signed = _sign_in(wired, source)
    parts = [p for p in [credential_pages(wired, _Verifier(guard), signed[0])] if p is not None]

    def build() -> ASGIApp:
        return _approval_app(wired, guard, signed, describe)
    parts.append(Pages(later, build() if approvals else LaterPages(build, guard)))
    if args.pages_listen is not None:
        wired.pages_sock = listening_socket(*http_address(args.pages_listen, "--pages-listen"),
                                            "--pages-listen")
    return _cookie_rule(parts[0] if len(parts) == 1 else _together(parts), wired.base_url)


def with_decision_point(pages: Pages | None, guard: Guard, public_url: str | None) -> Pages:
    """`pages` and, at AuthZEN's paths, the gateway's policy as a decision point while it has a
    `[pdp_server]` table (SPEC §16; authzen/mounted.py): an HTTP listener's, never a stdio
    gateway's `--pages-listen` (whose pages are for people)."""
    from ..authzen.mounted import PATHS, MountedDecisionPoint
    from ..gateway.downstream.app import Pages

    point = Pages(PATHS, MountedDecisionPoint(guard, public_url))
    return point if pages is None else _together([pages, point])


def _cookie_rule(pages: Pages, base_url: str) -> Pages:
    """Every page's cookies by pages/cookies.py's rule: on an https public URL, `__Host-`
    and Secure (behind a TLS proxy the listener itself speaks http)."""
    from ..gateway.downstream.app import Pages

    return Pages(pages.paths, _cookies(pages.app, base_url))


def _cookies(app: ASGIApp, base_url: str) -> ASGIApp:
    """`app` with its cookies by that rule."""
    from urllib.parse import urlsplit

    from ..pages.cookies import HostCookies

    return HostCookies(app, urlsplit(base_url).scheme == "https")


def _approval_app(wired: Wired, guard: Guard, signed: tuple[SignIn | None, bytes | None] | None,
                  describe: Describe | None) -> ASGIApp:
    """The approval pages (`signed`: the sign-in the other pages use; None: made now, for a
    policy a reload put in force)."""
    from ..pages.approvals import ApprovalPages, approving_of

    sign_in, key = signed if signed is not None else _sign_in(wired, guard.snapshot.source)
    assert wired.base_url is not None
    return ApprovalPages(approving_of(guard), _Verifier(guard), wired.base_url, sign_in, key,
                         describe=describe).app()


class _Verifier:
    """The policy in force verifies the pages' bearer tokens (a reload changes it)."""

    def __init__(self, guard: Guard) -> None:
        self.guard = guard

    async def authenticate(self, credentials: Credentials) -> Identity:
        return await self.guard.authenticate(credentials)


def _together(parts: list[Pages]) -> Pages:
    """One app answering each part's paths (the listener sends only those)."""
    from ..gateway.downstream.app import Pages

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        path = str(scope.get("path", ""))
        part = next((p for p in parts if p.serves(path)), parts[0])
        await part.app(scope, receive, send)

    return Pages(tuple(path for p in parts for path in p.paths), app)


def _sign_in(wired: Wired, source: PolicySource) -> tuple[SignIn | None, bytes | None]:
    """`[auth.sign_in]` for every page, and the key sealing its cookies; (None, None) without it.
    Its flows live in Redis when the pages' accounts or approvals do (replicas: a sign-in begun on
    one ends on another)."""
    from ..credentials import MemoryTickets, SignIn, Tickets, sign_in_settings
    from ..credentials.signin import MAX_FLOWS

    try:
        settings = sign_in_settings(source)
    except PolicyError as exc:
        raise InputError(f"{exc.source}: {exc.problems[0]}") from None
    if settings is None:
        return None, None
    redis = source.policy.state.redis
    flow = wired.resolver.connect if wired.resolver is not None else None
    shared = redis is not None and (
        any(a.settings.store == "redis" for a in (flow.accounts.values() if flow else ())) or
        any(a.store == "redis" for a in source.policy.approvals.values()))
    # Its own store, bounded: a flood of links never pushes a sign-in out, nor sign-ins anything.
    tickets: Tickets = MemoryTickets(MAX_FLOWS)
    if shared and redis is not None:
        from ..credentials.stores_redis import DEFAULT_PREFIX, RedisTickets
        from ..resolvers.state_redis import RedisStateSource

        tickets = RedisTickets(RedisStateSource.from_policy(redis), DEFAULT_PREFIX + "signin:",
                               limit=MAX_FLOWS)
    key = _pages_key(shared)
    wired.secrets = wired.secrets | {settings.client.client_secret}
    return SignIn(settings, tickets, key), key


def _pages_key(shared: bool) -> bytes:
    from ..credentials.sealing import key_from_text

    text = os.environ.get(PAGES_KEY)
    if not text:
        if shared:
            raise InputError(f"${PAGES_KEY} is not set: replicas that share sign-ins in Redis must "
                             "share the key that seals them (32 bytes, base64: openssl rand "
                             "-base64 32)")
        return os.urandom(32)
    try:
        return key_from_text(text)
    except ValueError as exc:
        raise InputError(f"${PAGES_KEY} {exc}") from None
