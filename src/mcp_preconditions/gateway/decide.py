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

from ..approvals import Answer, HeldApproval, Question, answer_of, asks_forms
from ..approvals.question import answering, input_answer
from ..denials import DENIAL_CODE, denial_error_data, denial_result, denial_text, step_up
from ..envelope import echo_of
from ..guard import Guard
from ..late import Sidecar
from ..outcomes import Decision, Refusal, Refused
from ..policy.model import Policy
from ..principal import Credentials
from ..remedies import Recipient, declares_url_elicitation, recipient_of
from ..telemetry.gateway import NO_SERVER, GatewayTelemetry
from ..toolset import Views, advertise, refused, seen, shown_names
from . import bridge, jsonrpc
from .downstream.clients import Call
from .downstream.listen import SUBSCRIPTION_ID_META_KEY
from .errors import CredentialRefused
from .fleet import UNUSABLE, Fleet, Member
from .jsonrpc import CONNECTION_CLOSED, INTERNAL_ERROR, REQUEST_TIMEOUT, RpcError
from .route import visible

log = logging.getLogger("mcp_preconditions.gateway")

# Forward one request to a member: (client request, member, method, params, the call's sidecar)
# -> raw result.
Forward = Callable[[Call, Member, str, Mapping[str, Any] | None, Sidecar | None],
                   Awaitable[dict[str, Any]]]
# Errors that mean "the server failed", not "the server refused": a tool error, not JSON-RPC.
_SERVER_FAULTS = frozenset({CONNECTION_CLOSED, REQUEST_TIMEOUT, INTERNAL_ERROR})
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
        if not all(m.catalog.listings["tools"].loaded for m in fleet):
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
        # What the decision leaves beside it: the caller's credential (§14), its approvals (§15).
        answering = _answering(ctx)  # a 2026-07-28 retry carrying the answer to our question
        sidecar = Sidecar(can_ask=name in self._guard.snapshot.approving and _can_ask(ctx),
                          answered=answering)
        decision = await self._telemetry.decision(name, self._guard.check(
            name, credentials, arguments, sidecar=sidecar, echo=echo))
        if not decision.allowed and sidecar.can_ask:
            decision, sidecar, ask = await self._confirmed(ctx, name, credentials, arguments, echo,
                                                           decision, sidecar, answering)
            if ask is not None:
                return bridge.downstream_result("tools/call", ask, version)
        if not decision.allowed:
            return await self._refuse(ctx, server, decision, credentials, arguments, sidecar)
        self._telemetry.decided(server, decision)
        member = fleet.members[server]
        params = {**(ctx.params or {}), "name": target.name}
        if answering is not None:  # the round was the gateway's own: nothing for the server
            params.pop("requestState", None)
            params.pop("inputResponses", None)
        try:
            result = await forward(ctx, member, "tools/call", params, sidecar)
        except CredentialRefused as exc:  # the server refused it, renewed once: an unmet credential
            return await self._refuse(ctx, server, self._guard.overrule(decision, exc.outcome),
                                      credentials, arguments)
        except RpcError as exc:
            if exc.code not in _SERVER_FAULTS:
                raise  # the server's own answer (bad arguments, ...): passed on as is
            said = exc.message
            text = said if said.startswith(f"server {member.key} ") else \
                f"server {member.key} failed: {said}"
            return bridge.downstream_result("tools/call", _fault(text), version)
        return bridge.downstream_result("tools/call", result, version)

    async def _confirmed(self, ctx: Call, name: str, credentials: Credentials,
                         arguments: Mapping[str, Any] | None, echo: object, decision: Decision,
                         sidecar: Sidecar, answering: str | None
                         ) -> tuple[Decision, Sidecar, dict[str, Any] | None]:
        """A call denied only until its caller confirms (`approvers = "self"`, SPEC §15). At
        2025-11-25 each question is put to the client (`elicitation/create`, form mode, on this
        call's stream); at 2026-07-28 it is an input round of the gateway's own (returned:
        `input_required`, its `requestState` naming the approval request) and the retry carries
        the answer (`answering`). The answer is kept, and the call decided again with it: an
        accept kept for this call's own question lets it run once; decline, cancel, no answer in
        `timeout_seconds`, a client error, or an answer another retry gave first deny it. A state
        grants nothing: an answer counts only for the very call (caller, tool, arguments,
        revision) its question is bound to, and a concurrent identical call is asked its own."""
        for _ in range(len(self._policy().approvals) + 1):  # one question per approval at most
            held = next((h for h in sidecar.held.values() if isinstance(h, HeldApproval)), None)
            question = held.question if held is not None else None
            if held is None or question is None:
                break
            if ctx.modern and answering != question.request_id:  # not answered yet: the round
                return decision, sidecar, question.input_round()
            try:
                taken = await held.answer(_input(ctx) if ctx.modern else
                                          await _elicited(ctx, question))
            except Exception as exc:  # the store is down: the call stays denied
                log.warning("approval %s: the caller's answer was not kept: %s", question.approval,
                            type(exc).__name__)
                break
            sidecar = Sidecar(can_ask=True, answered=question.request_id, accepted=taken)
            decision = await self._telemetry.decision(name, self._guard.check(
                name, credentials, arguments, sidecar=sidecar, echo=echo))
            if decision.allowed:
                break
        return decision, sidecar, None

    async def _refuse(self, ctx: Call, server: str, decision: Decision, credentials: Credentials,
                      arguments: Mapping[str, Any] | None, sidecar: Sidecar | None = None
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
        recipient = recipient_of(decision, guard.snapshot.registry,
                                 url_elicitation=declares_url_elicitation(ctx.capabilities),
                                 identity=lambda: guard.authenticate(credentials),
                                 arguments=arguments,
                                 held=sidecar.held if sidecar is not None else None)
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


def _can_ask(ctx: Call) -> bool:
    """Whether this call's caller can be asked in flight: a client that declared form elicitation
    (in `initialize` at 2025-11-25, on a connection the gateway can send a request to; in the
    request's `_meta` at 2026-07-28, asked through an input round)."""
    return (ctx.modern or ctx.client is not None) and asks_forms(ctx.capabilities)


async def _elicited(ctx: Call, question: Question) -> Answer | None:
    """The 2025-11-25 client's answer to `question`, asked on its call's stream."""
    try:
        return answer_of(await ctx.ask("elicitation/create", question.elicitation_params(),
                                       question.timeout_seconds))
    except RpcError:  # timed out, closed, or the client refused to answer: no answer
        return None


def _input(ctx: Call) -> Answer | None:
    """The answer a 2026-07-28 retry carries for the gateway's own round."""
    return input_answer((ctx.params or {}).get("inputResponses"))


def _answering(ctx: Call) -> str | None:
    """The approval request a 2026-07-28 retry answers (its `requestState` one of the gateway's
    own approval rounds: `Question.input_round`), else None (a server's round, or no round)."""
    return answering((ctx.params or {}).get("requestState")) if ctx.modern else None


def _fault(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": True}
