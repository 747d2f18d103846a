"""What a client does with a denied call, written once for every client adapter (the MCP client,
pydantic-ai, the OpenAI Agents SDK): learn its unmet requirements (knowledge.py's rules), read its
SEP-2643 envelope, keep the envelope's context ID to echo on a retry, and hand the application one
typed `DeniedCall`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .envelope import AuthorizationDenial, ContextIds
from .knowledge import Knowledge, denial_problem

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DeniedCall:
    """A call the server refused, as the application sees it: the tool and arguments it called,
    the requirements the denial names (`unmet`, `withheld` more it does not), and the envelope
    (None when the server sent none, or a malformed one): whether anything can be done, and how."""

    tool: str
    arguments: Mapping[str, Any]
    unmet: tuple[str, ...]
    withheld: int
    envelope: AuthorizationDenial | None

    @property
    def context_id(self) -> str | None:
        return self.envelope.context_id if self.envelope is not None else None


OnDenial = Callable[[DeniedCall], None]


class Denials:
    """One client's handling of denials: `knowledge` learns, `on_denial` (optional) hears each
    denied call, `context_ids` echoes each envelope's ID once when the same call is retried."""

    def __init__(self, knowledge: Knowledge, on_denial: OnDenial | None = None,
                 context_ids: ContextIds | None = None) -> None:
        self.knowledge = knowledge
        self.on_denial = on_denial
        self.context_ids = context_ids if context_ids is not None else ContextIds()

    def request_meta(self, tool: str, arguments: Mapping[str, Any] | None,
                     meta: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        """The `_meta` to send with a call: `meta`, plus the context ID to echo when this very call
        was denied with an envelope before."""
        return self.context_ids.echo(tool, arguments, meta)

    def result(self, tool: str, arguments: Mapping[str, Any] | None, payload: Any,
               meta: Any) -> DeniedCall | None:
        """After a call: `payload` is its denial (`structuredContent`, or the `_meta` copy for a tool
        with an outputSchema) or None for a call that was not denied; `meta` the result's `_meta`."""
        if payload is None:
            self.context_ids.remember(tool, arguments, None)
            return None
        self.knowledge.learn_denial(payload, meta=meta if isinstance(meta, Mapping) else None)
        return self._denied(tool, arguments, payload, AuthorizationDenial.from_meta(meta))

    def error(self, tool: str, arguments: Mapping[str, Any] | None, data: Any) -> DeniedCall | None:
        """After a JSON-RPC denial (`[guard] denial = "jsonrpc"`): its `data`, whose `_meta` holds
        the lists not to learn and the envelope. `arguments` None: the call's arguments are not
        known here (no context ID is kept to echo)."""
        self.knowledge.learn_denial(data)
        inner = data.get("_meta") if isinstance(data, Mapping) else None
        return self._denied(tool, arguments, data, AuthorizationDenial.from_meta(inner),
                            remember=arguments is not None)

    def _denied(self, tool: str, arguments: Mapping[str, Any] | None, payload: Any,
                envelope: AuthorizationDenial | None, remember: bool = True) -> DeniedCall | None:
        if remember:
            self.context_ids.remember(tool, arguments, envelope)
        if denial_problem(payload) is not None:
            return None  # learn_denial warned already
        withheld = payload.get("withheld")
        denied = DeniedCall(tool, dict(arguments or {}), tuple(payload["unmet"]),
                            withheld if type(withheld) is int and withheld >= 0 else 0, envelope)
        if self.on_denial is not None:
            try:
                self.on_denial(denied)
            except Exception:  # the application's callback never breaks a call
                log.exception("on_denial callback failed for tool %r", tool)
        return denied
