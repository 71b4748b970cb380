"""Every model of routing, diagnostics (Slack included) and training has a factory that saves a valid row."""

from __future__ import annotations

import factory
import pytest
from django.apps import apps
from django.db import models

from tests import factories

pytestmark = pytest.mark.django_db

APPS = ("routing", "diagnostics", "slack", "training")

FACTORIES: dict[type[models.Model], type[factory.django.DjangoModelFactory]] = {
    f._meta.model: f
    for f in vars(factories).values()
    if isinstance(f, type) and issubclass(f, factory.django.DjangoModelFactory) and f._meta.model
}


def test_every_model_has_a_factory():
    missing = [m._meta.label for m in apps.get_models() if m._meta.app_label in APPS and m not in FACTORIES]
    assert missing == []


@pytest.mark.parametrize("model", sorted(FACTORIES, key=lambda m: m._meta.label), ids=lambda m: m._meta.label)
def test_the_factory_saves_a_valid_row(model: type[models.Model]):
    row = FACTORIES[model].create()
    row.full_clean()
    assert model._default_manager.filter(pk=row.pk).exists()
    second = FACTORIES[model].create()  # sequences keep unique fields apart
    assert second.pk != row.pk


def test_a_user_gets_its_roles_and_permissions():
    user = factories.UserFactory.create(roles=["approver", "operator"], permissions=["approve_actionrequest"])
    assert sorted(user.groups.values_list("name", flat=True)) == ["approver", "operator"]
    assert user.has_perm("diagnostics.approve_actionrequest")


def test_an_action_request_plan_hash_is_what_approval_recomputes():
    from diagnostics.approvals import action_plan_hash

    action = factories.ActionRequestFactory.create(args={"service": "web"})
    assert action.plan_hash == action_plan_hash(action, action.trajectory.incident)


def test_a_made_key_carries_the_hash_of_its_secret():
    from routing.access.keys import hash_key, parse_prefix

    pair = factories.make_key(scopes=["llm"])
    assert (parse_prefix(pair.raw), hash_key(pair.raw)) == (pair.key.prefix, pair.key.key_hash)
