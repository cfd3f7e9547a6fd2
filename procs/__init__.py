"""Child processes on this machine: free ports, waiting for a server to answer, stopping it for sure.

One small leaf (standard library only) that the launcher, the engines' local servers, the tests and
the benchmarks share, so that none of them writes "bind port 0" or "terminate, wait, kill" again.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    """A TCP port that was free a moment ago on 127.0.0.1."""
    return free_ports(1)[0]


def free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports that were free a moment ago on 127.0.0.1.

    Every socket stays bound until all are chosen: ``free_port()`` called twice may return the same
    port, since the first is released before the second is asked for (a Ray head given one port
    for two of its components refuses to start).
    """
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(n):
            s = stack.enter_context(socket.socket())
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
        return ports


def wait_http(url: str, *, timeout_s: float = 20.0, proc: subprocess.Popen | None = None) -> None:
    """Return once ``url`` answers with a 2xx/3xx; raise if ``proc`` exits first or time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited early with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"{url} did not answer within {timeout_s} s")


def stop(proc: subprocess.Popen, *, grace_s: float = 5.0, group: bool = False) -> None:
    """SIGTERM, wait up to ``grace_s``, then SIGKILL; ``group`` signals the whole process group."""
    if proc.poll() is not None:
        return

    def send(sig: int) -> None:
        try:
            if group:
                os.killpg(proc.pid, sig)
            else:
                proc.send_signal(sig)
        except ProcessLookupError:
            pass

    send(signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        send(signal.SIGKILL)
        proc.wait()


@contextlib.contextmanager
def http_child(
    argv: Sequence[str],
    *,
    health_url: str,
    timeout_s: float = 60.0,
    env: dict[str, str] | None = None,
    cwd: Path = ROOT,
) -> Iterator[subprocess.Popen]:
    """Start ``argv``, wait until ``health_url`` answers, yield the process, and always stop it.

    Its stderr goes to a temporary file (a pipe nobody reads would block a chatty child); when it
    fails to come up, the error carries the file's last lines."""
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(list(argv), cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=log)
        try:
            try:
                wait_http(health_url, proc=proc, timeout_s=timeout_s)
            except (RuntimeError, TimeoutError) as exc:
                log.seek(0)
                tail = log.read()[-2000:].decode(errors="replace")
                raise RuntimeError(f"{' '.join(argv[:4])}...: {exc}\n{tail}") from exc
            yield proc
        finally:
            stop(proc)
