"""An example custom namespace: `ticket:ID` holds while change ticket ID is approved.

Published through the `mcp_preconditions.resolvers` entry-point group (see pyproject.toml); the
guard finds it at start-up. Tickets are read from the JSON file named by MCP_PRECONDITIONS_TICKETS.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path
from typing import Any

from mcp_preconditions import CallContext, Outcome

STORE_VARIABLE = "MCP_PRECONDITIONS_TICKETS"
# ASCII only: a ticket key is compared exactly, so lookalike letters must not even validate.
_KEY = re.compile(r"[A-Z][A-Z0-9]*-[0-9]+", re.ASCII)


def read_store(path: Path) -> dict[str, Any]:
    """The ticket file: a JSON object mapping ticket keys to their status ("approved", "open"...)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object of ticket statuses")
    return data


class TicketResolver:
    """`ticket:KEY` (e.g. `ticket:OPS-123`): satisfied iff ticket KEY's status is exactly "approved"."""

    namespace = "ticket"
    forms = ("ticket:KEY (e.g. ticket:OPS-123)",)

    def validate(self, requirement: str) -> str | None:
        key = requirement.partition(":")[2]
        return None if _KEY.fullmatch(key) else "ticket: needs a ticket key such as OPS-123"

    async def resolve(self, requirement: str, context: CallContext) -> Outcome:
        key = requirement.partition(":")[2]
        store = os.environ.get(STORE_VARIABLE)
        if not store:
            # No store means we cannot know: an error, which the guard never treats as an allow.
            return Outcome.error(requirement, f"no ticket store configured ({STORE_VARIABLE})")
        # The file may sit on slow storage: read it off the event loop (the guard times us out).
        tickets = await asyncio.to_thread(read_store, Path(store))
        status = tickets.get(key)
        if status == "approved":
            return Outcome.satisfied(requirement, f"ticket {key} is approved")
        if status is None:
            return Outcome.unsatisfied(requirement, f"ticket {key} does not exist")
        return Outcome.unsatisfied(requirement, f"ticket {key} is {status!r}, not 'approved'")


__all__ = ["STORE_VARIABLE", "TicketResolver", "read_store"]
