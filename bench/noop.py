"""The baseline's job: nothing at all, so only RQ's own cost is measured."""


def noop() -> None:
    return None
