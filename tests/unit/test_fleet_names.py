"""The policy's tool names against a fleet's (SPEC §10, §12): a `[tools.NAME]` that nearly matches
one server's visible name makes the policy unusable for that server alone. A server's own name of
a tool it shows under a prefix (a one-server policy reused with `--servers`) is such a near miss.
"""

from __future__ import annotations

from mcp_preconditions import Guard
from mcp_preconditions.gateway import Gateway, ServerSpec
from mcp_preconditions.names import near_miss_message
from mcp_preconditions.policy.load import parse_policy
from mcp_preconditions.principal import Credentials


def fleet_of(policy: str, *servers: tuple[str, str]) -> Gateway:
    """A gateway over servers (key, prefix) that are never started: their listings are applied
    by hand, as a server's answer would be."""
    guard = Guard(parse_policy(policy.encode(), "p.toml"), entry_points=False)
    specs = [ServerSpec(key, prefix, command="unused") for key, prefix in servers]
    return Gateway(guard, specs, lambda _call: Credentials(), environment={})


def lists(gateway: Gateway, key: str, *names: str) -> None:
    """`key`'s tools/list answered with these names (as `Listing.refresh` applies an answer)."""
    catalog = gateway.fleet.members[key].catalog
    listing = catalog.listings["tools"]
    listing.items = [{"name": n, "inputSchema": {"type": "object"}} for n in names]
    catalog.apply_tools(listing.items)


def near(*pairs: tuple[str, str]) -> str:
    """A server's problem: its near misses (policy name, tool), each as the operator is told it."""
    return "; ".join(near_miss_message(name, tool) for name, tool in pairs)


def problems(gateway: Gateway) -> dict[str, str | None]:
    return {m.key: m.problem for m in gateway.fleet}


WRITE_FILE = '[tools.write_file]\nrequirements = ["auth:oauth2"]\n'


def test_a_servers_own_name_under_a_prefix_is_a_near_miss() -> None:
    gateway = fleet_of(WRITE_FILE, ("fs", "fs__"), ("time", "time__"))
    lists(gateway, "fs", "read_file", "write_file")
    lists(gateway, "time", "get_time")
    assert problems(gateway) == {
        "fs": near(("write_file", "fs__write_file")), "time": None}


def test_a_name_some_server_shows_bare_is_no_near_miss_of_another() -> None:
    gateway = fleet_of(WRITE_FILE, ("fs", "fs__"), ("bare", ""))
    lists(gateway, "fs", "write_file")
    lists(gateway, "bare", "write_file")
    assert problems(gateway) == {"fs": None, "bare": None}


def test_the_single_server_case_with_an_empty_prefix_matches_exactly() -> None:
    gateway = fleet_of(WRITE_FILE, ("solo", ""))
    lists(gateway, "solo", "write_file")
    assert problems(gateway) == {"solo": None}


FS2_WRITE_FILE = '[tools.fs2__write_file]\nrequirements = ["auth:oauth2"]\n'


def test_a_name_for_a_server_not_listed_yet_condemns_no_other_server() -> None:
    gateway = fleet_of(FS2_WRITE_FILE, ("fs", "fs__"), ("fs2", "fs2__"))
    lists(gateway, "fs", "write_file")  # fs2 has not listed (it may never start)
    assert problems(gateway) == {"fs": None, "fs2": None}
    lists(gateway, "fs2", "read_file")  # nor once it lists other tools: the name is meant for fs2
    assert problems(gateway) == {"fs": None, "fs2": None}


def test_a_name_carrying_no_servers_prefix_is_judged_against_every_server() -> None:
    gateway = fleet_of('[tools.fs_write_file]\nrequirements = ["auth:oauth2"]\n'
                       '[tools.FS__read_file]\nrequirements = ["auth:oauth2"]\n',
                       ("fs", "fs__"), ("fs2", "fs2__"), ("bare", ""))
    lists(gateway, "fs", "write_file", "read_file")
    assert problems(gateway) == {
        "fs": near(("fs_write_file", "fs__write_file"), ("FS__read_file", "fs__read_file")),
        "fs2": None, "bare": None}


def test_a_server_without_a_prefix_is_judged_against_every_name() -> None:
    gateway = fleet_of('[tools.fs__wirte_file]\nrequirements = ["auth:oauth2"]\n',
                       ("fs", "fs__"), ("bare", ""))
    lists(gateway, "fs", "write_file")  # bare has not listed: fs's near miss is still one
    assert problems(gateway)["fs"] == near(("fs__wirte_file", "fs__write_file"))
    lists(gateway, "bare", "fs__wirte_fil")
    assert problems(gateway) == {
        "fs": near(("fs__wirte_file", "fs__write_file")),
        "bare": near(("fs__wirte_file", "fs__wirte_fil"))}
