"""The tests' process (T): runs the test code with the answer's names bound to proxies.

Runs inside a sandbox of its own; standard library only. The answer's process (answer_side.py) is
another process in another sandbox: it reaches this one only through one pipe, by frames of data
(wire.py). A proxy's call sends the call there and gets back a value, a handle on an object that
stays there, an exception (re-raised here as a class of the same name, under the builtin exception
it derives from, so ``except ValueError`` still works) or the news that the answer is gone.

Each top-level statement of the test program is one test, run in order; the result of each goes to
the report fd, which only the gateway reads (the answer's process has no such fd). A statement
during which the answer's process ended, exited (``SystemExit`` and its kind) or spoke out of
protocol fails, whatever the test code caught. The first failure ends the run.
"""

import ast
import builtins
import importlib
import json
import linecache
import os
import sys
import traceback

from routing.verifiers.harness import wire

_DETAIL_CHARS = 2000
# A StopIteration re-raised here would end a loop of the tests silently (``for x in map(f, xs)``).
_NOT_BASES = (StopIteration, StopAsyncIteration)
# Modules the answer's names may stand for: the standard library, but those run something on import.
_MODULES = frozenset(sys.stdlib_module_names) - {"antigravity", "this", "__hello__", "__phello__", "idlelib"}


class AnswerGone(BaseException):
    """The answer's process ended, exited or broke the protocol: no later call can be answered."""


class _Remote(wire.Handle):
    __slots__ = ()

    def __call__(self, *args, **kwargs):
        return _channel.request("call", self, args=args, kwargs=kwargs)

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _channel.request("get", self, name=name)

    def __setattr__(self, name, value):
        _channel.request("set", self, name=name, value=value)


class _Channel:
    def __init__(self, to_answer, from_answer):
        self.to_answer, self.from_answer = to_answer, from_answer
        self.gone, self.count, self.remotes, self.classes = "", 0, {}, {}

    def remote(self, ident, type_name):
        if ident not in self.remotes:
            self.remotes[ident] = _Remote(ident, type_name)
        return self.remotes[ident]

    @staticmethod
    def _handle(value):
        if isinstance(value, _Remote):
            return value._sg_id
        raise wire.NotData(f"a {type(value).__name__} object cannot be passed to the answer (only data)")

    def exchange(self, message):
        if self.gone:
            raise AnswerGone(self.gone)
        try:
            wire.send(self.to_answer, message)
            return wire.receive(self.from_answer)
        except (OSError, EOFError):
            self.gone = "the answer's process ended during a call"
        except wire.WireError as exc:
            self.gone = f"the answer's process broke the protocol: {exc}"
        raise AnswerGone(self.gone)

    def request(self, op, target, args=(), kwargs=None, name="", value=None):
        self.count += 1
        message = {"op": op, "id": self.count, "target": target._sg_id, "name": name}
        try:
            if op == "call":
                message["args"] = [wire.encode(a, self._handle) for a in args]
                message["kwargs"] = wire.encode(dict(kwargs or {}), self._handle)
            elif op == "set":
                message["value"] = wire.encode(value, self._handle)
        except wire.NotData as exc:
            raise TypeError(str(exc)) from None
        reply = self.exchange(message)
        if reply.get("id") != self.count:
            self.gone = "the answer's process answered out of turn"
            raise AnswerGone(self.gone)
        if "exit" in reply:
            self.gone = f"the answer's process exited during a call ({str(reply['exit'])[:_DETAIL_CHARS]})"
            raise AnswerGone(self.gone)
        if "raised" in reply:
            raise self.exception(reply["raised"])
        try:
            result = wire.decode(reply.get("value"), self.remote)
            back = reply.get("args")
            if op == "call" and isinstance(back, list) and len(back) == len(args):
                for mine, theirs in zip(args, back, strict=True):
                    _write_back(mine, theirs, self.remote)
        except wire.WireError as exc:
            self.gone = f"the answer's process broke the protocol: {exc}"
            raise AnswerGone(self.gone) from None
        return result

    def exception(self, raised):
        if not isinstance(raised, dict):
            raised = {}
        name, module = str(raised.get("type") or "Exception")[:100], str(raised.get("module") or "")[:100]
        base = Exception
        for candidate in raised.get("bases") or []:
            found = getattr(builtins, str(candidate), None)
            if isinstance(found, type) and issubclass(found, Exception) and found not in _NOT_BASES:
                base = found
                break
        key = (module, name, base)
        if key not in self.classes:
            self.classes[key] = type(name, (base,), {"__module__": module})
        message = str(raised.get("message") or "")[:_DETAIL_CHARS]
        try:
            args = wire.decode(raised.get("args"))
            return self.classes[key](*(args if isinstance(args, tuple) else (message,)))
        except Exception:
            return Exception(f"{name}: {message}")


