"""Policy series from a reloader: `policy_info` follows the revision in force, and every reload
attempt counts in `policy_reloads_total` (a success swaps the policy in; a failure keeps the old).
"""

from __future__ import annotations

from ..drivers.reload import PolicyChange, PolicyReloader
from .metrics import Metrics


def watch_policy(metrics: Metrics, reloader: PolicyReloader) -> None:
    """Keep `metrics` on `reloader`'s policy (a file or a bundle), starting with the one in force."""
    metrics.policy_loaded(reloader.revision)

    def changed(change: PolicyChange) -> None:
        metrics.policy_reload("success")
        metrics.policy_loaded(change.new_revision)

    reloader.add_listener(changed)
    reloader.add_failure_listener(lambda _problem: metrics.policy_reload("failure"))
