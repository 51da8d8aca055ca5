"""Errors the core raises for anticipated failures; the MCP layer turns them into tool errors."""

from __future__ import annotations


class BugBasherError(Exception):
    """An anticipated failure with a message that says what to do next."""


class GateClosed(BugBasherError):
    """A workflow step that the call needs has not been completed."""


class NotFound(BugBasherError):
    """An unknown case, run or artifact."""


class InvalidInput(BugBasherError):
    """An argument that cannot be accepted (path outside the roots, bad ref, bad name, ...)."""
