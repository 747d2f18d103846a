"""The servers behind the gateway (`targets`): one supervised session each (`session`), its JSON-RPC
peer (`peer`) over a stdio process (`stdio`) or streamable HTTP (`http`: the HTTP/1.1 `client` on
llhttp, its bounded `response`s and the `sse` decoder). Their failures are `..errors`'."""
