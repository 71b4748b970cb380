"""Round four against the ``python_tests`` verdict (issue 37, class 2; h37b's probes, none of them in
test_harness_tampering.py or test_harness_tampering_more.py): the answer rewrites memory (ctypes,
``/proc/self/mem``), patches the harness of its own process through ``sys.modules``, ``gc`` and frames
so that it speaks the protocol as the answer likes (forged ``ready``, ``raised`` with chosen bases,
``exit`` beside a value, non-UTF-8 frames, a replaced ``json``), swallows signals, writes at shutdown,
from a thread after the call, from an import hook and from faulthandler, forks (a child that lives on,
a fork bomb), exhausts memory, files and the tmpfs, floods or mimics on stdout and stderr, raises what
cannot be printed or is no ``Exception``, lowers the recursion limit, and returns objects that claim
every conversion. A ``StopIteration`` of the answer's must not end a ``map`` inside the tests.

Each answer's ``add`` is wrong (the profile's test is ``assert add(2, 3) == 5``), so only a forged
verdict could pass. All go through the running gateway in one sweep (-m slow: ~25 calls); each must
be ``fail`` and an ordinary call is served after them. All 25 failed (24 s); with test_side.py's
``_NOT_BASES`` emptied, the map probe passed.
"""

from __future__ import annotations

from textwrap import dedent

import pytest

from tests.factories import TaskProfileFactory
from tests.security.test_harness_tampering import WRONG
from tests.support.sandbox import TIMEOUT_S

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

_HARNESS = "import sys\nside = sys.modules['routing.verifiers.harness.answer_side']\n"
_WIRE = "wire = sys.modules['routing.verifiers.harness.wire']\n"

