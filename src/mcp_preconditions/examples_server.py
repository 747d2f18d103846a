"""The example mission-control server of SEP-2487, guarded: what `serve` and `demo` run.

Its tools match examples/mission-control-tools.json: `launch_rocket` carries the SEP's six
requirements, `get_weather` has none. The handlers are toys; the guard in front of them is real.
"""

from __future__ import annotations

import functools
from importlib.resources import files
from typing import Any

from .guard import Guard
from .integrations.mcp_sdk import GuardedMCPServer
from .policy.load import PolicySource, parse_policy

SERVER_NAME = "mission-control"
DEFAULT_POLICY = "mission-control.toml"  # in mcp_preconditions/data/

LAUNCH_REQUIREMENTS = ("auth:oauth2", "auth:claim:role:mission_control", "capability:rocket.launch",
                       "env:production", "state:weather.clear", "feature:launch_window.open")


def default_policy() -> PolicySource:
    """The embedded default policy (a copy of policies/mission-control.toml)."""
    resource = files("mcp_preconditions").joinpath("data", DEFAULT_POLICY)
    return parse_policy(resource.read_bytes(), f"(embedded) {DEFAULT_POLICY}")


def build_server(guard: Guard, **options: Any) -> GuardedMCPServer:
    """The guarded mission-control MCPServer. `options` go to GuardedMCPServer (credentials, ...)."""
    options.setdefault("log_level", "WARNING")
    server = GuardedMCPServer(SERVER_NAME, guard=guard, version="0.1.0",
                              instructions="SEP-2487 example: tools carry execution.requirements.",
                              **options)
    # No outputSchema: strict clients (MCP Inspector) validate even an isError result's
    # structuredContent against it, and a denial's structuredContent is the SPEC §3 payload.
    tool = functools.partial(server.tool, structured_output=False)

    @tool(description="Launch the rocket. Irreversible.", requirements=LAUNCH_REQUIREMENTS)
    def launch_rocket(vehicle: str) -> str:
        return f"{vehicle} has cleared the tower."

    @tool(description="Abort a launch in progress.",
                 requirements=["auth:oauth2", "capability:rocket.abort", "auth:scope:mission:write"])
    def abort_launch() -> str:
        return "Launch aborted; vehicle safed."

    @tool(description="Read the latest telemetry frame.",
                 requirements=["auth:oauth2", "capability:telemetry.read", "auth:scope:mission:read"])
    def read_telemetry() -> str:
        return "T+00:00:00 altitude 0 m, velocity 0 m/s, all systems nominal."

    @tool(description="Book a maintenance window on the pad.",
                 requirements=["env:staging", "auth:claim:realm_roles:engineer"])
    def schedule_maintenance(day: str = "") -> str:
        return f"Maintenance booked for {day or 'the next free day'}."

    @tool(description="Stream telemetry over the v2 protocol.",
                 requirements=["auth:oauth2", "feature:telemetry.v2"])
    def stream_telemetry_v2() -> str:
        return "Telemetry v2 stream opened."

    @tool(description="Report fuel levels.",
                 requirements=["auth:oauth2", "state:range.safety_officer_on_duty"])
    def fuel_status() -> str:
        return "LOX 100%, RP-1 100%."

    @tool(description="Current weather at the launch site. Anyone may call it.")
    def get_weather() -> str:
        return "Clear skies, wind 5 kn from the west."

    return server
