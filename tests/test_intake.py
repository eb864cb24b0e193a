"""This process's memory of intake refusals (`app/intake.py`), the time passed in."""

from __future__ import annotations

from app.intake import Refusals


def test_a_refusal_is_remembered_for_the_wait_redis_named_from_when_it_was_asked() -> None:
    refusals = Refusals()
    refusals.note(7, 10.0, asked_at=100.0, wait=0.08)
    assert refusals.remaining(7, 10.0, now=100.05) == 100.08 - 100.05
    # From then on the bucket may have room: Redis is asked again.
    assert refusals.remaining(7, 10.0, now=100.08) == 0.0


def test_a_refusal_at_one_rate_says_nothing_about_another_rate_or_tenant() -> None:
    refusals = Refusals()
    refusals.note(7, 10.0, asked_at=100.0, wait=0.5)
    assert refusals.remaining(7, 20.0, now=100.1) == 0.0
    assert refusals.remaining(8, 10.0, now=100.1) == 0.0


def test_a_request_that_fit_forgets_the_refusal() -> None:
    refusals = Refusals()
    refusals.note(7, 10.0, asked_at=100.0, wait=0.5)
    refusals.note(7, 10.0, asked_at=100.0, wait=0.0)
    assert refusals.remaining(7, 10.0, now=100.1) == 0.0


def test_many_tenants_refused_at_once_do_not_grow_the_memory_without_bound() -> None:
    refusals = Refusals()
    for tenant_id in range(Refusals.MOST + 5):
        refusals.note(tenant_id, 1.0, asked_at=0.0, wait=5.0)
    assert refusals.remaining(Refusals.MOST + 4, 1.0, now=1.0) == 4.0
    assert refusals.remaining(0, 1.0, now=1.0) == 0.0
