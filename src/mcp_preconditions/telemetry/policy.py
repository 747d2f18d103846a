"""Policy series from a reloader: `policy_info` follows the revision in force, and every reload
attempt counts in `policy_reloads_total` (a success swaps the policy in; a failure keeps the old;
an unusable one is swapped in but leaves some server's calls all refused).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ..drivers.reload import PolicyChange, PolicyReloader
from .metrics import Metrics, ReloadResult

# What a swap is applied to before it is counted (a gateway checks its servers' tool names against
# the new policy): the result to count, `success` or `unusable`.
Applied = Callable[[PolicyChange], Awaitable[ReloadResult]]


def watch_policy(metrics: Metrics, reloader: PolicyReloader, applied: Applied | None = None) -> None:
    """Keep `metrics` on `reloader`'s policy (a file or a bundle), starting with the one in force.
    With `applied`, each swap is counted once `applied` has run, as the result it returns."""
    metrics.policy_loaded(reloader.revision)

    def changed(change: PolicyChange) -> Awaitable[None] | None:
        metrics.policy_loaded(change.new_revision)
        if applied is None:
            metrics.policy_reload("success")
            return None
        return _counted(metrics, applied(change))

    reloader.add_listener(changed)
    reloader.add_failure_listener(lambda _problem: metrics.policy_reload("failure"))


async def _counted(metrics: Metrics, result: Awaitable[ReloadResult]) -> None:
    metrics.policy_reload(await result)
