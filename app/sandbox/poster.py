"""Posts signed webhooks from background threads, never from a request handler.

A delivery is a series of POSTs posted strictly in order (so "delivered before sent" arrives
in exactly that order), each one ``interval`` after the previous one finished. Different
deliveries go out in parallel. A failed POST is retried a few times, then dropped and logged,
and the series carries on, as Meta eventually gives up too.
"""

import heapq
import itertools
import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

import httpx

from app.sandbox.webhooks import sign

logger = logging.getLogger("app.sandbox")

BACKOFF_SECONDS = (0.2, 0.5, 1.0)
POST_TIMEOUT_SECONDS = 5.0


@dataclass
class Delivery:
    phone_number_id: str
    url: str
    app_secret: str
    kind: str  # "statuses" or "inbound", for the log
    bodies: list[bytes]
    interval: float
    # Providers that sign otherwise (Twilio signs the URL and the form with its Auth
    # Token): the headers of one body. None: Meta's JSON signed with the app secret.
    headers_for: Callable[[bytes], dict[str, str]] | None = None


@dataclass(order=True)
class _Due:
    due: float
    seq: int
    delivery: Delivery = field(compare=False)
    index: int = field(compare=False)
    attempt: int = field(compare=False)
    generation: int = field(compare=False)


class WebhookPoster:
    def __init__(self, on_result: Callable[[dict[str, Any]], None], workers: int = 16) -> None:
        self._on_result = on_result
        self._heap: list[_Due] = []
        self._cond = threading.Condition()
        self._seq = itertools.count()
        self._generation = 0
        self._stopping = False
        self._client = httpx.Client(timeout=POST_TIMEOUT_SECONDS)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sandbox-webhook")
        self._thread = threading.Thread(target=self._run, name="sandbox-scheduler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._heap.clear()
            self._cond.notify_all()
        self._thread.join()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._client.close()

    def clear(self) -> None:
        """Forget pending posts; posts already in flight finish but are not logged."""
        with self._cond:
            self._generation += 1
            self._heap.clear()

    def schedule(self, delivery: Delivery, first_delay: float) -> None:
        if delivery.bodies:
            with self._cond:
                self._push(time.monotonic() + first_delay, delivery, 0, 0, self._generation)

    def _push(self, due: float, delivery: Delivery, index: int, attempt: int, gen: int) -> None:
        # Callers hold self._cond.
        if self._stopping or gen != self._generation:
            return
        heapq.heappush(self._heap, _Due(due, next(self._seq), delivery, index, attempt, gen))
        self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopping and (
                    not self._heap or self._heap[0].due > time.monotonic()
                ):
                    timeout = self._heap[0].due - time.monotonic() if self._heap else None
                    self._cond.wait(timeout)
                if self._stopping:
                    return
                item = heapq.heappop(self._heap)
            try:
                self._pool.submit(self._post, item)
            except RuntimeError:
                return  # the pool is shutting down

    def _post(self, item: _Due) -> None:
        delivery = item.delivery
        body = delivery.bodies[item.index]
        if delivery.headers_for is not None:
            headers = delivery.headers_for(body)
        else:
            headers = {
                "Content-Type": "application/json",
                "X-Hub-Signature-256": sign(body, delivery.app_secret),
            }
        http_status: int | None = None
        error: str | None = None
        try:
            response = self._client.post(delivery.url, content=body, headers=headers)
            http_status = response.status_code
            ok = 200 <= response.status_code < 300
        except httpx.HTTPError as exc:
            ok = False
            error = f"{type(exc).__name__}: {exc}"
        attempt = item.attempt + 1
        with self._cond:
            if item.generation != self._generation:
                return
            if not ok and attempt <= len(BACKOFF_SECONDS):
                retry_at = time.monotonic() + BACKOFF_SECONDS[item.attempt]
                self._push(retry_at, delivery, item.index, attempt, item.generation)
                return
        if not ok:
            logger.warning(
                "dropped webhook to %s after %d attempts (%s)",
                delivery.url,
                attempt,
                error or f"HTTP {http_status}",
            )
        # Log before scheduling the next post, so the log keeps the order of the posts.
        # (Outside self._cond: the callback takes the state lock, which callers of
        # schedule() may hold.)
        self._on_result(
            {
                "time": time.time(),
                "phone_number_id": delivery.phone_number_id,
                "url": delivery.url,
                "kind": delivery.kind,
                "payload": _payload(body, headers),
                "attempts": attempt,
                "result": "delivered" if ok else "dropped",
                "http_status": http_status,
                "error": error,
            }
        )
        if item.index + 1 < len(delivery.bodies):
            with self._cond:
                next_at = time.monotonic() + delivery.interval
                self._push(next_at, delivery, item.index + 1, 0, item.generation)


def _payload(body: bytes, headers: dict[str, str]) -> Any:
    """The body as data for the log: JSON, or a form's fields."""
    if headers.get("Content-Type", "").startswith("application/x-www-form-urlencoded"):
        return dict(parse_qsl(body.decode("utf-8"), keep_blank_values=True))
    return json.loads(body)
