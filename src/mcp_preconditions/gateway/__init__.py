"""The gateway (SPEC §10, §12): the guard in front of MCP servers that were not written against this
library, each reached over stdio (a command the gateway supervises) or streamable HTTP.

    gateway = Gateway(guard, [ServerSpec("fs", "fs__", command="npx", args=("-y", "...")),
                              ServerSpec("crm", "crm__", url="https://crm.example.com/mcp")],
                      credentials)

The pipeline, one stage per file: `listener` (stdio in `stdio`; HTTP: `http`, framed by `streamable`
and `sse`, sessions in `http_sessions`) -> `dispatch` (the protocol around the pipeline) -> `gateway`
-> `decide` (the guard on tools) -> `route` (which server) -> `forward` -> `server` (one supervised
server: `peer` over `server_stdio` or `server_http`). `session` knows the clients (`clients`) and
routes what servers send back; `rounds` and `listen` carry input rounds and listen streams between
protocol versions, `bridge` the envelope fields. `fleet` keeps the servers and their listings
(`catalog`); `config` reads the deployment file. Messages stay the dicts they arrived as (`jsonrpc`).
"""

from .config import GatewayConfig, ServerSpec, load_config, load_servers
from .gateway import Gateway
from .server import HttpTarget, StdioTarget, Upstream, UpstreamUnavailable

__all__ = ["Gateway", "GatewayConfig", "HttpTarget", "ServerSpec", "StdioTarget", "Upstream",
           "UpstreamUnavailable", "load_config", "load_servers"]
