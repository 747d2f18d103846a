"""Connecting an account (`kind = "oauth"`, SPEC §14): the connect link a denial offers, made for the
caller who was denied (single use, 600 s), and the authorization-code flow with PKCE (S256) it
starts: a `state` that is single use, expires in 600 s, and is bound to that caller and to the
browser that opened the link. The link is completed only by its caller, signed in (`[auth.sign_in]`
is required): a callback whose `state` is unknown, used, expired, another browser's or another
caller's is refused (400) and its code is never redeemed.

The flow is authorized where the server says (authorization.py: discovered or configured), as the
gateway's client there (registration.py), for the scopes and the resource grant.py chooses; what it
was started with travels sealed in its `state`, so the callback checks the answer's `iss` against
that very issuer (RFC 9207: required when its metadata says it always names itself) and redeems
the code there.

A caller has at most 16 links and flows pending (MAX_PENDING; the oldest is dropped), in memory or
Redis alike: no one caller fills the store for everyone. Tickets are kept under the sha256 of their
id (a store's keys never hold a usable link or state) and their secrets (the PKCE verifier, a
link's id, the grant) sealed with the server's key.
"""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlencode

from ..errors import CredentialBackendError, FlowError, NoCredentialError, SealError
from .accounts import ConnectedAccounts, Connection
from .caller import Caller
from .grant import Grant, scope_for
from .pkce import challenge, digest, random_id
from .registration import CALLBACK_PATH, Registration
from .stores import Tickets

log = logging.getLogger("mcp_preconditions.credentials")

LINK_SECONDS = 600.0
STATE_SECONDS = 600.0
REUSE_LINK_SECONDS = 300.0  # a denial reuses a caller's live link while it has this long left
MAX_PENDING = 16  # a caller's links and flows under way; past it the oldest is dropped
CONNECT_PATH = "/connect/"


@dataclass(frozen=True)
class Link:
    """A connect link: whose it is, for which server, until when (wall clock)."""

    caller: Caller
    server: str
    expires_at: float


