"""A webhook batch's statuses as the inbox stores them, and the values that cannot be."""

from __future__ import annotations

from app.providers.base import Provider, WebhookBatch
from app.repo.inbox import IncomingStatus

# Column widths of webhook_statuses and conversation_windows: a value past them (or with a
# NUL, which PostgreSQL text cannot hold) is no real provider's.
STATUS_LIMITS = {"provider_message_id": 200, "status": 20, "correlation_id": 512, "routing_id": 100}
WINDOW_RECIPIENT = 100


def fits(value: str | None, width: int) -> bool:
    return value is None or (len(value) <= width and "\x00" not in value)


def storable_statuses(statuses: list[IncomingStatus]) -> tuple[list[IncomingStatus], int]:
    """The statuses whose values fit their columns, and how many did not."""
    kept = [
        status
        for status in statuses
        if all(fits(getattr(status, name), width) for name, width in STATUS_LIMITS.items())
    ]
    return kept, len(statuses) - len(kept)


def incoming_statuses(
    provider: Provider, batch: WebhookBatch, by_route: dict[str, int]
) -> list[IncomingStatus]:
    statuses = []
    for update in batch.statuses:
        errors = tuple(error.to_dict() for error in update.errors)
        failure_class = None
        if update.errors:
            failure_class = provider.classify(
                update.errors[0].http_status, update.errors[0].code
            ).value
        statuses.append(
            IncomingStatus(
                identity_id=by_route.get(update.routing_id),
                routing_id=update.routing_id,
                provider=provider.name,
                provider_message_id=update.provider_message_id,
                status=update.status,
                provider_time=update.provider_time,
                correlation_id=update.correlation_id,
                errors=errors,
                failure_class=failure_class,
                raw=update.raw,
            )
        )
    return statuses
