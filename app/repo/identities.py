"""Sending identities: the number or Page a message goes out from."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.crypto import SecretBox, sha256_hex
from app.models import Identity
from app.repo.sql import rows_changed

PROVIDERS = ("whatsapp", "twilio", "messenger", "instagram")


@dataclass(frozen=True, slots=True)
class IdentitySecrets:
    """Decrypted secrets, for the provider call or a signature check; never logged."""

    token: str = field(repr=False)
    app_secret: str | None = field(repr=False)


def create_identity(
    session: Session,
    box: SecretBox,
    *,
    tenant_id: int,
    provider: str,
    account_id: str,
    base_url: str,
    token: str,
    now: datetime,
    app_secret: str | None = None,
    verify_token: str | None = None,
    sender: str | None = None,
    reply_rate: float | None = None,
    campaign_rate: float | None = None,
    total_rate: float | None = None,
) -> Identity:
    if provider not in PROVIDERS:
        raise ValueError(f"unknown provider {provider!r}; expected one of {', '.join(PROVIDERS)}")
    identity = Identity(
        tenant_id=tenant_id,
        provider=provider,
        account_id=account_id,
        base_url=base_url.rstrip("/"),
        token_encrypted=box.encrypt(token),
        app_secret_encrypted=box.encrypt(app_secret) if app_secret else None,
        verify_token_hash=sha256_hex(verify_token) if verify_token else None,
        sender=sender,
        created_at=now,
    )
    for name, value in (
        ("reply_rate", reply_rate),
        ("campaign_rate", campaign_rate),
        ("total_rate", total_rate),
    ):
        if value is not None:
            setattr(identity, name, value)
    session.add(identity)
    session.flush()
    return identity


def get_identity(session: Session, identity_id: int) -> Identity | None:
    return session.get(Identity, identity_id, populate_existing=True)


def find_identity(session: Session, provider: str, account_id: str) -> Identity | None:
    query = select(Identity).where(Identity.provider == provider, Identity.account_id == account_id)
    return session.scalars(query).one_or_none()


def identities_with_verify_token(
    session: Session, providers: tuple[str, ...], verify_token: str
) -> list[Identity]:
    query = select(Identity).where(
        Identity.provider.in_(providers), Identity.verify_token_hash == sha256_hex(verify_token)
    )
    return list(session.scalars(query))


def reveal_secrets(box: SecretBox, identity: Identity) -> IdentitySecrets:
    app_secret = identity.app_secret_encrypted
    return IdentitySecrets(
        token=box.decrypt(identity.token_encrypted),
        app_secret=box.decrypt(app_secret) if app_secret else None,
    )


def update_identity(
    session: Session,
    box: SecretBox,
    identity_id: int,
    *,
    token: str | None = None,
    app_secret: str | None = None,
    base_url: str | None = None,
    verify_token: str | None = None,
    reply_rate: float | None = None,
    campaign_rate: float | None = None,
    total_rate: float | None = None,
) -> list[str]:
    """Change what was given; returns the names of the fields changed."""
    values: dict[str, object] = {}
    if token is not None:
        values["token_encrypted"] = box.encrypt(token)
    if app_secret is not None:
        values["app_secret_encrypted"] = box.encrypt(app_secret)
    if base_url is not None:
        values["base_url"] = base_url.rstrip("/")
    if verify_token is not None:
        values["verify_token_hash"] = sha256_hex(verify_token)
    for name, value in (
        ("reply_rate", reply_rate),
        ("campaign_rate", campaign_rate),
        ("total_rate", total_rate),
    ):
        if value is not None:
            values[name] = value
    if values:
        session.execute(update(Identity).where(Identity.id == identity_id).values(**values))
    names = {
        "token_encrypted": "token",
        "app_secret_encrypted": "app secret",
        "verify_token_hash": "verify token",
        "base_url": "base url",
    }
    return [names.get(key, key.replace("_", " ")) for key in values]


def pause_identity(session: Session, identity_id: int, reason: str, now: datetime) -> bool:
    """Pause an active identity; False if it was already paused (the first reason stays)."""
    changed = rows_changed(
        session,
        update(Identity)
        .where(Identity.id == identity_id, Identity.paused_at.is_(None))
        .values(paused_at=now, paused_reason=reason),
    )
    return changed == 1


def resume_identity(session: Session, identity_id: int) -> bool:
    changed = rows_changed(
        session,
        update(Identity)
        .where(Identity.id == identity_id, Identity.paused_at.is_not(None))
        .values(paused_at=None, paused_reason=None),
    )
    return changed == 1
