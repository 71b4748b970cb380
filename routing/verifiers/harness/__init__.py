"""The two programs of a ``python_tests`` run, one per sandbox (routing/verifiers/python_tests.py).

``answer_side.py`` (the answer's process) and ``test_side.py`` (the tests' process) share ``wire.py``;
none of them imports Django or anything outside the standard library, because the sandbox has only
the interpreter and its standard library. :func:`program` writes one self-contained file that
installs those modules under their own names and calls the side's ``main`` with its parameters.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
_PACKAGE = __name__

_BOOT = """\
import sys as _sg_sys, types as _sg_types


def _sg_install(name, source):
    module = _sg_types.ModuleType(name)
    module.__path__ = []
    _sg_sys.modules[name] = module
    parent, _, leaf = name.rpartition(".")
    if parent:
        setattr(_sg_sys.modules[parent], leaf, module)
    exec(compile(source, "<" + name + ">", "exec"), module.__dict__)


for _sg_name, _sg_source in {modules!r}:
    _sg_install(_sg_name, _sg_source)
del _sg_name, _sg_source
_sg_sys.modules[{main!r}].main(**{params!r})
"""


@functools.cache
def _source(leaf: str) -> str:
    return (_HERE / f"{leaf}.py").read_text(encoding="utf-8")


def program(side: str, **params: Any) -> str:
    """The program of ``side`` ("answer_side" or "test_side"); ``params`` (fd numbers, source texts)
    are written into it as literals."""
    parts = _PACKAGE.split(".")
    packages = [(".".join(parts[: i + 1]), "") for i in range(len(parts))]
    modules = [*packages, (f"{_PACKAGE}.wire", _source("wire")), (f"{_PACKAGE}.{side}", _source(side))]
    return _BOOT.format(modules=modules, main=f"{_PACKAGE}.{side}", params=params)
