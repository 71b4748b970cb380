"""infra/k8s: the manifests validate against the Kubernetes schemas (offline, kubernetes-validate), and
they agree with the service: the environment they set is what app/settings reads, every queue the
settings route to has one worker Deployment, the GPU queue's worker and the student get GPUs, the student
reads adapters where the trainer writes them."""

from __future__ import annotations

import ast
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from tests.deploy.manifests import (
    K8S,
    OVERLAYS,
    ROOT,
    Manifest,
    config,
    containers,
    deployed,
    kubectl,
    kustomization,
    of_kind,
    one,
    pod_spec,
    rendered,
)

# The oldest Kubernetes the manifests support (the pod `sleep` pre-stop hook is beta, on by default, since
# 1.30) and the newest schemas kubernetes-validate carries.
VERSIONS = ["1.30.0", kubernetes_validate.latest_version()]
needs_kubectl = pytest.mark.skipif(
    kubectl() is None, reason="kubectl (for kubectl kustomize) is not installed"
)
SECRET_NAMES = ("SECRET_KEY", "DATABASE_URL", "CELERY_BROKER_URL", "CACHE_URL")
SECRET_SUFFIXES = ("_TOKEN", "_SECRET", "_API_KEY", "_PASSWORD")


def _invalid(docs: list[Manifest], version: str) -> list[str]:
    errors = []
    for doc in docs:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            errors.append(f"{doc['kind']}/{doc['metadata']['name']}: {exc.message}")
    return errors


@pytest.mark.parametrize("version", VERSIONS)
def test_base_and_rbac_validate_against_the_kubernetes_schemas(version: str) -> None:
    docs = deployed()
    assert len(docs) > 20
    assert _invalid(docs, version) == []


@needs_kubectl
@pytest.mark.parametrize("overlay", OVERLAYS)
@pytest.mark.parametrize("version", VERSIONS)
def test_each_overlay_renders_and_validates(overlay: str, version: str) -> None:
    docs = rendered(K8S / "overlays" / overlay)
    assert _invalid(docs, version) == []
    images = {c["image"] for w in of_kind(docs, "Deployment") + of_kind(docs, "Job") for c in containers(w)}
    assert all("/" in image and ":" in image for image in images), images  # every image pinned by the overlay


def test_the_validator_refuses_what_the_api_server_would() -> None:
    web = one(deployed(), "Deployment", "skillgate-web")
    typo = json.loads(json.dumps(web))
    typo["spec"]["template"]["spec"]["containers"][0]["envFrm"] = []
    wrong_type = json.loads(json.dumps(web))
    wrong_type["spec"]["replicas"] = "two"
    assert len(_invalid([typo, wrong_type], VERSIONS[-1])) == 2


