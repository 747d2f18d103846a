"""How the gateway reaches one server: a stdio command it starts (`StdioTarget`) or a streamable-HTTP
URL (`HttpTarget`), each with a label for the gateway's own log (never shown to a caller).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class StdioTarget:
    """A command to run; `env` is the whole environment it gets (secrets already removed)."""

    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return " ".join((self.command, *self.args))


@dataclass(frozen=True)
class HttpTarget:
    """A streamable-HTTP endpoint; `headers` carry the upstream's own credentials. `refused` is
    told the server's challenge when it refuses them (401/403 with `WWW-Authenticate`: an account
    lent to the gateway's own session, credentials/listing.py, is renewed)."""

    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    refused: Callable[[str], None] | None = None

    @property
    def label(self) -> str:
        return self.url


Target = StdioTarget | HttpTarget
