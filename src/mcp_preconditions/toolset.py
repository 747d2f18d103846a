"""A server's tools under the guard: one rule set for a hosted server and for every server behind the
gateway (SPEC §3, §10). A tools listing is untrusted input: read whole (every page, bounded), a name
listed twice refused, requirements that cannot be read or enforced refused (never shown unenforced),
the rest registered with the guard in one swap. What a caller is shown, and whether that changed.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import ListingError, RequirementError
from .guard import Guard
from .outcomes import Refusal, Refused
from .principal import Credentials
from .requirements import validate
from .wire import wire_requirements, with_requirements

log = logging.getLogger("mcp_preconditions.policy")

# A listing is read page by page; a server whose cursors never end is cut off here, and its listing
# fails (the last good one stays), never taken as complete.
MAX_PAGES = 1000
# Asks a server for one page of a listing (None: the first page); answers the raw result.
FetchPage = Callable[[str | None], Awaitable[object]]
# A caller's view of its tool list: two equal views are two equal lists (`view`).
View = Callable[[Credentials], Awaitable[Hashable]]


async def every_page(fetch: FetchPage, method: str = "tools/list", field: str = "tools",
                     max_pages: int = MAX_PAGES) -> list[dict[str, Any]]:
    """Every item of a paginated listing (`tools/list` -> `tools`, `prompts/list` -> `prompts`, ...),
    all pages in order, as the objects the server sent. Raises ListingError for a page without
    the list, an item that is not an object, a cursor that is not a string, or more than
    `max_pages` pages: a listing is whole or not at all."""
    items: list[dict[str, Any]] = []
    cursor: object = None
    for _ in range(max_pages):
        page = await fetch(cursor if isinstance(cursor, str) else None)
        found = page.get(field) if isinstance(page, Mapping) else None
        if not isinstance(page, Mapping) or not isinstance(found, list):
            raise ListingError(f"{method} answered without a {field!r} list")
        for index, item in enumerate(found, len(items)):
            if not isinstance(item, dict):
                raise ListingError(f"{method} entry #{index} is not an object")
        items.extend(found)
        cursor = page.get("nextCursor")
        if cursor is None or cursor == "":
            return items
        if not isinstance(cursor, str):
            raise ListingError(f"{method} nextCursor is not a string")
    raise ListingError(f"{method} has more than {max_pages} pages")


@dataclass(frozen=True, slots=True)
class Listed:
    """One tools listing, read: each name's first definition (listing order), the names listed more
    than once (refused until listed once: never "the last copy wins"), the requirements each tool
    carries itself (`execution.requirements` ∪ the `_meta` mirror), and why a tool's own
    requirements cannot be read (garbage is never "no requirements")."""

    tools: dict[str, Mapping[str, Any]]
    duplicates: frozenset[str]
    own: dict[str, tuple[str, ...]]
    unreadable: dict[str, str]

    @property
    def typed(self) -> frozenset[str]:
        """The tools that declare an `outputSchema` (their denials carry the payload in `_meta`)."""
        return frozenset(n for n, t in self.tools.items() if t.get("outputSchema") is not None)


def read_listing(items: Iterable[object]) -> Listed:
    """A server's tools listing as untrusted input (items without a string name are skipped)."""
    named = [t for t in items if isinstance(t, Mapping) and isinstance(t.get("name"), str)]
    counts = Counter(t["name"] for t in named)
    tools: dict[str, Mapping[str, Any]] = {}
    own: dict[str, tuple[str, ...]] = {}
    unreadable: dict[str, str] = {}
    for tool in named:
        name = tool["name"]
        if name in tools:
            continue
        tools[name] = tool
        try:
            own[name] = wire_requirements(tool)
        except RequirementError as exc:
            unreadable[name] = str(exc)
    return Listed(tools, frozenset(n for n, c in counts.items() if c > 1), own, unreadable)


_TWICE = Refusal(Refused.UNLISTED, "its server lists more than one tool of that name")
_MALFORMED = Refusal(Refused.MALFORMED, "its requirements cannot be read")


def unusable(who: str) -> str:
    """What a caller is told of a policy that cannot be applied to the server's tools (a near
    miss), for every adapter: one sentence naming whose policy it is ("server", "gateway"); the
    problem itself, which names the policy's entries, goes to the log only (`names.unusable_line`)."""
    return f"the {who}'s policy is unusable"


