"""The `config validate|schema` subcommands: check a gateway's deployment file (a gateway.toml, or a
desktop client's `{"mcpServers": {...}}` JSON) without starting anything, and export its JSON Schema
for editors, as `policy validate|schema` do for a policy.
"""

from __future__ import annotations

import argparse

from ._output import OK, print_json


def run_validate(args: argparse.Namespace) -> int:
    """`config validate FILE`: a `.json` file is read as a desktop config, anything else as a
    gateway.toml. Exit 0 with one `OK:` line, else 2 with every problem by key path."""
    from ..gateway.config import load_config, load_servers

    path: str = args.file
    desktop = path.endswith(".json")
    found = load_servers(path) if desktop else load_config(path)
    servers = ", ".join(s.key for s in found.servers)
    policy = "" if found.policy is None else f"; policy {found.policy}"
    print(f"OK: {path} ({len(found.servers)} server(s): {servers}{policy})")
    return OK


def run_schema(args: argparse.Namespace) -> int:
    """`config schema [--desktop]`: the JSON Schema of a gateway.toml, or of the desktop JSON."""
    from ..gateway.config import config_schema

    print_json(config_schema("json" if args.desktop else "toml"))
    return OK


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `config` and its own subcommands to the main parser."""
    config = subparsers.add_parser(
        "config", help="validate a gateway.toml or desktop config, print its JSON Schema",
        description="Work with the gateway's deployment files: a gateway.toml, or a desktop "
                    'client\'s {"mcpServers": {...}} JSON (gateway --config / --servers).')
    sub = config.add_subparsers(dest="config_command", required=True, metavar="COMMAND")
    check = sub.add_parser(
        "validate", help="validate a gateway.toml or a desktop config JSON",
        description="Validate a gateway.toml (or, for a file ending in .json, a desktop config): "
                    "every problem by key path, an unset env:VAR and a command that is not found "
                    "included. Nothing is started. Exit 0 when valid, 2 otherwise.")
    check.add_argument("file", metavar="FILE", help="gateway.toml, or a desktop config .json")
    check.set_defaults(func=run_validate)
    schema = sub.add_parser(
        "schema", help="print the JSON Schema of a gateway.toml (or of the desktop JSON)",
        description="Print the JSON Schema of a gateway.toml, for editors; with --desktop, of the "
                    "desktop client JSON that gateway --servers reads.")
    schema.add_argument("--desktop", action="store_true",
                        help='the schema of a desktop {"mcpServers": {...}} JSON instead')
    schema.set_defaults(func=run_schema)


__all__ = ["register"]
