"""Whether a process holds a file open for writing, asked with a Linux read lease (fcntl(2)
F_SETLEASE): a policy rewritten in place is never applied while its writer still has it open,
however long that writer stalls between truncating the file and writing it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import signal
import sys

# Linux's values (fcntl.h), for a Python that does not export them.
_F_SETLEASE = getattr(fcntl, "F_SETLEASE", 1024)
_F_SETSIG = getattr(fcntl, "F_SETSIG", 10)
_LINUX = sys.platform == "linux"


def open_for_writing(fd: int) -> bool | None:
    """True when the file behind `fd` (opened read-only) is open for writing anywhere, False when it
    is not, None when that cannot be told here: not Linux, a file system without leases, or neither
    its owner nor CAP_LEASE (a policy mounted from a ConfigMap, say); the caller's other checks
    then stand alone.

    The lease only asks the question: it is released at once. While it is held, a writer's open
    would make the kernel signal this process (SIGIO by default, which ends it), so the lease's
    signal is first set to SIGURG, which is ignored by default; the probe is skipped when something
    has installed a SIGURG handler."""
    if not _LINUX or signal.getsignal(signal.SIGURG) not in (signal.SIG_DFL, signal.SIG_IGN):
        return None
    try:
        fcntl.fcntl(fd, _F_SETSIG, signal.SIGURG)
        fcntl.fcntl(fd, _F_SETLEASE, fcntl.F_RDLCK)
    except OSError as exc:
        return True if exc.errno == errno.EAGAIN else None
    with contextlib.suppress(OSError):  # closing the descriptor releases it as well
        fcntl.fcntl(fd, _F_SETLEASE, fcntl.F_UNLCK)
    return False
