"""Where callers reach the gateway: the `listener` (stdio in `stdio`; HTTP: the ASGI `app`, framed
by `streamable` and `sse`, with `sessions`), each client's `connection` (the core both listeners
share), the `clients` it serves and what servers send them back (`callers`, `listen`)."""
