"""The identities a webhook delivery names, looked up in one query before it is verified.

The lookup runs for unauthenticated requests, so it costs one statement however many
routing ids the body names, and a routing id no identity could have never reaches the
database (a NUL cannot be sent to PostgreSQL as text at all).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from sqlalchemy import Connection, Table, bindparam, select
from sqlalchemy.orm import Session

from app.models import Identity

ACCOUNT_ID_LENGTH = 100  # identities.account_id is String(100)

# Built once (every webhook delivery runs it), the ids as one expanding parameter.
_BY_ACCOUNT_IDS = select(Identity).where(
    Identity.provider == bindparam("provider_"),
    Identity.account_id.in_(bindparam("account_ids", expanding=True)),
)


def identities_by_routing_id(
    session: Session, provider: str, routing_ids: list[str]
) -> dict[str, Identity]:
    """{routing id: identity} for the ids an identity of `provider` has, in the order given."""
    candidates = [rid for rid in routing_ids if _could_be_account_id(rid)]
    if not candidates:
        return {}
    found = {
        identity.account_id: identity
        for identity in session.scalars(
            _BY_ACCOUNT_IDS, {"provider_": provider, "account_ids": candidates}
        )
    }
    return {rid: found[rid] for rid in routing_ids if rid in found}


def _could_be_account_id(routing_id: str) -> bool:
    return 0 < len(routing_id) <= ACCOUNT_ID_LENGTH and "\x00" not in routing_id


@dataclass(frozen=True, slots=True)
class RoutedIdentity:
    """What a webhook needs of an identity it names: who it is and its (sealed) secret."""

    id: int
    account_id: str
    app_secret_encrypted: str | None
    # WhatsApp: the business account, once known (None: learn it from this delivery).
    business_account_id: str | None = None


_identities = cast(Table, Identity.__table__)
_ROUTED = select(
    _identities.c.id,
    _identities.c.account_id,
    _identities.c.app_secret_encrypted,
    _identities.c.business_account_id,
).where(
    _identities.c.provider == bindparam("provider_"),
    _identities.c.account_id.in_(bindparam("account_ids", expanding=True)),
)


def routed_identities(
    session: Session | Connection, provider: str, routing_ids: list[str]
) -> dict[str, RoutedIdentity]:
    """`identities_by_routing_id` for the webhook's hot path: the three columns it needs,
    without loading ORM objects (that cost a fifth of a delivery's CPU)."""
    candidates = [rid for rid in routing_ids if _could_be_account_id(rid)]
    if not candidates:
        return {}
    found = {
        row.account_id: RoutedIdentity(
            row.id, row.account_id, row.app_secret_encrypted, row.business_account_id
        )
        for row in session.execute(_ROUTED, {"provider_": provider, "account_ids": candidates})
    }
    return {rid: found[rid] for rid in routing_ids if rid in found}


class RememberedRouting:
    """The identity behind each routing id, as this app last read it: a webhook
    delivery of one known number need not look it up again.

    Only a routing id's identity is remembered, never that a delivery verified: a
    remembered identity's secret is used to verify, and the statement that then records
    the delivery also checks that the identity still has that sealed secret
    (`record_one_status(..., still_sealed=...)`), so a secret set again takes effect at
    once. A signature that does not verify with the remembered secret is checked again
    against a fresh lookup. Identities are never deleted, and a routing id names one
    identity for good (`identities` is unique on provider and account id).
    """

    LIMIT = 1024  # routing ids per process; far more than one installation has

    def __init__(self) -> None:
        self._by_id: dict[tuple[str, str], RoutedIdentity] = {}

    def get(self, provider: str, routing_id: str) -> RoutedIdentity | None:
        return self._by_id.get((provider, routing_id))

    def keep(self, provider: str, by_route: dict[str, RoutedIdentity]) -> None:
        new = sum(1 for routing_id in by_route if (provider, routing_id) not in self._by_id)
        if len(self._by_id) + new > self.LIMIT:
            self._by_id.clear()
        for routing_id, identity in by_route.items():
            self._by_id[(provider, routing_id)] = identity

    def forget(self, provider: str, routing_id: str) -> None:
        self._by_id.pop((provider, routing_id), None)
