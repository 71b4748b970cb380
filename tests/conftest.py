"""Fixtures shared across the test folders: the stub upstream and the test backends, API keys, the
real server on a free port, the session's shared vLLM server, the fake environment's write log, and the
Slack bot's stand-ins. Plain helpers live in tests/support/, factories in tests/factories/."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from django.conf import settings
from django.db import connection

from app import serve
from bench.support.openai_stub import OpenAIStub, Reply
from bench.support.vllm import VllmServer
from core import conf
from diagnostics.models import Step
from routing.access import lookups
from routing.ledger import writer as ledger_writer
from routing.models import Backend
from tests.factories import BackendFactory, KeyPair, make_key
from tests.support.fake_environment import FakeWrite
from tests.support.gateway import STUDENT_PRICES, TEACHER_PRICES
from tests.support.slack_bot import SECRET, TOKEN, Queue, SlackClient
from tests.support.slack_stub import SlackStub
from tests.support.vllm_shared import SharedVllm, unload_added
from tests.support.wait import wait_until

# A server groups ledger rows behind its journal (LEDGER_WRITER "batched", the default); most tests read a
# call's row right after its response, so the suite, and the servers and workers it starts, commit each row
# first ("sync"), set here, before any test module copies the settings. The batched writer's own tests ask
# for it.
if "SKILLGATE_LEDGER_WRITER" not in os.environ:
    os.environ["SKILLGATE_LEDGER_WRITER"] = "sync"
    settings.SKILLGATE = {**settings.SKILLGATE, "LEDGER_WRITER": "sync"}
    conf.forget()  # a plain assignment sends no setting_changed: the typed settings are built again


@pytest.hookimpl(optionalhook=True, tryfirst=True)  # before xdist's own schedulers
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup``: the slow suite's work units (tests/support/xdist_groups.py)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from tests.support.xdist_groups import GroupScheduling

    return GroupScheduling(config, log)


@pytest.fixture(autouse=True)
def _fresh_lookups() -> None:
    """Each test starts with the gateway's per-process lookup cache empty (its rows are gone)."""
    lookups.forget_all()


@pytest.fixture(scope="session")
def upstream_stub() -> Iterator[OpenAIStub]:
    with OpenAIStub() as stub:
        yield stub


@pytest.fixture
def stub(upstream_stub: OpenAIStub) -> Iterator[OpenAIStub]:
    """The shared stub upstream, reset for this test: answers 'ok' until told otherwise."""
    upstream_stub.responder = lambda body: Reply()
    upstream_stub.requests.clear()
    yield upstream_stub


@pytest.fixture
def backends(stub: OpenAIStub, transactional_db: None) -> dict[str, Backend]:
    """A teacher and a student backend, both served by the stub and told apart by model name."""
    teacher = BackendFactory.create(
        name="teacher",
        role=Backend.Role.TEACHER,
        model="openai/teacher-model",
        api_base=stub.base_url,
        input_cost_per_token=TEACHER_PRICES[0],
        output_cost_per_token=TEACHER_PRICES[1],
    )
    student = BackendFactory.create(
        name="student",
        role=Backend.Role.STUDENT,
        model="openai/student-model",
        api_base=stub.base_url,
        input_cost_per_token=STUDENT_PRICES[0],
        output_cost_per_token=STUDENT_PRICES[1],
    )
    return {"teacher": teacher, "student": student}


@pytest.fixture
def api_key(transactional_db: None) -> KeyPair:
    """An ordinary key, as ``create_api_key`` makes it: the ``llm`` scope alone."""
    return make_key(name="test")


@pytest.fixture
def trusted_key(transactional_db: None) -> KeyPair:
    """The operator's own tooling (the diagnosis agents, a benchmark): it may send per-call verifiers
    where a profile allows them, and their verdicts may become training data."""
    return make_key(name="trusted", scopes=["llm", "verifiers:call"], trusted_for_training=True)


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    """pytest-django's test databases, and before they are dropped at the session's end, the
    connections still open to them closed: the ledger writer is stopped (its thread reconnects for
    as long as it runs), then, on PostgreSQL, the connections that threads of an in-process server
    kept are ended. A database still in use cannot be dropped: it was left behind, with a warning."""
    yield
    with django_db_blocker.unblock():
        ledger_writer.shutdown(timeout=10)
        if connection.vendor == "postgresql" and str(connection.settings_dict["NAME"]).startswith("test_"):
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )


