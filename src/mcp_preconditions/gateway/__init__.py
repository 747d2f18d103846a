"""The gateway (SPEC §10, §12): the guard in front of MCP servers that were not written against this
library, each reached over stdio (a command the gateway supervises) or streamable HTTP.

    gateway = Gateway(guard, [ServerSpec("fs", "fs__", command="npx", args=("-y", "...")),
                              ServerSpec("crm", "crm__", url="https://crm.example.com/mcp")],
                      credentials)

The pipeline: `downstream/` is where callers arrive (`listener`; stdio in `stdio`; HTTP: the ASGI
`app`, framed by `streamable` and `sse`, sessions in `sessions`) -> `dispatch` (the protocol around
the pipeline) -> `gateway` -> `decide` (the guard on tools) -> `route` (which server) -> `forward`
-> `upstream/` (one supervised `session` per server: its `peer` over `stdio` or `http` on the
HTTP/1.1 `client`). `downstream/callers` knows the clients (`downstream/clients`) and routes what
servers send back; `rounds` and `downstream/listen` carry input rounds and listen streams between
protocol versions, `bridge` the envelope fields. `fleet` keeps the servers and their listings
(`catalog`); `config` reads the deployment file. Messages stay the dicts they arrived as (`jsonrpc`).
"""

from .config import GatewayConfig, ServerSpec, load_config, load_servers
from .errors import UpstreamUnavailable
from .gateway import Gateway
from .upstream.session import HttpTarget, StdioTarget, Upstream

__all__ = ["Gateway", "GatewayConfig", "HttpTarget", "ServerSpec", "StdioTarget", "Upstream",
           "UpstreamUnavailable", "load_config", "load_servers"]
