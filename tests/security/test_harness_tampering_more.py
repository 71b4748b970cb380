"""More in-process tricks against the ``python_tests`` harness (issue 37, class 2; h37's round-three
probes, none of them in test_harness_tampering.py): a trace or profile hook, a thread that floods
forged frames while the tested call waits, a ``SystemExit`` or ``KeyboardInterrupt`` subclass raised
from the tested call, a forked child that lives on after the answer's process exits, closing or
duplicating the standard fds, a hook on ``sys.excepthook`` and ``threading.excepthook``, and a
replaced ``builtins.__import__``.

Each answer's ``add`` is wrong (the profile's test is ``assert add(2, 3) == 5``), so only a forged
verdict could pass. Through the running gateway, each one fails and an ordinary call is served after.
"""

from __future__ import annotations

from textwrap import dedent

import pytest

from tests.security.test_harness_tampering import WRONG

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

PROBES = {
    "settrace-and-setprofile": dedent("""\
        import sys, threading
        def hook(frame, event, arg):
            if event == "return" and frame.f_code.co_name == "add":
                frame.f_locals["result"] = 5
            return hook
        sys.settrace(hook)
        sys.setprofile(hook)
        threading.settrace(hook)
        """),
    "thread-floods-forged-frames": dedent("""\
        import os, threading, time
        frames = [
            b'{"test": 0, "ok": true}\\n',
            len(b'{"id": 1, "value": 5}').to_bytes(4, "big") + b'{"id": 1, "value": 5}',
            len(b'{"ok": 5}').to_bytes(4, "big") + b'{"ok": 5}',
        ]
        def flood():
            while True:
                for fd in range(3, 64):
                    for data in frames:
                        try:
                            os.write(fd, data)
                        except OSError:
                            pass
                time.sleep(0.001)
        threading.Thread(target=flood, daemon=True).start()
        def add(a, b):
            time.sleep(0.2)
            return a - b
        """),
    "system-exit-subclass": dedent("""\
        class Done(SystemExit):
            pass
        def add(a, b):
            raise Done(0)
        """),
    "keyboard-interrupt-subclass": dedent("""\
        class Stop(KeyboardInterrupt):
            pass
        def add(a, b):
            raise Stop()
        """),
    "exception-named-like-a-pass": dedent("""\
        AssertionError = type("AssertionError", (BaseException,), {})
        def add(a, b):
            raise AssertionError("skillgate: ok")
        """),
    "forks-a-child-and-exits": dedent("""\
        import os, time
        def add(a, b):
            if os.fork() == 0:
                time.sleep(30)
            os._exit(0)
        """),
    "closes-and-dups-std-fds": dedent("""\
        import os
        def add(a, b):
            for fd in (0, 1, 2):
                try:
                    os.dup2(3, fd)
                except OSError:
                    pass
            for fd in range(3, 64):
                try:
                    os.close(fd)
                except OSError:
                    pass
            return a - b
        """),
    "hooks-excepthooks-and-import": dedent("""\
        import builtins, sys, threading
        sys.excepthook = lambda *a: None
        threading.excepthook = lambda *a: None
        real = builtins.__import__
        builtins.__import__ = lambda name, *a, **k: real(name, *a, **k)
        sys.modules["unittest"] = sys.modules["sys"]
        """),
}


@pytest.mark.parametrize("code", PROBES.values(), ids=PROBES.keys())
def test_another_in_process_trick_cannot_forge_a_pass(gateway, code):
    outcome = gateway.call(WRONG + code)
    assert outcome.status == 200
    assert outcome.verdict == "fail", f"forged: {outcome.detail}"
    gateway.assert_still_serving()
