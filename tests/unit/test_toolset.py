"""The listing rules both paths share (toolset.py), alone: every page of a listing or none, a listing
read as untrusted input, own requirements registered in one swap, what is refused before the guard
and in which order, and `list_changed` only for callers whose view changed. The same rules through
a hosted server and a real gateway: tests/integration/test_one_rule_set.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from typing import Any

import pytest

from mcp_preconditions.errors import ListingError
from mcp_preconditions.guard import Guard
from mcp_preconditions.outcomes import Refusal, Refused
from mcp_preconditions.policy.load import parse_policy
from mcp_preconditions.principal import ANONYMOUS, Credentials
from mcp_preconditions.toolset import (
    Views,
    enforce,
    every_page,
    read_listing,
    refused,
    seen,
    shown_names,
)
from mcp_preconditions.wire import META_KEY


def pages(*answers: Any) -> Any:
    """A fetch answering `answers` in turn, and the cursors it was asked for."""
    asked: list[str | None] = []

    async def fetch(cursor: str | None) -> Any:
        asked.append(cursor)
        return answers[len(asked) - 1]
    fetch.asked = asked  # type: ignore[attr-defined]
    return fetch


def test_every_page_is_read_in_order_and_an_empty_cursor_ends_it() -> None:
    fetch = pages({"tools": [{"name": "a"}], "nextCursor": "2"}, {"tools": [{"name": "b"}],
                                                                  "nextCursor": ""})
    assert asyncio.run(every_page(fetch)) == [{"name": "a"}, {"name": "b"}]
    assert fetch.asked == [None, "2"]


@pytest.mark.parametrize(("answers", "message"), [
    (["not a page"], "tools/list answered without a 'tools' list"),
    ([{"tools": {"name": "a"}}], "tools/list answered without a 'tools' list"),
    ([{"tools": [{"name": "a"}], "nextCursor": "2"}, {"tools": [{"name": "b"}, "c"]}],
     "tools/list entry #2 is not an object"),
    ([{"tools": [], "nextCursor": 7}], "tools/list nextCursor is not a string"),
    ([{"tools": [], "nextCursor": "again"}] * 3, "tools/list has more than 3 pages"),
])
def test_a_listing_that_cannot_be_read_whole_is_one_error(answers: list[Any], message: str) -> None:
    with pytest.raises(ListingError) as raised:
        asyncio.run(every_page(pages(*answers), max_pages=3))
    assert str(raised.value) == message


def test_a_listing_is_read_as_untrusted_input() -> None:
    listed = read_listing([
        {"name": "dup", "_meta": {META_KEY: ["env:a"]}}, {"name": "dup"}, "garbage", {"title": "x"},
        {"name": "bad", "_meta": {META_KEY: "env:a"}}, {"name": "typed", "outputSchema": {}},
        {"name": "both", "execution": {"requirements": ["env:a"]}, "_meta": {META_KEY: ["env:b"]}}])
    assert list(listed.tools) == ["dup", "bad", "typed", "both"]
    assert listed.tools["dup"] == {"name": "dup", "_meta": {META_KEY: ["env:a"]}}  # the first copy
    assert listed.duplicates == {"dup"}
    assert listed.own == {"dup": ("env:a",), "typed": (), "both": ("env:a", "env:b")}
    assert listed.unreadable == {"bad": "tool 'bad': _meta['io.github.mcp-preconditions/"
                                        "requirements'] must be a list of requirement strings, not str"}
    assert listed.typed == {"typed"}


def guard(policy: bytes = b'environment = ["staging"]\n') -> Guard:
    return Guard(parse_policy(policy, "p.toml"), entry_points=False)


def test_own_requirements_are_registered_in_one_swap_and_the_unenforceable_refused() -> None:
    g = guard(b'environment = ["staging"]\n[tools.a]\nrequirements = ["env:b"]\n')
    refused_now = enforce(g, {"a": ("env:a",), "bad": ("nonamespace",), "c": ("env:c",)})
    assert refused_now == {"bad": "tool 'bad': requirement 'nonamespace' has no namespace (expected "
                                  "NAMESPACE:..., known namespaces: 'approval', 'auth', 'capability', 'env', "
                                  "'feature', 'pdp', 'quota', 'state')"}
    assert g.requirements_for("a") == ("env:a", "env:b")  # the listing's own ∪ the policy's
    assert g.own_requirements("c") == ("env:c",) and g.own_requirements("bad") == ()
    registration = g.registration
    assert enforce(g, {"a": ("env:a",)}, forget=["c"]) == {}  # c forgotten, a unchanged
    assert g.own_requirements("c") == () and g.requirements_for("a") == ("env:a", "env:b")
    assert g.registration is not registration
    registration = g.registration
    assert enforce(g, {"a": ("env:a",)}) == {}
    assert g.registration is registration  # nothing changed: nothing compiled


def test_what_is_refused_before_the_guard_and_in_which_order() -> None:
    unusable = Refusal(Refused.UNUSABLE, "the server's policy is unusable")
    assert refused(unusable="the server's policy is unusable", twice=True, malformed="x") == (
        unusable, "the server's policy is unusable")
    assert refused(unusable=None, twice=True, malformed="x") == (
        Refusal(Refused.UNLISTED, "its server lists more than one tool of that name"), "")
    assert refused(unusable=None, twice=False, malformed="why") == (
        Refusal(Refused.MALFORMED, "its requirements cannot be read"), "why")
    assert refused(unusable=None, twice=False, malformed=None) is None


def test_list_filtering_shows_what_this_caller_may_call_and_nothing_refused() -> None:
    g = guard(b'environment = ["staging"]\nconfidential = ["env:hidden"]\n'
              b'[tools.prod]\nrequirements = ["env:production"]\n'
              b'[tools.secretly]\nrequirements = ["env:staging", "env:hidden"]\n')
    names = ["open", "prod", "broken", "secretly"]
    assert asyncio.run(shown_names(g, names, ANONYMOUS, filtering=False)) == names
    assert asyncio.run(shown_names(g, names, ANONYMOUS, filtering=True, refused={"broken"})) == [
        "open"]
    assert seen(g, ["open", "secretly"]) == (("open", ()), ("secretly", ("env:staging",)))


def test_list_changed_goes_to_the_callers_whose_view_changed_only() -> None:
    told: list[str] = []
    views = Views()
    current = {"alice": "v1", "bob": "v1", "carol": "v1"}

    def notify(who: str) -> Any:
        async def send() -> None:
            if who == "bob":
                raise ConnectionError("gone")  # one caller gone wrong keeps nobody else untold
            told.append(who)
        return send

    for who in current:
        assert views.watch(who, Credentials(token=who), current[who], notify(who))
    assert not views.watch("alice", Credentials(token="alice"), "v1", notify("alice"))  # again
    assert "alice" in views and len(views) == 3

    async def view_of(credentials: Credentials) -> Hashable:
        if credentials.token == "carol":
            raise RuntimeError("cannot tell")  # told once, to list again
        return current[str(credentials.token)]

    current["bob"] = "v2"
    assert asyncio.run(views.refresh(view_of)) == 2  # bob (whose channel failed) and carol
    assert told == ["carol"]
    assert asyncio.run(views.refresh(view_of)) == 0
    views.drop("carol")
    assert "carol" not in views
