"""Where signed checkpoints are kept so that the database cannot rewrite them (ADR 0018).

A witness is an append-only log of entries (``audit.format``: checkpoints and keys, each signed and
chained to the one before). ``FileWitness``, the default, appends one canonical JSON line per entry
to a file outside PostgreSQL and fsyncs it. An operator can point ``settings.AUDIT_WITNESS_CLASS`` at
another implementation of ``Witness`` (an object store with retention, a service on another host):
it only has to return what was appended, in order, and refuse nothing else.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Any, Protocol

from django.conf import settings
from django.db import connection
from django.utils.module_loading import import_string

from audit import jcs


class Witness(Protocol):
    def entries(self, start: int = 0) -> list[dict[str, Any]]:
        """The entries appended so far from number ``start`` on, oldest first."""

    def append(self, entry: dict[str, Any]) -> None:
        """Append one entry durably (return only once it is stored)."""

    def describe(self) -> str:
        """Where the entries live, for messages."""


class WitnessReadError(ValueError):
    """The witness's storage holds something that is not a list of entries."""


class FileWitness:
    """JSON lines (RFC 8785 each), appended under an exclusive lock and fsynced."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def describe(self) -> str:
        return str(self.path)

    def entries(self, start: int = 0) -> list[dict[str, Any]]:
        # Where entry ``start`` begins, when this process read that far before (a sealer reads only
        # what was appended since); a file shorter than what was read before was cut.
        known = _offsets.get(str(self.path), {})
        offset = known.get(start, 0) if start else 0
        skip = 0 if (start == 0 or start in known) else start
        try:
            with open(self.path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                if fh.tell() < offset:
                    raise WitnessReadError(f"{self.path} is shorter than when it was last read (truncated)")
                fh.seek(offset)
                data = fh.read()
        except FileNotFoundError:
            if offset:
                raise WitnessReadError(f"{self.path} has disappeared") from None
            return []
        if data and not data.endswith(b"\n"):
            raise WitnessReadError(f"{self.path} ends in a partial line (cut short?)")
        out = []
        number = start - skip
        position = offset
        for line in data.split(b"\n")[:-1] if data else []:
            position += len(line) + 1
            if not line:
                raise WitnessReadError(f"{self.path}: empty line after entry {number - 1}")
            if skip:
                skip -= 1
                number += 1
                continue
            try:
                out.append(jcs.loads(line.decode("utf-8")))
            except (ValueError, UnicodeDecodeError) as exc:
                raise WitnessReadError(f"{self.path} entry {number} is not JSON: {exc}") from exc
            number += 1
            known[number] = position
        _offsets[str(self.path)] = known
        return out

    def append(self, entry: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        created = not self.path.exists()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.write(fd, jcs.canonical(entry) + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        if created:
            dir_fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)


_offsets: dict[str, dict[int, int]] = {}


def witness_path() -> Path:
    """``settings.AUDIT_WITNESS_PATH``, or one file per database (a test database never shares the
    witness of the database it was cloned for)."""
    configured = getattr(settings, "AUDIT_WITNESS_PATH", "")
    if configured:
        return Path(configured)
    return Path(settings.VAR_DIR) / "audit" / f"witness-{connection.settings_dict['NAME']}.jsonl"


def witness() -> Witness:
    cls = getattr(settings, "AUDIT_WITNESS_CLASS", "")
    if cls:
        return import_string(cls)()
    return FileWitness(witness_path())
