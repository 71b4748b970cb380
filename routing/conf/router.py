"""The learned router's settings and the two backends synced from the environment at start-up."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import ClassVar

from core.conf import setting


@dataclass(frozen=True)
class Router:
    """The learned router (routing/router/versions/). A learned profile's ``policy_params`` may override
    target, target_relative, teacher_sample_rate, student_sample_rate, sample_daily_usd and its label
    budget, label_budget, drift_sample_boost and labels_wanted_student_rate (``core.conf.resolve``;
    ``routing.router.versions.config``)."""

    SECTION: ClassVar[str] = "SKILLGATE.ROUTER"
    features: str = setting(
        "FEATURES",
        env="SKILLGATE_ROUTER_FEATURES",
        default="auto",
        choices=("auto", "minilm", "hashing"),
        doc='The call text\'s features: "auto" (MiniLM when installed, else hashed n-grams), "minilm", '
        '"hashing".',
    )
    minilm_dir: Path = setting(
        "MINILM_DIR",
        env="SKILLGATE_MINILM_DIR",
        default_doc="BASE_DIR/var/models/minilm-onnx",
        doc="Where the MiniLM embedding assets are built and read.",
    )
    target: float = setting(
        "TARGET",
        env="SKILLGATE_ROUTER_TARGET",
        default=0.98,
        gt=0,
        le=1,
        doc="Pass rate calibration and admission aim for: relative to always-teacher, or absolute.",
    )
    target_relative: bool = setting(
        "TARGET_RELATIVE",
        env="SKILLGATE_ROUTER_TARGET_RELATIVE",
        default=True,
        doc="The target is a share of always-teacher's pass rate (else an absolute pass rate).",
    )
    target_z: float = setting(
        "TARGET_Z",
        env="SKILLGATE_ROUTER_TARGET_Z",
        default=1.0,
        ge=0,
        doc="Calibration asks the target of a one-sided lower confidence bound this many deviations down.",
    )
    max_training_calls: int = setting(
        "MAX_TRAINING_CALLS",
        env="SKILLGATE_ROUTER_MAX_TRAINING_CALLS",
        default=50000,
        ge=1,
        doc="Training reads the profile's newest ledger rows, at most this many.",
    )
    min_heldout_calls: int = setting(
        "MIN_HELDOUT_CALLS",
        env="SKILLGATE_ROUTER_MIN_HELDOUT_CALLS",
        default=20,
        ge=1,
        doc="Admission refuses to judge a version on fewer labelled held-out calls (unknown never counts).",
    )
    min_labelled_calls: int = setting(
        "MIN_LABELLED_CALLS",
        env="SKILLGATE_ROUTER_MIN_LABELLED_CALLS",
        default=30,
        ge=1,
        doc="A profile's measured quality (the fixed fallback's choice, admission) needs at least this many "
        "labelled calls (correct or wrong as a fact; unknown never counts); with fewer, the teacher serves.",
    )
    strong_verifier_precision: float = setting(
        "STRONG_VERIFIER_PRECISION",
        env="SKILLGATE_ROUTER_STRONG_VERIFIER_PRECISION",
        default=0.95,
        gt=0,
        le=1,
        doc="A verifier's pass is a label (correct) only when the lower confidence bound of its measured "
        "precision (passed answers a teacher comparison found correct) is at least this.",
    )
    min_precision_samples: int = setting(
        "MIN_PRECISION_SAMPLES",
        env="SKILLGATE_ROUTER_MIN_PRECISION_SAMPLES",
        default=30,
        ge=1,
        doc="A verifier's precision is judged from at least this many compared passes (else: unknown, weak).",
    )
    quality_window_calls: int = setting(
        "QUALITY_WINDOW_CALLS",
        env="SKILLGATE_ROUTER_QUALITY_WINDOW_CALLS",
        default=2000,
        ge=10,
        doc="Precision, the fixed fallback's measured quality and drift read the profile's newest calls, "
        "at most this many.",
    )
    training_stale_s: int = setting(
        "TRAINING_STALE_S",
        env="SKILLGATE_ROUTER_TRAINING_STALE_S",
        default=3600,
        ge=1,
        doc="A version still 'training' after this long is a crashed job.",
    )
    retrain_every_s: int = setting(
        "RETRAIN_EVERY_S",
        env="SKILLGATE_ROUTER_RETRAIN_EVERY_S",
        default=6 * 3600,
        ge=1,
        doc="Celery beat retrains profiles with new calls this often.",
    )
    drift_check_every_s: int = setting(
        "DRIFT_CHECK_EVERY_S",
        env="SKILLGATE_ROUTER_DRIFT_CHECK_EVERY_S",
        default=3600,
        ge=1,
        doc="Celery beat compares live numbers with calibration this often.",
    )
    drift_min_calls: int = setting(
        "DRIFT_MIN_CALLS",
        env="SKILLGATE_ROUTER_DRIFT_MIN_CALLS",
        default=50,
        ge=1,
        doc="Drift is judged on at least this many live calls.",
    )
    drift_share_margin: float = setting(
        "DRIFT_SHARE_MARGIN",
        env="SKILLGATE_ROUTER_DRIFT_SHARE_MARGIN",
        default=0.10,
        ge=0,
        le=1,
        doc="Drift: the live teacher share is this far from the predicted one.",
    )
    drift_pass_margin: float = setting(
        "DRIFT_PASS_MARGIN",
        env="SKILLGATE_ROUTER_DRIFT_PASS_MARGIN",
        default=0.05,
        ge=0,
        le=1,
        doc="Drift: the fall of the live pass rate below the predicted one that the correctness test's "
        "alternative names, at most; a version admitted with less slack (its lower confidence bound "
        "minus its target) is tested at its slack, at least DRIFT_PASS_FLOOR.",
    )
    drift_pass_floor: float = setting(
        "DRIFT_PASS_FLOOR",
        env="SKILLGATE_ROUTER_DRIFT_PASS_FLOOR",
        default=0.01,
        gt=0,
        le=1,
        doc="Drift: the smallest fall the correctness test's alternative names, however thin a version's "
        "slack (a smaller one takes more labels to decide at the same error rates).",
    )
    drift_sample_boost: float = setting(
        "DRIFT_SAMPLE_BOOST",
        env="SKILLGATE_ROUTER_DRIFT_SAMPLE_BOOST",
        default=4.0,
        ge=1,
        doc="Background sampling rates are multiplied by this (at most 1) while drift is suspected or a "
        "profile has too few labelled calls to measure its fallback.",
    )
    labels_wanted_student_rate: float = setting(
        "LABELS_WANTED_STUDENT_RATE",
        env="SKILLGATE_ROUTER_LABELS_WANTED_STUDENT_RATE",
        default=0.5,
        ge=0,
        le=1,
        doc="While labels are wanted (drift suspected; a version flagged, held or stopped, the fixed policy "
        "serving in its place; a version or fallback too few labels measure), teacher-served calls are "
        "re-run on the student at least at this rate: the student costs a fraction of the teacher, so "
        "re-measurement and admission get labels fast.",
    )
    label_budget: int = setting(
        "LABEL_BUDGET",
        env="SKILLGATE_ROUTER_LABEL_BUDGET",
        default=30,
        ge=0,
        doc="An active version whose student answers have fewer labels than this since it was activated "
        "is sampled as if drift were suspected (DRIFT_SAMPLE_BOOST), so that its correctness is never "
        "judged on a handful of labels; 0: off.",
    )
    teacher_sample_rate: float = setting(
        "TEACHER_SAMPLE_RATE",
        env="SKILLGATE_TEACHER_SAMPLE_RATE",
        default=0.05,
        ge=0,
        le=1,
        doc="Background sampling: the share of student-passed calls re-run on the teacher.",
    )
    student_sample_rate: float = setting(
        "STUDENT_SAMPLE_RATE",
        env="SKILLGATE_STUDENT_SAMPLE_RATE",
        default=0.05,
        ge=0,
        le=1,
        doc="Background sampling: the share of teacher-routed calls re-run on the student.",
    )
    sample_daily_usd: Decimal = setting(
        "SAMPLE_DAILY_USD",
        env="SKILLGATE_SAMPLE_DAILY_USD",
        default=Decimal("1.0"),
        ge=0,
        doc="Background sampling spends at most this per profile and UTC day.",
    )


_PRICE = "USD per token; empty for a provider's model: litellm's price map."


@dataclass(frozen=True)
class TeacherBackend:
    """The 'teacher' backend, upserted at start-up. With no provider configured it is the bundled demo
    model served locally by vLLM, asked for several answers (best-of-n), priced 10x the student."""

    SECTION: ClassVar[str] = "SKILLGATE.TEACHER"
    model: str = setting(
        "MODEL",
        env="SKILLGATE_TEACHER_MODEL",
        nonempty=True,
        default_doc="hosted_vllm/smollm2-135m-instruct",
        doc="A litellm model string (provider/model).",
    )
    api_base: str = setting(
        "API_BASE",
        env="SKILLGATE_TEACHER_API_BASE",
        default_doc="the local vLLM (empty when SKILLGATE_TEACHER_MODEL is set)",
        doc="The backend's base URL; empty: the provider's own.",
    )
    api_key_env: str = setting(
        "API_KEY_ENV",
        default="SKILLGATE_TEACHER_API_KEY",
        doc="The environment variable holding the provider key (Backend.api_key() reads it per call).",
    )
    input_cost: Decimal | None = setting(
        "INPUT_COST",
        env="SKILLGATE_TEACHER_INPUT_COST_PER_TOKEN",
        ge=0,
        default_doc="the demo price, none for a provider",
        doc=f"Input price: {_PRICE}",
    )
    output_cost: Decimal | None = setting(
        "OUTPUT_COST",
        env="SKILLGATE_TEACHER_OUTPUT_COST_PER_TOKEN",
        ge=0,
        default_doc="the demo price, none for a provider",
        doc=f"Output price: {_PRICE}",
    )
    samples: int = setting(
        "SAMPLES",
        env="SKILLGATE_TEACHER_SAMPLES",
        ge=1,
        default_doc="4 for the demo teacher, 1 for a provider",
        doc="Answers asked for per call, the first that passes the profile's verifier winning.",
    )


@dataclass(frozen=True)
class StudentBackend:
    """The 'student' backend, upserted at start-up (its admitted adapter is left alone)."""

    SECTION: ClassVar[str] = "SKILLGATE.STUDENT"
    model: str = setting(
        "MODEL",
        env="SKILLGATE_STUDENT_MODEL",
        default="hosted_vllm/smollm2-135m-instruct",
        nonempty=True,
        doc="A litellm model string (the vLLM served name).",
    )
    api_base: str = setting(
        "API_BASE",
        env="SKILLGATE_STUDENT_API_BASE",
        default_doc="http://127.0.0.1:$SKILLGATE_STUDENT_PORT/v1",
        doc="The student's vLLM.",
    )
    api_key_env: str = setting(
        "API_KEY_ENV",
        default="SKILLGATE_STUDENT_API_KEY",
        doc="The environment variable holding its key (Backend.api_key() reads it per call).",
    )
    input_cost: Decimal | None = setting(
        "INPUT_COST",
        env="SKILLGATE_STUDENT_INPUT_COST_PER_TOKEN",
        default="0.00000005",
        ge=0,
        doc=f"Input price: {_PRICE}",
    )
    output_cost: Decimal | None = setting(
        "OUTPUT_COST",
        env="SKILLGATE_STUDENT_OUTPUT_COST_PER_TOKEN",
        default="0.0000001",
        ge=0,
        doc=f"Output price: {_PRICE}",
    )
    replicas: tuple[str, ...] = setting(
        "REPLICAS",
        env="SKILLGATE_STUDENT_REPLICAS",
        default=(),
        doc='Several vLLM servers of one student, comma-separated base URLs; "dns+http://name:port/v1" '
        "is every address of the name (a headless Service). Empty: api_base alone.",
    )