class ConnectFlow:
    """Links and callbacks for every `oauth` server of a gateway (`accounts`, by server key);
    `base_url` is where a browser reaches the gateway's pages."""

    def __init__(self, accounts: Mapping[str, ConnectedAccounts], tickets: Tickets, base_url: str, *,
                 clock: Callable[[], float] = time.time) -> None:
        self.accounts = dict(accounts)
        self.tickets = tickets
        self.base_url = base_url.rstrip("/")
        self._clock = clock
        self.registrations = {key: Registration(key, a.settings, a.sealer, tickets, self.base_url,
                                                transport=a.transport, clock=clock)
                              for key, a in self.accounts.items()}

    @property
    def redirect_uri(self) -> str:
        return self.base_url + CALLBACK_PATH

    # -- links --------------------------------------------------------------------------------------
    async def link(self, caller: Caller, server: str) -> str:
        """The connect URL for a caller denied for want of an account on `server`: their live link
        while it has 300 s left, else a new one (which replaces it)."""
        accounts = self.accounts[server]
        index = "linkfor:" + digest(f"{caller.digest()}\0{server}")
        known = await self.tickets.get(index)
        if known is not None:
            try:
                found = json.loads(accounts.sealer.open(known, index.encode()))
                live = "link:" + digest(str(found["id"]))
                if found["expires_at"] - self._clock() >= REUSE_LINK_SECONDS and \
                        await self.tickets.get(live) is not None:  # (not dropped for newer ones)
                    return self.base_url + CONNECT_PATH + str(found["id"])
            except (SealError, ValueError, KeyError, TypeError):
                pass
            else:
                await self.tickets.delete(live)
        link_id, expires_at = random_id(), self._clock() + LINK_SECONDS
        record = {"iss": caller.issuer, "sub": caller.subject, "server": server, "expires_at": expires_at}
        await self.tickets.put_for(caller.digest(), "link:" + digest(link_id),
                                   json.dumps(record).encode(), LINK_SECONDS, MAX_PENDING)
        sealed = accounts.sealer.seal(json.dumps({"id": link_id, "expires_at": expires_at}).encode(),
                                      index.encode())
        await self.tickets.put(index, sealed, LINK_SECONDS)
        return self.base_url + CONNECT_PATH + link_id

    async def peek(self, link_id: str) -> Link:
        """The link, left unused (someone else opened it: it stays good); 410 when used or expired."""
        return self._link(await self.tickets.get("link:" + digest(link_id)))

    async def use(self, link_id: str) -> Link:
        """The link, used up: whoever asks second gets 410."""
        link = self._link(await self.tickets.take("link:" + digest(link_id)))
        await self.tickets.delete("linkfor:" + digest(f"{link.caller.digest()}\0{link.server}"))
        return link

    def _link(self, raw: bytes | None) -> Link:
        gone = FlowError(410, "This connect link was used already, or has expired. Call the tool "
                              "again for a new one.")
        if raw is None:
            raise gone
        try:
            data = json.loads(raw)
            link = Link(Caller(str(data["iss"]), str(data["sub"])), str(data["server"]),
                        float(data["expires_at"]))
        except (ValueError, KeyError, TypeError):
            raise gone from None
        if link.server not in self.accounts or link.expires_at <= self._clock():
            raise gone
        return link

    # -- the authorization-code flow ----------------------------------------------------------------
    async def authorize(self, link: Link, binding: str) -> str:
        """The authorization server's URL for this link's caller, with a new `state` bound to them
        and to the browser holding `binding`. CredentialBackendError when the server's
        authorization server cannot be found or used (the link stays good)."""
        accounts = self.accounts[link.server]
        grant, where = await self._grant(link)
        state, verifier = random_id(), random_id()
        key = "state:" + digest(state)
        secret = {"iss": link.caller.issuer, "sub": link.caller.subject, "verifier": verifier,
                  "binding": digest(binding), "grant": grant.to_json()}
        sealed = accounts.sealer.seal(json.dumps(secret).encode(), key.encode())
        record = {"server": link.server, "sealed": base64.b64encode(sealed).decode("ascii")}
        await self.tickets.put_for(link.caller.digest(), key, json.dumps(record).encode(),
                                   STATE_SECONDS, MAX_PENDING)
        query = {"response_type": "code", "client_id": grant.client.client_id,
                 "redirect_uri": self.redirect_uri, "state": state,
                 "code_challenge": challenge(verifier), "code_challenge_method": "S256"}
        if grant.scope:
            query["scope"] = " ".join(grant.scope)
        if grant.resource is not None:
            query["resource"] = grant.resource
        return where + ("&" if "?" in where else "?") + urlencode(query)

    async def _grant(self, link: Link) -> tuple[Grant, str]:
        """What this link's flow is authorized with, and where (the authorization endpoint)."""
        accounts = self.accounts[link.server]
        found = await accounts.discovery.found()
        client = await self.registrations[link.server].client(found)
        current = await accounts.load(link.caller)
        wanted = current.wanted if current is not None else ()
        server = found.server
        grant = Grant(server.issuer, server.iss_parameter, server.token_endpoint, client,
                      scope_for(accounts.settings.scope, found, wanted), accounts.resource(found),
                      stepped=bool(wanted))
        return grant, server.authorization_endpoint

    async def callback(self, answer: Mapping[str, str], binding: str | None, person: Caller | None
                       ) -> tuple[str, Connection]:
        """Finish a flow from the callback's query (`state`, `code` or `error`, `iss`) in the
        browser holding `binding`, where `person` is signed in: (server, connection). FlowError 400
        for a state that is unknown, used, expired, another browser's or another caller's
        (nobody signed in included; its code never redeemed), an answer from another issuer (RFC
        9207) or without a code; 502 when the code cannot be redeemed for want of the server."""
        state, code, error = answer.get("state"), answer.get("code"), answer.get("error")
        key = "state:" + digest(state or "")
        raw = await self.tickets.get(key) if state else None
        if raw is None:
            raise FlowError(400, "Unknown, used or expired state: start again from the connect link.")
        server, secret = self._opened(key, raw)
        caller = Caller(str(secret["iss"]), str(secret["sub"]))
        if binding is None or digest(binding) != secret["binding"]:
            raise FlowError(400, "This state was issued to another browser.")
        if person != caller:
            raise FlowError(400, "This state was issued to another caller.")
        if await self.tickets.take(key) is None:  # single use, even between replicas
            raise FlowError(400, "Unknown, used or expired state: start again from the connect link.")
        if code is None:
            shown = error if error and error.isascii() and error.isprintable() else "no code"
            raise FlowError(400, f"The authorization server did not connect the account ({shown[:64]}).")
        grant = self._granted(secret)
        issuer = answer.get("iss")  # RFC 9207: compared exactly, as a string
        if grant.issuer is not None and issuer is not None and issuer != grant.issuer:
            raise FlowError(400, "The answer came from another authorization server.")
        if grant.iss_required and issuer is None:
            raise FlowError(400, "The authorization server always names itself in its answers "
                                 "(RFC 9207), and this one does not: refused.")
        accounts = self.accounts[server]
        try:
            connection = await accounts.redeem(caller, code, str(secret["verifier"]),
                                               self.redirect_uri, grant)
        except NoCredentialError as exc:
            raise FlowError(400, f"The authorization server refused the code ({exc}).") from None
        except CredentialBackendError as exc:
            log.warning("credential for server %s: redeeming a code failed: %s", server, exc)
            await self.registrations[server].forget(grant.issuer)  # (registered again next time)
            raise FlowError(502, "The authorization server could not complete the connection; try "
                                 "again.") from None
        return server, connection

    @staticmethod
    def _granted(secret: Mapping[str, object]) -> Grant:
        try:
            return Grant.from_json(secret["grant"])
        except (ValueError, KeyError, TypeError):
            raise FlowError(400, "Unknown, used or expired state: start again from the connect "
                                 "link.") from None

    def _opened(self, key: str, raw: bytes) -> tuple[str, dict[str, object]]:
        bad = FlowError(400, "Unknown, used or expired state: start again from the connect link.")
        try:
            record = json.loads(raw)
            server = str(record["server"])
            accounts = self.accounts[server]
            secret = json.loads(accounts.sealer.open(base64.b64decode(record["sealed"]), key.encode()))
        except (SealError, ValueError, KeyError, TypeError):
            raise bad from None
        if not isinstance(secret, dict):
            raise bad
        return server, secret
