"""MCP integrations: thin adapters between the MCP SDKs and `Guard` / `Knowledge`.

`mcp_sdk` (extra `mcp`): MCPServer and lowlevel Server. `fastmcp` (extra `fastmcp`): fastmcp
middleware. `client_mcp`: the filtering client. Nothing is imported here, so the SDKs stay optional.
"""
