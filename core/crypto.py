"""Secrets at rest: Fernet tokens under the keys of `GATEWAY_ENCRYPTION_KEYS` (MultiFernet).

The first key encrypts, every key decrypts; rotation is "put a new key first, run
`manage.py rotate_secrets`, drop the old key". Without the variable a key is generated once
into `var/encryption.key` (a first run needs no configuration) and a warning says so;
`manage.py check --deploy` refuses that in production.

A secret read from the database is a `Sealed` value: the token, not the plain text. Only
`reveal()` decrypts, and the API calls it once per cache build (catalog snapshot, JWT issuer),
never per request.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed

log = logging.getLogger("gateway")

KEYS_VARIABLE = "GATEWAY_ENCRYPTION_KEYS"


class EncryptionKeyError(ImproperlyConfigured):
    """The configured keys are unusable (malformed, or none can be loaded)."""


class UndecryptableSecret(Exception):
    """No configured key opens this token: the key it was sealed with is missing."""

    def __init__(self, where: str = "a stored secret"):
        super().__init__(
            f"Cannot decrypt {where}: none of the keys in {KEYS_VARIABLE} (or the generated "
            "var/encryption.key) opens it. Restore the key it was encrypted with, then run "
            "`manage.py rotate_secrets`."
        )


class Sealed:
    """A secret as stored: a Fernet token. Its plain text is only ever produced by reveal()."""

    __slots__ = ("token",)

    def __init__(self, token: str):
        self.token = token

    def reveal(self) -> str:
        return decrypt(self.token)

    def __bool__(self) -> bool:
        return bool(self.token)

    def __eq__(self, other) -> bool:  # the same stored value (tokens are never decrypted here)
        return isinstance(other, Sealed) and other.token == self.token

    def __hash__(self) -> int:
        return hash(self.token)

    def __repr__(self) -> str:  # never the plain text, and not the token either
        return "<Sealed secret>"

    __str__ = __repr__


def reveal(value: str | Sealed | None) -> str:
    """The plain text of a field value: a Sealed one is decrypted, a plain one (not yet
    saved) is returned as is."""
    if isinstance(value, Sealed):
        return value.reveal()
    return value or ""


# --- the key ring --------------------------------------------------------------------------

_lock = threading.Lock()
_keyring: MultiFernet | None = None


def parse_keys(raw: list[str]) -> list[Fernet]:
    keys = []
    for position, key in enumerate(raw, start=1):
        try:
            keys.append(Fernet(key.encode("ascii")))
        except (ValueError, UnicodeEncodeError):
            raise EncryptionKeyError(
                f"{KEYS_VARIABLE}: entry {position} is not a Fernet key (32 url-safe "
                "base64-encoded bytes); make one with `manage.py generate_encryption_key`"
            ) from None
    return keys


def _generated_key(path: Path) -> Fernet:
    """The key in `path`, created (mode 0600) by the first process that needs it."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(Fernet.generate_key() + b"\n")
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)  # atomic, and never replaces a key another process wrote
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)
    try:
        key = Fernet(path.read_bytes().strip())
    except (ValueError, OSError) as exc:
        raise EncryptionKeyError(f"{path} does not hold a Fernet key: {exc}") from None
    log.warning(
        "%s is not set: secrets are encrypted with the key generated in %s. "
        "Set %s in production (see docs/deployment.md, 'Secrets at rest').",
        KEYS_VARIABLE,
        path,
        KEYS_VARIABLE,
    )
    return key


def configured_keys() -> list[str]:
    from django.conf import settings

    return list(getattr(settings, "GATEWAY_ENCRYPTION_KEYS", []) or [])


def keyring() -> MultiFernet:
    global _keyring
    ring = _keyring
    if ring is not None:
        return ring
    from django.conf import settings

    with _lock:
        if _keyring is None:
            raw = configured_keys()
            keys = (
                parse_keys(raw) if raw else [_generated_key(settings.GATEWAY_ENCRYPTION_KEY_FILE)]
            )
            _keyring = MultiFernet(keys)
        return _keyring


def encrypt(plain: str) -> str:
    return keyring().encrypt(plain.encode("utf-8")).decode("ascii")


def decrypt(token: str, where: str = "a stored secret") -> str:
    try:
        return keyring().decrypt(token.encode("ascii")).decode("utf-8")
    except (InvalidToken, UnicodeError):
        raise UndecryptableSecret(where) from None


def rotate(token: str, where: str = "a stored secret") -> str:
    """The token re-encrypted under the first key (same plain text)."""
    try:
        return keyring().rotate(token.encode("ascii")).decode("ascii")
    except (InvalidToken, UnicodeError):
        raise UndecryptableSecret(where) from None


def generate_key() -> str:
    return Fernet.generate_key().decode("ascii")


def reset_keyring() -> None:
    global _keyring
    with _lock:
        _keyring = None


def _on_setting_changed(setting, **kwargs):
    if setting in {"GATEWAY_ENCRYPTION_KEYS", "GATEWAY_ENCRYPTION_KEY_FILE"}:
        reset_keyring()


setting_changed.connect(_on_setting_changed, dispatch_uid="core-crypto-keyring")


# --- migrations: plain-text columns <-> tokens ---------------------------------------------


def _is_token(value: str) -> bool:
    try:
        keyring().decrypt(value.encode("ascii"))
    except (InvalidToken, UnicodeError):
        return False
    return True


def seal_columns(model, fields: tuple[str, ...]) -> int:
    """Encrypt the plain-text values of `fields` in every row (a data migration's forward
    step, run on the historical model while the columns are plain text). Idempotent."""
    changed = 0
    for row in model.objects.all().only("pk", *fields):
        updates = {
            name: encrypt(value)
            for name in fields
            if (value := getattr(row, name)) and not _is_token(value)
        }
        if updates:
            model.objects.filter(pk=row.pk).update(**updates)
            changed += 1
    return changed


def unseal_columns(model, fields: tuple[str, ...]) -> int:
    """The reverse: tokens back to plain text (needs the key they were sealed with)."""
    changed = 0
    for row in model.objects.all().only("pk", *fields):
        updates = {
            name: decrypt(value, f"{model._meta.db_table}.{name} (id {row.pk})")
            for name in fields
            if (value := getattr(row, name))
        }
        if updates:
            model.objects.filter(pk=row.pk).update(**updates)
            changed += 1
    return changed
