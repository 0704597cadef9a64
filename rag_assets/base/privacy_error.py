"""The error raised when Private text was about to leave the machine.

Its own module so that the egress rule (``egress.py``) and its transport
(``pinned_transport.py``) can both raise it without importing each other.
"""

from __future__ import annotations


class PrivacyError(RuntimeError):
    """Private text was about to leave the machine; nothing was sent."""
