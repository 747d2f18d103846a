"""The upstream options every command that reaches a live MCP server takes (`gateway`, `tools`):
a stdio command after `--`, or `--upstream-url URL` with `--upstream-header NAME=env:VAR`.
Checked here into a gateway `Target`, one clear InputError line per problem.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from ..errors import InputError
from ..policy.load import PolicySource

if TYPE_CHECKING:  # the gateway needs the mcp extra; imported when a command runs
    from ..gateway.upstream.session import Target

_HEADER = re.compile(r"([!#$%&'*+.^_`|~0-9A-Za-z-]+)=env:([A-Za-z_][A-Za-z0-9_]*)")


def add_upstream_options(parser: argparse.ArgumentParser) -> None:
    """`--upstream-url`, `--upstream-header` and the command after `--`. Add them last: the command
    takes every remaining argument."""
    parser.add_argument("--upstream-url", metavar="URL", help="a streamable-HTTP MCP server")
    parser.add_argument("--upstream-header", action="append", default=[], metavar="NAME=env:VAR",
                        help="an HTTP header for the upstream, its value read from $VAR")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARG ...]",
                        help="the stdio MCP server to start")


def target_from(args: argparse.Namespace, source: PolicySource | None) -> Target:
    """The one upstream the options name. A stdio command inherits this process's environment,
    minus the variables `source` (the policy, when there is one) names as the gateway's secrets."""
    from ..gateway.upstream.session import HttpTarget, StdioTarget

    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if args.upstream_url is None and not command:
        raise InputError("no upstream: give --upstream-url URL or a command after --")
    if args.upstream_url is not None and command:
        raise InputError("two upstreams: give --upstream-url URL or a command after --, not both")
    if args.upstream_url is None:
        if args.upstream_header:
            raise InputError("--upstream-header is for --upstream-url only")
        if shutil.which(command[0]) is None:
            raise InputError(f"cannot start the upstream: command not found: {command[0]}")
        return StdioTarget(command[0], tuple(command[1:]), upstream_environment(source))
    url = args.upstream_url
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError(f"--upstream-url: not an http(s) URL: {url!r}")
    try:
        parts.port  # noqa: B018  (a port out of range raises here)
    except ValueError:
        raise InputError(f"--upstream-url: port out of range: {url!r}") from None
    return HttpTarget(url, dict(_header(h) for h in args.upstream_header))


def _header(spec: str) -> tuple[str, str]:
    match = _HEADER.fullmatch(spec)
    if match is None:
        raise InputError(f"--upstream-header: expected NAME=env:VAR, got {spec!r}")
    from ..gateway.upstream.client import field_problem

    name, var = match.groups()
    value = os.environ.get(var)
    if value is None:
        raise InputError(f"--upstream-header {name}: environment variable {var} is not set")
    problem = field_problem(name, value)
    if problem is not None:  # refused, never written: it could add headers of its own
        raise InputError(f"--upstream-header {name}: environment variable {var}: {problem}")
    return name, value


def upstream_environment(source: PolicySource | None) -> dict[str, str]:
    """This process's environment minus the variables the policy names as the gateway's own
    secrets (none without a policy)."""
    if source is None:
        return dict(os.environ)
    policy = source.policy
    secrets = {policy.state.redis.url_env if policy.state.redis else None}
    if policy.auth.introspection is not None:
        secrets |= {policy.auth.introspection.client_id_env,
                    policy.auth.introspection.client_secret_env}
    return {k: v for k, v in os.environ.items() if k not in secrets}


__all__ = ["add_upstream_options", "target_from", "upstream_environment"]
