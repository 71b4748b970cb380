"""A tiny Qwen2-style causal LM and LoRA adapters built locally, without the hub.

Used by tests (vLLM serving, training smoke tests) and for demos on machines without network:

    from bench.tiny_model import build_tiny_model, build_tiny_lora
    base = build_tiny_model(Path("var/models/tiny-qwen2"))
    lora = build_tiny_lora(base, Path("var/models/tiny-lora"), reply='{"ok": true}')

The model has ~1.8M parameters (hidden 192, 4 layers, tied embeddings) and a 1024-token byte-level BPE
tokenizer trained on a small built-in corpus of English, JSON and Python, wrapped in
``PreTrainedTokenizerFast`` with a ChatML chat template (``<|im_start|>`` / ``<|im_end|>``, eos
``<|im_end|>``, pad ``<|endoftext|>``). Both transformers and vLLM (CPU backend) load the saved folder.

vLLM constraints that shape the config: vLLM's Qwen2 derives ``head_dim = hidden_size // num_heads``
(it ignores ``config.head_dim``) and its CPU attention backend supports head sizes 32, 64, 80, ... only,
so hidden 192 uses 6 query heads of 32 (2 KV heads) rather than 4 heads of 48.

Everything is deterministic for a given seed (same tokenizer, same weights, same files).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

# Bump when the architecture, corpus or files change: test caches are keyed by it.
TINY_MODEL_VERSION = "tiny-qwen2-v1"

HIDDEN_SIZE = 192
NUM_LAYERS = 4
NUM_HEADS = 6  # head_dim 32: see the module docstring
NUM_KV_HEADS = 2
INTERMEDIATE_SIZE = 512
VOCAB_SIZE = 1024
MAX_POSITIONS = 2048

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = [PAD_TOKEN, IM_START, IM_END]

CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for part in message['content'] %}"
    "{%- if part['type'] == 'text' %}{{- part['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

_WORDS_TEXT = (
    "the a an of to in is it that for on with as was at by be this from or have not are but what "
    "all were when we there can one your which their said if will each about how up out them then "
    "she many some so these would other into has more her two like him see time could no make than "
    "first been its who now people my made over did down only way find use may water long little "
    "very after words called just where most know get through back much before go good new write "
    "our used me man too any day same right look think also around another came come work three "
    "must because does part even place well such here take why help put different away again off "
    "server request model route cost latency token answer question error cache user system "
    "assistant student teacher adapter gateway disk memory cpu process restart deploy log"
)
_WORDS = _WORDS_TEXT.split()

_PY_SNIPPETS = [
    "def add(a: int, b: int) -> int:\n    return a + b\n",
    "import json\n\ndata = json.loads(text)\nprint(data['name'])\n",
    "for i in range(10):\n    if i % 2 == 0:\n        print(i)\n",
    "class Route:\n    def __init__(self, name: str) -> None:\n        self.name = name\n",
    "result = [x * x for x in values if x > 0]\n",
    "try:\n    value = int(raw)\nexcept ValueError:\n    value = None\n",
    "with open(path) as f:\n    lines = f.read().splitlines()\n",
    "async def fetch(url: str) -> dict:\n    return await client.get(url)\n",
    "if __name__ == '__main__':\n    main()\n",
    "return {'status': 'ok', 'count': len(items)}\n",
]


def _corpus(seed: int) -> list[str]:
    """English sentences, JSON documents, Python code and ChatML turns; deterministic for a seed."""
    rng = random.Random(seed)
    lines: list[str] = []
    for _ in range(600):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(4, 14))]
        sentence = " ".join(words).capitalize() + rng.choice([".", "?", "!", "."])
        lines.append(sentence)
    for _ in range(300):
        doc: dict[str, Any] = {
            rng.choice(_WORDS): rng.choice(
                [rng.randint(0, 1000), rng.random() < 0.5, None, rng.choice(_WORDS), [1, 2, 3]]
            )
            for _ in range(rng.randint(1, 4))
        }
        lines.append(json.dumps(doc))
        lines.append(json.dumps(doc, indent=2))
    for _ in range(40):
        lines.extend(_PY_SNIPPETS)
    for _ in range(100):
        question = " ".join(rng.choice(_WORDS) for _ in range(6))
        answer = json.dumps({"answer": rng.choice(_WORDS)})
        lines.append(
            f"{IM_START}system\nYou are a helpful assistant.{IM_END}\n"
            f"{IM_START}user\n{question}?{IM_END}\n{IM_START}assistant\n{answer}{IM_END}\n"
        )
    lines.extend("0123456789 {}[]():,;.\"'=+-*/<>_#@!?%&|\\`~^$\n\t" for _ in range(20))
    return lines


def build_tiny_tokenizer(seed: int = 0) -> Any:
    """Train the byte-level BPE tokenizer and wrap it in ``PreTrainedTokenizerFast``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(seed), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        unk_token=None,
        bos_token=None,
        model_max_length=MAX_POSITIONS,
        chat_template=CHATML_TEMPLATE,
        padding_side="left",
    )


