"""vLLM's Model Runner V2 (``vllm/v1/worker/gpu/``)."""
