"""The gateway (SPEC §10, §12): the guard in front of MCP servers that were not written against this
library, each reached over stdio (a command the gateway supervises) or streamable HTTP.

    gateway = Gateway(guard, [ServerSpec("fs", "fs__", command="npx", args=("-y", "...")),
                              ServerSpec("crm", "crm__", url="https://crm.example.com/mcp")],
                      credentials)

The path of one `tools/call` over HTTP, and back:

    downstream/listener  the gateway's own HTTP/1.1 on llhttp; slow and surplus connections bounded
    downstream/app       the bearer token checked (401), /healthz /readyz /metrics
    downstream/streamable  POST framed, the session found (`sessions`), a 2026-07-28 envelope
                         and its routing headers checked (`inbound`)
    downstream/connection  the request tracked on its client's connection (cancellation)
    dispatch             its version's schema; initialize, ping, server/discover answered here
    gateway -> decide    the guard's Decision (a server with credentials: the caller's, as
                         `credential:KEY`): refused here, or on (`route`: which server)
    forward              progress mapped back, input rounds between versions; a server's
                         failure becomes one error naming it (`errors`)
    upstream/session     that server's supervised session -> `peer`: an id, a timeout, a
                         cancellation told to the server
    upstream/http        POSTed with its headers (`Mcp-Param-*` from `inbound`) on
    upstream/client      a kept connection; the response parsed strictly by llhttp, bounded
    upstream/sse         an SSE answer decoded (bounded) and handed back the moment it arrives
    bridge               the result shaped for the client's version; `downstream/sse` writes it

Prompts, resources, completions, subscriptions and listings take `listings` in place of `decide`
(which server, by each server's last good listing) and, to a server with credentials,
`credentialed`: the caller's credential, or the refusal of `credential:KEY` (-32001) and nothing
sent; from `forward` on, the same path. On stdio, `downstream/stdio` takes the place of the first
three. What servers send unasked (their requests, notifications, `list_changed`) goes `peer` ->
`session` -> `downstream/callers` (the one client it can be for) and `fleet`, which re-lists a
server (`catalog`) one listing at a time, in the background. `config` reads the deployment file;
messages stay the dicts they arrived as (`jsonrpc`).
"""

from .config import GatewayConfig, ServerSpec, load_config, load_servers
from .errors import UpstreamUnavailable
from .gateway import Gateway
from .upstream.session import HttpTarget, StdioTarget, Upstream

__all__ = ["Gateway", "GatewayConfig", "HttpTarget", "ServerSpec", "StdioTarget", "Upstream",
           "UpstreamUnavailable", "load_config", "load_servers"]
