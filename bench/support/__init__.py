"""Helpers the benchmarks and the tests share (the tests import them from here, never the reverse):
a local server speaking the OpenAI protocol (``openai_stub``, on ``threaded_server``), a real vLLM
server on CPU (``vllm``), the tiny model's build cache (``tiny_model``) and a narrow learnable task
(``narrow_task``). For the benchmark scripts alone: ``django_env``, whose import sets Django up."""
