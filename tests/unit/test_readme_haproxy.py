"""The README's "Running several replicas" section shows the heart of examples/haproxy/haproxy.cfg:
consecutive lines of that file, verbatim, so that what a reader copies is what
tests/integration/test_replicas_haproxy.py runs.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "haproxy" / "haproxy.cfg"
BLOCK = re.compile(r"^```haproxy\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def test_the_readme_haproxy_block_is_an_excerpt_of_the_tested_config() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = BLOCK.findall(readme)
    assert len(blocks) == 1, (
        f"README.md must have exactly one ```haproxy block (the \"Running several replicas\" section), "
        f"lines of {CONFIG.relative_to(ROOT)}; found {len(blocks)}")
    shown = blocks[0]
    assert "stick match req.hdr(mcp-session-id)" in shown and "stick store-response" in shown
    assert shown in CONFIG.read_text(encoding="utf-8"), (
        f"README.md's ```haproxy block is not consecutive lines of {CONFIG.relative_to(ROOT)}: "
        "paste them again")
