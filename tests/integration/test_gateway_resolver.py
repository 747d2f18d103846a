"""`gateway --resolver FILE.py:ATTR`: a custom namespace in a plain file decides the upstream's tools
for that run; a bad spec is one line and exit 2.

In-process (tests/fixtures/inprocess.py): the gateway wired from its command line in the test's event
loop, the logging upstream in memory.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_preconditions.cli import main
from tests.fixtures.gateway_upstream import tool_calls
from tests.integration.test_gateway_calls import gateway_client, raw_call

RESOLVER = '''
from mcp_preconditions import Outcome


class Shift:
    namespace = "shift"

    def validate(self, requirement):
        return None

    def resolve(self, requirement, context):
        day = requirement == "shift:day"
        return (Outcome.satisfied if day else Outcome.unsatisfied)(requirement, "the day shift")


resolver = Shift()
'''


async def test_a_resolver_from_a_file_decides_upstream_tools(tmp_path: Path) -> None:
    (tmp_path / "shifts.py").write_text(RESOLVER, encoding="utf-8")
    policy = tmp_path / "policy.toml"
    policy.write_text('[tools.echo]\nrequirements = ["shift:night"]\n'
                      '[tools.slow]\nrequirements = ["shift:day"]\n', encoding="utf-8")
    log = tmp_path / "upstream.jsonl"
    resolver = f"{tmp_path / 'shifts.py'}:resolver"
    async with gateway_client(policy, log, "--resolver", resolver) as client:
        denied = await raw_call(client, "echo", {"text": "hi"})
        allowed = await raw_call(client, "slow", {"seconds": 0})
    assert denied["structuredContent"]["unmet"] == ["shift:night"]
    assert not allowed.get("isError")
    assert tool_calls(log) == ["slow"]  # the denied call never reached the upstream


def test_a_bad_resolver_spec_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text("", encoding="utf-8")
    code = main(["gateway", "--policy", str(policy), "--resolver", "nowhere.py:x", "--", "true"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert err == "mcp-preconditions: error: --resolver nowhere.py: no such file\n"
