"""A tenant's callback endpoints: create, read, change, roll the secret, delete.

Every function is scoped to a tenant: another tenant's endpoint is None, as if absent.
The signing secret is sealed with the provider secrets' box and returned in clear only by
`create_endpoint` and `roll_secret` (the API shows it once).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.callback_models import PENDING, Callback, CallbackEndpoint, MessageCallbackUrl
from app.callback_signing import new_secret
from app.callback_urls import CallbackUrlError, parse_callback_url
from app.crypto import SecretBox

EVENTS = (
    "message.sent",
    "message.delivered",
    "message.read",
    "message.failed",
    "message.requeued",
    "message.canceled",
)
MAX_ENDPOINTS = 20


class EndpointError(ValueError):
    """Bad input for an endpoint; the words say what."""


def check_events(events: object) -> list[str]:
    if not isinstance(events, list) or not events:
        raise EndpointError(f"events must be a non-empty list of: {', '.join(EVENTS)}")
    unknown = [e for e in events if e not in EVENTS]
    if unknown:
        raise EndpointError(f"unknown events {unknown!r}; choose from {', '.join(EVENTS)}")
    return [e for e in EVENTS if e in events]


def list_endpoints(session: Session, tenant_id: int | None) -> list[CallbackEndpoint]:
    """A tenant's endpoints (every tenant's with None: platform staff), oldest first."""
    query = select(CallbackEndpoint).order_by(CallbackEndpoint.id)
    if tenant_id is not None:
        query = query.where(CallbackEndpoint.tenant_id == tenant_id)
    return list(session.scalars(query))


def get_endpoint(
    session: Session, tenant_id: int | None, endpoint_id: int
) -> CallbackEndpoint | None:
    endpoint = session.get(CallbackEndpoint, endpoint_id, populate_existing=True)
    if endpoint is None or (tenant_id is not None and endpoint.tenant_id != tenant_id):
        return None
    return endpoint


def create_endpoint(
    session: Session,
    box: SecretBox,
    *,
    tenant_id: int,
    url: str,
    host: str,
    events: list[str],
    now: datetime,
    enabled: bool = True,
) -> tuple[CallbackEndpoint, str]:
    """(the endpoint, its signing secret in clear: shown once)."""
    count = len(list_endpoints(session, tenant_id))
    if count >= MAX_ENDPOINTS:
        raise EndpointError(f"a tenant may have at most {MAX_ENDPOINTS} callback endpoints")
    secret = new_secret()
    endpoint = CallbackEndpoint(
        tenant_id=tenant_id,
        url=url,
        host=host,
        events=check_events(events),
        enabled=enabled,
        secret_sealed=box.encrypt(secret),
        failures_in_row=0,
        created_at=now,
        updated_at=now,
    )
    session.add(endpoint)
    session.flush()
    return endpoint, secret


def update_endpoint(
    session: Session,
    endpoint: CallbackEndpoint,
    now: datetime,
    *,
    url: str | None = None,
    host: str | None = None,
    events: list[str] | None = None,
    enabled: bool | None = None,
    by: str = "api",
) -> None:
    """Change what is given. Enabling a disabled endpoint makes everything that piled up
    due at once: it goes out in sequence order per message (`app/repo/callback_outbox.py`)."""
    if url is not None and host is not None:
        endpoint.url, endpoint.host = url, host
    if events is not None:
        endpoint.events = check_events(events)
    if enabled is not None and enabled != endpoint.enabled:
        endpoint.enabled = enabled
        if enabled:
            endpoint.disabled_reason = endpoint.disabled_at = None
            endpoint.failures_in_row = 0
            session.execute(
                update(Callback)
                .where(Callback.endpoint_id == endpoint.id, Callback.state == PENDING)
                .values(next_attempt_at=now)
                .execution_options(synchronize_session=False)
            )
        else:
            endpoint.disabled_reason, endpoint.disabled_at = f"by {by}", now
    endpoint.updated_at = now
    session.flush()


def roll_secret(
    session: Session,
    box: SecretBox,
    endpoint: CallbackEndpoint,
    now: datetime,
    overlap: timedelta,
) -> str:
    """A new secret (returned in clear, shown once); the old one signs too until
    `now + overlap`, so receivers can switch without dropping a callback."""
    secret = new_secret()
    endpoint.previous_secret_sealed = endpoint.secret_sealed if overlap > timedelta(0) else None
    endpoint.previous_secret_until = now + overlap if overlap > timedelta(0) else None
    endpoint.secret_sealed = box.encrypt(secret)
    endpoint.updated_at = now
    session.flush()
    return secret


@dataclass(frozen=True, slots=True)
class Signing:
    """An endpoint's secrets in force at one moment; never logged."""

    endpoint_id: int
    secrets: list[str]


def signing_secrets(box: SecretBox, endpoint: CallbackEndpoint, now: datetime) -> Signing:
    found = [box.decrypt_remembered(endpoint.secret_sealed)]
    until = endpoint.previous_secret_until
    if endpoint.previous_secret_sealed and until is not None and now < until:
        found.append(box.decrypt_remembered(endpoint.previous_secret_sealed))
    return Signing(endpoint.id, found)


def delete_endpoint(session: Session, endpoint: CallbackEndpoint) -> None:
    """Gone with its callbacks and their attempts (the foreign keys cascade)."""
    session.delete(endpoint)
    session.flush()


def endpoint_for_host(session: Session, tenant_id: int, host: str) -> CallbackEndpoint | None:
    """The tenant's endpoint a message's own `status_callback` on `host` is signed by."""
    query = (
        select(CallbackEndpoint)
        .where(CallbackEndpoint.tenant_id == tenant_id, CallbackEndpoint.host == host)
        .order_by(CallbackEndpoint.id)
        .limit(1)
    )
    return session.scalars(query).first()


def status_callback_endpoint(
    session: Session, tenant_id: int, url: str, allow_hosts: Collection[str]
) -> int | str:
    """The endpoint whose secret signs a message's own `status_callback` (one on its host),
    or why the URL is refused. Its addresses were checked when the endpoint was
    registered, and are again before every POST."""
    try:
        target = parse_callback_url(url, allow_hosts)
    except CallbackUrlError as exc:
        return f"status_callback: {exc}"
    endpoint = endpoint_for_host(session, tenant_id, target.host)
    if endpoint is None:
        return (
            f"status_callback: {target.host!r} is not the host of one of your callback "
            "endpoints (register one first: POST /v1/callback-endpoints)"
        )
    return endpoint.id


def set_message_callback(session: Session, message_id: int, endpoint_id: int, url: str) -> None:
    session.add(MessageCallbackUrl(message_id=message_id, endpoint_id=endpoint_id, url=url))
    session.flush()
