"""Demo data: task profiles a newcomer can call at once, and a little real traffic for them."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from app.web.roles import APPROVER
from routing.models import ApiKey, TaskProfile
from routing.scopes import LLM
from routing.services import api_key_create, backends_sync_from_settings
from training.models import TrainingSettings

CITY_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
    "required": ["city", "country"],
}

PROFILES: dict[str, dict[str, Any]] = {
    "extract-json": {
        "description": "Answers that must be JSON matching a schema.",
        "policy": TaskProfile.Policy.STUDENT_WITH_FALLBACK,
        "verifier": {"kind": "json_schema", "schema": CITY_SCHEMA},
        "max_tokens": 64,
    },
    "python-code": {
        "description": "Python functions checked by running the task's tests in the sandbox.",
        "policy": TaskProfile.Policy.STUDENT_WITH_FALLBACK,
        "verifier": {"kind": "python_tests"},
        "allow_call_verifier": True,
        "max_tokens": 256,
    },
    # The diagnosis agents' LLM calls: the Observer sends its JSON protocol schema as the call's
    # verifier; the judge grades diagnoses against expected facts.
    "sre-observer": {
        "description": "The SRE Observer's decisions (JSON protocol, verified per call).",
        "policy": TaskProfile.Policy.STUDENT_WITH_FALLBACK,
        "verifier": {},
        "allow_call_verifier": True,
    },
    "sre-judge": {
        "description": "Grades a diagnosis against expected facts.",
        "policy": TaskProfile.Policy.ALWAYS_TEACHER,
        "verifier": {},
        "allow_call_verifier": True,
    },
    # The AOI Evolver's teacher calls: a failed diagnosis -> a corrective plan (JSON protocol).
    "sre-evolver": {
        "description": "Turns failed diagnoses into corrective plans (JSON protocol, verified per call).",
        "policy": TaskProfile.Policy.ALWAYS_TEACHER,
        "verifier": {},
        "allow_call_verifier": True,
    },
    "short-answer": {
        "description": "One-word answers checked by a regex given with each call.",
        "policy": TaskProfile.Policy.STUDENT_WITH_FALLBACK,
        "verifier": {"kind": "regex", "pattern": r"\w+"},
        "allow_call_verifier": True,
        "max_tokens": 16,
    },
}


# Per-profile training overrides (the admin's "training settings"): 40 SFT steps took SmolLM2-135M's
# held-out direct pass on extract-json from 0.00 to 0.95 in one cycle (bench/results/mera_cycle.md).
TRAINING: dict[str, dict[str, Any]] = {"extract-json": {"sft_steps": 40}}


@dataclass
class Created:
    username: str | None = None
    password: str | None = None
    api_key: str | None = None
    approver: str | None = None
    approver_password: str | None = None


# Whoever opens an incident requests its fixes and may not approve them: the demo approver
# (role "approver" on the dashboard) approves the demo admin's incidents.
DEMO_APPROVER = "demo-approver"


def bootstrap_demo() -> Created:
    """Idempotent: backends from the environment, demo profiles, a demo admin and a demo key.

    Secrets are returned only when created, so they are printed once.
    """
    created = Created()
    backends_sync_from_settings()
    for name, fields in PROFILES.items():
        profile, _ = TaskProfile.objects.get_or_create(name=name, defaults=fields)
        if fields.get("allow_call_verifier") and not profile.allow_call_verifier:  # made before the field
            TaskProfile.objects.filter(pk=profile.pk).update(allow_call_verifier=True)
        if name in TRAINING:
            overrides = {"hyperparameters": TRAINING[name]}
            TrainingSettings.objects.get_or_create(profile=profile, defaults=overrides)
    users = get_user_model().objects
    if not users.filter(username="demo").exists():
        created.username, created.password = "demo", secrets.token_urlsafe(12)
        users.create_superuser("demo", "demo@example.com", created.password)
    if not users.filter(username=DEMO_APPROVER).exists():
        created.approver, created.approver_password = DEMO_APPROVER, secrets.token_urlsafe(12)
        approver = users.create_user(DEMO_APPROVER, "approver@example.com", created.approver_password)
        approver.groups.add(Group.objects.get(name=APPROVER))
    if not ApiKey.objects.filter(name="demo").exists():
        _, created.api_key = api_key_create(
            name="demo", owner=users.get(username="demo"), scopes=[LLM]
        )  # calls models only: the demo user is a superuser
    return created


def eval_tasks(limit: int) -> list[dict[str, Any]]:
    path = Path(settings.EVAL_DIR) / "he_mbpp.jsonl"
    if not path.exists():
        return []
    tasks = []
    with path.open() as handle:
        for line in handle:
            task = json.loads(line)
            if task["split"] == "eval" and task["_src"] == "humaneval":
                tasks.append(task)
            if len(tasks) >= limit:
                break
    return tasks


def _pairs(text: str) -> tuple[tuple[str, str], ...]:
    return tuple((city, country) for city, country in (pair.split(":") for pair in text.split("|")))


# The extract-json task: "<city> is the capital of <country>." -> {"city": ..., "country": ...}. The
# format is in the user message: SmolLM2-135M then fails greedily but passes at best-of-4 (the demo
# teacher), which gives a learning cycle something to learn from. `make demo-cycle` and
# bench/mera_cycle.py send all of them; about one in five is held out for admission (by hash).
EXTRACT_JSON_FORMAT = 'Reply with JSON only: {"city": ..., "country": ...}.'
CAPITALS = _pairs(
    "Paris:France|Tokyo:Japan|Lima:Peru|Oslo:Norway|Cairo:Egypt|Quito:Ecuador|Rome:Italy|Seoul:Korea|"
    "Dakar:Senegal|Hanoi:Vietnam|Bern:Switzerland|Accra:Ghana|Madrid:Spain|Lisbon:Portugal|"
    "Berlin:Germany|Vienna:Austria|Prague:Czechia|Warsaw:Poland|Athens:Greece|Dublin:Ireland|"
    "Helsinki:Finland|Stockholm:Sweden|Copenhagen:Denmark|Budapest:Hungary|Bucharest:Romania|"
    "Sofia:Bulgaria|Zagreb:Croatia|Belgrade:Serbia|Kyiv:Ukraine|Riga:Latvia|Vilnius:Lithuania|"
    "Tallinn:Estonia|Ankara:Turkey|Tehran:Iran|Baghdad:Iraq|Amman:Jordan|Beirut:Lebanon|"
    "Riyadh:Saudi Arabia|Doha:Qatar|Muscat:Oman|Kabul:Afghanistan|Delhi:India|Dhaka:Bangladesh|"
    "Colombo:Sri Lanka|Bangkok:Thailand|Manila:Philippines|Jakarta:Indonesia|Beijing:China|"
    "Canberra:Australia|Wellington:New Zealand|Ottawa:Canada|Havana:Cuba|Bogota:Colombia|"
    "Caracas:Venezuela|Santiago:Chile|Asuncion:Paraguay|Montevideo:Uruguay|Brasilia:Brazil|"
    "Nairobi:Kenya|Kampala:Uganda|Lusaka:Zambia|Harare:Zimbabwe|Maputo:Mozambique|Rabat:Morocco|"
    "Tunis:Tunisia|Abuja:Nigeria|Brussels:Belgium|Amsterdam:Netherlands|Luxembourg:Luxembourg|"
    "Reykjavik:Iceland|Valletta:Malta|Nicosia:Cyprus|Tirana:Albania|Skopje:North Macedonia|"
    "Podgorica:Montenegro|Sarajevo:Bosnia|Ljubljana:Slovenia|Bratislava:Slovakia|Minsk:Belarus|"
    "Chisinau:Moldova|Tbilisi:Georgia|Yerevan:Armenia|Baku:Azerbaijan|Astana:Kazakhstan|"
    "Tashkent:Uzbekistan|Bishkek:Kyrgyzstan|Dushanbe:Tajikistan|Islamabad:Pakistan|"
    "Kathmandu:Nepal|Thimphu:Bhutan|Phnom Penh:Cambodia|Vientiane:Laos|Ulaanbaatar:Mongolia|"
    "Taipei:Taiwan|Singapore:Singapore|Dili:Timor-Leste|Suva:Fiji|Apia:Samoa|Mexico City:Mexico|"
    "Guatemala City:Guatemala|Managua:Nicaragua|Panama City:Panama|San Jose:Costa Rica|"
    "Kingston:Jamaica|Nassau:Bahamas|La Paz:Bolivia|Georgetown:Guyana|Paramaribo:Suriname|"
    "Buenos Aires:Argentina|Addis Ababa:Ethiopia|Khartoum:Sudan|Kigali:Rwanda|Dodoma:Tanzania|"
    "Luanda:Angola|Windhoek:Namibia|Gaborone:Botswana|Pretoria:South Africa|Algiers:Algeria|"
    "Tripoli:Libya|Bamako:Mali|Niamey:Niger|Ouagadougou:Burkina Faso|Conakry:Guinea|"
    "Monrovia:Liberia|Freetown:Sierra Leone|Lome:Togo|Yaounde:Cameroon|Libreville:Gabon"
)


def extract_json_call(city: str, country: str) -> dict[str, Any]:
    """The request body of one extract-json demo call."""
    return {
        "model": "auto",
        "temperature": 0,
        "metadata": {"task": "extract-json"},
        "messages": [
            {
                "role": "user",
                "content": f"{city} is the capital of {country}. {EXTRACT_JSON_FORMAT}",
            }
        ],
    }


def demo_calls(limit_code: int = 4) -> list[dict[str, Any]]:
    """Request bodies of the demo traffic: JSON extraction, short answers and code tasks."""
    calls: list[dict[str, Any]] = []
    calls.extend(extract_json_call(city, country) for city, country in CAPITALS[:4])
    for question, answer in [("What is the capital of France?", "Paris"), ("What is 2 + 3?", "5|five")]:
        calls.append(
            {
                "model": "auto",
                "temperature": 0,
                "metadata": {
                    "task": "short-answer",
                    "verifier": {"kind": "regex", "pattern": answer, "flags": ["IGNORECASE"]},
                },
                "messages": [{"role": "user", "content": f"{question} Answer in one word."}],
            }
        )
    for task in eval_tasks(limit_code):
        calls.append(
            {
                "model": "auto",
                "temperature": 0,
                "metadata": {
                    "task": "python-code",
                    "verifier": {
                        "kind": "python_tests",
                        "prompt": task["prompt"],
                        "test": task["test"],
                        "entry_point": task["entry_point"],
                    },
                },
                "messages": [
                    {"role": "user", "content": f"Complete this Python function:\n\n{task['prompt']}"}
                ],
            }
        )
    return calls
