"""``rx``: regular expressions in linear time, the agent's ``re`` on RE2 (``google-re2``).

Everything the agent matches is hostile text: tool output (logs, events, metrics, MCP servers' answers)
read in Celery workers, and what people type. Python's ``re`` backtracks, so one crafted log line can
hold a worker for minutes; RE2's matching time is linear in the text. This module is the subset of
``re``'s interface the agent uses (``compile``, ``search``, ``sub``... with ``I``/``M``/``S`` flags), so
a pattern reads the same; RE2 has no look-around and no backreferences, and ``\\z`` (not ``\\Z``)
ends the text. Differences the agent lives with: ``\\w``, ``\\d``, ``\\s`` and ``\\b`` are ASCII classes,
and ``$`` without ``M`` matches only at the very end (not before a final newline).

``tests/security/test_regex_linear.py`` fails on a new ``re`` use in diagnostics/ that is not on its
commented allow-list.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Iterator
from typing import Any, TypeAlias

import re2

# The compiled pattern and the match objects (re2's own classes; untyped).
Pattern: TypeAlias = Any
Match: TypeAlias = Any
error = re2.error


class Flag(enum.IntFlag):
    """``re``'s flag names, as RE2 inline flags."""

    IGNORECASE = 1
    MULTILINE = 2
    DOTALL = 4


IGNORECASE = I = Flag.IGNORECASE  # noqa: E741 - re's name
MULTILINE = M = Flag.MULTILINE
DOTALL = S = Flag.DOTALL
_INLINE = ((Flag.IGNORECASE, "i"), (Flag.MULTILINE, "m"), (Flag.DOTALL, "s"))


def _options() -> Any:
    options = re2.Options()
    options.log_errors = False  # a pattern RE2 refuses raises; it need not also print
    return options


def _encodable(text: Any) -> Any:
    """``text`` as RE2 can take it: a lone surrogate (JSON's ``"\\ud800"`` decodes to one) cannot be
    UTF-8, so each becomes ``?`` (one character for one: offsets stay right)."""
    if not isinstance(text, str) or text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


class _Compiled:
    """An RE2 pattern that takes any ``str`` (see ``_encodable``); otherwise re2's own object."""

    __slots__ = ("_re",)

    def __init__(self, compiled: Any) -> None:
        self._re = compiled

    @property
    def pattern(self) -> str:
        return str(self._re.pattern)

    @property
    def groups(self) -> int:
        return int(self._re.groups)

    @property
    def groupindex(self) -> dict[str, int]:
        return dict(self._re.groupindex)

    def search(self, text: str, *args: Any) -> Match | None:
        return self._re.search(_encodable(text), *args)

    def match(self, text: str, *args: Any) -> Match | None:
        return self._re.match(_encodable(text), *args)

    def fullmatch(self, text: str, *args: Any) -> Match | None:
        return self._re.fullmatch(_encodable(text), *args)

    def finditer(self, text: str, *args: Any) -> Iterator[Match]:
        return iter(self._re.finditer(_encodable(text), *args))

    def findall(self, text: str, *args: Any) -> list[Any]:
        return list(self._re.findall(_encodable(text), *args))

    def split(self, text: str, maxsplit: int = 0) -> list[str]:
        return list(self._re.split(_encodable(text), maxsplit))

    def sub(self, repl: str | Callable[[Match], str], text: str, count: int = 0) -> str:
        if isinstance(repl, str) and "\\" not in repl:
            literal = repl  # re2 reads a template's text as latin-1 escapes: "…" would come back mangled
            repl = lambda _match: literal  # noqa: E731
        elif isinstance(repl, str) and not repl.isascii():
            raise ValueError("a template with group references must be ASCII (use a function)")
        return str(self._re.sub(repl, _encodable(text), count))


@functools.lru_cache(maxsize=1024)
def _compiled(pattern: str, flags: int) -> Pattern:
    inline = "".join(letter for flag, letter in _INLINE if flags & flag)
    try:
        return _Compiled(re2.compile(f"(?{inline}){pattern}" if inline else pattern, _options()))
    except re2.error as exc:
        reason = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise ValueError(f"RE2 refuses {pattern!r}: {reason}") from None


def compile(pattern: str | Pattern, flags: int = 0) -> Pattern:
    if not isinstance(pattern, str):
        return pattern
    return _compiled(pattern, int(flags))


def search(pattern: str | Pattern, text: str, flags: int = 0) -> Match | None:
    return compile(pattern, flags).search(text)


def match(pattern: str | Pattern, text: str, flags: int = 0) -> Match | None:
    return compile(pattern, flags).match(text)


def fullmatch(pattern: str | Pattern, text: str, flags: int = 0) -> Match | None:
    return compile(pattern, flags).fullmatch(text)


def findall(pattern: str | Pattern, text: str, flags: int = 0) -> list[Any]:
    return list(compile(pattern, flags).findall(text))


def finditer(pattern: str | Pattern, text: str, flags: int = 0) -> Iterator[Match]:
    return iter(compile(pattern, flags).finditer(text))


def sub(
    pattern: str | Pattern, repl: str | Callable[[Match], str], text: str, count: int = 0, flags: int = 0
) -> str:
    return str(compile(pattern, flags).sub(repl, text, count))


def split(pattern: str | Pattern, text: str, maxsplit: int = 0, flags: int = 0) -> list[str]:
    return list(compile(pattern, flags).split(text, maxsplit))


def escape(text: str) -> str:
    return str(re2.escape(_encodable(text)))


class NotFollowedBy:
    """``(?:pattern)(?!veto)|others`` for RE2, which has no look-ahead: a match of ``pattern`` counts
    unless ``veto`` matches at its end within ``window`` characters (the veto's own bounded length);
    ``others``, alternatives without the condition, count as they are. Only ``search`` (which is all a
    rule table needs); linear: each veto reads at most ``window`` characters."""

    def __init__(self, pattern: str, veto: str, *, window: int, others: str = "", flags: int = 0) -> None:
        self.pattern = compile(pattern, flags)
        self.veto = compile(veto, flags)
        self.window = window
        self.others = compile(others, flags) if others else None

    def search(self, text: str) -> Match | None:
        for found in self.pattern.finditer(text):
            if self.veto.match(text[found.end() : found.end() + self.window]) is None:
                return found
        return self.others.search(text) if self.others is not None else None
