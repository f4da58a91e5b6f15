"""The one error a bad genome raises."""


class GenomeError(ValueError):
    """A genome (or genome file) is invalid. The message is one line, fit for a user."""