@needs_kubectl
def test_the_plain_reader_matches_kubectl_kustomize() -> None:
    """The tests that read base and rbac without kubectl read what kustomize would build."""
    key = lambda d: (d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"])  # noqa: E731
    for folder in (K8S / "base", K8S / "rbac"):
        assert sorted(kustomization(folder), key=key) == sorted(rendered(folder), key=key)


# --- agreement with the service -------------------------------------------------------------------


def settings_read() -> set[str]:
    """Every environment variable the service reads: the first argument of each env_* call in app/settings,
    and the ``env=`` of each declared setting (core/conf.py ``setting``) in the apps' conf modules."""
    names = set()
    sources = [*(ROOT / "app" / "settings").glob("*.py"), *ROOT.glob("*/conf.py"), *ROOT.glob("*/conf/*.py")]
    for path in sources:
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
                continue
            if (
                (node.func.id.startswith("env_") or node.func.id == "_env_choice")
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                names.add(node.args[0].value)
            if node.func.id == "setting":
                for kw in node.keywords:
                    value = kw.value.value if isinstance(kw.value, ast.Constant) else None
                    if kw.arg == "env" and isinstance(value, str):
                        names.add(value)
    return names


def settings_with(env: dict[str, str], tmp_path: Path) -> dict[str, Any]:
    """The queues and paths app.settings resolves from ``env`` (in a fresh interpreter; nothing written)."""
    code = (
        "import json, app.settings as s\n"
        "q = lambda name: name or s.CELERY_TASK_DEFAULT_QUEUE\n"
        "print(json.dumps({'queues': {'default': s.CELERY_TASK_DEFAULT_QUEUE,"
        " 'training': s.SKILLGATE['TRAINING']['QUEUE'], 'cycle': q(s.SKILLGATE['CYCLE']['QUEUE']),"
        " 'evolver': q(s.SKILLGATE['EVOLVER']['QUEUE']), 'diagnostics': q(s.DIAGNOSTICS_QUEUE)},"
        " 'adapter_dir': str(s.SKILLGATE['TRAINING']['ADAPTER_DIR']),"
        " 'base_model': s.SKILLGATE['TRAINING']['BASE_MODEL'],"
        " 'student_base': s.SKILLGATE['STUDENT']['API_BASE'],"
        " 'student_model': s.SKILLGATE['STUDENT']['MODEL']}))"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SKILLGATE_", "CELERY_"))}
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**clean, **env, "DJANGO_SETTINGS_MODULE": "app.settings", "SKILLGATE_VAR_DIR": str(tmp_path)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.fixture(scope="module")
def docs() -> list[Manifest]:
    return deployed()


@pytest.fixture(scope="module")
def resolved(docs: list[Manifest], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return settings_with(config(docs), tmp_path_factory.mktemp("var"))


def _workers(docs: list[Manifest]) -> dict[str, tuple[Manifest, list[str]]]:
    """Each Celery worker Deployment's name -> (itself, its command)."""
    out = {}
    for workload in of_kind(docs, "Deployment"):
        for container in containers(workload):
            command = [str(part) for part in container.get("command", [])]
            if command[:4] == ["celery", "-A", "app", "worker"]:
                out[workload["metadata"]["name"]] = (workload, command)
    return out


def _option(command: list[str], *names: str) -> str | None:
    for i, part in enumerate(command):
        if part in names:
            return command[i + 1]
        for name in names:
            if part.startswith(f"{name}="):
                return part.split("=", 1)[1]
    return None


def test_the_config_sets_only_settings_the_service_reads(docs: list[Manifest]) -> None:
    unknown = sorted(set(config(docs)) - settings_read())
    assert unknown == []


def test_no_secret_is_in_the_config_map_and_every_pod_reads_the_secret(docs: list[Manifest]) -> None:
    names = set(config(docs))
    assert not names & set(SECRET_NAMES)
    assert not [n for n in names if n.endswith(SECRET_SUFFIXES)]
    for workload in of_kind(docs, "Deployment") + of_kind(docs, "Job"):
        for container in containers(workload):
            if container["image"].startswith("skillgate") and container["image"] != "skillgate-student":
                sources = container.get("envFrom", [])
                assert {"secretRef": {"name": "skillgate-secrets"}} in sources, workload["metadata"]["name"]
                assert {"configMapRef": {"name": "skillgate-config"}} in sources
            assert not [e for e in container.get("env", []) if e["name"] in SECRET_NAMES and "value" in e]
    assert not [s for s in of_kind(docs, "Secret") if s["metadata"]["name"] == "skillgate-secrets"], (
        "the service's Secret is created by the operator, never committed"
    )


def test_every_queue_the_settings_route_to_has_exactly_one_worker(
    docs: list[Manifest], resolved: dict[str, Any]
) -> None:
    consumed: dict[str, list[str]] = {}
    for name, (_, command) in _workers(docs).items():
        queues = _option(command, "--queues", "-Q")
        assert queues, f"{name} names no queue (it would take Celery's default only by accident)"
        for queue in queues.split(","):
            consumed.setdefault(queue, []).append(name)
    assert set(consumed) == set(resolved["queues"].values())
    assert all(len(names) == 1 for names in consumed.values()), consumed


def test_the_gpu_queue_worker_takes_one_task_per_child_on_one_gpu(
    docs: list[Manifest], resolved: dict[str, Any]
) -> None:
    training = resolved["queues"]["training"]
    ((workload, command),) = [
        w for w in _workers(docs).values() if _option(w[1], "--queues", "-Q") == training
    ]
    assert _option(command, "--max-tasks-per-child") == "1"
    assert _option(command, "--prefetch-multiplier") == "1"
    assert _option(command, "--concurrency", "-c") == "1"
    (container,) = containers(workload)
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert workload["spec"]["strategy"]["type"] == "Recreate"
    others = [w for w in _workers(docs).values() if w[0] is not workload]
    assert not [w for w, _ in others if "nvidia.com/gpu" in json.dumps(w)]


def test_beat_runs_once_and_no_worker_embeds_it(docs: list[Manifest]) -> None:
    beats = [
        w
        for w in of_kind(docs, "Deployment")
        for c in containers(w)
        if c.get("command", [])[:4] == ["celery", "-A", "app", "beat"]
    ]
    assert len(beats) == 1
    assert beats[0]["spec"]["replicas"] == 1
    assert beats[0]["spec"]["strategy"]["type"] == "Recreate"
    assert not [n for n, (_, cmd) in _workers(docs).items() if {"--beat", "-B"} & set(cmd)]
    assert not of_kind(docs, "HorizontalPodAutoscaler")[1:], "only the web Deployment autoscales"


def test_the_student_serves_the_trained_base_with_runtime_lora_from_the_trainers_volume(
    docs: list[Manifest], resolved: dict[str, Any]
) -> None:
    student = one(docs, "Deployment", "skillgate-student")
    (vllm,) = containers(student)
    args = [str(a) for a in vllm["args"]]
    env = {e["name"]: e.get("value") for e in vllm.get("env", [])}
    assert "--enable-lora" in args
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    assert vllm["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert args[0] == resolved["base_model"], "vLLM must serve the model the adapters are trained on"
    served = _option(args, "--served-model-name")
    assert resolved["student_model"].split("/", 1)[1] == served

    def claim_at(workload: Manifest, container: dict[str, Any], path: str) -> tuple[str, bool]:
        volumes = {v["name"]: v for v in pod_spec(workload)["volumes"]}
        (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == path]
        return volumes[mount["name"]]["persistentVolumeClaim"]["claimName"], bool(mount.get("readOnly"))

    adapters = resolved["adapter_dir"]
    ((trainer, _),) = [w for w in _workers(docs).values() if "nvidia.com/gpu" in json.dumps(w[0])]
    (trainer_container,) = containers(trainer)
    written = claim_at(trainer, trainer_container, adapters)
    read = claim_at(student, vllm, adapters)
    assert written == (read[0], False) and read[1] is True
    assert env["VLLM_LORA_RESOLVER_CACHE_DIR"] == adapters
    claim = one(docs, "PersistentVolumeClaim", written[0])
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    # the model folder the student serves is on a volume the trainer mounts too
    model_root = str(Path(resolved["base_model"]).parent)
    assert claim_at(student, vllm, model_root)[0] == claim_at(trainer, trainer_container, model_root)[0]


def test_the_gateway_reaches_the_student_through_its_service(
    docs: list[Manifest], resolved: dict[str, Any]
) -> None:
    from urllib.parse import urlsplit

    url = urlsplit(resolved["student_base"])
    service = one(docs, "Service", url.hostname or "")
    assert url.port in [p["port"] for p in service["spec"]["ports"]]
    labels = one(docs, "Deployment", "skillgate-student")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()


def test_the_web_service_ingress_autoscaler_and_disruption_budget_point_at_the_web_pods(
    docs: list[Manifest],
) -> None:
    web = one(docs, "Deployment", "skillgate-web")
    labels = web["spec"]["template"]["metadata"]["labels"]
    service = one(docs, "Service", "skillgate-web")
    assert service["spec"]["selector"].items() <= labels.items()
    ingress = one(docs, "Ingress", "skillgate-web")
    backends = {p["backend"]["service"]["name"] for r in ingress["spec"]["rules"] for p in r["http"]["paths"]}
    assert backends == {"skillgate-web"}
    hpa = one(docs, "HorizontalPodAutoscaler", "skillgate-web")
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "skillgate-web",
    }
    assert hpa["spec"]["minReplicas"] >= 2
    pdb = one(docs, "PodDisruptionBudget", "skillgate-web")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert pdb["spec"]["minAvailable"] < hpa["spec"]["minReplicas"], "a drain must be able to move a pod"
    (container,) = containers(web)
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert "--workers" not in container["command"], "one process per pod: scale with replicas"


def test_migrations_run_as_a_job(docs: list[Manifest]) -> None:
    job = one(docs, "Job", "skillgate-migrate")
    (container,) = containers(job)
    assert shlex.join(container["command"]) == "python manage.py migrate --noinput"
    assert pod_spec(job)["restartPolicy"] == "Never"
    assert not [
        w for w in of_kind(docs, "Deployment") for c in containers(w) if "migrate" in c.get("command", [])
    ]


def test_every_image_recipe_exists_for_the_images_the_manifests_run(docs: list[Manifest]) -> None:
    images = {c["image"] for w in of_kind(docs, "Deployment") + of_kind(docs, "Job") for c in containers(w)}
    recipes = {p.name.removesuffix(".Dockerfile") for p in (ROOT / "infra" / "images").glob("*.Dockerfile")}
    assert {image.removeprefix("skillgate-").replace("skillgate", "service") for image in images} == recipes
