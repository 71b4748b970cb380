"""The call's structure as features: required fields, argument types, error signatures, the error lines."""

from __future__ import annotations

import numpy as np
import pytest

from routing.router.learning.calls import (
    ToolMatch,
    content_words,
    error_lines,
    error_signatures,
    schema_shape,
    tool_match,
    tool_text,
)
from routing.router.learning.features import (
    META_NAMES,
    META_NAMES_V1,
    CallInput,
    FeatureSpec,
    FeatureSpecError,
    hashing_spec,
    make_featurizer,
    meta_values,
)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "book",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "nights": {"type": "integer"},
                    "price": {"type": "number"},
                    "tier": {"type": "string", "enum": ["low", "high"]},
                    "guests": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {"name": {"type": "string"}, "vip": {"type": "boolean"}},
                            "required": ["name"],
                        },
                    },
                },
                "required": ["city", "nights", "price"],
            },
        },
    },
    {"type": "function", "function": {"name": "ping", "parameters": {"type": "dict", "properties": {}}}},
]


def call(text: str, *, tools=TOOLS, profile: str = "p") -> CallInput:
    return CallInput(messages=[{"role": "user", "content": text}], tools=tools, profile=profile)


def test_schema_shape_counts_required_fields_and_argument_types():
    shape = schema_shape(TOOLS, None)
    assert shape.required == 4  # three at the top, one inside the array's items
    assert shape.max_required == 4  # all in one tool
    assert shape.types == {
        "string": 2,
        "integer": 1,
        "number": 1,
        "boolean": 1,
        "array": 1,
        "object": 0,
        "enum": 1,
    }
    assert shape.depth == 3 and shape.fields == 7
    assert schema_shape([], None).required == 0


def test_error_signatures_count_families_and_lines():
    log = "INFO ok\nERROR OOMKilled exit code 137\nINFO ok\nWARN lock wait timeout exceeded\nINFO done"
    hits, families = error_signatures(log)
    assert families >= 3 and hits >= families  # error, memory, timeout, concurrency
    assert error_signatures("INFO all good\nDEBUG cache hit") == (0, 0)
    assert error_lines(log, 8) == ["error oomkilled exit code 137", "warn lock wait timeout exceeded"]
    assert error_lines(log, 1) == ["warn lock wait timeout exceeded"]  # the last ones


def test_meta_values_carry_the_structure():
    values = dict(zip(META_NAMES, meta_values(call("Book 2 nights in Oslo for 120.5 EUR")), strict=True))
    assert values["log_required_fields"] == pytest.approx(np.log1p(4))
    assert values["log_args_enum"] == pytest.approx(np.log1p(1))
    assert values["log_numbers_last_turn"] == pytest.approx(np.log1p(2))
    assert values["log_error_hits"] == 0.0
    broken = dict(
        zip(META_NAMES, meta_values(call("ERROR connection refused; exception raised")), strict=True)
    )
    assert broken["error_families"] >= 2 and broken["log_error_hits_last_turn"] > 0


def test_error_block_reads_the_error_lines_not_the_noise():
    featurizer = make_featurizer(hashing_spec(ngram_dims=64))
    sizes = featurizer.spec.block_sizes
    start = sum(list(sizes.values())[: list(sizes).index("errors")])
    block = slice(start, start + sizes["errors"])

    def errors_of(text: str) -> np.ndarray:
        return featurizer.transform(call(text, tools=[]))[block]

    quiet = errors_of("INFO request ok\nINFO health ok")
    oom = errors_of("INFO request ok\nERROR OOMKilled exit code 137\nINFO health ok")
    oom_more_noise = errors_of("INFO a\nINFO b\nERROR OOMKilled exit code 137\nINFO c\nDEBUG d\nINFO e")
    deadlock = errors_of("INFO request ok\nERROR deadlock found when trying to get lock\nINFO health ok")
    assert not quiet.any() and oom.any()
    assert np.allclose(oom, oom_more_noise)  # the noise around the error does not move it
    assert not np.allclose(oom, deadlock)


