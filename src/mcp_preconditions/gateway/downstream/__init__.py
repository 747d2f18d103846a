"""Where callers reach the gateway: the `listener` (stdio in `stdio`; HTTP: the ASGI `app`, framed
by `streamable` and `sse`, with `sessions`), the `clients` it serves and what servers send them back
(`callers`, `listen`)."""
