"""Reading a policy file: TOML parse, pydantic validation, every problem listed by key path.

The revision of a policy is a content hash, so a decision record says exactly which file decided it.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..errors import FileReadError, PolicyError
from ..files import read_bounded
from .model import Policy


@dataclass(frozen=True, slots=True)
class PolicySource:
    """A validated policy plus where it came from and its revision (sha256 of the bytes, 12 hex)."""

    policy: Policy
    source: str
    revision: str
    base_dir: Path

    def resolve_path(self, relative: str) -> Path:
        """A path named in the policy, relative to the policy file's folder."""
        p = Path(relative)
        return p if p.is_absolute() else self.base_dir / p


def revision_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:12]


def key_path(loc: tuple[int | str, ...],
             union_tags: tuple[str, ...] = ("str", "bool", "int", "float", "list[str]")) -> str:
    """pydantic's error location as a policy key path: `auth.jwks_uri`, `capabilities.grants[0].when`."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in union_tags and out:
            continue  # union member tags add nothing a user can act on
        else:
            out += ("." if out else "") + (part if _bare(part) else json.dumps(part, ensure_ascii=False))
    return out or "(top level)"


def _bare(key: str) -> bool:
    return key.replace("_", "a").replace("-", "a").isalnum() and key.isascii()


def input_path(loc: tuple[int | str, ...], raw: Any, missing: bool) -> tuple[int | str, ...]:
    """The parts of pydantic's error location that are keys or indexes of the input file. Union
    member and validator tags (`constrained-str`, `function-after[...]`) are dropped whatever their
    name, and a key named like one (`"int"`, `[tools.float]`) keeps its place."""
    out: list[int | str] = []
    node: Any = raw
    for i, part in enumerate(loc):
        if isinstance(node, dict) and isinstance(part, str) and (
                part in node or (missing and i == len(loc) - 1)):
            out.append(part)
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            out.append(part)
            node = node[part]
    return tuple(out)


def problems_of(exc: ValidationError, raw: Any) -> list[str]:
    seen: dict[str, None] = {}
    for err in exc.errors(include_url=False):
        loc = input_path(err["loc"], raw, err["type"] == "missing")
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key (a typo here would silently weaken the policy)"
        elif msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
        seen.setdefault(f"{key_path(loc, union_tags=())}: {msg}", None)
    return list(seen)


def parse_policy(data: bytes, source: str, base_dir: Path | None = None) -> PolicySource:
    """Validate policy bytes; raise PolicyError naming `source` and every problem."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PolicyError(source, [f"(file): not UTF-8 ({exc.reason} at byte {exc.start})"]) from None
    try:
        raw: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(source, [f"(file): not valid TOML: {exc}"]) from None
    except RecursionError:
        raise PolicyError(source, ["(file): not usable TOML: nested too deeply"]) from None
    try:
        policy = Policy.model_validate(raw)
    except ValidationError as exc:
        raise PolicyError(source, problems_of(exc, raw)) from None
    return PolicySource(policy, source, revision_of(data), base_dir or Path("."))


def load_policy(path: str | Path) -> PolicySource:
    """Read and validate a policy file."""
    p = Path(path)
    try:
        data = read_bounded(p)
    except FileReadError as exc:
        raise PolicyError(str(path), [f"(file): {exc.problem}"]) from None
    return parse_policy(data, str(path), p.parent)


def policy_schema() -> dict[str, Any]:
    """The JSON Schema of the policy format, for editors."""
    schema = Policy.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "mcp-preconditions policy"
    return schema
