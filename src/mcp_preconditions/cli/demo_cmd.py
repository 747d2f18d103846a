"""The `demo` subcommand: start the mission-control server (embedded policy) over stdio, drive it
with a real MCP client, and show what happened as a narrative or (`--format json`) one document.

The run is collected first and printed after, so both formats show exactly the same facts.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from importlib.resources import as_file, files
from pathlib import Path
from typing import Any, TextIO

import anyio

from ..client import FilterResult, Knowledge
from ..files import read_claims
from ..policy.load import load_policy
from ._output import OK, PROG, add_format, fail, print_json, table

WIDTH = 100
DEMO_CLAIMS = "demo-claims.json"  # in mcp_preconditions/data/
# What the demo client declares it knows (its own token's claims, the server's environment).
DEMO_SATISFIED = ("auth:oauth2", "auth:claim:role:mission_control", "auth:scope:mission:write")
DEMO_UNSATISFIABLE = ("env:staging", "feature:telemetry.v2")
ALLOWED_CALL = ("launch_rocket", {"vehicle": "Falcon 9"})
DENIED_CALL: tuple[str, dict[str, Any]] = ("fuel_status", {})


def run_demo(args: argparse.Namespace) -> int:
    """`demo`: start the server (embedded policy) over stdio, drive it with a real MCP client."""
    with tempfile.TemporaryFile("w+", encoding="utf-8") as errlog:
        try:
            run = anyio.run(_demo, errlog)
        except Exception as exc:  # the server process failed: show why, never a traceback
            while isinstance(exc, ExceptionGroup) and len(exc.exceptions) == 1:
                exc = exc.exceptions[0]
            errlog.seek(0)
            detail = errlog.read().strip().splitlines()[-5:]
            return fail([f"demo failed: {type(exc).__name__}: {exc}",
                         *(f"demo server: {line}" for line in detail)])
    if args.format == "json":
        print_json(run)
    else:
        print(_narrative(run))
    return OK


@contextlib.contextmanager
def _data_file(name: str) -> Iterator[Path]:
    with as_file(files("mcp_preconditions").joinpath("data", name)) as path:
        yield path


async def _demo(errlog: TextIO) -> dict[str, Any]:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    from ..examples_server import DEFAULT_POLICY
    from ..integrations.client_mcp import RequirementsClient

    with _data_file(DEFAULT_POLICY) as policy, _data_file(DEMO_CLAIMS) as claims:
        command = [sys.executable, "-c", "import sys; from mcp_preconditions.cli import main; "
                   "sys.exit(main())", "serve", "--policy", str(policy), "--transport", "stdio",
                   "--claims", str(claims), "--refresh-seconds", "0"]
        params = StdioServerParameters(command=command[0], args=command[1:])
        run: dict[str, Any] = {
            "server": {"command": f"{PROG} serve --transport stdio", "policy": DEFAULT_POLICY,
                       "revision": load_policy(policy).revision},
            "caller": read_claims(claims),
            "knowledge": {"satisfied": list(DEMO_SATISFIED),
                          "unsatisfiable": list(DEMO_UNSATISFIABLE)}}
        async with Client(stdio_client(params, errlog=errlog)) as client:
            run["server"]["protocol"] = client.protocol_version
            knowledge = Knowledge(DEMO_SATISFIED, DEMO_UNSATISFIABLE)
            await _steps(RequirementsClient(client, knowledge, mode="hide"), run)
    return run


async def _steps(client: Any, run: dict[str, Any]) -> None:
    tools = await client.list_tools()
    run["tools"] = [{"name": t["name"], "requirements": _requirements(tools, t)} for t in tools.tools]
    run["verdicts"] = _verdicts(tools.filtered)
    for key, (name, arguments) in (("allowed_call", ALLOWED_CALL), ("denied_call", DENIED_CALL)):
        result = await client.call_tool(name, arguments)
        run[key] = {"tool": name, "arguments": arguments, "is_error": bool(result.is_error),
                    "text": _text(result), "structured_content": result.structured_content}
    run["learned"] = list(client.learned())
    run["verdicts_after"] = _verdicts((await client.list_tools()).filtered)


def _requirements(tools: Any, tool: dict[str, Any]) -> list[str]:
    raw = tools.requirements(tool["name"])
    return [str(r) for r in raw] if isinstance(raw, list) else []


def _verdicts(result: FilterResult) -> dict[str, Any]:
    hidden = {name for name, _ in result.hidden}
    return {"tools": [{**v.to_dict(), "hidden": v.name in hidden} for v in result.verdicts],
            "shown": len(result.kept), "total": len(result.verdicts)}


def _text(result: Any) -> str:
    return " ".join(getattr(c, "text", "") for c in result.content).strip()


# --- the narrative --------------------------------------------------------------------------------
def _narrative(run: dict[str, Any]) -> str:
    claims, server = run["caller"], run["server"]
    who = ", ".join(f"{k}={claims[k]}" for k in ("role", "scope") if k in claims)
    knowledge = run["knowledge"]
    allowed, denied = run["allowed_call"], run["denied_call"]
    lines = [
        "mcp-preconditions demo: SEP-2487 execution.requirements on a real MCP connection\n",
        f"  server  mission-control: `{server['command']}` as a subprocess",
        f"          embedded policy {server['policy']} (revision {server['revision']})",
        f"          caller: {claims.get('sub', '?')} ({who}); stdio carries no bearer token, so",
        "          the demo starts the server with --claims (over HTTP, tokens are verified)",
        f"  client  mcp.Client over stdio, protocol {server['protocol']}",
        _section(1, "tools/list with execution.requirements (as the client reads them: the _meta "
                    "mirror)")]
    width = max(len(str(t["name"])) for t in run["tools"]) + 5
    for tool in run["tools"]:
        lines.append(textwrap.fill(", ".join(tool["requirements"]) or "(none)", WIDTH,
                                   initial_indent=f"   {tool['name']}".ljust(width),
                                   subsequent_indent=" " * width, break_on_hyphens=False))
    lines += [_section(2, "The client's verdicts (SEP-2487 strict rule, mode hide)"),
              f"   knowledge: satisfied {', '.join(knowledge['satisfied'])}\n"
              f"              unsatisfiable {', '.join(knowledge['unsatisfiable'])}",
              *_verdict_lines(run["verdicts"]),
              _section(3, f"Allowed call: {allowed['tool']} {json.dumps(allowed['arguments'])}"),
              f"   -> {allowed['text']}",
              _section(4, f"Denied call: {denied['tool']} {json.dumps(denied['arguments'])}"),
              f"   -> isError={str(denied['is_error']).lower()}: {denied['text']}\n"
              f"      structuredContent: {json.dumps(denied['structured_content'])}\n"
              f"      unmet requirements: {', '.join(denied['structured_content']['unmet'])}\n"
              f"   The guard refused before the tool ran. The client learned: "
              f"{', '.join(run['learned'])}",
              _section(5, "The client's verdicts after learning from the denial"),
              *_verdict_lines(run["verdicts_after"])]
    return "\n".join(lines)


def _verdict_lines(verdicts: dict[str, Any]) -> list[str]:
    rows = [("   " + v["name"], "WILL FAIL" if v["verdict"] == "will_fail" else "proceed", _why(v))
            for v in verdicts["tools"]]
    return [*table(rows), f"   shown to the model: {verdicts['shown']} of {verdicts['total']} tools"]


def _why(v: dict[str, Any]) -> str:
    if v["verdict"] == "will_fail":
        return f"unsatisfiable: {', '.join(v['unsatisfiable'])}" + ("  -> hidden" if v["hidden"] else "")
    if v["unknown"]:
        return f"{len(v['unknown'])} unknown: proceed as if the field were absent"
    return ""


def _section(number: int, title: str) -> str:
    return f"\n{number}. {title}"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `demo` to the main parser."""
    demo = subparsers.add_parser(
        "demo", help="see the guard and the strict client at work on a real MCP connection",
        description="Start the mission-control server with the embedded default policy, connect a "
                    "real MCP client over stdio, and show tools/list with requirements, the client's "
                    "verdicts, one allowed call and one denied call with its unmet requirements.")
    add_format(demo)
    demo.set_defaults(func=run_demo)


__all__ = ["register", "run_demo"]
