"""`ServerGuard`: what a guard hooked into one MCP server holds and decides, whatever its flavour:
its tools' requirements (from code, functions, `_meta` mirrors and listings, read by the rules every
server shares in `toolset`), each call's decision (`Guard.check`, or `Guard.refuse` for what the
guard does not evaluate), its denial, and each session's view of the tool list. `_server.py` adds
the SDK middleware (`Preconditions`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Hashable, Iterable, Mapping, Sequence
from typing import Any, Literal, TypeVar, overload

import anyio
from mcp_types import CallToolResult, InputRequiredResult

from .. import calls
from ..approvals import refuse_without_pages
from ..calls import Reply
from ..errors import RequirementError
from ..guard import Guard
from ..names import unusable_line
from ..outcomes import Decision, Refusal
from ..policy.load import PolicySource
from ..principal import Credentials
from ..remedies import NOBODY, Recipient
from ..requirements import merge, validate
from ..telemetry.metrics import Metrics
from ..telemetry.tracing import recording_span
from ..toolset import Listed, Views, enforce, read_listing, refused, seen, shown_names, unusable
from ..wire import meta_requirements
from ._asking import client_of, input_required
from ._calls import credentials_from_request, denial_error, denial_result, url_elicitation_of
from ._sessions import TargetedBus
from ._telemetry import HostedMetrics, observed

log = logging.getLogger(__name__)

REQUIREMENTS_ATTR = "__mcp_requirements__"  # where decorators leave a tool function's requirements
# The (Preconditions, tool name) pairs a function is already registered as, so that a `requires`
# stacked *above* the tool decorator still reaches the guard.
TOOLS_ATTR = "__mcp_preconditions_tools__"
# What a caller is told when the policy cannot be applied to the server's tools (a near miss); the
# problem, which names the policy's entries, goes to the server's log only.
UNUSABLE = unusable("server")

# Maps the call's HTTP request (a Starlette Request; None on stdio and in-process) to credentials.
CredentialsHook = Callable[[Any], Credentials]
DenialMode = Literal["result", "jsonrpc"]
R = TypeVar("R")
D = TypeVar("D")
F = TypeVar("F", bound=Callable[..., Any])


def requirements_of(fn: Callable[..., Any]) -> tuple[str, ...]:
    """The requirements `@requires` decorators attached to a tool function (empty when none)."""
    return tuple(getattr(fn, REQUIREMENTS_ATTR, ()))


def mark_requirements(fn: Callable[..., Any], requirements: Sequence[str]) -> tuple[str, ...]:
    """Attach `requirements` to a tool function (added to those already there) and register them
    for every tool the function is already registered as. Returns the function's whole list."""
    merged = merge(requirements, requirements_of(fn))
    for pre, name in getattr(fn, TOOLS_ATTR, ()):
        pre.attach(name, merged)  # validated here: a bad one raises RequirementError now
    setattr(fn, REQUIREMENTS_ATTR, merged)
    return merged


def register_function(fn: Callable[..., Any], preconditions: ServerGuard, tool: str) -> None:
    """Remember that `fn` is the function of `tool` on a guarded server (see `mark_requirements`)."""
    # A bound method takes no attributes; the call-time check still reads its function's list.
    with contextlib.suppress(AttributeError, TypeError):
        setattr(fn, TOOLS_ATTR, (*getattr(fn, TOOLS_ATTR, ()), (preconditions, tool)))


