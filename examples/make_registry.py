"""Generate examples/registry-80.json: 80 tools in ten families, each with capabilityHints tiers.

Deterministic (no randomness): run `python examples/make_registry.py` to rewrite the file, or with
`--check` to verify the committed file is what this script produces. The shape follows the
capabilityHints proposal: `small` keeps only the required parameters, `medium` adds the common
options, the top level (large) carries every option with a full description.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).with_name("registry-80.json")

# family: (noun used in descriptions, [(verb, required params, optional params)] * 8)
# A parameter is (name, JSON type, description).
P = tuple[str, str, str]
FAMILIES: dict[str, tuple[str, list[tuple[str, list[P], list[P]]]]] = {}

_ID = ("id", "string", "identifier of the item")
_PATH = ("path", "string", "path of the file or directory, absolute or relative to the workspace root")
_QUERY = ("query", "string", "search text; supports quoted phrases and - to exclude a term")
_LIMIT = ("limit", "integer", "maximum number of results to return (default 50, at most 500)")
_CURSOR = ("cursor", "string", "opaque pagination cursor returned by a previous call")
_FORMAT = ("format", "string", "output format: json, text or markdown (default json)")
_DRY = ("dry_run", "boolean", "when true, report what would change without changing anything")
_TIMEOUT = ("timeout_seconds", "integer", "give up after this many seconds (default 30)")
_BODY = ("body", "string", "the content, as UTF-8 text")


def _family(name: str, noun: str, verbs: list[str], extra: list[P]) -> None:
    """Eight tools over one noun; each verb gets the shared options plus the family's extras."""
    tools: list[tuple[str, list[P], list[P]]] = []
    for k, verb in enumerate(verbs):
        required: list[P]
        if verb in ("list", "search"):
            required = [_QUERY] if verb == "search" else []
        elif verb in ("create", "write", "send", "upload"):
            required = [_PATH if name == "filesystem" else _ID, _BODY]
        else:
            required = [_PATH if name == "filesystem" else _ID]
        optional = [_LIMIT, _CURSOR, _FORMAT, _DRY, _TIMEOUT, *extra][: 3 + k % 4]
        tools.append((verb, required, optional))
    FAMILIES[name] = (noun, tools)


_family("filesystem", "file", ["read", "write", "list", "search", "move", "copy", "delete", "stat"],
        [("encoding", "string", "text encoding (default utf-8)")])
_family("git", "git commit", ["log", "diff", "show", "search", "create", "revert", "blame", "status"],
        [("branch", "string", "branch name (default: the current branch)")])
_family("http", "HTTP resource", ["get", "send", "list", "search", "head", "delete", "upload", "inspect"],
        [("headers", "object", "extra request headers as a name → value object")])
_family("database", "database row", ["get", "create", "list", "search", "update", "delete", "count",
                                     "explain"],
        [("table", "string", "table name, optionally schema-qualified")])
_family("calendar", "calendar event", ["get", "create", "list", "search", "update", "delete", "accept",
                                       "decline"],
        [("calendar_id", "string", "calendar to use (default: the primary calendar)")])
_family("email", "email message", ["get", "send", "list", "search", "archive", "delete", "label",
                                   "forward"],
        [("mailbox", "string", "mailbox or folder (default INBOX)")])
_family("search", "web page", ["get", "search", "list", "summarize", "cite", "translate", "crawl",
                               "rank"],
        [("language", "string", "BCP 47 language tag of the results")])
_family("shell", "shell command", ["run", "create", "list", "search", "kill", "status", "env", "which"],
        [("cwd", "string", "working directory for the command")])
_family("cloud_storage", "storage object", ["get", "upload", "list", "search", "copy", "delete",
                                            "sign", "restore"],
        [("bucket", "string", "bucket name")])
_family("issues", "issue", ["get", "create", "list", "search", "update", "close", "comment", "assign"],
        [("project", "string", "project key, e.g. OPS")])


def _schema(params: list[P], required: list[P], with_descriptions: bool) -> dict[str, Any]:
    props: dict[str, Any] = {}
    for name, kind, text in params:
        props[name] = {"type": kind, "description": text} if with_descriptions else {"type": kind}
    return {"type": "object", "properties": props, "required": [p[0] for p in required]}


def _tool(family: str, noun: str, index: int, verb: str, required: list[P],
          optional: list[P]) -> dict[str, Any]:
    name = f"{family}_{verb}"
    full = (f"{verb.capitalize()} {noun}s in the {family.replace('_', ' ')} service. Accepts "
            f"{', '.join(p[0] for p in required + optional)}. Results are paginated with a cursor; "
            "errors are returned as structured content with a code and a human-readable message. "
            "Use dry_run to preview changes where the operation modifies state.")
    medium_optional = optional[:2]
    return {
        "name": name,
        "description": full,
        "inputSchema": _schema(required + optional, required, True),
        "capabilityHints": {
            "tiers": {
                "small": {"description": f"{verb.capitalize()} {noun}",
                          "inputSchema": _schema(required, required, False)},
                "medium": {"description": f"{verb.capitalize()} {noun}s; "
                                          f"options: {', '.join(p[0] for p in medium_optional)}",
                           "inputSchema": _schema(required + medium_optional, required, True)},
            },
            "category": family,
            "priority": round(0.9 - 0.1 * index, 1),
        },
    }


def build() -> dict[str, Any]:
    """The registry as a tools/list result."""
    tools = [_tool(family, noun, i, verb, required, optional)
             for family, (noun, specs) in FAMILIES.items()
             for i, (verb, required, optional) in enumerate(specs)]
    return {"tools": tools}


def render() -> str:
    return json.dumps(build(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    if argv[1:] == ["--check"]:
        same = OUT.exists() and OUT.read_text(encoding="utf-8") == render()
        print(f"{OUT.name} is {'up to date' if same else 'out of date: run make_registry.py'}")
        return 0 if same else 1
    OUT.write_text(render(), encoding="utf-8")
    print(f"wrote {OUT} ({len(build()['tools'])} tools)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
