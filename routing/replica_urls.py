"""A student backend's ``replicas``: a list of distinct http(s) base URLs, checked before they are stored
(the model field's validator, and the settings read at start-up)."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError

MAX_REPLICAS = 64


_HOST = re.compile(r"[a-z0-9](?:[a-z0-9.-]{0,251}[a-z0-9])?|[0-9a-f:.]+")  # a name, IPv4 or IPv6


def _check_replica_url(url: str) -> None:
    """http(s)://host[:port][/path], the host a name (a Kubernetes short name too) or an IP address;
    no credentials, query or fragment."""
    bad = ValidationError(f"not an http(s) base URL of a replica: {url[:100]!r}")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (a port that is not a number below 65536 raises ValueError)
    except ValueError:
        raise bad from None
    if parts.scheme not in ("http", "https") or parts.username is not None or parts.query or parts.fragment:
        raise bad
    if not _HOST.fullmatch(parts.hostname or ""):
        raise bad


def validate_replica_urls(value: object) -> None:
    """A student's ``replicas``: a list of distinct http(s) base URLs (``dns+`` in front: every address
    of the host name), at most :data:`MAX_REPLICAS`."""
    if not isinstance(value, list):
        raise ValidationError("replicas must be a list of base URLs.")
    if len(value) > MAX_REPLICAS:
        raise ValidationError(f"at most {MAX_REPLICAS} replicas.")
    for url in value:
        if not isinstance(url, str) or len(url) > 300:
            raise ValidationError("each replica is a URL string of at most 300 characters.")
        _check_replica_url(url.removeprefix("dns+"))
    if len({url.rstrip("/") for url in value}) != len(value):
        raise ValidationError("replicas are listed twice.")
