"""Strict scalars (issue 22, item 10; SPEC §5): every policy field takes only its own TOML type.
`call_timeout_seconds = true` or `"30"` is a load error naming the key path, never a 1- or
30-second timeout; an integer is fine where seconds are a float. Checked field by field over the
whole Policy model (walked from its annotations, so a new field is covered too), and against the
exported JSON Schema.
"""

from __future__ import annotations

import json
import tomllib
import types
import typing
from collections.abc import Iterator
from typing import Annotated, Any, Literal, Union

import jsonschema
import pytest
from pydantic import BaseModel

from mcp_preconditions import PolicyError, parse_policy, policy_schema
from mcp_preconditions.policy.model import Policy


def problems(text: str) -> list[str]:
    with pytest.raises(PolicyError) as info:
        parse_policy(text.encode(), "p.toml")
    return info.value.problems


@pytest.mark.parametrize(("text", "line"), [
    ("[gateway]\ncall_timeout_seconds = true",
     "gateway.call_timeout_seconds: Input should be a valid number"),
    ('[gateway]\ncall_timeout_seconds = "30"',
     "gateway.call_timeout_seconds: Input should be a valid number"),
    ('[guard]\nlookup_timeout_seconds = "0.5"',
     "guard.lookup_timeout_seconds: Input should be a valid number"),
    ("[guard]\nlist_filtering = 1", "guard.list_filtering: Input should be a valid boolean"),
    ('[guard]\nlist_filtering = "true"', "guard.list_filtering: Input should be a valid boolean"),
    ("[auth]\nleeway_seconds = true", "auth.leeway_seconds: Input should be a valid integer"),
    ("[auth]\nleeway_seconds = 30.0", "auth.leeway_seconds: Input should be a valid integer"),
    ('[auth]\ncache_max_entries = "100"', "auth.cache_max_entries: Input should be a valid integer"),
    ('[auth]\ndiscovery = "yes"', "auth.discovery: Input should be a valid boolean"),
    ("[state]\nttl_seconds = false", "state.ttl_seconds: Input should be a valid number"),
    ('[decision_log]\nopentelemetry = "no"', "decision_log.opentelemetry: Input should be a valid boolean"),
    ("[decision_log]\njsonl_path = 7", "decision_log.jsonl_path: Input should be a valid string"),
    ("environment_variable = false", "environment_variable: Input should be a valid string"),
    ("confidential = [true]", "confidential[0]: Input should be a valid string"),
    ("[tools.t]\nrequirements = [1]", "tools.t.requirements[0]: Input should be a valid string"),
])
def test_a_scalar_of_another_toml_type_is_a_load_error_naming_its_key(text: str, line: str) -> None:
    assert problems(text) == [line]


def test_an_integer_is_fine_where_seconds_are_a_float() -> None:
    source = parse_policy(b"[gateway]\ncall_timeout_seconds = 30\n[state]\nttl_seconds = 0\n"
                          b"[guard]\nlookup_timeout_seconds = 1\n", "p.toml")
    assert source.policy.gateway.call_timeout_seconds == 30.0
    assert isinstance(source.policy.gateway.call_timeout_seconds, float | int)
    assert source.policy.guard.lookup_timeout_seconds == 1


# --- every field of the model -----------------------------------------------------------------------
KEY = "/k"  # the one key of a table of values (a JSON Pointer, for argument conditions)
# What a section needs besides the field under test, so that only that field is wrong.
REQUIRED: dict[tuple[str, ...], dict[str, Any]] = {
    ("state", "redis"): {"url": "redis://127.0.0.1:6379/0"},
    ("auth", "introspection"): {"endpoint": "https://idp.example/introspect", "client_id_env": "ID",
                                "client_secret_env": "SECRET"},
    ("features", "openfeature"): {"path": "flags.json"},
    ("auth", "sign_in"): {"client_id": "env:ID", "client_secret": "env:SECRET"},
    ("capabilities", "grants"): {"capabilities": ["x"]},
    ("quotas", KEY): {"calls": 3, "per_seconds": 60},
    ("approvals", KEY): {"approvers": "self"},
    ("pdp", KEY): {"url": "https://pdp.example.com"},
}
# Wrong values per expected TOML type (what a careless or hostile file might hold instead).
WRONG: dict[str, tuple[Any, ...]] = {
    "boolean": (1, "true", 1.0), "integer": (True, "30", 30.5), "number": (True, "30"),
    "string": (1, True, 1.5), "choice": (1, True),
    "union": (1.5,),  # str or list (audience, aliases, JWK members); str, int or bool (arguments)
}
MESSAGES = {"boolean": "Input should be a valid boolean", "integer": "Input should be a valid integer",
            "number": "Input should be a valid number", "string": "Input should be a valid string"}


