"""The dead-letter page: failed messages, the actionable first, filtered and paged by keyset.

The order is the one the CLI uses (`app/repo/queue.py`): the rank stored when the message
failed, then newest first, then id; a page starts strictly after the last row of the one
before it, so a new failure never shifts a row onto two pages or off both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVarTuple, cast

from sqlalchemy import ColumnElement, Select, and_, func, or_, select
from sqlalchemy.orm import Session, aliased

from app.lifecycle import Status
from app.models import Identity, Message, Tenant
from app.providers.classification import UnknownProviderCodesError, describe
from app.repo.campaigns import CampaignFilter
from app.repo.holds import holds_for

PAGE_SIZE = 50
Ts = TypeVarTuple("Ts")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# rank (or n).microseconds since the epoch.id
_CURSOR = re.compile(r"(n|[0-9]{1,9})\.(-?[0-9]{1,18})\.([0-9]{1,18})")


@dataclass(frozen=True, slots=True)
class Cursor:
    """The sort key of the last row shown: (rank, failed_at, id)."""

    rank: int | None
    failed_at: datetime
    id: int

    def encode(self) -> str:
        micros = (self.failed_at - _EPOCH) // timedelta(microseconds=1)
        return f"{'n' if self.rank is None else self.rank}.{micros}.{self.id}"

    @classmethod
    def decode(cls, raw: str | None) -> Cursor | None:
        if not raw:
            return None
        # ASCII digits only (`isdigit()` passes `²`, which `int()` refuses), an id that
        # fits a BIGINT, a time a datetime holds: anything else starts from the top.
        found = _CURSOR.fullmatch(raw)
        if found is None:
            return None
        rank = None if found[1] == "n" else int(found[1])
        try:
            failed_at = _EPOCH + timedelta(microseconds=int(found[2]))
        except OverflowError:
            return None
        return cls(rank, failed_at, int(found[3]))


@dataclass(frozen=True, slots=True)
class Filters:
    tenant_id: int | None = None
    identity_id: int | None = None
    lane: str | None = None
    failure_class: str | None = None
    code: int | None = None
    since: datetime | None = None
    # The dismissed (and canceled) ones instead: off the actionable list, kept for search.
    dismissed: bool = False
    by: CampaignFilter = field(default_factory=CampaignFilter)  # template, campaign, key prefix


@dataclass(frozen=True, slots=True)
class DeadLetterRow:
    message: Message
    tenant_name: str
    provider: str
    account_id: str
    meaning: str
    action: str
    # Why the provider may already hold a deliverable copy (no plain requeue), or None.
    held: str | None

    @property
    def error(self) -> dict[str, object]:
        return dict(self.message.last_error or {})

    @property
    def same_key(self) -> bool:
        """A requeue goes out under the same provider key: an outcome was unknown."""
        return bool(self.message.had_unknown_outcome)


def advice(
    provider: str, failure_class: str | None, code: object, subcode: object = None
) -> tuple[str, str]:
    """What the failure means and what a person should do, from the classification table
    (with the subcode where it changes the meaning: Messenger's 10 / 2018278)."""
    try:
        known = describe(
            provider,
            code if isinstance(code, int) else None,
            subcode if isinstance(subcode, int) else None,
        )
    except UnknownProviderCodesError:
        known = None
    if failure_class == "exhausted":
        last = f" The last answer: {known.meaning}" if known else ""
        return (
            f"Ratchet gave up after its retry cap.{last}",
            "Requeue once the provider is well again; read the attempts first.",
        )
    if known is not None:
        return known.meaning, known.action
    if code is None:
        return (
            "The provider gave no error code.",
            "Read the verbatim answer below and the attempts on the message's page.",
        )
    return (
        f"A code Ratchet does not know ({code}).",
        "Look the code up in the provider's documentation; requeue once it is understood.",
    )


def _after(cursor: Cursor) -> ColumnElement[bool]:
    tail = or_(
        Message.failed_at < cursor.failed_at,
        and_(Message.failed_at == cursor.failed_at, Message.id < cursor.id),
    )
    if cursor.rank is None:
        return and_(Message.dead_letter_rank.is_(None), tail)
    return or_(
        Message.dead_letter_rank > cursor.rank,
        Message.dead_letter_rank.is_(None),
        and_(Message.dead_letter_rank == cursor.rank, tail),
    )


def _row(
    held: str | None, message: Message, tenant_name: str, provider: str, account: str
) -> DeadLetterRow:
    error = message.last_error or {}
    meaning, action = advice(
        provider, message.failure_class, error.get("code"), error.get("subcode")
    )
    return DeadLetterRow(
        message=message,
        tenant_name=tenant_name,
        provider=provider,
        account_id=account,
        meaning=meaning,
        action=action,
        held=held,
    )


def _base() -> Select[Message, str, str, str]:
    return (
        select(Message, Tenant.name, Identity.provider, Identity.account_id)
        .join(Identity, Identity.id == Message.identity_id)
        .join(Tenant, Tenant.id == Message.tenant_id)
        .where(Message.status == Status.FAILED.value)
    )


def _order(table: Any) -> list[Any]:
    """The page's order: the rank (actionable first), then newest first, then id."""
    return [table.dead_letter_rank.asc().nulls_last(), table.failed_at.desc(), table.id.desc()]


def dead_letter_page(
    session: Session, filters: Filters, after: Cursor | None = None, limit: int = PAGE_SIZE
) -> tuple[list[DeadLetterRow], Cursor | None]:
    """One page of dead letters and the cursor of the next page (None: this is the last).

    The page's rows are chosen first, on the messages alone (ordered and cut in the
    partial index of the filter), and only those are joined to their identity and tenant:
    with the joins in the same step the planner hashed every matching dead letter of a
    class (10,865 at 1M) and sorted them for 51 (bench/pages.py, 2.03x and 2.37x)."""
    inner = apply_filters(select(Message).where(Message.status == Status.FAILED.value), filters)
    if after is not None:
        inner = inner.where(_after(after))
    chosen = inner.order_by(*_order(Message)).limit(limit + 1).subquery()
    page = aliased(Message, chosen)
    query = (
        select(page, Tenant.name, Identity.provider, Identity.account_id)
        .join(Identity, Identity.id == page.identity_id)
        .join(Tenant, Tenant.id == page.tenant_id)
        .order_by(*_order(page))
    )
    found = list(session.execute(query))
    # The provider-may-hold rule for the whole page in a few queries, not a few per row.
    holds = holds_for(session, [row[0] for row in found[:limit]])
    rows = [_row(holds[row[0].id], *row) for row in found[:limit]]
    if len(found) <= limit or not rows:
        return rows, None
    last = rows[-1].message
    assert last.failed_at is not None
    return rows, Cursor(last.dead_letter_rank, last.failed_at, last.id)


def apply_filters(query: Select[*Ts], filters: Filters) -> Select[*Ts]:
    """The filters of the page on a query of failed messages (the bulk preview's too)."""
    # A dismissed or canceled message has no rank: it is off the actionable list.
    if filters.dismissed:
        query = query.where(Message.dead_letter_rank.is_(None))
    else:
        query = query.where(Message.dead_letter_rank.is_not(None))
    if filters.tenant_id is not None:
        query = query.where(Message.tenant_id == filters.tenant_id)
    if filters.identity_id is not None:
        query = query.where(Message.identity_id == filters.identity_id)
    if filters.lane:
        query = query.where(Message.lane == filters.lane)
    if filters.failure_class:
        query = query.where(Message.failure_class == filters.failure_class)
    if filters.code is not None:
        query = query.where(Message.last_error["code"].as_integer() == filters.code)
    if filters.since is not None:
        query = query.where(Message.failed_at >= filters.since)
    return cast(Select[*Ts], filters.by.apply(query))


def count_failed_since(session: Session, filters: Filters, since: datetime) -> int:
    """Dead letters matching the filters that failed after `since` (the page's badge)."""
    query = apply_filters(
        select(func.count()).select_from(Message).where(Message.status == Status.FAILED.value),
        filters,
    ).where(Message.failed_at > since)
    return int(session.scalar(query) or 0)


def dead_letter_row(
    session: Session, message_id: int, tenant_id: int | None
) -> DeadLetterRow | None:
    """One failed message as a dead-letter row, if the scope may see it."""
    query = _base().where(Message.id == message_id)
    if tenant_id is not None:
        query = query.where(Message.tenant_id == tenant_id)
    found = session.execute(query).one_or_none()
    return _row(holds_for(session, [found[0]])[message_id], *found) if found else None
