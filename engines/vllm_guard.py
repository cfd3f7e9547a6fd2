"""Run a command, and take its whole process group down with it.

``python -m engines.vllm_guard CMD...`` is how a Ray Serve replica starts vLLM. vLLM's API server
forks an EngineCore and a worker; when a replica dies without cleanup (SIGKILL, a cluster torn
down), the API server's own parent-death signal is not enough: its children outlive it as orphans
holding memory and CPU. This guard is the process-group leader, carries the parent-death signal
(set by the starter's ``preexec_fn``), and on SIGTERM/SIGHUP or when the command ends it stops the
command gracefully, then SIGKILLs whatever is left of the group.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys

GRACE_S = 10.0


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m engines.vllm_guard CMD [ARGS...]", file=sys.stderr)
        return 2
    child = subprocess.Popen(argv)  # same process group as this guard

    def take_down(signum=None, frame=None) -> None:
        if child.poll() is None:
            child.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(GRACE_S)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        os.killpg(os.getpgrp(), signal.SIGKILL)

    signal.signal(signal.SIGTERM, take_down)
    signal.signal(signal.SIGHUP, take_down)
    if os.getppid() == 1:  # the starter died before the parent-death signal was armed
        take_down()
    code = child.wait()
    take_down()  # the command ended: none of its helpers may outlive it
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
