"""Typed settings: the machinery each app's ``conf.py`` declares its settings with (issue 30).

An app groups its settings in frozen dataclasses; each field is declared once, with :func:`setting`:
where it lives in django's settings, the environment variable that sets it, its default, what it means,
and the values it may take. From those declarations:

- :func:`from_env` reads the environment for a group (app/settings/ is the only caller: it builds the
  django settings, ``settings.SKILLGATE`` and the flat ``DIAGNOSTICS_*`` names, from it);
- :func:`load` builds a group from django's settings, checking each value's type and range; a wrong
  value raises ``ImproperlyConfigured`` naming the variable and the setting (each app's ``ready()``
  builds its groups once, so a wrong value stops start-up);
- :func:`cached` makes an app's ``get()``: built once, rebuilt after Django's ``setting_changed`` (sent by
  ``override_settings`` and pytest-django's ``settings`` fixture) or :func:`forget`;
- :func:`resolve` is the one place a per-profile override (a profile's fields or ``policy_params``, a
  database row of per-profile settings, a run's own values) is laid over a setting;
- :func:`describe` lists the declarations for the settings reference (docs/hooks/generated.py).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import threading
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Generic, TypeVar

from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed

from core import env

T = TypeVar("T")
COMPUTED: Any = object()  # a default app/settings/ computes (from VAR_DIR, another setting...)


@dataclasses.dataclass(frozen=True)
class Spec:
    """What :func:`setting` records on a field."""

    key: str  # its name in django's settings, inside the group's SECTION
    env: str  # the environment variable that sets it ('' when none does)
    doc: str
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    choices: tuple[str, ...] = ()
    nonempty: bool = False
    default_doc: str = ""  # how a COMPUTED default is found, for the reference


def setting(
    key: str,
    *,
    env: str = "",
    doc: str,
    default: Any = COMPUTED,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    choices: tuple[str, ...] = (),
    nonempty: bool = False,
    default_doc: str = "",
) -> Any:
    """A field of a settings group: ``key`` in django's settings, set by the variable ``env``."""
    spec = Spec(key, env, doc, ge, gt, le, lt, choices, nonempty, default_doc)
    if isinstance(default, list | dict):
        frozen = tuple(default) if isinstance(default, list) else types.MappingProxyType(dict(default))
        return dataclasses.field(default_factory=lambda: frozen, metadata={"spec": spec})
    return dataclasses.field(default=default, metadata={"spec": spec})


# --- declarations ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Declared:
    """One declared setting: its group, field, type and :class:`Spec`."""

    group: type
    name: str
    kind: Any
    spec: Spec
    default: Any

    @property
    def path(self) -> tuple[str, ...]:
        section = str(getattr(self.group, "SECTION", ""))
        return (*(part for part in section.split(".") if part), self.spec.key)

    @property
    def where(self) -> str:
        """The django setting, as code reads it: ``SKILLGATE["ROUTER"]["TARGET"]``, ``DIAGNOSTICS_X``."""
        first, *rest = self.path
        return first + "".join(f'["{part}"]' for part in rest)

    @property
    def label(self) -> str:
        """How a message names it: the variable, and the django setting."""
        return f"{self.spec.env} (settings.{self.where})" if self.spec.env else f"settings.{self.where}"


def declared(group: type) -> Iterator[Declared]:
    """The declared settings of ``group``, in field order."""
    return iter(_declarations(group))


@functools.cache
def _declarations(group: type) -> tuple[Declared, ...]:
    """Once per group class: a class's fields and type hints never change, and reading them
    (``typing.get_type_hints`` evaluates every annotation) cost ~0.1 ms on each :func:`resolve` of a
    call. Defaults are immutable (``setting`` freezes lists and dicts), so one copy serves every read."""
    hints = typing.get_type_hints(group)
    found = []
    for field in dataclasses.fields(group):
        spec = field.metadata.get("spec")
        if not isinstance(spec, Spec):
            continue
        if field.default is not dataclasses.MISSING:
            default = field.default
        elif field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        else:
            default = COMPUTED
        found.append(Declared(group, field.name, hints[field.name], spec, default))
    return tuple(found)


@functools.cache
def _declaration(group: type, name: str) -> Declared | None:
    return next((item for item in _declarations(group) if item.name == name), None)


def type_name(kind: Any) -> str:
    """``int``, ``float``, ``str | None``, ``tuple[str, ...]``: the type as the reference shows it."""
    if isinstance(kind, type) and not typing.get_args(kind):
        return kind.__name__
    return str(kind).replace("typing.", "").replace("pathlib.", "").replace("decimal.", "")


