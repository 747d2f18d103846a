"""The gateway (SPEC §10): the guard in front of an MCP server that was not written against this
library, reached over stdio (a command the gateway supervises) or streamable HTTP.

    gateway = Gateway(guard, Upstream(StdioTarget("npx", ("-y", "some-server"))), credentials)
"""

from .server import Gateway
from .upstream import HttpTarget, StdioTarget, Upstream, UpstreamUnavailable

__all__ = ["Gateway", "HttpTarget", "StdioTarget", "Upstream", "UpstreamUnavailable"]
