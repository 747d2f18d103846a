"""The gateway's per-caller credentials (SPEC §14), wired from the command line and the config: the
`credential` resolver over every server with `credentials`, its attempts counted, and, for `oauth`
servers, the pages (connect links, callbacks, a caller's connections), composed with the approval
pages in _pages.py. Bad input is one line and exit 2, naming the key path.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import InputError, RequirementError
from ..policy.load import PolicySource
from ._sockets import http_address

if TYPE_CHECKING:  # the gateway (the mcp extra) and the pages (starlette) come with the gateway
    import socket

    from ..auth.base import Authenticator
    from ..credentials import CredentialResolver, SignIn
    from ..gateway import Gateway, GatewayConfig
    from ..gateway.downstream.app import Pages
    from ..gateway.upstream.session import Upstream
    from ..telemetry import Metrics

log = logging.getLogger("mcp_preconditions.gateway")
PAGES_KEY = "MCP_PRECONDITIONS_PAGES_KEY"


@dataclass
class Wired:
    """What the gateway runs with: the resolver (None: no server has credentials), where browsers
    reach the pages, the socket of `--pages-listen`, and the values of the secrets it holds (a
    stdio server's environment leaves them out)."""

    resolver: CredentialResolver | None = None
    base_url: str | None = None
    pages_sock: socket.socket | None = None
    secrets: frozenset[str] = field(default_factory=frozenset)
    keys: tuple[bytes, ...] = ()  # the encryption keys, compared decoded (base64 or not)

    def environment(self, environ: Mapping[str, str]) -> dict[str, str]:
        """`environ` less every variable holding one of the gateway's credential secrets."""
        return {k: v for k, v in environ.items() if not self._secret(k, v)}

    def _secret(self, name: str, value: str) -> bool:
        if name == PAGES_KEY or value in self.secrets:
            return True
        if self.keys:
            from ..credentials.sealing import key_from_text

            try:
                return key_from_text(value) in self.keys
            except ValueError:
                return False
        return False


def wire(args: argparse.Namespace, config: GatewayConfig, source: PolicySource,
         listen: tuple[str, int] | None, metrics: Metrics) -> Wired:
    """The resolver of the servers with `credentials`; InputError for what cannot be served."""
    from ..credentials.settings import OAuthSettings, TokenExchangeSettings

    servers = {s.key: s.credentials for s in config.servers if s.credentials is not None}
    _check_options(args, servers, listen, source)
    if not servers:  # (nothing more is imported then: httpx2, cryptography)
        return Wired()
    from ..credentials import build_resolver

    for key, settings in servers.items():
        if listen is None and isinstance(settings, TokenExchangeSettings):
            raise InputError(f"{config.source}: servers.{key}.credentials.kind: \"token-exchange\" "
                             "exchanges each caller's bearer token, and a stdio gateway's caller "
                             "has none: serve it with --listen http://HOST:PORT")
    oauth = [k for k, s in servers.items() if isinstance(s, OAuthSettings)]
    if oauth and source.policy.auth.sign_in is None:  # a link alone would let its holder connect
        raise InputError(f"{config.source}: servers.{oauth[0]}.credentials: kind = \"oauth\" requires "
                         "[auth.sign_in] in the policy: a connect link is completed only by the "
                         "person it was made for, signed in")
    base_url = args.public_url or own_url(args, listen)
    if oauth and base_url is None:
        raise InputError(f"{config.source}: servers.{oauth[0]}.credentials: kind = \"oauth\" needs "
                         "the gateway's pages (connect links, /oauth/callback): give --pages-listen "
                         "http://127.0.0.1:PORT (or --public-url)")
    redis = None
    if any(isinstance(s, OAuthSettings) and s.store == "redis" for s in servers.values()) \
            and source.policy.state.redis is not None:
        from ..resolvers.state_redis import RedisStateSource

        redis = RedisStateSource.from_policy(source.policy.state.redis)
    try:
        resolver = build_resolver(servers, base_url=base_url, redis=redis)
    except RequirementError as exc:
        raise InputError(f"{config.source}: {exc.messages[0]}") from None
    metrics.credentials_declared({k: s.kind for k, s in servers.items()})
    resolver.observe = metrics.observe_credential  # (server, Obtained): every attempt, counted
    if listen is not None and source.policy.auth.issuer is None:
        log.warning("servers %s have per-caller credentials but the policy's [auth] verifies no "
                    "token: every call to them is refused until it does", ", ".join(servers))
    secrets = frozenset(s.client.client_secret for s in servers.values()
                        if isinstance(s, OAuthSettings | TokenExchangeSettings)
                        and s.client is not None and s.client.client_secret)
    keys = tuple(s.encryption_key for s in servers.values() if isinstance(s, OAuthSettings))
    return Wired(resolver, base_url, None, secrets, keys)  # the pages' socket: _pages.py


def listing_accounts(wired: Wired, gateway: Gateway) -> None:
    """The gateway's own session with each `oauth` server that gave it no credential of its own
    (no `Authorization` among its `headers`) goes as a connected account (credentials/listing.py:
    such a server lists its tools only to one), and is opened again when that account changes."""
    flow = wired.resolver.connect if wired.resolver is not None else None
    if flow is None:
        return
    from ..credentials.listing import ListingAccount
    from ..gateway.upstream.targets import HttpTarget

    for member in gateway.fleet:
        accounts = flow.accounts.get(member.key)
        target = member.upstream.target
        if accounts is None or not isinstance(target, HttpTarget) or \
                any(name.lower() == "authorization" for name in target.headers):
            continue
        listing = ListingAccount(target.headers)
        accounts.lend(listing)
        member.upstream.target = HttpTarget(target.url, listing, listing.refused)
        listing.on_change = _reopening(member.upstream)


def _reopening(upstream: Upstream) -> Callable[[], None]:
    def reopen() -> None:  # the session ends; its supervisor opens the next with the new headers
        current = upstream.current
        if current is not None:
            current.lost.set()
    return reopen


def _check_options(args: argparse.Namespace, servers: Mapping[str, Any],
                   listen: tuple[str, int] | None, source: PolicySource) -> None:
    if args.pages_listen is not None:
        if listen is not None:
            raise InputError("--pages-listen is for --listen stdio: over HTTP the pages are served "
                             "on the listener")
        http_address(args.pages_listen, "--pages-listen")
        from ..approvals import needing_pages

        if not any(getattr(s, "kind", None) == "oauth" for s in servers.values()) and \
                needing_pages(source) is None:
            raise InputError("--pages-listen: no server has kind = \"oauth\" credentials and no "
                             "approval is decided by approvers: the gateway has no pages to serve")
    if args.public_url is not None:
        from ..gateway.config_values import http_url

        try:
            http_url(args.public_url.rstrip("/") or None)
        except ValueError as exc:
            raise InputError(f"--public-url: {exc}") from None


def own_url(args: argparse.Namespace, listen: tuple[str, int] | None) -> str | None:
    where = listen if listen is not None else (
        http_address(args.pages_listen, "--pages-listen") if args.pages_listen is not None else None)
    if where is None:
        return None
    host, port = where
    return f"http://{f'[{host}]' if ':' in host else host}:{port}"


def pages(wired: Wired, authenticator: Authenticator, sign_in: SignIn | None) -> Pages | None:
    """The pages of the `oauth` servers (None without any): connect links signing people in with
    `sign_in` (`[auth.sign_in]`, which `wire` required), `/connections` for bearer tokens
    `authenticator` verifies and for people signed in."""
    flow = wired.resolver.connect if wired.resolver is not None else None
    if flow is None:  # (nothing below is imported then: starlette, httpx2, cryptography)
        return None
    assert sign_in is not None  # wire() refused kind = "oauth" without [auth.sign_in]
    from ..gateway.downstream.app import Pages
    from ..pages.credentials import PATHS, CredentialPages

    return Pages(PATHS, CredentialPages(flow, authenticator, sign_in).app())
