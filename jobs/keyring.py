"""Encryption at rest for tenants' own upstream keys: cryptography's MultiFernet, never our own crypto.

`FACTGATE_ENCRYPTION_KEYS` holds one or more Fernet keys, comma-separated: the first encrypts, all decrypt,
so keys rotate by putting a new key first, re-encrypting (`factgate tenants rotate-keys`) and later dropping
the old one. Embedded mode (one machine, no operator to configure anything) generates a key once into the
instance folder, readable by the owner only. Server mode without keys refuses to store a tenant key rather
than store it in plaintext.

A stored key is shown again nowhere: only its fingerprint (a 12-hex-digit sha256 prefix, the same one the
rate limiter uses for its scope) is ever displayed.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from config import Settings

KEY_FILE = "encryption.key"


class KeyringError(RuntimeError):
    """No usable encryption key, or a stored secret that no configured key opens."""


def fingerprint(secret: str) -> str:
    """A short, irreversible name for a key: what pages, logs and the limiter may show of it."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()[:12]


@dataclass(frozen=True)
class Keyring:
    """Encrypt with the first key, decrypt with any."""

    keys: tuple[str, ...]

    def _fernet(self) -> MultiFernet:
        try:
            return MultiFernet([Fernet(k.encode("ascii")) for k in self.keys])
        except (ValueError, TypeError) as exc:
            raise KeyringError(
                "FACTGATE_ENCRYPTION_KEYS must be Fernet keys (32 url-safe base64 bytes each), "
                "comma-separated"
            ) from exc

    def encrypt(self, secret: str) -> str:
        return self._fernet().encrypt(secret.encode("utf-8")).decode("ascii")

    def decrypt(self, token: str) -> str:
        hint = " (was a key removed before `factgate tenants rotate-keys` ran?)"
        return self._opened(MultiFernet.decrypt, token, hint).decode("utf-8")

    def rotate(self, token: str) -> str:
        """Re-encrypt with the first key (what rotation does to every stored secret)."""
        return self._opened(MultiFernet.rotate, token).decode("ascii")

    def _opened(self, op: Callable[[MultiFernet, bytes], bytes], token: str, hint: str = "") -> bytes:
        """`op` on a stored secret, which some configured key must open."""
        try:
            return op(self._fernet(), token.encode("ascii"))
        except InvalidToken:
            raise KeyringError(
                f"a stored tenant key cannot be decrypted with FACTGATE_ENCRYPTION_KEYS{hint}"
            ) from None


def _instance_key(instance: Path) -> str:
    """The embedded mode's key: generated once, kept in the instance folder with owner-only access.

    Several threads of a fresh instance may ask at once (the webhook senders start together): the key is
    written whole to a file of its own and linked into place, which fails for all but the first, so every
    caller reads the one complete key."""
    path = instance / KEY_FILE
    if not path.exists():
        instance.mkdir(parents=True, exist_ok=True)
        key = Fernet.generate_key().decode("ascii")
        fd, tmp = tempfile.mkstemp(dir=instance, prefix=".key-")  # owner-only access, like the key
        try:
            with os.fdopen(fd, "w", encoding="ascii") as fh:
                fh.write(key + "\n")
            with contextlib.suppress(FileExistsError):  # another caller's key is in place: it is the one
                os.link(tmp, path)
        finally:
            os.unlink(tmp)
    return path.read_text(encoding="ascii").strip()


def keyring_for(settings: Settings) -> Keyring:
    """The keyring of this deployment (see the module docstring)."""
    if settings.encryption_keys:
        return Keyring(settings.encryption_keys)
    if settings.embedded:
        return Keyring((_instance_key(settings.instance_path),))
    raise KeyringError(
        'set FACTGATE_ENCRYPTION_KEYS (e.g. from `python -c "from cryptography.fernet import Fernet; '
        "print(Fernet.generate_key().decode())\"`) before storing a tenant's upstream key"
    )
