"""The schema check of a client request (gateway/dispatch.py `check`) gives the MCP SDK's verdict on
every params, whether or not it took the short way for a plain `tools/call` (a name and an object of
arguments): differential against the SDK's per-version models, on generated params."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from mcp_preconditions.gateway import bridge
from mcp_preconditions.gateway.dispatch import check, plain_call
from mcp_preconditions.gateway.jsonrpc import INVALID_PARAMS, RpcError

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
                    | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=8)
PARAMS = st.one_of(
    st.none(), JSON,
    st.dictionaries(st.sampled_from(["name", "arguments", "_meta", "task", "other"]), JSON,
                    max_size=4),
    st.fixed_dictionaries({"name": st.text(max_size=5)},
                          optional={"arguments": st.none() | st.dictionaries(st.text(max_size=3), JSON,
                                                                            max_size=3)}))
VERSIONS = sorted({*HANDSHAKE_PROTOCOL_VERSIONS, *MODERN_PROTOCOL_VERSIONS})


def sdk_verdict(version: str, params: Any) -> str:
    try:
        bridge.validate_client_request("tools/call", version, params)
    except ValidationError:
        return "invalid"
    except (KeyError, ValueError) as exc:
        return type(exc).__name__
    return "valid"


def verdict(version: str, params: Any) -> str:
    try:
        check("tools/call", version, params)
    except RpcError as exc:
        return "invalid" if exc.code == INVALID_PARAMS else f"rpc {exc.code}"
    except (KeyError, ValueError) as exc:
        return type(exc).__name__
    return "valid"


@settings(max_examples=400, deadline=None)
@given(version=st.sampled_from(VERSIONS), params=PARAMS)
def test_the_check_gives_the_sdks_verdict_on_any_params(version: str, params: Any) -> None:
    assert verdict(version, params) == sdk_verdict(version, params)


@pytest.mark.parametrize(("params", "plain"), [
    ({"name": "echo"}, True), ({"name": "echo", "arguments": {"message": "hi"}}, True),
    ({"name": "echo", "arguments": None}, True), ({"name": "echo", "arguments": {}}, True),
    ({"name": 5}, False), ({"arguments": {}}, False), ({"name": "echo", "arguments": []}, False),
    ({"name": "echo", "_meta": {"progressToken": 1}}, False), ({"name": "echo", "task": {}}, False),
    ({"name": "echo", "other": 1}, False), (None, False), ([], False)])
def test_what_counts_as_a_plain_call(params: Any, plain: bool) -> None:
    assert plain_call(params) is plain
    if plain:  # and the SDK agrees at every handshake-era version
        assert all(sdk_verdict(v, params) == "valid" for v in HANDSHAKE_PROTOCOL_VERSIONS)
