"""A profile's TrainingSettings row over the settings, a run's own values over both: the precedence of
``core.conf.resolve``, as training's services apply it."""

from __future__ import annotations

import pytest

from tests.factories import TaskProfileFactory, TrainingSettingsFactory
from training.services.adapters import TrainingError, base_model_for, resolve_hyperparameters

pytestmark = pytest.mark.django_db


@pytest.fixture
def configured(settings):
    training = {
        **settings.SKILLGATE["TRAINING"],
        "BASE_MODEL": "/models/from-settings",
        "HYPERPARAMETERS": {"sft_steps": 11, "lora_rank": 4},
    }
    settings.SKILLGATE = {**settings.SKILLGATE, "TRAINING": training}


def test_the_base_model_is_the_profile_s_row_else_the_setting(configured):
    bare, empty, own = (TaskProfileFactory.create(name=n) for n in ("bare", "empty", "own"))
    TrainingSettingsFactory.create(profile=empty, base_model="")
    TrainingSettingsFactory.create(profile=own, base_model="/models/own")
    assert base_model_for(bare) == "/models/from-settings"
    assert base_model_for(empty) == "/models/from-settings"  # an empty field overrides nothing
    assert base_model_for(own) == "/models/own"


def test_hyperparameters_run_over_row_over_settings_over_the_trainer_s_defaults(configured):
    profile = TaskProfileFactory.create(name="tuned")
    TrainingSettingsFactory.create(profile=profile, hyperparameters={"sft_steps": 22, "learning_rate": 0.01})
    hp = resolve_hyperparameters(profile, {"sft_steps": 33})
    assert (hp.sft_steps, hp.learning_rate, hp.lora_rank) == (33, 0.01, 4)
    plain = resolve_hyperparameters(TaskProfileFactory.create(name="plain"), None)
    assert (plain.sft_steps, plain.lora_rank) == (11, 4)
    with pytest.raises(TrainingError, match="unknown hyper-parameters: no_such"):
        resolve_hyperparameters(profile, {"no_such": 1})
