"""The servers behind the gateway, the bottom of its request path (`targets`): one supervised session
each (`session`), made by `connected` (the handshake), its JSON-RPC peer (`peer`) over a stdio
process (`stdio`) or streamable HTTP (`http`: the HTTP/1.1 `client` on llhttp, its bounded
`response`s and the `sse` decoder). Their failures are `..errors`'."""
