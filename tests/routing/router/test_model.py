"""The model: safe JSON serialisation, identical scores after a round trip, spec mismatches refused."""

from __future__ import annotations

import json

import numpy as np
import pytest

from routing.router.learning.evaluate import EvalReport, featurize
from routing.router.learning.features import FeatureSpec, FeatureSpecError, hashing_spec, make_featurizer
from routing.router.learning.model import LearnedRouterModel, fit_router_model
from routing.router.learning.runtime import LoadedRouter


def test_round_trip_gives_identical_scores(mixed_report: EvalReport, mixed_test, featurizer):
    model = mixed_report.router.model
    text = json.dumps(model.to_json())  # what a RouterVersion row or a shared file holds
    again = LearnedRouterModel.from_json(json.loads(text))
    x = featurize(mixed_test[:200], featurizer)
    assert np.array_equal(model.score_many(x), again.score_many(x))
    assert again.feature_spec == model.feature_spec
    assert "pickle" not in text and model.info == again.info


def test_scores_are_calibrated_probabilities(mixed_report: EvalReport, mixed_test, featurizer):
    complete = [r for r in mixed_test if r.complete]
    scores = mixed_report.router.model.score_many(featurize(complete, featurizer))
    labels = np.asarray([bool(r.needs_teacher) for r in complete])
    assert ((scores > 0) & (scores < 1)).all()
    checked = []
    for low, high in [(0.0, 0.3), (0.3, 0.7), (0.7, 1.0)]:  # mean score tracks the label rate per bin
        sel = (scores >= low) & (scores < high)
        if sel.sum() > 50:  # a bin with few records says little either way
            assert abs(scores[sel].mean() - labels[sel].mean()) < 0.12, (low, high)
            checked.append((low, high))
    assert len(checked) >= 2, f"too few populated bins to check calibration: {checked}"


def test_features_of_another_kind_are_refused(mixed_report: EvalReport):
    model = mixed_report.router.model
    other = make_featurizer(hashing_spec(ngram_dims=128))
    with pytest.raises(FeatureSpecError, match="another kind"):
        model.check_spec(other.spec)
    with pytest.raises(FeatureSpecError):
        LoadedRouter(model, 0.5, other)
    with pytest.raises(FeatureSpecError, match="expected"):
        model.score(np.zeros(other.spec.dims))


def test_tampered_or_foreign_json_is_refused(mixed_report: EvalReport):
    data = mixed_report.router.model.to_json()
    with pytest.raises(ValueError, match="not a"):
        LearnedRouterModel.from_json({**data, "format": "pickle"})
    with pytest.raises(ValueError, match="do not match"):
        LearnedRouterModel.from_json({**data, "coef": data["coef"][:-1]})
    with pytest.raises(ValueError, match="finite"):
        LearnedRouterModel.from_json({**data, "intercept": float("nan")})
    with pytest.raises(FeatureSpecError):
        FeatureSpec.from_json({**data["feature_spec"], "wormhole": 1})


def test_minilm_spec_needs_the_same_embedder():
    spec = FeatureSpec(embedder="minilm", embedder_id="some-other-model", context_tokens=128)
    with pytest.raises(FeatureSpecError):
        make_featurizer(spec, build=False)


def test_one_class_training_gives_a_constant_score():
    spec = hashing_spec(ngram_dims=8)
    x = np.random.default_rng(0).random((20, spec.dims))
    model = fit_router_model(x, np.zeros(20), np.arange(20), spec=spec)
    scores = model.score_many(x)
    assert np.allclose(scores, scores[0]) and scores[0] < 0.01


def test_loaded_router_decides_with_its_threshold(mixed_report: EvalReport, mixed_test, featurizer):
    from routing.router.learning.features import CallInput

    fields = mixed_report.router.version_fields()
    router = LoadedRouter.from_fields(
        model=json.loads(json.dumps(fields["model"])), threshold=fields["threshold"]
    )
    call = CallInput.from_record(mixed_test[0])
    decision = router.decide(call)
    assert decision.route == ("teacher" if decision.score >= fields["threshold"] else "student")
    assert decision.score == mixed_report.router.model.score(featurizer.transform(call))
    assert set(fields) == {"model", "feature_spec", "threshold", "target", "calibration"}


@pytest.mark.parametrize("signal_in", ["meta", "ngrams"])
def test_grouped_cv_weighs_the_text_by_where_the_signal_is(signal_in):
    """Labels that one structural feature decides, among noisy n-grams: CV down-weighs the text; labels
    that n-grams decide: it keeps the text's full weight. Either way the refit model ranks new calls."""
    spec = hashing_spec(ngram_dims=256)
    sizes = spec.block_sizes
    rng = np.random.default_rng(3)
    n = 600
    x = np.zeros((n + 400, spec.dims))
    x[:, : sizes["meta"]] = rng.normal(size=(n + 400, sizes["meta"]))
    start = sizes["meta"] + sizes["profile"] + sizes["inter"]
    ngrams = rng.random((n + 400, sizes["ngrams"])) < 0.05  # sparse word counts
    ngrams[:, :8] |= rng.random((n + 400, 8)) < 0.25  # eight common words
    x[:, start : start + sizes["ngrams"]] = ngrams / np.maximum(ngrams.sum(axis=1, keepdims=True), 1) ** 0.5
    signal = x[:, 0] if signal_in == "meta" else ngrams[:, :4].sum(axis=1) - ngrams[:, 4:8].sum(axis=1)
    y = (signal + rng.normal(scale=0.5, size=n + 400) > np.median(signal)).astype(int)
    model = fit_router_model(x[:n], y[:n], np.arange(n), spec=spec, c_grid=(0.1,), folds=3)
    assert len(model.info["cv_auc"]) == 2  # C x text weight
    assert model.info["text_weight"] == (0.2 if signal_in == "meta" else 1.0)
    from sklearn.metrics import roc_auc_score

    assert roc_auc_score(y[n:], model.score_many(x[n:])) > 0.75


def test_one_call_score_decides_as_the_reference_formula(mixed_report: EvalReport, mixed_test, featurizer):
    """The gateway's one-row ``score`` (standardisation folded into the weights) gives the scores and
    the routes of the reference formula, sigmoid(a * (w . (x - mean) / scale + b) + c), on every call,
    at five thresholds."""
    from routing.router.learning.features import CallInput

    model = mixed_report.router.model
    x = featurize(mixed_test[:300], featurizer)
    reference = 1.0 / (
        1.0
        + np.exp(
            -(
                model.platt_a * (((x - model.mean) / model.scale) @ model.coef + model.intercept)
                + model.platt_b
            )
        )
    )
    fast = np.asarray([model.score(row) for row in x])
    assert np.allclose(fast, reference, rtol=0, atol=1e-12)
    assert np.allclose(fast, model.score_many(x), rtol=0, atol=1e-12)
    for threshold in (0.1, 0.3, 0.5, 0.7, 0.9):
        assert ((fast >= threshold) == (reference >= threshold)).all()
    router = LoadedRouter(model, 0.5, featurizer)
    for record, ref in zip(mixed_test[:50], reference[:50], strict=True):
        decision = router.decide(CallInput.from_record(record))
        assert decision.route == ("teacher" if ref >= 0.5 else "student")
        assert abs(decision.score - ref) < 1e-12
    with pytest.raises(FeatureSpecError, match="expected"):
        model.score(np.zeros(model.coef.shape[0] + 1))
