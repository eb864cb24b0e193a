"""The fault runs' checker, in the manner of a queue checker: set what the API acknowledged
against what the provider accepted and what the database says, and print one line.

    acknowledged N, lost 0, provider duplicates 0, backward moves 0, out of order 0,
    unexplained 0, dead letters D (by class), p99 to terminal T

- lost: an acknowledged message that is neither sent (or later) nor ended on purpose
  (failed, expired, canceled) when the run is over;
- provider duplicates: copies past the first that the provider accepted for one message;
- backward moves: an applied change to a status ranked below the one it left (a requeue
  moves from `failed`, which has no rank), or a row left below the highest status its
  current cycle reached;
- out of order: a recipient's messages the provider accepted in another order than the API
  acknowledged them, counted per message sent before one whose acknowledgement came
  before this one was even asked for (two requests in flight at once have no order
  between them), unless its timeline says it went past a retry held too long; a message
  an operator requeued goes when they say, and nothing sent before it is out of order
  for that;
- unexplained: a send the provider accepted that names no acknowledged message, a message
  the database calls sent with no send the provider accepted, or one the provider
  accepted that the database ended on our own account (canceled, expired, exhausted);
- p99 to terminal: from acknowledgement to leaving the queue (sent or later, or ended on
  purpose), seconds.

The inputs are plain records, read by the run from the API's answers, the sandbox and the
database, so the checker can be shown failures it must see (`test_checker.py`).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

# The forward order within a cycle; `failed` and `canceled` end a cycle from any of these.
RANK = {"queued": 0, "sending": 1, "sent": 2, "delivered": 3, "read": 4}
REACHED = {"sent", "delivered", "read"}
ENDED = {"failed", "canceled"}
# Failure classes that are our own decision, never the provider's word: a message with one
# of these must not be at the provider.
OURS = {"canceled", "expired", "exhausted"}


@dataclass(frozen=True, slots=True)
class Acknowledged:
    """A message the API answered 201 (or 200 for a repeated key) for."""

    message_id: int
    recipient: str
    at: float  # when the API answered, seconds
    asked_at: float | None = None  # when the request was sent (None: at `at`)

    @property
    def asked(self) -> float:
        return self.at if self.asked_at is None else self.asked_at


@dataclass(frozen=True, slots=True)
class Accepted:
    """A send the provider accepted, named by the correlation id our request carried."""

    message_id: int | None  # None: the request named no message we know
    recipient: str
    at: float


@dataclass(frozen=True, slots=True)
class Stored:
    """What the database says of a message at the end of the run."""

    message_id: int
    status: str
    failure_class: str | None
    terminal_at: float | None  # when it left the queue (sent, or ended on purpose), seconds
    # Applied changes in order: (cycle, from status, to status).
    changes: tuple[tuple[int, str | None, str | None], ...] = ()
    held_past_a_retry: bool = False  # its timeline says it went past a held retry


@dataclass
class Verdict:
    acknowledged: int = 0
    lost: list[int] = field(default_factory=list)
    duplicates: int = 0
    backward: list[int] = field(default_factory=list)
    out_of_order: list[int] = field(default_factory=list)
    unexplained: int = 0
    dead_letters: Counter[str] = field(default_factory=Counter)
    p99_to_terminal: float = 0.0

    @property
    def clean(self) -> bool:
        return not (
            self.lost or self.duplicates or self.backward or self.out_of_order or self.unexplained
        )

    def line(self) -> str:
        classes = ", ".join(f"{name} {n}" for name, n in sorted(self.dead_letters.items()))
        dead = sum(self.dead_letters.values())
        return (
            f"acknowledged {self.acknowledged}, lost {len(self.lost)}, provider duplicates "
            f"{self.duplicates}, backward moves {len(self.backward)}, out of order "
            f"{len(self.out_of_order)}, unexplained {self.unexplained}, dead letters {dead}"
            + (f" ({classes})" if classes else "")
            + f", p99 to terminal {self.p99_to_terminal:.1f} s"
        )


def check(
    acknowledged: Iterable[Acknowledged],
    accepted: Iterable[Accepted],
    stored: Iterable[Stored],
) -> Verdict:
    acks: dict[int, Acknowledged] = {}
    for ack in sorted(acknowledged, key=lambda a: a.at):
        acks.setdefault(ack.message_id, ack)  # a key repeated: the first answer counts
    rows = {s.message_id: s for s in stored}
    sends = list(accepted)
    verdict = Verdict(acknowledged=len(acks))
    copies = Counter(s.message_id for s in sends if s.message_id in acks)
    verdict.duplicates = sum(n - 1 for n in copies.values())
    verdict.unexplained = sum(1 for s in sends if s.message_id not in acks)
    for message_id in acks:
        row = rows.get(message_id)
        if row is None or row.status not in REACHED | ENDED:
            verdict.lost.append(message_id)
            continue
        if row.status in REACHED and not copies[message_id]:
            verdict.unexplained += 1
        if row.status == "failed":
            verdict.dead_letters[row.failure_class or "unknown"] += 1
            if row.failure_class in OURS and copies[message_id]:
                verdict.unexplained += 1
        if _moved_back(row.changes) or _left_below(row):
            verdict.backward.append(message_id)
    verdict.out_of_order = _out_of_order(acks, rows, sends)
    verdict.p99_to_terminal = _p99(
        rows[i].terminal_at - a.at
        for i, a in acks.items()
        if i in rows and rows[i].terminal_at is not None
    )
    return verdict


def _moved_back(changes: Iterable[tuple[int, str | None, str | None]]) -> bool:
    for _cycle, before, after in changes:
        if before in RANK and after in RANK and RANK[after] < RANK[before]:
            return True
    return False


def _left_below(row: Stored) -> bool:
    """The row's status ranks below the highest its current cycle reached."""
    if row.status not in RANK or not row.changes:
        return False
    cycle = max(c for c, _, _ in row.changes)
    reached = [RANK[after] for c, _, after in row.changes if c == cycle and after in RANK]
    return bool(reached) and RANK[row.status] < max(reached)


def _out_of_order(
    acks: dict[int, Acknowledged], rows: dict[int, Stored], sends: list[Accepted]
) -> list[int]:
    """Each message accepted at the provider before one of its recipient's messages that
    the API had acknowledged before this one was asked for (first copies only), unless
    it was held too long or that one was requeued."""
    first: dict[int, float] = {}
    for send in sorted(sends, key=lambda s: s.at):
        if send.message_id in acks:
            first.setdefault(send.message_id, send.at)
    by_recipient: dict[str, list[int]] = defaultdict(list)
    for message_id in sorted(first, key=first.__getitem__):
        by_recipient[acks[message_id].recipient].append(message_id)
    # A message requeued by an operator goes again when they say, behind whatever its
    # recipient was sent meanwhile: those are not out of order for going first.
    requeued = {i for i, row in rows.items() if any(cycle > 0 for cycle, _, _ in row.changes)}
    wrong = []
    for order in by_recipient.values():
        for position, message_id in enumerate(order):
            asked = acks[message_id].asked
            later = [o for o in order[position + 1 :] if o not in requeued]
            overtook = any(acks[o].at < asked for o in later)
            row = rows.get(message_id)
            if overtook and not (row is not None and row.held_past_a_retry):
                wrong.append(message_id)
    return wrong


def _p99(values: Iterable[float]) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]