class ServerGuard:
    """A guard hooked into an MCP server (see `Preconditions`, the middleware that hooks it in).

    `list_filtering` and `denial` default to the policy's `[guard]` settings (read per request, so a
    reload can change them); pass them to override. `credentials` maps the call's HTTP request
    (None on stdio) to the caller's credentials (default `credentials_from_request`: the token the
    SDK's auth verified, else the raw `Authorization: Bearer` token for the guard's own verifier,
    else anonymous). `bus` is the `subscriptions/listen` bus used to reach 2026-07-28 sessions.

    Adapter settings: `tool_functions` says the adapter reads the requirements each tool's function
    and `_meta` carry from its own registry (so `requires` without `name` only marks the function);
    without it, the middleware reads the server's whole `tools/list` before a call to a tool no
    listing has shown, and enforces what it advertises. `guard_calls` makes the middleware decide
    every `tools/call` itself (the lowlevel Server, whose handler may be registered at any time).
    """

    def __init__(self, guard: Guard, *, list_filtering: bool | None = None,
                 denial: DenialMode | None = None, credentials: CredentialsHook | None = None,
                 notify_list_changed: bool = True, bus: TargetedBus | None = None,
                 tool_functions: bool = False, guard_calls: bool = False) -> None:
        refuse_without_pages(guard.snapshot.source)  # approvers need the gateway's pages (§15)
        self.guard = guard
        self.tool_functions = tool_functions
        self.guard_calls = guard_calls
        self.declared: set[str] = set()  # tool names given requirements by name, in code
        # Per tool: the function's requirement tuple and the guard's registration token with which
        # `attach` last found nothing to add (see `attach_function`; adapters read it on every call
        # to skip that call when nothing changed). Written only by `attach_function`.
        self.settled: dict[str, tuple[object, object]] = {}
        # Set by an adapter that can register every tool's function requirements up front.
        self.sync: Callable[[], Awaitable[None]] | None = None
        self._list_filtering = list_filtering
        self._denial = denial
        self.credentials: CredentialsHook = credentials or credentials_from_request
        self.notify_list_changed = notify_list_changed
        self.bus = bus if bus is not None else TargetedBus()
        self.views = Views()  # the sessions shown a list, told when what they would see changes
        self.listing: Listed = read_listing(())  # the last tools listing read (`adopt`)
        self.refused: dict[str, str] = {}  # tools whose own requirements cannot be read or enforced
        self.known: frozenset[str] | None = None  # the tool names last told to the guard
        self.unusable: tuple[str, ...] = ()  # the policy's near misses of those names (refused)
        self._checked: object = None  # the policy source `unusable` was found for
        # True while every call is the guard's to decide: the names were told and nothing is
        # refused before the guard (`refusal_of`). Adapters read it on every call.
        self.ready = False
        self.name = ""  # the server's name: its `server` label in metrics and spans
        self.telemetry: HostedMetrics | None = None  # set by `enable_metrics`

    # -- settings --------------------------------------------------------------------------------
    @property
    def list_filtering(self) -> bool:
        if self._list_filtering is not None:
            return self._list_filtering
        return self.guard.snapshot.source.policy.guard.list_filtering

    @property
    def denial(self) -> DenialMode:
        return self._denial or self.guard.snapshot.source.policy.guard.denial

    def add_tool(self, name: str, requirements: Sequence[str]) -> None:
        """Declare a tool's own requirements, added to those it has (a second declaration for one
        name never drops a requirement); raises RequirementError now if one is invalid."""
        self.validate(name, requirements)
        self.attach(name, requirements)
        self.declared.add(name)

    def know(self, names: Iterable[str]) -> None:
        """Tell the guard the server's tool names (`Guard.tools_known`) when they or the policy
        changed since: a policy `[tools.NAME]` that nearly matches one makes the policy unusable
        for this server, every call refused and the log saying why, until either changes
        (SPEC §10); a reload to such a policy is refused."""
        known = frozenset(names)
        source = self.guard.snapshot.source
        if known != self.known or source is not self._checked:
            problems = self.guard.tools_known(sorted(known))
            if problems and problems != self.unusable:
                log.error("%s", unusable_line(source.source, problems))
            self.known, self.unusable, self._checked = known, problems, source
        self.ready = not (self.unusable or self.refused or self.listing.duplicates)

    def attach(self, name: str, requirements: Sequence[str]) -> bool:
        """Make sure tool `name` has at least `requirements` (added to its own; never removes one).
        Returns whether the guard changed. Raises RequirementError if one is invalid."""
        # Compared with the tool's own list, not the effective one: a requirement the policy also
        # lists must still be the tool's own, or a reload dropping it from the policy would open it.
        own = self.guard.own_requirements(name)
        if all(r in own for r in requirements):
            return False
        self.guard.add_tool(name, list(merge(own, requirements)))
        return True

    def attach_function(self, name: str, fn: Callable[..., Any],
                        meta: Mapping[str, Any] | None = None) -> None:
        """`attach` the requirements tool `name`'s function carries now, and those its `_meta`
        mirror advertises; run before every call. Skipped while neither the function's (immutable)
        requirement tuple nor the guard's own requirements changed since `attach` last found
        nothing to add, and the tool's meta advertises none."""
        raw = getattr(fn, REQUIREMENTS_ATTR, ())
        token = self.guard.registration  # read before attach: a change meanwhile means re-check
        mirrored = meta_requirements(name, meta)
        settled = self.settled.get(name)
        if settled is not None and settled[0] is raw and settled[1] is token and not mirrored:
            return
        if not self.attach(name, merge(raw, mirrored)) and type(raw) is tuple and not mirrored:
            self.settled[name] = (raw, token)  # holds both: identities are never reused

    def validate(self, tool: str, requirements: Sequence[str]) -> None:
        """Raise RequirementError, naming `tool`, if a requirement cannot be enforced (SPEC §3)."""
        errors = [str(f) for f in validate(tool, list(requirements), self.guard.snapshot.registry)
                  if f.severity == "error"]
        if errors:
            raise RequirementError(errors)

    def verify(self, tools: Iterable[str]) -> None:
        """Raise RequirementError for each tool given requirements by name that is not among
        `tools` (the server's tool names): a rename or a typo must not leave a tool unguarded."""
        names = set(tools)
        known = ", ".join(f"'{t}'" for t in sorted(names)) or "none"
        errors = [f"tool '{name}': requirements are declared for it, but the server has no tool "
                  f"of that name (its tools: {known})" for name in sorted(self.declared - names)]
        if errors:
            raise RequirementError(errors)

    def requires(self, *requirements: str, name: str | None = None) -> Callable[[F], F]:
        """Decorator declaring a tool function's requirements (validated at once). Stacked decorators
        add up, top to bottom. The requirements follow the function to whatever name the server
        lists it under (fastmcp, GuardedMCPServer); `name` also declares them for that tool name
        (for a lowlevel Server, where the function's name is used when `name` is not given)."""

        def declare(fn: F) -> F:
            merged = merge(requirements, requirements_of(fn))
            self.validate(name or fn.__name__, merged)
            if name is not None:
                self.attach(name, merged)
                self.declared.add(name)
            elif not self.tool_functions:
                self.attach(fn.__name__, merged)
            mark_requirements(fn, merged)
            return fn

        return declare

    def enable_metrics(self, metrics: Metrics | None = None) -> Metrics:
        """Count every decision of this server in `metrics` (a new `Metrics` when None), under its
        `name`; returns it (serve it with `telemetry.metrics_route`)."""
        if self.telemetry is None or (metrics is not None and metrics is not self.telemetry.metrics):
            self.telemetry = HostedMetrics(metrics or Metrics(), self.name, self.guard,
                                           lambda: self.known)
            counted = self.telemetry.metrics
            counted.approvals_declared(self.guard.snapshot.source.policy.approvals)
            self.guard.live.approval_results = counted.observe_approval
            counted.pdps_declared(self.guard.snapshot.source.policy.pdp)
            self.guard.live.pdp.results = counted.observe_pdp
        return self.telemetry.metrics

    @property
    def metrics(self) -> Metrics | None:
        return self.telemetry.metrics if self.telemetry is not None else None

    # -- listings --------------------------------------------------------------------------------
    def adopt(self, tools: Sequence[object], *, whole: bool = True) -> None:
        """Read a `tools/list` answer by the rules every server shares (`toolset`): what each tool
        carries is enforced from now on (added to its own: a hosted tool's requirements only ever
        grow), a name listed twice is refused, and so is a tool whose requirements cannot be read
        or enforced (never shown unenforced). Without `tool_functions` the listing is all the
        guard knows of the server's tools: their names are told to it. `whole`: the answer is the
        whole list, not one page of it (a page adds to what the other pages listed)."""
        listed = read_listing(tools)
        if not whole:
            old = self.listing
            listed = Listed({**old.tools, **listed.tools}, old.duplicates | listed.duplicates,
                            {**old.own, **listed.own}, {**old.unreadable, **listed.unreadable})
        own_of = self.guard.own_requirements
        wanted = {n: merge(own_of(n), own) for n, own in listed.own.items()
                  if not all(r in own_of(n) for r in own)}
        refused = {**listed.unreadable, **enforce(self.guard, wanted)}
        for name in sorted(refused.keys() - self.refused.keys()):
            log.warning("tool %r refused: its requirements cannot be enforced: %s", name, refused[name])
        self.listing, self.refused = listed, refused
        if not self.tool_functions:
            self.know([*(self.known or ()), *listed.tools])
        else:
            self.ready = self.ready and not (self.refused or listed.duplicates)

    def names(self) -> list[str]:
        """The server's tool names a caller may be shown: those told to the guard and those its
        last listing showed, less any listed twice."""
        listing = self.listing
        return sorted({*(self.known or ()), *listing.tools} - listing.duplicates)

    async def shown(self, credentials: Credentials, names: Sequence[str]) -> list[str]:
        """Which of `names` this caller's `tools/list` shows (`toolset.shown_names`)."""
        refused = [*self.refused, *(names if self.unusable else ())]
        return await shown_names(self.guard, names, credentials, filtering=self.list_filtering,
                                 refused=refused)

    async def view(self, credentials: Credentials) -> Hashable:
        """What a session's tool list shows (`toolset.seen`), to tell it when that changes."""
        if self.sync is not None:
            await self.sync()
        return seen(self.guard, await self.shown(credentials, self.names()))

    # -- tools/call ------------------------------------------------------------------------------
    def refusal_of(self, name: str) -> tuple[Refusal, str] | None:
        """Why a call of `name` is refused without the guard evaluating it (`toolset.refused`),
        or None: the guard decides."""
        return refused(unusable=UNUSABLE if self.unusable else None,
                       twice=name in self.listing.duplicates, malformed=self.refused.get(name))

    @overload
    def take(self, request: Any, tool: str, arguments: Mapping[str, Any] | None,
             run: Callable[[], Awaitable[R]], *, typed: Callable[[], bool], session: Any = None,
             echo: object = None, reply: Reply | None = None, deny: None = None, ask: None = None
             ) -> Coroutine[Any, Any, R | CallToolResult | InputRequiredResult]: ...

    @overload
    def take(self, request: Any, tool: str, arguments: Mapping[str, Any] | None,
             run: Callable[[], Awaitable[R]], *, typed: Callable[[], bool], session: Any = None,
             echo: object = None, reply: Reply | None = None,
             deny: Callable[[Decision, Recipient], D], ask: Callable[[dict[str, Any]], D]
             ) -> Coroutine[Any, Any, R | D]: ...

    def take(self, request: Any, tool: str, arguments: Mapping[str, Any] | None,
             run: Callable[[], Awaitable[R]], *, typed: Callable[[], bool], session: Any = None,
             echo: object = None, reply: Reply | None = None,
             deny: Callable[[Decision, Recipient], D] | None = None,
             ask: Callable[[dict[str, Any]], D] | None = None
             ) -> Coroutine[Any, Any, Any]:
        """One call through calls.py: refused before the guard when `refusal_of` says so, decided
        (its `self` approvals' questions asked through `session`, the SDK session of the call;
        `reply`: what a 2026-07-28 retry answers to such a question's round), counted and traced,
        then denied or run (`run`, the tool's handler). `request`: the call's HTTP request (None
        on stdio); `typed`: whether the tool declares an `outputSchema` (asked for a denial only);
        `echo`: the context ID the request echoed; `deny` and `ask` shape a denial and an input
        round for the adapter (default: the SDK's result types)."""
        credentials = self.credentials(request)
        check, observe = self._observed(tool, credentials, arguments, echo)
        client = client_of(session, reply) if tool in self.guard.snapshot.asking else None
        refusal = None if self.ready else self.refusal_of(tool)
        shape: Callable[[Decision, Recipient], Any] = deny if deny is not None else \
            (lambda decision, recipient: self.refusal(decision, typed(), recipient))
        return calls.take(self.guard, tool, credentials, arguments, run=lambda _: run(),
                          deny=shape, ask=ask if ask is not None else input_required,
                          url_elicitation=url_elicitation_of(session), echo=echo, client=client,
                          refusal=refusal, check=check, observe=observe)

    def _observed(self, tool: str, credentials: Credentials, arguments: Mapping[str, Any] | None,
                  echo: object) -> tuple[calls.Check | None, calls.Observe | None]:
        """How the call is checked and its decision observed: counted when metrics are on, and
        traced under a recording server span (integrations/_telemetry.py); neither, else."""
        span = recording_span()
        if self.telemetry is None and span is None:
            return None, None
        listed = self.known is not None and tool in self.known
        return observed(self.guard, self.telemetry, self.name, span, credentials, tool,
                        arguments, listed, echo)

    def refusal(self, decision: Decision, typed: bool = False,
                recipient: Recipient = NOBODY) -> CallToolResult:
        """The denial to return to the client (or raise, in JSON-RPC mode); `typed`: the tool
        declares an `outputSchema`; `recipient`: what its envelope may offer (`recipient`)."""
        if self.denial == "jsonrpc":
            error = denial_error(decision, recipient)
            if error is not None:
                raise error
        return denial_result(decision, typed, recipient)

    async def denied(self, decision: Decision, typed: bool, request: Any, session: Any,
                     arguments: Mapping[str, Any] | None) -> CallToolResult:
        """`refusal` of a call decided without a sidecar (a hot path's), its envelope shaped for
        the call's client (calls.recipient: what it declared, what the resolvers offer)."""
        recipient = calls.recipient(self.guard, calls.Decided(decision), self.credentials(request),
                                    arguments, url_elicitation_of(session))
        if not isinstance(recipient, Recipient):
            recipient = await recipient
        return self.refusal(decision, typed, recipient)

    def typed(self, name: str) -> bool:
        """Whether the last listing showed `name` with an `outputSchema` (the lowlevel Server's
        one look-up: its tools exist only in its listing)."""
        tool = self.listing.tools.get(name)
        return tool is not None and tool.get("outputSchema") is not None

    # -- list changes ----------------------------------------------------------------------------
    @property
    def sessions(self) -> int:
        """How many connected sessions are watched for list changes."""
        return len(self.views)

    async def refresh(self) -> int:
        """Re-evaluate every watched session after a policy reload or a change of live facts, and
        send `notifications/tools/list_changed` to each whose tool list changed. Returns how many."""
        return await self.views.refresh(self.view)

    async def reload(self, source: PolicySource) -> int:
        """Swap in a new policy (PolicyError/RequirementError keep the old one) and notify."""
        self.guard.reload(source)
        return await self.refresh()

    async def watch(self, interval: float) -> None:
        """Refresh every `interval` seconds, forever: for live facts (state, flags) that change
        without telling anyone. Run it in the server's task group."""
        while True:
            await anyio.sleep(interval)
            if len(self.views):
                await self.refresh()