def build_tiny_model(out_dir: Path, *, seed: int = 0) -> Path:
    """Build and save the tiny model (weights, config, generation config, tokenizer) to ``out_dir``."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tiny_tokenizer(seed)
    eos_id = tokenizer.convert_tokens_to_ids(IM_END)
    pad_id = tokenizer.convert_tokens_to_ids(PAD_TOKEN)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=HIDDEN_SIZE,
        intermediate_size=INTERMEDIATE_SIZE,
        num_hidden_layers=NUM_LAYERS,
        num_attention_heads=NUM_HEADS,
        num_key_value_heads=NUM_KV_HEADS,
        max_position_embeddings=MAX_POSITIONS,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        dtype="float32",
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=eos_id, pad_token_id=pad_id, bos_token_id=None, do_sample=False
    )
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def build_tiny_lora(
    base_dir: Path,
    out_dir: Path,
    *,
    rank: int = 8,
    seed: int = 0,
    reply: str | None = None,
    steps: int = 60,
) -> Path:
    """Save a PEFT LoRA adapter (q_proj, v_proj) for the model in ``base_dir`` to ``out_dir``.

    Without ``reply`` the adapter is random (A and B both random, so it does change the output). With
    ``reply`` it is trained for ``steps`` Adam steps (~1 s on CPU) to answer any user message with
    that text, which lets tests check that a server really applies the adapter.
    """
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base_dir, out_dir = Path(base_dir), Path(out_dir)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    lora_config = LoraConfig(
        r=rank,
        lora_alpha=2 * rank,
        target_modules=["q_proj", "v_proj"],
        lora_dropout=0.0,
        bias="none",
        task_type="CAUSAL_LM",
        init_lora_weights=reply is not None,  # False: random A and B
    )
    peft_model = get_peft_model(model, lora_config)
    if reply is not None:
        _train_reply(peft_model, AutoTokenizer.from_pretrained(base_dir), reply, steps=steps, seed=seed)
    peft_model.save_pretrained(str(out_dir), safe_serialization=True)
    # vLLM reads base_model_name_or_path only for display; keep it an absolute local path.
    config_path = out_dir / "adapter_config.json"
    adapter_config = json.loads(config_path.read_text())
    adapter_config["base_model_name_or_path"] = str(base_dir.resolve())
    config_path.write_text(json.dumps(adapter_config, indent=2, sort_keys=True) + "\n")
    return out_dir


def _train_reply(model: Any, tokenizer: Any, reply: str, *, steps: int, seed: int) -> None:
    """Teach ``model`` (a PeftModel) to answer a handful of prompts with ``reply`` (completion-only loss)."""
    import torch

    rng = random.Random(seed)
    prompts = ["hi", "What is the capital of France?", "Say something.", "2+2?"]
    prompts += [" ".join(rng.choice(_WORDS) for _ in range(5)) for _ in range(4)]
    batch_ids: list[list[int]] = []
    batch_labels: list[list[int]] = []
    for prompt in prompts:
        prompt_ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True
        )
        if isinstance(prompt_ids, dict) or hasattr(prompt_ids, "input_ids"):
            prompt_ids = prompt_ids["input_ids"]
        reply_ids = tokenizer(reply + IM_END, add_special_tokens=False)["input_ids"]
        batch_ids.append(list(prompt_ids) + reply_ids)
        batch_labels.append([-100] * len(prompt_ids) + reply_ids)
    width = max(len(ids) for ids in batch_ids)
    pad_id = tokenizer.pad_token_id
    input_ids = torch.tensor([ids + [pad_id] * (width - len(ids)) for ids in batch_ids])
    labels = torch.tensor([lab + [-100] * (width - len(lab)) for lab in batch_labels])
    attention = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids in batch_ids])
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-2, weight_decay=0.0)
    model.train()
    for _ in range(steps):
        loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()


def generate(
    model_dir: Path, prompt: str, *, adapter_dir: Path | None = None, max_new_tokens: int = 16
) -> str:
    """Greedy chat completion with transformers (and PEFT when ``adapter_dir`` is given); for checks."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model: Any = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if adapter_dir is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter_dir)
    encoded: Any = tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )
    with torch.no_grad():
        out = model.generate(**encoded, max_new_tokens=max_new_tokens, do_sample=False)
    return str(tokenizer.decode(out[0][encoded["input_ids"].shape[1] :], skip_special_tokens=True))


if __name__ == "__main__":
    import argparse
    import time

    parser = argparse.ArgumentParser(description="Build the tiny Qwen2 test model (and a LoRA adapter).")
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lora-out", type=Path)
    parser.add_argument("--lora-reply")
    args = parser.parse_args()
    t0 = time.monotonic()
    path = build_tiny_model(args.out, seed=args.seed)
    print(f"model: {path} ({time.monotonic() - t0:.1f} s)")
    if args.lora_out:
        t1 = time.monotonic()
        lora = build_tiny_lora(path, args.lora_out, seed=args.seed, reply=args.lora_reply)
        print(f"lora: {lora} ({time.monotonic() - t1:.1f} s)")
