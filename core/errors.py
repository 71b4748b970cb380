"""The one error type services raise; each edge translates it once into its own error shape.

A service refuses an operation by raising :class:`ServiceError` (or a subclass naming its domain,
e.g. ``EvolverError``) with a human message, a machine ``code`` and the HTTP ``status`` an HTTP edge
answers with. The edges: ``/api/`` (``app/api/errors.py``), the dashboard views
(a message on the page), Slack (a reply in the thread) and ``/v1`` (the gateway turns it into the
caller's protocol error, ``routing/errors.py``).
"""

from __future__ import annotations


class ServiceError(Exception):
    """A refused operation: ``message`` for people, ``code`` for programs, ``status`` for HTTP.

    Subclasses may set class-level defaults of ``code`` and ``status``, so a domain error can be
    raised with its message alone.
    """

    code: str = "invalid_request"
    status: int = 400

    def __init__(self, message: str, *, code: str | None = None, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
