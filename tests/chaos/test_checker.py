"""The fault runs' checker sees each failure it counts (synthetic histories, each with one
kind of fault), and a clean history reads all zeros."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

from .checker import Accepted, Acknowledged, Stored, Verdict, check

PEOPLE = ["15550001", "15550002"]


def a_clean_run() -> tuple[list[Acknowledged], list[Accepted], list[Stored]]:
    """Four messages, two to each person, acknowledged and accepted in the same order;
    one failed on purpose (a permanent refusal)."""
    acks = [Acknowledged(n, PEOPLE[n % 2], at=float(n), asked_at=n - 0.5) for n in range(1, 5)]
    sends = [Accepted(n, PEOPLE[n % 2], at=10.0 + n) for n in (1, 2, 3)]
    sent = ((0, "queued", "sending"), (0, "sending", "sent"))
    stored = [
        Stored(1, "read", None, 11.0, (*sent, (0, "sent", "delivered"), (0, "delivered", "read"))),
        Stored(2, "sent", None, 12.0, sent),
        Stored(3, "delivered", None, 13.0, (*sent, (0, "sent", "delivered"))),
        Stored(
            4, "failed", "permanent", 14.0, ((0, "queued", "sending"), (0, "sending", "failed"))
        ),
    ]
    return acks, sends, stored


def test_a_clean_run_reads_all_zeros_and_its_dead_letters_by_class() -> None:
    verdict = check(*a_clean_run())
    assert verdict.clean
    assert verdict.dead_letters == Counter({"permanent": 1})
    assert verdict.p99_to_terminal == 10.0
    assert verdict.line() == (
        "acknowledged 4, lost 0, provider duplicates 0, backward moves 0, out of order 0, "
        "unexplained 0, dead letters 1 (permanent 1), p99 to terminal 10.0 s"
    )


def with_stored(stored: list[Stored], message_id: int, **changes: Any) -> list[Stored]:
    return [replace(s, **changes) if s.message_id == message_id else s for s in stored]


def test_it_counts_a_message_left_waiting_as_lost() -> None:
    acks, sends, stored = a_clean_run()
    verdict = check(acks, sends, with_stored(stored, 4, status="queued", terminal_at=None))
    assert verdict.lost == [4] and not verdict.clean


def test_it_counts_a_message_missing_from_the_database_as_lost() -> None:
    acks, sends, stored = a_clean_run()
    assert check(acks, sends, [s for s in stored if s.message_id != 2]).lost == [2]


def test_it_counts_every_copy_past_the_first_as_a_provider_duplicate() -> None:
    acks, sends, stored = a_clean_run()
    again = [*sends, Accepted(2, PEOPLE[0], at=20.0), Accepted(2, PEOPLE[0], at=21.0)]
    assert check(acks, again, stored).duplicates == 2


def test_it_counts_a_step_back_within_a_cycle_but_not_a_requeue() -> None:
    acks, sends, stored = a_clean_run()
    back = (0, "delivered", "sent")
    verdict = check(acks, sends, with_stored(stored, 3, changes=(*stored[2].changes, back)))
    assert verdict.backward == [3]
    requeued = ((0, "sending", "failed"), (1, "failed", "queued"), (1, "queued", "sending"))
    assert check(acks, sends, with_stored(stored, 4, changes=requeued)).backward == []


def test_it_counts_a_message_sent_before_one_acknowledged_ahead_of_it() -> None:
    acks, sends, stored = a_clean_run()
    # Person 1's messages are 1 and 3: the provider took 3 first.
    swapped = [Accepted(3, PEOPLE[1], at=10.5), *[s for s in sends if s.message_id != 3]]
    assert check(acks, swapped, stored).out_of_order == [3]
    # Its timeline says it went past a retry held too long: explained.
    explained = with_stored(stored, 3, held_past_a_retry=True)
    assert check(acks, swapped, explained).out_of_order == []


def test_two_requests_in_flight_at_once_have_no_order_between_them() -> None:
    """Message 3 was asked for before message 1's answer came back: either order is right."""
    acks, sends, stored = a_clean_run()
    overlapping = [
        replace(a, asked_at=0.9) if a.message_id == 3 else a for a in acks
    ]  # 1 was answered at 1.0
    swapped = [Accepted(3, PEOPLE[1], at=10.5), *[s for s in sends if s.message_id != 3]]
    assert check(overlapping, swapped, stored).out_of_order == []


def test_it_counts_a_send_for_no_message_and_a_sent_message_with_no_send() -> None:
    acks, sends, stored = a_clean_run()
    assert check(acks, [*sends, Accepted(None, PEOPLE[0], at=30.0)], stored).unexplained == 1
    assert check(acks, [s for s in sends if s.message_id != 2], stored).unexplained == 1


def test_an_empty_run_reads_zero_and_no_p99() -> None:
    verdict = check([], [], [])
    assert isinstance(verdict, Verdict) and verdict.clean and verdict.p99_to_terminal == 0.0


def test_a_message_we_ended_ourselves_that_the_provider_has_is_unexplained() -> None:
    acks, sends, stored = a_clean_run()
    taken = [*sends, Accepted(4, PEOPLE[0], at=14.0)]  # 4 failed on the provider's word: fine
    assert check(acks, taken, stored).clean
    for ours in ("canceled", "expired", "exhausted"):
        ended = with_stored(stored, 4, failure_class=ours)
        assert check(acks, taken, ended).unexplained == 1, ours


def test_a_row_left_below_what_its_cycle_reached_is_a_backward_move() -> None:
    acks, sends, stored = a_clean_run()
    assert check(acks, sends, with_stored(stored, 3, status="sent")).backward == [3]


def test_a_repeated_key_keeps_the_first_answer() -> None:
    """The same message answered again (a client retrying its key) is acknowledged when it
    was first: message 1, answered at 1.0, still goes before message 3, asked at 2.5."""
    acks, sends, stored = a_clean_run()
    again = [*acks, Acknowledged(1, PEOPLE[1], at=5.0, asked_at=4.5)]
    swapped = [Accepted(3, PEOPLE[1], at=10.5), *[s for s in sends if s.message_id != 3]]
    assert check(again, swapped, stored).out_of_order == [3]
    assert check(again, sends, stored).clean


def test_a_message_sent_before_a_requeued_one_is_not_out_of_order() -> None:
    """Person 1's message 1 was refused, then requeued by an operator and accepted after
    message 3: the requeue put it there, so message 3 went in no wrong order."""
    acks, sends, stored = a_clean_run()
    late = [Accepted(1, PEOPLE[1], at=20.0), *[s for s in sends if s.message_id != 1]]
    # Without the requeue on its timeline, message 3 went first wrongly.
    assert check(acks, late, stored).out_of_order == [3]
    requeued = (
        (0, "queued", "sending"),
        (0, "sending", "failed"),
        (1, "failed", "queued"),
        (1, "queued", "sending"),
        (1, "sending", "sent"),
    )
    verdict = check(acks, late, with_stored(stored, 1, status="sent", changes=requeued))
    assert verdict.out_of_order == [] and verdict.clean, verdict.line()
