"""A drain's calls in flight (`jobs/in_flight.py`): a call that raises loses none of the
calls that ended beside it, and a call thread's start never breaks the pool."""

from __future__ import annotations

from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from jobs.in_flight import InFlight, _bind_pool


def test_a_call_that_raised_leaves_the_calls_that_ended_with_it_to_be_recorded() -> None:
    """Two calls end before the drain looks; one raised. The drain's wait raises, and its
    `abandon` still hands back the other's end to be recorded: before, the wait let go of
    both first, and an answer the provider had accepted was never recorded (its lease
    lapsed into an unknown outcome)."""

    def send(prepared: Any) -> Any:
        if prepared == "broken":
            raise RuntimeError("a call that raised")
        return f"answer to {prepared}"

    calls = InFlight(2, "test-in-flight")
    try:
        calls.submit(["accepted", "broken"], send)
        futures.wait(list(calls._calls), timeout=10)  # both ended before the drain looks
        with pytest.raises(RuntimeError, match="a call that raised"):
            calls.wait(None)
        recorded, unsent = calls.abandon()
    finally:
        calls.close()

    assert (recorded, unsent) == (["answer to accepted"], [])


def test_a_call_thread_whose_pool_cannot_be_bound_still_calls() -> None:
    """The initializer of a drain's call threads never raises: one that raised would break
    the executor and fail every call queued on it (their messages leased, never sent)."""
    numbers: Any = iter(())  # no number for the thread: `next` raises StopIteration
    with ThreadPoolExecutor(1, initializer=_bind_pool, initargs=(numbers,)) as pool:
        assert pool.submit(lambda: "called").result(timeout=10) == "called"