def test_a_batch_of_quiet_and_failing_calls_gives_each_call_its_own_row():
    """Only the calls with error lines go through the error block's vectorizer; the rows still line up."""
    featurizer = make_featurizer(hashing_spec(ngram_dims=64))
    texts = [
        "INFO request ok",
        "ERROR OOMKilled exit code 137",
        "INFO health ok",
        "ERROR deadlock found when trying to get lock",
    ]
    calls = [call(text, tools=[]) for text in texts]
    batch = featurizer.transform_many(calls)
    alone = np.stack([featurizer.transform(c) for c in calls])
    assert np.allclose(batch, alone)
    assert not np.allclose(batch[1], batch[3]) and not np.allclose(batch[0], batch[1])
    assert np.allclose(featurizer.transform_many(calls[::2]), alone[::2])  # no call with an error line


def test_a_version_1_model_keeps_its_features():
    v1 = FeatureSpec(embedder="hashing", ngram_dims=32, meta=META_NAMES_V1, error_dims=0, version=1)
    data = v1.to_json()
    del data["error_dims"]  # what a version-1 model stored
    again = FeatureSpec.from_json(data)
    assert again == v1 and again.block_sizes["errors"] == 0
    x = make_featurizer(again).transform(call("Book 2 nights"))
    assert x.shape == (v1.dims,) and len(meta_values(call("x"), v1.meta)) == len(META_NAMES_V1)
    with pytest.raises(FeatureSpecError, match="unknown meta"):
        meta_values(call("x"), ("no_such_feature",))


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weatherForecast",
        "description": "Forecast of the weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city's name"}, "days": {}},
        },
    },
}


def test_content_words_split_identifiers_and_drop_stop_words():
    assert content_words("get_weatherForecast for the City") == {"weathe", "foreca", "city"}
    assert content_words("") == frozenset()


def test_tool_match_tells_a_request_no_tool_serves_from_one_a_tool_serves():
    tools = [content_words(tool_text(t)) for t in (WEATHER, TOOLS[0])]
    served = tool_match("What will the weather be in Oslo over the next 3 days?", tools)
    unserved = tool_match("Who wrote the novel Moby Dick?", tools)
    assert served.best > 0.3 and served.hits == 2 and served.margin == served.best  # weather, days
    assert served.index == 0 and unserved.index == -1
    assert unserved == ToolMatch(best=0.0, margin=0.0, hits=0)
    assert tool_match("anything at all", []) == ToolMatch()
    ambiguous = tool_match("weather city", [tools[0], tools[0]])
    assert ambiguous.best == 1.0 and ambiguous.margin == 0.0  # two tools cover it equally


def test_the_tool_match_reaches_the_meta_block():
    def values(text: str) -> dict[str, float]:
        return dict(zip(META_NAMES, meta_values(call(text, tools=[WEATHER, *TOOLS])), strict=True))

    served, unserved = values("weather forecast for Oslo"), values("Who wrote Moby Dick?")
    assert served["tool_match_best"] > 0.5 and served["log_tool_match_hits"] > 0
    assert unserved["tool_match_best"] == unserved["log_tool_match_hits"] == 0.0
    # the matched tool's own schema, apart from the other tools offered beside it
    assert served["log_match_fields"] == pytest.approx(np.log1p(2)) and served["match_depth"] == 1.0
    assert served["log_match_required"] == 0.0 < served["log_required_fields"]  # book's 4
    booking = values("book nights at a price for guests")
    assert booking["log_match_required"] == pytest.approx(np.log1p(4)) and booking["match_depth"] == 3.0
    assert unserved["log_match_fields"] == unserved["match_depth"] == 0.0
    # the request is the last user message, not a tool output or an earlier turn
    later = CallInput(
        messages=[
            {"role": "user", "content": "weather forecast for Oslo"},
            {"role": "assistant", "content": "Done."},
            {"role": "user", "content": "Who wrote Moby Dick?"},
        ],
        tools=[WEATHER],
    )
    assert dict(zip(META_NAMES, meta_values(later), strict=True))["tool_match_best"] == 0.0
