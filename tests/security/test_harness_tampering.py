"""The answer tampers with its own test harness: every way an answer can try to be served as ``pass``
without its tests running fails. The profile's test is ``assert add(2, 3) == 5`` and each answer's
``add`` is WRONG, so only a forged verdict could pass; each attack goes through the running gateway
(``gateway`` fixture: tests/security/conftest.py), and an ordinary call is served after it."""

from __future__ import annotations

from textwrap import dedent

import pytest

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
}


@pytest.mark.parametrize("code", FORGERIES.values(), ids=FORGERIES.keys())
def test_an_answer_cannot_forge_its_tests_passing(gateway, code):
    outcome = gateway.call(WRONG + code)
    assert outcome.status == 200
    assert outcome.verdict == "fail", f"forged: {outcome.detail}"
    gateway.assert_still_serving()


def test_the_same_wrong_answer_without_tampering_fails_and_a_right_one_passes(gateway):
    assert gateway.call(WRONG).verdict == "fail"
    gateway.assert_still_serving()  # GOOD: passes
