"""API clients of a fault run, as careful ones are: every send carries an Idempotency-Key,
and a send that got no answer (the connection refused or cut, a timeout) or a 5xx is sent
again with the same key until it is answered. Some cut their own connection on purpose
first: the request written whole (or half of it), the socket closed before the answer.
What each went through is counted (`Client.counts`). Given several webs (one per host),
the client takes them in turn, one send or cancel each.
"""

from __future__ import annotations

import itertools
import json
import socket
import struct
import threading
import time
from collections import Counter
from typing import Any
from urllib.parse import urlsplit

import httpx

from .checker import Acknowledged

RETRY_FOR = 120.0  # seconds a send is retried before the run gives up on it


class Client:
    def __init__(self, base_urls: list[str], api_key: str, identity_id: int) -> None:
        self.base_urls = base_urls
        self.api_key = api_key
        self.identity_id = identity_id
        self.https = [httpx.Client(base_url=url, timeout=10) for url in base_urls]
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._turn = itertools.count()

    def web(self) -> int:
        """The next web's index, in turn."""
        with self._lock:
            return next(self._turn) % len(self.base_urls)

    def count(self, what: str) -> None:
        with self._lock:
            self.counts[what] += 1

    def headers(self, key: str | None = None) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {self.api_key}"}
        if key is not None:
            headers["Idempotency-Key"] = key
        return headers

    def send(self, to: str, key: str, cut_first: str | None = None) -> Acknowledged:
        """Send until answered; `cut_first` ("after-body" or "mid-body") first writes the
        request and closes the connection without reading the answer."""
        body = {"identity_id": self.identity_id, "to": to, "text": f"hello {key}"}
        web = self.web()
        asked = time.time()
        if cut_first is not None:
            self.cut(self.base_urls[web], body, key, whole=cut_first == "after-body")
            self.count(f"connection cut by the client ({cut_first})")
        deadline = time.monotonic() + RETRY_FOR
        while True:
            try:
                response = self.https[web].post(
                    "/v1/messages", json=body, headers=self.headers(key)
                )
            except httpx.TransportError as exc:
                self.count(f"retried after {type(exc).__name__}")
            else:
                if response.status_code in (200, 201):
                    if cut_first is not None:
                        self.count(f"retry after the cut answered {response.status_code}")
                    return Acknowledged(int(response.json()["id"]), to, time.time(), asked)
                if response.status_code < 500:
                    raise AssertionError(f"{response.status_code}: {response.text}")
                self.count(f"retried after {response.status_code}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no answer for {key} in {RETRY_FOR} s")
            time.sleep(0.1)  # a client's back-off, not a wait for an event

    def cut(self, url: str, body: dict[str, Any], key: str, *, whole: bool) -> None:
        """Write the request (whole, or its first half) and close the socket unread."""
        address = urlsplit(url)
        payload = json.dumps(body).encode()
        head = (
            f"POST /v1/messages HTTP/1.1\r\nHost: {address.netloc}\r\n"
            f"Authorization: Bearer {self.api_key}\r\nIdempotency-Key: {key}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
        ).encode()
        data = head + (payload if whole else payload[: len(payload) // 2])
        try:
            with socket.create_connection((address.hostname, address.port), timeout=5) as sock:
                sock.sendall(data)
                # Linger on, for 0 s: the close resets the connection.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            self.count("the cut request was refused")

    def cancel(self, message_id: int) -> bool:
        """Cancel through the API: True if canceled, False if too late (409)."""
        deadline = time.monotonic() + RETRY_FOR
        web = self.web()
        while True:
            try:
                response = self.https[web].post(
                    f"/v1/messages/{message_id}/cancel",
                    json={"reason": "the fault run's operator"},
                    headers=self.headers(),
                )
            except httpx.TransportError:
                response = None
            if response is not None and response.status_code in (200, 409):
                return response.status_code == 200
            if response is not None and response.status_code < 500:
                raise AssertionError(f"{response.status_code}: {response.text}")
            if time.monotonic() > deadline:
                raise AssertionError(f"cancel of {message_id} unanswered in {RETRY_FOR} s")
            time.sleep(0.1)

    def close(self) -> None:
        for http in self.https:
            http.close()
