"""Each caller reaches a server as themselves (SPEC §14): per-caller upstream credentials, obtained
by token exchange (RFC 8693), from an account the caller connected (OAuth with PKCE), or from a
per-subject secrets file; the `credential:KEY` resolver that decides them; the connect flow and
the sign-in that the people's pages (`mcp_preconditions.pages`) show. No MCP SDK and no gateway
internals here: the gateway calls in.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .accounts import ConnectedAccounts, Connection
    from .build import build_resolver, sign_in_settings
    from .caller import Caller, caller_of
    from .connect import ConnectFlow, Link
    from .credential import Credential, Obtained
    from .exchange import ExchangeCache, TokenExchange
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
    from .stage import CredentialStage, HeldCredential, held_for
    from .stores import MemoryTickets, MemoryVault, Tickets, Vault

# Each public name and the module it lives in, imported on first use: a gateway without
# credentials (and its config parser, which reads credentials.settings) never loads the HTTP
# client, JWT and AES-GCM stacks these need (~12 MB of RSS, bench_gateway's idle figure).
_WHERE: dict[str, str] = {
    **dict.fromkeys(("ConnectedAccounts", "Connection"), "accounts"),
    **dict.fromkeys(("build_resolver", "sign_in_settings"), "build"),
    **dict.fromkeys(("ExchangeCache",), "exchange"),
    **dict.fromkeys(("Caller", "caller_of"), "caller"),
    **dict.fromkeys(("ConnectFlow", "Link"), "connect"),
    **dict.fromkeys(("Credential", "Obtained"), "credential"),
    **dict.fromkeys(("TokenExchange",), "exchange"),
    **dict.fromkeys(("SubjectSecrets", "load_secrets"), "per_subject"),
    **dict.fromkeys(("CredentialResolver", "CredentialSource", "requirement_for"), "resolver"),
    **dict.fromkeys(("Client", "CredentialSettings", "OAuthSettings", "PerSubjectSettings",
                     "SignInSettings", "TokenExchangeSettings"), "settings"),
    **dict.fromkeys(("SignIn",), "signin"),
    **dict.fromkeys(("CredentialStage", "HeldCredential", "held_for"), "stage"),
    **dict.fromkeys(("MemoryTickets", "MemoryVault", "Tickets", "Vault"), "stores"),
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "Caller", "Client", "ConnectFlow", "ConnectedAccounts", "Connection", "Credential",
    "CredentialResolver", "CredentialSettings", "CredentialSource", "CredentialStage",
    "ExchangeCache", "HeldCredential", "Link", "MemoryTickets", "MemoryVault", "OAuthSettings", "Obtained",
    "PerSubjectSettings", "SignIn", "SignInSettings", "SubjectSecrets", "Tickets", "TokenExchange",
    "TokenExchangeSettings", "Vault", "build_resolver", "caller_of", "held_for",
    "load_secrets", "requirement_for", "sign_in_settings",
]
