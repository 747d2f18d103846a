"""From a gateway's configured credentials to the objects that serve them: one source per server,
the `credential` resolver over them, the connect flow and pages of the `oauth` ones, and the
sign-in of `[auth.sign_in]`. Token-exchange servers share one bounded cache; `oauth` servers share
one vault and one ticket store (Redis when any of them says `store = "redis"`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

import httpx2

from ..errors import PolicyError, RequirementError
from ..policy.load import PolicySource
from .accounts import ConnectedAccounts
from .connect import ConnectFlow
from .exchange import ExchangeCache, TokenExchange
from .per_subject import SubjectSecrets
from .resolver import CredentialResolver, CredentialSource
from .settings import (
    Client,
    CredentialSettings,
    OAuthSettings,
    PerSubjectSettings,
    SignInSettings,
    TokenExchangeSettings,
)
from .stores import MemoryTickets, MemoryVault, Tickets, Vault

if TYPE_CHECKING:  # the redis extra is imported only when a server keeps its tokens there
    from ..resolvers.state_redis import RedisStateSource

ENV_REF = re.compile(r"env:([A-Za-z_][A-Za-z0-9_]*)")


def build_resolver(servers: Mapping[str, CredentialSettings], *, base_url: str | None = None,
                   redis: RedisStateSource | None = None, tickets: Tickets | None = None,
                   transport: httpx2.AsyncBaseTransport | None = None) -> CredentialResolver:
    """The `credential` resolver of a gateway's servers with credentials (server key -> settings).

    `base_url`: where browsers reach the gateway's pages (required with an `oauth` server);
    `redis`: the policy's `[state.redis]` source (a RedisStateSource), required by `store = "redis"`.
    Raises RequirementError naming the server when one cannot be served."""
    cache = ExchangeCache()
    oauth = {key: s for key, s in servers.items() if isinstance(s, OAuthSettings)}
    vault, tickets = _stores(oauth, redis, tickets)
    sources: dict[str, CredentialSource] = {}
    accounts: dict[str, ConnectedAccounts] = {}
    for key, settings in servers.items():
        if isinstance(settings, TokenExchangeSettings):
            sources[key] = TokenExchange(key, settings, cache, transport=transport)
        elif isinstance(settings, PerSubjectSettings):
            sources[key] = SubjectSecrets(key, settings)
        else:
            assert vault is not None
            sources[key] = accounts[key] = ConnectedAccounts(key, settings, vault, transport=transport)
    flow = None
    if accounts:
        if base_url is None:
            raise RequirementError([f"servers.{next(iter(accounts))}.credentials: kind = \"oauth\" "
                                    "needs the address of the gateway's pages (its HTTP listener, "
                                    "or --pages-listen)"])
        assert tickets is not None
        flow = ConnectFlow(accounts, tickets, base_url)
    return CredentialResolver(sources, flow)


def _stores(oauth: Mapping[str, OAuthSettings], redis: RedisStateSource | None, tickets: Tickets | None
            ) -> tuple[Vault | None, Tickets | None]:
    if not oauth:
        return None, tickets
    shared = [key for key, s in oauth.items() if s.store == "redis"]
    if not shared:
        return MemoryVault(), tickets if tickets is not None else MemoryTickets()
    if redis is None:
        raise RequirementError([f"servers.{shared[0]}.credentials.store: store = \"redis\" needs "
                                "the policy's [state.redis] connection"])
    from .stores_redis import RedisTickets, RedisVault

    return RedisVault(redis), tickets if tickets is not None else RedisTickets(redis)


def sign_in_settings(source: PolicySource, environ: Mapping[str, str] | None = None
                     ) -> SignInSettings | None:
    """`[auth.sign_in]` with its `env:` references read; None without it. PolicyError naming the
    key path of a variable that is not set."""
    auth = source.policy.auth
    sign_in = auth.sign_in
    if sign_in is None:
        return None
    env = os.environ if environ is None else environ
    problems: list[str] = []
    values = {}
    for name in ("client_id", "client_secret"):
        ref = ENV_REF.fullmatch(getattr(sign_in, name))
        assert ref is not None  # the policy model accepts env: references only
        value = env.get(ref.group(1))
        if not value:
            problems.append(f"auth.sign_in.{name}: environment variable {ref.group(1)} is not set")
        values[name] = value or ""
    if problems:
        raise PolicyError(source.source, problems)
    assert auth.issuer is not None  # the policy model requires it with sign_in
    return SignInSettings(auth.issuer, Client(values["client_id"], values["client_secret"]),
                          tuple(auth.algorithms), auth.jwks_uri)
