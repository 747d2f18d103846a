"""`tools/call` and `tools/list` through the gateway, by the rules every server shares (`toolset`,
`denials`, `Guard.refuse`): every call decided by the guard before it goes to its server; an allowed
call's result is the server's own (its own SEP-2643 envelope, if any, untouched), a refused one the
SPEC §3 denial (or `unlisted_tool`) with the gateway's envelope, or over HTTP the 403 step-up; a
server that fails mid-call gives a tool error, never an allow. A listing shows each routable tool
under its visible name with the requirements it advertises; a caller whose list changed is told so.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Mapping
from typing import Any

from .. import calls
from ..denials import DENIAL_CODE, denial_error_data, denial_result, denial_text, step_up
from ..envelope import echo_of
from ..guard import Guard
from ..late import Answer, Question, Sidecar, answer_of, answering, asks_forms, input_answer
from ..outcomes import Decision, Refusal, Refused
from ..policy.model import Policy
from ..principal import Credentials
from ..remedies import Recipient, declares_url_elicitation
from ..telemetry.gateway import NO_SERVER, GatewayTelemetry
from ..toolset import Views, advertise, refused, seen, shown_names
from . import bridge, jsonrpc
from .clients import Call
from .errors import CredentialRefused, PeerFailed
from .fleet import UNUSABLE, Fleet, Member
from .jsonrpc import RpcError
from .listen import SUBSCRIPTION_ID_META_KEY
from .route import visible

log = logging.getLogger("mcp_preconditions.gateway")

# Forward one request to a member: (client request, member, method, params, the call's sidecar)
# -> raw result.
Forward = Callable[[Call, Member, str, Mapping[str, Any] | None, Sidecar | None],
                   Awaitable[dict[str, Any]]]
LIST_CHANGED = "notifications/tools/list_changed"
# `Call.extra` key: the 403 step-up (`denials.StepUp`) an HTTP listener answers instead of the
# call's in-band denial (downstream/streamable.py).
STEP_UP = "step_up"


class Decide:
    """Decides and forwards the tool calls of one gateway, lists its tools, and tells each caller
    whose list changed."""

    def __init__(self, guard: Guard, fleet: Fleet, policy: Callable[[], Policy],
                 connect_wait: Callable[[], float], telemetry: GatewayTelemetry) -> None:
        self._guard = guard
        self._fleet = fleet
        self._policy = policy
        self._connect_wait = connect_wait
        self._telemetry = telemetry
        self.views = Views()  # the callers shown a list: 2025-11-25 connections, listen streams
        metrics = telemetry.metrics
        if metrics is not None:  # approvals_total (SPEC §15): the policy's approvals from 0
            metrics.approvals_declared(policy().approvals)
            guard.live.approval_results = metrics.observe_approval
            metrics.pdps_declared(policy().pdp)  # pdp_total (SPEC §16)
            guard.live.pdp.results = metrics.observe_pdp
        guard.live.pdp.server_of = self._server_of  # a `pdp:` request's resource.properties.server

    def _server_of(self, name: str) -> str | None:
        """The server key a visible tool routes to (None: none does)."""
        target = self._fleet.routes.tools.get(name)
        return target.server if target is not None else None

    def listed(self, name: str) -> bool:
        """Whether `[gateway] unlisted_tools` lets this tool be called at all: under "deny", only
        tools with requirements or named by a `[tools.NAME]` table (`requirements = []` exposes
        an open tool)."""
        policy = self._policy()
        return (policy.gateway.unlisted_tools == "allow" or name in policy.tools
                or self._fleet.declared(name))

    def refusal(self, name: str) -> tuple[Refusal, str] | None:
        """Why every call to a routable tool is refused whoever calls (`toolset.refused`, and
        `[gateway] unlisted_tools`), and what the record says; None: the guard decides."""
        fleet = self._fleet
        target = fleet.routes.tools[name]
        member = fleet.members[target.server]
        found = refused(unusable=UNUSABLE if member.problem is not None else None,
                        twice=name in fleet.routes.duplicates,
                        malformed=member.catalog.listed.unreadable.get(target.name)
                        or fleet.invalid.get(name))
        if found is None and not self.listed(name):
            return Refusal(Refused.UNLISTED, "the policy lists no requirements for it"), ""
        return found

    # -- tools/list --------------------------------------------------------------------------------
    async def _shown(self, credentials: Credentials) -> list[str]:
        """The visible names this caller's `tools/list` shows (`toolset.shown_names`)."""
        routes = self._fleet.routes
        names = [n for n in routes.tools if n not in routes.duplicates]
        filtering = self._policy().guard.list_filtering
        refused = {n for n in names if self.refusal(n) is not None} if filtering else ()
        return await shown_names(self._guard, names, credentials, filtering=filtering,
                                 refused=refused)

    async def view(self, credentials: Credentials) -> Hashable:
        return seen(self._guard, await self._shown(credentials))

    async def tools(self, call: Call, credentials: Credentials) -> list[dict[str, Any]]:
        """Every routable tool under its visible name, carrying its advertised requirements (the
        effective ones less the confidential). With `[guard] list_filtering`, only those this
        caller may call."""
        shown = await self._shown(credentials)
        await self.watch(call, credentials, shown)
        return advertise(self._guard, ((name, self._definition(name)) for name in shown))

    async def watch(self, call: Call, credentials: Credentials, shown: list[str] | None = None
                    ) -> None:
        """Watch a 2025-11-25 connection from its first request on (the gateway's `handle`) with
        what it would be shown (`shown`, when just computed), and again at each `tools/list` with
        the credentials it used: it is told when that changes, on its standalone channel."""
        client = call.client
        if client is None or call.modern:
            return
        key = id(client)
        if shown is None:
            if key in self.views:
                return
            shown = await self._shown(credentials)

        async def notify() -> None:  # on its standalone channel, once it has opened one
            sink = client.standalone
            if sink is not None:
                sink.push(jsonrpc.notification(LIST_CHANGED, {}))
        if self.views.watch(key, credentials, seen(self._guard, shown), notify):
            client.on_close.append(lambda: self.views.drop(key))

    def _definition(self, name: str) -> dict[str, Any]:
        """A routable tool's definition as its server listed it, under its visible name."""
        target = self._fleet.routes.tools[name]
        member = self._fleet.members[target.server]
        return visible(member.catalog.tools[target.name], member.spec.prefix)

    @contextlib.asynccontextmanager
    async def watching(self, call: Call, credentials: Credentials) -> AsyncIterator[None]:
        """A 2026-07-28 listen stream that asked for tool list changes, watched while it is open:
        its own `list_changed` comes when what its caller would be shown changes."""
        asked = (call.params or {}).get("notifications")
        if not (isinstance(asked, dict) and asked.get("toolsListChanged")):
            yield
            return
        key = object()

        async def notify() -> None:
            call.notify(LIST_CHANGED, {"_meta": {SUBSCRIPTION_ID_META_KEY: call.id}})
        self.views.watch(key, credentials, await self.view(credentials), notify)
        try:
            yield
        finally:
            self.views.drop(key)

    async def tools_changed(self) -> int:
        """The tools, a listing or the policy changed: tell each watched caller whose view changed."""
        return await self.views.refresh(self.view)

    # -- tools/call --------------------------------------------------------------------------------
    async def call(self, ctx: Call, name: str, arguments: Any,
                   credentials: Credentials, forward: Forward) -> dict[str, Any]:
        version = ctx.version
        fleet = self._fleet  # (a server re-listing is read by its last good catalog: never waited for)
        if not fleet.listed and not fleet.update_listed():
            # Servers still starting: a name one server lists may collide with one another server
            # is about to list, and a collision is refused, never settled by who listed first.
            await fleet.first_listing(self._connect_wait())
        if name not in fleet.routes.tools and name not in fleet.routes.collisions:
            await fleet.unknown_tool(name)  # it may be new
        target = fleet.routes.tools.get(name)
        echo = echo_of(ctx.meta)  # a retry of a denied call: recorded, granting nothing
        arguments = arguments if isinstance(arguments, Mapping) else None
        if target is None:
            why = ("two servers list a tool of that name" if name in fleet.routes.collisions
                   else "no server lists a tool of that name")
            refused = await self._guard.refuse(name, credentials, Refusal(Refused.UNLISTED, why),
                                               echo=echo)
            return await self._refuse(ctx, NO_SERVER, refused, credentials, arguments)
        server = target.server
        found = self.refusal(name)
        if found is not None:
            refusal, detail = found
            refused = await self._guard.refuse(name, credentials, refusal, detail, echo=echo)
            return await self._refuse(ctx, server, refused, credentials, arguments)
        # Decided with what its late stages leave beside it (late.py, calls.py): the caller's
        # credential (§14), the questions their approvals ask them (§15). A sidecar is carried
        # where something reads it: a tool with late stages, or a server with credentials (every
        # request to one goes only as what a decision left: forward.py); else it would stay empty.
        answering = _answering(ctx)  # a 2026-07-28 retry carrying the answer to our question
        guard, telemetry, snapshot = self._guard, self._telemetry, self._guard.snapshot
        member = fleet.members[server]  # (a gateway's members are made once, with it)

        def check(sidecar: Sidecar | None) -> Awaitable[Decision]:
            return telemetry.decision(name, guard.check(name, credentials, arguments,
                                                         sidecar=sidecar, echo=echo))
        pending = calls.decide(guard, name, credentials, arguments, echo=echo,
                               carry=member.credential is not None or name in snapshot.late,
                               client=_client(ctx, answering) if name in snapshot.asking
                               else None, check=check)
        decided = pending if isinstance(pending, calls.Decided) else await pending
        if decided.round is not None:  # asked at 2026-07-28: its retry carries the answer
            return bridge.downstream_result("tools/call", decided.round, version)
        decision = decided.decision
        if not decision.allowed:
            return await self._refuse(ctx, server, decision, credentials, arguments, decided)
        telemetry.decided(server, decision)
        params = {**(ctx.params or {}), "name": target.name}
        if answering is not None:  # the round was the gateway's own: nothing for the server
            params = calls.without_round(params)
        ran = True
        try:
            result = await forward(ctx, member, "tools/call", params, decided.sidecar)
        except CredentialRefused as exc:  # the server refused it, renewed once: an unmet credential
            ran = False
            return await self._refuse(ctx, server, guard.overrule(decision, exc.outcome),
                                      credentials, arguments)
        except PeerFailed as exc:  # the server failed: a tool error (its own answer goes on as is)
            said = exc.message
            text = said if said.startswith(f"server {member.key} ") else \
                f"server {member.key} failed: {said}"
            return bridge.downstream_result("tools/call", _fault(text), version)
        finally:
            calls.finish(decided, ran)
        return bridge.downstream_result("tools/call", result, version)

    async def _refuse(self, ctx: Call, server: str, decision: Decision, credentials: Credentials,
                      arguments: Mapping[str, Any] | None, decided: calls.Decided | None = None
                      ) -> dict[str, Any]:
        """A refused call, counted once, in the one shape every server's denials take, its envelope
        shaped for the client that asked (what it declared, in `initialize` or the request). Over
        HTTP, a call more scopes alone would allow is marked for the 403 step-up."""
        refusal = decision.refusal
        self._telemetry.decided(server, decision,
                                listed=refusal is None or refusal.kind is not Refused.UNLISTED)
        guard = self._guard
        if ctx.headers is not None and not credentials.anonymous:
            answer = step_up(decision, await guard.authenticate(credentials))
            if answer is not None:
                ctx.extra[STEP_UP] = answer
        recipient = calls.recipient(guard, decided or calls.Decided(decision), credentials,
                                    arguments, declares_url_elicitation(ctx.capabilities))
        if not isinstance(recipient, Recipient):
            recipient = await recipient
        if self._policy().guard.denial == "jsonrpc":
            data = denial_error_data(decision, recipient)
            if data is not None:
                raise RpcError(DENIAL_CODE, denial_text(decision, recipient), data)
        return bridge.downstream_result("tools/call", denial_result(
            decision, typed=self._typed(decision.tool), recipient=recipient), ctx.version)

    def _typed(self, name: str) -> bool:
        """Whether the tool a caller knows by `name` declares an `outputSchema`."""
        target = self._fleet.routes.tools.get(name)
        if target is None:
            return False
        tool = self._fleet.members[target.server].catalog.tools.get(target.name)
        return tool is not None and tool.get("outputSchema") is not None


def _client(ctx: Call, answering: str | None) -> calls.Client:
    """What the gateway knows of the client of a call whose caller may be asked (calls.py): it can
    be asked when it declared form elicitation (in `initialize` at 2025-11-25, on a connection the
    gateway can send a request to; in the request's `_meta` at 2026-07-28, asked through an input
    round, whose retry answers: `answering`)."""
    modern = ctx.modern
    reply = calls.Reply(answering, input_answer((ctx.params or {}).get("inputResponses"))) \
        if answering is not None else None

    async def elicit(question: Question) -> Answer | None:  # on the call's stream (2025-11-25)
        return answer_of(await ctx.ask("elicitation/create", question.elicitation_params(),
                                       question.timeout_seconds))
    return calls.Client(can_ask=(modern or ctx.client is not None) and asks_forms(ctx.capabilities),
                        modern=modern, reply=reply, elicit=None if modern else elicit)


def _answering(ctx: Call) -> str | None:
    """The question a 2026-07-28 retry answers (its `requestState` one of the gateway's own
    rounds: `late.input_round`), else None (a server's round, or no round)."""
    return answering((ctx.params or {}).get("requestState")) if ctx.modern else None


def _fault(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": True}
