"""WhatsApp deliveries that name a business account and no phone number: Meta's account,
template and number-quality webhooks (`app/providers/whatsapp_account.py`).

1. The identities of the named business accounts, in one query. Known: the delivery must
   verify with one of their app secrets (different apps may subscribe to one account), and
   is acted on only for those whose own secret verifies it.
   Unknown: it is checked against every WhatsApp app secret Ratchet holds, and kept
   (unmatched) when one verifies, since Meta signed it and would resend it for days if
   refused; otherwise it is refused with the very answer an unknown number gets.
2. The raw delivery and its changes (`provider_events`, deduplicated) are committed, and
   acted on in the same transaction (`app/meta_events.py`); a 200 says what was kept.
3. After the commit, the drains of identities whose held messages were released are rung.
"""

from __future__ import annotations

import logging
from typing import Any

from flask import jsonify
from flask.typing import ResponseReturnValue

from app.clock import utcnow
from app.crypto import get_box
from app.db import Database, request_db
from app.json_errors import json_error
from app.meta_events import act_on_events
from app.providers.base import Provider
from app.providers.whatsapp_account import account_changes, numbers_by_account
from app.repo.inbox import store_delivery
from app.repo.provider_events import (
    identities_of_accounts,
    keep_events,
    learn_business_accounts,
    whatsapp_secret_holders,
)
from app.repo.routing import RoutedIdentity
from app.views.webhook_verify import refused
from jobs.ringing import ring_message

log = logging.getLogger(__name__)

# A real delivery names one business account; this caps the lookup an unsigned body causes.
MAX_ACCOUNTS = 100


def receive_account_delivery(
    provider: Provider, raw: bytes, headers: dict[str, str], payload: dict[str, Any]
) -> ResponseReturnValue:
    changes = account_changes(payload)
    accounts = list(dict.fromkeys(change.business_account_id for change in changes))
    if len(accounts) > MAX_ACCOUNTS:
        return json_error(
            400, f"the delivery names {len(accounts)} business accounts; a real one names one"
        )
    db = request_db()
    with db.autocommit() as connection:  # one read
        known = identities_of_accounts(connection, accounts)
        candidates = known or whatsapp_secret_holders(connection)
    # An unknown account's delivery needs one verifying secret, not every one.
    signers = signed_by(provider, raw, headers, candidates, every=bool(known))
    if not signers:
        return refused(provider, known=bool(known))
    if not known:
        log.warning("whatsapp account-level delivery for unknown business accounts %s", accounts)
    # Acted on for the identities whose own app secret verifies it, never for another
    # identity that merely names the same business account.
    verified = frozenset(identity.id for identity in signers if known)
    now = utcnow()
    owner = next(iter(verified)) if len(verified) == 1 else None
    with db.transaction() as session:
        delivery_id = store_delivery(
            session, provider.name, owner, headers, raw.decode("utf-8"), now
        )
        kept = keep_events(session, delivery_id, changes, now)
        acted = act_on_events(session, kept, now, verified)
    # Committed above; only now ring the drains (a lost ring: the sweeper's job).
    for identity_id, lane in sorted(acted.ring):
        ring_message(0, lane, identity_id)
    return jsonify(
        received=len(changes),
        stored=delivery_id,
        kept=len(kept),
        duplicates=len(changes) - len(kept),
        matched=bool(known),
        actions=list(acted.actions.values()),
    )


def signed_by(
    provider: Provider,
    raw: bytes,
    headers: dict[str, str],
    candidates: list[RoutedIdentity],
    *,
    every: bool = True,
) -> list[RoutedIdentity]:
    """The identities whose app secret verifies the delivery (the first only, unless
    `every`). Each distinct secret (by its decrypted value) is tried once (one HMAC of the
    body each): identities of one Meta app share it, so an unsigned body naming an unknown
    account costs one HMAC per app."""
    box = get_box()
    verdicts: dict[str, bool] = {}
    signers = []
    for identity in candidates:
        sealed = identity.app_secret_encrypted
        if not sealed:
            continue
        secret = box.decrypt_remembered(sealed)
        if secret not in verdicts:
            verdicts[secret] = provider.verify_signature(raw, headers, secret)
        if verdicts[secret]:
            signers.append(identity)
            if not every:
                break
    return signers


def learn_business_accounts_of(
    db: Database, payload: dict[str, Any], by_route: dict[str, RoutedIdentity]
) -> list[str]:
    """After a verified delivery of numbers: each number whose business account is not
    known yet learns it from the entry naming it (`entry[].id`). Returns the routing ids
    whose identity changed (to be looked up afresh). Costs nothing once every number knows."""
    unknown = {
        rid: identity for rid, identity in by_route.items() if not identity.business_account_id
    }
    if not unknown:
        return []
    accounts = numbers_by_account(payload)
    learned = {identity.id: accounts[rid] for rid, identity in unknown.items() if rid in accounts}
    if not learned:
        return []
    with db.transaction() as session:
        done = set(learn_business_accounts(session, learned))
    return [rid for rid, identity in unknown.items() if identity.id in done]


def keep_account_changes_beside(
    db: Database,
    provider: Provider,
    raw: bytes,
    headers: dict[str, str],
    delivery_id: int,
    payload: dict[str, Any],
) -> None:
    """A verified delivery of a number that also carries account-level changes (rare: Meta
    sends one field a delivery): they are kept and acted on too, under the delivery
    already stored, for the account's identities whose app secret verifies it."""
    changes = account_changes(payload)
    if not changes:
        return
    accounts = list(dict.fromkeys(change.business_account_id for change in changes))
    with db.autocommit() as connection:
        known = identities_of_accounts(connection, accounts[:MAX_ACCOUNTS])
    verified = frozenset(identity.id for identity in signed_by(provider, raw, headers, known))
    now = utcnow()
    with db.transaction() as session:
        kept = keep_events(session, delivery_id, changes, now)
        acted = act_on_events(session, kept, now, verified)
    for identity_id, lane in sorted(acted.ring):
        ring_message(0, lane, identity_id)
