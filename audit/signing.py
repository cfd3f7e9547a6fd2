"""The audit trail's Ed25519 signing key, kept outside PostgreSQL (ADR 0018).

Taken from ``GOVERNOR_AUDIT_SIGNING_KEY`` (hex of the 32-byte seed) when set, else from the file
``settings.AUDIT_SIGNING_KEY_FILE`` (``var/audit/signing-key``), which is generated on first use with
mode 0600. Whoever can read it can sign events: keep it off the database host's reach and out of
backups of the database.
"""

from __future__ import annotations

import os
import secrets
import threading
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from django.conf import settings

from audit.format import key_id

KEY_ENV = "GOVERNOR_AUDIT_SIGNING_KEY"


class SigningKeyError(RuntimeError):
    """The signing key cannot be read (bad file mode, malformed value)."""


@dataclass(frozen=True, slots=True)
class SigningKey:
    private: Ed25519PrivateKey
    public_hex: str
    key_id: str

    def sign(self, message: bytes) -> str:
        return self.private.sign(message).hex()


def key_from_seed(seed: bytes) -> SigningKey:
    private = Ed25519PrivateKey.from_private_bytes(seed)
    public_hex = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex()
    return SigningKey(private=private, public_hex=public_hex, key_id=key_id(public_hex))


def key_file() -> Path:
    return Path(
        getattr(settings, "AUDIT_SIGNING_KEY_FILE", "") or Path(settings.VAR_DIR) / "audit" / "signing-key"
    )


def key_file_write(path: Path, seed: bytes, *, replace: bool = False) -> None:
    """Write a seed (hex) readable by its owner only; atomically replaces an existing file when asked."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(seed.hex() + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    if replace:
        os.replace(tmp, path)
    else:
        try:
            os.link(tmp, path)  # fails if another process generated it first: theirs wins
        except FileExistsError:
            pass
        finally:
            os.unlink(tmp)


_lock = threading.Lock()
_cache: dict[tuple, SigningKey] = {}


def signing_key() -> SigningKey:
    """The current key (the environment's, else the file's, generated on first use)."""
    env = os.environ.get(KEY_ENV, "").strip()
    if env:
        cache_key: tuple = ("env", env)
        if cache_key not in _cache:
            try:
                _cache[cache_key] = key_from_seed(bytes.fromhex(env))
            except ValueError as exc:
                raise SigningKeyError(f"{KEY_ENV} must be 64 hex digits (an Ed25519 seed)") from exc
        return _cache[cache_key]
    path = key_file()
    try:
        st = path.stat()
    except FileNotFoundError:
        with _lock:
            key_file_write(path, secrets.token_bytes(32))
        st = path.stat()
    if st.st_mode & 0o077:
        raise SigningKeyError(f"{path} is readable by others (mode {st.st_mode & 0o777:o}); chmod 600 it")
    cache_key = ("file", str(path), st.st_mtime_ns, st.st_ino)
    key = _cache.get(cache_key)
    if key is None:
        try:
            key = key_from_seed(bytes.fromhex(path.read_text().strip()))
        except ValueError as exc:
            raise SigningKeyError(f"{path} must hold 64 hex digits (an Ed25519 seed)") from exc
        _cache.clear()
        _cache[cache_key] = key
    return key
