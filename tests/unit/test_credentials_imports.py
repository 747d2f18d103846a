"""A gateway without credentials loads none of their stacks (the idle RSS bench_gateway holds to
60 MB): `mcp_preconditions.credentials` resolves its public names on first use, and every one of
them resolves; the config parser reads only its settings."""

from __future__ import annotations

import subprocess
import sys

import pytest

import mcp_preconditions.credentials as credentials

HEAVY = ("httpx2", "cryptography", "starlette", "mcp_preconditions.credentials.accounts",
         "mcp_preconditions.pages.credentials", "mcp_preconditions.credentials.build",
         "mcp_preconditions.pages.approvals")


@pytest.mark.interop
def test_a_gateway_config_without_credentials_loads_none_of_their_stacks() -> None:
    """Interop: it needs a fresh interpreter (`python -c`), since this process has imported every
    stack already and cannot show what importing the gateway alone loads."""
    code = ("import sys, mcp_preconditions.gateway, mcp_preconditions.gateway.config, "
            "mcp_preconditions.cli.gateway_cmds, mcp_preconditions.cli._credentials, "
            "mcp_preconditions.cli._pages, mcp_preconditions.approvals\n"
            f"print(sorted(m for m in sys.modules if m.startswith({HEAVY!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_every_public_name_resolves_and_an_unknown_one_is_an_attribute_error() -> None:
    for name in credentials.__all__:
        assert getattr(credentials, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        credentials.Nope  # noqa: B018
