"""`RememberedRouting`: the identities a web app last read for each routing id."""

from __future__ import annotations

from app.repo.routing import RememberedRouting, RoutedIdentity


def identity(n: int) -> RoutedIdentity:
    return RoutedIdentity(n, str(n), f"sealed-{n}")


def test_keeping_what_it_holds_already_does_not_empty_it_at_its_limit() -> None:
    memory = RememberedRouting()
    full = {str(n): identity(n) for n in range(RememberedRouting.LIMIT)}
    memory.keep("whatsapp", full)
    memory.keep("whatsapp", {"7": identity(7)})  # a lookup of a number it knows
    assert memory.get("whatsapp", "0") == identity(0)
    memory.keep("whatsapp", {"new": identity(10_000)})  # one more than it holds
    assert memory.get("whatsapp", "0") is None
    assert memory.get("whatsapp", "new") == identity(10_000)


def test_a_routing_id_is_remembered_per_provider_and_forgotten() -> None:
    memory = RememberedRouting()
    memory.keep("whatsapp", {"106540352242922": identity(1)})
    assert memory.get("messenger", "106540352242922") is None
    assert memory.get("whatsapp", "106540352242922") == identity(1)
    memory.forget("whatsapp", "106540352242922")
    assert memory.get("whatsapp", "106540352242922") is None
