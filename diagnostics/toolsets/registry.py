"""Environments by name: where diagnoses run (replay, local, kubernetes, prometheus, ...).

An Environment hands out two disjoint lists: ReadToolsets (for the Probe) and WriteToolsets (for
the Executor). Nothing else is shared between the two roles.

Environments register with ``@register_environment``. Their modules are imported lazily, on the
first lookup (no objects are built at import time). A module that defines no Environment but
concrete ReadToolset / WriteToolset classes whose ``name`` equals the environment name also
works: those classes are instantiated with the environment options they accept.

Names may be combined with ``+`` (e.g. ``kubernetes+prometheus``): the toolsets are concatenated.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from diagnostics import conf as diagnostics_conf
from diagnostics.toolsets.base import ReadToolset, WriteToolset


class UnknownEnvironment(LookupError):
    """An unknown environment, or one that cannot be built with these options."""


class Environment(ABC):
    name: ClassVar[str]

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        self.options = dict(options or {})

    @abstractmethod
    def read_toolsets(self) -> list[ReadToolset]: ...

    def write_toolsets(self) -> list[WriteToolset]:
        return []


_ENVIRONMENTS: dict[str, type[Environment]] = {}

# Modules that provide environments, imported on first lookup. Extend with the setting
# DIAGNOSTICS_ENVIRONMENT_MODULES = {"name": "dotted.module"}.
DEFAULT_MODULES: dict[str, str] = {
    "replay": "diagnostics.toolsets.replay",
    "local": "diagnostics.toolsets.local",
    "kubernetes": "diagnostics.toolsets.kubernetes",
    "prometheus": "diagnostics.toolsets.prometheus",
}


def register_environment(cls: type[Environment]) -> type[Environment]:
    _ENVIRONMENTS[cls.name] = cls
    return cls


def _modules() -> dict[str, str]:
    return {**DEFAULT_MODULES, **diagnostics_conf.get().environments.modules}


def _import(module_name: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            return None
        raise


def _instantiate(cls: type[Any], options: dict[str, Any]) -> Any:
    params = inspect.signature(cls).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return cls(**options)
    accepted = {k: v for k, v in options.items() if k in params}
    return cls(**accepted)


class _ToolsetClassesEnvironment(Environment):
    """An environment made of the concrete toolset classes a module defines for that name."""

    name = "_toolset_classes"

    def __init__(self, options: dict[str, Any], read: list[type], write: list[type]) -> None:
        super().__init__(options)
        self._read = read
        self._write = write

    def read_toolsets(self) -> list[ReadToolset]:
        return [_instantiate(cls, self.options) for cls in self._read]

    def write_toolsets(self) -> list[WriteToolset]:
        return [_instantiate(cls, self.options) for cls in self._write]


def _from_toolset_classes(name: str, module: Any, options: dict[str, Any]) -> Environment | None:
    def concrete(base: type) -> list[type]:
        found = []
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if (
                issubclass(obj, base)
                and obj is not base
                and not inspect.isabstract(obj)
                and obj.__module__ == module.__name__
                and getattr(obj, "name", None) == name
            ):
                found.append(obj)
        return found

    read, write = concrete(ReadToolset), concrete(WriteToolset)
    if not read:
        return None
    return _ToolsetClassesEnvironment(options, read, write)


def _build_one(name: str, options: dict[str, Any]) -> Environment:
    if name not in _ENVIRONMENTS:
        module_name = _modules().get(name)
        module = _import(module_name) if module_name else None
        if name not in _ENVIRONMENTS:
            fallback = _from_toolset_classes(name, module, options) if module is not None else None
            if fallback is not None:
                return fallback
            raise UnknownEnvironment(
                f"Unknown environment {name!r}; known: {', '.join(environment_names()) or 'none'}."
            )
    try:
        return _ENVIRONMENTS[name](options)
    except (TypeError, ValueError, OSError) as exc:
        raise UnknownEnvironment(f"Environment {name!r} cannot be built: {exc}") from exc


class _Combined(Environment):
    name = "_combined"

    def __init__(self, parts: list[Environment]) -> None:
        super().__init__({})
        self._parts = parts

    def read_toolsets(self) -> list[ReadToolset]:
        return [ts for part in self._parts for ts in part.read_toolsets()]

    def write_toolsets(self) -> list[WriteToolset]:
        return [ts for part in self._parts for ts in part.write_toolsets()]


def build_environment(name: str, options: dict[str, Any] | None = None) -> Environment:
    names = [part.strip() for part in (name or "").split("+") if part.strip()]
    if not names:
        raise UnknownEnvironment("No environment named.")
    parts = [_build_one(part, dict(options or {})) for part in names]
    return parts[0] if len(parts) == 1 else _Combined(parts)


def environment_names() -> list[str]:
    """Registered names plus those whose module exists (without importing anything new)."""
    available = set(_ENVIRONMENTS)
    for name, module_name in _modules().items():
        try:
            if importlib.util.find_spec(module_name) is not None:
                available.add(name)
        except ModuleNotFoundError:
            continue
    return sorted(available)
