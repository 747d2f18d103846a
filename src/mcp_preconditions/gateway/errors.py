"""The gateway's exceptions, one module (the core's are `mcp_preconditions.errors`; every one derives
from `PreconditionsError`). What can go wrong on a server's side is mapped once (as agentgateway's
UpstreamError): the server is unavailable, it broke the protocol, it closed the connection, it did
not answer in time; none of them is ever "your request is invalid": a caller is never blamed for a
server. `RpcError` is what a caller is answered; the rest stay inside the gateway.

"The server failed" and "the server answered an error" are told apart by type, never by code: a
peer's JSON-RPC error answer is typed where it is read (`answered`: upstream/peer.py for a server,
downstream/clients.py for a client the gateway asked), the only place a code is compared for it.
`PeerFailed` is a failure: an answer of -32603 (or the SDK's -32000/-32001), or an exchange that
ended without an answer (an `UpstreamError` as a caller sees it, a client gone or silent, an
invalid result); `PeerAnswered` is the peer's own answer. Above that, a stage catches the type: a
tool call that ends in `PeerFailed` is a tool error (decide.py), one that ends in `PeerAnswered`
gets that answer as is. The codes the gateway answers of its own (refusals, -32602, ...) stay codes.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types

from ..errors import PreconditionsError
from ..outcomes import Outcome


class RpcError(PreconditionsError):
    """A JSON-RPC error: raised by a stage, answered to the caller as `{"code", "message", "data"}`."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def wire(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error

    @classmethod
    def of(cls, error: Any) -> RpcError:
        """From a wire error object (a malformed one is an internal error)."""
        if isinstance(error, dict) and isinstance(error.get("code"), int) \
                and isinstance(error.get("message"), str):
            return cls(error["code"], error["message"], error.get("data"))
        return cls(types.INTERNAL_ERROR, "malformed error")


class PeerAnswered(RpcError):
    """A server's (or an asked client's) own JSON-RPC error answer: passed on to the caller as is."""


class PeerFailed(RpcError):
    """A request failed instead of being answered: a tool call that ends so is a tool error."""


# The codes of an error answer that say the peer failed rather than answered: its own -32603, and
# the MCP SDK's -32000 (connection closed) and -32001 (request timed out) it lost a request with.
_FAILURE_CODES = frozenset({types.INTERNAL_ERROR, types.CONNECTION_CLOSED, types.REQUEST_TIMEOUT})


def answered(error: Any) -> PeerAnswered | PeerFailed:
    """A peer's wire error object as its type (a malformed one is a failure): the one place the
    gateway reads a code to tell a failure from an answer."""
    read = RpcError.of(error)
    kind = PeerFailed if read.code in _FAILURE_CODES else PeerAnswered
    return kind(read.code, read.message, read.data)


class UpstreamError(PreconditionsError):
    """A server failed one exchange (the text is for the log; `what` and `code` for the caller)."""

    code = types.INTERNAL_ERROR
    what = "failed"  # what a caller is told after the server's key (`server KEY is unavailable`)

    def rpc(self, server: str) -> PeerFailed:
        """The error a caller sees: the server's key and what happened, never the details."""
        return PeerFailed(self.code, f"server {server} {self.what}")


class UpstreamUnavailable(UpstreamError):
    """No session with the server (starting, restarting), or it cannot be reached at all."""

    what = "is unavailable"


class UpstreamProtocolError(UpstreamError):
    """The server's bytes broke HTTP/1.1, SSE or JSON-RPC; its connection is closed, never reused."""

    what = "sent a malformed response"


class ModernPeer(UpstreamProtocolError):
    """The server answered `initialize` with 2026-07-28: it is to be discovered, not initialized."""


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
    """The server refused the request's credential (401/403, `WWW-Authenticate`) and ran nothing."""

    def __init__(self, status: int, challenge: str | None = None) -> None:
        super().__init__(status)
        self.challenge = challenge  # that header, for the renewal to read (SPEC §17: a step-up)


class UpstreamClosed(UpstreamError):
    """The connection ended before the server's answer came (the request may have run)."""

    code = types.CONNECTION_CLOSED
    what = "closed the connection"


class UpstreamSessionGone(UpstreamClosed):
    """The server answered 404 for the session the request named: it ended it and ran nothing."""


class UpstreamTimeout(UpstreamError):
    """The server did not accept or answer within the time given."""

    code = types.REQUEST_TIMEOUT
    what = "timed out"


class CredentialRefused(PreconditionsError):
    """A caller's request did not go: no credential, or the server refused it, renewed once."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.reason)
        # The unmet `credential:KEY`; nothing ran (a call: `Guard.overrule`; any other request:
        # the AUTHORIZATION_DENIED refusal, `credentialed.py`).
        self.outcome = outcome


class OverCap(PreconditionsError):
    """A session or stream refused because a bound is reached: the HTTP status and the message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class HttpRefused(PreconditionsError):
    """An HTTP request the listener cannot serve: answer these bytes and close the connection."""

    def __init__(self, answer: bytes) -> None:
        super().__init__("refused")
        self.answer = answer
