"""The gateway's routing tables (SPEC §12): visible names are PREFIX + name, names two servers share
and names one server lists twice are refused, resources go to the server that listed the URI (or
whose template matches it), a URI two servers claim is ambiguous, and a URI nobody listed goes only
to the one server able to take it, never to a guess.
"""

from __future__ import annotations

from mcp_preconditions.gateway.route import ServerListing, Target, build_routes, visible

SUBSCRIBE = frozenset({"resources", "subscribe"})


def test_visible_names_collisions_and_duplicates() -> None:
    routes = build_routes([
        ServerListing("fs", "fs__", ["read", "write", "dup", "dup"], frozenset({"dup"}), ["p"]),
        ServerListing("everything", "", ["echo", "fs__read"], prompts=["p"]),
        ServerListing("crm", "crm__", None),  # never listed
    ])
    assert routes.tools == {"fs__write": Target("fs", "write"), "fs__dup": Target("fs", "dup"),
                            "echo": Target("everything", "echo")}
    assert routes.collisions == {"fs__read": ("everything", "fs")}
    assert routes.duplicates == {"fs__dup": "fs"}
    assert routes.prompts == {"fs__p": Target("fs", "p"), "p": Target("everything", "p")}
    assert routes.tool_of("fs") == {"fs__write": "write", "fs__dup": "dup"}
    assert visible({"name": "read", "x": 1}, "fs__") == {"name": "fs__read", "x": 1}
    assert visible({"name": "read"}, "") == {"name": "read"}


def test_resources_by_uri_template_and_ambiguity() -> None:
    routes = build_routes([
        ServerListing("a", "a__", resources=["file:///a", "shared://x"], templates=["a://{id}"],
                      serves=SUBSCRIBE),
        ServerListing("b", "b__", resources=["shared://x"], templates=["t://{id}", "u://{id}"],
                      serves=frozenset({"resources"})),
        ServerListing("c", "c__", templates=["t://{name}"], serves=frozenset({"resources"})),
    ])
    assert routes.resource("file:///a") == "a"
    assert routes.resource("shared://x") == ("a", "b")  # listed by two: never guessed
    assert routes.resource("a://7") == "a"
    assert routes.resource("u://7") == "b"
    assert routes.resource("t://7") == ("b", "c")  # two templates match
    assert routes.resource("nowhere://1") is None  # three serve resources: none is chosen
    assert routes.resource("nowhere://1", subscription=True) == "a"  # only a takes subscriptions
    assert routes.template("a://{id}") == "a" and routes.template("x://{y}") is None


def test_a_uri_nobody_listed_goes_to_the_only_server_able_to_take_it() -> None:
    one = build_routes([ServerListing("solo", "")])
    assert one.resource("any://thing") == "solo" and one.template("any://{x}") == "solo"
    beside = build_routes([ServerListing("everything", "", serves=SUBSCRIBE),
                           ServerListing("time", "time__", serves=frozenset({"resources"})),
                           ServerListing("tools-only", "t__")])
    assert beside.resource("test://watched", subscription=True) == "everything"
    assert beside.resource("test://watched") is None  # two serve resources
    both = build_routes([ServerListing("a", "a__", serves=SUBSCRIBE),
                         ServerListing("b", "b__", serves=SUBSCRIBE)])
    assert both.resource("test://watched", subscription=True) is None
    assert build_routes([ServerListing("a", "a__", serves=frozenset({"resources"})),
                         ServerListing("b", "b__")]).resource("x://1") == "a"
