"""The answer tampers with its own test harness: every way an answer can try to be served as ``pass``
without its tests running fails. The profile's test is ``assert add(2, 3) == 5`` and each answer's
``add`` is WRONG, so only a forged verdict could pass; each attack goes through the running gateway
(``gateway`` fixture: tests/security/conftest.py), and an ordinary call is served after it.

The answer runs in a process of its own and the tests in another (routing/verifiers/harness/): the
attacks below replace what the harness of the answer's process uses, exit, signal, walk frames, write
to every fd and return objects that claim to equal anything; the verdict is the gateway's, from the
tests' report, exit status and the answer process's life.
"""

from __future__ import annotations

from textwrap import dedent

import pytest

from tests.factories import TaskProfileFactory
from tests.support.liveness import models_keep_answering
from tests.support.sandbox import GOOD, TIMEOUT_S
from tests.support.wall import bound

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

WRONG = "def add(a, b):\n    return a - b\n\n"

EXIT = "import os, sys\nsys.stdout.flush()\nos._exit(0)\n"
FORGERIES = {
    # What the program can read: its own text, command line, arguments, environment and files.
    "reads-own-source": "print(open(__file__).read())\n" + EXIT,
    "reads-cmdline-and-argv": "import sys\nprint(open('/proc/self/cmdline').read(), sys.argv)\n" + EXIT,
    "reads-every-fd": dedent("""\
        import os
        for fd in range(0, 64):
            try:
                print(os.read(fd, 4096).decode(errors="replace"))
            except OSError:
                pass
        for name in os.listdir("/proc/self/fd"):
            try:
                print(open("/proc/self/fd/" + name).read())
            except OSError:
                pass
        """)
    + EXIT,
    "reads-environment-and-tmp": dedent("""\
        import os
        print(os.environ)
        for root, _, files in os.walk("/tmp"):
            for f in files:
                print(open(os.path.join(root, f), errors="replace").read())
        """)
    + EXIT,
    # Leaving before the tests: every exit, at import time and from inside the tested function.
    "sys-exit-0": "import sys\nsys.exit(0)\n",
    "os-exit-0": "import os\nos._exit(0)\n",
    "exit-from-tested-function": "def add(a, b):\n    raise SystemExit(0)\n",
    "kills-itself": "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n",
    "exits-at-shutdown": "import atexit, os\natexit.register(lambda: os._exit(0))\nraise SystemExit(0)\n",
    # Printing what a done-marker looks like.
    "prints-marker-like-lines": "print('skillgate-tests-done', 'all tests passed', 'OK', sep='\\n')\n" + EXIT,
    # Looking for the nonce in what the interpreter holds.
    "scans-gc": dedent("""\
        import gc
        for obj in gc.get_objects():
            if isinstance(obj, dict):
                for v in list(obj.values()):
                    if isinstance(v, (str, bytes)) and len(v) < 200:
                        print(v if isinstance(v, str) else v.decode(errors="replace"))
        """)
    + EXIT,
    # Replacing what a harness in the answer's process would use.
    "replaces-exits": "import os, sys\nos._exit = lambda *a: None\nsys.exit = lambda *a: None\n",
    "replaces-builtins": dedent("""\
        import builtins
        builtins.AssertionError = type("AssertionError", (Exception,), {})
        builtins.isinstance = lambda *a: True
        builtins.abs = builtins.len = lambda *a: 0
        builtins.print = lambda *a, **k: None
        """),
    # Walking the interpreter's frames and tracebacks from inside the tested function.
    "walks-frames": dedent("""\
        import os, sys
        def add(a, b):
            frame, found = sys._getframe(), []
            while frame is not None:
                found += [v for v in frame.f_locals.values() if isinstance(v, (int, str, bytes))]
                frame = frame.f_back
            for value in found:
                print(value)
            return a - b
        """),
    "walks-a-traceback": dedent("""\
        import sys
        def add(a, b):
            try:
                raise RuntimeError
            except RuntimeError as exc:
                tb = exc.__traceback__
                frame = tb.tb_frame
                while frame is not None:
                    print(frame.f_code.co_name, dict(frame.f_locals))
                    frame = frame.f_back
            return a - b
        """),
    # Writing what a report or a reply looks like to every fd, framed and unframed.
    "writes-every-fd": dedent("""\
        import os
        lines = b'{"test": 0, "ok": true}\\n{"ready": {}}\\n'
        framed = b'{"id": 1, "value": 5}'
        def add(a, b):
            for fd in range(0, 1024):
                for data in (lines, len(framed).to_bytes(4, "big") + framed):
                    try:
                        os.write(fd, data)
                    except OSError:
                        pass
            return a - b
        add(0, 0)
        """),
    # Objects that claim to equal anything.
    "forged-eq": dedent("""\
        class X:
            __eq__ = lambda *a: True
            __ne__ = lambda *a: False
            __bool__ = lambda self: True
            __hash__ = lambda self: 5
        def add(a, b):
            return X()
        """),
    "forged-eq-int-subclass": dedent("""\
        class Five(int):
            __eq__ = lambda *a: True
            __hash__ = int.__hash__
        def add(a, b):
            return Five(a - b)
        """),
    # Too much to send back.
    "huge-result": "def add(a, b):\n    return 'x' * (20 * 1024 * 1024)\n",
}


