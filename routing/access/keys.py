"""API key format, hashing and lookup. Keys look like ``sg-<prefix>.<secret>``."""

from __future__ import annotations

import hashlib
import hmac
import secrets

from django.utils import timezone

from routing.access import lookups
from routing.access.owners import OWNER_ACTIVE
from routing.models import ApiKey

KEY_PREFIX = "sg-"


def generate_key() -> tuple[str, str, str]:
    """Returns (raw key, prefix, sha256 hex). The raw key is shown once and never stored."""
    prefix = secrets.token_hex(6)
    raw = f"{KEY_PREFIX}{prefix}.{secrets.token_urlsafe(32)}"
    return raw, prefix, hash_key(raw)


def hash_key(raw: str) -> str:
    # Keys carry 256 random bits, so a fast hash is enough (no password stretching needed).
    return hashlib.sha256(raw.encode()).hexdigest()


def parse_prefix(raw: str) -> str | None:
    if not raw.startswith(KEY_PREFIX) or "." not in raw:
        return None
    return raw[len(KEY_PREFIX) :].split(".", 1)[0] or None


async def authenticate(raw: str) -> ApiKey | None:
    """The active, unexpired key matching ``raw`` whose owner, if it has one, is active (routing/access/
    owners.py), or None. Constant-time hash comparison."""
    prefix = parse_prefix(raw)
    if prefix is None:
        return None
    key = await lookups.cached(
        "api_key",
        prefix,
        lambda: ApiKey.objects.filter(OWNER_ACTIVE, prefix=prefix, revoked_at__isnull=True).first(),
    )
    if key is None or not hmac.compare_digest(key.key_hash, hash_key(raw)):
        return None
    if key.expires_at is not None and key.expires_at <= timezone.now():
        return None  # expired: refused like a revoked key (the cached row carries the time)
    return key
