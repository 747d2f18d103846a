"""Call one tool through the gateway as the holder of a token, for docs/credentials-on-your-machine.md:
the MCP SDK's client over streamable HTTP, with the token as its bearer.

    python examples/local-idp/call.py TOKEN TOOL ['{"ARGUMENT": "VALUE"}']

Prints the tool's text, or, for a denial, the requirements not met and what to open to act on them
(the SEP-2643 envelope's `url` hints: a connect page, an approval request). The client declares
elicitation, URL mode included, so the gateway gives it those links; it declines any question.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

import httpx2
import mcp_types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

GATEWAY = "http://127.0.0.1:9401/mcp"
AUTHORIZATION = "io.modelcontextprotocol/authorization"  # the denial's envelope, in the result's _meta


async def decline(context: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
    """Any question the gateway asks (a `self` approval): no."""
    return mcp_types.ElicitResult(action="decline")


async def call(url: str, token: str, tool: str, arguments: dict[str, Any]) -> list[str]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    async with Client(streamable_http_client(url, http_client=http), elicitation_callback=decline) as client:
        result = await client.call_tool(tool, arguments)
    if not result.is_error:
        return [block.text for block in result.content if isinstance(block, mcp_types.TextContent)]
    denial = result.structured_content or {}
    if not denial.get("unmet"):  # not a requirement unmet: the tool's own error, an unknown tool
        return ["error: " + " ".join(b.text for b in result.content if isinstance(b, mcp_types.TextContent))]
    envelope = (result.meta or {}).get(AUTHORIZATION, {})
    hints = envelope.get("remediationHints", [])
    lines = ["denied: " + ", ".join(denial["unmet"]), f"remediation: {envelope.get('remediation')}"]
    return lines + [f"open: {hint['url']}" for hint in hints if hint.get("type") == "url"]


def main() -> None:
    parser = argparse.ArgumentParser(description="Call one tool through the gateway.")
    parser.add_argument("token", help="the caller's access token (examples/local-idp/get_token.py)")
    parser.add_argument("tool")
    parser.add_argument("arguments", nargs="?", default="{}", help="a JSON object")
    parser.add_argument("--url", default=GATEWAY, help=f"the gateway's MCP endpoint ({GATEWAY})")
    args = parser.parse_args()
    try:
        arguments = json.loads(args.arguments)
    except ValueError as exc:
        sys.exit(f"the arguments are not a JSON object: {exc}")
    try:
        lines = asyncio.run(call(args.url, args.token, args.tool, arguments))
    except Exception as exc:  # the SDK's task groups wrap what went wrong: say the first
        while isinstance(exc, ExceptionGroup):
            exc = exc.exceptions[0]
        hint = " (is the gateway running?)" if isinstance(exc, httpx2.ConnectError) else ""
        sys.exit(f"the call to {args.url} failed{hint}: {type(exc).__name__}: {exc}")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
