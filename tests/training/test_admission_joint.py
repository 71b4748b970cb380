"""Joint admission: each part of a joint candidate judged alone, and the admitted parts applied all
together or not at all. Backends are the OpenAI stub behind the real gateway; the student server's
adapter loading is a small real HTTP server (the edge: vLLM's /v1/load_lora_adapter)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from routing.models import Backend
from tests.factories import AdapterFactory, AdmissionFactory, SkillBookFactory, TrainingRunFactory
from tests.support.cycle import CITIES, city_of, good, has_book, responder
from tests.training.test_admission import BAD, BOOK, cycle_settings, heldout_traffic
from training.deploy import DeployError
from training.models import Adapter, Admission, SkillBook, TrainingRun
from training.services.cycle import Configuration, admission_apply, admission_evaluate

pytestmark = pytest.mark.django_db(transaction=True)

LORA = "student-extract-v1"  # the stub tells students by "student" in the model name
HARD = {c for c, _ in CITIES[8:10]}  # the teacher is wrong on these two


def joint(profile, responder_):
    book = SkillBookFactory.create(profile=profile, version=1, text=BOOK)
    adapter = AdapterFactory.create(profile=profile, name=LORA)
    TrainingRunFactory.create(adapter=adapter, status=TrainingRun.Status.SUCCEEDED)
    active = Configuration(adapter="", skillbook_text="")
    candidate = Configuration(adapter=LORA, skillbook_text=BOOK)
    return admission_evaluate(
        profile_id=profile.pk,
        kind=Admission.Kind.JOINT,
        candidate=candidate,
        active=active,
        candidate_ids={"skillbook": book.pk, "adapter": adapter.pk},
        active_ids={"skillbook": None},
        parts={
            "adapter": Configuration(adapter=LORA, skillbook_text=""),
            "skillbook": Configuration(adapter="", skillbook_text=BOOK),
        },
    )


def teacher(body):
    city, country = city_of(body)
    return BAD if city in HARD else good(city, country)


@cycle_settings(HELDOUT_SHARDS=1, ADMISSION_MIN_ITEMS=10)
def test_a_joint_candidate_whose_skillbook_alone_is_worse_is_refused(gateway_url, backends, api_key, stub):
    """The adapter fixes the student only with the SkillBook in front; the SkillBook alone breaks the
    two items the teacher cannot rescue. Together they are better than the active student: the SkillBook
    would ride in on the adapter, and the adapter alone changes nothing, so nothing is admitted."""
    from tests.support.cycle import json_profile

    profile = json_profile()
    heldout_traffic(gateway_url, api_key.raw, stub)

    def student(body):
        city, country = city_of(body)
        if has_book(body):
            return good(city, country) if body["model"] == LORA else BAD
        return good(city, country) if city in HARD else BAD

    stub.responder = responder(student=student, teacher=teacher)

    admission = joint(profile, stub)

    assert (admission.mcnemar_b, admission.mcnemar_c) == (0, 0)  # the pair itself is not worse
    assert admission.candidate_metrics["fallback_rate"] == 0.0  # and it would save every fallback
    parts = admission.candidate_metrics["parts"]
    assert (parts["adapter"]["mcnemar_b"], parts["adapter"]["mcnemar_c"]) == (0, 0)
    assert parts["adapter"]["fallback_rate"] == 0.8  # the adapter alone: the active student's answers
    assert (parts["skillbook"]["mcnemar_b"], parts["skillbook"]["mcnemar_c"]) == (2, 0)
    assert parts["skillbook"]["pass_rate"] == 0.8
    assert admission.decision == Admission.Decision.REFUSED
    assert admission.reason.startswith("the skillbook alone is worse")


@cycle_settings(HELDOUT_SHARDS=1, ADMISSION_MIN_ITEMS=10)
def test_a_refused_joint_candidate_admits_its_better_part_alone(gateway_url, backends, api_key, stub):
    """The adapter alone fixes every item; the SkillBook alone breaks two. The joint candidate is refused
    (the SkillBook would ride in), and the adapter is admitted by itself: served, the SkillBook not."""
    from tests.support.cycle import json_profile

    profile = json_profile()
    heldout_traffic(gateway_url, api_key.raw, stub)

    def student(body):
        city, country = city_of(body)
        if body["model"] == LORA:
            return good(city, country)
        if has_book(body):
            return BAD
        return good(city, country) if city in HARD else BAD

    stub.responder = responder(student=student, teacher=teacher)

    admission = joint(profile, stub)

    assert admission.decision == Admission.Decision.ADMITTED, admission.reason
    assert admission.reason.startswith("the adapter alone is admitted: pass rate not worse")
    assert "the joint candidate was refused: the skillbook alone is worse" in admission.reason
    adapter = Adapter.objects.get(name=LORA)
    assert admission.candidate == {"adapter": adapter.pk}
    assert admission.candidate_metrics["admitted_part"] == "adapter"
    # The row's figures are the admitted adapter's (auto-rollback compares live correctness with them).
    assert (
        admission.candidate_metrics["fallback_rate"] == 0.0
        and admission.candidate_metrics["pass_rate"] == 1.0
    )
    assert (admission.mcnemar_b, admission.mcnemar_c) == (0, 0)
    assert admission.candidate_metrics["joint"]["pass_rate"] == 1.0  # kept beside: the pair passed too

    lora = _LoraServer(200)  # vLLM's adapter loading, from here on the student's server
    Backend.objects.filter(pk=backends["student"].pk).update(api_base=lora.base_url)
    try:
        admission_apply(admission=admission)
    finally:
        lora.stop()

    profile.refresh_from_db()
    adapter.refresh_from_db()
    assert (profile.student_adapter, profile.skillbook_text) == (LORA, "")
    assert adapter.status == Adapter.Status.ACTIVE
    assert SkillBook.objects.get(profile=profile, version=1).activated_at is None


@cycle_settings(HELDOUT_SHARDS=1, ADMISSION_MIN_ITEMS=10)
def test_a_joint_candidate_whose_parts_are_each_no_worse_is_admitted(gateway_url, backends, api_key, stub):
    from tests.support.cycle import json_profile

    profile = json_profile()
    heldout_traffic(gateway_url, api_key.raw, stub)

    def student(body):
        city, country = city_of(body)
        return good(city, country) if body["model"] == LORA or has_book(body) else BAD

    stub.responder = responder(student=student, teacher=lambda b: good(*city_of(b)))

    admission = joint(profile, stub)

    assert admission.decision == Admission.Decision.ADMITTED, admission.reason
    parts = admission.candidate_metrics["parts"]
    assert parts["adapter"]["fallback_rate"] == parts["skillbook"]["fallback_rate"] == 0.0
    assert (
        "the adapter alone not worse (b=0, c=0); the skillbook alone not worse (b=0, c=0)" in admission.reason
    )


class _LoraServer:
    """vLLM's adapter endpoints, answering ``status`` (200: loaded)."""

    def __init__(self, status: int) -> None:
        outer = self
        self.status = status
        self.loads: list[tuple[str, dict]] = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.loads.append((self.path, body))
                self.send_response(outer.status)
                self.end_headers()
                self.wfile.write(b"ok" if outer.status == 200 else b"refused")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def stop(self):
        self.server.shutdown()


