"""The gateway (SPEC §10, §12): the guard in front of MCP servers that were not written against this
library, each reached over stdio (a command the gateway supervises) or streamable HTTP.

    gateway = Gateway(guard, [ServerSpec("fs", "fs__", command="npx", args=("-y", "...")),
                              ServerSpec("crm", "crm__", url="https://crm.example.com/mcp")],
                      credentials)

The path of one `tools/call` over HTTP, and back, top to bottom (no module imports one above it):

    downstream/          what faces callers
      listener           the gateway's own HTTP/1.1 (`http_server`, `admission`: slow and surplus
                         connections bounded); `http11` parses on llhttp
      app                the bearer token checked (401), /healthz /readyz /metrics
      streamable         POST framed, the session found (`sessions`), a 2026-07-28 envelope and
                         its routing headers checked (`inbound`); the request tracked on its
                         client's connection (`clients.Connection`: cancellation)
      exchange           one request's ASGI receive and send: its headers and body read
                         (bounded), its answer framed for HTTP/1.1
    dispatch             its version's schema (`bridge`); initialize, ping, server/discover
                         answered here
    gateway -> decide    the guard's Decision through `calls` (a server with credentials: the
                         caller's, as `credential:KEY`): refused here, or on (`route`: which server)
    forward              progress mapped back, input rounds between versions (`rounds`); a
                         server's failure becomes one error naming it (`errors`)
    callers, clients     what servers send back to the gateway's clients; who those are (`Call`,
                         `Client`, and the requests a connection has running)
    fleet, catalog       the servers and their last good listings
    upstream/            what faces servers
      session            that server's supervised session (`connected`: its handshake) -> `peer`:
                         an id, a timeout, a cancellation told to the server
      http               POSTed with its headers (`Mcp-Param-*` from `inbound`) on
      client             a kept connection; the response parsed strictly by llhttp, bounded
      sse                an SSE answer decoded (bounded) and handed back the moment it arrives
    bridge               the result shaped for the client's version; `downstream/sse` writes it
    inbound, jsonrpc, bridge, errors    the wire rules, each version's schemas, and the messages
                                        both sides read

Prompts, resources, completions, subscriptions and listings take `listings` in place of `decide`
(which server, by each server's last good listing) and, to a server with credentials,
`credentialed`: the caller's credential, or the refusal of `credential:KEY` (-32001) and nothing
sent; from `forward` on, the same path. On stdio, `downstream/stdio` takes the place of the four
above `dispatch`. What servers send unasked (their requests, notifications, `list_changed`) goes `peer` ->
`session` -> `callers` (the one client it can be for) and `fleet`, which re-lists a server
(`catalog`) one listing at a time, in the background. At the side: `config` (with
`config_credentials`, `config_values`) reads the deployment file, `replicas` the policy's source.
"""

from .config import GatewayConfig, ServerSpec, load_config, load_servers
from .errors import UpstreamUnavailable
from .gateway import Gateway
from .upstream.session import HttpTarget, StdioTarget, Upstream

__all__ = ["Gateway", "GatewayConfig", "HttpTarget", "ServerSpec", "StdioTarget", "Upstream",
           "UpstreamUnavailable", "load_config", "load_servers"]
