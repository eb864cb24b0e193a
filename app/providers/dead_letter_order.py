"""The order dead letters are shown in: the groups a person can act on first (docs/design.md
section 7), and the rank stored with each failed message so SQL can order by it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .base import FailureClass

EXHAUSTED = FailureClass.EXHAUSTED
NEEDS_HUMAN = FailureClass.NEEDS_HUMAN
PERMANENT = FailureClass.PERMANENT


@dataclass(frozen=True, slots=True)
class DeadLetterGroup:
    """A group of dead letters in the order a person should look at them."""

    name: str
    failure_class: FailureClass
    # provider -> codes; None: any code (or none) of that class.
    codes: Mapping[str, frozenset[int]] | None = None

    def matches(self, provider: str, failure_class: FailureClass, code: int | None) -> bool:
        if failure_class is not self.failure_class:
            return False
        if self.codes is None:
            return True
        return code is not None and code in self.codes.get(provider, frozenset())


# The ones a person can act on first (docs/design.md section 7): exhausted, template
# rejected, window closed, unknown code. First match wins; everything else comes after,
# in `rank` order.
ACTIONABLE_ORDER: tuple[DeadLetterGroup, ...] = (
    DeadLetterGroup("exhausted", EXHAUSTED),
    DeadLetterGroup(
        "template",
        NEEDS_HUMAN,
        {"whatsapp": frozenset(range(132000, 132017)), "twilio": frozenset({21656})},
    ),
    DeadLetterGroup(
        "window_closed",
        PERMANENT,
        # Messenger's code 10 is `permanent` only with its window subcode (2018278).
        {
            "whatsapp": frozenset({131047}),
            "twilio": frozenset({63016}),
            "messenger": frozenset({10}),
            "instagram": frozenset({10}),
        },
    ),
    DeadLetterGroup("unknown_code", NEEDS_HUMAN),
)


def dead_letter_rank(provider: str, failure_class: FailureClass, code: int | None) -> int:
    """Sort key for the dead-letter list: lower comes first."""
    for position, group in enumerate(ACTIONABLE_ORDER):
        if group.matches(provider, failure_class, code):
            return position
    return len(ACTIONABLE_ORDER)


def rank_of(provider: str, failure_class: str | None, code: Any) -> int | None:
    """The dead-letter rank stored with a failed message (a value SQL can order by); None
    for an expired one: a dead letter of its own class, off the actionable list."""
    try:
        known = FailureClass(failure_class or "")
    except ValueError:
        known = FailureClass.NEEDS_HUMAN
    if known is FailureClass.EXPIRED:
        return None
    return dead_letter_rank(provider, known, code if isinstance(code, int) else None)
