"""Tenants and their API keys (stored as a public prefix and a SHA-256 of the secret)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.crypto import new_api_key, secret_matches, split_api_key
from app.models import Tenant


def create_tenant(session: Session, name: str, now: datetime) -> tuple[Tenant, str]:
    """Create a tenant; returns it and its API key, which is shown once and never stored."""
    key, prefix, digest = new_api_key()
    tenant = Tenant(name=name, api_key_prefix=prefix, api_key_hash=digest, created_at=now)
    session.add(tenant)
    session.flush()
    return tenant, key


def get_tenant_by_name(session: Session, name: str) -> Tenant | None:
    return session.scalars(select(Tenant).where(Tenant.name == name)).one_or_none()


def authenticate(session: Session, api_key: str) -> Tenant | None:
    """The tenant an API key belongs to: looked up by prefix, compared in constant time."""
    parts = split_api_key(api_key)
    if parts is None:
        return None
    prefix, secret = parts
    tenant = session.scalars(select(Tenant).where(Tenant.api_key_prefix == prefix)).one_or_none()
    if tenant is None or not secret_matches(secret, tenant.api_key_hash):
        return None
    return tenant