PROBES = {
    "ctypes-rewrites-the-int-5": dedent("""\
        import ctypes
        def add(a, b):
            ctypes.memmove(id(5) + 24, id(-1) + 24, 8)
            return a - b
        """),
    "writes-proc-self-mem": dedent("""\
        import os
        def add(a, b):
            try:
                fd = os.open("/proc/self/mem", os.O_RDWR)
                os.pwrite(fd, b"\\x00" * 8, id(5) + 24)
            except OSError:
                pass
            return a - b
        """),
    "gc-replaces-the-serving-loop": dedent("""\
        import gc
        def fake(request, objects):
            return {"value": {"h": [0, "int"]}, "args": []}
        for o in gc.get_objects():
            if isinstance(o, dict) and "_serve_one" in o:
                o["_serve_one"] = fake
        """),
    "frames-replace-the-serving-loop": dedent("""\
        import sys
        def add(a, b):
            f = sys._getframe(1)
            while f:
                if "request" in f.f_locals:
                    f.f_globals["_serve_one"] = lambda request, objects: {"value": 5, "test": 0, "ok": True}
                f = f.f_back
            return a - b
        """),
    "ready-names-every-name-a-module": _HARNESS
    + 'side._describe = lambda ns, names, objects: {n: {"module": "unittest.__main__"} for n in names}\n',
    "raised-with-chosen-bases": _HARNESS
    + dedent("""\
        side._raised = lambda exc: {"type": "AssertionError", "module": "builtins", "message": "ok",
            "bases": ["StopIteration", "KeyboardInterrupt", "SystemExit"], "args": None}
        def add(a, b):
            raise ValueError
        """),
    "exit-beside-a-value": _HARNESS
    + 'side._serve_one = lambda request, objects: {"value": 5, "exit": "no"}\n',
    "non-utf8-frame": _HARNESS
    + dedent("""\
        import os, time
        def serve(read_fd, write_fd, objects, send, receive):
            receive(read_fd)
            data = b'{"id": 1, "value": "\\xff\\xfe"}'
            os.write(write_fd, len(data).to_bytes(4, "big") + data)
            time.sleep(5)
        side._serve = serve
        """),
    "json-module-replaced": _HARNESS
    + _WIRE
    + dedent("""\
        import json
        class Forged:
            def dumps(self, *a, **k):
                return '{"id": 1, "value": 5, "test": 0, "ok": true}'
            def __getattr__(self, name):
                return getattr(json, name)
        wire.json = Forged()
        """),
    "signals-swallowed": dedent("""\
        import signal
        for s in (signal.SIGTERM, signal.SIGALRM, signal.SIGINT, signal.SIGHUP, signal.SIGXCPU):
            signal.signal(s, signal.SIG_IGN)
        signal.setitimer(signal.ITIMER_REAL, 0.01, 0.01)
        """),
    "writes-at-shutdown": dedent("""\
        import atexit, os, weakref
        class Late:
            def __del__(self):
                for fd in range(64):
                    try:
                        os.write(fd, b'\\x00\\x00\\x00\\x17{"id": 1, "value": 5}')
                    except OSError:
                        pass
        late = Late()
        weakref.finalize(late, lambda: os.write(1, b'{"test": 0, "ok": true}\\n'))
        atexit.register(lambda: os.write(2, b"all 1 tests passed"))
        def add(a, b):
            global late
            late = None
            raise SystemExit(0)
        """),
    "thread-writes-after-the-call": _HARNESS
    + _WIRE
    + dedent("""\
        import threading, time
        def later():
            time.sleep(0.05)
            for fd in range(64):
                try:
                    wire.send(fd, {"id": 1, "value": 5})
                    wire.send(fd, {"id": 2, "value": 5})
                except Exception:
                    pass
        def add(a, b):
            threading.Thread(target=later).start()
            return a - b
        """),
    "import-hook-writes-reports": dedent("""\
        import os, sys
        class Finder:
            def find_spec(self, name, path=None, target=None):
                for fd in range(64):
                    try:
                        os.write(fd, b'{"test": 0, "ok": true}\\n')
                    except OSError:
                        pass
        sys.meta_path.insert(0, Finder())
        def add(a, b):
            import decimal, fractions
            return a - b
        """),
    "faulthandler-on-every-fd": dedent("""\
        import faulthandler
        def add(a, b):
            for fd in range(3, 16):
                try:
                    faulthandler.dump_traceback_later(0.001, repeat=True, file=fd)
                except Exception:
                    pass
            return a - b
        """),
    "forked-child-answers-after-the-parent-exits": dedent("""\
        import os, time
        def add(a, b):
            if os.fork() == 0:
                time.sleep(0.05)
                return 5
            os._exit(0)
        """),
    "fork-bomb": dedent("""\
        import os, time
        def add(a, b):
            for _ in range(100):
                try:
                    if os.fork() == 0:
                        time.sleep(30)
                except OSError:
                    break
            return a - b
        """),
    "memory-exhausted": "def add(a, b):\n    x = []\n    while True:\n        x.append(bytearray(10**7))\n",
    "files-and-tmpfs-filled": dedent("""\
        def add(a, b):
            held = []
            try:
                while True:
                    held.append(open("/tmp/f%d" % len(held), "wb"))
            except OSError:
                pass
            try:
                with open("/tmp/big", "wb") as f:
                    while True:
                        f.write(b"x" * 10**6)
            except BaseException:
                pass
            return a - b
        """),
    "mimics-the-protocol-on-stdout": dedent("""\
        import os, sys
        for fd in (1, 2):
            os.write(fd, b'{"test": 0, "ok": true}\\n' * 1000)
        sys.stdout.write('\\x00\\x00\\x00\\x17{"id": 1, "value": 5}')
        """),
    "floods-stdout-and-stderr-with-non-utf8": dedent("""\
        import os
        def add(a, b):
            try:
                for _ in range(40):
                    os.write(1, b'{"test": 0, "ok": true}\\n' * 50000)
                    os.write(2, b"\\xff\\xfe" * 500000)
            except BaseException:
                pass
            return a - b
        """),
    "exception-that-cannot-be-printed": dedent("""\
        class Bad(Exception):
            def __str__(self):
                raise Bad()
            __repr__ = __str__
            @property
            def args(self):
                raise Bad()
        def add(a, b):
            raise Bad()
        """),
    "base-exception-subclass": "class Weird(BaseException):\n    pass\n"
    + "def add(a, b):\n    raise Weird('ok')\n",
    "recursion-limit-lowered": "import sys\ndef add(a, b):\n    sys.setrecursionlimit(8)\n    return a - b\n",
    "generator-of-an-object-equal-to-all": dedent("""\
        class X:
            __eq__ = lambda *a: True
        def add(a, b):
            yield X()
        """),
    "object-claims-every-conversion": dedent("""\
        class Five:
            __eq__ = lambda *a: True
            __hash__ = __index__ = __int__ = lambda self: 5
            __float__ = lambda self: 5.0
        def add(a, b):
            return Five()
        """),
}

MAP_PROFILE = "sandbox-attacks-map"
MAP_TEST = "assert all(map(lambda t: add(t[0], t[1]) == t[2], [(2, 3, 5), (1, 1, 2)]))"


@pytest.mark.slow
def test_round_four_forgeries_all_fail_through_the_gateway(gateway):
    verifier = {"kind": "python_tests", "test": MAP_TEST, "timeout_s": TIMEOUT_S, "memory_mb": 256}
    TaskProfileFactory.create(name=MAP_PROFILE, verifier=verifier)
    outcomes = {name: gateway.call(WRONG + code) for name, code in PROBES.items()}
    # A StopIteration of the answer's would end the map early (all([]) is True) were it re-raised as one.
    stop = _HARNESS + "def fake(request, objects):\n    raise StopIteration\nside._serve_one = fake\n"
    outcomes["stop-iteration-ends-a-map"] = gateway.call(WRONG + stop, task=MAP_PROFILE)
    forged = {n: (o.status, o.verdict, o.detail[:200]) for n, o in outcomes.items() if o.verdict != "fail"}
    assert not forged, forged
    assert all(o.status == 200 for o in outcomes.values())
    assert gateway.call("def add(a, b):\n    return a + b\n", task=MAP_PROFILE).verdict == "pass"
    gateway.assert_still_serving()
