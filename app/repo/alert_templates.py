"""The template alert's reading: per WhatsApp identity, whether Meta has a template held on
its business account (paused, disabled or rejected: its messages wait). Read beside
`read_alerts` by the evaluator, with the same `Reading` shape; an identity's restricted or
disabled account is the `paused` alert's, with Meta's words as the reason."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.models import Identity, TemplateHold
from app.repo.alert_reading import Reading

KIND = "template_held"


def template_held_readings(session: Session) -> list[Reading]:
    identities = list(
        session.execute(
            select(
                Identity.id, Identity.tenant_id, Identity.account_id, Identity.business_account_id
            )
            .where(Identity.provider == "whatsapp", Identity.business_account_id.is_not(None))
            .order_by(Identity.id)
        )
    )
    if not identities:
        return []
    accounts = sorted({identity.business_account_id for identity in identities})
    holds: dict[str, list[TemplateHold]] = {}
    for hold in session.scalars(
        select(TemplateHold)
        .where(TemplateHold.business_account_id.in_(accounts), TemplateHold.released_at.is_(None))
        .order_by(TemplateHold.held_at, TemplateHold.id)
    ):
        holds.setdefault(hold.business_account_id, []).append(hold)
    readings = []
    for identity in identities:
        held = holds.get(identity.business_account_id, [])
        name = f"whatsapp {identity.account_id} (identity {identity.id})"
        words = "; ".join(
            f"template {h.template_name} ({h.template_language}) {h.state.lower()}"
            + (f": {h.reason}" if h.reason else "")
            for h in held
        )
        readings.append(
            Reading(
                alert_key=f"{KIND}:{identity.id}",
                kind=KIND,
                tenant_id=identity.tenant_id,
                identity_id=identity.id,
                lane=None,
                firing=bool(held),
                summary=(
                    f"{name}: Meta holds {words}; its messages wait"
                    if held
                    else f"{name}: no template held"
                ),
                figures={
                    "held": [
                        {
                            "template": h.template_name,
                            "language": h.template_language,
                            "state": h.state,
                            "reason": h.reason,
                            "since": h.held_at.isoformat(),
                        }
                        for h in held
                    ]
                },
                anchor=held[0].held_at.isoformat() if held else "",
            )
        )
    return readings
