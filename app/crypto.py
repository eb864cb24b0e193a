"""Secrets at rest: provider tokens and app secrets encrypted, API keys and passwords hashed."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from flask import Flask, current_app, has_app_context
from werkzeug.security import check_password_hash, generate_password_hash


class SecretBox:
    """Fernet under a key derived from SECRET_KEY (HKDF), so a raw row reveals nothing."""

    def __init__(self, secret_key: str) -> None:
        key = HKDF(
            algorithm=hashes.SHA256(), length=32, salt=None, info=b"ratchet provider secrets v1"
        ).derive(secret_key.encode())
        self._fernet = Fernet(base64.urlsafe_b64encode(key))
        self._remembered: dict[str, str] = {}

    def encrypt(self, plaintext: str) -> str:
        return self._fernet.encrypt(plaintext.encode()).decode()

    def decrypt(self, token: str) -> str:
        try:
            return self._fernet.decrypt(token.encode()).decode()
        except InvalidToken as exc:
            raise ValueError("stored secret cannot be read with this SECRET_KEY") from exc

    def decrypt_remembered(self, token: str) -> str:
        """`decrypt`, remembered by this process: a webhook checks its identity's app
        secret on every delivery, and decrypting it (Fernet's HMAC, then AES) was a
        measurable share of a delivery's CPU. A ciphertext always reads the same; a
        secret that is set again is a new ciphertext, so nothing stale is served."""
        plaintext = self._remembered.get(token)
        if plaintext is None:
            plaintext = self.decrypt(token)
            if len(self._remembered) >= REMEMBERED_SECRETS:
                self._remembered.clear()
            self._remembered[token] = plaintext
        return plaintext


# Secrets `decrypt_remembered` keeps per process: far more identities than one installation
# receives webhooks for, and a few hundred KB at most.
REMEMBERED_SECRETS = 1024


def sha256_hex(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def new_api_key() -> tuple[str, str, str]:
    """A fresh tenant API key: (full key shown once, public prefix, SHA-256 of the secret)."""
    prefix = "rk_" + secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    return f"{prefix}.{secret}", prefix, sha256_hex(secret)


_KEY_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


def split_api_key(key: str) -> tuple[str, str] | None:
    """(prefix, secret) of a key shaped like ours; None for anything else, before any
    lookup (a NUL or other character no key has must not reach the database)."""
    prefix, dot, secret = key.partition(".")
    if not dot or not prefix.startswith("rk_") or not secret:
        return None
    if not set(prefix + secret) <= _KEY_CHARACTERS or len(prefix) > 32:
        return None
    return prefix, secret


def secret_matches(secret: str, stored_hash: str) -> bool:
    return hmac.compare_digest(sha256_hex(secret), stored_hash)


def hash_password(password: str) -> str:
    # Werkzeug's scrypt hash with a random salt: a well-kept implementation, already a
    # dependency. The method is the app's `password_hash` (scrypt unless code that built
    # the app gave another); a stored hash names its method, so every one still verifies.
    method = current_app.config["RATCHET"].password_hash if has_app_context() else "scrypt"
    return generate_password_hash(password, method=method)


def check_password(password: str, stored: str) -> bool:
    return check_password_hash(stored, password)


def init_app(app: Flask) -> None:
    app.extensions["ratchet.box"] = SecretBox(app.config["RATCHET"].secret_key)


def get_box() -> SecretBox:
    box: SecretBox = current_app.extensions["ratchet.box"]
    return box
