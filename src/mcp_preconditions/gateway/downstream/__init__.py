"""Where callers reach the gateway, the top of its request path: the `listener` (stdio in `stdio`;
HTTP: `http_server` with `admission`, each connection parsed by `http11` into `exchange`s, the ASGI
`app`, framed by `streamable`, `wire` and `sse`, with `sessions`) and each client's `connection`
(the core both listeners share). They hand requests to `..dispatch`; nothing below imports them."""
