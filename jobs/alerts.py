"""The alert evaluator: reads the database (and, when given one, how many workers RQ's
registry lists per lane, to name a stuck lane's cause), opens and clears
episodes, and posts them to the optional alert webhook. The sweeper runs it every
`alert_interval` seconds (`jobs/sweep.py`).

Each pass:
1. record what an earlier pass could not write (the database refused writes);
2. read every alert's condition (`app/repo/alert_signals.py`) and compare it with the open
   episodes: a condition that holds with no open episode fires, an open episode whose
   condition no longer holds clears; nothing is repeated while an episode stays open;
3. write each transition with its outbox post in one transaction. If the database refuses
   the write, the transition is kept in memory, logged, posted at once, and written by the
   first pass that can (step 1);
4. post the outbox's due rows; a failed post is retried with backoff under the same id.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import httpx
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from app.config import Config
from app.db import Database
from app.repo import alerts as repo
from app.repo.alert_reading import Reading
from app.repo.alert_signals import KIND_TITLES, read_alerts
from app.repo.alert_templates import template_held_readings
from app.repo.callback_alerts import read_callback_alerts
from jobs.alert_webhook import AlertPoster, backoff, build_payload

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Unrecorded:
    """A transition the database refused to store; written by the first pass that can."""

    episode_key: str
    reading: Reading
    fired_at: datetime
    fired_figures: dict[str, Any]
    episode_id: int | None = None  # already stored (only its clearing is unrecorded)
    cleared_at: datetime | None = None
    cleared_figures: dict[str, Any] | None = None
    payloads: dict[str, dict[str, Any]] = field(default_factory=dict)
    posted: set[str] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class Outcome:
    fired: list[str]
    cleared: list[str]
    posted: int
    unrecorded: int

    def describe(self) -> str:
        return (
            f"alerts: {len(self.fired)} fired, {len(self.cleared)} cleared, {self.posted} posted"
            + (f", {self.unrecorded} waiting for the database" if self.unrecorded else "")
        )


class AlertEvaluator:
    def __init__(
        self,
        db: Database,
        config: Config,
        http: httpx.Client | None = None,
        workers: Callable[[], Mapping[str, int] | None] | None = None,
    ) -> None:
        self.db = db
        self.config = config
        # Live RQ workers per lane, None when unknown; read before each pass.
        self.workers = workers
        self.poster = AlertPoster(config.alert_webhook_url, config.alert_webhook_secret, http)
        self.last_run: datetime | None = None
        # alert_key -> a transition not stored yet (the database refused writes).
        self.unrecorded: dict[str, Unrecorded] = {}
        # Outbox posts delivered whose delivery could not be written: not posted again.
        self.delivered: set[str] = set()

    # The loop's entry points ----------------------------------------------------------

    def is_due(self, now: datetime) -> bool:
        return self.last_run is None or now - self.last_run >= timedelta(
            seconds=self.config.alert_interval
        )

    def run(self, now: datetime) -> Outcome:
        self.last_run = now
        self._record_unrecorded(now)
        live = self.workers() if self.workers is not None else None
        with self.db.transaction() as session:
            readings = read_alerts(session, self.config, now, live)
            readings += template_held_readings(session) + read_callback_alerts(session, now)
            stored = {
                key: (e.id, e.episode_key, e.fired_at, e.fired_figures)
                for key, e in repo.open_episodes(session).items()
            }
        fired, cleared = [], []
        for reading in readings:
            pending = self.unrecorded.get(reading.alert_key)
            if pending is not None and pending.cleared_at is not None and reading.firing:
                continue  # a new episode waits until the last one is stored
            is_open = (
                pending.cleared_at is None if pending is not None else reading.alert_key in stored
            )
            if reading.firing and not is_open:
                self._fire(reading, now)
                fired.append(reading.alert_key)
            elif not reading.firing and is_open:
                self._clear(reading, stored.get(reading.alert_key), now)
                cleared.append(reading.alert_key)
        posted = self._post_unrecorded() + self._deliver_outbox(now)
        return Outcome(fired, cleared, posted, len(self.unrecorded))

    def close(self) -> None:
        self.poster.close()

    # Transitions ----------------------------------------------------------------------

    def _payload(self, *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        if not self.config.alert_webhook_url:
            return None
        kwargs["dashboard_url"] = self.config.public_base_url
        return build_payload(*args, **kwargs)

    def _fire(self, reading: Reading, now: datetime) -> None:
        title = KIND_TITLES.get(reading.kind, reading.kind)
        log.warning("ALERT firing: %s: %s", title, reading.summary)
        key = repo.derive_episode_key(reading.alert_key, reading.anchor)
        try:
            with self.db.transaction() as session:
                if repo.episode_key_taken(session, key):
                    # The same anchor fired and cleared before (a windowed alert firing
                    # again within its window): a new episode needs a new id.
                    key = repo.derive_episode_key(
                        reading.alert_key, reading.anchor, now.isoformat()
                    )
                payload = self._payload(key, repo.FIRED, reading, now, reading.figures)
                repo.record_firing(
                    session,
                    episode_key=key,
                    alert_key=reading.alert_key,
                    kind=reading.kind,
                    tenant_id=reading.tenant_id,
                    identity_id=reading.identity_id,
                    lane=reading.lane,
                    summary=reading.summary,
                    fired_at=now,
                    figures=reading.figures,
                    payload=payload,
                )
        except IntegrityError:
            # Another evaluator opened this episode first (one open episode per alert).
            log.info("alert %s was opened by another evaluator", reading.alert_key)
            return
        except SQLAlchemyError as exc:
            log.error(
                "ALERT %s could not be stored (%s); posting it now and storing it when the "
                "database takes writes again",
                reading.alert_key,
                type(exc).__name__,
            )
            pending = Unrecorded(key, reading, now, reading.figures)
            payload = self._payload(key, repo.FIRED, reading, now, reading.figures)
            if payload is not None:
                pending.payloads[repo.FIRED] = payload
            self.unrecorded[reading.alert_key] = pending

    def _clear(
        self,
        reading: Reading,
        stored: tuple[int, str, datetime, dict[str, Any]] | None,
        now: datetime,
    ) -> None:
        log.warning("ALERT cleared: %s", reading.summary)
        pending = self.unrecorded.get(reading.alert_key)
        if pending is not None:
            # Fired while the database refused writes: it clears in memory too.
            pending.cleared_at, pending.cleared_figures = now, reading.figures
            payload = self._payload(
                pending.episode_key,
                repo.CLEARED,
                reading,
                pending.fired_at,
                pending.fired_figures,
                cleared_at=now,
                cleared_figures=reading.figures,
            )
            if payload is not None:
                pending.payloads[repo.CLEARED] = payload
            return
        assert stored is not None
        episode_id, key, fired_at, fired_figures = stored
        payload = self._payload(
            key,
            repo.CLEARED,
            reading,
            fired_at,
            fired_figures,
            cleared_at=now,
            cleared_figures=reading.figures,
        )
        try:
            with self.db.transaction() as session:
                repo.record_clearing(
                    session, episode_id, cleared_at=now, figures=reading.figures, payload=payload
                )
        except SQLAlchemyError as exc:
            log.error(
                "ALERT clearing of %s could not be stored (%s); posting it now",
                reading.alert_key,
                type(exc).__name__,
            )
            pending = Unrecorded(
                key,
                reading,
                fired_at,
                fired_figures,
                episode_id=episode_id,
                cleared_at=now,
                cleared_figures=reading.figures,
            )
            if payload is not None:
                pending.payloads[repo.CLEARED] = payload
            self.unrecorded[reading.alert_key] = pending

    def _record_unrecorded(self, now: datetime) -> None:
        """Step 1: store what the database refused earlier, with the times it happened."""
        for alert_key, pending in list(self.unrecorded.items()):
            posted_at = now
            try:
                with self.db.transaction() as session:
                    episode_id = pending.episode_id
                    if episode_id is None:
                        fired_post = repo.post_key(pending.episode_key, repo.FIRED)
                        episode = repo.record_firing(
                            session,
                            episode_key=pending.episode_key,
                            alert_key=alert_key,
                            kind=pending.reading.kind,
                            tenant_id=pending.reading.tenant_id,
                            identity_id=pending.reading.identity_id,
                            lane=pending.reading.lane,
                            summary=pending.reading.summary,
                            fired_at=pending.fired_at,
                            figures=pending.fired_figures,
                            payload=pending.payloads.get(repo.FIRED),
                            posted_at=posted_at if fired_post in pending.posted else None,
                        )
                        episode_id = episode.id
                    if pending.cleared_at is not None:
                        cleared_post = repo.post_key(pending.episode_key, repo.CLEARED)
                        repo.record_clearing(
                            session,
                            episode_id,
                            cleared_at=pending.cleared_at,
                            figures=pending.cleared_figures or {},
                            payload=pending.payloads.get(repo.CLEARED),
                            posted_at=posted_at if cleared_post in pending.posted else None,
                        )
            except IntegrityError:
                # Another evaluator stored this episode meanwhile: it owns it now.
                log.info("alert %s was stored by another evaluator", alert_key)
                del self.unrecorded[alert_key]
                continue
            except SQLAlchemyError as exc:
                log.warning(
                    "alert %s still not stored (%s); next pass tries again",
                    alert_key,
                    type(exc).__name__,
                )
                return
            log.info("alert %s stored now that the database takes writes", alert_key)
            del self.unrecorded[alert_key]

    # Posting --------------------------------------------------------------------------

    def _post_unrecorded(self) -> int:
        """Posts for transitions not stored yet: each made until the receiver takes it."""
        posted = 0
        for pending in self.unrecorded.values():
            for transition, payload in pending.payloads.items():
                key = repo.post_key(pending.episode_key, transition)
                if key in pending.posted:
                    continue
                error = self.poster.post(key, payload)
                if error is not None:
                    log.warning("alert post %s failed: %s; the next pass tries again", key, error)
                    return posted
                pending.posted.add(key)
                posted += 1
        return posted

    def _deliver_outbox(self, now: datetime) -> int:
        if not self.config.alert_webhook_url:
            return 0
        try:
            with self.db.transaction() as session:
                due = repo.due_posts(session, now)
        except SQLAlchemyError:
            log.exception("the alert outbox could not be read; next pass tries again")
            return 0
        posted = 0
        for post in due:
            # Posted before, its delivery not stored (writes refused): not posted again.
            already = post.post_key in self.delivered
            error = None if already else self.poster.post(post.post_key, post.payload)
            try:
                with self.db.transaction() as session:
                    if error is None:
                        repo.mark_post_delivered(session, post.id, now)
                    else:
                        retry_at = now + backoff(post.attempts + 1)
                        repo.mark_post_failed(session, post.id, now, error, retry_at)
            except SQLAlchemyError as exc:
                log.warning(
                    "alert post %s: outcome not stored (%s)", post.post_key, type(exc).__name__
                )
                if error is None:
                    self.delivered.add(post.post_key)
            else:
                self.delivered.discard(post.post_key)
            if error is None:
                posted += not already
                continue
            log.warning(
                "alert post %s failed (attempt %s): %s; retried with backoff",
                post.post_key,
                post.attempts + 1,
                error,
            )
            # The receiver is failing: the rest wait for a later pass rather than holding
            # up the sweeper for one deadline each.
            break
        return posted
