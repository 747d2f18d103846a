"""The problem lines the command line prints and the explorer page shows, written once: a policy's
own requirement problems by key path (`policy validate`), the requirements that refuse start-up
(`check`), and a lint finding as one line (`lint`).
"""

from __future__ import annotations

from .guard import Guard
from .policy import PolicySource
from .policy.load import key_path
from .requirements import Finding, FormChecker, lint, validate
from .visible import hidden_characters


def requirement_problems(source: PolicySource, registry: FormChecker) -> tuple[list[str], list[str]]:
    """(errors, warnings) about the policy's own requirement strings, by key path."""
    errors: list[str] = []
    warnings: list[str] = []
    for name, entry in source.policy.tools.items():
        odd = hidden_characters(name)
        if odd or name != name.strip():
            what = ", ".join(odd) if odd else "leading or trailing white space"
            warnings.append(f"{key_path(('tools', name))}: the tool name holds characters a reader "
                            f"cannot see ({what}); it applies only to a tool named exactly so")
        reqs = entry.requirements
        for kind, found in ((errors, validate(name, reqs, registry)), (warnings, lint(name, reqs))):
            for f in found:
                index = reqs.index(f.requirement) if f.requirement in reqs else None
                path = ("tools", name, "requirements") + ((index,) if index is not None else ())
                kind.append(f"{key_path(path)}: {f.message}")
    for i, grant in enumerate(source.policy.capabilities.grants):
        for j, req in enumerate(grant.when):
            problem = registry.check_form(req)
            if problem is not None:
                errors.append(f"capabilities.grants[{i}].when[{j}]: requirement {req!r}: {problem}")
    return errors, warnings


def start_up_errors(guard: Guard, tools_path: str) -> list[str]:
    """One line per requirement that would refuse to start, blamed on the file it came from: the
    policy for a requirement its `[tools.X]` added (the finding's `source`), else the tools file."""
    return [f"{f.source or tools_path}: tool '{f.tool}': {f.message}"
            for f in guard.findings if f.severity == "error"]


def finding_line(finding: Finding) -> str:
    """A lint finding as `lint` prints it: `<file>: <severity>: tool 'NAME': <message>`."""
    return f"{finding.source}: {finding.severity}: tool '{finding.tool}': {finding.message}"
