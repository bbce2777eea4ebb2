"""vLLM's V1 GPU/CPU model runner (``vllm/v1/worker/gpu_model_runner.py``)."""