def _kind(annotation: Any) -> str | None:
    """The TOML type a scalar annotation takes: boolean, integer, number, string, choice (a
    Literal), `union` for str-or-list fields; None when it is not a scalar."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _kind(typing.get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        kinds = {_kind(a) for a in members}
        return kinds.pop() if len(kinds) == 1 else "union"
    if origin is Literal:
        return "choice"
    return {bool: "boolean", int: "integer", float: "number", str: "string"}.get(annotation)


def _unwrap(annotation: Any) -> Any:
    """Annotated and Optional peeled off."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _unwrap(members[0]) if len(members) == 1 else annotation
    return annotation


def leaves(model: type[BaseModel], path: tuple[str | int, ...] = ()
           ) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """Every scalar place of the model: (key path into the file, its kind). A list or a table of
    values is reached through one element ([0], or the key KEY)."""
    for name, field in model.model_fields.items():
        yield from _places(field.annotation, (*path, name))


def _places(annotation: Any, here: tuple[str | int, ...]) -> Iterator[tuple[tuple[str | int, ...], str]]:
    annotation = _unwrap(annotation)
    origin = typing.get_origin(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield from leaves(annotation, here)
    elif origin is list:
        yield from _places(typing.get_args(annotation)[0], (*here, 0))
    elif origin is dict:
        yield from _places(typing.get_args(annotation)[1], (*here, KEY))
    elif _kind(annotation) is not None:
        yield here, str(_kind(annotation))


def with_value(path: tuple[str | int, ...], value: Any, names: tuple[str, ...] = ()) -> Any:
    """A policy (as TOML data) holding `value` at `path`, plus what each section on the way
    requires (so that only the value under test is wrong)."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(head, int):
        return [with_value(rest, value, names)]
    return {**REQUIRED.get(names, {}), head: with_value(rest, value, (*names, head))}


def toml(data: dict[str, Any], prefix: str = "") -> str:
    """A tiny TOML writer for these test documents (scalars, arrays of scalars, tables, arrays of
    tables)."""
    lines, tables = [], []
    for key, value in data.items():
        name = json.dumps(key)
        if isinstance(value, dict):
            tables.append(f"\n[{prefix}{name}]\n" + toml(value, f"{prefix}{name}."))
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            tables += [f"\n[[{prefix}{name}]]\n" + toml(item, f"{prefix}{name}.") for item in value]
        else:
            lines.append(f"{name} = {json.dumps(value)}")
    return "\n".join(lines) + "".join(tables)


def shown(path: tuple[str | int, ...]) -> str:
    """The key path as a load error names it."""
    out = ""
    for part in path:
        bare = part.replace("_", "a").replace("-", "a").isalnum() if isinstance(part, str) else True
        out += (f"[{part}]" if isinstance(part, int)
                else ("." if out else "") + (part if bare else json.dumps(part)))
    return out


LEAVES = list(leaves(Policy))


def test_the_walk_reaches_every_section() -> None:
    places = {shown(p) for p, _ in LEAVES}
    assert {"gateway.call_timeout_seconds", "guard.list_filtering", "auth.leeway_seconds",
            "auth.introspection.timeout_seconds", "state.redis.read_timeout_seconds",
            "features.openfeature.poll_interval_seconds", "capabilities.grants[0].when[0]",
            "decision_log.opentelemetry", 'tools."/k".requirements[0]', 'features.flags."/k"',
            "environment[0]", "environment_variable", 'capabilities.grants[0].arguments."/k"[0]',
            'auth.keys[0]."/k"', 'auth.scope_implications."/k"[0]', "auth.audience"} <= places
    assert len(LEAVES) == len(places) >= 45


@pytest.mark.parametrize(("path", "kind"), LEAVES, ids=[shown(p) for p, _ in LEAVES])
def test_every_scalar_field_takes_only_its_own_toml_type(path: tuple[str | int, ...], kind: str) -> None:
    schema = policy_schema()
    for value in WRONG[kind]:
        data = with_value(path, value)
        text = toml(data)
        assert tomllib.loads(text) == data, text  # the document says what the test means
        found = problems(text)
        assert found, (shown(path), value)
        assert all(line.startswith(shown(path) + ":") for line in found), found
        if kind in MESSAGES:
            assert found == [f"{shown(path)}: {MESSAGES[kind]}"]
        with pytest.raises(jsonschema.ValidationError):  # the exported schema says the same
            jsonschema.validate(data, schema)
