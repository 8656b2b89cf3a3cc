"""Bank credentials encrypted at rest with Fernet; several keys for rotation (MultiFernet).

A key file must be the owner's alone (no permission for group or others, like ssh's private
keys): the key decrypts every stored password, so a file others can read is refused with a
:class:`~scrapeflow.errors.ConfigError` naming it and the ``chmod`` that fixes it. Refused, not
warned about: a warning scrolls past unseen in a cron job's or a service's log, and the fix is
one command.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from scrapeflow.errors import ConfigError, MissingSetting, VaultError

if TYPE_CHECKING:
    from scrapeflow.config import Settings

__all__ = ["KEYS_ENV", "KEY_FILE_ENV", "CredentialVault", "VaultError"]

KEYS_ENV = "SCRAPEFLOW_VAULT_KEYS"
KEY_FILE_ENV = "SCRAPEFLOW_VAULT_KEY_FILE"


class CredentialVault:
    """Encrypts and decrypts bank secrets. The first key encrypts; every key decrypts.

    Keys are Fernet keys (``CredentialVault.generate_key()``), given most recent first. To
    rotate: put a new key first, keep the old ones, :meth:`rotate` every stored token, then drop
    the old keys.

    >>> vault = CredentialVault([CredentialVault.generate_key()])
    >>> vault.decrypt(vault.encrypt("s3cret"))
    's3cret'
    """

    __slots__ = ("_count", "_fernet")

    def __init__(self, keys: Sequence[str | bytes]) -> None:
        if not keys:
            raise MissingSetting(KEYS_ENV, "the vault needs at least one Fernet key")
        fernets = []
        for position, key in enumerate(keys, start=1):
            try:
                fernets.append(Fernet(key.strip()))
            except (ValueError, TypeError) as exc:  # never echo the key itself
                raise ConfigError(
                    f"vault key #{position} is not a Fernet key (32 url-safe base64 bytes)"
                ) from exc
        self._fernet = MultiFernet(fernets)
        self._count = len(fernets)

    @staticmethod
    def generate_key() -> str:
        """A new random key, to store in ``SCRAPEFLOW_VAULT_KEYS`` or a key file."""
        return Fernet.generate_key().decode()

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> CredentialVault:
        """Keys from ``SCRAPEFLOW_VAULT_KEYS`` (comma-separated, current first), else from the
        file named by ``SCRAPEFLOW_VAULT_KEY_FILE``."""
        env = os.environ if environ is None else environ
        key_file = env.get(KEY_FILE_ENV, "").strip()
        return cls._from(env.get(KEYS_ENV, ""), Path(key_file) if key_file else None)

    @classmethod
    def from_settings(cls, settings: Settings) -> CredentialVault:
        """Keys from :attr:`Settings.vault_keys <scrapeflow.config.Settings.vault_keys>`
        (``SCRAPEFLOW_VAULT_KEYS``), else from the file ``vault_key_file`` names."""
        keys = settings.vault_keys.get_secret_value() if settings.vault_keys else ""
        return cls._from(keys, settings.vault_key_file)

    @classmethod
    def _from(cls, keys: str, key_file: Path | None) -> CredentialVault:
        if keys.strip():
            return cls([k for k in keys.split(",") if k.strip()])
        if key_file is not None:
            return cls.from_key_file(key_file)
        raise MissingSetting(
            KEYS_ENV, f"or {KEY_FILE_ENV}; make a key with `scrapeflow bank new-key`"
        )

    @classmethod
    def from_key_file(cls, path: Path) -> CredentialVault:
        """Keys from ``path``, one per line, current first; blank lines and ``#`` lines skipped.

        The file must be open to its owner only (``chmod 600``); a regular file.
        """
        try:
            # Non-blocking: a FIFO named as the key file is refused instead of waited on.
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
            with os.fdopen(fd, "rb") as file:
                mode = os.fstat(file.fileno()).st_mode
                if not stat.S_ISREG(mode):
                    raise ConfigError(f"vault key file {path} is not a regular file")
                if os.name == "posix" and mode & 0o077:
                    raise ConfigError(
                        f"vault key file {path} is open to group or others (mode "
                        f"{stat.S_IMODE(mode):04o}): it decrypts every stored password; "
                        f"run chmod 600 {path}"
                    )
                text = file.read(64 * 1024).decode("ascii")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read vault key file {path}: {type(exc).__name__}") from exc
        keys = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
        if not keys:
            raise ConfigError(f"vault key file {path} holds no key")
        return cls(keys)

    def encrypt(self, secret: str) -> bytes:
        """A token for ``secret``, made with the current key."""
        if not isinstance(secret, str):
            raise VaultError(f"a secret must be str, not {type(secret).__name__}")
        return self._fernet.encrypt(secret.encode("utf-8"))

    def decrypt(self, token: bytes) -> str:
        """The secret in ``token``; :class:`VaultError` when no key of the vault opens it."""
        try:
            return self._fernet.decrypt(token).decode("utf-8")
        except (InvalidToken, TypeError, UnicodeDecodeError):
            # `from None`: the chained error could carry the token; the message never does.
            raise VaultError(
                "cannot decrypt a stored credential: it was encrypted with a key this vault "
                "does not hold, or it is corrupt"
            ) from None

    def can_decrypt(self, token: bytes) -> bool:
        """Whether a key of the vault opens ``token``: its signature is checked, the secret is
        not decrypted (a launch checks every credential before it claims anything)."""
        try:
            self._fernet.extract_timestamp(token)
        except (InvalidToken, TypeError):
            return False
        return True

    def rotate(self, token: bytes) -> bytes:
        """``token`` re-encrypted with the current key (its secret unchanged)."""
        try:
            return self._fernet.rotate(token)
        except (InvalidToken, TypeError):
            raise VaultError(
                "cannot rotate a stored credential: no key of this vault decrypts it"
            ) from None

    def __repr__(self) -> str:
        return f"CredentialVault(<{self._count} key{'s' if self._count != 1 else ''}>)"
