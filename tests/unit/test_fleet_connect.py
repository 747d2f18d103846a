"""A server's new session (SPEC §12): its prompts, resources and templates may have changed while it
was away, so its last good listings are kept but stale until listed again; a request routed by
them waits for that listing (tests/integration/test_fleet_routing.py shows it through a gateway).
"""

from __future__ import annotations

import anyio

from tests.unit.test_fleet_names import fleet_of


def test_a_new_session_makes_the_prompts_and_resources_stale_and_keeps_them() -> None:
    gateway = fleet_of("", ("a", "a__"))
    member = gateway.fleet.members["a"]
    note = [{"uri": "test://note", "name": "note"}]
    for kind in ("prompts", "resources", "templates"):
        member.catalog.listings[kind].items = list(note)
    anyio.run(gateway.fleet.connected, member)
    assert {kind: (listing.stale, listing.items) for kind, listing in member.catalog.listings.items()} \
        == {"tools": (False, []), "prompts": (True, note), "resources": (True, note),
            "templates": (True, note)}
