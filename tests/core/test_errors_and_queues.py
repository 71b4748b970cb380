"""core: the one service error every edge translates, and enqueueing on commit."""

from __future__ import annotations

from typing import Any

import pytest

from core.errors import ServiceError
from core.queues import enqueue, on_commit, queue_options
from routing.router.versions.services import RouterTrainingError, RouterVersionError
from routing.services import UnknownScopeError
from routing.verifiers.policy import VerifierPolicyError
from training.deploy import DeployError
from training.services.adapters import TrainingError
from training.services.evolver import EvolverError


class FakeTask:
    def __init__(self) -> None:
        self.sent: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def apply_async(self, args: tuple[Any, ...], **options: Any) -> None:
        self.sent.append((args, options))


def test_a_service_error_carries_message_code_and_status() -> None:
    error = ServiceError("No such thing.", code="not_found", status=404)
    assert (str(error), error.message, error.code, error.status) == (
        "No such thing.",
        "No such thing.",
        "not_found",
        404,
    )
    assert (ServiceError("Bad.").code, ServiceError("Bad.").status) == ("invalid_request", 400)


@pytest.mark.parametrize(
    "error",
    [
        EvolverError,
        VerifierPolicyError,
        RouterTrainingError,
        RouterVersionError,
        DeployError,
        TrainingError,
        UnknownScopeError,
    ],
)
def test_the_services_refuse_with_the_one_error_type(error: type[Exception]) -> None:
    assert issubclass(error, ServiceError)
    raised = error("refused")
    assert isinstance(raised, ServiceError) and raised.message == "refused"


def test_domain_errors_keep_their_builtin_bases() -> None:
    assert issubclass(RouterVersionError, ValueError) and issubclass(TrainingError, ValueError)
    assert issubclass(DeployError, RuntimeError) and issubclass(UnknownScopeError, ValueError)
    assert (RouterVersionError("x").status, DeployError("x").code) == (409, "deploy_failed")


def test_an_empty_queue_name_leaves_the_route_to_celery() -> None:
    assert queue_options("") == {}
    assert queue_options("gpu") == {"queue": "gpu"}
    task = FakeTask()
    enqueue(task, 1, "two")  # type: ignore[arg-type]
    enqueue(task, 3, queue="other")  # type: ignore[arg-type]
    assert task.sent == [((1, "two"), {}), ((3,), {"queue": "other"})]


@pytest.mark.django_db
def test_on_commit_calls_back_only_once_the_transaction_commits(
    django_capture_on_commit_callbacks: Any,
) -> None:
    called: list[int] = []
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        on_commit(called.append, 8)
        assert called == []
    assert len(callbacks) == 1
    assert called == [8]