@pytest.fixture(scope="session")
def gateway_url() -> Iterator[str]:
    """The real ASGI app served the production way: app/serve.py's server (uvicorn with its protocol: the
    header deadline and bound, no forwarded-header trust) on its own SO_REUSEPORT socket, bound to a port
    the kernel picks. It runs in a thread of the test process, so it sees the tests' settings and
    database; no lifespan (the ledger writer starts on first use, and the session's end stops it)."""
    sock = serve.listening_socket("127.0.0.1", 0, backlog=2048)
    port = sock.getsockname()[1]
    server = uvicorn.Server(serve.config(log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_until(
        lambda: server.started,
        timeout=30,
        what="the server (app/serve.py) to start",
        abort=lambda: None if thread.is_alive() else "the server exited",
    )
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)
    sock.close()


@pytest.fixture(scope="session")
def vllm_shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedVllm]:
    """The session's one real vLLM server (tests/support/vllm_shared.py), started on first use."""
    shared = SharedVllm(tmp_path_factory.mktemp("vllm-shared"))
    yield shared
    shared.stop()


@pytest.fixture(scope="module")
def vllm_server(vllm_shared: SharedVllm) -> Iterator[VllmServer]:
    """The shared vLLM server for one test module (litellm offline); the adapters the module loads are
    unloaded when it ends."""
    server = vllm_shared.get()
    at_start = set(server.models())
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LITELLM_OFFLINE_MODE", "true")
        yield server
    unload_added(server, at_start)


@pytest.fixture
def enqueued(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """The diagnosis and execution messages the services would send to Celery on commit, recorded
    instead (the test runs the tasks itself, or not at all)."""
    sent: list[tuple[str, int]] = []
    monkeypatch.setattr("diagnostics.tasks.enqueue_diagnosis", lambda pk: sent.append(("diagnosis", pk)))
    monkeypatch.setattr("diagnostics.tasks.enqueue_execution", lambda pk: sent.append(("execution", pk)))
    return sent


@pytest.fixture
def write_log() -> list[tuple[str, dict[str, Any]]]:
    """What the fake environment's write toolset ran during the test (nothing yet)."""
    FakeWrite.runs.clear()
    return FakeWrite.runs


# --- the Slack bot (tests/support/slack_bot.py): tests/slack and tests/security ---------------------


@pytest.fixture(scope="session")
def slack_stub() -> Iterator[SlackStub]:
    with SlackStub() as stub:
        yield stub


@pytest.fixture
def slack(slack_stub: SlackStub) -> SlackStub:
    slack_stub.reset()
    return slack_stub


@pytest.fixture
def bot(settings: Any, slack: SlackStub, transactional_db: None) -> SlackStub:
    """The bot on, talking to the stub; Slack incidents are diagnosed on the fake environment."""
    settings.SLACK_BOT_TOKEN = TOKEN
    settings.SLACK_SIGNING_SECRET = SECRET
    settings.SLACK_API_URL = slack.base_url
    settings.DIAGNOSTICS_DEFAULT_ENVIRONMENT = "fake"
    return slack


@pytest.fixture
def queue(monkeypatch: pytest.MonkeyPatch) -> Queue:
    queue = Queue()

    def sync(pk: int) -> None:
        queue.steps_at_sync.append(Step.objects.filter(trajectory_id=pk).count())
        queue.sent.append(("sync", pk))

    monkeypatch.setattr("diagnostics.slack.tasks.enqueue_sync", sync)
    for target, name in [
        ("diagnostics.tasks.enqueue_diagnosis", "diagnosis"),
        ("diagnostics.tasks.enqueue_execution", "execution"),
        ("diagnostics.slack.tasks.enqueue_event", "event"),
    ]:
        monkeypatch.setattr(target, lambda pk, name=name: queue.sent.append((name, pk)))
    return queue


@pytest.fixture
def slack_client(gateway_url: str) -> SlackClient:
    # The first request of a fresh server imports the URLconf (the gateway pulls in scikit-learn:
    # seconds on a busy machine); a deployed server has done that before Slack's first call.
    httpx.get(gateway_url + "/healthz", timeout=60)
    return SlackClient(gateway_url)
