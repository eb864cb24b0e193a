"""Rows for tests, made through the real repo functions."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from app.crypto import SecretBox
from app.db import Database
from app.models import Message
from app.repo.identities import create_identity
from app.repo.messages import NewMessage, create_message
from app.repo.tenants import create_tenant

from .conftest import SECRET_KEY, T0


@dataclass
class World:
    tenant_id: int
    api_key: str
    identity_id: int


def make_world(
    database: Database,
    *,
    name: str = "acme",
    account_id: str = "1000001",
    provider: str = "whatsapp",
    base_url: str = "http://127.0.0.1:9",
    token: str = "token-acme-1234567890",
    app_secret: str = "app-secret-acme",
    verify_token: str = "verify-acme",
    business_account_id: str | None = None,
) -> World:
    box = SecretBox(SECRET_KEY)
    with database.transaction() as session:
        tenant, key = create_tenant(session, name, T0)
        identity = create_identity(
            session,
            box,
            tenant_id=tenant.id,
            provider=provider,
            account_id=account_id,
            base_url=base_url,
            token=token,
            app_secret=app_secret,
            verify_token=verify_token,
            business_account_id=business_account_id,
            now=T0,
        )
        return World(tenant.id, key, identity.id)


def make_message(database: Database, world: World, **fields: Any) -> int:
    """`write_message` in a transaction of its own, committed."""
    with database.transaction() as session:
        return write_message(session, world, **fields)


def write_message(
    session: Session,
    world: World,
    *,
    recipient: str = "15551234567",
    lane: str = "campaign",
    text: str = "hello",
    key: str | None = None,
    now: datetime = T0,
    campaign: str | None = None,
    template: dict[str, Any] | None = None,
) -> int:
    """A message accepted for `world`'s identity in the caller's transaction, uncommitted."""
    message, _ = create_message(
        session,
        NewMessage(
            tenant_id=world.tenant_id,
            identity_id=world.identity_id,
            recipient=recipient,
            lane=lane,
            fingerprint="f" * 64,
            body_text=text,
            idempotency_key=key,
            campaign=campaign,
            template=template,
        ),
        now,
    )
    return message.id


def message(db: Database, message_id: int) -> Message:
    """The message's row as it is now."""
    with db.transaction() as session:
        row = session.get(Message, message_id, populate_existing=True)
        assert row is not None
        return row
