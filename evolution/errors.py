"""Errors the command line turns into exit code 2 with a one-line message."""


class UsageError(Exception):
    """Bad input from the user (an unknown id, an out-of-range option)."""
