"""The servers behind the gateway: one supervised session each (`session`), its JSON-RPC peer
(`peer`) over a stdio process (`stdio`) or streamable HTTP (`http`, on the HTTP/1.1 `client`)."""
