"""A tenant's own messages: one by id, and the filtered, paged list of `GET /v1/messages`.

The list is newest first by id, and a page continues strictly below the last id of the one
before (keyset paging). A message created meanwhile has a higher id than any listed, so it
never shifts a later page: no row is listed twice or skipped while the caller pages on.
Each filter has an index that leads with it and ends with the order (migration 0019), so a
page reads about `limit` index entries whatever the table's size.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.listquery import ListQuery
from app.models import Message, MessageEvent


@dataclass(frozen=True, slots=True)
class Page:
    messages: list[Message]
    # The id the next page continues below; None on the last page.
    next_before: int | None


def get_tenant_message(session: Session, tenant_id: int, message_id: int) -> Message | None:
    """A message only its own tenant can see (another tenant's id is simply not found)."""
    return session.scalars(
        select(Message).where(Message.id == message_id, Message.tenant_id == tenant_id)
    ).one_or_none()


def list_messages(session: Session, tenant_id: int, query: ListQuery) -> Page:
    """One page of the tenant's messages matching every filter given, newest first."""
    statement = select(Message).where(Message.tenant_id == tenant_id)
    if query.status is not None:
        statement = statement.where(Message.status == query.status)
    if query.failure_class is not None:
        statement = statement.where(Message.failure_class == query.failure_class)
    if query.identity_id is not None:
        statement = statement.where(Message.identity_id == query.identity_id)
    if query.lane is not None:
        statement = statement.where(Message.lane == query.lane)
    if query.to is not None:
        statement = statement.where(Message.recipient == query.to)
    if query.created_since is not None:
        statement = statement.where(Message.created_at >= query.created_since)
    if query.updated_since is not None:
        # Every change is an event row with our receipt time (docs/design.md section 3).
        changed = select(MessageEvent.message_id).where(
            MessageEvent.received_at >= query.updated_since
        )
        statement = statement.where(Message.id.in_(changed))
    if query.before_id is not None:
        statement = statement.where(Message.id < query.before_id)
    rows = list(session.scalars(statement.order_by(Message.id.desc()).limit(query.limit + 1)))
    more = len(rows) > query.limit
    rows = rows[: query.limit]
    return Page(rows, rows[-1].id if more else None)
