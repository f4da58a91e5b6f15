"""Errors the command line turns into exit code 2 with a one-line message."""


class UsageError(Exception):
    """Bad input from the user (an unknown id, an out-of-range option)."""


def not_a_search(kind: str) -> str:
    """What a stored run of ``kind`` (not ``search``) is, and what to run instead of resuming it
    as a search: ``"an evolve scale ladder, not a search: run evolve scale again"``."""
    if kind == "select":  # `study.finalists`: trained for the search its config names
        return "a search's finalists, not a search: resume that search"
    what = "an evolve scale ladder" if kind == "scale" else f"an evolve {kind} run"
    return f"{what}, not a search: run evolve {kind} again"