def describe(group: type) -> list[dict[str, str]]:
    """One row per setting of ``group``: name, setting, type, default, variable, doc (the reference)."""
    rows = []
    for item in declared(group):
        default = item.default
        if default is COMPUTED:
            shown = item.spec.default_doc or "(computed)"
        elif isinstance(default, types.MappingProxyType):
            shown = json.dumps(dict(default))
        elif isinstance(default, Decimal | Path):
            shown = str(default)
        else:
            shown = repr(list(default) if isinstance(default, tuple) else default)
        limits = _limits_text(item.spec)
        rows.append(
            {
                "field": item.name,
                "setting": item.where,
                "type": type_name(item.kind) + (f" ({limits})" if limits else ""),
                "default": shown,
                "env": item.spec.env,
                "doc": item.spec.doc,
            }
        )
    return rows


def _limits_text(spec: Spec) -> str:
    parts = [
        f"{sign} {bound:g}"
        for sign, bound in ((">=", spec.ge), (">", spec.gt), ("<=", spec.le), ("<", spec.lt))
        if bound is not None
    ]
    if spec.choices:
        parts.append("one of " + ", ".join(spec.choices))
    if spec.nonempty:
        parts.append("not empty")
    return ", ".join(parts)


# --- checking one value ------------------------------------------------------------------------


class Invalid(ValueError):
    """A value that is not of its setting's type or range (the message says how)."""


@functools.cache
def _optional(kind: Any) -> tuple[Any, bool]:
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        args = [arg for arg in typing.get_args(kind) if arg is not type(None)]
        if len(args) == 1 and len(typing.get_args(kind)) == 2:
            return args[0], True
    return kind, False


def coerce(kind: Any, spec: Spec, value: Any) -> Any:
    """``value`` as ``kind`` within ``spec``'s limits; raises :class:`Invalid` saying what is wrong."""
    base, optional = _optional(kind)
    if value is None:
        if optional:
            return None
        raise Invalid(f"must be set (a {type_name(kind)})")
    result = _as_type(base, value)
    if isinstance(result, int | float | Decimal) and not isinstance(result, bool):
        for bound, ok, words in (
            (spec.ge, lambda v, b: v >= b, "at least"),
            (spec.gt, lambda v, b: v > b, "more than"),
            (spec.le, lambda v, b: v <= b, "at most"),
            (spec.lt, lambda v, b: v < b, "less than"),
        ):
            if bound is not None and not ok(result, type(result)(bound)):
                raise Invalid(f"must be {words} {bound:g}")
    if spec.choices and result not in spec.choices:
        raise Invalid(f"must be one of {', '.join(spec.choices)}")
    if spec.nonempty and not result:
        raise Invalid("must not be empty")
    return result


def _as_type(kind: Any, value: Any) -> Any:
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise Invalid("must be a boolean (true or false)")
    if kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise Invalid("must be an integer")
    if kind is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise Invalid("must be a number")
    if kind is Decimal:
        if isinstance(value, bool) or not isinstance(value, int | float | str | Decimal):
            raise Invalid("must be a decimal number")
        try:
            number = Decimal(str(value))
        except InvalidOperation:
            raise Invalid("must be a decimal number") from None
        if not number.is_finite():
            raise Invalid("must be a finite decimal number")
        return number
    if kind is str:
        if isinstance(value, str):
            return value
        raise Invalid("must be a string")
    if kind is Path:
        if isinstance(value, str | Path):
            return Path(value)
        raise Invalid("must be a path")
    origin = typing.get_origin(kind)
    if origin is tuple:
        if isinstance(value, list | tuple) and all(isinstance(item, str) for item in value):
            return tuple(value)
        raise Invalid("must be a list of strings")
    if origin in (Mapping, dict) or kind is dict:
        if isinstance(value, Mapping):
            return types.MappingProxyType(dict(value))
        raise Invalid("must be a mapping (a JSON object)")
    raise TypeError(f"no checker for settings of type {kind!r}")  # a declaration's mistake


# --- building a group ---------------------------------------------------------------------------

_MISSING = object()


def _lookup(root: Any, path: tuple[str, ...]) -> Any:
    value = getattr(root, path[0], _MISSING)
    for part in path[1:]:
        if value is _MISSING:
            break
        value = value.get(part, _MISSING) if isinstance(value, Mapping) else _MISSING
    return value


def load(group: type[T], source: Any = None) -> T:
    """``group`` built from django's settings (or ``source``, any object with the same names); a value
    that is not of its type or range raises ``ImproperlyConfigured`` naming the variable and setting.
    A setting missing from the settings takes its declared default."""
    if source is None:
        from django.conf import settings as source
    values = {}
    for item in declared(group):
        value = _lookup(source, item.path)
        if value is _MISSING:
            if item.default is COMPUTED:
                raise ImproperlyConfigured(f"{item.label} is not set.")
            value = item.default
        try:
            values[item.name] = coerce(item.kind, item.spec, value)
        except Invalid as exc:
            raise ImproperlyConfigured(f"{item.label} {exc}; got {value!r}.") from None
    return group(**values)


