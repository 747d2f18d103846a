"""What can go wrong on a server's side of the gateway, mapped once (as agentgateway's UpstreamError):
the server is unavailable, it broke the protocol, it closed the connection, it did not answer in
time. None of them is ever "your request is invalid": a caller is never blamed for a server.
"""

from __future__ import annotations

from ..outcomes import Outcome
from .jsonrpc import CONNECTION_CLOSED, INTERNAL_ERROR, REQUEST_TIMEOUT, RpcError


class UpstreamError(Exception):
    """A server failed one exchange. The text is for the gateway's log; `what` is what a caller is
    told after the server's key (`server KEY is unavailable`), and `code` its JSON-RPC code."""

    code = INTERNAL_ERROR
    what = "failed"

    def rpc(self, server: str) -> RpcError:
        """The error a caller sees: the server's key and what happened, never the details."""
        return RpcError(self.code, f"server {server} {self.what}")


class UpstreamUnavailable(UpstreamError):
    """No session with the server (starting, restarting), or it cannot be reached at all."""

    what = "is unavailable"


class UpstreamProtocolError(UpstreamError):
    """The server's bytes broke HTTP/1.1, SSE or JSON-RPC; its connection is closed, never reused."""

    what = "sent a malformed response"


class UpstreamTooLarge(UpstreamProtocolError):
    """The server passed a bound (a body, an SSE event or a line): its stream is closed."""

    what = "sent more than the gateway accepts"


class UpstreamRefused(UpstreamError):
    """The server answered an HTTP error status, and no JSON-RPC answer."""

    def __init__(self, status: int) -> None:
        super().__init__(f"the server answered HTTP {status}")
        self.status = status
        self.what = f"answered HTTP {status}"


class UpstreamChallenged(UpstreamRefused):
    """The server answered 401 or 403 with `WWW-Authenticate`: it refused the credential the
    request carried, and ran nothing (SPEC §14: a caller's credential is renewed once).
    `challenge`: that header, for the renewal to read (SPEC §17: a step-up's scope)."""

    def __init__(self, status: int, challenge: str | None = None) -> None:
        super().__init__(status)
        self.challenge = challenge


class UpstreamClosed(UpstreamError):
    """The connection ended before the server's answer came (the request may have run)."""

    code = CONNECTION_CLOSED
    what = "closed the connection"


class UpstreamSessionGone(UpstreamClosed):
    """The server answered 404 for the session the request named: it ended that session (expired,
    restarted) and ran nothing."""


class UpstreamTimeout(UpstreamError):
    """The server did not accept or answer within the time given."""

    code = REQUEST_TIMEOUT
    what = "timed out"


class CredentialRefused(Exception):
    """A caller's request to a server with credentials did not go: they have no credential for
    it, or the server refused theirs and renewing it did not give one it accepts. Nothing ran;
    the request ends as this unmet `credential:KEY` outcome (a call: `Guard.overrule`; any
    other request: the AUTHORIZATION_DENIED refusal, `credentialed.py`)."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.reason)
        self.outcome = outcome
