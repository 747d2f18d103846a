"""Gateway wiring for replicas behind a load balancer: the policy from a file or a bundle URL, the
reloader that keeps every replica on the file or bundle in force (watched by default), and the
labels (replica id, upstream) that put the replica and, with the revision, the policy into every
decision record.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from ..drivers.bundle import (
    DEFAULT_BUNDLE_POLL_SECONDS,
    DEFAULT_FILE_POLL_SECONDS,
    load_policy_source,
    load_public_key,
    policy_reloader,
    poll_interval,
    poll_seconds,
)
from ..drivers.reload import PolicyChange, PolicyReloader
from ..errors import InputError
from ..guard import Guard
from ..policy.load import PolicySource
from ..replica import default_replica_id, replica_labels

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey


@dataclass(frozen=True, slots=True)
class ReplicaOptions:
    """`--policy`, `--policy-poll-seconds`, `--policy-public-key`, `--replica-id` as given
    (`poll_seconds` None: not given; 0: watching off)."""

    policy: str
    poll_seconds: float | None = None
    public_key: str | None = None
    replica_id: str | None = None

    @property
    def interval(self) -> float | None:
        """Seconds between polls: the flag (0: None, not polled), else 2 s for a file and 10 s for
        a bundle URL."""
        return poll_interval(self.policy, self.poll_seconds)

    def replica(self) -> str:
        return self.replica_id if self.replica_id is not None else default_replica_id()


def options_from(policy: str, poll: str | None, public_key: str | None,
                 replica_id: str | None) -> ReplicaOptions:
    """Check the four flags as typed (one clear InputError line each) and bundle them."""
    seconds = poll_seconds(poll)
    if replica_id == "":  # used verbatim; only an empty id is refused: it tells no replica apart
        raise InputError("--replica-id: must not be empty")
    return ReplicaOptions(policy, seconds, public_key, replica_id)


def load_source(options: ReplicaOptions) -> PolicySource:
    """The first load: a file, or a bundle fetched (and verified, with a key) now. Raises InputError
    or PolicyError with one line naming the file or URL; the CLI turns it into exit 2."""
    return load_policy_source(options.policy, _key(options))


def _key(options: ReplicaOptions) -> Ed25519PublicKey | None:
    return load_public_key(options.public_key) if options.public_key is not None else None


def labels(options: ReplicaOptions, upstream: str | None) -> dict[str, str]:
    """`replica` and `upstream`, for `Guard(..., labels=...)`: in every decision record."""
    return replica_labels(upstream=upstream, replica=options.replica())


def reloader(guard: Guard, options: ReplicaOptions,
             on_change: Callable[[PolicyChange], Any] | None = None) -> PolicyReloader | None:
    """The reloader that keeps `guard` on `--policy` (None when watching is off)."""
    interval = options.interval
    if interval is None:
        return None
    return policy_reloader(guard, options.policy, interval=interval, public_key=_key(options),
                           on_change=on_change)


def keep_current(policy: PolicyReloader) -> Callable[[], Coroutine[Any, Any, None]]:
    """A task for the gateway's task group: poll until cancelled. Swaps are logged by the reloader
    (`mcp_preconditions.policy`, INFO); refusals too, and they keep the last good policy."""

    async def run() -> None:
        policy.start()  # inside the running loop: an asyncio task, fetches on a worker thread
        try:
            await anyio.sleep_forever()
        finally:
            policy.stop()
    return run


__all__ = ["DEFAULT_BUNDLE_POLL_SECONDS", "DEFAULT_FILE_POLL_SECONDS", "ReplicaOptions",
           "keep_current", "labels", "load_source", "options_from", "reloader"]
