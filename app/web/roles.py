"""Dashboard roles as Django groups: viewer, operator, approver, admin.

- viewer: reads every page (the ``view_*`` permissions of the routing, diagnostics and training apps);
- operator: a viewer who may open incidents (start diagnoses), mark diagnoses wrong and start learning
  cycles;
- approver: a viewer who may approve or deny the write actions diagnoses propose
  (``diagnostics.approve_actionrequest``, the permission the diagnostics services check);
- admin: every permission of those apps (keys, router rollback, adapters, ...).

The groups are (re)synced after every ``migrate`` (and so in every test database), which also
picks up permissions of models added later.
"""

from __future__ import annotations

from typing import Any

from django.apps import apps as global_apps
from django.contrib.auth.management import create_permissions
from django.contrib.auth.models import Group, Permission

from diagnostics.services import APPROVE_PERMISSION, OPEN_PERMISSION

APPS = ("routing", "diagnostics", "training")
VIEWER, OPERATOR, APPROVER, ADMIN = "viewer", "operator", "approver", "admin"
ROLES = (VIEWER, OPERATOR, APPROVER, ADMIN)

# Page and action permissions the dashboard checks (superusers hold them all).
VIEW_CALLS = "routing.view_invocation"
VIEW_KEYS = "routing.view_apikey"
MANAGE_KEYS = "routing.change_apikey"
VIEW_INCIDENTS = "diagnostics.view_incident"
OPEN_INCIDENT = OPEN_PERMISSION
APPROVE_ACTION = APPROVE_PERMISSION
VIEW_LEARNING = "training.view_demonstration"

# Extra permissions of the operator, beyond viewing: those that start work (opening incidents, queuing
# diagnoses, marking a diagnosis wrong for the Evolver).
OPERATOR_EXTRA = [OPEN_INCIDENT, "diagnostics.add_trajectory", "training.add_diagnosticskill"]


def _permissions(names: list[str]) -> list[Permission]:
    found = []
    for name in names:
        app_label, codename = name.split(".", 1)
        permission = Permission.objects.filter(content_type__app_label=app_label, codename=codename).first()
        if permission is not None:
            found.append(permission)
    return found


def roles_sync(**kwargs: Any) -> None:
    """Creates the groups and sets their permissions (idempotent; a post_migrate receiver)."""
    for label in APPS:
        create_permissions(global_apps.get_app_config(label), verbosity=0)
    ours = Permission.objects.filter(content_type__app_label__in=APPS)
    viewing = list(ours.filter(codename__startswith="view_"))
    operator_extra = _permissions(OPERATOR_EXTRA + operator_training_permissions())
    grants = {
        VIEWER: viewing,
        OPERATOR: viewing + operator_extra,
        APPROVER: viewing + _permissions([APPROVE_ACTION]),
        ADMIN: list(ours),
    }
    for name, permissions in grants.items():
        group, _ = Group.objects.get_or_create(name=name)
        group.permissions.set(permissions)


def operator_training_permissions() -> list[str]:
    """Starting a learning cycle: the permission to add a cycle, whichever training model holds it."""
    return [
        f"training.add_{model._meta.model_name}"
        for model in global_apps.get_app_config("training").get_models()
        if model._meta.model_name in {"cycle", "learningcycle"}
    ]
