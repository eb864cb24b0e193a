"""The plain-text status summary a support agent pastes into a customer ticket.

Only what a customer may be told: state and when, the provider's error code and our meaning
of it, attempts, requeues. The recipient is masked; the body, keys, tokens and all of the
provider's free text (its title, message and details, which can echo the number or the
template's parameters) are never in it.
"""

from __future__ import annotations

from datetime import datetime

from app.late_statuses import late_failures
from app.repo.timeline import MessageStory
from app.views.pages import absolute, duration, mask_phone


def held_by(story: MessageStory, now: datetime) -> str | None:
    """What holds a waiting message (its identity or its campaign lane paused), or None.

    Held means nothing of it can be at the provider: `queued`, or `sending` with no call
    under way (the attempt that paused its identity gives its lease back) and no outcome
    unknown. The page and the ticket then say held, never sending, and count no lease or
    next attempt down. A pause stops new claims only: a call already in flight when it came
    (a live lease), or one whose outcome is unknown, may still reach the provider, so that
    message is shown as it is, never as held."""
    m, identity = story.message, story.identity
    if m.status not in ("queued", "sending"):
        return None
    if m.status == "sending" and (
        m.had_unknown_outcome or (m.lease_until is not None and m.lease_until > now)
    ):
        return None
    if identity.paused_at is not None:
        return "identity paused"
    if m.lane == "campaign" and identity.campaign_paused_at is not None:
        return "campaign lane paused"
    return None


def ticket_summary(story: MessageStory, meaning: str, now: datetime) -> str:
    m = story.message
    since = getattr(m, f"{m.status}_at", None)
    when = f" since {absolute(since)} ({duration(now - since)} ago)" if since else ""
    held = held_by(story, now)
    state = f"held ({held}), nothing is sent until it resumes" if held else f"{m.status}{when}"
    lines = [
        f"Message #{m.id} via {story.identity.provider}, to {mask_phone(m.recipient)}",
        f"State: {state}",
    ]
    if m.status == "failed":
        error = m.last_error or {}
        code = error.get("code")
        if m.failure_class == "canceled":
            lines.append("Why: canceled by support before it was sent; it was never sent")
        else:
            named = f"{code}" if code is not None else "no code"
            lines.append(f"Provider error: {named} (class {m.failure_class or 'unknown'})")
            lines.append(f"Meaning: {meaning}")
    for late in late_failures(story.events):
        lines.append(f"Later: {late.sentence} ({absolute(late.at)})")
    total = len(story.attempts)
    lines.append(f"Attempts: {m.attempt} this cycle, {total} in all")
    requeues = [e for e in story.events if e.kind == "requeue" and e.applied]
    if requeues:
        last = requeues[-1]
        lines.append(f"Requeues: {len(requeues)} (last {absolute(last.received_at)})")
    else:
        lines.append("Requeues: none")
    return "\n".join(lines)