def _write_back(mine, theirs, remote):
    """The answer's function may change a list, dict or set it was given: the tests see the change."""
    if theirs is None:
        return
    value = wire.decode(theirs, remote)
    if type(mine) is type(value) is list or type(mine) is type(value) is bytearray:
        mine[:] = value
    elif type(mine) is type(value) is dict or type(mine) is type(value) is set:
        mine.clear()
        mine.update(value)


_channel = _Channel(-1, -1)


def referenced_names(tree):
    return sorted({node.id for node in ast.walk(tree) if isinstance(node, ast.Name)})


def _failure(exc):
    try:
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == "<test>"]
        lines = traceback.format_list(frames) + traceback.format_exception_only(type(exc), exc)
        return "Traceback (most recent call last):\n" + "".join(lines)
    except Exception:  # an exception whose message cannot be written still fails its test
        return f"{type(exc).__name__} (its message could not be written)"


def program_text(test, entry_point, call_check):
    """The test program: the test code, then ``check(<entry_point>)`` when asked (one more test)."""
    return f"{test}\n\ncheck({entry_point})\n" if call_check else test


def count_tests(source):
    """How many tests ``source`` holds: its top-level statements."""
    return len(ast.parse(source, "<test>").body)


def main(to_answer, from_answer, report, source, entry_point):
    global _channel
    linecache.cache["<test>"] = (len(source), None, source.splitlines(True), "<test>")
    tree = ast.parse(source, "<test>")

    def emit(entry):
        os.write(report, (json.dumps(entry) + "\n").encode())

    _channel = channel = _Channel(to_answer, from_answer)
    # A builtin name is the answer's only when it is the entry point (a test may call its sum()).
    wanted = [n for n in referenced_names(tree) if not hasattr(builtins, n) or n == entry_point]
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    try:
        ready = channel.exchange({"names": wanted})
        if "ready" not in ready:
            channel.gone = f"the answer did not load: {str(ready.get('failed'))[:_DETAIL_CHARS]}"
        for name, what in dict(ready.get("ready") or {}).items():
            if name not in wanted:
                continue
            if "module" in what:  # the tests' own import of the same standard module
                module = str(what["module"])
                if module.partition(".")[0] in _MODULES:
                    try:
                        namespace[name] = importlib.import_module(module)
                    except ImportError:
                        continue
            else:
                namespace[name] = wire.decode(what.get("value"), channel.remote)
    except AnswerGone:
        pass
    except (wire.WireError, AttributeError, TypeError) as exc:
        channel.gone = f"the answer's process broke the protocol: {type(exc).__name__}"
    for index, statement in enumerate(tree.body):
        if channel.gone:
            emit({"test": index, "ok": False, "cause": "answer", "detail": channel.gone})
            break
        try:
            exec(compile(ast.Module([statement], []), "<test>", "exec"), namespace)
        except BaseException as exc:
            cause = "answer" if channel.gone else "test"
            emit({"test": index, "ok": False, "cause": cause, "detail": _failure(exc)[-_DETAIL_CHARS:]})
            break
        if channel.gone:
            emit({"test": index, "ok": False, "cause": "answer", "detail": channel.gone})
            break
        emit({"test": index, "ok": True})
    sys.stdout.flush()
    sys.stderr.flush()
