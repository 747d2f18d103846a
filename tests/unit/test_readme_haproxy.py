"""The README's "Running several replicas" section shows examples/haproxy/haproxy.cfg verbatim: the
configuration a reader copies is the one tests/integration/test_replicas_haproxy.py runs.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "haproxy" / "haproxy.cfg"
BLOCK = re.compile(r"^```haproxy\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def test_the_readme_haproxy_block_is_the_tested_config_verbatim() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = BLOCK.findall(readme)
    assert len(blocks) == 1, (
        f"README.md must have exactly one ```haproxy block (the \"Running several replicas\" section) "
        f"holding {CONFIG.relative_to(ROOT)} verbatim; found {len(blocks)}")
    assert blocks[0] == CONFIG.read_text(encoding="utf-8"), (
        f"README.md's ```haproxy block differs from {CONFIG.relative_to(ROOT)}: paste the file again")
