"""``python_tests``: run the answer's code with the configured tests in the sandbox.

The program is ``prompt`` (if any), the answer's code, the ``test`` code and ``check(<entry_point>)``
when the test defines ``check``, run by a small harness. The answer runs with ``__name__`` set to
``"solution"`` so its ``if __name__ == "__main__":`` demo blocks stay quiet.

The verdict is one the answer cannot forge by what it can read: the run passes only when the harness
prints a random nonce after the tests returned, and the nonce is in no text, file, argument or
environment of the program. The sandbox hands it over in a pipe (routing/verifiers/sandbox.py) that
the harness reads and closes before any of the answer runs, so reading the program, its /proc entries
or its fds finds nothing to print; exiting early (``sys.exit``, ``os._exit``, a signal, ``SystemExit``
raised inside a tested function) never prints it.
"""

from __future__ import annotations

import re
import secrets
from typing import Any

from routing.verifiers.base import Verdict, Verifier, VerifierConfigError, register
from routing.verifiers.json_schema import message_text
from routing.verifiers.sandbox import MAX_MEMORY_MB, MAX_TIMEOUT_S, run_python

_FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+-]*)[^\n]*\n(.*?)^[ \t]*```", re.DOTALL | re.MULTILINE)
_FENCE_LINE = re.compile(r"^[ \t]*```[ \t]*([\w+-]*)[^\n]*(?:\n|$)", re.MULTILINE)
_PYTHON_LANGS = ("python", "python3", "py")
_DEFINES_CHECK = re.compile(r"^def\s+check\s*\(", re.MULTILINE)
_DETAIL_LINES = 8
_DETAIL_CHARS = 1500


def extract_code(text: str) -> str:
    """The first ```python fenced block, else the first unlabelled one. With no whole block, one fence
    line: the code after an opening one (```python, never closed: the answer was cut), the code
    before a bare one (the answer starts with code and only closes the fence, as small chat models
    write it). Else the whole text."""
    blocks = [(m.group(1).lower(), m.group(2)) for m in _FENCE.finditer(text)]
    for wanted in (_PYTHON_LANGS, ("",)):
        for lang, code in blocks:
            if lang in wanted:
                return code
    fence = _FENCE_LINE.search(text)
    if fence is None:
        return text
    if fence.group(1).lower() in _PYTHON_LANGS or not text[: fence.start()].strip():
        return text[fence.end() :]
    return text[: fence.start()]


def defines(code: str, name: str) -> bool:
    """Whether ``code`` defines ``name`` at module level (def, async def, class or assignment)."""
    pattern = (
        rf"^(?:(?:async\s+)?def\s+{re.escape(name)}\s*\(|class\s+{re.escape(name)}\b|{re.escape(name)}\s*=)"
    )
    return re.search(pattern, code, re.MULTILINE) is not None


# Reads the nonce (sys.argv[1] names its pipe) and closes the pipe before the answer's first line; runs
# answer and tests in a namespace of their own; prints the nonce only when they returned.
_HARNESS = """\
import linecache as _sg_lines, os as _sg_os, sys as _sg_sys


def _sg_run(body):
    fd = int(_sg_sys.argv[1])
    done = _sg_os.read(fd, 256)
    _sg_os.close(fd)
    del _sg_sys.argv[1:]
    _sg_lines.cache["<answer>"] = (len(body), None, body.splitlines(True), "<answer>")  # tracebacks
    try:
        exec(compile(body, "<answer>", "exec"), {{"__name__": "solution", "__builtins__": __builtins__}})
    except SystemExit as exc:  # leaving before the tests finished is not passing them
        _sg_sys.stderr.write(f"the program exited before the tests finished (SystemExit: {{exc.code}})\\n")
        _sg_sys.stderr.flush()
        _sg_os._exit(1)
    except BaseException:
        import traceback

        traceback.print_exc()
        _sg_sys.stderr.flush()
        _sg_os._exit(1)
    _sg_sys.stdout.flush()
    _sg_os.write(1, b"\\n" + done + b"\\n")


_sg_run({body})
"""


def _number(config: dict[str, Any], key: str, default: float, low: float, high: float) -> float:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise VerifierConfigError(
            f"python_tests.{key} must be a number in [{low:g}, {high:g}]; got {value!r}"
        )
    return float(value)


@register
class PythonTestsVerifier(Verifier):
    """Config: ``test`` (required; a ``def check(candidate)`` or plain asserts), ``entry_point``,
    ``prompt`` (prepended; the answer continues it unless it defines ``entry_point`` itself),
    ``timeout_s`` (default 10) and ``memory_mb`` (default 512)."""

    kind = "python_tests"

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        test = config.get("test")
        if not isinstance(test, str) or not test.strip():
            raise VerifierConfigError("python_tests.test must be a non-empty string")
        entry_point = config.get("entry_point")
        if entry_point is not None and not (isinstance(entry_point, str) and entry_point.isidentifier()):
            raise VerifierConfigError(f"python_tests.entry_point must be an identifier; got {entry_point!r}")
        if entry_point is None and _DEFINES_CHECK.search(test):
            raise VerifierConfigError("python_tests.entry_point is required when test defines check()")
        prompt = config.get("prompt")
        if prompt is not None and not isinstance(prompt, str):
            raise VerifierConfigError("python_tests.prompt must be a string")
        self.test: str = test
        self.entry_point: str | None = entry_point
        self.prompt: str = prompt or ""
        self.timeout_s = _number(config, "timeout_s", 10, 0.1, MAX_TIMEOUT_S)
        self.memory_mb = int(_number(config, "memory_mb", 512, 64, MAX_MEMORY_MB))

    def program(self, answer: str) -> str:
        code = extract_code(answer)
        if self.prompt and not (self.entry_point and defines(code, self.entry_point)):
            solution = self.prompt + ("" if self.prompt.endswith("\n") else "\n") + code
        elif self.prompt:  # keep the prompt's imports and helpers; the answer's definition wins
            solution = self.prompt + "\n\n" + code
        else:
            solution = code
        call = f"check({self.entry_point})\n" if self.entry_point and _DEFINES_CHECK.search(self.test) else ""
        body = f'__name__ = "solution"\n{solution}\n\n__name__ = "__main__"\n{self.test}\n\n{call}'
        return _HARNESS.format(body=repr(body))

    def verify(self, *, request: dict[str, Any], message: dict[str, Any]) -> Verdict:
        marker = f"skillgate-tests-done-{secrets.token_hex(16)}"
        result = run_python(
            self.program(message_text(message)),
            timeout_s=self.timeout_s,
            memory_mb=self.memory_mb,
            secret=marker.encode(),
        )
        if result.timed_out:
            return Verdict(False, f"timeout after {self.timeout_s:g}s")
        if result.ok and marker in result.stdout.splitlines():
            return Verdict(True, "all tests passed")
        if result.ok:
            return Verdict(False, "the program exited before the tests finished")
        tail = "\n".join(result.stderr.strip().splitlines()[-_DETAIL_LINES:])[-_DETAIL_CHARS:]
        return Verdict(False, tail or f"exit status {result.returncode}")