def from_env(group: type, **computed: Any) -> dict[str, Any]:
    """The settings of ``group`` read from the environment, ``{key: value}``, for app/settings/: each
    variable parsed as its field's type (a value that is not one stops start-up, naming it); a variable
    that is unset takes the declared default, or ``computed[key]`` for a COMPUTED one. Ranges are
    checked later, by :func:`load` (an app's ``ready()``), once every part of the settings is read."""
    out: dict[str, Any] = {}
    for item in declared(group):
        default = computed.get(item.spec.key, item.default)
        if default is COMPUTED:
            raise ImproperlyConfigured(f"app/settings/ gives no default for {item.label}.")
        out[item.spec.key] = _read_env(item, default) if item.spec.env else default
    return out


def _read_env(item: Declared, default: Any) -> Any:
    name = item.spec.env
    base, optional = _optional(item.kind)
    plain = default if not isinstance(default, tuple | types.MappingProxyType) else None
    if base is bool:
        return env.env_bool(name, default)
    if base is int:
        return env.env_int(name, default) if not optional else _optional_int(name, default)
    if base is float:
        return env.env_float(name, default)
    if typing.get_origin(base) is tuple:
        return env.env_list(name, list(default))
    if typing.get_origin(base) in (Mapping, dict) or base is dict:
        text = env.env_str(name, json.dumps(dict(default)))
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ImproperlyConfigured(f"{name} must be a JSON object: {exc}.") from None
        if not isinstance(parsed, dict):
            raise ImproperlyConfigured(f"{name} must be a JSON object, got {text!r}.")
        return parsed
    given = env.env_optional(name)
    if given is None:
        return plain
    if base is Path:
        return Path(given)
    return given  # str and Decimal (a price, kept as the text written, checked by load())


def _optional_int(name: str, default: int | None) -> int | None:
    return env.env_int(name, 0) if env.env_optional(name) is not None else default


# --- the cache of an app's settings -----------------------------------------------------------


class Cached(Generic[T]):
    """An app's ``get()``: ``build()`` once, again after a settings change or :func:`forget`."""

    def __init__(self, build: Callable[[], T]) -> None:
        self._build = build
        self._value: T | None = None
        self._generation = 0
        self._lock = threading.Lock()
        _caches.append(self)

    def __call__(self) -> T:
        value = self._value
        if value is not None:
            return value
        generation = self._generation
        value = self._build()
        with self._lock:
            if generation == self._generation:  # no change while it was built
                self._value = value
        return value

    def forget(self) -> None:
        with self._lock:
            self._generation += 1
            self._value = None


_caches: list[Cached[Any]] = []


def cached(build: Callable[[], T]) -> Cached[T]:
    return Cached(build)


def forget() -> None:
    """Every app's settings are built again on their next read (after settings were changed by hand,
    outside ``override_settings``, which sends ``setting_changed`` itself)."""
    for cache in _caches:
        cache.forget()


def _changed(**kwargs: Any) -> None:
    forget()


setting_changed.connect(_changed, dispatch_uid="core.conf.forget")


# --- per-profile overrides --------------------------------------------------------------------


def resolve(group: Any, name: str, *overrides: Any, key: str | None = None) -> Any:
    """The value of setting ``name`` of the typed settings ``group`` (an instance, e.g.
    ``routing.conf.get().router``), with per-profile overrides laid over it. THE precedence rule:

    1. ``overrides`` are read in the order given, most specific first; by convention a run's or call's
       own values, then the profile (a ``TaskProfile`` field or its ``policy_params``), then a database
       row of per-profile settings (``TrainingSettings``);
    2. the first that holds ``key`` (default: ``name``) with a value other than ``None`` or ``""`` wins;
       an override may be a mapping (read with ``.get``), a model or any object (an attribute), or None;
    3. else the setting itself, from django's settings (the environment, through app/settings/).

    A mapping-typed setting (training's hyper-parameters) is merged instead, key by key with the same
    precedence: each override's keys over the setting's. A winning override is checked like the setting
    (type and range) and raises :class:`Invalid` (a ValueError) naming ``key`` when it is not one."""
    cls: type = type(group)
    item = _declaration(cls, name)
    if item is None:
        raise AttributeError(f"{type(group).__name__} declares no setting {name!r}")
    wanted = key or name
    found = []
    for layer in overrides:
        if layer is None:
            continue
        value = layer.get(wanted) if isinstance(layer, Mapping) else getattr(layer, wanted, None)
        if value is None or value == "":
            continue
        try:
            checked = coerce(item.kind, item.spec, value)
        except Invalid as exc:
            raise Invalid(f"{wanted} {exc}; got {value!r}") from None
        if not isinstance(checked, Mapping):
            return checked
        found.append(checked)
    if not found:
        return getattr(group, name)
    merged = dict(getattr(group, name))
    for layer_values in reversed(found):
        merged.update(layer_values)
    return types.MappingProxyType(merged)