@pytest.fixture
def lora_server(backends):
    server = _LoraServer(200)
    Backend.objects.filter(pk=backends["student"].pk).update(api_base=server.base_url)
    yield server
    server.stop()


def _joint_admission(profile):
    adapter = AdapterFactory.create(profile=profile, name=LORA)
    TrainingRunFactory.create(adapter=adapter, status=TrainingRun.Status.SUCCEEDED)
    book = SkillBookFactory.create(profile=profile, version=1, text=BOOK)
    admission = AdmissionFactory.create(
        profile=profile, kind=Admission.Kind.JOINT, candidate={"skillbook": book.pk, "adapter": adapter.pk}
    )
    return admission, adapter, book


def test_an_admitted_joint_candidate_applies_both_parts(backends, lora_server):
    from tests.support.cycle import json_profile

    profile = json_profile()
    admission, adapter, book = _joint_admission(profile)

    admission_apply(admission=admission)

    profile.refresh_from_db()
    adapter.refresh_from_db()
    assert (profile.student_adapter, profile.skillbook_text) == (LORA, BOOK)
    assert adapter.status == Adapter.Status.ACTIVE and SkillBook.objects.get(pk=book.pk).activated_at
    assert [path for path, _ in lora_server.loads] == ["/v1/load_lora_adapter"]


def test_a_joint_candidate_whose_adapter_cannot_load_applies_neither_part(backends, lora_server):
    from tests.support.cycle import json_profile

    lora_server.status = 500
    profile = json_profile()
    admission, adapter, book = _joint_admission(profile)

    with pytest.raises(DeployError):
        admission_apply(admission=admission)

    profile.refresh_from_db()
    adapter.refresh_from_db()
    assert (profile.student_adapter, profile.skillbook_text) == ("", "")
    assert (
        adapter.status == Adapter.Status.CANDIDATE and SkillBook.objects.get(pk=book.pk).activated_at is None
    )


def test_a_joint_candidate_whose_skillbook_fails_to_apply_leaves_the_adapter_unserved(backends, lora_server):
    from tests.support.cycle import json_profile

    profile = json_profile()
    admission, adapter, book = _joint_admission(profile)
    SkillBook.objects.filter(pk=book.pk).delete()  # gone between the decision and its application

    with pytest.raises(SkillBook.DoesNotExist):
        admission_apply(admission=admission)

    profile.refresh_from_db()
    adapter.refresh_from_db()
    assert profile.student_adapter == "" and adapter.status == Adapter.Status.CANDIDATE
    assert lora_server.loads  # it was loaded, and no call is routed to it
