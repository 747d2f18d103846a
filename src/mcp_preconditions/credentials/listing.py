"""The gateway's own session with an `oauth` server that gave it no credential of its own (no
`Authorization` among its `headers`, SPEC §17): such a server answers even its handshake or its
`tools/list` only to an account. That session (its listing of tools, pings) then goes as one
account connected on this gateway: the first one that still is. Every connection made, opened or
refreshed here offers itself; the one held gives its place up when it ends. The session's headers
are the static ones plus that account's; whenever they change, `on_change` (the gateway opens its
session again with them). When the server refuses them (`refused`), the account is renewed once,
as a caller's credential is (accounts.py); refused again, it is not held until its token changes.

Callers' own requests never go this way: each goes as its caller (SPEC §14). What this session
lists is the catalog every caller is shown, as with a static service credential.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from .caller import Caller
from .credential import Credential


class ListingAccount(Mapping[str, str]):
    """The headers of the gateway's own session with one server: `static`, plus the held
    account's credential. Its repr shows neither."""

    def __init__(self, static: Mapping[str, str]) -> None:
        self._static = dict(static)
        self._headers = dict(static)
        self.holder: Caller | None = None
        self.on_change: Callable[[], None] | None = None
        # Told (holder, the server's challenge) when the server refuses the held account.
        self.on_refused: Callable[[Caller, str], None] | None = None
        self._given_up: tuple[Caller, dict[str, str]] | None = None

    def offer(self, caller: Caller, credential: Credential) -> None:
        """`caller`'s connection is in use here with `credential`: held if no other is (and it is
        not the very credential given up on)."""
        if self.holder is not None and self.holder != caller:
            return
        headers = {**self._static, **credential.headers()}
        if (self.holder == caller and headers == self._headers) or \
                self._given_up == (caller, headers):
            return
        self.holder, self._headers, self._given_up = caller, headers, None
        self._changed()

    def refused(self, challenge: str) -> None:
        """The server refused the session's headers (401/403 with `challenge`)."""
        if self.holder is not None and self.on_refused is not None:
            self.on_refused(self.holder, challenge)

    def give_up(self, caller: Caller) -> None:
        """The server refused `caller`'s account even renewed: not held again until it changes."""
        if self.holder == caller:
            self._given_up = (caller, self._headers)
            self.release(caller)

    def release(self, caller: Caller) -> None:
        """`caller`'s connection ended: if it was held, the session has none until another."""
        if self.holder == caller:
            self.holder, self._headers = None, dict(self._static)
            self._changed()

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def __getitem__(self, name: str) -> str:
        return self._headers[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._headers)

    def __len__(self) -> int:
        return len(self._headers)

    def __repr__(self) -> str:
        return f"ListingAccount({sorted(self._headers)})"
