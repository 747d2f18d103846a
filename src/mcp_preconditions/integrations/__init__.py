"""MCP integrations: thin adapters between the MCP SDKs and `Guard` / `Knowledge`, one public module
per framework, each with its own `__all__`.

`mcp_sdk` (extra `mcp`): MCPServer and lowlevel Server. `fastmcp` (extra `fastmcp`): fastmcp
middleware. `client_mcp`: the filtering client. `step_up`: the HTTP 403 step-up challenge.
`openai_agents`, `pydantic_ai`: agent frameworks. Nothing is imported here, so the SDKs stay
optional; the modules whose names start with `_` are theirs, not public.
"""

__all__ = ["client_mcp", "fastmcp", "mcp_sdk", "openai_agents", "pydantic_ai", "step_up"]
