"""``regex``: the answer text must match a pattern (``search`` anywhere, or ``fullmatch``)."""

from __future__ import annotations

import re
from typing import Any

from routing.verifiers.base import Verdict, Verifier, VerifierConfigError, register
from routing.verifiers.json_schema import message_text

_FLAGS = {
    "IGNORECASE": re.IGNORECASE,
    "MULTILINE": re.MULTILINE,
    "DOTALL": re.DOTALL,
    "VERBOSE": re.VERBOSE,
    "ASCII": re.ASCII,
}
_MODES = ("search", "fullmatch")


@register
class RegexVerifier(Verifier):
    """Config: ``pattern`` (required), ``mode`` ("search" or "fullmatch"), ``flags`` (names such as
    "IGNORECASE"). In fullmatch mode surrounding whitespace of the answer is ignored."""

    kind = "regex"

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        pattern = config.get("pattern")
        if not isinstance(pattern, str) or not pattern:
            raise VerifierConfigError("regex.pattern must be a non-empty string")
        self.mode = config.get("mode", "search")
        if self.mode not in _MODES:
            raise VerifierConfigError(f"regex.mode must be one of {', '.join(_MODES)}; got {self.mode!r}")
        names = config.get("flags") or []
        if not isinstance(names, list) or any(
            not isinstance(n, str) or n.upper() not in _FLAGS for n in names
        ):
            raise VerifierConfigError(f"regex.flags must be a list of {', '.join(_FLAGS)}; got {names!r}")
        flags = re.NOFLAG
        for name in names:
            flags |= _FLAGS[name.upper()]
        try:
            self.pattern = re.compile(pattern, flags)
        except re.error as exc:
            raise VerifierConfigError(f"regex.pattern does not compile: {exc}") from exc

    def verify(self, *, request: dict[str, Any], message: dict[str, Any]) -> Verdict:
        text = message_text(message)
        if self.mode == "fullmatch":
            match = self.pattern.fullmatch(text.strip())
        else:
            match = self.pattern.search(text)
        if match is None:
            return Verdict(False, f"no {self.mode} match for /{self.pattern.pattern}/")
        return Verdict(True, f"matched {match.group(0)[:80]!r}")