def refused(*, unusable: str | None, twice: bool, malformed: str | None
            ) -> tuple[Refusal, str] | None:
    """Why a call is refused whoever calls, before the guard evaluates anything (`Guard.refuse`),
    and what its record says; None: the guard decides. In this order: the policy is unusable for
    the tool's server (`unusable`: what the caller is told; the problem itself, which names the
    policy's entries, goes to the log only), the server lists the name twice, or the tool's own
    requirements cannot be read or enforced (`malformed`: why, for the record)."""
    if unusable is not None:
        return Refusal(Refused.UNUSABLE, unusable), unusable
    if twice:
        return _TWICE, ""
    if malformed is not None:
        return _MALFORMED, malformed
    return None


def enforce(guard: Guard, wanted: Mapping[str, Sequence[str]], forget: Iterable[str] = ()
            ) -> dict[str, str]:
    """Make the guard hold exactly `wanted` as these tools' own requirements (the policy's are
    added to them: the effective list is their union), and none for each of `forget`, in one swap
    that compiles only the tools that changed. A tool whose requirements the guard cannot enforce
    (an unknown namespace, a form its resolver refuses) is left out, and returned with why: its
    calls are refused until it lists enforceable ones (SPEC §10)."""
    registry = guard.snapshot.registry
    refused: dict[str, str] = {}
    changes: dict[str, list[str] | None] = {}
    for name, requirements in wanted.items():
        errors = [str(f) for f in validate(name, list(requirements), registry) if f.severity == "error"]
        if errors:
            refused[name] = "; ".join(errors)
        elif guard.own_requirements(name) != tuple(requirements):
            changes[name] = list(requirements)
    changes.update({name: None for name in forget if name not in wanted or name in refused})
    try:
        if changes:
            guard.update_tools(changes)
    except RequirementError as exc:  # a reload raced this listing: refused until the next one
        refused.update({name: str(exc) for name in changes if name in wanted})
    return refused


async def shown_names(guard: Guard, names: Sequence[str], credentials: Credentials, *,
                      filtering: bool, refused: Collection[str] = frozenset()) -> list[str]:
    """The tools a caller's `tools/list` shows, in order: every one of `names` (what the server
    listed, less the names it listed twice); with list filtering only those this caller may call
    now, so none of the `refused` (whose calls are refused whoever calls)."""
    if not filtering:
        return list(names)
    allowed = set(await guard.callable_tools(credentials, [n for n in names if n not in refused]))
    return [n for n in names if n in allowed]


def advertise(guard: Guard, tools: Iterable[tuple[str, Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """Each (name, definition) as listed: the definition with exactly the requirements the guard
    advertises for it (effective less confidential, SPEC §3) on the wire and in the `_meta` mirror,
    whatever it carried there."""
    advertised = guard.advertised_for
    return [with_requirements(tool, advertised(name)) for name, tool in tools]


def seen(guard: Guard, shown: Iterable[str]) -> Hashable:
    """What a caller's list shows (`shown_names`), as a comparable value: each shown tool with its
    advertised requirements (so a change to a confidential requirement is not told by a
    notification). A caller is told its list changed when, and only when, this value did."""
    return tuple((name, guard.advertised_for(name)) for name in shown)


@dataclass(eq=False)
class _Watch:
    credentials: Credentials
    view: Hashable
    notify: Callable[[], Awaitable[None]]


_UNKNOWN = object()  # the view of a caller whose view could not be computed


class Views:
    """The callers that were shown a tool list (a connection, a listen stream), each with the
    credentials it last used, the view it last saw and how to tell it. `refresh` tells
    `notifications/tools/list_changed` to those whose view changed, and to no one else."""

    def __init__(self) -> None:
        self._items: dict[object, _Watch] = {}

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def watch(self, key: object, credentials: Credentials, seen: Hashable,
              notify: Callable[[], Awaitable[None]]) -> bool:
        """Remember what `key` was shown (again); whether it is new (so its owner can `drop` it
        when it goes)."""
        watch = self._items.get(key)
        if watch is not None:
            watch.credentials, watch.view = credentials, seen
            return False
        self._items[key] = _Watch(credentials, seen, notify)
        return True

    def drop(self, key: object) -> None:
        self._items.pop(key, None)

    async def refresh(self, view_of: View) -> int:
        """Recompute every caller's view; notify those whose view changed. Returns how many."""
        sent = 0
        for watch in list(self._items.values()):
            try:
                current = await view_of(watch.credentials)
            except Exception:  # fail safe: a caller we cannot evaluate is told (once) to re-list
                log.exception("could not recompute a caller's tool view")
                current = _UNKNOWN
            if current != watch.view:
                watch.view = current
                try:
                    await watch.notify()
                except Exception:  # one caller gone wrong must not keep the others untold
                    log.exception("could not tell a caller its tool list changed")
                sent += 1
        return sent
