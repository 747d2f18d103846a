"""An AuthZEN request read as a call of one of the policy's tools (SPEC §16): the tool, its arguments
and the caller's claims, from the request and the policy's `[pdp_server]` (its action names and its
directory of subjects). Decided afterwards by the guard, exactly as the guard decides a call.

- `resource.type` "tool": the tool is `resource.id`, its arguments `resource.properties.arguments`
  (what this project's own enforcement point sends reads back exactly);
- otherwise the tool is what `[pdp_server.actions]` maps `action.name` to (or that name itself),
  its arguments `resource.properties` plus `resource_id` and `resource_type`;
- the claims: `subject.properties`, then the subject's `[pdp_server.subjects]` entry over them,
  and `subject.id` as `sub` over both (a request's properties never change who the subject is).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cachetools import LRUCache

from ..errors import Malformed
from ..pdp.wire import Entity, Evaluation
from ..policy.deciders import PdpServer
from ..principal import Principal

TOOL_TYPE = "tool"  # the resource type of a request about a tool itself
SUBJECTS_KEPT = 4096  # the principals of the last subjects asked about with properties


@dataclass(frozen=True, slots=True)
class Call:
    """What a request asks, as a call: may the principal call `tool` with `arguments`?"""

    tool: str
    arguments: Mapping[str, Any]
    principal: Principal


class Reading:
    """How one policy reads requests (its `[pdp_server]`); built once per policy revision."""

    def __init__(self, settings: PdpServer) -> None:
        self._actions = dict(settings.actions)
        self._subjects = {sid: dict(claims) for sid, claims in settings.subjects.items()}
        # A request that names a known subject and no properties (the usual one) is always the same
        # caller: one Principal each, so the guard's per-caller memo knows them from call to call.
        self._known = {sid: Principal.from_claims({**claims, "sub": sid})
                       for sid, claims in self._subjects.items()}
        self._seen: LRUCache[tuple[str, str], Principal] = LRUCache(SUBJECTS_KEPT)

    def call(self, evaluation: Evaluation) -> Call:
        """The call a request asks about; Malformed when a tool's `arguments` is not an object."""
        resource = evaluation.resource
        properties = resource.properties or {}
        if resource.type == TOOL_TYPE:
            arguments = properties.get("arguments", {})
            if not isinstance(arguments, dict):
                raise Malformed("resource.properties.arguments: must be an object")
            tool = resource.id
        else:
            name = evaluation.action.name
            tool = self._actions.get(name, name)
            arguments = {**properties, "resource_id": resource.id, "resource_type": resource.type}
        return Call(tool, arguments, self.principal(evaluation.subject))

    def principal(self, subject: Entity) -> Principal:
        """The caller's claims: the request's properties, the directory's entry, the id as `sub`.
        A subject sent again with the same properties (an enforcement point asking for the same
        caller) is the same Principal, so the guard's per-caller memo knows it."""
        if not subject.properties:
            known = self._known.get(subject.id)
            if known is not None:
                return known
        key = (subject.id, json.dumps(subject.properties, sort_keys=True, separators=(",", ":")))
        seen = self._seen.get(key)
        if seen is None:
            entry = self._subjects.get(subject.id, {})
            seen = self._seen[key] = Principal.from_claims(
                {**(subject.properties or {}), **entry, "sub": subject.id})
        return seen
