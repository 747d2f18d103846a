"""gateway/bridge.py mirrors `mcp_types.methods` (which imports every protocol version's models at
once) and loads a version's models only when that version is first used: the tables equal the
SDK's, and a gateway serving 2025-11-25 clients never loads the 2026-07-28 models."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from mcp_types import methods
from mcp_types.version import KNOWN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from mcp_preconditions.gateway import bridge


def test_each_version_defines_the_requests_the_sdk_defines() -> None:
    assert bridge.SPEC_CLIENT_METHODS == methods.SPEC_CLIENT_METHODS
    for method in sorted(bridge.SPEC_CLIENT_METHODS):
        for version in KNOWN_PROTOCOL_VERSIONS:
            expected = methods.CLIENT_REQUESTS.get((method, version))
            if expected is None:
                with pytest.raises(KeyError):
                    bridge.validate_client_request(method, version, None)
            else:
                assert bridge.request_model(method, version) is expected, (method, version)


def test_the_relayed_server_requests_and_the_method_sets_are_the_sdks() -> None:
    for method, model in bridge.SERVER_REQUESTS.items():
        assert model is methods.MONOLITH_REQUESTS[method]
        assert bridge.SERVER_RESULTS[method] == methods.MONOLITH_RESULTS[method]
    assert bridge.input_required_methods() == methods.INPUT_REQUIRED_METHODS
    assert bridge.cacheable_methods() == methods.CACHEABLE_METHODS


@pytest.mark.parametrize("result", [{"resultType": "input_required"}, {"resultType": "complete"}, {},
                                    [], None, "input_required"])
def test_input_required_is_decided_as_the_sdk_decides(result: object) -> None:
    assert bridge.is_input_required(result) == methods.is_input_required(result)


def test_a_request_is_refused_as_the_sdk_refuses_it() -> None:
    with pytest.raises(ValueError, match="version must be a known protocol version, got '2099-01-01'"):
        bridge.validate_client_request("tools/list", "2099-01-01", None)
    with pytest.raises(KeyError):
        bridge.validate_client_request("initialize", "2026-07-28", {})
    with pytest.raises(ValidationError):
        bridge.validate_client_request("tools/call", "2025-11-25", {"arguments": {}})
    bridge.validate_client_request("tools/call", "2025-11-25", {"name": "echo"})


def test_capabilities_are_shaped_by_the_clients_version() -> None:
    upstream: dict[str, Any] = {"tools": {}, "tasks": {"list": {}}, "extensions": {"x": {}}}
    assert bridge.downstream_capabilities(upstream, "2025-11-25") == \
        bridge.downstream_capabilities(upstream, "2024-11-05")
    assert "tools" in bridge.downstream_capabilities(upstream, "2026-07-28")


SERVE_2025 = """
import sys
from mcp_preconditions.cli import gateway_cmds
from mcp_preconditions.gateway import bridge, callers, dispatch, forward
from mcp_preconditions.gateway.downstream import listener
dispatch.check("tools/call", "2025-11-25", {"name": "echo", "arguments": {}})
bridge.downstream_capabilities({"tools": {}}, "2025-11-25")
bridge.downstream_result("tools/list", {"tools": []}, "2025-11-25")
callers._valid("roots/list")
callers._valid("roots/list", result={"roots": []})
print(sorted(m for m in sys.modules if m in ("mcp_types.methods", "mcp_types._v2026_07_28")))
bridge.request_model("tools/list", "2026-07-28")
print("mcp_types._v2026_07_28" in sys.modules)
"""


@pytest.mark.interop
def test_a_gateway_serving_2025_clients_never_loads_the_2026_models() -> None:
    """Interop: what a fresh interpreter imports is what it checks (this test process has loaded
    every model already), so it runs one."""
    out = subprocess.run([sys.executable, "-c", SERVE_2025], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == ["[]", "True"]
