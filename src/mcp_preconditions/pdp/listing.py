"""A caller's listing decided by its decision points (SPEC §16): with `[guard] list_filtering`, every
listed tool with a `pdp:` requirement is asked about once (`action.name` `tools/list`, `resource.id`
its visible name, no arguments), in one batch per endpoint for the whole listing; a tool whose
answer is false or an error is hidden. An anonymous caller is asked about nothing and sees none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..principal import Identity
from ..requirements import body_of
from .points import Ask, DecisionPoints, Verdict
from .request import LIST


async def hidden(resolver: DecisionPoints, identity: Identity,
                 tools: Mapping[str, Sequence[str]]) -> set[str]:
    """The tools of `tools` (each with its `pdp:` requirements) this caller may not see."""
    by_tool: list[tuple[str, Ask]] = []
    for tool, requirements in tools.items():
        tables = [resolver.tables[body_of(r)] for r in requirements]
        asks = resolver.asks(identity.principal, LIST, tool, None, tables)
        if asks is None:
            return set(tools)  # no request for an anonymous caller: nothing to show them
        by_tool.extend((tool, ask) for ask in asks)
    verdicts: list[Verdict | None] = [resolver.cached(ask) for _, ask in by_tool]
    missing = [i for i, v in enumerate(verdicts) if v is None]
    if missing:
        for i, verdict in zip(missing, await resolver.ask([by_tool[i][1] for i in missing]),
                              strict=True):
            verdicts[i] = verdict
    return {tool for (tool, _), verdict in zip(by_tool, verdicts, strict=True)
            if verdict is None or verdict.decision is not True}
