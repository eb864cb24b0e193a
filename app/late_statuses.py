"""Statuses the guard refused that a person should still hear of.

A lower status after a higher one is logged. A `failed` after `delivered` or `read`
(`already_shown`) cannot undo what the phone showed, but the provider did say it: it is
counted (`ratchet_late_failures`), and the message's page and ticket summary show it as
"the provider later reported: code, words" (`late_failures`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app import instruments
from app.lifecycle import Refusal, Status
from app.repo.transitions import Transition

log = logging.getLogger("app.reconcile")


def note_refusal(transition: Transition, message_id: int, provider: str) -> None:
    if transition.refusal is Refusal.LATE:
        log.info(
            "late %s for message %s (now %s): recorded, not applied",
            transition.to_status.value,
            message_id,
            transition.from_status,
        )
    elif transition.refusal is Refusal.ALREADY_SHOWN and not transition.duplicate:
        instruments.LATE_FAILURES.labels(provider).inc()
        log.warning(
            "message %s: %s reported failed after %s; shown on its page, not applied",
            message_id,
            provider,
            transition.from_status,
        )


@dataclass(frozen=True, slots=True)
class LateFailure:
    at: datetime
    code: Any
    words: str

    @property
    def sentence(self) -> str:
        code = "no code" if self.code is None else str(self.code)
        return f"the provider later reported: {code}, {self.words}"


def late_failures(events: list[Any]) -> list[LateFailure]:
    """The refused `failed` events of a message's timeline that came after the phone had
    shown it, oldest first, with the provider's code and words."""
    found = []
    for event in events:
        if (
            event.to_status != Status.FAILED.value
            or event.applied
            or event.refusal != Refusal.ALREADY_SHOWN.value
        ):
            continue
        errors = (event.detail or {}).get("errors") or []
        first = errors[0] if errors and isinstance(errors[0], dict) else {}
        words = first.get("title") or first.get("message") or "failed, no reason given"
        found.append(
            LateFailure(event.provider_time or event.received_at, first.get("code"), str(words))
        )
    return found
