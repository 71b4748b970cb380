"""``python_tests``: run the answer's code and the configured tests, in two sandboxed processes.

The answer's program is ``prompt`` (if any) and the answer's code; it runs with ``__name__`` set to
``"solution"`` (its ``if __name__ == "__main__":`` demo blocks stay quiet) in one sandbox, the
answer's process. The ``test`` code (and ``check(<entry_point>)`` when it defines ``check``) runs in
another sandbox, the tests' process, with the names it uses from the answer bound to proxies: a call
crosses a pipe as data and its result comes back as data (routing/verifiers/harness/). The answer's
process holds nothing of the verdict: no nonce, no report fd, no way to reach the tests' process.

The verdict is decided here, in the gateway's process, from what it observes: the per-test results
the tests' process writes to a file only it was given, that process's exit status, whether the
answer's process was still alive when the tests ended, and the deadline (both are killed then). It
passes only when every one of the tests the gateway counts itself (the test program's top-level
statements) reported a pass, in order, and nothing else went wrong.
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
from typing import Any

import re2

from routing.verifiers.base import Verdict, Verifier, VerifierConfigError, register
from routing.verifiers.harness import program
from routing.verifiers.harness.test_side import count_tests, program_text
from routing.verifiers.json_schema import message_text
from routing.verifiers.sandbox import MAX_MEMORY_MB, MAX_TIMEOUT_S, SandboxResult, run_pair


def _re2(pattern: str) -> Any:
    """Linear-time matching on model answers (RE2): a megabyte of blanks takes milliseconds."""
    options = re2.Options()
    options.log_errors = False
    return re2.compile(pattern, options)


_FENCE = _re2(r"(?ms)^[ \t]*```[ \t]*([\w+-]*)[^\n]*\n(.*?)^[ \t]*```")
_FENCE_LINE = _re2(r"(?m)^[ \t]*```[ \t]*([\w+-]*)[^\n]*(?:\n|$)")
_PYTHON_LANGS = ("python", "python3", "py")
_DEFINES_CHECK = _re2(r"(?m)^def\s+check\s*\(")
_DETAIL_LINES = 8
_DETAIL_CHARS = 1500
MAX_TEST_CHARS = 256 * 1024
MAX_ENTRY_POINT_CHARS = 256
"""A longer name is refused: ``_definition`` keeps 256 compiled patterns of the names it saw, and a
233,000-character name compiles to about 10 MB (256 distinct ones grew a process by 2.5 GB)."""
MAX_BLOCKS = 1000  # fenced blocks of one answer looked at (a block costs microseconds: bounded)
_REPORT_BYTES = 8 * 1024 * 1024


def extract_code(text: str) -> str:
    """The first ```python fenced block, else the first unlabelled one. With no whole block, one fence
    line: the code after an opening one (```python, never closed: the answer was cut), the code
    before a bare one (the answer starts with code and only closes the fence, as small chat models
    write it). Else the whole text. Only the first :data:`MAX_BLOCKS` blocks are looked at."""
    unlabelled = None
    for index, match in enumerate(_FENCE.finditer(text)):
        lang = match.group(1).lower()
        if lang in _PYTHON_LANGS:
            return str(match.group(2))
        if lang == "" and unlabelled is None:
            unlabelled = str(match.group(2))
        if index + 1 >= MAX_BLOCKS:
            break
    if unlabelled is not None:
        return unlabelled
    fence = _FENCE_LINE.search(text)
    if fence is None:
        return text
    if fence.group(1).lower() in _PYTHON_LANGS or not text[: fence.start()].strip():
        return text[fence.end() :]
    return text[: fence.start()]


@functools.lru_cache(maxsize=256)
def _definition(name: str) -> Any:
    name = re2.escape(name)
    return _re2(rf"(?m)^(?:(?:async\s+)?def\s+{name}\s*\(|class\s+{name}\b|{name}\s*=)")


def defines(code: str, name: str) -> bool:
    """Whether ``code`` defines ``name`` at module level (def, async def, class or assignment)."""
    return _definition(name).search(code) is not None


def _tail(text: str) -> str:
    return "\n".join(text.strip().splitlines()[-_DETAIL_LINES:])[-_DETAIL_CHARS:]


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
        if entry_point is not None and len(entry_point) > MAX_ENTRY_POINT_CHARS:
            raise VerifierConfigError(
                f"python_tests.entry_point is longer than {MAX_ENTRY_POINT_CHARS} characters"
            )
        if entry_point is None and _DEFINES_CHECK.search(test):
            raise VerifierConfigError("python_tests.entry_point is required when test defines check()")
        prompt = config.get("prompt")
        if prompt is not None and not isinstance(prompt, str):
            raise VerifierConfigError("python_tests.prompt must be a string")
        if len(test) > MAX_TEST_CHARS:
            raise VerifierConfigError(f"python_tests.test is longer than {MAX_TEST_CHARS} characters")
        self.test: str = test
        self.entry_point: str | None = entry_point
        self.prompt: str = prompt or ""
        self.timeout_s = _number(config, "timeout_s", 10, 0.1, MAX_TIMEOUT_S)
        self.memory_mb = int(_number(config, "memory_mb", 512, 64, MAX_MEMORY_MB))

    def solution(self, answer: str) -> str:
        """The answer's program: the prompt (if any) and the code of the answer."""
        code = extract_code(answer)
        if self.prompt and not (self.entry_point and defines(code, self.entry_point)):
            return self.prompt + ("" if self.prompt.endswith("\n") else "\n") + code
        if self.prompt:  # keep the prompt's imports and helpers; the answer's definition wins
            return self.prompt + "\n\n" + code
        return code

    def tests(self) -> str:
        """The tests' program: the test code, and ``check(<entry_point>)`` when it defines check."""
        calls_check = bool(self.entry_point and _DEFINES_CHECK.search(self.test))
        return program_text(self.test, self.entry_point, calls_check)

    def verify(self, *, request: dict[str, Any], message: dict[str, Any]) -> Verdict:
        tests, body = self.tests(), self.solution(message_text(message))
        try:
            expected = count_tests(tests)  # counted here, never taken from the tests' process
        except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:  # not the answer's fault
            return Verdict.errored(f"python_tests.test does not parse: {type(exc).__name__}: {exc}")
        with tempfile.TemporaryFile(prefix="skillgate-tests-report-") as report:
            to_answer_r, to_answer_w = os.pipe()
            to_tests_r, to_tests_w = os.pipe()
            fds = [to_answer_r, to_answer_w, to_tests_r, to_tests_w, os.dup(report.fileno())]
            try:
                answer_side = program("answer_side", read_fd=to_answer_r, write_fd=to_tests_w, body=body)
                test_side = program(
                    "test_side",
                    to_answer=to_answer_w,
                    from_answer=to_tests_r,
                    report=fds[4],
                    source=tests,
                    entry_point=self.entry_point,
                )
            except BaseException:
                for fd in fds:
                    os.close(fd)
                raise
            answer, ran = run_pair(  # it closes every fd it is given
                answer_side,
                test_side,
                server_fds=[to_answer_r, to_tests_w],
                client_fds=[to_answer_w, to_tests_r, fds[4]],
                timeout_s=self.timeout_s,
                memory_mb=self.memory_mb,
            )
            report.seek(0)
            lines = report.read(_REPORT_BYTES).decode("utf-8", errors="replace").splitlines()
        return self.judge(answer, ran, lines, expected)

    def judge(self, answer: SandboxResult, ran: SandboxResult, lines: list[str], expected: int) -> Verdict:
        """The verdict from what the gateway observed (the tests' report is only believed for passes
        it counts itself; anything missing or unexpected is a failure)."""
        if answer.unavailable or ran.unavailable or answer.broken or ran.broken:
            # Nothing was run or judged (no sandbox here, or it broke): unknown, never a pass, nor
            # the answer's failure (a fail would label every student answer wrong while it lasts).
            return Verdict.errored(answer.stderr or ran.stderr)
        if ran.timed_out or answer.timed_out:
            return Verdict(False, f"timeout after {self.timeout_s:g}s")
        entries = []
        for line in lines:
            try:
                entries.append(json.loads(line))
            except ValueError:
                entries.append({"ok": False, "detail": f"an unreadable report line: {line[:100]!r}"})
        in_order = len(entries) == expected and all(
            type(entry) is dict
            and entry.get("ok") is True
            and type(entry.get("test")) is int
            and entry["test"] == n
            for n, entry in enumerate(entries)
        )
        if in_order and ran.returncode == 0 and answer.returncode is None:
            return Verdict(True, f"all {expected} tests passed")
        failed = next((e for e in entries if not (isinstance(e, dict) and e.get("ok") is True)), None)
        if isinstance(failed, dict):
            if failed.get("cause") == "answer" and answer.stderr.strip():
                return Verdict(False, _tail(answer.stderr))
            return Verdict(False, _tail(str(failed.get("detail") or "a test failed")))
        if answer.returncode is not None:
            why = f"the answer's process ended (exit status {answer.returncode}) before the tests finished"
            return Verdict(False, _tail(f"{answer.stderr}\n{why}"))
        if ran.returncode != 0:
            return Verdict(False, _tail(ran.stderr) or f"the tests' process exited with {ran.returncode}")
        return Verdict(False, f"the tests reported {len(entries)} results; {expected} tests were expected")
