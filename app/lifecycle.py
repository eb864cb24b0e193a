"""The message state machine: the one rule every other module obeys.

Pure: no I/O, no imports from the rest of Ratchet, time passed in by the caller.
`app/repo/transitions.py` applies these decisions in SQL as a compare-and-set update.

States are ordered ``queued < sending < sent < delivered < read``; ``failed`` stands
apart. A status moves only forward; ``failed`` is left only by an operator's requeue.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Status(StrEnum):
    QUEUED = "queued"
    SENDING = "sending"
    SENT = "sent"
    DELIVERED = "delivered"
    READ = "read"
    FAILED = "failed"


class Source(StrEnum):
    """Who asks for a move: the tenant's API call, a worker, a provider webhook, a person."""

    API = "api"
    WORKER = "worker"
    WEBHOOK = "webhook"
    OPERATOR = "operator"


RANK: dict[Status, int] = {
    Status.QUEUED: 0,
    Status.SENDING: 1,
    Status.SENT: 2,
    Status.DELIVERED: 3,
    Status.READ: 4,
}

# A provider's word for a status -> ours. Words absent here (Twilio's queued, accepted,
# sending, scheduled; WhatsApp's deleted, ...) are recorded and change nothing. WhatsApp's
# `played` (a voice message played, after it was read) implies delivered and read.
PROVIDER_WORDS: dict[str, Status] = {
    "sent": Status.SENT,
    "delivered": Status.DELIVERED,
    "read": Status.READ,
    "played": Status.READ,
    "failed": Status.FAILED,
    "undelivered": Status.FAILED,
}
FAILED_WORDS: tuple[str, ...] = tuple(w for w, s in PROVIDER_WORDS.items() if s is Status.FAILED)
# Twilio's steps below `sent` (the message is with Twilio, not yet passed on): recorded only,
# except for a message still `sending`, whose create answer was lost or is late: for it they
# are the provider's acceptance, our `sent`, exactly as a 2xx with a sid is.
ACCEPTED_WORDS: frozenset[str] = frozenset({"queued", "accepted", "scheduled", "sending"})

# The column holding the time each state was first reached in the current cycle.
TIMESTAMP_FIELD: dict[Status, str] = {status: f"{status.value}_at" for status in Status}

_BELOW = {s: frozenset(o for o in RANK if RANK[o] < RANK[s]) for s in RANK}

# (source, target) -> the states a message may be in for the move to apply.
# Anything absent is not a move that source can make.
ALLOWED: dict[tuple[Source, Status], frozenset[Status]] = {
    # A worker's first claim; a retry claim stays `sending` (an attempt, not a move).
    (Source.WORKER, Status.SENDING): frozenset({Status.QUEUED}),
    # The provider accepted: `sending -> sent`; a webhook that got further wins.
    (Source.WORKER, Status.SENT): frozenset({Status.SENDING}),
    # Permanent failure or attempts exhausted, only while we still hold the send; or its
    # validity ended before any claim (`expired`, never sent).
    (Source.WORKER, Status.FAILED): frozenset({Status.SENDING, Status.QUEUED}),
    # Webhooks move any lower rank up (skipping allowed), never out of `failed`.
    (Source.WEBHOOK, Status.SENT): _BELOW[Status.SENT],
    (Source.WEBHOOK, Status.DELIVERED): _BELOW[Status.DELIVERED],
    (Source.WEBHOOK, Status.READ): _BELOW[Status.READ],
    # A message the phone has shown did not fail.
    (Source.WEBHOOK, Status.FAILED): frozenset({Status.SENDING, Status.SENT}),
    # The one backward edge: a person requeues a failed message (a new cycle).
    (Source.OPERATOR, Status.QUEUED): frozenset({Status.FAILED}),
    # A person cancels a message no worker has claimed yet: it ends `failed`, never sent.
    # Once claimed it may be in flight, so it is no longer theirs to cancel.
    (Source.OPERATOR, Status.FAILED): frozenset({Status.QUEUED}),
}


class Refusal(StrEnum):
    """Why a requested move did not apply (recorded on the refused event)."""

    LATE = "late"  # a lower status after a higher one: a true fact about the past
    SAME = "same"  # already in that state
    FAILED_IS_FINAL = "failed_is_final"  # nothing leaves `failed` by itself
    ALREADY_SHOWN = "already_shown"  # `failed` after `delivered`/`read`
    NOT_FAILED = "not_failed"  # requeue of a message that has not failed
    CLAIMED = "claimed"  # a cancel after a worker claimed it: it may be in flight
    NOT_ALLOWED = "not_allowed"  # any other move this source cannot make
    # Decided by the caller's fence, not by the states: a worker whose attempt was taken
    # over, or a status that belongs to an earlier cycle.
    STALE = "stale"


@dataclass(frozen=True, slots=True)
class Decision:
    applies: bool
    current: Status
    target: Status
    refusal: Refusal | None = None

    @property
    def fills_own_timestamp(self) -> bool:
        """A late lower status still records when it happened, if that is not known yet."""
        return self.refusal is Refusal.LATE


def allowed_from(source: Source, target: Status) -> frozenset[Status]:
    """The states from which `source` may move a message to `target` (empty: never)."""
    return ALLOWED.get((source, target), frozenset())


def is_allowed(source: Source, current: Status, target: Status) -> bool:
    return current in allowed_from(source, target)


def decide(source: Source, current: Status, target: Status) -> Decision:
    """Whether `source` may move a message from `current` to `target`, and if not, why."""
    if is_allowed(source, current, target):
        return Decision(True, current, target)
    return Decision(False, current, target, _refusal(source, current, target))


def _refusal(source: Source, current: Status, target: Status) -> Refusal:
    if current == target:
        return Refusal.SAME
    if source is Source.OPERATOR and target is Status.FAILED:
        return Refusal.CLAIMED
    if source is Source.OPERATOR:
        return Refusal.NOT_FAILED if current is not Status.FAILED else Refusal.NOT_ALLOWED
    if current is Status.FAILED:
        return Refusal.FAILED_IS_FINAL
    if target is Status.FAILED:
        return (
            Refusal.ALREADY_SHOWN
            if current in (Status.DELIVERED, Status.READ)
            else (Refusal.NOT_ALLOWED)
        )
    target_rank, current_rank = RANK[target], RANK[current]
    if target_rank < current_rank:
        return Refusal.LATE
    return Refusal.NOT_ALLOWED


def is_terminal(status: Status) -> bool:
    """No further send work: failed, or the provider has taken it (sent or beyond)."""
    return status is Status.FAILED or RANK[status] >= RANK[Status.SENT]


def is_advanced(status: Status) -> bool:
    """The provider has the message: sent, delivered or read."""
    return status is not Status.FAILED and RANK[status] >= RANK[Status.SENT]
