"""Requirement strings: the namespace split, exact identity, start-up validation and lint findings.

A requirement is an opaque string; its namespace is the text before the first `:`. Two
requirements are the same only if they are equal code point for code point (SPEC §2).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from .wire import MalformedExecution

Severity = Literal["error", "warning"]


def namespace_of(requirement: str) -> str | None:
    """The text before the first ':', or None when there is no ':' (or nothing before it)."""
    head, sep, _ = requirement.partition(":")
    return head if sep and head else None


def body_of(requirement: str) -> str:
    """The text after the first ':' (the whole string when there is no namespace)."""
    return requirement.partition(":")[2]


def merge(*lists: Iterable[str]) -> tuple[str, ...]:
    """The union of requirement lists, first occurrence order, exact-string de-duplication."""
    seen: dict[str, None] = {}
    for items in lists:
        for item in items:
            seen.setdefault(item, None)
    return tuple(seen)


@dataclass(frozen=True, slots=True)
class Finding:
    """One validation error or lint warning about one tool's requirement."""

    severity: Severity
    tool: str
    message: str
    requirement: str | None = None
    source: str | None = None  # the file the tool came from, when known

    def __str__(self) -> str:
        where = f"{self.source}: " if self.source else ""
        return f"{where}tool '{self.tool}': {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return {"severity": self.severity, "tool": self.tool, "requirement": self.requirement,
                "message": self.message, "source": self.source}


class FormChecker(Protocol):
    """What validation needs from the resolver registry."""

    def namespaces(self) -> tuple[str, ...]: ...

    def check_form(self, requirement: str) -> str | None:
        """None when the requirement's namespace has a resolver that accepts its form, else why not."""
        ...


def check_shape(tool: str, raw: Any) -> tuple[list[str], list[Finding]]:
    """Split a raw `requirements` value into the usable strings and shape errors."""
    if raw is None:
        return [], []
    if isinstance(raw, MalformedExecution):
        return [], [Finding("error", tool, "execution must be an object holding 'requirements', got "
                                           f"{raw.found}")]
    if not isinstance(raw, list):
        return [], [Finding("error", tool, f"requirements must be a list of strings, got "
                                           f"{type(raw).__name__}")]
    good: list[str] = []
    bad: list[Finding] = []
    for i, item in enumerate(raw):
        if not isinstance(item, str):
            bad.append(Finding("error", tool, f"requirement #{i} must be a string, got "
                                              f"{type(item).__name__} {item!r}"))
        elif item == "":
            bad.append(Finding("error", tool, f"requirement #{i} is empty", item))
        else:
            good.append(item)
    return good, bad


def validate(tool: str, raw: Any, registry: FormChecker) -> list[Finding]:
    """Start-up validation errors for one tool's requirements (SPEC §3)."""
    good, findings = check_shape(tool, raw)
    known = ", ".join(f"'{n}'" for n in registry.namespaces())
    for req in good:
        ns = namespace_of(req)
        if ns is None:
            findings.append(Finding("error", tool, f"requirement {req!r} has no namespace "
                                    f"(expected NAMESPACE:..., known namespaces: {known})", req))
            continue
        problem = registry.check_form(req)
        if problem is not None:
            findings.append(Finding("error", tool, f"requirement {req!r}: {problem}", req))
    return findings


_INVISIBLE_CATEGORIES = {"Cc", "Cf", "Co", "Cn", "Zl", "Zp"}
# Default_Ignorable_Code_Point characters outside those categories: they render as nothing.
_IGNORABLE = frozenset("\u00a0\u2007\u202f\u034f\u115f\u1160\u17b4\u17b5\u3164\uffa0"
                       + "".join(map(chr, [*range(0x180B, 0x1810), *range(0xFE00, 0xFE10),
                                           *range(0xE0100, 0xE01F0)])))


def _script(ch: str) -> str | None:
    """A coarse script name for a letter (from its Unicode name), None for non-letters."""
    if not ch.isalpha():
        return None
    name = unicodedata.name(ch, "")
    return name.split(" ")[0] if name else "UNKNOWN"


def _character_findings(tool: str, req: str) -> list[Finding]:
    out: list[Finding] = []
    odd = sorted({f"U+{ord(c):04X}" for c in req
                  if unicodedata.category(c) in _INVISIBLE_CATEGORIES or c in _IGNORABLE})
    if odd:
        out.append(Finding("warning", tool, f"requirement {req!r} contains control or invisible "
                                            f"characters: {', '.join(odd)}", req))
    scripts = {s for s in map(_script, req) if s}
    if len(scripts) > 1:
        out.append(Finding("warning", tool, f"requirement {req!r} mixes scripts: "
                                            f"{', '.join(sorted(scripts))}", req))
    return out


def lint(tool: str, requirements: Sequence[str]) -> list[Finding]:
    """Lint warnings (never errors): whitespace, control/invisible characters, mixed scripts, dupes."""
    out: list[Finding] = []
    seen: set[str] = set()
    for req in requirements:
        if req != req.strip():
            out.append(Finding("warning", tool, f"requirement {req!r} has leading or trailing "
                                                "whitespace (it matches only itself, exactly)", req))
        if not (req.isascii() and req.isprintable()):  # printable ASCII: one script, nothing hidden
            out.extend(_character_findings(tool, req))
        if req in seen:
            out.append(Finding("warning", tool, f"requirement {req!r} is listed more than once", req))
        seen.add(req)
    return out
