"""Child processes that never outlive the process that started them.

A server that is killed (SIGKILL, OOM) runs no cleanup code, so a child it started — the demo's
server, an embedded FalkorDB — would be re-parented to init and run on. On Linux the kernel can send
the child a signal when its parent dies (``prctl(PR_SET_PDEATHSIG)``); `die_with_parent` asks for
that from inside the child, before it executes its program.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from typing import Final

__all__ = ["die_with_parent"]

_PR_SET_PDEATHSIG: Final = 1


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """A ``preexec_fn`` for `subprocess.Popen`: the child receives ``sig`` when its parent dies.

    Linux only (elsewhere it does nothing). If the parent already died between the fork and this
    call, the child exits at once instead of starting orphaned."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)
