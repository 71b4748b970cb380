"""A key stands for its owner: when the owner leaves, the key stops.

- A key whose owner is deactivated (``is_active`` false) is refused at authentication, on every surface
  (``/v1``, ``/api/``, ``/mcp``), like a revoked key: nobody can tell who holds a leaver's secret, so no
  call of theirs is billed to, or acts for, the team. Reactivating the owner brings the key back.
- A deleted owner's keys are revoked before the row goes (the foreign key would otherwise set ``owner``
  to NULL and turn the leaver's keys into ownerless service keys that work again).
- Any save of a user forgets the per-process lookups (routing/access/lookups.py), so a deactivation
  takes effect at once in this process and within ``LOOKUP_CACHE_TTL_S`` in the others.

Keys made without an owner (service keys) are unaffected: they never had a person to lose.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Q
from django.db.models.signals import post_save, pre_delete
from django.utils import timezone

from routing.access import lookups
from routing.models import ApiKey

# The keys that may authenticate: no owner, or an active one.
OWNER_ACTIVE = Q(owner__isnull=True) | Q(owner__is_active=True)


def _revoke_keys_of(sender: Any, instance: Any, **_: Any) -> None:
    ApiKey.objects.filter(owner=instance, revoked_at__isnull=True).update(revoked_at=timezone.now())
    lookups.clear()


def connect_signals() -> None:
    user = get_user_model()
    post_save.connect(lookups.clear, sender=user, dispatch_uid="lookups-clear-save-user")
    pre_delete.connect(_revoke_keys_of, sender=user, dispatch_uid="keys-revoke-deleted-owner")
