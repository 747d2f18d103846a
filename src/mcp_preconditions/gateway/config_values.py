"""The values a gateway's deployment file is made of, shared by its parts (config.py, and the
credentials of config_credentials.py): strict tables, header names, and `env:VAR` references read
from the gateway's environment, each problem named by its key path.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict

from ..policy.load import key_path

ENV_REF = re.compile(r"env:([A-Za-z_][A-Za-z0-9_]*)")
HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
HTTP_URL = re.compile(r"https?://[^\s/?#]+(/[^\s]*)?")


class Strict(BaseModel):
    """A table of the file: unknown keys and loose types refused, immutable once read."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def http_url(value: str | None) -> str | None:
    """An http(s) URL with a host, as the file may name a server or an endpoint; ValueError else."""
    if value is not None and not HTTP_URL.fullmatch(value):
        raise ValueError(f"not an http(s) URL: {value!r}")
    return value


def env_value(value: str, where: tuple[str, ...], problems: list[str],
              environ: Mapping[str, str] | None = None) -> str | None:
    """A literal value, or the variable an `env:VAR` names; None (and a problem) when the variable
    is not set, or the value starts with `env:` but names no variable (sent as is, it would be a
    literal)."""
    env = os.environ if environ is None else environ
    ref = ENV_REF.fullmatch(value)
    if ref is None and value.startswith("env:"):
        problems.append(f"{key_path(where)}: expected env:VAR (VAR: letters, digits and '_', not "
                        f"starting with a digit), got {value!r}")
        return None
    if ref is None:
        return value
    if ref.group(1) in env:
        return env[ref.group(1)]
    problems.append(f"{key_path(where)}: environment variable {ref.group(1)} is not set")
    return None
