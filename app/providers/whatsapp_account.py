"""WhatsApp's account-level webhooks: the changes that name a business account (WABA,
`entry[].id`) and no phone number (`value.metadata.phone_number_id`).

Meta sends these on the same endpoint, signed the same way, in the same envelope:
`account_update`, `message_template_status_update`, `message_template_quality_update`,
`template_category_update`, `message_template_components_update`,
`phone_number_quality_update`, `account_alerts` and the rest of that family
(https://developers.facebook.com/documentation/business-messaging/whatsapp/webhooks/reference/message_template_status_update
and the reference pages beside it). Pure: what the delivery says, nothing about the database.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .parsing import str_or_none
from .whatsapp import OBJECT

# The words of `value` that say what happened, by field, in the order they are looked for
# (a template quality change has no `event`, only its new score).
EVENT_KEYS = ("event", "new_quality_score", "new_category")


@dataclass(frozen=True, slots=True)
class AccountChange:
    """One change of an account-level delivery, as Meta sent it (`value` verbatim)."""

    business_account_id: str
    field: str
    event: str | None
    template_name: str | None
    template_language: str | None
    provider_time: datetime | None
    value: dict[str, Any]

    @property
    def dedupe_key(self) -> str:
        """The same change redelivered has the same key (Meta retries whole deliveries)."""
        when = self.provider_time.isoformat() if self.provider_time else None
        canonical = json.dumps(
            [self.business_account_id, self.field, when, self.value],
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
        )
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()

    @property
    def reason(self) -> str | None:
        """Meta's own words for why, where the change gives any (a rejection, a ban)."""
        value = self.value
        rejection = value.get("rejection_info")
        if isinstance(rejection, dict) and rejection.get("reason"):
            return str(rejection["reason"])
        reason = str_or_none(value.get("reason"))
        if reason and reason != "NONE":
            return reason
        return None


def _entries(payload: Any) -> list[tuple[str | None, Any, list[Any]]]:
    """(business account id, time, changes) of each entry; lenient, since the delivery
    has already been verified and is kept whole whatever its shape."""
    if not isinstance(payload, dict) or payload.get("object") != OBJECT:
        return []
    entries = payload.get("entry")
    if not isinstance(entries, list):
        return []
    found = []
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        changes = entry.get("changes")
        found.append(
            (
                str_or_none(entry.get("id")),
                entry.get("time"),
                changes if isinstance(changes, list) else [],
            )
        )
    return found


def _has_number(value: dict[str, Any]) -> bool:
    metadata = value.get("metadata")
    return isinstance(metadata, dict) and metadata.get("phone_number_id") is not None


def account_changes(payload: Any) -> list[AccountChange]:
    """Every change that names no phone number, under the business account of its entry.
    A change whose entry has no id is left out (nothing to route it by); its delivery is
    still kept whole by the caller."""
    found = []
    for account, time, changes in _entries(payload):
        if not account:
            continue
        for change in changes:
            if not isinstance(change, dict) or not isinstance(change.get("value"), dict):
                continue
            value = change["value"]
            if _has_number(value):
                continue
            found.append(
                AccountChange(
                    business_account_id=account,
                    field=str_or_none(change.get("field")) or "unknown",
                    event=next(
                        (str(value[key]) for key in EVENT_KEYS if str_or_none(value.get(key))),
                        None,
                    ),
                    template_name=str_or_none(value.get("message_template_name")),
                    template_language=str_or_none(value.get("message_template_language")),
                    provider_time=_time(time),
                    value=value,
                )
            )
    return found


def business_account_ids(payload: Any) -> list[str]:
    """The business accounts the account-level changes name, deduplicated, in order."""
    return list(dict.fromkeys(change.business_account_id for change in account_changes(payload)))


def numbers_by_account(payload: Any) -> dict[str, str]:
    """{phone number id: business account id} for every change naming both: how Ratchet
    learns a number's business account from its ordinary deliveries."""
    found: dict[str, str] = {}
    for account, _, changes in _entries(payload):
        if not account:
            continue
        for change in changes:
            value = change.get("value") if isinstance(change, dict) else None
            if isinstance(value, dict) and _has_number(value):
                found.setdefault(str(value["metadata"]["phone_number_id"]), account)
    return found


def _time(value: Any) -> datetime | None:
    """`entry[].time`: unix seconds (absent in some of Meta's examples)."""
    try:
        return datetime.fromtimestamp(int(str(value)), UTC)
    except (TypeError, ValueError, OverflowError, OSError):
        return None
