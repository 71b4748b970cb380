"""Typed readers of environment variables that fail loudly (house style 5).

Only app/settings/ reads the environment (through these); library code reads the declared settings.
"""

from __future__ import annotations

import json
import os

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str | None = None) -> str:
    value = os.environ.get(name)
    if value is None or value == "":
        if default is None:
            raise ImproperlyConfigured(f"Set the environment variable {name}.")
        return default
    return value


def env_optional(name: str) -> str | None:
    return os.environ.get(name) or None


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (true/false/1/0), got {value!r}.")


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {value!r}.") from None


def env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return float(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, got {value!r}.") from None


def env_list(name: str, default: list[str]) -> list[str]:
    """A list, written one of two ways:

    - comma-separated, ``a, b`` (blanks around each item dropped, empty items skipped): no item can hold
      a comma;
    - a JSON array of strings, ``["a,b", "c"]``, for items that hold commas (or anything else): read when
      the value opens with ``[`` followed by ``"`` or ``]`` (blanks between allowed), each item kept as
      written (only empty ones skipped). Such a value that is not an array of strings stops start-up.

    No comma-form list opens that way (an IPv6 host ``[::1]`` does not), so old values read as before."""
    value = os.environ.get(name)
    if value is None:
        return default
    opening = value.lstrip()
    if opening.startswith("[") and opening[1:].lstrip()[:1] in ('"', "]"):
        return _json_list(name, value)
    return [item.strip() for item in value.split(",") if item.strip()]


def _json_list(name: str, value: str) -> list[str]:
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        raise ImproperlyConfigured(
            f'{name} opens like a JSON array (["...) but is not one: {exc}. Write a JSON array of strings, '
            'e.g. ["a,b", "c"], or comma-separated items.'
        ) from None
    if not isinstance(parsed, list) or not all(isinstance(item, str) for item in parsed):
        raise ImproperlyConfigured(f"{name} must be a JSON array of strings, got {value!r}.")
    return [item for item in parsed if item.strip()]
