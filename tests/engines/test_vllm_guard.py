"""The guard that starts vLLM inside Serve replicas leaves no orphan behind (no vLLM needed)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import engines

# Starts its own processes and waits on them: the full suite's, not the fast tier's (ADR 0023).
pytestmark = pytest.mark.process

GUARD = Path(engines.__file__).with_name("vllm_guard.py")
# A command that, like vLLM's API server, forks a helper that would outlive it.
FORKS_A_HELPER = "import subprocess, time; subprocess.Popen(['sleep', '300']); time.sleep(300)"


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                members.append(int(entry))
    return members


def _wait_gone(pgid: int, timeout: float = 20) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = _group_members(pgid)
        if not left:
            return []
        time.sleep(0.2)
    return _group_members(pgid)


def test_sigterm_to_the_guard_takes_the_whole_group_down():
    guard = subprocess.Popen(
        [sys.executable, str(GUARD), sys.executable, "-c", FORKS_A_HELPER], start_new_session=True
    )
    deadline = time.monotonic() + 30  # wait for the helper to be forked, not a fixed time
    while len(_group_members(guard.pid)) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(_group_members(guard.pid)) >= 3  # guard, command, helper
    guard.send_signal(signal.SIGTERM)
    guard.wait(20)
    assert _wait_gone(guard.pid) == []


def test_when_the_starter_dies_the_guard_takes_the_group_down():
    # The starter arms the parent-death signal for the guard, as engines.vllm_cpu does, then dies.
    starter_code = (
        "import ctypes, signal, subprocess, sys, time\n"
        "def arm(): ctypes.CDLL('libc.so.6').prctl(1, signal.SIGTERM)\n"
        f"p = subprocess.Popen([sys.executable, {str(GUARD)!r}, sys.executable, '-c', {FORKS_A_HELPER!r}],"
        " start_new_session=True, preexec_fn=arm)\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(1.5)\n"
    )
    starter = subprocess.run([sys.executable, "-c", starter_code], capture_output=True, text=True, timeout=30)
    guard_pid = int(starter.stdout.split()[0])
    assert _wait_gone(guard_pid) == []
