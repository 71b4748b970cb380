"""The API key an alert webhook (the lab's Alertmanager, or an operator's) posts incidents with."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission

from diagnostics.services.base import OPEN_PERMISSION
from routing.models import ApiKey
from routing.scopes import INCIDENTS_WRITE
from routing.services import api_key_create, api_key_revoke


def incidents_key_issue(owner: str) -> str:
    """A new API key for the webhook (scope ``incidents:write``), owned by the user ``owner`` with only the
    permission to open incidents; the owner's earlier keys of that name are revoked. Returns the raw
    secret."""
    user, created = get_user_model().objects.get_or_create(username=owner)
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    app_label, codename = OPEN_PERMISSION.split(".", 1)
    user.user_permissions.add(Permission.objects.get(content_type__app_label=app_label, codename=codename))
    for old in ApiKey.objects.filter(name=owner, owner=user, revoked_at__isnull=True):
        api_key_revoke(api_key=old)
    _, raw = api_key_create(name=owner, owner=user, scopes=[INCIDENTS_WRITE])
    return raw
