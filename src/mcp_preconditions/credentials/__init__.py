"""Each caller reaches a server as themselves (SPEC §14): per-caller upstream credentials, obtained
by token exchange (RFC 8693), from an account the caller connected (OAuth with PKCE), or from a
per-subject secrets file; the `credential:KEY` resolver that decides them; and the pages (connect
links, callbacks, a caller's connections, sign-in) a gateway mounts. No MCP SDK and no gateway
internals here: the gateway calls in. The pages (`credentials.pages`, starlette) are imported on
their own, by a gateway that serves them.
"""

from __future__ import annotations

from .accounts import ConnectedAccounts, Connection
from .build import build_resolver, sign_in_settings
from .cache import ExchangeCache
from .caller import Caller, caller_of
from .connect import ConnectFlow, Link
from .credential import Credential, Obtained
from .exchange import TokenExchange
from .per_subject import SubjectSecrets, load_secrets
from .resolver import CredentialResolver, CredentialSource, requirement_for
from .settings import (
    Client,
    CredentialSettings,
    OAuthSettings,
    PerSubjectSettings,
    SignInSettings,
    TokenExchangeSettings,
)
from .signin import SignIn
from .stores import MemoryTickets, MemoryVault, Tickets, Vault

__all__ = [
    "Caller", "Client", "ConnectFlow", "ConnectedAccounts", "Connection", "Credential",
    "CredentialResolver", "CredentialSettings", "CredentialSource",
    "ExchangeCache", "Link", "MemoryTickets", "MemoryVault", "OAuthSettings", "Obtained",
    "PerSubjectSettings", "SignIn", "SignInSettings", "SubjectSecrets", "Tickets", "TokenExchange",
    "TokenExchangeSettings", "Vault", "build_resolver", "caller_of", "load_secrets",
    "requirement_for", "sign_in_settings",
]
