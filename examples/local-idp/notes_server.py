"""An MCP server that verifies its own tokens, for docs/credentials-on-your-machine.md: the MCP SDK's
`MCPServer` over streamable HTTP with the SDK's own auth. It accepts only a JWT that the local IdP
(examples/local-idp/idp.mjs) signed for this server's own URL (its `aud`), so a token meant for
the gateway or for another server is refused (401): through the gateway, each caller reaches it with
a token of its own, issued for it.

    python examples/local-idp/notes_server.py PORT       serves http://127.0.0.1:PORT/mcp

Tools: `whoami` (who the token says the caller is) and `publish(text)`. Each call prints one line:
who called, and which client got the token.
"""

from __future__ import annotations

import argparse
from typing import Any

import anyio
import jwt
import uvicorn
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer

IDP = "http://127.0.0.1:9400"


class OwnAudience:
    """The SDK's TokenVerifier protocol: a JWT signed by the IdP, for `audience`, not expired."""

    def __init__(self, issuer: str, audience: str) -> None:
        self.issuer, self.audience = issuer, audience
        self.keys = jwt.PyJWKClient(f"{issuer}/jwks", cache_keys=True)

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            key = await anyio.to_thread.run_sync(self.keys.get_signing_key_from_jwt, token)
            claims: dict[str, Any] = jwt.decode(
                token, key.key, algorithms=["RS256"], audience=self.audience, issuer=self.issuer,
                options={"require": ["exp", "sub", "aud"]})
        except jwt.PyJWTError:
            return None  # the SDK answers 401 with WWW-Authenticate
        return AccessToken(token=token, client_id=str(claims.get("client_id", "")),
                           scopes=str(claims.get("scope", "")).split(), expires_at=int(claims["exp"]),
                           subject=str(claims["sub"]))


def caller(tool: str) -> str:
    """The verified subject of the call's token, and a line saying who called."""
    token = get_access_token()
    assert token is not None  # the SDK's middleware let no call in without one
    print(f"{tool}: {token.subject}, with a token the IdP gave client {token.client_id!r}", flush=True)
    return token.subject or ""


def main() -> None:
    parser = argparse.ArgumentParser(description="An MCP server that verifies its own tokens.")
    parser.add_argument("port", type=int)
    parser.add_argument("--issuer", default=IDP, help=f"the IdP whose tokens it accepts ({IDP})")
    args = parser.parse_args()
    url = f"http://127.0.0.1:{args.port}/mcp"  # also the audience its tokens must name
    server = MCPServer(f"notes at {url}", token_verifier=OwnAudience(args.issuer, url),
                       auth=AuthSettings(issuer_url=args.issuer, resource_server_url=url,
                                         validate_token_resource=False),  # OwnAudience checks `aud`
                       log_level="WARNING")

    @server.tool(structured_output=False)  # plain text results
    def whoami() -> str:
        """The caller's subject, as this server verified it."""
        return caller("whoami")

    @server.tool(structured_output=False)
    def publish(text: str) -> str:
        """Publishes a note under the caller's name."""
        return f"published for {caller('publish')}: {text}"

    print(f"serving {url}, for tokens of {args.issuer} whose aud is {url}", flush=True)
    uvicorn.run(server.streamable_http_app(host="127.0.0.1"), host="127.0.0.1", port=args.port,
                log_level="warning")


if __name__ == "__main__":
    main()
