from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from decimal import Decimal

import pytest
import uvicorn

from routing import lookups
from routing.models import Backend
from tests.factories import BackendFactory, KeyPair, make_key
from tests.support.openai_stub import OpenAIStub, Reply
from tests.support.vllm import free_port

# Prices the test backends charge (USD per token); the teacher is 10x the student.
TEACHER_PRICES = (Decimal("0.000010"), Decimal("0.000030"))
STUDENT_PRICES = (Decimal("0.000001"), Decimal("0.000003"))


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
def gateway_url() -> Iterator[str]:
    """The real ASGI app served by uvicorn on a free port, for real HTTP clients."""
    port = free_port()
    config = uvicorn.Config(
        "app.asgi:application", host="127.0.0.1", port=port, log_level="warning", lifespan="off"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)
