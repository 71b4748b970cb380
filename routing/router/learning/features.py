"""Features of the WHOLE call: every message, the tool schemas, the profile, the turn, lengths.

Blocks, in order (``FeatureSpec.block_sizes``):
  meta      has_verifier, skillbook_matched, log turn/message/tool/char counts, schema depth, and
            the call's structure (version 2): required fields, argument types, error signatures
            in the context (families of error words, on the whole tail and the latest turn),
            numbers the new input states, prior tool calls, the tool outputs' share; (version 3)
            how the last user message's words meet the offered tools' words (best share, the best
            tool's lead over the next, shared words) and the best-matching tool's own schema
            (required fields, fields, depth)
  profile   one-hot of the profile name, hashed into ``profile_buckets``
  inter     profile x meta: the meta block again in the profile's slot, so that a length or a
            schema depth can matter for one profile and not another
  ngrams    hashed 1-2-grams of the head and the conversation's tail: words (scikit-learn) in
            the fallback; with MiniLM, its WordPiece ids (the call is tokenized once)
  errors    hashed 1-2-grams of the tail's last lines with an error signature (version 2): what
            went wrong, apart from the log lines around it
  context   MiniLM (transformer) embedding of the system prompt + tool schemas + response
            schema, first ``context_tokens`` tokens; cached, since agents repeat these verbatim
  static    MiniLM static (distilled token table) embedding of the conversation's last
            ``static_tokens`` tokens: the latest tool output / question, where the error lives
  turn      optional MiniLM transformer embedding of the latest turn's last ``turn_tokens``
            tokens, computed per call (off by default: ~10 ms per 32 tokens on 2 cores)
The fallback when MiniLM is not installed keeps only meta, profile, errors and (more) ngrams.
A saved model records its spec and refuses features of another kind (``check_spec``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import cachetools
import numpy as np

from routing.router.learning import embedding
from routing.router.learning.calls import (
    ARG_TYPES,
    CallInput,
    content_text,
    content_words,
    error_lines,
    error_signatures,
    log1p_count,
    number_count,
    schema_shape,
    tool_match,
    tool_text,
)
from routing.router.learning.tool_shapes import tool_shape, tools_shape

__all__ = [
    "CallInput",
    "FeatureSpec",
    "FeatureSpecError",
    "Featurizer",
    "content_text",
    "make_featurizer",
    "meta_values",
]

# The first version's meta block (models saved with it keep computing exactly these).
META_NAMES_V1 = (
    "has_verifier",
    "skillbook_matched",
    "log_turn_index",
    "log_messages",
    "log_tools",
    "log_chars_total",
    "log_chars_system",
    "log_chars_last_turn",
    "schema_depth",
    "log_schema_fields",
    "last_is_tool",
    "has_response_format",
    "turn_index",  # linear scales too: the effect of a length need not be logarithmic
    "kchars_total",
    "schema_fields",
)
# The call's structure, in terms no generator's wording carries: what the argument schemas require,
# of which types, how many values the new input states, which error signatures the context shows.
STRUCTURE_NAMES = (
    "log_required_fields",
    "log_max_required",
    *(f"log_args_{kind}" for kind in ARG_TYPES),
    "required_share",
    "log_error_hits",
    "error_families",
    "log_error_hits_last_turn",
    "log_numbers_last_turn",
    "log_chars_last_user",
    "log_prior_tool_calls",
    "tool_output_share",
)
# Version 3: whether the request asks for what the offered tools do. A request none of them matches
# ("irrelevance": the right answer calls nothing) and one that picks a tool out clearly are easy; a
# request half-matching several tools is where a small model picks the wrong one. The matched tool's
# own schema says what the answer has to fill, where the aggregate counts mix in the tools not used.
TOOL_MATCH_NAMES = (
    "tool_match_best",
    "tool_match_margin",
    "log_tool_match_hits",
    "log_match_required",
    "log_match_fields",
    "match_depth",
)
META_NAMES = META_NAMES_V1 + STRUCTURE_NAMES + TOOL_MATCH_NAMES


class FeatureSpecError(ValueError):
    """Features of another kind than a model was trained on, or an embedder that is not here."""


@dataclass(frozen=True)
class FeatureSpec:
    embedder: str = "hashing"  # "minilm" or "hashing"
    embedder_id: str = ""
    context_tokens: int = 0
    static_tokens: int = 0
    turn_tokens: int = 0
    ngram_dims: int = 2048
    ngrams: str = "words"  # "words" (scikit-learn, any install) or "wordpiece" (MiniLM's token ids)
    profile_buckets: int = 32
    interactions: bool = True  # profile x meta: a length or a schema depth matters per profile
    meta: tuple[str, ...] = META_NAMES
    error_dims: int = 256  # hashed words of the context's error lines (0: none, as in version 1)
    version: int = 3

    @property
    def block_sizes(self) -> dict[str, int]:
        minilm = self.embedder == "minilm"
        return {
            "meta": len(self.meta),
            "profile": self.profile_buckets,
            "inter": self.profile_buckets * len(self.meta) if self.interactions else 0,
            "ngrams": self.ngram_dims,
            "errors": self.error_dims,
            "context": embedding.DIMS if minilm and self.context_tokens else 0,
            "static": embedding.DIMS if minilm and self.static_tokens else 0,
            "turn": embedding.DIMS if minilm and self.turn_tokens else 0,
        }

    @property
    def dims(self) -> int:
        return sum(self.block_sizes.values())

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["meta"] = list(self.meta)
        data["dims"] = self.dims
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FeatureSpec:
        fields = {k: v for k, v in data.items() if k != "dims"}
        fields["meta"] = tuple(fields.get("meta", META_NAMES))
        fields.setdefault("error_dims", 0)  # version 1 had no error-line block
        try:
            return cls(**fields)
        except TypeError as exc:
            raise FeatureSpecError(f"not a feature spec: {exc}") from None


ERROR_LINES = 8

# Blocks standardised feature by feature; the others (unit-norm text vectors) keep their geometry
# and are only centred and scaled as a whole.
PER_FEATURE_BLOCKS = ("meta", "profile", "inter")


def hashing_spec(ngram_dims: int = 2048) -> FeatureSpec:
    return FeatureSpec(embedder="hashing", ngram_dims=ngram_dims)


def minilm_spec(
    *, context_tokens: int = 128, static_tokens: int = 384, turn_tokens: int = 0, ngram_dims: int = 1024
) -> FeatureSpec:
    """MiniLM features; the n-grams hash the same WordPiece ids the static embedding uses, so a
    call is tokenized once (the head's ids are cached with its embedding)."""
    return FeatureSpec(
        embedder="minilm",
        embedder_id=embedding.identity(),
        context_tokens=context_tokens,
        static_tokens=static_tokens,
        turn_tokens=turn_tokens,
        ngram_dims=ngram_dims,
        ngrams="wordpiece",
    )


def default_spec() -> FeatureSpec:
    """MiniLM when it is installed (its assets are built on first use), else hashed n-grams."""
    if embedding.minilm_available() and (embedding.assets_ready() or embedding.can_build()):
        return minilm_spec()
    return hashing_spec()


def meta_values(call: CallInput, names: Sequence[str] = META_NAMES) -> list[float]:
    """The meta block of ``call``: the features ``names`` lists, in that order (a saved model's spec
    names its own, so a model of an earlier version computes exactly what it was trained on)."""
    values = _meta(call)
    try:
        return [values[name] for name in names]
    except KeyError as exc:
        raise FeatureSpecError(f"unknown meta feature {exc.args[0]!r}") from None


def _meta(call: CallInput) -> dict[str, float]:
    lengths = [len(content_text(m.get("content"))) for m in call.messages]
    chars = sum(lengths)
    texts = call.tool_texts
    shape = tools_shape(texts, call.response_format)
    last_role = call.messages[-1].get("role") if call.messages else ""
    hits, families = error_signatures(call.conversation)
    last_hits, _ = error_signatures(call.last_turn)
    last_user_message = next((m for m in reversed(call.messages) if m.get("role") == "user"), None)
    last_user_text = content_text(last_user_message.get("content")) if last_user_message else ""
    last_user = len(last_user_text)
    match = tool_match(last_user_text, [_tool_words(text) for text in texts])
    matched = tool_shape(texts[match.index]) if match.index >= 0 else schema_shape([], None)
    tool_chars = sum(n for m, n in zip(call.messages, lengths, strict=True) if m.get("role") == "tool")
    prior_calls = sum(len(m.get("tool_calls") or []) for m in call.messages if m.get("role") == "assistant")
    values = {
        "has_verifier": float(call.has_verifier),
        "skillbook_matched": float(call.skillbook_matched),
        "log_turn_index": math.log1p(call.turn_index),
        "log_messages": math.log1p(len(call.messages)),
        "log_tools": math.log1p(len(call.tools)),
        "log_chars_total": math.log1p(chars),
        "log_chars_system": math.log1p(int(call._text("system_chars"))),
        "log_chars_last_turn": math.log1p(len(call.last_turn)),
        "schema_depth": float(shape.depth),
        "log_schema_fields": math.log1p(shape.fields),
        "last_is_tool": float(last_role == "tool"),
        "has_response_format": float(call.response_format is not None),
        "turn_index": float(min(call.turn_index, 30)),
        "kchars_total": min(chars / 10000, 20.0),
        "schema_fields": float(min(shape.fields, 100)),
        "log_required_fields": log1p_count(shape.required),
        "log_max_required": log1p_count(shape.max_required),
        "required_share": shape.required / shape.fields if shape.fields else 0.0,
        "log_error_hits": log1p_count(hits),
        "error_families": float(families),
        "log_error_hits_last_turn": log1p_count(last_hits),
        "log_numbers_last_turn": log1p_count(number_count(call.last_turn)),
        "log_chars_last_user": log1p_count(last_user),
        "log_prior_tool_calls": log1p_count(prior_calls),
        "tool_output_share": tool_chars / chars if chars else 0.0,
        "tool_match_best": match.best,
        "tool_match_margin": match.margin,
        "log_tool_match_hits": log1p_count(match.hits),
        "log_match_required": log1p_count(matched.required),
        "log_match_fields": log1p_count(matched.fields),
        "match_depth": float(matched.depth),
    }
    values.update({f"log_args_{kind}": log1p_count(n) for kind, n in shape.types.items()})
    return values


TOOL_WORDS_CACHE_BYTES = 16 * 1024 * 1024
"""Tools are the caller's: their words are kept by bytes (keyed by the tool's digest), not by count."""


def _words_bytes(words: frozenset[str]) -> int:
    return 64 + sum(64 + len(word) for word in words)


@cachetools.cached(
    cache=cachetools.LRUCache(maxsize=TOOL_WORDS_CACHE_BYTES, getsizeof=_words_bytes),
    key=lambda tool_json: hashlib.sha256(tool_json.encode("utf-8", "surrogatepass")).digest(),
    lock=threading.Lock(),
)
def _tool_words(tool_json: str) -> frozenset[str]:
    """A tool's content words, once per distinct tool: agents send the same tools on every turn."""
    return content_words(tool_text(json.loads(tool_json)))


@functools.lru_cache(maxsize=1024)
def profile_bucket(profile: str, buckets: int) -> int:
    """The profile's one-hot slot (a SHA-1 per profile name once per process, not per call)."""
    return int(hashlib.sha1(profile.encode()).hexdigest()[:8], 16) % buckets


class Featurizer:
    """Turns calls into vectors of ``spec.dims``. Reuse one per process: it holds the embedder."""

    def __init__(self, spec: FeatureSpec, embedder: embedding.MiniLMEmbedder | None = None) -> None:
        from sklearn.feature_extraction.text import HashingVectorizer

        if spec.embedder not in ("minilm", "hashing"):
            raise FeatureSpecError(f"unknown embedder {spec.embedder!r}")
        if spec.ngrams not in ("words", "wordpiece") or (
            spec.ngrams == "wordpiece" and spec.embedder != "minilm"
        ):
            raise FeatureSpecError(
                f"n-grams {spec.ngrams!r} need {'MiniLM' if spec.ngrams == 'wordpiece' else 'words'}"
            )
        if spec.embedder == "minilm":
            if embedder is None:
                raise FeatureSpecError("a MiniLM feature spec needs an embedder")
            if embedder.identity != spec.embedder_id:
                raise FeatureSpecError(
                    f"embedder {embedder.identity!r} is not the spec's {spec.embedder_id!r}"
                )
            if spec.static_tokens and embedder.table is None:
                raise FeatureSpecError("the spec uses the static table, which these assets lack")
        self.spec = spec
        self.embedder = embedder
        # The blocks' sizes and offsets, once: the spec is frozen, and a call is featurized per request.
        sizes = spec.block_sizes
        offsets = np.cumsum([0, *sizes.values()])
        start = {name: int(offset) for name, offset in zip(sizes, offsets[:-1], strict=True)}
        self._layout = (sizes, start, int(offsets[-1]))
        self._ngrams = HashingVectorizer(
            n_features=max(spec.ngram_dims, 1),
            ngram_range=(1, 2),
            alternate_sign=False,
            norm="l2",
            dtype=np.float32,
        )
        self._errors = HashingVectorizer(
            n_features=max(spec.error_dims, 1),
            ngram_range=(1, 2),
            alternate_sign=False,
            norm="l2",
            dtype=np.float32,
        )

    def _error_lines(self, call: CallInput) -> str:
        """The last ``ERROR_LINES`` lines of the conversation that carry an error signature: what
        went wrong, apart from the noise of the log lines around it."""
        return "\n".join(error_lines(call.conversation, ERROR_LINES))

    def _ngram_text(self, call: CallInput) -> str:
        return f"{call.head}\n{call.conversation}"

    def runs_model(self, call: CallInput) -> bool:
        """Whether featurizing ``call`` runs the embedding model (milliseconds, in onnxruntime, which
        releases the GIL: worth a worker thread) rather than only lookups and hashing (a fraction of a
        millisecond of Python: cheaper on the caller's thread than a thread hop)."""
        if self.embedder is None:
            return False
        if self.spec.turn_tokens:
            return True
        return not self.embedder.has_head(call.head, max_tokens=self.spec.context_tokens or 128)

    def transform(self, call: CallInput) -> np.ndarray:
        return self.transform_many([call])[0]

    def transform_many(self, calls: Sequence[CallInput]) -> np.ndarray:
        sizes, start, dims = self._layout
        out = np.zeros((len(calls), dims), dtype=np.float32)
        m, p, n_meta = start["meta"], start["profile"], sizes["meta"]
        for i, call in enumerate(calls):
            meta = meta_values(call, self.spec.meta)
            bucket = profile_bucket(call.profile, self.spec.profile_buckets)
            out[i, m : m + n_meta] = meta
            out[i, p + bucket] = 1.0
            if sizes["inter"]:
                out[i, start["inter"] + bucket * n_meta : start["inter"] + (bucket + 1) * n_meta] = meta
        if sizes["errors"]:
            # Only the calls with an error line: the vectorizer's fixed cost (~0.5 ms) is most of a call's
            # featurization, and a call with none hashes to the zero row the block already holds.
            texts = [self._error_lines(c) for c in calls]
            rows = [i for i, text in enumerate(texts) if text]
            if rows:
                grams = self._errors.transform([texts[i] for i in rows])
                out[rows, start["errors"] : start["errors"] + sizes["errors"]] = grams.toarray()
        if self.spec.ngrams == "words" and sizes["ngrams"]:
            grams = self._ngrams.transform([self._ngram_text(c) for c in calls])
            out[:, start["ngrams"] : start["ngrams"] + sizes["ngrams"]] = grams.toarray()
        if self.embedder is not None:
            self._minilm(calls, out, start, sizes)
        return out

    def _minilm(
        self, calls: Sequence[CallInput], out: np.ndarray, start: dict[str, int], sizes: dict[str, int]
    ) -> None:
        emb, spec = self.embedder, self.spec
        assert emb is not None
        g, c, s, t = start["ngrams"], start["context"], start["static"], start["turn"]
        for i, call in enumerate(calls):
            head_vector, head_ids = emb.head(call.head, max_tokens=spec.context_tokens or 128)
            if sizes["context"]:
                out[i, c : c + sizes["context"]] = head_vector
            tail_ids = np.asarray(
                emb.token_ids(call.conversation, spec.static_tokens or 384, from_end=True), dtype=np.int64
            )
            if sizes["static"]:
                out[i, s : s + sizes["static"]] = emb.static(tail_ids)
            if spec.ngrams == "wordpiece" and sizes["ngrams"]:
                out[i, g : g + sizes["ngrams"]] = hashed_ngrams([head_ids, tail_ids], sizes["ngrams"])
        if sizes["turn"]:
            texts = [call.last_turn for call in calls]
            out[:, t : t + sizes["turn"]] = emb.contextual(texts, max_tokens=spec.turn_tokens, from_end=True)


def hashed_ngrams(sequences: Sequence[np.ndarray], dims: int) -> np.ndarray:
    """L2-normalised counts of token-id unigrams and bigrams, hashed into ``dims`` buckets."""
    keys = []
    for ids in sequences:
        ids = ids.astype(np.uint64)
        keys.append(ids)
        if len(ids) > 1:
            keys.append(ids[:-1] * np.uint64(40009) + ids[1:] + np.uint64(1 << 32))
    if not keys:
        return np.zeros(dims, dtype=np.float32)
    mixed = np.concatenate(keys) * np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing (wraps mod 2^64)
    counts = np.bincount((mixed >> np.uint64(33)) % np.uint64(dims), minlength=dims).astype(np.float32)
    norm = float(np.linalg.norm(counts))
    return counts / norm if norm > 0 else counts


def make_featurizer(
    spec: FeatureSpec | None = None, *, folder: Path | None = None, build: bool = True
) -> Featurizer:
    """The featurizer of ``spec`` (default: ``default_spec()``). Raises FeatureSpecError when the
    spec needs MiniLM and it is not installed here: the caller falls back to a fixed policy."""
    spec = spec or default_spec()
    if spec.embedder == "hashing":
        return Featurizer(spec)
    if not embedding.minilm_available():
        raise FeatureSpecError(f"the spec needs MiniLM ({embedding.PACKAGE}, onnxruntime, tokenizers)")
    try:
        embedder = embedding.get_embedder(folder, build=build, static=bool(spec.static_tokens))
    except (FileNotFoundError, RuntimeError) as exc:
        raise FeatureSpecError(str(exc)) from None
    return Featurizer(spec, embedder)


def spec_digest(spec: FeatureSpec) -> str:
    return hashlib.sha1(json.dumps(spec.to_json(), sort_keys=True).encode()).hexdigest()[:12]
