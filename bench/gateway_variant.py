"""A gateway process for bench_telemetry: what `mcp-preconditions gateway --listen ... -- COMMAND`
wires (the decision log on stderr, tracing from OTEL_*), with metrics on or off. The command always
counts, so the side-by-side figure needs a gateway that does not: the library's own
`Gateway(telemetry=GatewayTelemetry(None))`.

    python -m bench.gateway_variant PORT on|off POLICY -- COMMAND [ARG ...]
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence

import anyio

from mcp_preconditions.cli._sockets import listening_socket
from mcp_preconditions.gateway import Gateway, ServerSpec
from mcp_preconditions.gateway.downstream.listener import serve_http
from mcp_preconditions.guard import Guard
from mcp_preconditions.policy.load import load_policy
from mcp_preconditions.principal import ANONYMOUS
from mcp_preconditions.telemetry import GatewayTelemetry, Metrics, configure_tracing


def main(argv: Sequence[str]) -> None:
    port, metrics_on, policy, separator, command, *args = argv
    if separator != "--" or metrics_on not in ("on", "off"):
        raise SystemExit(__doc__)
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(name)s: %(message)s")
    logging.getLogger("mcp_preconditions.decisions").setLevel(logging.INFO)  # as the command does
    tracing = configure_tracing(service_name="bench-gateway")
    metrics = Metrics() if metrics_on == "on" else None
    gateway = Gateway(Guard(load_policy(policy)), [ServerSpec("upstream", "", command=command,
                                                              args=tuple(args))],
                      lambda _ctx: ANONYMOUS, environment=dict(os.environ),
                      telemetry=GatewayTelemetry(metrics))
    sock = listening_socket("127.0.0.1", int(port), "--listen")
    try:
        anyio.run(lambda: serve_http(gateway, sock, None, metrics=metrics))
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
        if tracing is not None:
            tracing.shutdown()


if __name__ == "__main__":
    main(sys.argv[1:])
