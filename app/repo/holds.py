"""Whether the provider may hold a deliverable copy of a failed message: the rule the
requeue guard keeps (docs/design.md section 8), for many messages in five queries.

`app/repo/requeues.py: provider_may_hold` asks it for one message; the dead-letter page
asks for its fifty rows at once, so a page costs the same few queries at any size.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from app.correlation import make_correlation_id
from app.lifecycle import FAILED_WORDS, PROVIDER_WORDS, Source, Status
from app.models import Attempt, Identity, Message, MessageEvent, WebhookStatus


def holds_for(session: Session, messages: Sequence[Message]) -> dict[int, str | None]:
    """Per message id: why the provider may hold a deliverable copy, or None.

    Looked for across every cycle: a `delivered` or `read` reported for it (applied,
    refused because it had failed, or recorded late for an earlier cycle), or a provider id
    it was accepted under that was never reported `failed` on its own (the second id of a
    double send is the usual case). A copy accepted and then failed (131049) is not held.
    """
    if not messages:
        return {}
    ids = [m.id for m in messages]
    found: dict[int, str | None] = {}
    # 1. Reached the phone: the latest delivered/read a webhook reported, per message.
    reached: dict[int, tuple[str | None, int]] = {}
    for row in session.execute(
        select(MessageEvent.message_id, MessageEvent.to_status, MessageEvent.cycle)
        .where(
            MessageEvent.message_id.in_(ids),
            MessageEvent.source == Source.WEBHOOK.value,
            MessageEvent.to_status.in_([Status.DELIVERED.value, Status.READ.value]),
        )
        .order_by(MessageEvent.message_id, MessageEvent.id)
    ):
        reached[row.message_id] = (row.to_status, row.cycle)  # the last one wins
    # 2. Every provider id each is known by, in the order the single rule looks at them.
    known: dict[int, list[tuple[str, int]]] = defaultdict(list)
    for message in messages:
        if message.provider_message_id:
            known[message.id].append((message.provider_message_id, message.cycle))
    for row in session.execute(
        select(Attempt.message_id, Attempt.provider_message_id, Attempt.cycle)
        .where(Attempt.message_id.in_(ids), Attempt.provider_message_id.is_not(None))
        .order_by(Attempt.message_id, Attempt.cycle, Attempt.number)
    ):
        known[row.message_id].append((row.provider_message_id, row.cycle))
    for row in session.execute(
        select(MessageEvent.message_id, MessageEvent.detail, MessageEvent.cycle)
        .where(MessageEvent.message_id.in_(ids), MessageEvent.kind == "double_send")
        .order_by(MessageEvent.id)
    ):
        pids = (row.detail or {}).get("provider_message_ids", [])
        known[row.message_id].extend((pid, row.cycle) for pid in pids if pid)
    advancing = [word for word, status in PROVIDER_WORDS.items() if status is not Status.FAILED]
    for status_row in session.execute(
        select(WebhookStatus.message_id, WebhookStatus.provider_message_id, MessageEvent.cycle)
        .join(MessageEvent, MessageEvent.dedupe_key == WebhookStatus.dedupe_key)
        .where(
            WebhookStatus.message_id.in_(ids),
            WebhookStatus.status.in_(advancing),
            WebhookStatus.provider_message_id.is_not(None),
        )
        .order_by(WebhookStatus.id)
    ):
        matched, pid, cycle = status_row
        if pid and matched is not None:
            known[matched].append((pid, cycle))
    # 3. Which of those ids the provider reported failed, per identity.
    identity_of = {m.id: m.identity_id for m in messages}
    all_ids = {pid for pairs in known.values() for pid, _ in pairs}
    failed: set[tuple[int | None, str | None]] = set()
    if all_ids:
        identities = set(identity_of.values())
        # A status row of an identity carries that identity's provider (it came in on that
        # provider's webhook): named here, the `(provider, provider_message_id)` index
        # finds the rows, where the ids alone had every status ever received read.
        providers = set(
            session.scalars(select(Identity.provider).where(Identity.id.in_(identities)))
        )
        failed = {
            (row.identity_id, row.provider_message_id)
            for row in session.execute(
                select(WebhookStatus.identity_id, WebhookStatus.provider_message_id).where(
                    WebhookStatus.provider.in_(providers),
                    WebhookStatus.provider_message_id.in_(all_ids),
                    WebhookStatus.identity_id.in_(identities),
                    WebhookStatus.status.in_(FAILED_WORDS),
                )
            )
        }
    # 4. A status stored and not applied yet (waiting behind the rest of its delivery, or
    #    for the sweeper's replay) that names the message, by our correlation id of any of
    #    its cycles or by a provider id it is known by: what the provider said is a fact
    #    before it applies.
    pending = _pending_statuses(session, messages, known, advancing)
    for message in messages:
        if message.id in pending:
            found[message.id] = pending[message.id]
            continue
        if message.id in reached:
            status, cycle = reached[message.id]
            when = "after it failed" if cycle == message.cycle else f"in cycle {cycle}"
            found[message.id] = f"it was reported {status} {when}"
            continue
        found[message.id] = None
        seen: dict[str, int] = {}
        for pid, cycle in known.get(message.id, []):
            seen.setdefault(pid, cycle)
        for pid, cycle in seen.items():
            if (message.identity_id, pid) not in failed:
                found[message.id] = (
                    f"provider id {pid} was accepted in cycle {cycle} and never reported failed"
                )
                break
    return found


def _pending_statuses(
    session: Session,
    messages: Sequence[Message],
    known: dict[int, list[tuple[str, int]]],
    advancing: list[str],
) -> dict[int, str]:
    key = session.info.get("correlation_key", b"")
    by_correlation = {
        make_correlation_id(key, m.id, cycle): m.id
        for m in messages
        for cycle in range(1, m.cycle + 1)
    }
    identity_of = {m.id: m.identity_id for m in messages}
    by_pid = {(identity_of[mid], pid): mid for mid, pairs in known.items() for pid, _ in pairs}
    conditions = [WebhookStatus.correlation_id.in_(by_correlation)]
    if by_pid:
        conditions.append(WebhookStatus.provider_message_id.in_({pid for _, pid in by_pid}))
    found: dict[int, str] = {}
    for row in session.execute(
        select(
            WebhookStatus.identity_id,
            WebhookStatus.correlation_id,
            WebhookStatus.provider_message_id,
            WebhookStatus.status,
        )
        .where(
            WebhookStatus.applied_at.is_(None),
            WebhookStatus.identity_id.in_(set(identity_of.values())),
            WebhookStatus.status.in_(advancing),
            or_(*conditions),
        )
        .order_by(WebhookStatus.id)
    ):
        mid = by_correlation.get(row.correlation_id or "")
        if mid is None or identity_of[mid] != row.identity_id:
            mid = by_pid.get((row.identity_id, row.provider_message_id))
        if mid is not None:
            found.setdefault(
                mid, f"the provider reported it {row.status} (stored, not applied yet)"
            )
    return found
