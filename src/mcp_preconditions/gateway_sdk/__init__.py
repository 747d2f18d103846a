"""FROZEN COPY of the SDK-based gateway (issue 25): the old path the differential test holds the new one
to, removed once the new one has taken over.

The gateway (SPEC §10, §12): the guard in front of MCP servers that were not written against this
library, each reached over stdio (a command the gateway supervises) or streamable HTTP.

    gateway = Gateway(guard, [ServerSpec("fs", "fs__", command="npx", args=("-y", "...")),
                              ServerSpec("crm", "crm__", url="https://crm.example.com/mcp")],
                      credentials)

The pipeline, one stage per file: `listener` (stdio, HTTP) -> `session` (the clients) -> `decide`
(the guard on tools) -> `route` (which server) -> `forward` -> `server` (one supervised server).
`fleet` keeps the servers and their listings (`catalog`); `config` reads the deployment file.
"""

from .config import GatewayConfig, ServerSpec, load_config, load_servers
from .gateway import Gateway
from .server import HttpTarget, StdioTarget, Upstream, UpstreamUnavailable

__all__ = ["Gateway", "GatewayConfig", "HttpTarget", "ServerSpec", "StdioTarget", "Upstream",
           "UpstreamUnavailable", "load_config", "load_servers"]
