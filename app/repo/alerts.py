"""Alert episodes and the alert webhook's outbox.

An episode is one alert from firing to clearing; its post rows (one per transition) are
written in the same transaction as the transition, so a post is never lost across a restart
and never made twice: the receiver deduplicates on `post_key`, which a retry keeps.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.models import AlertEpisode, AlertPost, Identity
from app.repo.sql import rows_changed

FIRED, CLEARED = "fired", "cleared"


def derive_episode_key(alert_key: str, anchor: str, salt: str = "") -> str:
    """The episode's id, from what fired and when its trouble began: an evaluator that was
    killed and started again derives the same id for the same episode."""
    return hashlib.sha256(f"{alert_key}|{anchor}|{salt}".encode()).hexdigest()[:32]


def post_key(episode_key: str, transition: str) -> str:
    return f"{episode_key}.{transition}"


@dataclass(frozen=True, slots=True)
class FiringAlert:
    """An open episode, for the banner, the alerts page and the metrics gauge."""

    id: int
    episode_key: str
    alert_key: str
    kind: str
    tenant_id: int | None
    identity_id: int | None
    lane: str | None
    summary: str
    fired_at: datetime
    fired_figures: dict[str, Any]


def _firing(episode: AlertEpisode) -> FiringAlert:
    return FiringAlert(
        episode.id,
        episode.episode_key,
        episode.alert_key,
        episode.kind,
        episode.tenant_id,
        episode.identity_id,
        episode.lane,
        episode.summary,
        episode.fired_at,
        episode.fired_figures,
    )


def firing_alerts(session: Session, tenant_id: int | None = None) -> list[FiringAlert]:
    """Every alert firing now (within a tenant if given), the oldest first."""
    query = select(AlertEpisode).where(AlertEpisode.cleared_at.is_(None))
    if tenant_id is not None:
        query = query.where(AlertEpisode.tenant_id == tenant_id)
    return [_firing(e) for e in session.scalars(query.order_by(AlertEpisode.fired_at))]


def open_episodes(session: Session) -> dict[str, AlertEpisode]:
    query = select(AlertEpisode).where(AlertEpisode.cleared_at.is_(None))
    return {episode.alert_key: episode for episode in session.scalars(query)}


def alert_history(session: Session, tenant_id: int | None, limit: int = 200) -> list[AlertEpisode]:
    """Episodes, the most recent first, open or cleared."""
    query = select(AlertEpisode)
    if tenant_id is not None:
        query = query.where(AlertEpisode.tenant_id == tenant_id)
    return list(
        session.scalars(
            query.order_by(AlertEpisode.fired_at.desc(), AlertEpisode.id.desc()).limit(limit)
        )
    )


def identity_labels(session: Session, ids: set[int]) -> dict[int, str]:
    if not ids:
        return {}
    rows = session.execute(
        select(Identity.id, Identity.provider, Identity.account_id).where(Identity.id.in_(ids))
    )
    return {row.id: f"{row.provider} {row.account_id}" for row in rows}


def _add_post(
    session: Session,
    episode: AlertEpisode,
    transition: str,
    payload: dict[str, Any],
    now: datetime,
    delivered_at: datetime | None,
) -> None:
    session.add(
        AlertPost(
            post_key=post_key(episode.episode_key, transition),
            episode_id=episode.id,
            transition=transition,
            payload=payload,
            created_at=now,
            attempts=1 if delivered_at else 0,
            next_attempt_at=now,
            delivered_at=delivered_at,
        )
    )


def record_firing(
    session: Session,
    *,
    episode_key: str,
    alert_key: str,
    kind: str,
    tenant_id: int | None,
    identity_id: int | None,
    lane: str | None,
    summary: str,
    fired_at: datetime,
    figures: dict[str, Any],
    payload: dict[str, Any] | None,
    posted_at: datetime | None = None,
) -> AlertEpisode:
    """Open an episode and, with a webhook configured, its firing post (already posted at
    `posted_at` when the evaluator had to post before it could write)."""
    episode = AlertEpisode(
        episode_key=episode_key,
        alert_key=alert_key,
        kind=kind,
        tenant_id=tenant_id,
        identity_id=identity_id,
        lane=lane,
        summary=summary,
        fired_at=fired_at,
        fired_figures=figures,
    )
    session.add(episode)
    session.flush()
    if payload is not None:
        _add_post(session, episode, FIRED, payload, fired_at, posted_at)
    return episode


def record_clearing(
    session: Session,
    episode_id: int,
    *,
    cleared_at: datetime,
    figures: dict[str, Any],
    payload: dict[str, Any] | None,
    posted_at: datetime | None = None,
) -> bool:
    """Close an open episode (compare-and-set: False if something else closed it)."""
    changed = rows_changed(
        session,
        update(AlertEpisode)
        .where(AlertEpisode.id == episode_id, AlertEpisode.cleared_at.is_(None))
        .values(cleared_at=cleared_at, cleared_figures=figures)
        .execution_options(synchronize_session=False),
    )
    if changed != 1:
        return False
    episode = session.get(AlertEpisode, episode_id)
    if payload is not None and episode is not None:
        _add_post(session, episode, CLEARED, payload, cleared_at, posted_at)
    return True


def episode_key_taken(session: Session, episode_key: str) -> bool:
    found = session.scalar(select(AlertEpisode.id).where(AlertEpisode.episode_key == episode_key))
    return found is not None


@dataclass(frozen=True, slots=True)
class DuePost:
    id: int
    post_key: str
    payload: dict[str, Any]
    attempts: int


def due_posts(session: Session, now: datetime, limit: int = 50) -> list[DuePost]:
    query = (
        select(AlertPost.id, AlertPost.post_key, AlertPost.payload, AlertPost.attempts)
        .where(AlertPost.delivered_at.is_(None), AlertPost.next_attempt_at <= now)
        .order_by(AlertPost.id)
        .limit(limit)
    )
    return [DuePost(*row) for row in session.execute(query)]


def mark_post_delivered(session: Session, post_id: int, now: datetime) -> None:
    session.execute(
        update(AlertPost)
        .where(AlertPost.id == post_id, AlertPost.delivered_at.is_(None))
        .values(delivered_at=now, attempts=AlertPost.attempts + 1, last_error=None)
        .execution_options(synchronize_session=False)
    )


def mark_posts_delivered(session: Session, keys: set[str], now: datetime) -> None:
    """Posts made while the database refused writes: delivered, not to be made again."""
    if keys:
        session.execute(
            update(AlertPost)
            .where(AlertPost.post_key.in_(keys), AlertPost.delivered_at.is_(None))
            .values(delivered_at=now, attempts=AlertPost.attempts + 1)
            .execution_options(synchronize_session=False)
        )


def mark_post_failed(
    session: Session, post_id: int, now: datetime, error: str, next_attempt_at: datetime
) -> None:
    session.execute(
        update(AlertPost)
        .where(AlertPost.id == post_id, AlertPost.delivered_at.is_(None))
        .values(
            attempts=AlertPost.attempts + 1,
            last_error=error[:2000],
            next_attempt_at=next_attempt_at,
        )
        .execution_options(synchronize_session=False)
    )


def undelivered_posts(session: Session) -> list[AlertPost]:
    query = select(AlertPost).where(AlertPost.delivered_at.is_(None)).order_by(AlertPost.id)
    return list(session.scalars(query))


def set_stuck_after(session: Session, identity_id: int, seconds: float | None) -> bool:
    """An identity's own stuck-queue threshold (None: the installation's); False if no
    such identity."""
    changed = rows_changed(
        session,
        update(Identity)
        .where(Identity.id == identity_id)
        .values(stuck_after=seconds)
        .execution_options(synchronize_session=False),
    )
    return changed == 1
