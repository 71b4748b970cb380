"""Typed settings (core/conf.py): a wrong value names its variable and setting, a settings change
rebuilds an app's settings, and per-profile overrides follow one precedence (``resolve``)."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from core.conf import Invalid, describe, forget, from_env, load, resolve, setting
from routing import conf as routing_conf
from training import conf as training_conf


@dataclass(frozen=True)
class Sample:
    SECTION: ClassVar[str] = "SAMPLE"
    ttl_s: int = setting("TTL_S", env="SAMPLE_TTL_S", default=60, ge=1, doc="A TTL.")
    share: float = setting("SHARE", env="SAMPLE_SHARE", default=0.5, gt=0, le=1, doc="A share.")
    mode: str = setting("MODE", env="SAMPLE_MODE", default="a", choices=("a", "b"), doc="A mode.")
    price: Decimal | None = setting("PRICE", env="SAMPLE_PRICE", default=None, ge=0, doc="A price.")
    names: tuple[str, ...] = setting("NAMES", env="SAMPLE_NAMES", default=(), doc="Names.")
    folder: Path = setting("FOLDER", env="SAMPLE_FOLDER", default_doc="somewhere", doc="A folder.")


def _source(**values: Any) -> SimpleNamespace:
    return SimpleNamespace(SAMPLE={"FOLDER": "/tmp/x", **values})


def test_a_group_is_built_with_its_types():
    built = load(Sample, _source(TTL_S=5, SHARE=1, PRICE="0.25", NAMES=["x", "y"]))
    assert built == Sample(5, 1.0, "a", Decimal("0.25"), ("x", "y"), Path("/tmp/x"))


@pytest.mark.parametrize(
    ("values", "problem"),
    [
        ({"TTL_S": -5}, "must be at least 1; got -5"),
        ({"TTL_S": "abc"}, "must be an integer; got 'abc'"),
        ({"TTL_S": True}, "must be an integer; got True"),
        ({"SHARE": 0}, "must be more than 0; got 0"),
        ({"SHARE": 1.5}, "must be at most 1; got 1.5"),
        ({"MODE": "c"}, "must be one of a, b; got 'c'"),
        ({"PRICE": "free"}, "must be a decimal number; got 'free'"),
        ({"NAMES": "x,y"}, "must be a list of strings; got 'x,y'"),
    ],
)
def test_a_wrong_value_names_its_variable_and_setting(values, problem):
    with pytest.raises(ImproperlyConfigured) as raised:
        load(Sample, _source(**values))
    key = next(iter(values))
    assert str(raised.value).startswith(f'SAMPLE_{key} (settings.SAMPLE["{key}"]) {problem}')


def test_a_missing_value_takes_its_default_unless_it_is_computed():
    assert load(Sample, _source()).ttl_s == 60
    with pytest.raises(
        ImproperlyConfigured, match=r'SAMPLE_FOLDER \(settings.SAMPLE\["FOLDER"\]\) is not set'
    ):
        load(Sample, SimpleNamespace(SAMPLE={}))


def test_the_environment_is_read_through_the_declarations(monkeypatch):
    monkeypatch.setenv("SAMPLE_TTL_S", "7")
    monkeypatch.setenv("SAMPLE_NAMES", "a, b,")
    monkeypatch.setenv("SAMPLE_PRICE", "0.5")
    values = from_env(Sample, FOLDER=Path("/f"))
    assert values == {
        "TTL_S": 7,
        "SHARE": 0.5,
        "MODE": "a",
        "PRICE": "0.5",
        "NAMES": ["a", "b"],
        "FOLDER": Path("/f"),
    }
    with pytest.raises(ImproperlyConfigured, match="gives no default for SAMPLE_FOLDER"):
        from_env(Sample)
    monkeypatch.setenv("SAMPLE_TTL_S", "abc")
    with pytest.raises(ImproperlyConfigured, match="SAMPLE_TTL_S must be an integer, got 'abc'"):
        from_env(Sample, FOLDER=Path("/f"))


def test_an_app_s_settings_are_built_once_and_again_after_override_settings():
    first = routing_conf.get()
    assert routing_conf.get() is first  # cached
    changed = {**django_settings.SKILLGATE, "BUDGET_LEASE_TTL_S": 7}
    with override_settings(SKILLGATE=changed):
        assert routing_conf.get().budgets.lease_ttl_s == 7
    assert routing_conf.get().budgets.lease_ttl_s == first.budgets.lease_ttl_s


def test_the_settings_fixture_rebuilds_them_too(settings):
    settings.SKILLGATE = {**settings.SKILLGATE, "CYCLE": {**settings.SKILLGATE["CYCLE"], "HELDOUT_SHARDS": 3}}
    assert training_conf.get().cycle.heldout_shards == 3


def test_a_wrong_value_set_by_override_settings_is_refused_on_the_next_read():
    wrong = {**django_settings.SKILLGATE, "BUDGET_LEASE_TTL_S": -1}
    refused = pytest.raises(ImproperlyConfigured, match=r"SKILLGATE_BUDGET_LEASE_TTL_S .* at least 1; got -1")
    with override_settings(SKILLGATE=wrong), refused:
        routing_conf.get()
    assert routing_conf.get().budgets.lease_ttl_s >= 1


def test_forget_rebuilds_after_a_change_made_by_hand():
    before = django_settings.SKILLGATE
    routing_conf.get()
    try:
        django_settings.SKILLGATE = {**before, "MAX_IN_FLIGHT": 3}  # no setting_changed
        forget()
        assert routing_conf.get().limits.max_in_flight == 3
    finally:
        django_settings.SKILLGATE = before
        forget()


def test_the_reference_rows_name_type_default_variable_and_doc():
    rows = {row["field"]: row for row in describe(Sample)}
    assert rows["ttl_s"] == {
        "field": "ttl_s",
        "setting": 'SAMPLE["TTL_S"]',
        "type": "int (>= 1)",
        "default": "60",
        "env": "SAMPLE_TTL_S",
        "doc": "A TTL.",
    }
    assert rows["folder"]["default"] == "somewhere"
    assert rows["mode"]["type"] == "str (one of a, b)"


# --- resolve: the one precedence of per-profile overrides ----------------------------------------


def test_resolve_takes_the_first_override_that_sets_a_value_else_the_setting():
    router = routing_conf.get().router
    run, profile, row = {"target": None}, SimpleNamespace(target=""), {"target": 0.9}
    assert resolve(router, "target") == router.target
    assert resolve(router, "target", None, {}) == router.target
    assert resolve(router, "target", run, profile, row) == 0.9  # None and "" do not override
    assert resolve(router, "target", {"target": 0.7}, SimpleNamespace(target=0.8), row) == 0.7
    assert resolve(router, "target", SimpleNamespace(target=0.8), row) == 0.8
    assert resolve(router, "target_relative", {"target_relative": False}) is False


def test_resolve_checks_an_override_like_the_setting():
    router = routing_conf.get().router
    with pytest.raises(Invalid, match="target must be at most 1; got 3"):
        resolve(router, "target", {"target": 3})
    with pytest.raises(Invalid, match="teacher_sample_rate must be a number; got 'often'"):
        resolve(router, "teacher_sample_rate", {"teacher_sample_rate": "often"})
    with pytest.raises(AttributeError):
        resolve(router, "no_such_setting")


def test_resolve_merges_a_mapping_setting_key_by_key_most_specific_first(settings):
    training = {**settings.SKILLGATE["TRAINING"], "HYPERPARAMETERS": {"sft_steps": 10, "rank": 4, "lr": 1}}
    settings.SKILLGATE = {**settings.SKILLGATE, "TRAINING": training}
    group = training_conf.get().training
    row = SimpleNamespace(hyperparameters={"sft_steps": 20, "rank": 8})
    run = {"hyperparameters": {"sft_steps": 30}}
    assert dict(resolve(group, "hyperparameters", run, row)) == {"sft_steps": 30, "rank": 8, "lr": 1}
    assert dict(resolve(group, "hyperparameters", {"hyperparameters": None}, None)) == {
        "sft_steps": 10,
        "rank": 4,
        "lr": 1,
    }
