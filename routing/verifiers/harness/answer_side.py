"""The answer's process (A): loads the answer's code, then serves the tests' calls over a pipe.

Runs inside its own sandbox; standard library only. Everything here is the answer's to tamper with:
whatever it does, all that leaves this process is frames of data (routing/verifiers/harness/wire.py)
on one pipe to the tests' process, which decides nothing from them but the values the tests compare.
The verdict is the gateway's (routing/verifiers/python_tests.py).

Messages from the tests: ``{"names": [...]}`` once, then ``{"op": "call"|"get"|"set", "id": n,
"target": handle id, ...}``. Replies: ``{"ready": {name: {"module": name} | {"value": data}}}``
(or ``{"failed": why}``), then per op ``{"id": n, "value": data, "args": [...]}``,
``{"id": n, "raised": {...}}`` or ``{"id": n, "exit": why}``.
"""

import builtins
import linecache
import os
import sys
import time
import traceback
import types

from routing.verifiers.harness import wire

_MESSAGE_CHARS = 2000
_MUTABLE = (list, dict, set, bytearray)


class _Objects:
    """The answer's objects the tests hold handles on (kept alive, so an id is never reused)."""

    def __init__(self):
        self.by_id, self.ids = {}, {}

    def handle(self, obj):
        key = id(obj)
        if key not in self.ids:
            self.ids[key] = len(self.by_id)
            self.by_id[self.ids[key]] = obj
        return self.ids[key]

    def resolve(self, ident, _type_name):
        try:
            return self.by_id[ident]
        except KeyError:
            raise wire.WireError(f"no object {ident}") from None


def _text(exc):
    try:
        return str(exc)[:_MESSAGE_CHARS]
    except BaseException:
        return f"<the {type(exc).__name__}'s message could not be read>"


def _raised(exc):
    bases = [c.__name__ for c in type(exc).__mro__ if getattr(builtins, c.__name__, None) is c]
    try:
        args = wire.encode(exc.args)
    except BaseException:
        args = None
    module = getattr(type(exc), "__module__", "") or ""
    return {"type": type(exc).__name__, "module": module, "bases": bases, "message": _text(exc), "args": args}


def _written_back(args, objects):
    out = []
    for arg in args:
        try:
            out.append(wire.encode(arg, objects.handle) if isinstance(arg, _MUTABLE) else None)
        except BaseException:
            out.append(None)  # it holds what does not cross: the tests keep their own value
    return out


def _serve_one(request, objects):
    op, target = request.get("op"), objects.resolve(request.get("target"), "")
    if op == "get":
        return {"value": wire.encode(getattr(target, str(request.get("name"))), objects.handle)}
    if op == "set":
        setattr(target, str(request.get("name")), wire.decode(request.get("value"), objects.resolve))
        return {"value": None}
    if op != "call":
        raise wire.WireError(f"unknown op {op!r}")
    args = wire.decode(request.get("args"), objects.resolve)
    kwargs = dict(wire.decode(request.get("kwargs"), objects.resolve))
    result = target(*args, **kwargs)
    return {"value": wire.encode(result, objects.handle), "args": _written_back(args, objects)}


def _serve(read_fd, write_fd, objects, send, receive):
    while True:
        try:
            request = receive(read_fd)
        except EOFError:
            return
        ident = request.get("id")
        try:
            reply = _serve_one(request, objects)
        except Exception as exc:
            reply = {"raised": _raised(exc)}
        except BaseException as exc:  # SystemExit, KeyboardInterrupt, GeneratorExit: the answer is over
            send(write_fd, {"id": ident, "exit": f"{type(exc).__name__}: {_text(exc)}"})
            os._exit(1)
        send(write_fd, {"id": ident, **reply})


def _describe(namespace, names, objects):
    ready = {}
    for name in names:
        if not isinstance(name, str) or name not in namespace:
            continue
        value = namespace[name]
        if isinstance(value, types.ModuleType):
            ready[name] = {"module": value.__name__}
            continue
        try:
            ready[name] = {"value": wire.encode(value, objects.handle)}
        except Exception:  # too deep, an endless iterator...: the tests do not get this name
            continue
    return ready


def main(read_fd, write_fd, body):
    send, receive, exit_now = wire.send, wire.receive, os._exit  # before the answer can replace them
    linecache.cache["<answer>"] = (len(body), None, body.splitlines(True), "<answer>")  # tracebacks
    namespace = {"__name__": "solution", "__builtins__": builtins}
    try:
        exec(compile(body, "<answer>", "exec"), namespace)
    except SystemExit as exc:  # leaving before the tests ran is not passing them
        why = f"the program exited before the tests finished (SystemExit: {exc.code})"
        sys.stderr.write(why + "\n")
        sys.stderr.flush()
        send(write_fd, {"failed": why})
        exit_now(1)
    except BaseException as exc:
        traceback.print_exc()
        sys.stderr.flush()
        send(write_fd, {"failed": f"{type(exc).__name__}: {_text(exc)}"})
        exit_now(1)
    sys.stdout.flush()
    objects = _Objects()
    try:
        request = receive(read_fd)
        send(write_fd, {"ready": _describe(namespace, request.get("names") or [], objects)})
        _serve(read_fd, write_fd, objects, send, receive)
    except EOFError:
        pass
    while True:  # the tests are over: stay until the gateway, which judges that this process lived, ends it
        time.sleep(3600)
