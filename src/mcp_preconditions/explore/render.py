"""The explorer's templates (Jinja2, shipped in the package): every value escaped on the way out,
and a missing one an error, never an empty string on the page."""

from __future__ import annotations

from typing import Any

import jinja2

_TEMPLATES = jinja2.Environment(loader=jinja2.PackageLoader("mcp_preconditions.explore", "templates"),
                                autoescape=True, undefined=jinja2.StrictUndefined,
                                trim_blocks=True, lstrip_blocks=True)
# Keys in the order they were read (a caller's claims as in its file), not sorted.
_TEMPLATES.policies["json.dumps_kwargs"] = {"sort_keys": False}


def render(name: str, **values: Any) -> str:
    return _TEMPLATES.get_template(name).render(**values)