@pytest.mark.parametrize("code", FORGERIES.values(), ids=FORGERIES.keys())
def test_an_answer_cannot_forge_its_tests_passing(gateway, code):
    outcome = gateway.call(WRONG + code)
    assert outcome.status == 200
    assert outcome.verdict == "fail", f"forged: {outcome.detail}"
    gateway.assert_still_serving()


# Leaving, or being killed, from inside the tested function: the tests' process sees the call cut.
IN_THE_FUNCTION = {
    "SystemExit": "raise SystemExit(0)",
    "KeyboardInterrupt": "raise KeyboardInterrupt",
    "GeneratorExit": "raise GeneratorExit",
    "os-exit-0": "import os\n    os._exit(0)",
    "sigterm-self": "import os, signal\n    os.kill(os.getpid(), signal.SIGTERM)",
    "sigkill-self": "import os, signal\n    os.kill(os.getpid(), signal.SIGKILL)",
    "sigkill-parent": "import os, signal\n    os.kill(os.getppid(), signal.SIGKILL)\n    os._exit(0)",
    "kills-its-group": "import os, signal\n    os.killpg(0, signal.SIGKILL)",
}


@pytest.mark.parametrize("body", IN_THE_FUNCTION.values(), ids=IN_THE_FUNCTION.keys())
def test_leaving_during_the_tested_call_fails(gateway, body):
    outcome = gateway.call(f"def add(a, b):\n    {body}\n")
    assert outcome.status == 200
    assert outcome.verdict == "fail", f"forged: {outcome.detail}"
    assert "the answer's process" in outcome.detail, outcome.detail
    gateway.assert_still_serving()


def test_an_endless_tested_call_ends_at_the_deadline(gateway):
    outcome = gateway.call("def add(a, b):\n    while True:\n        pass\n")
    assert (outcome.verdict, outcome.detail) == ("fail", f"timeout after {TIMEOUT_S}s")
    gateway.assert_still_serving()


CHECK_PROFILE = "sandbox-attacks-check"
CHECK_TEST = dedent("""\
    def check(candidate):
        assert isinstance(candidate(2, 3), int)
        assert abs(candidate(2, 3) - 5) < 1e-9
        assert len([candidate(1, 1)]) == 1
        try:
            candidate("a", None)
        except TypeError as exc:
            assert "str" in str(exc)
        else:
            raise AssertionError("no TypeError")
    """)


@pytest.fixture
def check_profile(gateway):
    verifier = {"kind": "python_tests", "test": CHECK_TEST, "entry_point": "add", "timeout_s": TIMEOUT_S}
    TaskProfileFactory.create(name=CHECK_PROFILE, verifier={**verifier, "memory_mb": 256})
    return gateway


def test_a_right_answer_passes_a_check_with_builtins_and_an_expected_exception(check_profile):
    outcome = check_profile.call(GOOD, task=CHECK_PROFILE)
    assert (outcome.verdict, outcome.detail) == ("pass", "all 2 tests passed")
    raising = "def add(a, b):\n    raise TypeError('str and NoneType')\n"
    assert check_profile.call(raising, task=CHECK_PROFILE).verdict == "fail"


SHADOWS = {
    # The answer's own names for what the tests use: the tests keep their builtins and their check.
    "builtins-as-names": "isinstance = lambda *a: True\nabs = lambda *a: 0\nlen = lambda *a: 1\n",
    "patched-builtins": dedent("""\
        import builtins
        builtins.isinstance = lambda *a: True
        builtins.abs = lambda *a: 0
        builtins.len = lambda *a: 1
        """),
    "its-own-check": "def check(candidate):\n    pass\n",
}


@pytest.mark.parametrize("code", SHADOWS.values(), ids=SHADOWS.keys())
def test_the_answers_names_do_not_replace_the_tests_own(check_profile, code):
    outcome = check_profile.call(WRONG + code, task=CHECK_PROFILE)
    assert outcome.verdict == "fail", f"forged: {outcome.detail}"
    check_profile.assert_still_serving()


def test_the_same_wrong_answer_without_tampering_fails_and_a_right_one_passes(gateway):
    assert gateway.call(WRONG).verdict == "fail"
    gateway.assert_still_serving()  # GOOD: passes


def test_the_gateway_stays_live_while_an_answer_floods_its_pipe(gateway):
    # The answer's 20 MB result and the tests' decoding happen in their sandboxes, never in the server.
    flood = "def add(a, b):\n    return ['x' * 1024] * (15 * 1024)\n"
    with models_keep_answering(gateway.url, gateway.key) as probe:
        outcome = gateway.call(flood)
    assert outcome.verdict == "fail" and probe.slowest < bound(1.0)
